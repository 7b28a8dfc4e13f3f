//! The kernel objects compiled by `build.rs` from `hip/*.hip`, and the names of every kernel the
//! host launches (the single list the launcher and the build tests share).

use crate::tensor::DType;

/// One embedded kernel object: a code object (`gfx*`) or NUL-less PTX text (`sm_*`).
#[derive(Clone, Copy, Debug)]
pub struct Blob {
    pub target: &'static str,
    /// The `hip/<source>.hip` it was compiled from.
    pub source: &'static str,
    pub bytes: &'static [u8],
    /// The same PTX assembled for its target by ptxas at build time (`sm_*` only, where
    /// ptxas was found): loads without the driver's JIT.
    pub cubin: Option<&'static [u8]>,
}

include!(concat!(env!("OUT_DIR"), "/hip_kernels.rs"));

/// Every embedded object.
pub fn blobs() -> &'static [Blob] {
    BLOBS
}

/// Why the table is empty (no clang at build time, or disabled), if it is.
pub fn build_error() -> Option<&'static str> {
    BUILD_ERROR
}

/// The compiler and compile time of the embedded objects.
pub fn build_note() -> &'static str {
    BUILD_NOTE
}

/// Distinct targets with embedded objects, sorted.
pub fn targets() -> Vec<String> {
    distinct_targets(|_| true)
}

/// Targets whose kernels are also embedded as machine code (cubins: no JIT at load), sorted.
pub fn cubin_targets() -> Vec<String> {
    distinct_targets(|b| b.cubin.is_some())
}

fn distinct_targets(keep: impl Fn(&Blob) -> bool) -> Vec<String> {
    let mut t: Vec<String> = BLOBS
        .iter()
        .filter(|b| keep(b))
        .map(|b| b.target.to_string())
        .collect();
    t.sort();
    t.dedup();
    t
}

/// The source files every target must provide.
pub const SOURCES: &[&str] = &[
    "attention",
    "conv",
    "dflash2",
    "elementwise",
    "gdn",
    "matmul",
    "norm",
    "qmatmul",
    "qmma",
    "rope",
    "select",
];

/// Weight formats with kernels: the kernel-name suffix and the dtype.
/// `f32s`/`f16s`/`bf16s` are the scalar variants for rows that are not whole 16-byte vectors.
pub const WEIGHT_TYPES: &[(&str, DType)] = &[
    ("f32", DType::F32),
    ("f32s", DType::F32),
    ("f16", DType::F16),
    ("f16s", DType::F16),
    ("bf16", DType::BF16),
    ("bf16s", DType::BF16),
    ("q4_0", DType::Q4_0),
    ("q4_1", DType::Q4_1),
    ("q5_0", DType::Q5_0),
    ("q5_1", DType::Q5_1),
    ("q8_0", DType::Q8_0),
    ("q4_k", DType::Q4K),
    ("q5_k", DType::Q5K),
    ("q6_k", DType::Q6K),
    ("iq4_nl", DType::Iq4Nl),
    ("iq4_xs", DType::Iq4Xs),
];

/// GEMV variants: input rows accumulated per pass over the weights.
pub const GEMV_TILES: &[u32] = &[1, 2, 4, 8];
/// Threads of a GEMV block (`GEMV_THREADS` in `hip/matmul.hip`).
pub const GEMV_THREADS: u32 = 128;

/// Weight rows one GEMV block computes for a tile of `nt` input rows (`gemv_rows` in
/// `hip/matmul.hip`).
pub fn gemv_rows(nt: u32) -> u32 {
    if nt == 1 { 4 } else { 2 }
}
/// Weight types with an int8-activation kernel (`DS_FOR_EACH_QTYPE` in `hip/qmatmul.hip`).
pub const QGEMV_TYPES: &[&str] = &["q8_0", "q4_k", "q5_k", "q6_k", "iq4_xs"];
/// Weight types whose 1-row `qgemv4_*` kernels run a folded conv step (`QConvFold` in
/// `hip/qmatmul.hip`; the regrouped Q8_0 kernels too).
pub const QCONV_TYPES: &[&str] = &["q8_0", "q6_k", "iq4_xs"];
/// The dp4a kernels' name for Q8_0 weights in the regrouped layout (`IQ8_0G` in
/// `hip/qmatmul.hip`: per 16 blocks the 16 scales, then the 16 × 32 values), which the backend
/// keeps next to the plain copy where `DELTASPEC_HIP_Q8_REGROUP=1` (rows of K % 512 == 0).
pub const Q8_REGROUPED: &str = "q8_0g";
/// Values per regrouped run of Q8_0 blocks (16 blocks of 32).
pub const Q8_REGROUP_K: usize = 512;

