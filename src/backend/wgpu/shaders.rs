//! WGSL generation: the kernel templates in `shaders/*.wgsl` specialised by constants, flags
//! and the weight types they decode.
//!
//! Templates use line directives: `//#if FLAG` / `//#if !FLAG`, `//#else`, `//#endif`
//! (nestable) select text by flag; `//#unroll VAR COUNT` … `//#end` (nestable, COUNT a literal
//! or a constant of the key) repeats its body with `%{VAR}` replaced by 0, 1, …; `//#dequant NAME` splices the decoder of the type bound to
//! the `array<u32>` buffer `NAME` (functions `NAME_dq4(row_byte_offset, element)`,
//! `NAME_dq1(element)` and the GEMV work item `NAME_item`). Every decoder is written once in
//! `shaders/dequant.wgsl`. `//#dequant8 NAME` adds the int8 work item `NAME_qitem` (section
//! "<type> q8", for [`INT8_TYPES`]). `//#include NAME` splices a shared file of [`INCLUDES`]. `@binding(#)` numbers a binding after the previous one, so flags
//! may add or drop bindings and the numbering stays dense. The generator prepends the params
//! uniform and the constants.

use super::decoders;
pub use super::decoders::{
    INT8_TYPES, Iq4Lookup, WEIGHT_TYPES, WeightKernels, item_elems, specialize, with_vec4_layouts,
};
use crate::tensor::DType;
use std::fmt::Write as _;

/// Every template, by name.
pub const FILES: &[(&str, &str)] = &[
    ("matmul", include_str!("../../../shaders/matmul.wgsl")),
    (
        "matmul_tiled",
        include_str!("../../../shaders/matmul_tiled.wgsl"),
    ),
    (
        "matmul_coop",
        include_str!("../../../shaders/matmul_coop.wgsl"),
    ),
    ("embed", include_str!("../../../shaders/embed.wgsl")),
    (
        "elementwise",
        include_str!("../../../shaders/elementwise.wgsl"),
    ),
    ("copy", include_str!("../../../shaders/copy.wgsl")),
    ("norm", include_str!("../../../shaders/norm.wgsl")),
    ("rope", include_str!("../../../shaders/rope.wgsl")),
    ("conv", include_str!("../../../shaders/conv.wgsl")),
    ("gdn", include_str!("../../../shaders/gdn.wgsl")),
    ("attention", include_str!("../../../shaders/attention.wgsl")),
    ("select", include_str!("../../../shaders/select.wgsl")),
    ("lse", include_str!("../../../shaders/lse.wgsl")),
    ("dflash2", include_str!("../../../shaders/dflash2.wgsl")),
    ("quantize", include_str!("../../../shaders/quantize.wgsl")),
    ("qkprep", include_str!("../../../shaders/qkprep.wgsl")),
    ("probe", include_str!("../../../shaders/probe.wgsl")),
];

/// Shared WGSL spliced into templates by `//#include NAME`.
pub const INCLUDES: &[(&str, &str)] = &[("q8block", include_str!("../../../shaders/q8block.wgsl"))];

/// Templates whose kernels write every workgroup-memory word before reading it: their
/// pipelines skip wgpu's zero-initialisation of workgroup memory (a store per word and
/// workgroup; the GEMV's reduction buffer is up to 16 KiB).
pub const WRITES_BEFORE_READS: &[&str] = &[
    "matmul",
    "matmul_tiled",
    "matmul_coop",
    "norm",
    "select",
    "lse",
    "copy",
    "gdn",
    "quantize",
    "qkprep",
    "probe",
];

/// Whether pipelines keep naga's runtime checks (index clamps, loop-bounding counters):
/// `DELTASPEC_WGPU_CHECKS=1`. Off by default: the shaders are ours and bounded by construction.
pub fn runtime_checks() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("DELTASPEC_WGPU_CHECKS").is_ok_and(|v| v != "0" && !v.is_empty())
    })
}

/// Widest input the int8 path takes: every width, so a verified or prefilled row equals its
/// 1-row decode bit for bit. Inputs wider than the largest GEMV bucket run as several GEMV
/// dispatches over one quantization; even so that beat the f32 tiled kernel on prompts
/// (H200, 8-layer 27B-shaped IQ4_XS, pp512: 3321 against 2429 tok/s, session 18).
pub const INT8_MAX_N: usize = usize::MAX;

/// Number of u32 params each dispatch gets (`pu(i)`, `pf(i)` in the kernels).
pub const PARAMS: usize = 32;

const HEADER: &str = "@group(0) @binding(0) var<uniform> P: array<vec4<u32>, 8>;
fn pu(i: u32) -> u32 { return P[i >> 2u][i & 3u]; }
fn pf(i: u32) -> f32 { return bitcast<f32>(pu(i)); }
";

