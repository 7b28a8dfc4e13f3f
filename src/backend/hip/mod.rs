//! The native GPU backend: HIP-C++ kernels (`hip/*.hip`) compiled ahead of time by clang into
//! AMD code objects and NVIDIA PTX, embedded in the binary (`build.rs`), and launched through a
//! small run-time-loaded driver layer ([`driver`]): `libamdhip64` on AMD, `libcuda` on NVIDIA.
//!
//! One lowering serves both drivers ([`lower`]): every graph node becomes one or a few kernel
//! launches on a single stream. Weights are uploaded once as their raw (quantized) bytes; small
//! weights that an op reads as plain f32 (norm vectors, conv taps, gate constants) are
//! dequantized on the device once and cached. States are device buffers updated in place;
//! `compile` plans the intermediate slots with [`Plan`] into one arena per graph; `run` copies the
//! inputs, launches every node in order, and reads back only the graph's outputs. Repeated runs
//! of one graph replay a captured driver graph instead ([`graphs`]; `DELTASPEC_HIP_GRAPHS=0`
//! turns it off, and `DELTASPEC_PROFILE`'s per-node timing always launches directly).
//!
//! `--backend hip` tries AMD then NVIDIA; `hip:rocm` and `hip:cuda` force one.

mod attention;
pub mod driver;
mod fused;
mod graphs;
pub mod kernels;
mod layout;
mod lower;

pub use graphs::GraphStats;

use super::{
    Backend, BackendError, ExecId, HostData, HostTensor, StateDecl, StatesId, WeightStore,
    WeightsId,
};
use crate::graph::{Graph, Op, Plan, TensorId, TensorKind};
use crate::tensor::DType;
use driver::{Api, DevPtr, Driver, Handle};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

/// Host↔device traffic of `run` calls (cumulative; the difference over a run is that run's).
/// A replayed run issues one graph launch instead of its kernel launches, so a step's cost on
/// the host is its uploads, readbacks and syncs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunIo {
    pub runs: u64,
    /// Input uploads (each a copy and a stream sync) and their bytes.
    pub uploads: u64,
    pub upload_bytes: u64,
    /// Output readbacks (each a copy and a stream sync) and their bytes.
    pub readbacks: u64,
    pub readback_bytes: u64,
}

/// What `deltaspec backends` prints about this backend.
#[derive(Clone, Debug)]
pub struct HipReport {
    /// The device the backend would use, or why it cannot run here.
    pub usable: Result<String, String>,
    /// Targets with embedded kernels (e.g. gfx1100 gfx1151 gfx1201 sm_80 sm_90).
    pub embedded_targets: Vec<String>,
}

/// Probes the backend without keeping it.
pub fn describe() -> HipReport {
    HipReport {
        usable: HipBackend::open(Which::Any).map(|b| b.name()),
        embedded_targets: kernels::targets(),
    }
}

/// Which driver to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// AMD (ROCm) if it opens, else NVIDIA (CUDA).
    Any,
    Rocm,
    Cuda,
}

/// A device allocation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buf {
    pub ptr: DevPtr,
    pub bytes: usize,
}

struct DevWeight {
    dtype: DType,
    shape: Vec<usize>,
    buf: Buf,
    /// A view into one of its set's shared panels (`WeightSet::arenas`), not freed on its own.
    view: bool,
}

#[derive(Default)]
struct WeightSet {
    tensors: HashMap<String, DevWeight>,
    /// f32 copies of non-f32 weights read as plain values, made on first use.
    f32_views: HashMap<String, Buf>,
    /// Regrouped copies of Q8_0 weights for the dp4a GEMV (`kernels::regroup_q8_0`), made at
    /// upload where `HipBackend::q8_regroup` is on.
    q8_regrouped: HashMap<String, Buf>,
    /// Shared weight panels holding the matrices of fewer rows than a panel
    /// (`layout::plan_pack`).
    arenas: Vec<Buf>,
}

impl WeightSet {
    /// The buffers this set owns: every weight but the packed views, their shared panels, and
    /// the copies made from the weights.
    fn owned_bufs(&self) -> impl Iterator<Item = Buf> + '_ {
        self.tensors
            .values()
            .filter(|w| !w.view)
            .map(|w| w.buf)
            .chain(self.arenas.iter().copied())
            .chain(self.f32_views.values().copied())
            .chain(self.q8_regrouped.values().copied())
    }
}

struct StateSet {
    decls: Vec<StateDecl>,
    bufs: HashMap<String, Buf>,
}

struct Exec {
    graph: Arc<Graph>,
    plan: Plan,
    /// One allocation holding every slot.
    arena: Buf,
    slot_offset: Vec<usize>,
    /// A device buffer per graph input.
    inputs: HashMap<TensorId, Buf>,
    /// Per-node constant buffers (RoPE frequencies), by node index.
    consts: HashMap<usize, Buf>,
    /// Weights read as plain f32 values by some node (their f32 views are made before a run).
    f32_weights: Vec<TensorId>,
    /// Which nodes run fused ([`fused::plan`]).
    fusion: crate::backend::wgpu::fuse::Fusion,
    /// Per node: a norm or conv that also writes its output as int8 activations
    /// ([`fused::q8_out`]).
    q8_out: Vec<bool>,
    /// Kernel launches of one run (counted and printed once, on its first run in profile mode).
    launches: Option<u64>,
}

