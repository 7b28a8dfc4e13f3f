//! `Attention`: causal GQA attention over a KV cache, with the new rows appended first.

use super::bad_input;
use super::math::dot;
use crate::backend::BackendError;
use crate::graph::{AttnParams, TensorDecl};
use rayon::prelude::*;

/// The new rows of one call: `q [T, nh, hd]`, `k`, `v [T, nkv, hd]` at positions `pos [T]`.
pub(super) struct NewRows<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub pos: &'a [i32],
    /// The positions' declaration, to name them in errors.
    pub pos_decl: &'a TensorDecl,
}

/// The caches, `[cap, nkv, hd]` each.
pub(super) struct Caches<'a> {
    pub k: &'a mut [f32],
    pub v: &'a mut [f32],
}

/// Which cache rows a query sees.
#[derive(Clone, Copy, Debug)]
pub(super) enum Mask<'a> {
    /// Query t sees rows `0 ..= pos[t]`.
    Causal,
    /// Every query sees rows `0 ..= max(pos)`, within `|pos[t] − j| ≤ window` if `window > 0`.
    NonCausal { window: usize },
    /// A draft tree (`Op::AttentionTree`): the new rows are consecutive from `pos[0]`; query t
    /// sees rows `0 .. pos[0]` and the new rows `pos[0] + j` with `mask[t·T + j] ≠ 0`.
    Tree { mask: &'a [i32] },
}

/// Writes each new k/v row into cache row `pos[t]`, then query t attends to cache rows
/// `0 ..= pos[t]` (q head h reads kv head `h / (nh / nkv)`), with `softmax(q·k · scale)` in f32.
///
/// All rows are written before any query runs. For the increasing positions of a sequence this
/// equals appending and attending token by token, and it lets the queries run in parallel.
/// A position outside `[0, cap)` is a bad input, reported before any cache row is touched.
pub(super) fn attention(
    p: &AttnParams,
    mask: Mask,
    new: &NewRows,
    caches: Caches,
    out: &mut [f32],
) -> Result<(), BackendError> {
    let (nh, nkv, hd) = (p.n_heads, p.n_kv_heads, p.head_dim);
    let row = nkv * hd;
    if row == 0 || nh == 0 {
        return Ok(());
    }
    let cap = caches.k.len() / row;
    if let Some((t, bad)) = new
        .pos
        .iter()
        .enumerate()
        .find(|(_, p)| usize::try_from(**p).ok().is_none_or(|p| p >= cap))
    {
        return Err(bad_input(
            new.pos_decl,
            format!("position {bad} of token {t} is outside the cache of {cap} rows"),
        ));
    }
    let t_n = new.pos.len();
    if let Mask::Tree { .. } = mask
        && let Some(t) = (1..t_n).find(|&t| new.pos[t] != new.pos[0] + t as i32)
    {
        return Err(bad_input(
            new.pos_decl,
            format!(
                "tree rows must be consecutive: row {t} is at {}, the first at {}",
                new.pos[t], new.pos[0]
            ),
        ));
    }
    for ((kr, vr), p) in new
        .k
        .chunks_exact(row)
        .zip(new.v.chunks_exact(row))
        .zip(new.pos)
    {
        let at = *p as usize * row; // checked in range above
        caches.k[at..at + row].copy_from_slice(kr);
        caches.v[at..at + row].copy_from_slice(vr);
    }
    let (k_cache, v_cache) = (&*caches.k, &*caches.v);
    let group = nh / nkv;
    let max_pos = new.pos.iter().copied().max().unwrap_or(0) as usize;
    // The visible cache rows `lo .. hi` of query t.
    let visible = |t: usize| -> (usize, usize) {
        let p = new.pos[t] as usize;
        match mask {
            Mask::Causal => (0, p + 1),
            Mask::NonCausal { window: 0 } => (0, max_pos + 1),
            Mask::NonCausal { window } => (p.saturating_sub(window), (p + window).min(max_pos) + 1),
            Mask::Tree { .. } => (0, p + 1),
        }
    };
    // Whether query t sees cache row j of its range (only trees skip rows inside it).
    let base = new.pos.first().map_or(0, |p| *p as usize);
    let sees = |t: usize, j: usize| -> bool {
        match mask {
            Mask::Tree { mask } => j < base || mask[t * t_n + (j - base)] != 0,
            _ => true,
        }
    };

    // One task per (token, q head); `scores` is per-thread scratch.
    out.par_chunks_mut(hd)
        .enumerate()
        .for_each_init(Vec::new, |scores: &mut Vec<f32>, (i, o)| {
            let (t, h) = (i / nh, i % nh);
            let kv_off = (h / group) * hd;
            let q = &new.q[i * hd..(i + 1) * hd];
            let (lo, hi) = visible(t);

            // Scores as HF's eager path forms them: (q·k) then the scale.
            scores.clear();
            // A hidden row scores −∞: its weight is exactly 0, so the sums equal those over
            // the visible rows alone (in the same order).
            scores.extend((lo..hi).map(|j| {
                if sees(t, j) {
                    dot(q, &k_cache[j * row + kv_off..][..hd]) * p.scale
                } else {
                    f32::NEG_INFINITY
                }
            }));
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            // Normalise to probabilities before weighting v, as softmax-then-matmul does.
            o.fill(0.0);
            for (j, s) in (lo..hi).zip(scores.iter()) {
                let w = s / sum;
                for (acc, vv) in o.iter_mut().zip(&v_cache[j * row + kv_off..][..hd]) {
                    *acc += w * vv;
                }
            }
        });
    Ok(())
}