/// One specialisation of a template.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShaderKey {
    pub file: &'static str,
    pub entry: &'static str,
    pub consts: Vec<(&'static str, u32)>,
    pub flags: Vec<&'static str>,
    pub dequant: Vec<(&'static str, DType)>,
}

impl ShaderKey {
    pub fn new(file: &'static str) -> Self {
        ShaderKey {
            file,
            entry: "main",
            consts: Vec::new(),
            flags: Vec::new(),
            dequant: Vec::new(),
        }
    }
    pub fn entry(mut self, e: &'static str) -> Self {
        self.entry = e;
        self
    }
    pub fn c(mut self, name: &'static str, v: u32) -> Self {
        self.consts.push((name, v));
        self
    }
    pub fn flag(mut self, f: &'static str) -> Self {
        self.flags.push(f);
        self
    }
    pub fn flag_if(self, on: bool, f: &'static str) -> Self {
        if on { self.flag(f) } else { self }
    }
    pub fn dq(mut self, buffer: &'static str, t: DType) -> Self {
        self.dequant.push((buffer, t));
        self
    }
}

/// The full WGSL source of a specialisation.
pub fn source(key: &ShaderKey) -> Result<String, String> {
    let tmpl = FILES
        .iter()
        .find(|(n, _)| *n == key.file)
        .map(|(_, s)| *s)
        .ok_or_else(|| format!("no shader template '{}'", key.file))?;
    let mut out = String::with_capacity(tmpl.len() + 4096);
    // WGSL wants `enable` directives before any declaration, so they go above the header.
    for line in tmpl.lines().filter(|l| l.starts_with("enable ")) {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(HEADER);
    for (name, v) in &key.consts {
        let _ = writeln!(out, "const {name}: u32 = {v}u;");
    }
    // Stack of (this branch active, any enclosing inactive).
    let mut stack: Vec<(bool, bool)> = Vec::new();
    let active = |s: &[(bool, bool)]| s.iter().all(|(on, _)| *on);
    // Binding 0 is the params uniform.
    let mut binding = 0u32;
    for (ln, line) in tmpl.lines().enumerate() {
        let t = line.trim();
        if let Some(cond) = t.strip_prefix("//#if ") {
            let cond = cond.trim();
            let (neg, name) = match cond.strip_prefix('!') {
                Some(n) => (true, n.trim()),
                None => (false, cond),
            };
            let on = key.flags.contains(&name) != neg;
            stack.push((on, false));
        } else if t == "//#else" {
            let top = stack
                .last_mut()
                .ok_or_else(|| format!("{}:{}: #else without #if", key.file, ln + 1))?;
            top.0 = !top.0;
        } else if t == "//#endif" {
            stack
                .pop()
                .ok_or_else(|| format!("{}:{}: #endif without #if", key.file, ln + 1))?;
        } else if let Some((int8, buf)) = t
            .strip_prefix("//#dequant ")
            .map(|b| (false, b))
            .or_else(|| t.strip_prefix("//#dequant8 ").map(|b| (true, b)))
        {
            if active(&stack) {
                let buf = buf.trim();
                let (_, ty) = key
                    .dequant
                    .iter()
                    .find(|(b, _)| *b == buf)
                    .ok_or_else(|| format!("{}: no weight type given for {buf}", key.file))?;
                if int8 {
                    decoders::splice_dequant8(key, buf, *ty, &mut out)?;
                } else {
                    decoders::splice_dequant(key, buf, *ty, &mut out)?;
                }
            }
        } else if let Some(name) = t.strip_prefix("//#include ") {
            if active(&stack) {
                let name = name.trim();
                let (_, text) = INCLUDES
                    .iter()
                    .find(|(n, _)| *n == name)
                    .ok_or_else(|| format!("{}: no include '{name}'", key.file))?;
                out.push_str(text);
            }
        } else if active(&stack) && !line.starts_with("enable ") {
            let mut line = line.to_string();
            if line.contains("@binding(#)") {
                binding += 1;
                line = line.replace("@binding(#)", &format!("@binding({binding})"));
            }
            if line.contains("@binding(") {
                line = decoders::vec4_binding(key, line);
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    if !stack.is_empty() {
        return Err(format!("{}: unterminated #if", key.file));
    }
    let lines: Vec<&str> = out.lines().collect();
    let mut unrolled = String::with_capacity(out.len() * 2);
    unroll(&lines, key, &mut unrolled)?;
    Ok(unrolled)
}

/// The trip count of `//#unroll VAR COUNT`: a literal or one of the key's constants.
fn unroll_count(count: &str, key: &ShaderKey) -> Result<u32, String> {
    count
        .parse()
        .ok()
        .or_else(|| key.consts.iter().find(|(n, _)| *n == count).map(|c| c.1))
        .ok_or_else(|| format!("{}: unknown unroll count '{count}'", key.file))
}

/// Expands `//#unroll VAR COUNT` … `//#end` blocks (nestable): the body repeated COUNT times
/// with `%{VAR}` replaced by 0, 1, …. Naga emits no unroll hints and drivers may keep a loop
/// whose body indexes function-local arrays (which then live in memory, not registers);
/// unrolled copies index them with constants, and every load of the copies sits in one block.
fn unroll(lines: &[&str], key: &ShaderKey, out: &mut String) -> Result<(), String> {
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim();
        let Some(spec) = t.strip_prefix("//#unroll ") else {
            if t == "//#end" {
                return Err(format!("{}: //#end without //#unroll", key.file));
            }
            out.push_str(lines[i]);
            out.push('\n');
            i += 1;
            continue;
        };
        let mut words = spec.split_whitespace();
        let (var, count) = match (words.next(), words.next()) {
            (Some(v), Some(c)) => (v, unroll_count(c, key)?),
            _ => return Err(format!("{}: malformed '{t}'", key.file)),
        };
        // The matching //#end.
        let mut depth = 0;
        let mut end = None;
        for (j, l) in lines.iter().enumerate().skip(i + 1) {
            let l = l.trim();
            if l.starts_with("//#unroll ") {
                depth += 1;
            } else if l == "//#end" {
                if depth == 0 {
                    end = Some(j);
                    break;
                }
                depth -= 1;
            }
        }
        let end = end.ok_or_else(|| format!("{}: unterminated '{t}'", key.file))?;
        let token = format!("%{{{var}}}");
        for k in 0..count {
            let body: Vec<String> = lines[i + 1..end]
                .iter()
                .map(|l| l.replace(&token, &k.to_string()))
                .collect();
            let body: Vec<&str> = body.iter().map(String::as_str).collect();
            unroll(&body, key, out)?;
        }
        i = end + 1;
    }
    Ok(())
}

/// Input-row buckets of the GEMV kernel (`NT`): the smallest at least N is used; wider
/// inputs take the tiled kernel.
pub const GEMV_BUCKETS: &[u32] = &[1, 2, 4, 8];
/// Input-row tiles of the tiled kernel (`TN`): the smallest at least N, else the largest.
pub const TILE_N: &[u32] = &[16, 32, 64];
/// Workgroup sizes the GEMV picks from.
pub const GEMV_WGS: &[u32] = &[256, 128, 64, 32];

/// How a GEMV dispatch is shaped: input rows per pass, weight rows per workgroup, threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemvShape {
    pub nt: u32,
    pub r: u32,
    pub wg: u32,
    /// Int8 items per lane and round whose loads issue together (per weight row).
    pub u: u32,
}

fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok()?.parse().ok()
}

/// The GEMV shape for `n` input rows (≤ the largest bucket) and `items` work items per row.
/// Four weight rows per workgroup while the activations of a pass fit in registers with them
/// (N ≤ 2), two beyond. Threads: the largest workgroup whose last round over the items is at
/// least 7/8 busy, so K = 5120 (160 items of 32) takes 32 threads and K = 17408 takes 64.
/// Int8 rounds take U = 2 items per lane (2R items' loads in flight).
/// `DELTASPEC_WGPU_GEMV_WG`, `DELTASPEC_WGPU_GEMV_ROWS` and `DELTASPEC_WGPU_GEMV_UNROLL`
/// (1, 2, 4) override them (tuning runs).
pub fn gemv_shape(n: usize, items: usize) -> GemvShape {
    let nt = GEMV_BUCKETS
        .iter()
        .copied()
        .find(|b| *b as usize >= n)
        .unwrap_or(8);
    let r = env_u32("DELTASPEC_WGPU_GEMV_ROWS")
        .filter(|r| [2, 4, 8].contains(r))
        .unwrap_or(if nt <= 2 { 4 } else { 2 });
    let items = items.max(1);
    let wg = env_u32("DELTASPEC_WGPU_GEMV_WG")
        .filter(|w| GEMV_WGS.contains(w))
        .unwrap_or_else(|| {
            GEMV_WGS
                .iter()
                .copied()
                .find(|&w| items.div_ceil(w as usize) * w as usize * 7 <= items * 8)
                .unwrap_or(32)
        });
    // Items in flight per lane: U × R. U = 1 (R items) measured fastest on the H200 (27B IQ4_XS
    // decode 23.6 ms against 26.7 with U = 2, 2026-12-03).
    let u = env_u32("DELTASPEC_WGPU_GEMV_UNROLL")
        .filter(|u| [1, 2, 4].contains(u))
        .unwrap_or(1);
    GemvShape { nt, r, wg, u }
}

/// [`gemv_shape`] for a dispatch of `rows` weight rows in all (output rows of a gate/up
/// pair). `DELTASPEC_WGPU_GEMV_FEW=w<WG>r<R>u<U>` (e.g. `w128r4u1`) overrides the shape of
/// dispatches of at most `DELTASPEC_WGPU_GEMV_FEW_ROWS` (default 8192) rows: the 5120-row
/// matrices of the 27B model (down, ssm_out, o_proj) fill the GPU with few warps in the
/// default shape. R applies only to 1- and 2-row inputs. An A/B switch: the workgroup size
/// sets a row's summation order, which depends only on the weight shape, never on N.
pub fn gemv_shape_for(n: usize, items: usize, rows: usize) -> GemvShape {
    let mut s = gemv_shape(n, items);
    // Few weight rows: two per workgroup, so the GPU holds twice the workgroups. The H200's
    // 5120-row down / out_proj GEMVs took 12-13 % less time than with four (2026-12-04, 8-layer
    // 27B IQ4_XS step 2.00 against 2.07 ms; the wider GEMVs gained nothing).
    if s.nt <= 2 && rows <= gemv_few_rows() && env_u32("DELTASPEC_WGPU_GEMV_ROWS").is_none() {
        s.r = 2;
    }
    if let Some((wg, r, u)) = gemv_few()
        && rows <= gemv_few_rows()
    {
        s.wg = wg;
        s.u = u;
        if s.nt <= 2 {
            s.r = r;
        }
    }
    s
}

/// The parsed `DELTASPEC_WGPU_GEMV_FEW` override `(WG, R, U)`, if set and valid.
fn gemv_few() -> Option<(u32, u32, u32)> {
    static V: std::sync::OnceLock<Option<(u32, u32, u32)>> = std::sync::OnceLock::new();
    *V.get_or_init(|| parse_gemv_few(&std::env::var("DELTASPEC_WGPU_GEMV_FEW").ok()?))
}

fn gemv_few_rows() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("DELTASPEC_WGPU_GEMV_FEW_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(8192)
    })
}