/// The regrouped copy of Q8_0 `bytes` (rows of `k` values, `k % Q8_REGROUP_K == 0`): each run
/// of 16 blocks `{f16 d; i8 qs[32]}` becomes the 16 `d`, then the 16 `qs`; the same size.
pub fn regroup_q8_0(bytes: &[u8], k: usize) -> Vec<u8> {
    const BLOCK: usize = 34;
    const RUN: usize = 16;
    assert!(k.is_multiple_of(Q8_REGROUP_K) && bytes.len().is_multiple_of(BLOCK * RUN));
    let mut out = vec![0u8; bytes.len()];
    for (src, dst) in bytes
        .chunks_exact(BLOCK * RUN)
        .zip(out.chunks_exact_mut(BLOCK * RUN))
    {
        for (i, blk) in src.chunks_exact(BLOCK).enumerate() {
            dst[2 * i..2 * i + 2].copy_from_slice(&blk[..2]);
            dst[2 * RUN + 32 * i..2 * RUN + 32 * i + 32].copy_from_slice(&blk[2..]);
        }
    }
    out
}
/// Bytes of a Q6_K block in the file: `{u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}`.
const Q6K_BLOCK: usize = 210;
/// Bytes of a Q6_K block on the device (`Q6K_QB` in `hip/quant.h`): the file's 210 and two zero
/// bytes, so every block is 4-byte aligned and the kernels read it with word loads.
pub const Q6K_DEV_BLOCK: usize = 212;

/// The device copy of Q6_K `bytes` (`pad_q6_k` blocks, see `Q6K_DEV_BLOCK`), or `None` when
/// `bytes` is not whole blocks.
pub fn pad_q6_k(bytes: &[u8]) -> Option<Vec<u8>> {
    if !bytes.len().is_multiple_of(Q6K_BLOCK) {
        return None;
    }
    let mut out = vec![0u8; bytes.len() / Q6K_BLOCK * Q6K_DEV_BLOCK];
    for (src, dst) in bytes
        .chunks_exact(Q6K_BLOCK)
        .zip(out.chunks_exact_mut(Q6K_DEV_BLOCK))
    {
        dst[..Q6K_BLOCK].copy_from_slice(src);
    }
    Some(out)
}

/// Device bytes of `n` values of `dtype` (`DType::bytes_for` with Q6_K blocks padded, see
/// `Q6K_DEV_BLOCK`): the row stride every kernel reading such a weight is given.
pub fn dev_bytes_for(dtype: DType, n: usize) -> Option<usize> {
    let file = dtype.bytes_for(n)?;
    Some(match dtype {
        DType::Q6K => file / Q6K_BLOCK * Q6K_DEV_BLOCK,
        _ => file,
    })
}

/// Bytes of an IQ4_XS block: `{f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}`.
const IQ4_XS_BLOCK: usize = 136;

/// IQ4_XS `bytes` with every quant word regrouped for the NVIDIA kernels (`IQ4_REGROUPED` in
/// `hip/quant.h`): the file stores word t of a sub-block as the nibbles (lo 0, hi 0, lo 1, hi 1,
/// ..., hi 3), byte k holding value 4t + k low and 16 + 4t + k high; the kernels want (lo 0, ...,
/// lo 3, hi 0, ..., hi 3), which saves two byte permutes per word in the table lookup. Same size,
/// same values; headers untouched. `None` when `bytes` is not whole blocks.
pub fn regroup_iq4_xs(bytes: &[u8]) -> Option<Vec<u8>> {
    if !bytes.len().is_multiple_of(IQ4_XS_BLOCK) {
        return None;
    }
    let mut out = bytes.to_vec();
    for blk in out.chunks_exact_mut(IQ4_XS_BLOCK) {
        for w in blk[8..].chunks_exact_mut(4) {
            let q = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            let mut r = 0u32;
            for k in 0..4 {
                r |= ((q >> (8 * k)) & 0xf) << (4 * k);
                r |= ((q >> (8 * k + 4)) & 0xf) << (4 * k + 16);
            }
            w.copy_from_slice(&r.to_le_bytes());
        }
    }
    Some(out)
}

