//! The next GEMV's first weight bytes pulled into L2 while the small kernels before it run
//! (`DELTASPEC_HIP_L2PF=<MiB>`, off by default: an experiment, NVIDIA sm_90 only).
//!
//! Between two 1-row GEMVs of a layer run kernels that move little data (a DeltaNet layer's
//! gated delta net and gated norm, an attention layer's q/k preparation, attention and merge,
//! the norms), so DRAM idles for their whole serial chain: ~1.1 ms of a 6.8 ms 27B step on an
//! H100 (docs/perf.md, session 41). Right after a 1-row GEMV launches, `l2_prefetch`
//! (`hip/qmatmul.hip`) asks the TMA for up to the budget's first bytes of the next int8 GEMV's
//! weights: a gate/up pair's two matrices half each, a fused group's members in launch order.
//! No value depends on it; the launch keeps the chain ordered by waiting like every kernel.

use super::fused::int8_matmul;
use super::lower::{Arg, Env, launch};
use super::{HipBackend, kernels};
use crate::backend::BackendError;
use crate::backend::wgpu::fuse::Fusion;
use crate::graph::{Graph, TensorId};

/// Blocks of the prefetch launch: each thread issues 16 KiB pieces strided over the grid.
const BLOCKS: u32 = 64;

/// After int8 matmul node `i` (a 1-row GEMV or a fused group's first member) launched: the
/// prefetch of the next one's weights, where the budget is on.
pub(super) fn after(be: &HipBackend, env: &Env, f: &Fusion, i: usize) -> Result<(), BackendError> {
    if be.l2pf == 0 || int8_matmul(be, env.graph, i).is_none_or(|m| m.1 != 1) {
        return Ok(());
    }
    let Some(ranges) = next_ranges(be, env.graph, f, i) else {
        return Ok(());
    };
    let [(p0, b0), (p1, b1)] = ranges.map(|r| r.map_or((0, 0), |(t, b)| (env.ptr(t), b)));
    launch(
        be,
        "qmatmul",
        "l2_prefetch",
        [BLOCKS, 1, 1],
        kernels::QGEMV_THREADS,
        &[Arg::P(p0), Arg::U64(b0), Arg::P(p1), Arg::U64(b1)],
    )
}

/// The weight tensors and byte counts to prefetch for the first 1-row int8 matmul launched after
/// node `i` (outside `i`'s own group): at most two ranges within the budget.
fn next_ranges(
    be: &HipBackend,
    g: &Graph,
    f: &Fusion,
    i: usize,
) -> Option<[Option<(TensorId, u64)>; 2]> {
    // The next launching int8 matmul: not a later member of a group (those of `i`'s own
    // group included), which its first member's launch covers.
    let (j, (_, n, _, _, row_bytes)) = (i + 1..g.nodes.len())
        .filter(|&j| !matches!(f.role.get(j).copied().flatten(), Some((_, false))))
        .find_map(|j| Some((j, int8_matmul(be, g, j)?)))?;
    if n != 1 {
        return None;
    }
    // (weight, its bytes) of the launch at j: a group's members, else node j's weight.
    let (members, pair) = match f.role.get(j).copied().flatten() {
        Some((gi, _)) => (f.groups[gi].members.clone(), f.groups[gi].swiglu.is_some()),
        None => (vec![j], false),
    };
    let sized: Vec<_> = members
        .iter()
        .map(|&m| {
            let w = g.nodes[m].inputs[1];
            (w, g.tensor(w).shape[0] as u64 * row_bytes)
        })
        .collect();
    Some(split(&sized, be.l2pf, pair))
}

/// The budget over the launch's matrices: a pair's two halves equally (its kernel reads row j
/// of both together), else the members in order (a fused group runs segment 0's blocks first).
/// Byte counts are whole 16-byte units (the bulk prefetch's granule).
fn split<T: Copy>(sized: &[(T, u64)], budget: u64, pair: bool) -> [Option<(T, u64)>; 2] {
    let mut out = [None, None];
    let mut left = budget;
    for (k, &(w, bytes)) in sized.iter().take(2).enumerate() {
        let share = if pair { budget / 2 } else { left };
        let b = bytes.min(share) / 16 * 16;
        if b > 0 {
            out[k] = Some((w, b));
        }
        left -= b.min(left);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn the_budget_halves_over_a_pair_and_runs_in_order_over_a_group() {
        assert_eq!(
            split(&[(0, 100 << 20), (1, 100 << 20)], 16 << 20, true),
            [Some((0, 8 << 20)), Some((1, 8 << 20))]
        );
        assert_eq!(
            split(
                &[(0, 10 << 20), (1, 6 << 20), (2, 1 << 10)],
                16 << 20,
                false
            ),
            [Some((0, 10 << 20)), Some((1, 6 << 20))]
        );
        assert_eq!(
            split(&[(0, 20 << 20), (1, 6 << 20)], 16 << 20, false),
            [Some((0, 16 << 20)), None]
        );
        // Whole 16-byte units only.
        assert_eq!(split(&[(0, 1000)], 999, false), [Some((0, 992)), None]);
    }
}