/// `w<WG>r<R>u<U>` with WG in [`GEMV_WGS`], R in 2, 4, 8 and U in 1, 2, 4.
pub fn parse_gemv_few(v: &str) -> Option<(u32, u32, u32)> {
    let rest = v.strip_prefix('w')?;
    let (wg, rest) = rest.split_once('r')?;
    let (r, u) = rest.split_once('u')?;
    let (wg, r, u) = (wg.parse().ok()?, r.parse().ok()?, u.parse().ok()?);
    (GEMV_WGS.contains(&wg) && [2, 4, 8].contains(&r) && [1, 2, 4].contains(&u))
        .then_some((wg, r, u))
}

/// The GEMV kernel for weights of type `t`: `segs` weights (1..=4) into as many outputs, or a
/// gate/up pair with SwiGLU folded in (`pair`, two weights, one output).
pub fn gemv_key(t: DType, s: GemvShape, sg: bool, xv4: bool, segs: usize, pair: bool) -> ShaderKey {
    let mut k = ShaderKey::new("matmul")
        .c("WG", s.wg)
        .c("R", s.r)
        .c("RW", if pair { s.r / 2 } else { s.r })
        .c("NT", s.nt)
        .c("U", s.u)
        .c("RNT", s.r * s.nt)
        .c("SEGS", segs.max(1) as u32)
        .flag_if(sg, "SG")
        .flag_if(xv4, "XV4")
        .flag_if(pair, "PAIR");
    for (i, (flag, buf)) in [("", "W0"), ("SEG2", "W1"), ("SEG3", "W2"), ("SEG4", "W3")]
        .into_iter()
        .enumerate()
        .take(segs.max(1))
    {
        if i > 0 {
            k = k.flag(flag);
        }
        k = k.dq(buf, t);
    }
    k
}