/// Input rows the int8-activation GEMV accumulates per pass over the weights. A 16-row
/// verify step is one pass, so each weight item is fetched and decoded once for all rows.
pub const QGEMV_TILES: &[u32] = &[1, 2, 4, 8, 16];
/// Largest tile of the fused gate/up/SwiGLU kernel `qgemv_glu_*` (`DS_QGEMV_GLU`): two weight rows
/// per warp at 16 input rows spill on gfx11.
pub const QGEMV_GLU_MAX_TILE: u32 = 8;
/// Most segments (weights) of one `qgemv4_*` launch.
pub const QGEMV_SEGMENTS: usize = 4;
/// Threads of a `qgemv_*` / `quantize_q8` block (`QG_THREADS`); each warp is independent.
pub const QGEMV_THREADS: u32 = 128;
/// Weight rows one warp of `qgemv_*` owns for a tile of `nt` input rows (`qgemv_rows`).
/// Two up to 8 input rows, one at 16: four rows at 8 input rows, or two at 16, spill registers
/// on gfx11 (checked by tests/hip_build.rs).
pub fn qgemv_rows(nt: u32) -> u32 {
    if nt >= 16 { 1 } else { 2 }
}
/// Threads of the `selector_walk` block (`WALK_THREADS` in `hip/dflash2.hip`: a warp per
/// candidate, 16 warps).
pub const WALK_THREADS: u32 = 512;
/// Wide int8-activation variants `(tile, weight rows per warp)`, named `qgemv_<type>_<nt>x<r>`:
/// NVIDIA only (PTX targets; they would spill registers on gfx11).
pub const QGEMV_WIDE: &[(u32, u32)] = &[(8, 4), (16, 2), (16, 4)];
/// Wide variants of the fused launches `(tile, weight rows per warp)`: `qgemv4_<type>_<nt>x<r>`
/// and `qgemv_glu_<type>_<nt>x<r>` (r / 2 gate/up pairs per warp); NVIDIA only.
pub const QGEMV_FUSED_WIDE: &[(u32, u32)] = &[(8, 4)];
/// The wide variant measured fastest per tile on the H200 (27B IQ4_XS verify steps, 2026-12-03:
/// 8 rows 24.2 → 22.5 ms with 4 rows per warp, 16 rows 70.6 → 57.1 ms with 2).
pub fn qgemv_wide_default(nt: u32) -> Option<u32> {
    match nt {
        8 => Some(4),
        16 => Some(2),
        _ => None,
    }
}
/// Weight types with the staged matrix-core kernels (`qmma*_<nt>t`, `hip/qmma_staged.h`) at
/// the tiles in `QMMA_STAGED_TILES`: where a weight panel holds whole 16-row tiles.
pub const QMMA_STAGED_TYPES: &[&str] = if WL_GROUP.is_multiple_of(16) {
    &["iq4_xs"]
} else {
    &[]
};
pub const QMMA_STAGED_TILES: &[u32] = &[8, 16];
/// Threads of a staged block (`QMS_WARPS` warps) and the blocks per multiprocessor its grid
/// holds (`QMS_MINB`): the kernels are persistent, so the grid is at most that many per SM.
pub const QMMA_STAGED_THREADS: u32 = 8 * 32;
pub const QMMA_STAGED_BLOCKS_PER_SM: u32 = 2;
/// Input-row tiles of the matrix-core int8 GEMV `qmma_<type>_<nt>` / `qmma4_<type>_<nt>`
/// (`hip/qmma.hip`, NVIDIA only): groups of 8 input rows per block; wider inputs loop.
pub const QMMA_TILES: &[u32] = &[8, 16, 32];
/// Suffixes of the matrix-core kernel variants (`DS_QMMA_TYPE` in `hip/qmma.hip`): two chunks
/// per step, one (`u1`), fragment-ordered activations (`f`), with L2 prefetch (`p`), with hoisted
/// loads (`q`), and half the warps per block (`w`, at the 8- and 16-row tiles only).
pub const QMMA_VARIANTS: &[&str] = &["", "u1", "f", "p", "q", "w"];
/// Warps of a `qmmp*` block (`QMP_NW` in `hip/qmma.hip`), each over its own 16 weight rows (8
/// gate/up columns for `qmmp_glu_*`).
pub const QMMP_WARPS: u32 = 4;
/// Input rows one `qmmp*` block computes (`8 · QMP_TG` in `hip/qmma.hip`): the grid has a row
/// of blocks per such pass.
pub const QMMP_ROWS_IN: usize = 64;
/// Weight rows one `qmma_*` block computes (`QM_ROWS` in `hip/qmma.hip`): one mma tile of 16
/// rows, whose 32 residues of items its warps split (see the file's header).
pub const QMMA_ROWS: u32 = 16;
/// Threads of a `qmma_quantize*` / `qmma_relayout` block (`QM_Q_WARPS` warps in `hip/qmma.hip`),
/// one warp per 32-value block.
pub const QMMA_QUANT_THREADS: u32 = 4 * 32;
/// Output columns one `qmma_glu_*` block computes: its 16 mma rows are 8 gate rows and the 8
/// up rows of the same columns.
pub const QMMA_GLU_COLS: u32 = 8;
/// Threads of a `qmma_*` block at tile `nt` (`qmma_warps` in `hip/qmma.hip`): 8 warps at 8
/// input rows, 16 at 16 and 32 (the `w` variants at 8 and 16 rows halve it:
/// `HipBackend::qmma_threads`).
pub fn qmma_threads(nt: u32) -> u32 {
    32 * if nt <= 8 { 8 } else { 16 }
}
/// The matrix-core tile for `n` input rows: inputs of 5 rows and more (the dp4a kernel's
/// 8- and 16-row tiles and its passes over wider inputs), `None` below.
pub fn qmma_tile(n: usize) -> Option<u32> {
    match n {
        0..=4 => None,
        5..=8 => Some(8),
        9..=16 => Some(16),
        _ => Some(32),
    }
}
/// 1-row int8 GEMV variants `(weight rows per warp, items in flight per lane)`, named
/// `qgemv_<type>_1r<R>u<U>` and `qgemv4_<type>_1r<R>u<U>` (`DS_QGEMV1_TYPE`, NVIDIA only).
pub const Q1_VARIANTS: &[(u32, u32)] = &[
    (1, 1),
    (1, 2),
    (1, 4),
    (2, 1),
    (2, 2),
    (2, 4),
    (4, 1),
    (4, 2),
];
/// Widest dp4a tile whose `qgemv4_*` epilogue writes a group's first output as query/gate
/// halves (`QSPLIT_MAX_NT` in `hip/qmatmul.hip`; see [`super::fused`]).
pub const QSPLIT_MAX_TILE: u32 = 4;
/// Items in flight of the 1-row gate/up variants `qgemv_glu_<type>_1u<U>`.
pub const Q1_GLU_UNROLLS: &[u32] = &[1, 2, 4];
/// The pipelined 1-row variants (a stage of U rounds loaded while the previous one is used):
/// `qgemv_<type>_1r<R>p<U>`, `qgemv4_<type>_1r<R>p<U>` and `qgemv_glu_<type>_1p<U>`, for
/// [`Q1_PIPE_TYPES`] only (`DS_QGEMV1_PIPE_TYPE` in `hip/qmatmul.hip`).
pub const Q1_PIPE_VARIANTS: &[(u32, u32)] = &[(1, 1), (1, 2), (2, 1)];
pub const Q1_GLU_PIPES: &[u32] = &[1, 2];
pub const Q1_PIPE_TYPES: &[&str] = &["iq4_xs"];
/// Stages of the staged 1-row kernels `qgemv_<type>_1t<S>`, `qgemv4_<type>_1t<S>` and
/// `qgemv_glu_<type>_1t<S>` (`DS_QGEMV1_T` in `hip/qmatmul.hip`; [`Q1_PIPE_TYPES`] only): a
/// block streams its rows through S shared-memory stages filled by bulk copies,
/// [`Q1_STAGED_ROWS`] output rows (columns of a gate/up pair) per block.
pub const Q1_STAGES: &[u32] = &[3, 5];
/// Output rows per block of the staged kernels (`QT_COLS`).
pub const Q1_STAGED_ROWS: u64 = 8;

