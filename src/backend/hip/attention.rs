//! Lowering of the attention ops (`hip/attention.hip`): the cache write, then one of two kernels.
//!
//! - `attn_hd*` (causal and tree attention): one block per (key split, head, query row), each
//!   reading the K/V rows of its range.
//! - `attn_nc_hd*` (non-causal attention: drafter blocks of B rows over context + block): one
//!   block per (key split, kv head, group of [`NC_QUERIES`] query vectors of that kv head), which
//!   stages each K/V row once in shared memory for all of them (B · nh / nkv queries share a
//!   row, 32 for a DFlash2 block of 8 at 32:8 heads) instead of re-reading it per query.
//!
//! Both write the normalised output with one split, else partials that `attn_combine` merges.
//! A node whose output nothing reads (the drafters' context-row appends: zero queries over the
//! new context rows, run only for their cache writes) launches only `kv_write`.

use super::HipBackend;
use super::driver::DevPtr;
use super::lower::{Arg, Env, blocks, input_i32, launch, u32_arg, unsupported};
use crate::backend::wgpu::fuse::QkPrep;
use crate::backend::{BackendError, HostData};
use crate::graph::{AttnParams, Graph, Node, Op, TensorId};
use std::collections::HashMap;

/// Keys per split of `attn_hd*` when a query's context is split (`DELTASPEC_HIP_ATTN_CHUNK`
/// overrides it, ≥ 16). 27B decode after 4096 context rows, H100 (session 27, two calls):
/// 64 keys 8.32 / 8.24 ms a step, 128 7.83, 256 7.85 / 8.00, 512 8.24.
fn attn_chunk() -> usize {
    static C: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *C.get_or_init(|| {
        std::env::var("DELTASPEC_HIP_ATTN_CHUNK")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(256, |c: usize| c.max(16))
    })
}
const ATTN_MAX_SPLITS: usize = 64;
/// Query vectors one `attn_nc_*` block owns (`NC_Q` in `hip/attention.hip`).
const NC_QUERIES: usize = 32;
/// Threads of an `attn_nc_*` block (`NC_THREADS`: 8 warps of 4 query vectors).
const NC_THREADS: u32 = 256;
/// Fewest keys per split of `attn_nc_*`: fewer would mostly add partials for the combine.
const NC_MIN_CHUNK: usize = 64;

/// Whether no node reads `node`'s output and it is no graph output: the node then only writes
/// its caches.
fn output_unused(g: &Graph, node: &Node) -> bool {
    g.unread(node.outputs[0])
}

/// The cache operand positions of an attention node: (mask, k_cache); the tree form has its
/// mask at 4 and the caches after it.
fn operands(node: &Node) -> (Option<usize>, usize) {
    if matches!(node.op, Op::AttentionTree(_)) {
        (Some(4), 5)
    } else {
        (None, 4)
    }
}

/// How many splits the attention kernel cuts the key range into: the only launch shape that
/// depends on a run's values (the positions); the kernels derive the split length and the key
/// ranges from the positions in device memory, so a captured graph stays valid for every run
/// with the same split counts ([`launch_key`]).
fn splits(
    be: &HipBackend,
    g: &Graph,
    bound: &HashMap<TensorId, &HostData>,
    node: &Node,
    p: &AttnParams,
    window: Option<usize>,
) -> Result<usize, BackendError> {
    if output_unused(g, node) {
        return Ok(1); // no attention kernel runs
    }
    let cap = g.tensor(node.inputs[operands(node).1]).shape[0];
    let t = g.tensor(node.inputs[0]).shape[0];
    let pos = input_i32(g, bound, node.inputs[3]);
    // One past the largest position: known on the host when positions are an input.
    let n_all = pos.and_then(|v| v.iter().max().map(|m| (*m as usize + 1).min(cap)));
    let sms = be.drv.multiprocessors() as usize;
    if let Some(w) = window {
        let (Some(pos), Some(n_all)) = (pos, n_all) else {
            return Err(unsupported(
                be,
                &node.op,
                "non-causal attention needs its positions as a graph input".into(),
            ));
        };
        // The union of the queries' key ranges, as the kernel derives it.
        let first = pos
            .iter()
            .filter_map(|&p| usize::try_from(p).ok())
            .min()
            .unwrap_or(0);
        let lo = if w > 0 { first.saturating_sub(w) } else { 0 };
        let span = n_all.saturating_sub(lo);
        let groups = p.n_kv_heads * (t * (p.n_heads / p.n_kv_heads.max(1))).div_ceil(NC_QUERIES);
        // About two blocks per multiprocessor, each with at least NC_MIN_CHUNK keys.
        let want = (2 * sms).div_ceil(groups.max(1));
        return Ok(nc_splits(want, span, nc_pow2()));
    }
    if on_cache_grid(g, t) {
        return Ok(cap.div_ceil(attn_chunk()).clamp(1, ATTN_MAX_SPLITS));
    }
    let max_n = n_all.unwrap_or(cap);
    Ok(if t * p.n_heads >= 4 * sms {
        1
    } else {
        max_n.div_ceil(attn_chunk()).clamp(1, ATTN_MAX_SPLITS)
    })
}