/// Vectors per thread a norm holds in registers (wider rows take the looping form).
pub const NORM_NV_MAX: usize = 8;

/// A norm kernel (`mode`: RMS, ADD, GATED or L2) for rows of `d` values: vec4 when `d` allows,
/// a workgroup no wider than a row's vectors need (32..256), the register form (REG) when a
/// row is at most [`NORM_NV_MAX`] vectors per thread.
pub fn norm_key(mode: &'static str, d: usize, subgroups: bool) -> ShaderKey {
    let v4 = d.is_multiple_of(4);
    let vecs = if v4 { d / 4 } else { d };
    let wg = vecs.next_power_of_two().clamp(32, 256);
    let nv = vecs.div_ceil(wg).max(1);
    let key = ShaderKey::new("norm")
        .c("WG", wg as u32)
        .flag(mode)
        .flag_if(v4, "V4")
        .flag_if(subgroups, "SG");
    if nv <= NORM_NV_MAX {
        key.c("NV", nv as u32).flag("REG")
    } else {
        key
    }
}

/// Rows up to which a register-form norm runs NV workgroups per row (PART, see norm.wgsl):
/// decode and small verify widths, where one workgroup per row leaves most of the GPU idle.
pub const NORM_PART_MAX_ROWS: usize = 16;

/// `key` (a [`norm_key`]) in the PART form when it applies to `rows` rows: the key and the
/// workgroups per row. `DELTASPEC_WGPU_NORM_PART=0`: one workgroup per row always (A/B runs;
/// the outputs are the same bits either way).
pub fn norm_part(key: ShaderKey, rows: usize) -> (ShaderKey, usize) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| !std::env::var("DELTASPEC_WGPU_NORM_PART").is_ok_and(|v| v == "0"));
    let nv = key
        .consts
        .iter()
        .find(|(n, _)| *n == "NV")
        .map(|c| c.1 as usize);
    match nv {
        Some(nv) if on && nv > 1 && rows <= NORM_PART_MAX_ROWS && key.flags.contains(&"REG") => {
            (key.flag("PART"), nv)
        }
        _ => (key, 1),
    }
}