/// How a 1-row variant keeps its loads in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Q1Form {
    /// `u`: U items in flight per lane, then used with none outstanding.
    Plain,
    /// `p`: stages of U rounds, the next loaded while the current one is used.
    Pipe,
    /// `t`: the block's rows streamed through U shared-memory stages.
    Staged,
}

/// A 1-row int8 GEMV variant: `r` weight rows per warp (2 for a gate/up pair), `u` items in
/// flight per lane (stages for the staged form), and its form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Q1 {
    pub r: u32,
    pub u: u32,
    pub form: Q1Form,
}

impl Q1 {
    pub const fn plain(r: u32, u: u32) -> Self {
        Q1 {
            r,
            u,
            form: Q1Form::Plain,
        }
    }
    pub const fn pipelined(r: u32, u: u32) -> Self {
        Q1 {
            r,
            u,
            form: Q1Form::Pipe,
        }
    }
    fn letter(&self) -> char {
        match self.form {
            Q1Form::Plain => 'u',
            Q1Form::Pipe => 'p',
            Q1Form::Staged => 't',
        }
    }
    /// The kernel name's suffix of a plain or grouped projection: `1r<R>u<U>`, `1r<R>p<U>` or
    /// `1t<S>`.
    pub fn tag(&self) -> String {
        match self.form {
            Q1Form::Staged => self.glu_tag(),
            _ => format!("1r{}{}{}", self.r, self.letter(), self.u),
        }
    }
    /// The gate/up pair's suffix: `1u<U>`, `1p<U>` or `1t<S>`.
    pub fn glu_tag(&self) -> String {
        format!("1{}{}", self.letter(), self.u)
    }
    /// Output rows (columns of a gate/up pair) a block of `warps` warps owns.
    pub fn block_rows(&self, warps: u64, glu: bool) -> u64 {
        match self.form {
            Q1Form::Staged => Q1_STAGED_ROWS,
            _ if glu => warps, // one gate/up row pair per warp
            _ => u64::from(self.r) * warps,
        }
    }
    /// Whether the kernels exist for weight type `suffix` (pipelined and staged ones for a few
    /// types; each form has its pair, single and grouped kernels).
    pub fn exists_for(&self, suffix: &str) -> bool {
        match self.form {
            Q1Form::Plain => true,
            Q1Form::Pipe | Q1Form::Staged => Q1_PIPE_TYPES.contains(&suffix),
        }
    }
}