/// Whether a causal attention of `t` rows in graph `g` splits its keys on a grid fixed by the
/// cache size (kernel argument causal = 2): decode steps and the verify steps compared with them
/// ([`Graph::rows_match_decode`]). A query's partials then do not depend on the other rows of
/// its run, so a verify row equals its decode step bit for bit. Splitting the run's longest
/// range evenly (prompts) moved the split boundaries with the run's rows: 27B DFlash2 chains
/// on an H100 drifted from their AR baseline once the context passed one split (session 27).
fn on_cache_grid(g: &Graph, t: usize) -> bool {
    t == 1 || g.rows_match_decode
}

/// Whether the non-causal split count moves in powers of two (default; `DELTASPEC_HIP_NC_POW2=0`
/// restores the exact count `min(want, ⌈span / NC_MIN_CHUNK⌉)`).
fn nc_pow2() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DELTASPEC_HIP_NC_POW2").as_deref() != Ok("0"))
}

/// The split count of a non-causal attention launch over `span` keys, `want` being the count
/// that fills the machine. The count is a launch shape and so part of a captured graph's key
/// ([`launch_key`]): with the exact count `⌈span / NC_MIN_CHUNK⌉` a drafter's graph changed
/// key every 64 context rows (a direct run and a capture each time, ~every 12 rounds of a
/// DFlash2 chain). In powers of two (`pow2`), both the span's count and the cap, it changes
/// only when the span doubles. The kernel derives each split's keys from the positions, so any
/// count is correct (the partial softmax sums merge in a different order: equal up to rounding).
fn nc_splits(want: usize, span: usize, pow2: bool) -> usize {
    let fit = span.div_ceil(NC_MIN_CHUNK).max(1);
    let want = want.clamp(1, ATTN_MAX_SPLITS);
    if !pow2 {
        return want.min(fit);
    }
    // The largest power of two ≤ want, and the smallest ≥ fit.
    let cap = 1usize << (usize::BITS - 1 - want.leading_zeros());
    fit.next_power_of_two().min(cap)
}

/// The values of a run that fix its launch shapes beyond the graph's own shapes: the split count
/// of every attention node. Two runs of one graph with equal keys issue the same launches with
/// the same arguments (everything else a kernel needs per run is read from device memory).
pub(super) fn launch_key(
    be: &HipBackend,
    g: &Graph,
    bound: &HashMap<TensorId, &HostData>,
) -> Result<Vec<u32>, BackendError> {
    let mut key = Vec::new();
    for node in &g.nodes {
        let (p, window) = match &node.op {
            Op::Attention(p) | Op::AttentionTree(p) => (p, None),
            Op::AttentionNonCausal { attn, window } => (attn, Some(*window)),
            _ => continue,
        };
        key.push(splits(be, g, bound, node, p, window)? as u32);
    }
    Ok(key)
}