/// Whether a norm over rows of `d` can also write the int8 GEMV activations
/// ([`norm_q8_key`]): vec4 rows of whole 32-value blocks in the register form.
pub fn norm_q8_applies(mode: &str, d: usize) -> bool {
    mode != "L2" && d.is_multiple_of(32) && d / 4 <= 256 * NORM_NV_MAX
}

/// [`norm_key`] that also writes y quantized for the int8 GEMV (XQ, XD after Y).
pub fn norm_q8_key(mode: &'static str, d: usize, subgroups: bool) -> ShaderKey {
    norm_key(mode, d, subgroups).flag("Q8")
}

/// The tiled kernel's input-row tile for `n` rows.
pub fn tile_n(n: usize) -> u32 {
    TILE_N
        .iter()
        .copied()
        .find(|b| *b as usize >= n)
        .unwrap_or(64)
}

pub fn tiled_key(t: DType, tn: u32) -> ShaderKey {
    ShaderKey::new("matmul_tiled").c("TN", tn).dq("W", t)
}

/// Output tile (both sides) of the cooperative-matrix kernel.
pub const COOP_TILE: usize = 64;

/// Narrowest input on the cooperative-matrix kernel, where the device has it (measured at 512
/// rows only). Verify steps never take it, at any width ([`crate::graph::Graph::rows_match_decode`]):
/// their rows must equal decode's int8 rows bit for bit. So prompts and drafters use it.
pub const COOP_MIN_N: usize = 65;

/// The cooperative-matrix kernel over weights of type `t` (`shaders/matmul_coop.wgsl`).
pub fn coop_key(t: DType) -> ShaderKey {
    // SG: the kernel uses subgroup builtins (validation and SPIR-V capabilities read it).
    ShaderKey::new("matmul_coop").flag("SG").dq("W", t)
}