/// Parses a 1-row variant `r<R>u<U>` / `r<R>p<U>` (`DELTASPEC_HIP_Q1`) or `u<U>` / `p<U>` /
/// `t<S>` (`DELTASPEC_HIP_Q1_GLU`, `r` then taken as 2) if the kernels exist.
pub fn parse_q1(v: &str) -> Option<Q1> {
    let split = |t: &str| -> Option<(Q1Form, u32)> {
        let form = match t.chars().next()? {
            'u' => Q1Form::Plain,
            'p' => Q1Form::Pipe,
            't' => Q1Form::Staged,
            _ => return None,
        };
        Some((form, t[1..].parse().ok()?))
    };
    let (r, (form, u)) = match v.strip_prefix('r') {
        Some(rest) => {
            let at = rest.find(['u', 'p'])?;
            (rest[..at].parse().ok()?, split(&rest[at..])?)
        }
        None => (2, split(v)?),
    };
    let known = match form {
        Q1Form::Plain => Q1_VARIANTS.contains(&(r, u)) || (r == 2 && Q1_GLU_UNROLLS.contains(&u)),
        Q1Form::Pipe => Q1_PIPE_VARIANTS.contains(&(r, u)) || (r == 2 && Q1_GLU_PIPES.contains(&u)),
        Q1Form::Staged => r == 2 && Q1_STAGES.contains(&u),
    };
    known.then_some(Q1 { r, u, form })
}
/// True for kernels only the PTX targets define.
pub fn ptx_only(name: &str) -> bool {
    let q1 = |name: &str| {
        Q1_VARIANTS
            .iter()
            .any(|(r, u)| name.ends_with(&format!("_1r{r}u{u}")))
            || Q1_GLU_UNROLLS
                .iter()
                .any(|u| name.ends_with(&format!("_1u{u}")))
            || Q1_PIPE_VARIANTS
                .iter()
                .any(|(r, u)| name.ends_with(&format!("_1r{r}p{u}")))
            || Q1_GLU_PIPES
                .iter()
                .any(|u| name.ends_with(&format!("_1p{u}")))
            || Q1_STAGES.iter().any(|s| name.ends_with(&format!("_1t{s}")))
    };
    name.starts_with("qmma")
        || name.starts_with("qmmp")
        || name.starts_with("qgemv") && q1(name)
        || name.starts_with("qgemv")
            && QGEMV_WIDE
                .iter()
                .chain(QGEMV_FUSED_WIDE)
                .any(|(nt, r)| name.ends_with(&format!("_{nt}x{r}")))
}
/// The int8-activation tile for `n` input rows: the smallest tile holding them, at most 16.
pub fn qgemv_tile(n: usize) -> u32 {
    QGEMV_TILES
        .iter()
        .copied()
        .find(|&t| t as usize >= n)
        .unwrap_or(16)
}