/// The HIP/CUDA backend. Not `Send`: the driver's stream and context belong to this object.
pub struct HipBackend {
    label: String,
    /// Which embedded target's objects this device loads.
    target: String,
    /// Loaded modules by source name; functions by kernel name.
    modules: RefCell<HashMap<&'static str, Handle>>,
    funcs: RefCell<HashMap<String, Handle>>,
    weights: Vec<Option<WeightSet>>,
    states: Vec<Option<StateSet>>,
    execs: Vec<Exec>,
    /// Grow-only scratch (attention split partials).
    scratch: RefCell<Option<Buf>>,
    /// Grow-only buffer of int8-quantized activations (`quantize_q8` → `qgemv_*`).
    qscratch: RefCell<Option<Buf>>,
    /// The tensor whose quantized rows `qscratch` holds in the current run (several matmuls
    /// over one input quantize it once). Cleared at the start of every run.
    quantized: std::cell::Cell<Option<crate::graph::TensorId>>,
    /// The tensor whose fragment-ordered copy (`qmma_quantize`, for the `qmma*f` kernels)
    /// `qscratch` holds in the current run; cleared with `quantized`.
    fragged: std::cell::Cell<Option<crate::graph::TensorId>>,
    poison: bool,
    /// Widest f32-activation input on the GEMV kernels (wider: the tiled kernel).
    gemv_max_n: usize,
    /// Widest input on the int8 path (wider: the f32 kernels).
    int8_max_n: usize,
    /// Matmuls with few rows over Q8_0/Q4_K/Q5_K/Q6_K/IQ4_XS weights quantize the activations
    /// to int8 and use integer dot products (as llama.cpp does); off = f32 activations, which
    /// agree with the CPU reference to rounding. `DELTASPEC_HIP_MATMUL=f32` turns it off.
    int8_matmul: bool,
    /// Captured graphs of repeated runs.
    graphs: RefCell<graphs::GraphCache>,
    /// Set while the node launches of a run are being captured: nothing may then sync or
    /// reallocate a buffer.
    capturing: std::cell::Cell<bool>,
    /// Fused int8 GEMV launches ([`fused`]); `DELTASPEC_HIP_FUSION=0` turns them off.
    fusion: bool,
    /// Norms that write int8 activations for the next matmul ([`fused::q8_out`]): gated norms
    /// and the sliced one-row `add_rms_norm`s by default ([`NormQ8::Slices`]). 27B IQ4_XS
    /// decode on the H200, 3 interleaved rounds (docs/perf.md, session 14): off 6.35 / 6.49 /
    /// 6.56 ms, gated 6.31 / 6.37 / 6.31, all 6.56 / 6.47 / 6.48 (the 5120-wide
    /// `add_rms_norm_q8` takes 5.2 µs against 3.3 + 2.2 for the norm and its `quantize_q8`: no
    /// step-level gain). `DELTASPEC_HIP_NORM_Q8=0` turns it off, `=1` on for every norm,
    /// `=gated` for the gated norms alone.
    norm_q8: NormQ8,
    /// Most rows of an `add_rms_norm` that takes the sliced form under [`NormQ8::Slices`]
    /// (1 by default: measured at one row only). More rows (`DELTASPEC_HIP_NORM_SLICE_ROWS=16`)
    /// take it at verify widths too, where on the matrix-core tiles it writes their fragment
    /// order (`add_rms_norm_q8sf`), so each such norm's `qmma_quantize` launch goes.
    norm_slice_rows: usize,
    /// Those norms, where the matmul they feed runs a matrix-core tile on fragment-ordered
    /// activations (verify and prompt widths), write that order too (`*_rms_norm_q8f`), so the
    /// `qmma_relayout` launch between norm and tile goes: one launch less a DeltaNet layer of a
    /// verify step by default (the gated norm), four with `DELTASPEC_HIP_NORM_Q8=1`. Even with
    /// the relayout launch in the step on an H100 (8 and 16 rows within ±2 %, docs/perf.md,
    /// session 40); kept as the form with fewer launches. `DELTASPEC_HIP_NORM_Q8F=0` turns it off.
    norm_q8f: bool,
    /// The DFlash2 drafter's convs that feed int8 matmuls write those matmuls' int8
    /// activations themselves (`dyn_conv_q8[f]`, [`fused::q8_out`]): 10 quantize launches of
    /// ~3 µs less a 5-layer drafter step. `DELTASPEC_HIP_CONV_Q8=0` turns it off.
    conv_q8: bool,
    /// A dp4a group's first output read only as two `SliceLast` halves is written as those
    /// halves ([`fused`]); `DELTASPEC_HIP_SPLIT_OUT=0` turns it off.
    split_out: bool,
    /// A multi-split attention whose output meets the o_proj's folded gate writes that
    /// matmul's int8 rows in its combine (`attn_combine_q8g`), so its `quantize_q8_gate`
    /// launch goes. Off by default: on an H100 the 27B step took 7.049 / 7.048 ms with it
    /// against 7.041 / 7.042 without (session 32, interleaved; the combine grew 4.3 -> 5.4 µs
    /// and the launch it saves overlaps its neighbours under PDL). `DELTASPEC_HIP_COMBINE_Q8=1`
    /// turns it on.
    combine_q8: bool,
    /// The DeltaNet conv step folded into the 1-row qkv projection group's epilogue
    /// ([`fused`]); `DELTASPEC_HIP_CONV_FOLD=0` turns it off. H200, 27B IQ4_XS (docs/perf.md,
    /// session 14): `qgemv4_iq4_xs_1` 17.6 -> 18.1 µs for the 3.2 µs `conv_step` it saves;
    /// steps 6.52 / 6.38 / 6.36 ms on against 6.50 / 6.94 / 6.49 off (3 interleaved rounds).
    conv_fold: bool,
    /// Which attention layers run their q/k norms, ropes and cache write as one `qk_prep`
    /// launch ([`fused`], [`QkPrepMode`]): all by default; `DELTASPEC_HIP_QK_PREP=keys` only
    /// the drafters' context appends, `=0` none.
    qk_prep: QkPrepMode,
    /// Int8 GEMV tiles whose groups stay unfused where the unfused kernel is a wide variant
    /// (see [`fused`]): `[16]` by default; `DELTASPEC_HIP_FUSION=narrow`: `[8, 16]`, `=all`: none.
    unfused_wide_tiles: &'static [u32],
    /// Kernel launches so far (tests and profile mode count launches per run with it).
    /// Shared so a test can read it while a session holds the backend.
    launches: std::rc::Rc<std::cell::Cell<u64>>,
    /// A timing diagnostic, never for results: launches whose kernel name contains one of
    /// these strings are left out (`DELTASPEC_HIP_DROP=rms_norm,quantize_q8`), so a bench run
    /// measures the step without them: what those kernels cost inside the overlapped,
    /// captured step, which per-kernel timers cannot show. Every output is then wrong, and
    /// the backend's label says so.
    drop: Vec<String>,
    /// Events of the per-node device timing (`DELTASPEC_PROFILE=1`), grown to the largest graph.
    profile_events: RefCell<Vec<Handle>>,
    /// Uploads and readbacks of runs so far.
    io: std::cell::Cell<RunIo>,
    /// Weight rows per warp of the int8 GEMV at 8 and 16 input rows, where a wide variant
    /// exists (NVIDIA only: `kernels::QGEMV_WIDE`); `None` = the portable kernel, `Some(0)` =
    /// `kernels::qgemv_wide_default` (the default). `DELTASPEC_HIP_QGEMV_ROWS=2|4|portable`.
    qgemv_wide: Option<u32>,
    /// The matrix-core int8 GEMV (`hip/qmma.hip`, NVIDIA only) for inputs of 5 rows and more,
    /// bit-identical to the dp4a kernel. On by default: H200, 27B IQ4_XS verify steps
    /// (2026-12-03, same call) 8 rows 20.2 ms vs 23.1, 16 rows 30.5 vs 51.6, 32 rows 47.7 vs
    /// 119.3. `DELTASPEC_HIP_QGEMV_MMA=0` turns it off.
    qgemv_mma: bool,
    /// The matrix-core gate/up kernel (`qmma_glu_*`, writing `silu(gate) · up`) for gate/up
    /// pairs at the matrix-core widths, where fusion is on; off, those pairs run as `qmma4_*`
    /// plus the SwiGLU launch. `DELTASPEC_HIP_QMMA_GLU=0` turns it off (A/B runs).
    qmma_glu: bool,
    /// Suffix of the `qmma*` kernels: "" (two chunks of items per warp step, the default) or
    /// "u1" (one; `DELTASPEC_HIP_QMMA_UNROLL=1`, for A/B runs). Both give the same bits.
    qmma_sfx: &'static str,
    /// Fewest input rows that take the matrix-core kernel (5 by default: the dp4a kernel's
    /// 8-row tile and up; `DELTASPEC_HIP_QMMA_MIN_ROWS=2..5` for A/B runs of the 2-4 row
    /// GEMVs, e.g. a drafter's context rows). Results are bit-identical either way.
    qmma_min_rows: usize,
    /// Weight types kept on the dp4a kernel at every width (`DELTASPEC_HIP_QMMA_SKIP=q6_k,...`,
    /// `none` for no type), for A/B runs of one type; unset: Q8_0 up to 8 rows (see
    /// `qmma_tile`).
    qmma_skip: Option<Vec<String>>,
    /// The `qmma*f` kernels, reading the activations in fragment order (one contiguous load per
    /// warp and item; `hip/qmma.hip`), written by `qmma_quantize` next to the plain rows. Only
    /// with two chunks per step (`qmma_sfx` ""). Bit-identical either way; on by default (H200,
    /// session 7: 16 rows 26.0 ms against 28.7, 32 rows 38.5 against 43.0):
    /// `DELTASPEC_HIP_QMMA_XLAYOUT=0` turns it off.
    qmma_xlayout: bool,
    /// The prefill tile (`qmmp*` in `hip/qmma.hip`) for int8 matmuls over more than 32 input
    /// rows in graphs whose rows are not compared with decode (prompts): each warp walks all
    /// of K for its own 16 weight rows into one accumulator per output, 64 input rows a pass,
    /// instead of the verify tile's residue partials and cross-warp butterflies. Its results
    /// differ from the verify tile's in the last bits (another summation order), so verify
    /// graphs never take it. On by default (H100, session 21, 27B IQ4_XS: pp512 2088 tok/s
    /// against 1622 on the verify tile, pp2048 1834 against 1461); `DELTASPEC_HIP_QMMP=0`
    /// turns it off.
    qmmp: bool,
    /// Fused dp4a groups at a tile with a wide variant run its fused wide kernels
    /// (`qgemv4_*_8x4`, `qgemv_glu_*_8x4`: the drafters' 8-row q/k/v and gate/up groups) instead
    /// of the 2-row ones; bit-identical either way. Off by default until measured on the H200:
    /// `DELTASPEC_HIP_FUSED_WIDE=1` turns it on.
    fused_wide: bool,
    /// Q8_0 weights with rows of K % 512 == 0 also get a regrouped copy (`kernels::regroup_q8_0`)
    /// that the dp4a GEMVs read with aligned 16-byte loads (`q8_0g` kernels; bit-identical).
    /// The matrix-core kernels keep the plain copy. Doubles those weights' device memory; off by
    /// default until measured on the H200: `DELTASPEC_HIP_Q8_REGROUP=1` turns it on.
    q8_regroup: bool,
    /// Variant of the fragment-order kernels: 0 `qmma*f`; 1 `qmma*p`, with L2 prefetch of the
    /// weights (`QM_PF` chunks ahead, `hip/qmma.hip` qmma_prefetch); 2 `qmma*q`, the same plus
    /// every load of a chunk issued before its first mma (IQ4_XS; the other types run as p).
    /// Speed bets for the latency-bound verify GEMVs, bit-identical (the values and their
    /// operations are unchanged; the bit-identity tests passed on the H200). 2 by default
    /// (H200, session 8, 27B IQ4_XS: 8/16/32 rows 12.7-13.0 / 19.2-19.6 / 30.7 ms against
    /// 15.9-16.5 / 24.8-24.9 / 36.3 with 0). 3: `qmma*w`, the `q` kernels with half the warps
    /// per block at 8 and 16 rows, each over twice the residues (twice the items per walk), and
    /// twice the blocks per SM (`qmma_warps_w` in `hip/qmma.hip`). `None` (the default): `w` at
    /// the 16-row tile, `q` at 8 and 32 (H200, session 19, 27B IQ4_XS steps, two interleaved
    /// rounds: 16 rows 15.70 / 15.52 ms with `w` against 17.15 / 17.27 with `q`; 8 rows 11.43 /
    /// 11.24 against 10.88 / 10.91). `DELTASPEC_HIP_QMMA_V2=0..3` forces one variant at every
    /// tile; 4 takes the staged kernels (`qmma*t`, `hip/qmma_staged.h`) where the type has
    /// them at that tile, and the default elsewhere.
    qmma_v2: Option<u8>,
    /// At most this many blocks in a staged matrix-core launch (tests: several tiles per block;
    /// `None`: `kernels::QMMA_STAGED_BLOCKS_PER_SM` per multiprocessor).
    qmma_staged_grid: Option<u32>,
    /// Forced 1-row int8 GEMV variants for A/B runs (NVIDIA only): `DELTASPEC_HIP_Q1=r<R>u<U>`
    /// for plain and grouped projections, `DELTASPEC_HIP_Q1_GLU=u<U>` for gate/up pairs (`None`:
    /// unset, each type's default; `Some(None)`: set to a name that is not a variant, the
    /// default tile for every type).
    q1_plain: Option<kernels::Q1>,
    q1_glu: Option<Option<kernels::Q1>>,
    /// The 1-row variant for projections of at most `q1_small_m` weight rows (a whole launch's
    /// rows), which fill less than a wave with the default tile (`DELTASPEC_HIP_Q1_SMALL`).
    q1_small: Option<kernels::Q1>,
    q1_small_m: usize,
    // Declared last: dropped after `Drop::drop` has freed every buffer through it.
    drv: Box<dyn Driver>,
}

