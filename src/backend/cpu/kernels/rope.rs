//! `Rope`: partial NeoX rotary embedding, computed the way HF's rotary module does in f32.

use crate::graph::RopeParams;

/// Geometry of one rope call on `x [T, heads, head_dim]`.
pub(super) struct Geometry {
    pub heads: usize,
    pub head_dim: usize,
    /// Rotated dims `[0, rot)` (the rest pass through), base, YaRN.
    pub params: RopeParams,
}

/// Rotates pairs `(i, i + rot/2)` for `i < rot/2` by `pos · inv_freq[i]`, with HF's
/// `cos = cos(angle)·m`, `sin = sin(angle)·m` (m the attention factor, 1 without YaRN):
/// `x'[i] = x[i]·cos − x[i + rot/2]·sin`, `x'[i + rot/2] = x[i + rot/2]·cos + x[i]·sin`.
pub(super) fn rope(x: &[f32], pos: &[i32], g: &Geometry, y: &mut [f32]) {
    y.copy_from_slice(x);
    let half = g.params.rot / 2;
    if half == 0 || y.is_empty() {
        return;
    }
    let freqs = g.params.inv_freq();
    let m = g.params.attention_factor();
    let mut cos = vec![0.0f32; half];
    let mut sin = vec![0.0f32; half];
    for (row, p) in y.chunks_exact_mut(g.heads * g.head_dim).zip(pos) {
        // HF forms the angle as an f32 product of the f32 position and inv_freq.
        let p = *p as f32;
        for ((c, s), f) in cos.iter_mut().zip(sin.iter_mut()).zip(&freqs) {
            let angle = p * f;
            (*c, *s) = (angle.cos() * m, angle.sin() * m);
        }
        for head in row.chunks_exact_mut(g.head_dim) {
            let (lo, rest) = head.split_at_mut(half);
            let hi = &mut rest[..half];
            for (((a, b), c), s) in lo.iter_mut().zip(hi.iter_mut()).zip(&cos).zip(&sin) {
                let (x0, x1) = (*a, *b);
                *a = x0 * c - x1 * s;
                *b = x1 * c + x0 * s;
            }
        }
    }
}