/// Elements of a row one pass-0 block of `argmax_f32` or `top_k_f32` reduces (`ARGMAX_CHUNK` in
/// `hip/select.hip`).
pub const ARGMAX_CHUNK: usize = 256 * 8;
/// Most parts (`ARGMAX_CHUNK` elements each) of a row for which `top_k_f32` filters by the
/// row's threshold (`TOPK_MAX_PARTS` in `hip/select.hip`).
pub const TOPK_MAX_PARTS: usize = 1024;
/// Attention variants: head-dim elements per lane (hd <= 32 · HDL).
pub const ATTN_HDL: &[u32] = &[1, 2, 4, 8];

/// Work-item geometry of a weight kernel: (elements per block, bytes per block, elements per
/// work item), mirroring `hip/quant.h`.
pub fn geometry(suffix: &str) -> (usize, usize, usize) {
    match suffix {
        "f32" => (4, 16, 4),
        "f32s" => (1, 4, 1),
        "f16" | "bf16" => (8, 16, 8),
        "f16s" | "bf16s" => (1, 2, 1),
        "q4_0" | "iq4_nl" => (32, 18, 16),
        "q4_1" => (32, 20, 16),
        "q5_0" => (32, 22, 16),
        "q5_1" => (32, 24, 16),
        "q8_0" => (32, 34, 16),
        "q4_k" => (256, 144, 32),
        "q5_k" => (256, 176, 32),
        "q6_k" => (256, Q6K_DEV_BLOCK, 32),
        "iq4_xs" => (256, 136, 32),
        _ => (0, 0, 0),
    }
}

/// The kernel suffix for a weight of `dtype` whose rows hold `k` values, or `None` for a type
/// without kernels.
pub fn weight_kernel(dtype: DType, k: usize) -> Option<&'static str> {
    let vector = |width: usize| k.is_multiple_of(width);
    Some(match dtype {
        DType::F32 => {
            if vector(4) {
                "f32"
            } else {
                "f32s"
            }
        }
        DType::F16 => {
            if vector(8) {
                "f16"
            } else {
                "f16s"
            }
        }
        DType::BF16 => {
            if vector(8) {
                "bf16"
            } else {
                "bf16s"
            }
        }
        other => WEIGHT_TYPES
            .iter()
            .find(|(_, d)| *d == other)
            .map(|(s, _)| *s)?,
    })
}