/// Launches one attention node. `window`: `None` for causal attention, `Some(w)` for
/// non-causal (0 = unlimited). `prep`: the q/k norms and ropes folded into this node (the fusion
/// plan), run with the cache write as one `qk_prep` launch.
pub(super) fn lower(
    be: &HipBackend,
    env: &Env,
    node: &Node,
    p: &AttnParams,
    window: Option<usize>,
    prep: Option<QkPrep>,
) -> Result<(), BackendError> {
    let g = env.graph;
    let ptr = |i: usize| env.ptr(node.inputs[i]);
    let (mask, kc) = operands(node);
    let mask = mask.map_or(0, ptr);
    let (nh, nkv, hd) = (p.n_heads, p.n_kv_heads, p.head_dim);
    let t = g.tensor(node.inputs[0]).shape[0];
    let cap = g.tensor(node.inputs[kc]).shape[0];
    let row = nkv * hd;
    if t == 0 || row == 0 || nh == 0 {
        return Ok(());
    }
    let u = |v: usize| u32_arg(be, &node.op, v);
    let grid_dim = |v: usize| grid_u32(be, node, v);
    match prep {
        Some(qp) => qk_prep(be, env, node, p, qp)?,
        None => launch(
            be,
            "attention",
            "kv_write",
            [blocks((t * row) as u64, 256), 1, 1],
            256,
            &[
                Arg::P(ptr(1)),
                Arg::P(ptr(2)),
                Arg::P(ptr(3)),
                Arg::P(ptr(kc)),
                Arg::P(ptr(kc + 1)),
                u(t)?,
                u(row)?,
                u(cap)?,
            ],
        )?,
    }
    if output_unused(g, node) {
        return Ok(());
    }
    let nsplit = splits(be, g, env.bound, node, p, window)?;
    let hdl = match hd.div_ceil(32) {
        0 | 1 => 1,
        2 => 2,
        3 | 4 => 4,
        _ => 8,
    };
    let (part_o, part_ml): (DevPtr, DevPtr) = if nsplit > 1 {
        let o = t * nh * nsplit * hd;
        let base = be.scratch((o + 2 * t * nh * nsplit) * 4)?;
        (base, base + (o * 4) as DevPtr)
    } else {
        (0, 0)
    };
    let out = env.ptr(node.outputs[0]);
    let mut args = vec![
        Arg::P(ptr(0)),
        Arg::P(ptr(kc)),
        Arg::P(ptr(kc + 1)),
        Arg::P(ptr(3)),
        Arg::P(out),
        Arg::P(part_o),
        Arg::P(part_ml),
        u(nh)?,
        u(nkv)?,
        u(hd)?,
        Arg::F32(p.scale),
        u(nsplit)?,
        u(cap)?,
    ];
    match window {
        Some(w) => {
            let groups = (t * (nh / nkv)).div_ceil(NC_QUERIES);
            args.extend([u(w)?, u(t)?]);
            launch(
                be,
                "attention",
                &format!("attn_nc_hd{hdl}"),
                [nsplit as u32, nkv as u32, grid_dim(groups)?],
                NC_THREADS,
                &args,
            )?;
        }
        None => {
            // causal = 1 (2: on the cache's grid), window = 0 (tree attention is causal over
            // the context)
            let causal = if on_cache_grid(g, t) { 2 } else { 1 };
            args.extend([Arg::U32(causal), Arg::U32(0), Arg::P(mask), u(t)?]);
            launch(
                be,
                "attention",
                &format!("attn_hd{hdl}"),
                [nsplit as u32, grid_dim(nh)?, grid_dim(t)?],
                128,
                &args,
            )?;
        }
    }
    if nsplit > 1 {
        let mut args = vec![
            Arg::P(part_o),
            Arg::P(part_ml),
            Arg::P(out),
            u(nh)?,
            u(hd)?,
            u(nsplit)?,
        ];
        let gated = gated_reader(be, env, node).filter(|_| hd.is_multiple_of(32));
        if let Some((gate, _)) = gated {
            let [xq, xd, xs] = super::lower::q8_parts(be, t * nh * hd)?;
            args.extend([Arg::P(gate), Arg::P(xq), Arg::P(xd), Arg::P(xs)]);
        }
        let name = match gated {
            Some(_) => "attn_combine_q8g",
            None => "attn_combine",
        };
        launch(
            be,
            "attention",
            name,
            [grid_dim(nh)?, grid_dim(t)?, 1],
            128,
            &args,
        )?;
        if let Some((_, root)) = gated {
            // The o_proj finds its input quantized (`lower::quantize_input`).
            be.quantized.set(Some(root));
        }
    }
    Ok(())
}

/// Where `node`'s output is `x` of a `SigmoidMul` folded into an int8 matmul (the o_proj behind
/// the attention output gate, [`super::fused`]): the gate's pointer and the storage root the
/// matmul quantizes (its input).
fn gated_reader(be: &HipBackend, env: &Env, node: &Node) -> Option<(DevPtr, TensorId)> {
    if !be.combine_q8 {
        return None;
    }
    let g = env.graph;
    let (j, s) = env
        .ex
        .fusion
        .gate_of
        .iter()
        .enumerate()
        .find_map(|(j, s)| {
            s.filter(|&s| g.nodes[s].inputs[0] == node.outputs[0])
                .map(|s| (j, s))
        })?;
    Some((
        env.ptr(g.nodes[s].inputs[1]),
        g.storage_root(g.nodes[j].inputs[0]),
    ))
}

