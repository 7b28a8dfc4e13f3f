//! Fewer launches per decode/verify step on the int8-activation GEMV path (`hip/qmatmul.hip`).
//!
//! The groups are the wgpu backend's ([`fuse::find`]: matmuls of one activation with weights
//! of one type and row length, a gate/up pair with its `SwiGlu`, the attention output gate
//! folded into o_proj), kept where every member takes the int8 path here:
//! - a group runs as one `qgemv4_*` launch over up to four (weight, output, rows) segments,
//!   after one `quantize_q8` (`qmma4_*` where the matrix-core kernel is on);
//! - a gate/up pair with its `SwiGlu` runs as one `qgemv_glu_*` launch writing
//!   `silu(gate) · up` (tiles up to [`kernels::QGEMV_GLU_MAX_TILE`] rows; wider inputs keep the
//!   `SwiGlu` launch and run gate/up as `qgemv4_*`), or `qmma_glu_*` where the matrix-core
//!   kernel is on (any of its widths);
//! - a folded `SigmoidMul` is computed inside the quantization (`quantize_q8_gate`);
//! - at one input row, a K = 4 `ConvStep` that is the only reader of a `qgemv4_*` group's
//!   first output (the DeltaNet qkv projection) runs in that launch's epilogue (`QConv` in
//!   `hip/qmatmul.hip`), so its `conv_step` launch goes;
//! - an attention node's q/k `RmsNorm` → `Rope` chains (the wgpu backend's `qk_prep` pattern)
//!   and its cache write run as one `qk_prep` launch; a node whose output nothing reads (the
//!   drafters' context appends) prepares its keys alone ([`QkPrepMode`]:
//!   `DELTASPEC_HIP_QK_PREP=keys` only those, `=0` none);
//! - a norm or DynConv whose output feeds an int8 matmul writes the int8 rows itself
//!   (`*_rms_norm_q8`, `dyn_conv_q8[f]`, [`q8_out`]), so that matmul's quantize launch goes.
//!
//! Every fused kernel does the unfused kernels' float operations on the same values, so fused
//! and unfused runs agree bit for bit. On the dp4a kernels a group's first output read only as
//! two `SliceLast` halves (the attention query and gate) is written as those halves (`QSplit`),
//! so the two slice copies go (`DELTASPEC_HIP_SPLIT_OUT=0`: not). `DELTASPEC_HIP_FUSION=0` (or
//! [`HipBackend::set_fusion`]) turns fusion off.
//!
//! The fused kernels have no wide (several weight rows per warp) variants, so where the unfused
//! GEMV of a tile runs a wide one, fusing trades it for the portable kernel. At 16 input rows
//! (DFlash drafter blocks and their verify steps) that lost on the H200: 27B verify 57.1 ms
//! fused against 47.0 ms unfused (docs/perf.md, 2026-12-03). Groups whose tile is in
//! `HipBackend::unfused_wide_tiles` ([`HipBackend::set_unfused_wide_tiles`]) and whose unfused GEMV is wide stay unfused: 16 by default,
//! `DELTASPEC_HIP_FUSION=narrow` adds 8 (not measured yet), `=all` fuses every tile.
//!
//! The group runs at its first member, so later outputs are written early; the plan keeps the
//! buffers that could collide live with [`fuse::extra_uses`] (applied in `compile`).

use super::kernels::{self, weight_kernel};
use super::lower::{self, Arg, Env, blocks, launch, u32_arg};
use super::{HipBackend, NormQ8, QkPrepMode};
use crate::backend::BackendError;
use crate::backend::wgpu::fuse::{self, Fusion, Group, Limits, QkPrep};
use crate::graph::{Graph, Node, Op, TensorId};

pub(super) use fuse::extra_uses;

/// The int8 GEMV of matmul node `i`: `(weight kernel suffix, n, k, m, row bytes)`, if node `i`
/// is a matmul that takes that path on `be`.
fn int8_matmul(
    be: &HipBackend,
    g: &Graph,
    i: usize,
) -> Option<(&'static str, usize, usize, usize, u64)> {
    let nd = &g.nodes[i];
    if nd.op != Op::MatMul || !be.int8_matmul {
        return None;
    }
    let (x, w) = (g.tensor(nd.inputs[0]), g.tensor(nd.inputs[1]));
    let (n, k, m) = (x.shape[0], x.shape[1], w.shape[0]);
    let suffix = weight_kernel(w.dtype, k)?;
    let row_bytes = kernels::dev_bytes_for(w.dtype, k)? as u64;
    (n <= be.int8_max_n && kernels::QGEMV_TYPES.contains(&suffix))
        .then_some((suffix, n, k, m, row_bytes))
}