/// Every kernel, as `(source, name)`.
pub fn kernel_names() -> Vec<(&'static str, String)> {
    let mut v: Vec<(&'static str, String)> = Vec::new();
    for (ty, _) in WEIGHT_TYPES {
        for nt in GEMV_TILES {
            v.push(("matmul", format!("gemv_{ty}_{nt}")));
        }
        v.push(("matmul", format!("mm_{ty}")));
        v.push(("matmul", format!("embed_{ty}")));
        v.push(("matmul", format!("dequant_{ty}")));
    }
    v.push(("qmatmul", "quantize_q8".into()));
    v.push(("qmatmul", "quantize_q8_gate".into()));
    for n in ["qmma_quantize", "qmma_quantize_gate", "qmma_relayout"] {
        v.push(("qmma", n.into()));
    }
    for ty in QGEMV_TYPES.iter().chain([&Q8_REGROUPED]) {
        for nt in QGEMV_TILES {
            v.push(("qmatmul", format!("qgemv_{ty}_{nt}")));
            v.push(("qmatmul", format!("qgemv4_{ty}_{nt}")));
            if *nt <= QGEMV_GLU_MAX_TILE {
                v.push(("qmatmul", format!("qgemv_glu_{ty}_{nt}")));
            }
        }
        for (nt, r) in QGEMV_WIDE {
            v.push(("qmatmul", format!("qgemv_{ty}_{nt}x{r}")));
        }
        for (nt, r) in QGEMV_FUSED_WIDE {
            v.push(("qmatmul", format!("qgemv4_{ty}_{nt}x{r}")));
            v.push(("qmatmul", format!("qgemv_glu_{ty}_{nt}x{r}")));
        }
        for (r, u) in Q1_VARIANTS {
            v.push(("qmatmul", format!("qgemv_{ty}_1r{r}u{u}")));
            v.push(("qmatmul", format!("qgemv4_{ty}_1r{r}u{u}")));
        }
        for u in Q1_GLU_UNROLLS {
            v.push(("qmatmul", format!("qgemv_glu_{ty}_1u{u}")));
        }
        if Q1_PIPE_TYPES.contains(ty) {
            for (r, u) in Q1_PIPE_VARIANTS {
                v.push(("qmatmul", format!("qgemv_{ty}_1r{r}p{u}")));
                v.push(("qmatmul", format!("qgemv4_{ty}_1r{r}p{u}")));
            }
            for u in Q1_GLU_PIPES {
                v.push(("qmatmul", format!("qgemv_glu_{ty}_1p{u}")));
            }
            for st in Q1_STAGES {
                v.push(("qmatmul", format!("qgemv_{ty}_1t{st}")));
                v.push(("qmatmul", format!("qgemv4_{ty}_1t{st}")));
                v.push(("qmatmul", format!("qgemv_glu_{ty}_1t{st}")));
            }
        }
        // The regrouped Q8_0 layout has dp4a kernels only.
        for nt in QMMA_TILES.iter().filter(|_| *ty != Q8_REGROUPED) {
            for sfx in QMMA_VARIANTS.iter().filter(|s| **s != "w" || *nt <= 16) {
                for kind in ["qmma", "qmma4", "qmma_glu"] {
                    v.push(("qmma", format!("{kind}_{ty}_{nt}{sfx}")));
                }
            }
        }
        if QMMA_STAGED_TYPES.contains(ty) {
            for nt in QMMA_STAGED_TILES {
                for kind in ["qmma", "qmma4", "qmma_glu"] {
                    v.push(("qmma", format!("{kind}_{ty}_{nt}t")));
                }
            }
        }
        if *ty != Q8_REGROUPED {
            for kind in ["qmmp", "qmmp4", "qmmp_glu"] {
                v.push(("qmma", format!("{kind}_{ty}")));
            }
        }
    }
    for n in [
        "rms_norm",
        "add_rms_norm",
        "gated_rms_norm",
        "rms_norm_q8",
        "add_rms_norm_q8",
        "add_rms_norm_q8s",
        "add_rms_norm_q8sf",
        "gated_rms_norm_q8",
        "rms_norm_q8f",
        "add_rms_norm_q8f",
        "gated_rms_norm_q8f",
        "l2_norm",
        "qk_prep",
    ] {
        v.push(("norm", n.into()));
    }
    for n in ["add_f32", "sigmoid_mul", "swiglu", "slice_last", "fill_f32"] {
        v.push(("elementwise", n.into()));
    }
    v.push(("rope", "rope".into()));
    v.push(("conv", "conv_step".into()));
    v.push(("conv", "conv_tree".into()));
    for n in ["gdn_dk64", "gdn_dk128", "gdn_any"] {
        v.push(("gdn", n.into()));
        v.push(("gdn", format!("{n}_tree")));
    }
    for n in ["gdn_dk64_log", "gdn_dk128_log", "gdn_any_log"] {
        v.push(("gdn", n.into()));
    }
    v.push(("attention", "kv_write".into()));
    for h in ATTN_HDL {
        v.push(("attention", format!("attn_hd{h}")));
        v.push(("attention", format!("attn_nc_hd{h}")));
    }
    v.push(("attention", "attn_combine".into()));
    v.push(("attention", "attn_combine_q8g".into()));
    for n in ["argmax_f32", "top_k_f32", "logsumexp_f32"] {
        v.push(("select", n.into()));
    }
    for n in ["dyn_conv", "dyn_conv_q8", "dyn_conv_q8f", "selector_walk"] {
        v.push(("dflash2", n.into()));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_variant_names_parse_to_existing_kernels() {
        let q = |r, u, form| Some(Q1 { r, u, form });
        assert_eq!(parse_q1("r1u2"), q(1, 2, Q1Form::Plain));
        assert_eq!(parse_q1("r2p1"), q(2, 1, Q1Form::Pipe));
        assert_eq!(parse_q1("u4"), q(2, 4, Q1Form::Plain));
        assert_eq!(parse_q1("p2"), q(2, 2, Q1Form::Pipe));
        assert_eq!(parse_q1("t5"), q(2, 5, Q1Form::Staged));
        for bad in [
            "r4p2", "p4", "r1x2", "off", "", "r1", "rp1", "r2t5", "t4", "t",
        ] {
            assert_eq!(parse_q1(bad), None, "{bad}");
        }
        let v = parse_q1("r1p2").unwrap();
        assert_eq!(
            (v.tag(), v.glu_tag()),
            ("1r1p2".to_string(), "1p2".to_string())
        );
        assert!(v.exists_for("iq4_xs") && !v.exists_for("q6_k"));
        assert!(Q1::plain(1, 2).exists_for("q6_k"));
        // The staged form: IQ4_XS only, every use, its own rows per block.
        let t = parse_q1("t3").unwrap();
        assert!(t.exists_for("iq4_xs") && !t.exists_for("q8_0"));
        assert_eq!(
            (t.tag(), t.glu_tag()),
            ("1t3".to_string(), "1t3".to_string())
        );
        assert_eq!(
            (t.block_rows(4, true), t.block_rows(4, false)),
            (Q1_STAGED_ROWS, Q1_STAGED_ROWS)
        );
        assert_eq!((v.block_rows(4, true), v.block_rows(4, false)), (4, 4));
        // Every name a variant produces is a kernel of the table, and only on PTX targets.
        let names = kernel_names();
        for ty in Q1_PIPE_TYPES {
            for (r, u) in Q1_PIPE_VARIANTS {
                let n = format!("qgemv4_{ty}_{}", Q1::pipelined(*r, *u).tag());
                assert!(names.iter().any(|(_, k)| *k == n) && ptx_only(&n), "{n}");
            }
            for u in Q1_GLU_PIPES {
                let n = format!("qgemv_glu_{ty}_{}", Q1::pipelined(2, *u).glu_tag());
                assert!(names.iter().any(|(_, k)| *k == n) && ptx_only(&n), "{n}");
            }
            for st in Q1_STAGES {
                let t = parse_q1(&format!("t{st}")).unwrap();
                for n in [
                    format!("qgemv_{ty}_{}", t.tag()),
                    format!("qgemv4_{ty}_{}", t.tag()),
                    format!("qgemv_glu_{ty}_{}", t.glu_tag()),
                ] {
                    assert!(names.iter().any(|(_, k)| *k == n) && ptx_only(&n), "{n}");
                }
            }
        }
    }

    #[test]
    fn q6_k_padding_keeps_each_block_and_adds_two_zero_bytes() {
        let src: Vec<u8> = (0..3 * Q6K_BLOCK).map(|i| (i * 7 + 1) as u8).collect();
        let out = pad_q6_k(&src).expect("whole blocks");
        assert_eq!(out.len(), 3 * Q6K_DEV_BLOCK);
        for b in 0..3 {
            let d = &out[b * Q6K_DEV_BLOCK..(b + 1) * Q6K_DEV_BLOCK];
            assert_eq!(&d[..Q6K_BLOCK], &src[b * Q6K_BLOCK..(b + 1) * Q6K_BLOCK]);
            assert_eq!(&d[Q6K_BLOCK..], &[0, 0]);
        }
        assert!(pad_q6_k(&src[..Q6K_BLOCK + 1]).is_none());
        assert_eq!(dev_bytes_for(DType::Q6K, 512), Some(2 * Q6K_DEV_BLOCK));
        assert_eq!(dev_bytes_for(DType::Q6K, 100), None);
        assert_eq!(dev_bytes_for(DType::Q8_0, 64), Some(68));
    }

    #[test]
    fn iq4_xs_regroup_puts_each_value_in_its_kernel_nibble() {
        // Two blocks of pseudo-random bytes (headers included: they must pass through).
        let src: Vec<u8> = (0..2 * IQ4_XS_BLOCK as u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let out = regroup_iq4_xs(&src).expect("whole blocks");
        assert_eq!(out.len(), src.len());
        for (s, o) in src
            .chunks_exact(IQ4_XS_BLOCK)
            .zip(out.chunks_exact(IQ4_XS_BLOCK))
        {
            assert_eq!(s[..8], o[..8], "header changed");
            for ib in 0..8 {
                let qs = &s[8 + 16 * ib..8 + 16 * ib + 16];
                for t in 0..4 {
                    let o4 = 8 + 16 * ib + 4 * t;
                    let w = u32::from_le_bytes([o[o4], o[o4 + 1], o[o4 + 2], o[o4 + 3]]);
                    for k in 0..4 {
                        // The file: value 4t + k in byte 4t + k's low nibble, 16 + 4t + k high.
                        let lo = u32::from(qs[4 * t + k] & 0xf);
                        let hi = u32::from(qs[4 * t + k] >> 4);
                        assert_eq!((w >> (4 * k)) & 0xf, lo, "block {ib} word {t} lo {k}");
                        assert_eq!((w >> (4 * k + 16)) & 0xf, hi, "block {ib} word {t} hi {k}");
                    }
                }
            }
        }
        assert!(regroup_iq4_xs(&src[..IQ4_XS_BLOCK + 1]).is_none());
    }
}