/// A grid dimension of `node`'s launches, or an error naming it.
fn grid_u32(be: &HipBackend, node: &Node, v: usize) -> Result<u32, BackendError> {
    u32::try_from(v).map_err(|_| unsupported(be, &node.op, format!("grid size {v}")))
}

/// The q/k preparation of attention node `node` (`qk_prep` in `hip/norm.hip`): the norms and
/// ropes of `qp` and the cache write of the new k/v rows in one launch, one warp per (head,
/// token). It writes the ropes' outputs (the attention's q and k) and the cache rows.
fn qk_prep(
    be: &HipBackend,
    env: &Env,
    node: &Node,
    p: &AttnParams,
    qp: QkPrep,
) -> Result<(), BackendError> {
    let g = env.graph;
    let (qn_i, qr_i) = qp.params();
    let [qn, kn, qr, kr] = [qn_i, qp.k_norm, qr_i, qp.k_rope].map(|i| &g.nodes[i]);
    // Keys alone: no query warps; the query pointers are the keys', never read.
    let nh = if qp.q.is_some() { p.n_heads } else { 0 };
    let (Op::RmsNorm { eps }, Op::Rope(rp)) = (&qn.op, &qr.op) else {
        return Err(unsupported(
            be,
            &node.op,
            "q/k preparation of other ops".into(),
        ));
    };
    let (_, kc) = operands(node);
    let t = g.tensor(node.inputs[0]).shape[0];
    let cap = g.tensor(node.inputs[kc]).shape[0];
    let u = |v: usize| u32_arg(be, &node.op, v);
    let dim = |v: usize| grid_u32(be, node, v);
    launch(
        be,
        "norm",
        "qk_prep",
        [dim(nh + p.n_kv_heads)?, dim(t)?, 1],
        32,
        &[
            Arg::P(env.ptr(qn.inputs[0])),
            Arg::P(env.f32_ptr(qn.inputs[1])),
            Arg::P(env.ptr(kn.inputs[0])),
            Arg::P(env.f32_ptr(kn.inputs[1])),
            Arg::P(env.ptr(node.inputs[2])),
            Arg::P(env.ptr(qr.inputs[1])),
            Arg::P(env.consts_ptr(qr_i)),
            Arg::P(env.consts_ptr(qp.k_rope)),
            Arg::P(env.ptr(node.inputs[3])),
            Arg::P(env.ptr(qr.outputs[0])),
            Arg::P(env.ptr(kr.outputs[0])),
            Arg::P(env.ptr(node.inputs[kc])),
            Arg::P(env.ptr(node.inputs[kc + 1])),
            u(nh)?,
            u(p.n_kv_heads)?,
            u(p.head_dim)?,
            u(rp.rot / 2)?,
            Arg::F32(rp.attention_factor()),
            Arg::F32(*eps),
            u(cap)?,
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nc_split_counts_change_only_when_the_span_doubles() {
        // DFlash2 on 132 SMs: 8 groups, want 33.
        let counts: Vec<usize> = (1..=5000).map(|s| nc_splits(33, s, true)).collect();
        let mut changes: Vec<usize> = (1..counts.len())
            .filter(|&i| counts[i] != counts[i - 1])
            .map(|i| i + 1)
            .collect();
        changes.dedup();
        assert_eq!(changes, [65, 129, 257, 513, 1025]);
        assert_eq!(counts[0], 1);
        assert_eq!(counts[4999], 32);
        // Never more splits than the exact rule's cap, never below one, a power of two.
        for (span, &n) in (1..).zip(&counts) {
            assert!(n.is_power_of_two() && n <= 33, "span {span}: {n}");
            assert!(
                n >= nc_splits(33, span, false).div_ceil(2),
                "span {span}: {n}"
            );
        }
        assert_eq!(nc_splits(33, 1100, false), 18);
        assert_eq!(nc_splits(33, 0, true), 1);
        assert_eq!(nc_splits(1000, 1 << 20, true), 64);
        assert_eq!(nc_splits(0, 100, true), 1);
    }
}