/// A representative set of every template's variants (all flags, every weight type in every
/// weight slot), for validation without a GPU.
pub fn all_variants(subgroups: bool) -> Vec<ShaderKey> {
    let mut v = Vec::new();
    for &t in WEIGHT_TYPES {
        for &nb in GEMV_BUCKETS {
            for sg in [false, true] {
                if sg && !subgroups {
                    continue;
                }
                for xv4 in [false, true] {
                    let shape = gemv_shape(nb as usize, 160);
                    v.push(gemv_key(t, shape, sg, xv4, 1, false));
                }
                let shape = gemv_shape(nb as usize, 544);
                for segs in 2..=4 {
                    v.push(gemv_key(t, shape, sg, true, segs, false));
                }
                v.push(gemv_key(t, shape, sg, true, 2, true));
                v.push(gemv_key(t, shape, sg, true, 1, false).flag("XGATE"));
                v.push(gemv_key(t, shape, sg, true, 3, false).flag("SPLIT"));
                v.push(
                    gemv_key(t, shape, sg, true, 4, false)
                        .flag("CONV")
                        .dq("CW", DType::F16),
                );
                if INT8_TYPES.contains(&t) {
                    v.push(
                        gemv_key(t, shape, sg, true, 4, false)
                            .flag("Q8")
                            .flag("CONV")
                            .dq("CW", DType::F32),
                    );
                    for segs in 1..=4 {
                        v.push(gemv_key(t, shape, sg, true, segs, false).flag("Q8"));
                    }
                    v.push(gemv_key(t, shape, sg, true, 2, true).flag("Q8"));
                    v.push(
                        gemv_key(t, shape, sg, true, 2, true)
                            .flag("Q8")
                            .flag("QOUT"),
                    );
                    v.push(
                        gemv_key(t, shape, sg, true, 3, false)
                            .flag("SPLIT")
                            .flag("Q8"),
                    );
                }
            }
        }
        for &tn in TILE_N {
            v.push(tiled_key(t, tn));
        }
        if subgroups {
            v.push(coop_key(t));
        }
        v.push(ShaderKey::new("embed").dq("W", t));
        for mode in ["RMS", "ADD", "GATED"] {
            for (d, sg) in [(5120, true), (67, false), (128, subgroups), (9000, false)] {
                v.push(norm_key(mode, d, sg).dq("W", t));
            }
            for (d, sg) in [(5120, true), (96, false), (8192, subgroups)] {
                v.push(norm_q8_key(mode, d, sg).dq("W", t));
                v.push(norm_q8_key(mode, d, sg).flag("PART").dq("W", t));
            }
            v.push(norm_key(mode, 5120, true).flag("PART").dq("W", t));
        }
        v.push(ShaderKey::new("conv").dq("W", t));
        v.push(ShaderKey::new("conv").flag("TREE").dq("W", t));
        v.push(gdn_key(64, gdn_shape(64, 64, 0), t, DType::F32));
        v.push(gdn_key(64, gdn_shape(64, 64, 0), DType::F32, t));
    }
    for (d, sg) in [(5120, true), (67, false), (9000, true)] {
        v.push(norm_key("L2", d, sg));
    }
    for (dk, dv) in [(16, 8), (24, 40), (128, 128), (256, 128)] {
        for sg_min in [0, 32] {
            let s = gdn_shape(dk, dv, if subgroups { sg_min } else { 0 });
            let f32 = DType::F32;
            v.push(gdn_key(dk as u32, s, f32, f32));
            v.push(gdn_key(dk as u32, s, f32, f32).flag("TREE"));
        }
    }
    for op in ["OP_ADD", "OP_SIGMOID_MUL", "OP_SWIGLU"] {
        v.push(ShaderKey::new("elementwise").flag(op));
    }
    v.push(ShaderKey::new("copy"));
    v.push(ShaderKey::new("copy").flag("BULK"));
    v.push(ShaderKey::new("probe").c("WG", 64));
    v.push(ShaderKey::new("probe").c("WG", 32).flag("EXTRA"));
    v.push(ShaderKey::new("probe").c("WG", 32).flag("SMEM").flag("BIG"));
    v.push(ShaderKey::new("quantize"));
    for tree in [false, true] {
        for (fin, entry) in [(true, "attn"), (false, "combine")] {
            v.push(attn_key(64, fin, entry, tree).flag("Q8"));
        }
    }
    for hd in [16, 100, 256] {
        v.push(qk_prep_key(hd, DType::F32, DType::F16));
    }
    v.push(ShaderKey::new("quantize").flag("XGATE"));
    v.push(ShaderKey::new("rope"));
    v.push(
        ShaderKey::new("dflash2")
            .entry("dyn_conv")
            .dq("B", DType::F32),
    );
    v.push(ShaderKey::new("dflash2").entry("walk").flag("WALK"));
    // Every weight kernel again in the layouts of its types.
    let relaid: Vec<DType> = super::relayout::LAYOUTS.iter().map(|l| l.dtype).collect();
    let laid: Vec<ShaderKey> = v
        .iter()
        .map(|k| with_vec4_layouts(k.clone(), &relaid))
        .filter(|k| {
            k.flags
                .iter()
                .any(|f| super::relayout::LAYOUTS.iter().any(|l| l.flag == *f))
        })
        .collect();
    v.extend(laid);
    // The int8 IQ4_XS kernels with the other grid lookups.
    for lookup in [Iq4Lookup::Alu, Iq4Lookup::Mix] {
        let w = WeightKernels {
            relaid: Vec::new(),
            iq4_lookup: lookup,
        };
        let more: Vec<ShaderKey> = v
            .iter()
            .filter(|k| k.flags.contains(&"Q8") && k.dequant.iter().any(|d| d.1 == DType::Iq4Xs))
            .map(|k| specialize(k.clone(), &w))
            .collect();
        v.extend(more);
    }
    for hd in [16, 64, 100, 256] {
        for fin in [false, true] {
            for e in ["write_kv", "attn", "combine"] {
                for tree in [false, true] {
                    v.push(attn_key(hd, fin, e, tree));
                }
            }
            v.push(attn_key(hd, fin, "attn_nc", false));
        }
    }
    for merge in [false, true] {
        for chunk in [SELECT_CHUNK, 1 << 20] {
            v.push(select_key(merge, chunk));
        }
    }
    v.push(ShaderKey::new("lse"));
    v
}

/// How a gated-delta-net dispatch is shaped (see `shaders/gdn.wgsl`): state columns per
/// workgroup, lanes per column (a power of two dividing dk), and whether the lanes of a column
/// combine their sums with subgroup shuffles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnShape {
    pub cols: u32,
    pub split: u32,
    pub sg: bool,
}

/// The gated-delta-net shape for key dim `dk`, value dim `dv` on a device whose subgroups have
/// at least `sg_min` lanes (0: no subgroups). Four lanes per column (dk = 128: 32 state values
/// in registers per lane, as the hip kernel) and 16 columns per workgroup (64 lanes; 27B:
/// 48 × 8 workgroups). Shuffles need every column's lanes in one subgroup: sg_min ≥ split.
/// `DELTASPEC_WGPU_GDN_SPLIT` (1..32) and `DELTASPEC_WGPU_GDN_COLS` (1..256) override them
/// (tuning runs).
pub fn gdn_shape(dk: usize, dv: usize, sg_min: u32) -> GdnShape {
    let mut split = env_u32("DELTASPEC_WGPU_GDN_SPLIT")
        .filter(|s| (1..=32).contains(s))
        .map_or(4, |s| 1 << s.ilog2());
    while split > 1 && !dk.is_multiple_of(split as usize) {
        split /= 2;
    }
    let want = env_u32("DELTASPEC_WGPU_GDN_COLS")
        .filter(|c| (1..=256).contains(c))
        .unwrap_or(16);
    // At most 256 lanes (WebGPU's default limit), no more columns than the head has.
    let cols = want.min(256 / split).min(dv.max(1) as u32);
    GdnShape {
        cols,
        split,
        sg: sg_min >= split,
    }
}