/// The fusion plan of `g` on `be` (no fusion when it is off or the int8 path is off).
pub(super) fn plan(be: &HipBackend, g: &Graph) -> Fusion {
    let mut f = Fusion::none(g.nodes.len());
    if !be.fusion || !be.int8_matmul {
        return f;
    }
    let lim = Limits {
        max_binding: u64::MAX,
        max_storage: u32::MAX,
        max_rows: be.int8_max_n,
        max_segments: kernels::QGEMV_SEGMENTS,
    };
    let found = fuse::find(g, &lim);
    for (fi, grp) in found.groups.into_iter().enumerate() {
        // Members share dtype, K and the input, so the first decides for all.
        let Some((suffix, n, ..)) = int8_matmul(be, g, grp.members[0]) else {
            continue;
        };
        let nt = kernels::qgemv_tile(n);
        // Where the unfused GEMV is a wide variant (and not the matrix-core kernel), a tile in
        // `unfused_wide_tiles` stays unfused (see the module docs).
        if be.unfused_wide_tiles.contains(&nt)
            && be.qmma_tile(n, suffix).is_none()
            && lower::qgemv_wide(be, nt).is_some()
            && fused_wide_rows(be, nt).is_none()
        {
            continue;
        }
        // The gate/up kernels: the matrix-core one at its widths (unless turned off, when those
        // keep the SwiGlu launch), else the dp4a one up to its largest tile.
        let glu = match be.qmma_tile(n, suffix) {
            Some(_) => be.qmma_glu_tile(n, suffix).is_some(),
            None => nt <= kernels::QGEMV_GLU_MAX_TILE,
        };
        let swiglu = grp.swiglu.filter(|_| glu);
        let conv = found
            .conv
            .get(fi)
            .copied()
            .flatten()
            .filter(|&c| swiglu.is_none() && conv_foldable(be, g, n, suffix, c));
        if let Some(c) = conv {
            f.folded[c] = true;
        }
        // The query/gate halves written by the dp4a kernels' epilogue (not the matrix-core
        // tiles'), so the two slice copies go.
        let split = grp.split.filter(|_| {
            be.split_out
                && conv.is_none()
                && be.qmma_tile(n, suffix).is_none()
                && nt <= kernels::QSPLIT_MAX_TILE
        });
        if let Some((a, b)) = split {
            f.folded[a] = true;
            f.folded[b] = true;
        }
        f.conv.push(conv);
        let gi = f.groups.len();
        for (k, &m) in grp.members.iter().enumerate() {
            f.role[m] = Some((gi, k == 0));
        }
        if let Some(s) = swiglu {
            f.role[s] = Some((gi, false));
        }
        f.groups.push(Group {
            members: grp.members,
            swiglu,
            split,
        });
    }
    let on = |qp: &QkPrep| match be.qk_prep {
        QkPrepMode::All => true,
        QkPrepMode::KeysOnly => qp.q.is_none(),
        QkPrepMode::Off => false,
    };
    for (a, qp) in found.qk_prep.iter().enumerate() {
        if let Some(qp) = *qp
            && on(&qp)
            && qk_preppable(g, a)
        {
            for n in qp.nodes() {
                f.folded[n] = true;
            }
            f.qk_prep[a] = Some(qp);
        }
    }
    for (j, s) in found.gate_of.iter().enumerate() {
        if let Some(s) = *s
            && f.role[j].is_none()
            && int8_matmul(be, g, j).is_some()
        {
            f.gate_of[j] = Some(s);
            f.folded[s] = true;
        }
    }
    f
}

/// Whether attention node `a` fits `qk_prep` (`hip/norm.hip`): head rows of the norms' warp form
/// (`d % 4 == 0`, at most 512 values).
fn qk_preppable(g: &Graph, a: usize) -> bool {
    let hd = g.tensor(g.nodes[a].inputs[0]).last_dim();
    hd.is_multiple_of(4) && hd <= 512
}

