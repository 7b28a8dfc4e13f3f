//! DFlash2 ops: the grouped dynamic causal conv ([`Op::DynConv`]) and the candidate-selector
//! path walk ([`Op::SelectorWalk`]), plus the row concatenation a batched draft needs
//! ([`Op::Concat`]).
//!
//! [`Op::DynConv`]: crate::graph::Op::DynConv
//! [`Op::SelectorWalk`]: crate::graph::Op::SelectorWalk
//! [`Op::Concat`]: crate::graph::Op::Concat

use super::math::dot;

/// Geometry of one dynamic conv.
pub(super) struct ConvGeom {
    pub channels: usize,
    pub sides: usize,
    pub taps: usize,
    pub side: usize,
    pub block: usize,
    pub group: usize,
}

/// `y[i, c] = Σ_{t<K, t ≤ i mod block} (base[side, t, c] + dyn[i, (side·K + t)·G + c/group])
/// · x[i − t, c]`.
pub(super) fn dyn_conv(g: &ConvGeom, x: &[f32], base: &[f32], dynk: &[f32], y: &mut [f32]) {
    let (ch, k) = (g.channels, g.taps);
    let groups = ch / g.group;
    let width = g.sides * k * groups;
    for (i, yr) in y.chunks_exact_mut(ch).enumerate() {
        let d = &dynk[i * width..(i + 1) * width];
        yr.fill(0.0);
        for t in 0..k.min(i % g.block + 1) {
            let xr = &x[(i - t) * ch..(i - t + 1) * ch];
            let b = &base[(g.side * k + t) * ch..][..ch];
            let dg = &d[(g.side * k + t) * groups..][..groups];
            for (c, o) in yr.iter_mut().enumerate() {
                *o += (b[c] + dg[c / g.group]) * xr[c];
            }
        }
    }
}

/// The inputs of one selector walk (shapes as [`crate::graph::Op::SelectorWalk`]).
pub(super) struct Walk<'a> {
    pub block: usize,
    pub k: usize,
    pub rank: usize,
    pub unary: &'a [f32],
    pub cand: &'a [i32],
    pub hp: &'a [f32],
    pub succ: &'a [f32],
    pub pred: &'a [f32],
    pub seed: &'a [f32],
}

/// Greedy walk per sequence: each row's scores given the previous row's choice, its first
/// maximum, and the chosen candidate's token.
pub(super) fn selector_walk(w: &Walk, tokens: &mut [i32], scores: &mut [f32]) {
    let (k, r) = (w.k, w.rank);
    let mut ph = vec![0.0f32; r];
    for (n, seed) in w.seed.chunks_exact(r).enumerate() {
        let mut prev = seed;
        for l in n * w.block..(n + 1) * w.block {
            let hp = &w.hp[l * r..(l + 1) * r];
            for ((o, a), b) in ph.iter_mut().zip(prev).zip(hp) {
                *o = a * b;
            }
            let row = &mut scores[l * k..(l + 1) * k];
            for (c, s) in row.iter_mut().enumerate() {
                *s = w.unary[l * k + c] + dot(&ph, &w.succ[(l * k + c) * r..][..r]);
            }
            // The first maximum (a NaN never replaces the best so far).
            let mut best_c = 0;
            for c in 1..k {
                if row[c] > row[best_c] {
                    best_c = c;
                }
            }
            tokens[l] = w.cand[l * k + best_c];
            prev = &w.pred[(l * k + best_c) * r..][..r];
        }
    }
}

/// `y` = the rows of every input, in order.
pub(super) fn concat(xs: &[&[f32]], y: &mut [f32]) {
    let mut at = 0;
    for x in xs {
        y[at..at + x.len()].copy_from_slice(x);
        at += x.len();
    }
}