/// Tokens a gated-delta-net workgroup prepares at once (`CH`): the norms pass gives each of them
/// one column's lanes, and the staged q and k (2 · CH · dk floats) stay within 8 KiB of the
/// 16 KiB of workgroup memory WebGPU guarantees.
pub fn gdn_chunk(dk: u32, s: GdnShape) -> u32 {
    8.min(s.cols).min(2048 / dk.max(1)).max(1)
}

pub fn gdn_key(dk: u32, s: GdnShape, sa: DType, dt: DType) -> ShaderKey {
    ShaderKey::new("gdn")
        .c("WG", s.cols * s.split)
        .c("CH", gdn_chunk(dk, s))
        .c("COLS", s.cols)
        .c("SPLIT", s.split)
        .c("DK", dk)
        .c("R", dk / s.split)
        .flag_if(s.sg, "SG")
        .dq("SA", sa)
        .dq("DT", dt)
}

pub const ATTN_WG: u32 = 64;

/// `tree`: the AttentionTree form (a mask binding after the others).
pub fn attn_key(hd: u32, fin: bool, entry: &'static str, tree: bool) -> ShaderKey {
    ShaderKey::new("attention")
        .entry(entry)
        .c("WG", ATTN_WG)
        .c("HD_MAX", hd.max(1))
        .c("HD_PT", hd.div_ceil(ATTN_WG).max(1))
        .c("NC_Q", ATTN_NC_Q)
        .c("NC_KT", ATTN_NC_KT)
        .flag_if(fin, "FINAL")
        .flag_if(tree, "TREE")
}

/// Elements of a row one first-pass `select` workgroup takes (at most 256 parts a row).
pub const SELECT_CHUNK: usize = 1024;
/// Elements a `select` thread holds in registers (`E`).
const SELECT_E: u32 = 16;

/// `select.wgsl` for a pass over `chunk` elements a workgroup: the first pass with 64 threads
/// (`chunk` ≤ [`SELECT_CHUNK`] fits its registers), the merge with 256 (4096 candidates do);
/// wider chunks re-read their elements every round.
pub fn select_key(merge: bool, chunk: usize) -> ShaderKey {
    let wg = if merge { 256 } else { 64 };
    ShaderKey::new("select")
        .c("WG", wg)
        .c("E", SELECT_E)
        .flag_if(chunk <= (wg * SELECT_E) as usize, "REG")
        .flag_if(merge, "MERGE")
}

/// Query vectors and key rows of one `attn_nc` tile (`attention.wgsl`'s `NC_Q`, `NC_KT`).
pub const ATTN_NC_Q: u32 = 16;
const ATTN_NC_KT: u32 = 16;

/// Whether `attention.wgsl`'s `attn_nc` takes heads of `hd` within `wg_mem` bytes of workgroup
/// memory: its value pass needs `hd ≤ 256` threads a query, its tiles
/// `(NC_Q + NC_KT)·4·NC_HP + NC_Q·NC_KT + 3·NC_Q` floats, NC_HP = ⌈hd / 4⌉ made odd.
pub fn attn_nc_fits(hd: usize, wg_mem: u32) -> bool {
    let (q, kt) = (ATTN_NC_Q as usize, ATTN_NC_KT as usize);
    let floats = (q + kt) * 4 * (hd.div_ceil(4) | 1) + q * kt + 3 * q;
    (1..=256).contains(&hd) && floats * 4 <= wg_mem as usize
}

/// The attention q/k preparation (`qkprep.wgsl`) for heads of `hd` and norm weights of
/// types `qw`, `kw`.
pub fn qk_prep_key(hd: u32, qw: DType, kw: DType) -> ShaderKey {
    ShaderKey::new("qkprep")
        .c("NE", hd.div_ceil(64).max(1))
        .c("HD_MAX", hd.max(1))
        .dq("QW", qw)
        .dq("KW", kw)
}

/// Parses and validates a source with naga; returns the module for reflection.
pub fn validate(src: &str, subgroups: bool) -> Result<naga::Module, String> {
    validate_info(src, subgroups).map(|(m, _)| m)
}