/// Whether conv step `c`, found reading a group's first output, runs in the group's launch:
/// one input row on the dp4a kernels of a type whose epilogue has the conv, and four taps.
fn conv_foldable(be: &HipBackend, g: &Graph, n: usize, suffix: &str, c: usize) -> bool {
    let taps = g.tensor(g.nodes[c].inputs[1]);
    be.conv_fold
        && n == 1
        && kernels::QCONV_TYPES.contains(&suffix)
        && be.qmma_tile(n, suffix).is_none()
        && taps.shape.len() == 2
        && taps.shape[1] == 4
}

/// Per node: true for an `RmsNorm`/`AddRmsNorm`/`GatedRmsNorm` or a `DynConv` whose output is
/// the activation of an int8 matmul (directly or through a reshape view) and whose row length
/// is a multiple of 32 (each warp of its kernel then holds whole quantization blocks). Such a
/// node runs its `_q8` kernel, which also fills the quantized-activation buffer; the matmul then
/// finds its input already quantized ([`lower::quantize_input`]). Off with fusion. Norms: by
/// default `GatedRmsNorm` only (`DELTASPEC_HIP_NORM_Q8=1`: every norm, `=0`: none); convs: on
/// unless `DELTASPEC_HIP_CONV_Q8=0`.
pub(super) fn q8_out(be: &HipBackend, g: &Graph) -> Vec<bool> {
    let mut out = vec![false; g.nodes.len()];
    if !be.fusion || !be.int8_matmul {
        return out;
    }
    // Storage roots read by int8 matmuls as their activation.
    let fed: std::collections::HashSet<_> = (0..g.nodes.len())
        .filter(|&i| int8_matmul(be, g, i).is_some())
        .map(|i| g.storage_root(g.nodes[i].inputs[0]))
        .collect();
    let norms = be.norm_q8;
    for (i, nd) in g.nodes.iter().enumerate() {
        let y = match nd.op {
            Op::GatedRmsNorm { .. } if norms != NormQ8::Off => nd.outputs[0],
            Op::RmsNorm { .. } if norms == NormQ8::All => nd.outputs[0],
            Op::AddRmsNorm { .. } if norms == NormQ8::All => nd.outputs[1],
            Op::AddRmsNorm { .. }
                if norms == NormQ8::Slices
                    && lower::norm_slices(g.tensor(nd.inputs[0]), be.norm_slice_rows).is_some() =>
            {
                nd.outputs[1]
            }
            Op::DynConv { .. } if be.conv_q8 => nd.outputs[0],
            _ => continue,
        };
        out[i] = g.tensor(nd.inputs[0]).last_dim().is_multiple_of(32)
            && fed.contains(&g.storage_root(y));
    }
    out
}

/// The `(n, k)` of a matmul over storage root `root` that reads its int8 activations in the
/// fragment order (a matrix-core tile on `qmma*f` kernels, as [`lower::qgemv`] and [`group`]
/// decide), where a norm writing them should write that order too (`*_rms_norm_q8f`); `None`
/// where no reader wants it or `DELTASPEC_HIP_NORM_Q8F=0`.
pub(super) fn frag_reader(be: &HipBackend, g: &Graph, root: TensorId) -> Option<(usize, usize)> {
    if !be.norm_q8f || !be.qmma_frag() {
        return None;
    }
    (0..g.nodes.len()).find_map(|i| {
        let (suffix, n, k, _, _) = int8_matmul(be, g, i)?;
        (g.storage_root(g.nodes[i].inputs[0]) == root && be.qmma_tile(n, suffix).is_some())
            .then_some((n, k))
    })
}

/// Launches node `i` under the plan `f`: nothing for nodes another launch covers, the fused
/// launch at a group's first member, else the node's own launches.
pub(super) fn node(
    be: &HipBackend,
    env: &Env,
    f: &Fusion,
    i: usize,
    node: &Node,
) -> Result<(), BackendError> {
    if f.folded.get(i) == Some(&true) {
        return Ok(());
    }
    match f.role.get(i).copied().flatten() {
        Some((_, false)) => return Ok(()),
        Some((gi, true)) => return group(be, env, &f.groups[gi], f.conv_of(gi)),
        None => {}
    }
    if let Some(s) = f.gate_of.get(i).copied().flatten() {
        let (suffix, n, k, m, row_bytes) =
            int8_matmul(be, env.graph, i).expect("checked by the plan");
        let sm = &env.graph.nodes[s];
        let gate = Some((sm.inputs[0], sm.inputs[1]));
        return lower::qgemv(be, env, node, suffix, n, k, m, row_bytes, gate);
    }
    if env.ex.q8_out.get(i) == Some(&true) {
        return match node.op {
            Op::DynConv { .. } => lower::dyn_conv(be, env, node, true),
            _ => lower::norm_q8(be, env, node),
        };
    }
    lower::node(be, env, i, node)
}