/// Which norms write the int8 activations of the matmul they feed ([`fused::q8_out`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormQ8 {
    Off,
    /// `GatedRmsNorm` only (`DELTASPEC_HIP_NORM_Q8=gated`).
    Gated,
    /// The default: the gated norms, and the `AddRmsNorm`s of at most `norm_slice_rows` rows
    /// (one by default) whose rows take the sliced block form (`add_rms_norm_q8s[f]`,
    /// [`lower::norm_slices`]), which saves the projection's quantize launch. 27B 1-row step, H100 (docs/perf.md, session 43): 6.560 / 6.548 /
    /// 6.562 ms against 6.672 / 6.679 / 6.853 with `gated`, interleaved.
    Slices,
    All,
}

/// Which attention nodes run their q/k preparation as one `qk_prep` launch ([`fused`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkPrepMode {
    Off,
    /// Only nodes whose output nothing reads (the drafters' context appends): their key norm,
    /// rope and cache write become one launch instead of three, no arithmetic added.
    KeysOnly,
    /// Every attention node (the default). H200 (docs/perf.md, session 14): `qk_prep` 5.6 µs
    /// against ~11.7 for the five launches it replaces. H100 (session 26), 3 interleaved
    /// rounds against `KeysOnly`: 27B 1-row steps 7.094 / 7.103 / 7.128 ms against 7.133 /
    /// 7.139 / 7.132, 8-row 11.027 / 11.074 / 11.022 against 11.081 / 11.084 / 11.450, DFlash2
    /// drafter steps 1.735 / 1.744 / 1.729 against 1.751 / 1.754 / 1.756.
    All,
}

const ALIGN: usize = 256;
/// Default fewest input rows of the matrix-core int8 GEMV (see `HipBackend::qmma_min_rows`).
const QMMA_MIN_ROWS: usize = 5;

fn align_up(v: usize) -> usize {
    v.div_ceil(ALIGN) * ALIGN
}

impl HipBackend {
    /// Opens a device and checks that its embedded kernels load, or says why it cannot.
    pub fn open(which: Which) -> Result<HipBackend, String> {
        if kernels::blobs().is_empty() {
            return Err(format!(
                "no GPU kernels are embedded in this build: {}",
                kernels::build_error().unwrap_or("unknown reason")
            ));
        }
        let apis: &[Api] = match which {
            Which::Any => &[Api::Rocm, Api::Cuda],
            Which::Rocm => &[Api::Rocm],
            Which::Cuda => &[Api::Cuda],
        };
        let mut why = Vec::new();
        for api in apis {
            match driver::open(*api).and_then(HipBackend::with_driver) {
                Ok(b) => return Ok(b),
                Err(e) => why.push(format!("{}: {e}", api.name())),
            }
        }
        Err(why.join("; "))
    }