/// [`validate`], also returning naga's analysis (what its SPIR-V writer takes).
pub fn validate_info(
    src: &str,
    subgroups: bool,
) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    use naga::valid::{Capabilities, ValidationFlags, Validator};
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let mut caps = Capabilities::empty();
    if subgroups {
        caps |= Capabilities::SUBGROUP;
    }
    // Only the cooperative-matrix kernel enables these (its pipelines are built only on
    // devices that have both).
    if src.starts_with("enable ") {
        caps |= Capabilities::SHADER_FLOAT16 | Capabilities::COOPERATIVE_MATRIX;
    }
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| e.emit_to_string(src))?;
    Ok((module, info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_and_variant_validates() {
        let variants = all_variants(true);
        for (file, _) in FILES {
            assert!(
                variants.iter().any(|k| k.file == *file),
                "{file}.wgsl has no variant under test"
            );
        }
        let mut failures = Vec::new();
        for key in &variants {
            let sg = key.flags.contains(&"SG");
            match source(key).and_then(|s| validate(&s, sg).map(|_| ())) {
                Ok(()) => {}
                Err(e) => failures.push(format!("{key:?}:\n{e}")),
            }
        }
        assert!(
            failures.is_empty(),
            "{} invalid variants:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    #[test]
    fn unroll_expands_nested_blocks_with_constant_counts() {
        let key = ShaderKey::new("matmul").c("R", 2);
        let src = [
            "a",
            "//#unroll r R",
            "  //#unroll n 2",
            "x[%{r}][%{n}u];",
            "//#end",
            "y%{r}",
            "//#end",
            "b",
        ];
        let mut out = String::new();
        unroll(&src, &key, &mut out).unwrap();
        let want = "a\nx[0][0u];\nx[0][1u];\ny0\nx[1][0u];\nx[1][1u];\ny1\nb\n";
        assert_eq!(out, want);
        for bad in [
            &["//#unroll r R"][..],
            &["//#end"],
            &["//#unroll r Q", "//#end"],
        ] {
            assert!(unroll(bad, &key, &mut String::new()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_shader_file_is_a_template() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("wgsl") {
                continue;
            }
            let stem = path.file_stem().unwrap().to_str().unwrap();
            assert!(
                stem == "dequant"
                    || FILES.iter().any(|(n, _)| *n == stem)
                    || INCLUDES.iter().any(|(n, _)| *n == stem),
                "{} is not registered in FILES, so no variant of it is validated",
                path.display()
            );
        }
    }

    /// `dot4I8Packed` becomes SPIR-V's OpSDot where the device has integer dot products (wgpu
    /// passes those capabilities when the adapter has VK_KHR_shader_integer_dot_product) and
    /// naga's shift-and-multiply polyfill where it lacks them: the int8 GEMV needs no feature
    /// check of its own. Lavapipe runs the OpSDot form (tests/wgpu_gemv.rs).
    #[test]
    fn item_sizes_are_read_from_the_sections() {
        assert_eq!(item_elems(DType::Iq4Xs), 32);
        assert_eq!(item_elems(DType::Q8_0), 32);
        assert_eq!(item_elems(DType::Q6K), 32);
        assert_eq!(item_elems(DType::F16), 4);
        assert_eq!(item_elems(DType::Q4_0), 4);
        let s = gemv_shape(1, 160);
        assert_eq!((s.nt, s.r, s.wg), (1, 4, 32));
        let s = gemv_shape(3, 544);
        assert_eq!((s.nt, s.r, s.wg), (4, 2, 64));
        assert_eq!(gemv_shape(8, 4096).wg, 256);
        assert_eq!(parse_gemv_few("w128r4u1"), Some((128, 4, 1)));
        assert_eq!(parse_gemv_few("w256r2u2"), Some((256, 2, 2)));
        assert_eq!(parse_gemv_few("w100r4u1"), None);
        assert_eq!(parse_gemv_few("w64r3u1"), None);
        assert_eq!(parse_gemv_few("128"), None);
    }

    #[test]
    fn int8_dot_products_lower_with_and_without_the_capability() {
        use naga::back::spv::{self, Capability};
        const OP_SDOT: u32 = 4450;
        for t in INT8_TYPES {
            let key = gemv_key(*t, gemv_shape(3, 160), false, true, 2, true).flag("Q8");
            let module = validate(&source(&key).unwrap(), false).unwrap();
            let info = naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::empty(),
            )
            .validate(&module)
            .unwrap();
            let base = [Capability::Shader];
            let dot = [
                Capability::DotProduct,
                Capability::DotProductInput4x8BitPacked,
            ];
            for with_dot in [false, true] {
                let caps: naga::FastHashSet<Capability> = base
                    .iter()
                    .chain(if with_dot { &dot[..] } else { &[] })
                    .copied()
                    .collect();
                let opts = spv::Options {
                    lang_version: (1, 3),
                    capabilities: Some(caps),
                    ..Default::default()
                };
                let words = spv::write_vec(&module, &info, &opts, None)
                    .unwrap_or_else(|e| panic!("{t} (dot products: {with_dot}): {e}"));
                // Instructions start after the 5-word header: (word count << 16) | opcode.
                let mut sdot = 0;
                let mut i = 5;
                while i < words.len() {
                    let n = (words[i] >> 16) as usize;
                    sdot += usize::from(words[i] & 0xffff == OP_SDOT);
                    i += n.max(1);
                }
                assert_eq!(sdot > 0, with_dot, "{t}: {sdot} OpSDot");
                if with_dot {
                    // Two items of 8 words per row pair and input row: at least 8 per item.
                    assert!(sdot >= 8, "{t}: {sdot} OpSDot");
                }
            }
        }
    }
}