/// Weight rows per warp of the fused wide kernels (`qgemv4_*_<nt>x<r>`, `qgemv_glu_*_<nt>x<r>`)
/// for tile `nt`, where they are on and the unfused GEMV of the tile is that wide variant.
fn fused_wide_rows(be: &HipBackend, nt: u32) -> Option<u32> {
    if !be.fused_wide {
        return None;
    }
    lower::qgemv_wide(be, nt).filter(|&r| kernels::QGEMV_FUSED_WIDE.contains(&(nt, r)))
}

/// A dp4a launch's `(source, kernel, rows per block, threads)` with its one grid row.
fn one_row(l: (&'static str, String, u64, u32)) -> (&'static str, String, u64, u32, u32) {
    (l.0, l.1, l.2, l.3, 1)
}

/// One group: one quantization, then one `qgemv_glu_*` or `qgemv4_*` launch (running conv
/// step node `conv` too where one is folded in).
fn group(be: &HipBackend, env: &Env, grp: &Group, conv: Option<usize>) -> Result<(), BackendError> {
    let g = env.graph;
    let first = &g.nodes[grp.members[0]];
    let (suffix, n, k, _, row_bytes) =
        int8_matmul(be, g, grp.members[0]).expect("checked by the plan");
    // The kernel below is a `qmma*` one where its tile exists: `qmma_glu_*` for the pair,
    // `qmma4_*` otherwise; `qmma*f` reads the fragment-ordered activations.
    let mma = match grp.swiglu {
        Some(_) => be.qmma_glu_tile(n, suffix),
        None => be.qmma_tile(n, suffix),
    };
    let frag = be.qmma_frag() && mma.is_some();
    let [xq, xd, xs] = lower::quantize_input(be, env, first, None, n, k, frag)?;
    // The dp4a kernels read the members' regrouped Q8_0 copies where all have one.
    let weights: Vec<_> = grp.members.iter().map(|&i| g.nodes[i].inputs[1]).collect();
    let regrouped = mma
        .is_none()
        .then(|| lower::q8_regrouped(env, suffix, &weights))
        .flatten();
    let suffix = if regrouped.is_some() {
        kernels::Q8_REGROUPED
    } else {
        suffix
    };
    let wptr = |j: usize| match &regrouped {
        Some(p) => p[j],
        None => env.ptr(weights[j]),
    };
    let nt = kernels::qgemv_tile(n);
    let warps = u64::from(kernels::QGEMV_THREADS / 32);
    let u = |v: usize| u32_arg(be, &first.op, v);
    if let Some(s) = grp.swiglu {
        let m = g.tensor(first.inputs[1]).shape[0];
        // (source, kernel, output columns per block, threads, grid rows); both take the same arguments.
        let (source, name, cols, threads, grid_y) = match be.qmma_glu_tile(n, suffix) {
            Some(t) => be.mma_launch("qmma_glu", suffix, t, n, g.rows_match_decode),
            None => one_row(
                match (be.q1_variant(n, true, m, suffix), fused_wide_rows(be, nt)) {
                    (Some(v), _) => (
                        "qmatmul",
                        format!("qgemv_glu_{suffix}_{}", v.glu_tag()),
                        v.block_rows(warps, true),
                        kernels::QGEMV_THREADS,
                    ),
                    (None, Some(r)) => (
                        "qmatmul",
                        format!("qgemv_glu_{suffix}_{nt}x{r}"),
                        u64::from(r / 2) * warps, // r / 2 pairs per warp
                        kernels::QGEMV_THREADS,
                    ),
                    (None, None) => (
                        "qmatmul",
                        format!("qgemv_glu_{suffix}_{nt}"),
                        warps,
                        kernels::QGEMV_THREADS,
                    ),
                },
            ),
        };
        return launch(
            be,
            source,
            &name,
            [be.mma_grid(&name, blocks(m as u64, cols)), grid_y, 1],
            threads,
            &[
                Arg::P(wptr(0)),
                Arg::P(wptr(1)),
                Arg::P(xq),
                Arg::P(xd),
                Arg::P(xs),
                Arg::P(env.ptr(g.nodes[s].outputs[0])),
                u(n)?,
                u(k)?,
                u(m)?,
                Arg::U64(row_bytes),
            ],
        );
    }
    // The weight rows of the whole group, which decide the 1-row variant (grid fill).
    let total_rows: usize = grp
        .members
        .iter()
        .map(|&i| g.tensor(g.nodes[i].inputs[1]).shape[0])
        .sum();
    let (source, name, rows_per_block, threads, grid_y) = match be.qmma_tile(n, suffix) {
        Some(t) => be.mma_launch("qmma4", suffix, t, n, g.rows_match_decode),
        None => one_row(
            match (
                be.q1_variant(n, false, total_rows, suffix),
                fused_wide_rows(be, nt),
            ) {
                (Some(v), _) => (
                    "qmatmul",
                    format!("qgemv4_{suffix}_{}", v.tag()),
                    v.block_rows(warps, false),
                    kernels::QGEMV_THREADS,
                ),
                (None, Some(r)) => (
                    "qmatmul",
                    format!("qgemv4_{suffix}_{nt}x{r}"),
                    u64::from(r) * warps,
                    kernels::QGEMV_THREADS,
                ),
                (None, None) => (
                    "qmatmul",
                    format!("qgemv4_{suffix}_{nt}"),
                    u64::from(kernels::qgemv_rows(nt)) * warps,
                    kernels::QGEMV_THREADS,
                ),
            },
        ),
    };
    for (c, chunk) in grp.members.chunks(kernels::QGEMV_SEGMENTS).enumerate() {
        let mut args = Vec::with_capacity(3 * kernels::QGEMV_SEGMENTS + 6);
        let mut grid = 0u64;
        for s in 0..kernels::QGEMV_SEGMENTS {
            match chunk.get(s).map(|&i| &g.nodes[i]) {
                Some(nd) => {
                    let m = g.tensor(nd.inputs[1]).shape[0];
                    grid += u64::from(blocks(m as u64, rows_per_block));
                    args.extend([
                        Arg::P(wptr(c * kernels::QGEMV_SEGMENTS + s)),
                        Arg::P(env.ptr(nd.outputs[0])),
                        u(m)?,
                    ]);
                }
                None => args.extend([Arg::P(0), Arg::P(0), Arg::U32(0)]),
            }
        }
        args.extend([Arg::P(xq), Arg::P(xd), Arg::P(xs), u(n)?, u(k)?]);
        args.push(Arg::U64(row_bytes));
        // The dp4a kernels' folded conv (taps, state, output) for segment 0; null: none.
        if source == "qmatmul" {
            match conv.filter(|_| c == 0).map(|ci| &g.nodes[ci]) {
                Some(cn) => args.extend([
                    Arg::P(env.f32_ptr(cn.inputs[1])),
                    Arg::P(env.ptr(cn.inputs[2])),
                    Arg::P(env.ptr(cn.outputs[0])),
                ]),
                None => args.extend([Arg::P(0), Arg::P(0), Arg::P(0)]),
            }
            // Segment 0 as the query/gate halves (the slices' outputs; half = their width).
            match grp.split.filter(|_| c == 0) {
                Some((a, b)) => {
                    let half = g.tensor(g.nodes[a].outputs[0]).last_dim();
                    args.extend([
                        Arg::P(env.ptr(g.nodes[a].outputs[0])),
                        Arg::P(env.ptr(g.nodes[b].outputs[0])),
                        u(half)?,
                    ]);
                }
                None => args.extend([Arg::P(0), Arg::P(0), Arg::U32(0)]),
            }
        }
        let grid = u32::try_from(grid).map_err(|_| be.dev_err("fused GEMV grid too large"))?;
        let grid = be.mma_grid(&name, grid);
        launch(be, source, &name, [grid, grid_y, 1], threads, &args)?;
    }
    Ok(())
}