    fn with_driver(drv: Box<dyn Driver>) -> Result<HipBackend, String> {
        if drv.warp_size() != 32 {
            return Err(format!(
                "{} has warp size {}; the kernels are written for 32 lanes",
                drv.device_name(),
                drv.warp_size()
            ));
        }
        let mut b = HipBackend {
            label: String::new(),
            target: String::new(),
            modules: Default::default(),
            funcs: Default::default(),
            weights: Vec::new(),
            states: Vec::new(),
            execs: Vec::new(),
            scratch: RefCell::new(None),
            qscratch: RefCell::new(None),
            quantized: std::cell::Cell::new(None),
            fragged: std::cell::Cell::new(None),
            poison: false,
            int8_matmul: !matches!(
                std::env::var("DELTASPEC_HIP_MATMUL").as_deref(),
                Ok("f32") | Ok("exact")
            ),
            fusion: std::env::var("DELTASPEC_HIP_FUSION").map_or(true, |v| v != "0"),
            norm_q8: match std::env::var("DELTASPEC_HIP_NORM_Q8").as_deref() {
                Ok("1") => NormQ8::All,
                Ok("gated") => NormQ8::Gated,
                Ok("0") => NormQ8::Off,
                _ => NormQ8::Slices,
            },
            norm_slice_rows: std::env::var("DELTASPEC_HIP_NORM_SLICE_ROWS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1),
            norm_q8f: std::env::var("DELTASPEC_HIP_NORM_Q8F").map_or(true, |v| v != "0"),
            conv_q8: std::env::var("DELTASPEC_HIP_CONV_Q8").map_or(true, |v| v != "0"),
            split_out: std::env::var("DELTASPEC_HIP_SPLIT_OUT").map_or(true, |v| v != "0"),
            combine_q8: std::env::var("DELTASPEC_HIP_COMBINE_Q8").is_ok_and(|v| v == "1"),
            conv_fold: std::env::var("DELTASPEC_HIP_CONV_FOLD").map_or(true, |v| v != "0"),
            qk_prep: match std::env::var("DELTASPEC_HIP_QK_PREP").as_deref() {
                Ok("keys") => QkPrepMode::KeysOnly,
                Ok("0") => QkPrepMode::Off,
                _ => QkPrepMode::All,
            },
            unfused_wide_tiles: match std::env::var("DELTASPEC_HIP_FUSION").as_deref() {
                Ok("all") => &[],
                Ok("narrow") => &[8, 16],
                _ => &[16],
            },
            launches: Default::default(),
            drop: std::env::var("DELTASPEC_HIP_DROP")
                .map(|v| {
                    v.split(',')
                        .map(|t| t.trim().to_string())
                        .filter(|t| !t.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            profile_events: Default::default(),
            io: Default::default(),
            // Unset: the measured best per tile (`Some(0)`); "portable" (or 1): off.
            qgemv_wide: match std::env::var("DELTASPEC_HIP_QGEMV_ROWS").as_deref() {
                Err(_) => Some(0),
                Ok("portable") | Ok("1") => None,
                Ok(v) => v.parse().ok(),
            },
            qgemv_mma: std::env::var("DELTASPEC_HIP_QGEMV_MMA").map_or(true, |v| v != "0"),
            qmma_glu: std::env::var("DELTASPEC_HIP_QMMA_GLU").map_or(true, |v| v != "0"),
            qmma_sfx: match std::env::var("DELTASPEC_HIP_QMMA_UNROLL").as_deref() {
                Ok("1") => "u1",
                _ => "",
            },
            qmma_min_rows: std::env::var("DELTASPEC_HIP_QMMA_MIN_ROWS")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .map_or(QMMA_MIN_ROWS, |v| v.clamp(2, QMMA_MIN_ROWS)),
            qmma_skip: std::env::var("DELTASPEC_HIP_QMMA_SKIP")
                .ok()
                .map(|v| v.split(',').map(|t| t.trim().to_string()).collect()),
            qmma_xlayout: std::env::var("DELTASPEC_HIP_QMMA_XLAYOUT").map_or(true, |v| v != "0"),
            qmmp: std::env::var("DELTASPEC_HIP_QMMP").map_or(true, |v| v != "0"),
            fused_wide: std::env::var("DELTASPEC_HIP_FUSED_WIDE").is_ok_and(|v| v == "1"),
            q8_regroup: std::env::var("DELTASPEC_HIP_Q8_REGROUP").is_ok_and(|v| v == "1"),
            qmma_v2: std::env::var("DELTASPEC_HIP_QMMA_V2")
                .ok()
                .and_then(|v| v.parse::<u8>().ok())
                .map(|v| v.min(4)),
            qmma_staged_grid: None,
            q1_plain: std::env::var("DELTASPEC_HIP_Q1")
                .ok()
                .and_then(|v| kernels::parse_q1(&v)),
            q1_glu: std::env::var("DELTASPEC_HIP_Q1_GLU")
                .ok()
                .map(|v| kernels::parse_q1(&v)),
            // r1u2 up to 12288 rows: 6.53/6.54 ms a 27B IQ4_XS step on the H200 (session 12,
            // split IQ4_XS decode) against 7.04/6.72 with r2u2, the default before, and
            // 7.12/7.19 with the default tile everywhere (r2u4 6.65/6.65, r1u4 6.97/7.22); with
            // the gate/up default below, 6.58/6.44/6.72/6.53 against 6.73/6.78/6.77/6.89 for
            // both old defaults (session 13, interleaved). `off` (any name that is not a
            // variant) turns it off.
            q1_small: std::env::var("DELTASPEC_HIP_Q1_SMALL")
                .map_or(Some(kernels::Q1::plain(1, 2)), |v| kernels::parse_q1(&v)),
            q1_small_m: std::env::var("DELTASPEC_HIP_Q1_SMALL_M")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(12288),
            // f32 activations: wider inputs take the tiled kernel.
            gemv_max_n: std::env::var("DELTASPEC_HIP_GEMV_MAX_N")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(64),
            // Every width on the int8 path: a verified or prefilled row equals its decode bit
            // for bit, and prompts run 4.5x faster than on the f32 tiled kernel (H200, 27B
            // IQ4_XS pp512: 1579 against 351 tok/s, session 18).
            int8_max_n: std::env::var("DELTASPEC_HIP_INT8_MAX_N")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(usize::MAX),
            graphs: RefCell::new(graphs::GraphCache::new(
                std::env::var("DELTASPEC_HIP_GRAPHS").map_or(true, |v| v != "0"),
            )),
            capturing: std::cell::Cell::new(false),
            drv,
        };
        let candidates: Vec<String> = match b.drv.api() {
            Api::Cuda => {
                let sm = b.drv.target().unwrap_or_default();
                let cc: u32 = sm.trim_start_matches("sm_").parse().unwrap_or(0);
                // PTX for sm_XY JIT-compiles for any later architecture.
                let mut ts: Vec<(u32, String)> = kernels::targets()
                    .into_iter()
                    .filter_map(|t| Some((t.strip_prefix("sm_")?.parse::<u32>().ok()?, t)))
                    .filter(|(v, _)| *v <= cc)
                    .collect();
                ts.sort();
                ts.into_iter().rev().map(|(_, t)| t).collect()
            }
            Api::Rocm => kernels::targets()
                .into_iter()
                .filter(|t| t.starts_with("gfx"))
                .collect(),
        };
        // Probe with the smallest module; the rest load on first use.
        let mut tried = Vec::new();
        for t in &candidates {
            match b.load_module_for(t, "conv") {
                Ok(h) => {
                    b.target = t.clone();
                    b.modules.borrow_mut().insert("conv", h);
                    break;
                }
                Err(e) => tried.push(format!("{t}: {e}")),
            }
        }
        if b.target.is_empty() {
            return Err(format!(
                "{}: none of the embedded kernel objects loads ({})",
                b.drv.device_name(),
                if tried.is_empty() {
                    format!("embedded: {}", kernels::targets().join(" "))
                } else {
                    tried.join("; ")
                }
            ));
        }
        // Overlapped launches (hip/common.h's grid_begin): the loaded code must be sm_90 or
        // later, where grid_begin waits; DELTASPEC_HIP_PDL=0 turns them off (A/B runs).
        let arch: u32 = b
            .target
            .strip_prefix("sm_")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let pdl = arch >= 90
            && std::env::var("DELTASPEC_HIP_PDL").map_or(true, |v| v != "0")
            && b.drv.enable_programmatic_launch();
        b.label = format!(
            "hip:{} ({}, {}{})",
            b.drv.api().name(),
            b.drv.device_name(),
            b.target,
            if pdl { ", overlapped launches" } else { "" }
        );
        if !b.drop.is_empty() {
            // Timing only: say so wherever the backend is named (bench lines, JSON).
            b.label += &format!(" [DROPPED {}: outputs invalid]", b.drop.join(","));
        }
        Ok(b)
    }

    /// Fills every intermediate buffer with NaN before each run (tests: a kernel that leaves
    /// part of its output unwritten then shows up as NaN).
    pub fn set_poison(&mut self, on: bool) {
        self.poison = on;
    }

    /// Largest row count that uses the f32-activation GEMV (more rows use the tiled kernel).
    pub fn set_gemv_max_n(&mut self, n: usize) {
        self.gemv_max_n = n;
        self.drop_graphs(|_| true);
    }

    /// Largest row count on the int8 path (more rows use the f32 kernels).
    pub fn set_int8_max_n(&mut self, n: usize) {
        self.int8_max_n = n;
        self.drop_graphs(|_| true);
    }

    /// Weight rows per warp of the int8 GEMV's wide variants at 8/16 input rows (NVIDIA), or
    /// `None` for the portable kernel; results are bit-identical either way.
    pub fn set_qgemv_wide_rows(&mut self, rows: Option<u32>) {
        self.qgemv_wide = rows;
        self.drop_graphs(|_| true);
    }

    /// Whether verify-width int8 matmuls run on the matrix-core kernels here (NVIDIA, with
    /// [`HipBackend::set_qgemv_mma`] on).
    pub fn matrix_cores(&self) -> bool {
        self.qgemv_mma && self.drv.api() == Api::Cuda
    }

    /// The matrix-core kernels with one chunk of items per warp step (`u1`) instead of two;
    /// results are bit-identical either way.
    pub fn set_qmma_unroll_one(&mut self, one: bool) {
        self.qmma_sfx = if one { "u1" } else { "" };
        self.drop_graphs(|_| true);
    }

    /// The matrix-core kernels on fragment-ordered activations (`qmma*f`, with two chunks per
    /// step); results are bit-identical either way.
    pub fn set_qmma_xlayout(&mut self, on: bool) {
        self.qmma_xlayout = on;
        self.drop_graphs(|_| true);
    }

    /// Fused dp4a groups keep their tile's wide variant (`qgemv4_*_8x4`, `qgemv_glu_*_8x4`;
    /// NVIDIA only); results are bit-identical either way. Applies to graphs compiled later.
    pub fn set_fused_wide(&mut self, on: bool) {
        self.fused_wide = on;
        self.drop_graphs(|_| true);
    }

    /// Q8_0 weights uploaded later also get the regrouped copy the `q8_0g` dp4a kernels read
    /// (bit-identical results; see `hip/qmatmul.hip` IQ8_0G).
    pub fn set_q8_regroup(&mut self, on: bool) {
        self.q8_regroup = on;
    }

    /// The variant of the fragment-order matrix-core kernels: 0 `qmma*f`, 1 `qmma*p` (L2
    /// prefetch), 2 `qmma*q` (prefetch and hoisted loads), 3 `qmma*w` (`q` with half the warps
    /// per block), 4 `qmma*t` (staged, where it exists); results are bit-identical either way.
    /// `None`: the per-tile default (see the field).
    pub fn set_qmma_v2(&mut self, v: Option<u8>) {
        self.qmma_v2 = v.map(|v| v.min(4));
        self.drop_graphs(|_| true);
    }

    /// Caps the grid of the staged matrix-core kernels (`None`: two blocks per multiprocessor),
    /// so tests can give each block several tiles; results are bit-identical either way.
    pub fn set_qmma_staged_grid(&mut self, cap: Option<u32>) {
        self.qmma_staged_grid = cap.map(|c| c.max(1));
        self.drop_graphs(|_| true);
    }

    /// The matrix-core int8 GEMV for inputs of 5 rows and more (NVIDIA; elsewhere the setting
    /// keeps the dp4a kernel); results are bit-identical either way.
    pub fn set_qgemv_mma(&mut self, on: bool) {
        self.qgemv_mma = on;
        self.drop_graphs(|_| true);
    }

    /// Weight types kept on the dp4a kernel at every width (`None`: the default rule, Q8_0
    /// up to 8 rows); results are bit-identical either way.
    pub fn set_qmma_skip(&mut self, types: Option<Vec<String>>) {
        self.qmma_skip = types;
        self.drop_graphs(|_| true);
    }

    /// Fewest input rows that take the matrix-core int8 GEMV (clamped to 2..=5; 5 is the
    /// default); results are bit-identical either way.
    pub fn set_qmma_min_rows(&mut self, rows: usize) {
        self.qmma_min_rows = rows.clamp(2, QMMA_MIN_ROWS);
        self.drop_graphs(|_| true);
    }

    /// The `qmma_*` tile for `n` input rows of `suffix` weights, where that kernel is on and
    /// exists here. Below 5 rows (only with `qmma_min_rows` lowered) the 8-row tile runs, its
    /// missing rows repeating the last one.
    fn qmma_tile(&self, n: usize, suffix: &str) -> Option<u32> {
        // Q8_0 needs no weight decode, so at 8 rows and fewer the dp4a kernel does less work
        // than the matrix-core tile's float combine: on the H200 the 5-layer Q8_0 drafters'
        // step (8-row block, 4-row context appends) took 4.63 ms against 5.43 (DFlash2) and
        // 4.74 against 5.15 (DSpark) with Q8_0 on dp4a.
        let skip = suffix == kernels::Q8_REGROUPED // dp4a kernels only
            || match &self.qmma_skip {
                Some(types) => types.iter().any(|t| t == suffix),
                None => suffix == "q8_0" && n <= 8,
            };
        if self.qgemv_mma && self.drv.api() == Api::Cuda && n >= self.qmma_min_rows && !skip {
            kernels::qmma_tile(n.max(QMMA_MIN_ROWS))
        } else {
            None
        }
    }

    /// The name of matrix-core kernel `kind` (`qmma`, `qmma4`, `qmma_glu`) for weight kernel
    /// `suffix` and tile `nt`.
    fn qmma_kernel(&self, kind: &str, suffix: &str, nt: u32) -> String {
        let sfx = match (self.qmma_frag(), self.qmma_variant(nt, suffix)) {
            (true, 0) => "f",
            (true, 1) => "p",
            (true, 2) => "q",
            (true, 3) => "w",
            (true, _) => "t",
            (false, _) => self.qmma_sfx,
        };
        format!("{kind}_{suffix}_{nt}{sfx}")
    }

    /// The prefill tile on or off (see the field); drops compiled graphs.
    pub fn set_qmmp(&mut self, on: bool) {
        self.qmmp = on;
        self.drop_graphs(|_| true);
    }

    /// The matrix-core launch of `kind` (`qmma`, `qmma4`, `qmma_glu`) for `n` input rows at
    /// tile `nt` of `suffix` weights: `(source, kernel, weight rows per block (output columns
    /// for the gate/up pair), threads, grid rows)`. The prefill tile where it is on, the graph's
    /// rows need not equal decode and `n` is past the 32-row tile (a grid row per 64 input
    /// rows); the verify tile otherwise (one grid row: its blocks loop over the inputs).
    fn mma_launch(
        &self,
        kind: &str,
        suffix: &str,
        nt: u32,
        n: usize,
        decode_rows: bool,
    ) -> (&'static str, String, u64, u32, u32) {
        let per_warp = if kind == "qmma_glu" {
            kernels::QMMA_GLU_COLS
        } else {
            kernels::QMMA_ROWS
        };
        if self.qmmp && self.qmma_frag() && !decode_rows && n > 32 {
            let k = kind.replacen("qmma", "qmmp", 1);
            return (
                "qmma",
                format!("{k}_{suffix}"),
                u64::from(per_warp * kernels::QMMP_WARPS),
                32 * kernels::QMMP_WARPS,
                n.div_ceil(kernels::QMMP_ROWS_IN) as u32,
            );
        }
        (
            "qmma",
            self.qmma_kernel(kind, suffix, nt),
            u64::from(per_warp),
            self.qmma_threads(nt, suffix),
            1,
        )
    }

    /// Threads of a matrix-core block at tile `nt`: half of `kernels::qmma_threads` for the
    /// `qmma*w` kernels at 8 and 16 rows (`DS_QMMA_W` in `hip/qmma.hip`), and the staged
    /// kernels' own.
    fn qmma_threads(&self, nt: u32, suffix: &str) -> u32 {
        let t = kernels::qmma_threads(nt);
        match (self.qmma_frag(), self.qmma_variant(nt, suffix)) {
            (true, 3) => t / 2,
            (true, 4) => kernels::QMMA_STAGED_THREADS,
            _ => t,
        }
    }

    /// The fragment-order variant (`qmma_v2`'s numbering) at tile `nt` of `suffix` weights;
    /// `w` (3) exists at 8 and 16 rows only, and 32 takes `q` (2) instead; the staged kernels
    /// (4) where `kernels::QMMA_STAGED_TYPES` and `QMMA_STAGED_TILES` hold them, the tile's
    /// default elsewhere.
    fn qmma_variant(&self, nt: u32, suffix: &str) -> u8 {
        let default = if nt == 16 { 3 } else { 2 };
        match self.qmma_v2.unwrap_or(default) {
            3 if nt > 16 => 2,
            4 if !(kernels::QMMA_STAGED_TYPES.contains(&suffix)
                && kernels::QMMA_STAGED_TILES.contains(&nt)) =>
            {
                default
            }
            v => v,
        }
    }

    /// The grid of a matrix-core launch of kernel `name` over `blocks` tiles: the staged
    /// kernels (`qmma*t`) are persistent (each block walks tiles b, b + grid, ...), so at most
    /// `kernels::QMMA_STAGED_BLOCKS_PER_SM` per multiprocessor; every other kernel one block a
    /// tile.
    fn mma_grid(&self, name: &str, blocks: u32) -> u32 {
        let staged = name.starts_with("qmma")
            && kernels::QMMA_STAGED_TILES
                .iter()
                .any(|nt| name.ends_with(&format!("_{nt}t")));
        if !staged {
            return blocks;
        }
        let cap = self.qmma_staged_grid.unwrap_or(
            kernels::QMMA_STAGED_BLOCKS_PER_SM.saturating_mul(self.drv.multiprocessors()),
        );
        blocks.min(cap.max(1))
    }

    /// Whether the matrix-core kernels read fragment-ordered activations (`qmma*f`, see
    /// [`lower::quantize_input`]).
    fn qmma_frag(&self) -> bool {
        self.qmma_xlayout && self.qmma_sfx.is_empty()
    }

    /// The `qmma_glu_*` tile for a gate/up pair over `n` input rows, where that kernel is on.
    /// Below 5 rows (`qmma_min_rows` lowered) the pair keeps `qmma4_*` plus the SwiGLU launch.
    fn qmma_glu_tile(&self, n: usize, suffix: &str) -> Option<u32> {
        self.qmma_tile(n, suffix)
            .filter(|_| self.qmma_glu && n >= QMMA_MIN_ROWS)
    }

    /// The 1-row int8 GEMV variant for `n` input rows, for a gate/up pair (`glu`) or
    /// plain/grouped projections of `m` weight rows in all, where one is chosen and exists for
    /// this weight type here. Every variant accumulates in the same order (bit-identical).
    fn q1_variant(&self, n: usize, glu: bool, m: usize, suffix: &str) -> Option<kernels::Q1> {
        if n != 1 || self.drv.api() != Api::Cuda {
            return None;
        }
        let v = if glu {
            // IQ4_XS pairs default to the pipelined kernel with stages of 2 rounds (`1p2`):
            // 6.956 / 6.956 ms a 27B step on an H100 against 7.053 / 7.053 for `1u2` (2 items
            // in flight, then used with none outstanding), `1p1` 7.029 / 7.026 (session 32,
            // interleaved; same tokens). Before: u2 over the tile's default 1 (session 12, H200:
            // 6.62/6.58 against 7.04/6.72 ms). The plain projections lost pipelined (the down
            // projection's `1r1p1` 19.1 µs against 15.4 for `1r1u2`). The other types' default
            // tile already keeps 4 items in flight.
            self.q1_glu
                .unwrap_or_else(|| (suffix == "iq4_xs").then_some(kernels::Q1::pipelined(2, 2)))
        } else {
            match self.q1_small {
                Some(v) if m <= self.q1_small_m => Some(v),
                _ => self.q1_plain,
            }
        };
        v.filter(|v| v.exists_for(suffix))
    }

    /// Uploads every tensor of `weights` into `set` (which the caller frees on an error).
    fn upload_into(
        &mut self,
        weights: &WeightStore,
        set: &mut WeightSet,
    ) -> Result<(), BackendError> {
        // Matrices of fewer rows than a weight panel share panels (layout::plan_pack): their
        // bytes go into host copies of the shared panels, uploaded after the loop.
        let names: Vec<&String> = weights.tensors.keys().collect();
        let pack_items: Vec<Option<layout::PackItem>> = names
            .iter()
            .map(|n| layout::pack_item(&weights.tensors[*n]))
            .collect();
        let plan = layout::plan_pack(&pack_items, layout::GROUP);
        let mut arenas: Vec<Vec<u8>> = (0..plan.arenas.len())
            .map(|a| vec![0u8; plan.arena_bytes(a, layout::GROUP)])
            .collect();
        let mut packed: Vec<(String, usize, usize)> = Vec::new(); // name, arena, first row
        for (i, name) in names.iter().enumerate() {
            let t = &weights.tensors[*name];
            let bytes = t.bytes();
            // The device copy where it differs from the file's bytes: IQ4_XS quant words
            // regrouped for the NVIDIA kernels (`IQ4_REGROUPED` in hip/quant.h), Q6_K blocks
            // padded to 4-byte alignment (`Q6K_QB`); every hip kernel reads that layout.
            let whole = |what: &str| {
                self.dev_err(format!(
                    "{name}: {} bytes are not whole {what} blocks",
                    bytes.len()
                ))
            };
            let relaid = match t.dtype {
                DType::Iq4Xs if self.drv.api() == Api::Cuda => {
                    Some(kernels::regroup_iq4_xs(bytes).ok_or_else(|| whole("IQ4_XS"))?)
                }
                DType::Q6K => Some(kernels::pad_q6_k(bytes).ok_or_else(|| whole("Q6_K"))?),
                _ => None,
            };
            let dev = relaid.as_deref().unwrap_or(bytes);
            // The int8 GEMV types in panels, after the per-type transforms: those work on
            // blocks, this moves whole rounds of blocks.
            let k = t.shape.last().copied().unwrap_or(0);
            let panels = layout::panels_of(t.dtype, k, t.numel(), dev);
            if let (Some(p), Some((a, row)), Some(item)) = (&panels, plan.slots[i], pack_items[i]) {
                layout::place_in_arena(&mut arenas[a], p, item.rows, item.rb, layout::GROUP, row);
                packed.push(((*name).clone(), a, row));
                continue;
            }
            let dev = panels.as_deref().unwrap_or(dev);
            let buf = self.alloc(dev.len())?;
            set.tensors.insert(
                (*name).clone(),
                DevWeight {
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    buf,
                    view: false,
                },
            );
            self.drv
                .htod(buf.ptr, dev)
                .map_err(|e| self.dev_err(format!("uploading {name}: {e}")))?;
            if self.q8_regroup
                && t.dtype == DType::Q8_0
                && t.shape.len() == 2
                && k > 0
                && k.is_multiple_of(kernels::Q8_REGROUP_K)
            {
                let re = kernels::regroup_q8_0(bytes, k);
                let rbuf = self.alloc(re.len())?;
                set.q8_regrouped.insert((*name).clone(), rbuf);
                self.drv
                    .htod(rbuf.ptr, &re)
                    .map_err(|e| self.dev_err(format!("uploading {name} (regrouped): {e}")))?;
            }
        }
        for host in &arenas {
            let buf = self.alloc(host.len())?;
            set.arenas.push(buf);
            self.drv
                .htod(buf.ptr, host)
                .map_err(|e| self.dev_err(format!("uploading a shared weight panel: {e}")))?;
        }
        // A packed matrix is a view from its first row; its byte count is that of its own
        // panel (what the weight check expects), of which the kernels read its rows only.
        for (name, a, row) in packed {
            let t = &weights.tensors[&name];
            let k = t.shape.last().copied().unwrap_or(0);
            let rows = t.numel() / k.max(1);
            let bytes = layout::panel_bytes(t.dtype, rows, k).unwrap_or(0);
            let (rb, _) = plan.arenas[a];
            let ptr = set.arenas[a].ptr + (row * rb) as DevPtr;
            set.tensors.insert(
                name,
                DevWeight {
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    buf: Buf { ptr, bytes },
                    view: true,
                },
            );
        }
        Ok(())
    }

    /// Frees every buffer a weight set owns (packed matrices are views into its arenas).
    fn free_weight_set(&mut self, set: &WeightSet) {
        let bufs: Vec<Buf> = set.owned_bufs().collect();
        for b in bufs {
            self.free(b);
        }
    }

    /// Int8-activation matmuls on (the default) or off (f32 activations everywhere).
    pub fn set_int8_matmul(&mut self, on: bool) {
        self.int8_matmul = on;
        self.drop_graphs(|_| true);
    }

    /// Graph capture and replay of repeated runs on (the default unless
    /// `DELTASPEC_HIP_GRAPHS=0`, where the driver supports it) or off.
    pub fn set_graphs(&mut self, on: bool) {
        self.drop_graphs(|_| true);
        self.graphs.borrow_mut().enabled = on;
    }

    /// Whether runs may replay captured graphs (on, and the driver supports them).
    pub fn graphs_active(&self) -> bool {
        self.graphs.borrow().enabled && self.drv.graphs_supported()
    }

    /// Capture and replay counters since the backend opened.
    pub fn graph_stats(&self) -> GraphStats {
        self.graphs.borrow().stats()
    }

    /// Destroys the captured graphs whose key matches `pred` (after a sync: a replay of one
    /// may still be queued).
    fn drop_graphs(&self, pred: impl Fn(&graphs::Key) -> bool) {
        if self.drv.graphs_supported() {
            let _ = self.drv.sync();
            self.graphs.borrow_mut().drop_where(self.drv.as_ref(), pred);
        }
    }

    /// A grow-only buffer must grow: refused while capturing (the warm-up run of the same
    /// launches grew it already, so this means the launches differ), and every captured graph
    /// holding the old address is dropped.
    fn before_regrow(&self) -> Result<(), BackendError> {
        if self.capturing.get() {
            return Err(self.dev_err("a scratch buffer would grow during graph capture"));
        }
        self.drop_graphs(|_| true);
        Ok(())
    }

    /// Fused int8 GEMV launches on (the default) or off, for graphs compiled afterwards. On
    /// here fuses every tile, wide ones included (`DELTASPEC_HIP_FUSION=all`; tests count the
    /// fused launches).
    pub fn set_fusion(&mut self, on: bool) {
        self.fusion = on;
        self.unfused_wide_tiles = &[];
    }

    /// Norms that also write the int8 activations of the matmul they feed (needs fusion on).
    pub fn set_norm_q8(&mut self, which: NormQ8) {
        self.norm_q8 = which;
    }

    /// Most rows of a sliced `add_rms_norm` ([`NormQ8::Slices`]; 1 by default).
    pub fn set_norm_slice_rows(&mut self, rows: usize) {
        self.norm_slice_rows = rows;
    }

    /// Whether those norms write the fragment-ordered copy too where their matmul reads it
    /// (`*_rms_norm_q8f`) instead of leaving it to a `qmma_relayout` launch; the same bits.
    pub fn set_norm_q8f(&mut self, on: bool) {
        self.norm_q8f = on;
    }

    /// Whether a DynConv feeding an int8 matmul writes that matmul's int8 activations
    /// ([`fused::q8_out`]), for graphs compiled afterwards; the results are the same bits.
    pub fn set_conv_q8(&mut self, on: bool) {
        self.conv_q8 = on;
    }

    /// Whether a dp4a group writes its first output as the two `SliceLast` halves that are its
    /// only readers ([`fused`]), for graphs compiled afterwards; the same bits.
    pub fn set_split_out(&mut self, on: bool) {
        self.split_out = on;
    }

    /// Forces the 1-row int8 GEMV variants (NVIDIA), for graphs compiled afterwards: `plain` for
    /// plain and grouped projections of any size, `glu` for gate/up pairs (`None`: the default
    /// tile). Every variant gives the same bits; what `DELTASPEC_HIP_Q1*` set, for tests.
    pub fn set_q1(&mut self, plain: Option<kernels::Q1>, glu: Option<kernels::Q1>) {
        self.q1_plain = plain;
        self.q1_small = plain;
        self.q1_glu = Some(glu);
    }

    /// Whether a multi-split attention's combine writes the int8 rows of the gated o_proj it
    /// feeds (`attn_combine_q8g`), for runs afterwards; the same bits.
    pub fn set_combine_q8(&mut self, on: bool) {
        self.combine_q8 = on;
    }

    /// Whether a 1-row projection group runs the conv step that reads its first output (see
    /// [`fused`]), for graphs compiled afterwards.
    pub fn set_conv_fold(&mut self, on: bool) {
        self.conv_fold = on;
    }

    /// Which attention layers prepare q/k and write their caches in one launch (see
    /// [`fused`]), for graphs compiled afterwards.
    pub fn set_qk_prep(&mut self, mode: QkPrepMode) {
        self.qk_prep = mode;
    }

    /// Int8 GEMV tiles left unfused where their unfused kernel is wide (see [`fused`]), for
    /// graphs compiled afterwards.
    pub fn set_unfused_wide_tiles(&mut self, tiles: &'static [u32]) {
        self.unfused_wide_tiles = tiles;
    }

    /// Kernel launches issued so far (the difference over one run is that run's launch count).
    pub fn launches(&self) -> u64 {
        self.launches.get()
    }

    /// Uploads and readbacks of runs so far.
    pub fn run_io(&self) -> RunIo {
        self.io.get()
    }

    /// The launch counter itself, readable while a session borrows the backend.
    pub fn launch_counter(&self) -> std::rc::Rc<std::cell::Cell<u64>> {
        self.launches.clone()
    }

    fn load_module_for(&self, target: &str, source: &str) -> Result<Handle, String> {
        let blob = kernels::blobs()
            .iter()
            .find(|b| b.target == target && b.source == source)
            .ok_or_else(|| format!("no {source} kernels embedded for {target}"))?;
        if target.starts_with("sm_") {
            // The cubin where it is this GPU's own code (e.g. sm_90 on an H100/H200), else, or
            // if the driver refuses it, the PTX through the driver's JIT. DELTASPEC_HIP_PTX=1
            // forces the PTX (A/B runs).
            let own = self.drv.target().is_some_and(|t| t == target);
            let force_ptx = std::env::var("DELTASPEC_HIP_PTX").is_ok_and(|v| v == "1");
            if let Some(c) = blob.cubin.filter(|_| own && !force_ptx) {
                match self.drv.load_module(c) {
                    Ok(m) => return Ok(m),
                    Err(e) => eprintln!(
                        "hip: {source}.{target}.cubin did not load ({e}); JIT-compiling its PTX"
                    ),
                }
            }
            let mut text = blob.bytes.to_vec();
            text.push(0);
            self.drv.load_module(&text)
        } else {
            self.drv.load_module(blob.bytes)
        }
    }

    fn dev_err(&self, msg: impl Into<String>) -> BackendError {
        BackendError::Device {
            backend: self.label.clone(),
            msg: msg.into(),
        }
    }

    fn bad_handle(&self, what: String) -> BackendError {
        BackendError::BadHandle {
            backend: self.label.clone(),
            what,
        }
    }

    /// The kernel `name` from `hip/<source>.hip`, loading the module on first use.
    pub(crate) fn func(&self, source: &'static str, name: &str) -> Result<Handle, BackendError> {
        if let Some(f) = self.funcs.borrow().get(name) {
            return Ok(*f);
        }
        let loaded = self.modules.borrow().get(source).copied();
        let module = match loaded {
            Some(m) => m,
            None => {
                let m = self
                    .load_module_for(&self.target, source)
                    .map_err(|e| self.dev_err(e))?;
                self.modules.borrow_mut().insert(source, m);
                m
            }
        };
        let f = self
            .drv
            .function(module, name)
            .map_err(|e| self.dev_err(e))?;
        self.funcs.borrow_mut().insert(name.to_string(), f);
        Ok(f)
    }

    pub(crate) fn alloc(&self, bytes: usize) -> Result<Buf, BackendError> {
        let ptr = self.drv.alloc(bytes.max(4)).map_err(|e| self.dev_err(e))?;
        Ok(Buf { ptr, bytes })
    }

    fn free(&self, b: Buf) {
        // Freeing can only fail for a pointer the driver does not know, which would be a bug
        // here; there is nothing useful to do about it at release time.
        let _ = self.drv.free(b.ptr);
    }

    /// The quantized-activation buffer, at least `bytes`; growing it forgets what it held.
    pub(crate) fn qscratch(&self, bytes: usize) -> Result<DevPtr, BackendError> {
        let mut s = self.qscratch.borrow_mut();
        if let Some(b) = *s {
            if b.bytes >= bytes {
                return Ok(b.ptr);
            }
            self.before_regrow()?;
            self.drv.sync().map_err(|e| self.dev_err(e))?;
            self.free(b);
            *s = None;
            self.quantized.set(None);
            self.fragged.set(None);
        }
        let b = self.alloc(bytes)?;
        *s = Some(b);
        Ok(b.ptr)
    }

    /// A scratch buffer of at least `bytes` (valid until the next call).
    pub(crate) fn scratch(&self, bytes: usize) -> Result<DevPtr, BackendError> {
        let mut s = self.scratch.borrow_mut();
        if let Some(b) = *s {
            if b.bytes >= bytes {
                return Ok(b.ptr);
            }
            self.before_regrow()?;
            self.drv.sync().map_err(|e| self.dev_err(e))?;
            self.free(b);
            *s = None;
        }
        let b = self.alloc(bytes)?;
        *s = Some(b);
        Ok(b.ptr)
    }

    fn state_set(&self, id: StatesId) -> Result<&StateSet, BackendError> {
        self.states
            .get(id.0 as usize)
            .and_then(|s| s.as_ref())
            .ok_or_else(|| self.bad_handle(format!("states {}", id.0)))
    }

    fn state_buf(&self, id: StatesId, name: &str) -> Result<(Buf, usize), BackendError> {
        let set = self.state_set(id)?;
        let b = set
            .bufs
            .get(name)
            .ok_or_else(|| BackendError::MissingState {
                backend: self.label.clone(),
                name: name.into(),
            })?;
        Ok((*b, b.bytes / 4))
    }

    /// Launches every node of a run in order (`profiling`: timed one by one, by device events
    /// between the queued launches, or by host syncs around each with `DELTASPEC_PROFILE=sync`).
    fn launch_nodes(&self, env: &lower::Env, profiling: bool) -> Result<(), BackendError> {
        self.quantized.set(None);
        self.fragged.set(None);
        let fusion = &env.ex.fusion;
        if profiling && !crate::backend::profile::sync_mode() {
            return self.launch_nodes_timed(env);
        }
        for (i, node) in env.graph.nodes.iter().enumerate() {
            if !profiling {
                fused::node(self, env, fusion, i, node)?;
                continue;
            }
            self.drv.sync().map_err(|e| self.dev_err(e))?;
            let t = std::time::Instant::now();
            fused::node(self, env, fusion, i, node)?;
            self.drv.sync().map_err(|e| self.dev_err(e))?;
            crate::backend::profile::record(
                crate::backend::profile_key(env.graph, node),
                t.elapsed().as_secs_f64(),
            );
        }
        Ok(())
    }

    /// Launches every node with an event recorded after each, then reads the device time
    /// between consecutive events: what each node costs on the GPU while the queue stays full.
    /// A short node the host could not launch in time also carries the idle gap before it.
    /// (Events recorded inside a captured graph cannot be timed: the H200's driver answers
    /// `cuEventSynchronize: invalid argument`, so profiling launches directly.)
    fn launch_nodes_timed(&self, env: &lower::Env) -> Result<(), BackendError> {
        let n = env.graph.nodes.len();
        {
            let mut pool = self.profile_events.borrow_mut();
            while pool.len() < n + 1 {
                pool.push(self.drv.event_create().map_err(|e| self.dev_err(e))?);
            }
        }
        let pool = self.profile_events.borrow();
        let fusion = &env.ex.fusion;
        self.drv
            .event_record(pool[0])
            .map_err(|e| self.dev_err(e))?;
        for (i, node) in env.graph.nodes.iter().enumerate() {
            fused::node(self, env, fusion, i, node)?;
            self.drv
                .event_record(pool[i + 1])
                .map_err(|e| self.dev_err(e))?;
        }
        self.drv.sync().map_err(|e| self.dev_err(e))?;
        for (i, node) in env.graph.nodes.iter().enumerate() {
            let ms = self
                .drv
                .event_elapsed_ms(pool[i], pool[i + 1])
                .map_err(|e| self.dev_err(e))?;
            crate::backend::profile::record(
                crate::backend::profile_key(env.graph, node),
                f64::from(ms) / 1e3,
            );
        }
        Ok(())
    }

    /// Captures the node launches of a run into a graph, keeps it for `key` and launches it
    /// (which runs this step). On failure nothing of the run has executed: the caller launches
    /// directly.
    fn capture_and_launch(&self, env: &lower::Env, key: graphs::Key) -> Result<(), String> {
        // A capture is part of a graph's build (see `crate::backend::graph_builds`).
        crate::backend::note_graph_build();
        self.drv.capture_begin()?;
        self.capturing.set(true);
        let queued = self.launch_nodes(env, false);
        self.capturing.set(false);
        let ended = self.drv.capture_end();
        let exec = match (queued, ended) {
            (Ok(()), Ok(h)) => h,
            (Ok(()), Err(e)) => return Err(e),
            (Err(e), ended) => {
                if let Ok(h) = ended {
                    let _ = self.drv.graph_destroy(h);
                }
                return Err(e.to_string());
            }
        };
        self.graphs
            .borrow_mut()
            .store(self.drv.as_ref(), key, exec)?;
        self.drv.graph_launch(exec)
    }

    /// Makes the f32 view of every weight `exe` reads as plain values.
    fn prepare_f32_views(&mut self, exe: usize, weights: WeightsId) -> Result<(), BackendError> {
        let wi = weights.0 as usize;
        let ids = self.execs[exe].f32_weights.clone();
        let graph = self.execs[exe].graph.clone();
        for id in ids {
            let name = &graph.tensor(id).name;
            let ws = self.weights[wi].as_ref().expect("checked by the caller");
            if ws.f32_views.contains_key(name) {
                continue;
            }
            let w = &ws.tensors[name];
            let n: usize = w.shape.iter().product();
            let suffix = kernels::weight_kernel(w.dtype, *w.shape.last().unwrap_or(&1))
                .ok_or_else(|| BackendError::Unsupported {
                    backend: self.label.clone(),
                    op: "dequant".into(),
                    msg: format!("weight {name} has type {}", w.dtype),
                })?;
            let src = w.buf.ptr;
            let k = *w.shape.last().unwrap_or(&1);
            let row_bytes = kernels::dev_bytes_for(w.dtype, k).unwrap_or(0) as u64;
            let k = u32::try_from(k)
                .map_err(|_| self.dev_err(format!("weight {name}: rows of {k} values")))?;
            let out = self.alloc(n * 4)?;
            let (_, _, sub) = kernels::geometry(suffix);
            let items = (n / sub) as u64;
            lower::launch(
                self,
                "matmul",
                &format!("dequant_{suffix}"),
                [items.div_ceil(128) as u32, 1, 1],
                128,
                &[
                    lower::Arg::P(src),
                    lower::Arg::P(out.ptr),
                    lower::Arg::U64(items),
                    lower::Arg::U32(k),
                    lower::Arg::U64(row_bytes),
                ],
            )?;
            self.weights[wi]
                .as_mut()
                .expect("checked by the caller")
                .f32_views
                .insert(name.clone(), out);
        }
        Ok(())
    }
}

/// Op input positions read as plain f32 values (a weight there is dequantized once).
fn f32_weight_positions(op: &Op) -> &'static [usize] {
    match op {
        Op::RmsNorm { .. } | Op::ConvStep | Op::ConvTree => &[1],
        Op::AddRmsNorm { .. } | Op::GatedRmsNorm { .. } => &[2],
        Op::GatedDeltaNet(_) | Op::GatedDeltaNetTree(_) | Op::GatedDeltaNetLog(_) => &[3, 4],
        Op::GatedDeltaNetReplay { .. } => &[0, 1],
        _ => &[],
    }
}

impl Backend for HipBackend {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn upload_weights(&mut self, weights: &WeightStore) -> Result<WeightsId, BackendError> {
        let mut set = WeightSet::default();
        let res = self.upload_into(weights, &mut set);
        if let Err(e) = res {
            self.free_weight_set(&set);
            return Err(e);
        }
        self.weights.push(Some(set));
        Ok(WeightsId(self.weights.len() as u32 - 1))
    }

    fn alloc_states(&mut self, decls: &[StateDecl]) -> Result<StatesId, BackendError> {
        let mut bufs: HashMap<String, Buf> = HashMap::new();
        for d in decls {
            if bufs.contains_key(&d.name) {
                for b in bufs.values() {
                    self.free(*b);
                }
                return Err(self.dev_err(format!("state {} declared twice", d.name)));
            }
            let b = self.alloc(d.numel() * 4)?;
            self.drv
                .memset(b.ptr, 0, d.numel() * 4)
                .map_err(|e| self.dev_err(e))?;
            bufs.insert(d.name.clone(), b);
        }
        self.drv.sync().map_err(|e| self.dev_err(e))?;
        self.states.push(Some(StateSet {
            decls: decls.to_vec(),
            bufs,
        }));
        Ok(StatesId(self.states.len() as u32 - 1))
    }

    fn free_states(&mut self, states: StatesId) -> Result<(), BackendError> {
        let slot =
            self.states
                .get_mut(states.0 as usize)
                .ok_or_else(|| BackendError::BadHandle {
                    backend: self.label.clone(),
                    what: format!("states {}", states.0),
                })?;
        if let Some(set) = slot.take() {
            self.drv.sync().map_err(|e| self.dev_err(e))?;
            self.drop_graphs(|k| k.states == states.0);
            for b in set.bufs.values() {
                self.free(*b);
            }
        }
        Ok(())
    }

    fn read_state(&mut self, states: StatesId, name: &str) -> Result<Vec<f32>, BackendError> {
        let (b, n) = self.state_buf(states, name)?;
        let mut out = vec![0f32; n];
        self.drv
            .dtoh(bytemuck::cast_slice_mut(&mut out), b.ptr)
            .map_err(|e| self.dev_err(e))?;
        Ok(out)
    }

    fn write_state(
        &mut self,
        states: StatesId,
        name: &str,
        data: &[f32],
    ) -> Result<(), BackendError> {
        let (b, n) = self.state_buf(states, name)?;
        if n != data.len() {
            return Err(BackendError::BadInput {
                backend: self.label.clone(),
                name: name.into(),
                msg: format!("state holds {n} values, got {}", data.len()),
            });
        }
        self.drv
            .htod(b.ptr, bytemuck::cast_slice(data))
            .map_err(|e| self.dev_err(e))
    }

    fn copy_state_ranges(
        &mut self,
        states: StatesId,
        copies: &[super::StateCopy],
    ) -> Result<(), BackendError> {
        for c in copies {
            let (s, sn) = self.state_buf(states, &c.src)?;
            let (d, dn) = self.state_buf(states, &c.dst)?;
            c.check(sn, dn).map_err(|m| self.dev_err(m))?;
            if c.len > 0 {
                self.drv
                    .dtod(
                        d.ptr + (c.dst_off * 4) as DevPtr,
                        s.ptr + (c.src_off * 4) as DevPtr,
                        c.len * 4,
                    )
                    .map_err(|e| self.dev_err(e))?;
            }
        }
        self.drv.sync().map_err(|e| self.dev_err(e))
    }

    fn copy_states(&mut self, src: StatesId, dst: StatesId) -> Result<(), BackendError> {
        let s = self.state_set(src)?;
        let d = self.state_set(dst)?;
        if s.decls != d.decls {
            return Err(self.dev_err("copy_states between state sets of different layouts"));
        }
        for decl in &s.decls {
            let (from, to) = (s.bufs[&decl.name], d.bufs[&decl.name]);
            self.drv
                .dtod(to.ptr, from.ptr, from.bytes)
                .map_err(|e| self.dev_err(e))?;
        }
        self.drv.sync().map_err(|e| self.dev_err(e))
    }

    fn step_row_tiles(&self) -> Vec<usize> {
        if !self.int8_matmul {
            return Vec::new();
        }
        // The dp4a tiles below the matrix-core kernel's fewest rows, its tiles from there on
        // (`qmma_tile`; the dp4a kernels loop over 16-row passes where it is off).
        let mma = self.matrix_cores();
        let dp4a = kernels::QGEMV_TILES
            .iter()
            .map(|&t| t as usize)
            .filter(|&t| !mma || t < self.qmma_min_rows);
        let qmma = kernels::QMMA_TILES
            .iter()
            .map(|&t| t as usize)
            .filter(|&t| mma && t >= self.qmma_min_rows);
        dp4a.chain(qmma).collect()
    }

    fn compile(&mut self, graph: &Graph) -> Result<ExecId, BackendError> {
        crate::backend::note_graph_build();
        graph.validate()?;
        lower::check_supported(self, graph)?;
        let fusion = fused::plan(self, graph);
        let q8_out = fused::q8_out(self, graph);
        let plan = Plan::with_uses(graph, &fused::extra_uses(graph, &fusion));
        let mut slot_offset = Vec::with_capacity(plan.slot_bytes.len());
        let mut total = 0usize;
        for b in &plan.slot_bytes {
            slot_offset.push(total);
            total += align_up(*b);
        }
        let arena = self.alloc(total.max(ALIGN))?;
        let mut inputs = HashMap::new();
        for id in graph.inputs() {
            inputs.insert(id, self.alloc(graph.tensor(id).numel() * 4)?);
        }
        let mut consts = HashMap::new();
        let mut f32_weights = Vec::new();
        for (i, node) in graph.nodes.iter().enumerate() {
            if let Op::Rope(rp) = &node.op {
                // The CPU reference's `inv_freq` (YaRN-scaled if so), bit for bit.
                let f = rp.inv_freq();
                let b = self.alloc(f.len() * 4)?;
                self.drv
                    .htod(b.ptr, bytemuck::cast_slice(&f))
                    .map_err(|e| self.dev_err(e))?;
                consts.insert(i, b);
            }
            for &p in f32_weight_positions(&node.op) {
                let id = node.inputs[p];
                let t = graph.tensor(id);
                if t.kind == TensorKind::Weight
                    && t.dtype != DType::F32
                    && !f32_weights.contains(&id)
                {
                    f32_weights.push(id);
                }
            }
        }
        self.execs.push(Exec {
            graph: Arc::new(graph.clone()),
            plan,
            arena,
            slot_offset,
            inputs,
            consts,
            f32_weights,
            fusion,
            q8_out,
            launches: None,
        });
        Ok(ExecId(self.execs.len() as u32 - 1))
    }

    fn run(
        &mut self,
        exe: ExecId,
        weights: WeightsId,
        states: StatesId,
        inputs: &[(&str, HostData)],
    ) -> Result<Vec<(String, HostTensor)>, BackendError> {
        let ei = exe.0 as usize;
        if ei >= self.execs.len() {
            return Err(self.bad_handle(format!("exec {}", exe.0)));
        }
        if self
            .weights
            .get(weights.0 as usize)
            .and_then(|w| w.as_ref())
            .is_none()
        {
            return Err(self.bad_handle(format!("weights {}", weights.0)));
        }
        self.state_set(states)?;
        let graph = self.execs[ei].graph.clone();
        let bound = lower::bind_inputs(self, &graph, inputs)?;
        lower::check_weights(
            self,
            &graph,
            &self.weights[weights.0 as usize]
                .as_ref()
                .expect("checked")
                .tensors,
        )?;
        lower::check_states(self, &graph, self.state_set(states)?)?;
        lower::check_data(self, &graph, &bound)?;
        self.prepare_f32_views(ei, weights)?;

        let ex = &self.execs[ei];
        let io0 = self.io.get();
        let mut io = RunIo {
            runs: io0.runs + 1,
            ..io0
        };
        for (id, data) in &bound {
            let bytes: &[u8] = match data {
                HostData::F32(v) => bytemuck::cast_slice(v),
                HostData::I32(v) => bytemuck::cast_slice(v),
            };
            self.drv
                .htod(ex.inputs[id].ptr, bytes)
                .map_err(|e| self.dev_err(e))?;
            io.uploads += 1;
            io.upload_bytes += bytes.len() as u64;
        }
        if self.poison {
            self.drv
                .memset(ex.arena.ptr, 0xff, ex.arena.bytes)
                .map_err(|e| self.dev_err(e))?;
        }
        let ws = self.weights[weights.0 as usize].as_ref().expect("checked");
        let ss = self.state_set(states)?;
        let env = lower::Env {
            graph: &graph,
            ex,
            ws,
            ss,
            bound: &bound,
        };
        let profiling = crate::backend::profile::enabled();
        // Launches issued by this run (a replayed graph issues none; profiling never replays).
        let launched = self.launches.get();
        // Per-node timing syncs between nodes, which a captured graph cannot do.
        let plan = if !profiling && self.graphs_active() {
            let key = graphs::Key {
                exec: ei,
                weights: weights.0,
                states: states.0,
                shapes: attention::launch_key(self, &graph, &bound)?,
            };
            let plan = self.graphs.borrow_mut().plan(key.clone());
            Some((plan, key))
        } else {
            None
        };
        match plan {
            Some((graphs::Plan::Replay(h), _)) => {
                self.drv.graph_launch(h).map_err(|e| self.dev_err(e))?
            }
            Some((graphs::Plan::Capture, key)) => {
                if let Err(why) = self.capture_and_launch(&env, key) {
                    self.graphs.borrow_mut().disable(self.drv.as_ref(), &why);
                    self.launch_nodes(&env, false)?;
                }
            }
            Some((graphs::Plan::Direct, _)) | None => self.launch_nodes(&env, profiling)?,
        }

        let mut outs = Vec::with_capacity(graph.outputs.len());
        for (name, id) in &graph.outputs {
            let t = graph.tensor(*id);
            let root = graph.storage_root(*id);
            let nbytes = t.bytes();
            let data: Vec<u8> = match graph.tensor(root).kind {
                TensorKind::Input => match bound[&root] {
                    HostData::F32(v) => bytemuck::cast_slice(v).to_vec(),
                    HostData::I32(v) => bytemuck::cast_slice(v).to_vec(),
                },
                _ => {
                    let mut v = vec![0u8; nbytes];
                    self.drv
                        .dtoh(&mut v, env.ptr(*id))
                        .map_err(|e| self.dev_err(e))?;
                    io.readbacks += 1;
                    io.readback_bytes += nbytes as u64;
                    v
                }
            };
            outs.push((
                name.clone(),
                HostTensor::from_bytes(t.dtype, &t.shape, data),
            ));
        }
        // Surfaces launch failures even for graphs without device-resident outputs.
        self.drv.sync().map_err(|e| self.dev_err(e))?;
        self.io.set(io);
        let n = self.launches.get() - launched;
        if profiling && self.execs[ei].launches.is_none() {
            // Graph capture is off while profiling, so every launch went through `launch`.
            eprintln!(
                "hip: graph {ei} ({} nodes): {n} kernel launches, {} uploads ({} B), {} readbacks \
                 ({} B) per run{}",
                graph.nodes.len(),
                io.uploads - io0.uploads,
                io.upload_bytes - io0.upload_bytes,
                io.readbacks - io0.readbacks,
                io.readback_bytes - io0.readback_bytes,
                if self.fusion { "" } else { " (fusion off)" }
            );
            self.execs[ei].launches = Some(n);
        }
        Ok(outs)
    }

    fn kernel_stats(&mut self) -> Result<Vec<crate::backend::KernelStats>, BackendError> {
        let mut funcs: Vec<(String, Handle)> = self
            .funcs
            .borrow()
            .iter()
            .map(|(n, f)| (n.clone(), *f))
            .collect();
        funcs.sort_by(|a, b| a.0.cmp(&b.0));
        funcs
            .into_iter()
            .map(|(kernel, f)| {
                let attrs = self
                    .drv
                    .function_attributes(f)
                    .map_err(|e| self.dev_err(format!("{kernel}: {e}")))?;
                Ok(crate::backend::KernelStats {
                    kernel,
                    threads: None,
                    stats: attrs
                        .into_iter()
                        .map(|(n, v)| (n.to_string(), v as f64))
                        .collect(),
                })
            })
            .collect()
    }

    fn copy_bandwidth(&mut self, bytes: usize) -> Result<f64, BackendError> {
        let n = align_up(bytes.max(1 << 20));
        let a = self.alloc(n)?;
        let b = match self.alloc(n) {
            Ok(b) => b,
            Err(e) => {
                self.free(a);
                return Err(e);
            }
        };
        let result = (|| -> Result<f64, String> {
            self.drv.memset(a.ptr, 1, n)?;
            self.drv.dtod(b.ptr, a.ptr, n)?; // warm-up
            let (e0, e1) = (self.drv.event_create()?, self.drv.event_create()?);
            let mut best = f64::MAX;
            const REPS: usize = 5;
            for _ in 0..3 {
                self.drv.event_record(e0)?;
                for _ in 0..REPS {
                    self.drv.dtod(b.ptr, a.ptr, n)?;
                }
                self.drv.event_record(e1)?;
                let ms = self.drv.event_elapsed_ms(e0, e1)? as f64;
                best = best.min(ms / 1e3 / REPS as f64);
            }
            self.drv.event_destroy(e0)?;
            self.drv.event_destroy(e1)?;
            Ok(2.0 * n as f64 / best)
        })();
        let _ = self.drv.sync();
        self.free(a);
        self.free(b);
        result.map_err(|e| self.dev_err(e))
    }
}

impl Drop for HipBackend {
    fn drop(&mut self) {
        let _ = self.drv.sync();
        for e in self.profile_events.borrow_mut().drain(..) {
            let _ = self.drv.event_destroy(e);
        }
        self.graphs
            .borrow_mut()
            .drop_where(self.drv.as_ref(), |_| true);
        let mut bufs: Vec<Buf> = Vec::new();
        for set in self.weights.iter().flatten() {
            bufs.extend(set.owned_bufs());
        }
        for set in self.states.iter().flatten() {
            bufs.extend(set.bufs.values().copied());
        }
        for ex in &self.execs {
            bufs.push(ex.arena);
            bufs.extend(ex.inputs.values().copied());
            bufs.extend(ex.consts.values().copied());
        }
        bufs.extend(self.scratch.borrow().iter().copied());
        bufs.extend(self.qscratch.borrow().iter().copied());
        for b in bufs {
            self.free(b);
        }
    }
}
