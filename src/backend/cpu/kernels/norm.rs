//! Normalisations over the last dimension: RMSNorm (plain, fused with a residual add, gated)
//! and L2 normalisation.

use super::math::{rsqrt, silu, sum_sq};

/// `1 / sqrt(mean(x²) + eps)`, the RMSNorm factor as HF computes it (`x.pow(2).mean(-1)`).
fn rms_factor(x: &[f32], eps: f32) -> f32 {
    rsqrt(sum_sq(x) / x.len() as f32 + eps)
}

/// `y = (x · r) · w` per row of `w.len()` values, `r` the RMSNorm factor. The product order is
/// HF's: normalise first, then scale by the weight.
pub(super) fn rms_norm(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let d = w.len();
    for (xr, yr) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
        let r = rms_factor(xr, eps);
        for ((o, xv), wv) in yr.iter_mut().zip(xr).zip(w) {
            *o = (xv * r) * wv;
        }
    }
}

/// `sum = x + res`, `normed = rms_norm(sum) · w`: the residual add fused with the next norm.
pub(super) fn add_rms_norm(
    x: &[f32],
    res: &[f32],
    w: &[f32],
    eps: f32,
    sum: &mut [f32],
    normed: &mut [f32],
) {
    for ((s, a), b) in sum.iter_mut().zip(x).zip(res) {
        *s = a + b;
    }
    rms_norm(sum, w, eps, normed);
}

/// `y = ((x · r) · w) · silu(z)` per group of `w.len()` values: HF's `RMSNormGated`, which
/// applies the gate after the norm and weight.
pub(super) fn gated_rms_norm(x: &[f32], z: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let d = w.len();
    let groups = x
        .chunks_exact(d)
        .zip(z.chunks_exact(d))
        .zip(y.chunks_exact_mut(d));
    for ((xr, zr), yr) in groups {
        let r = rms_factor(xr, eps);
        for (((o, xv), zv), wv) in yr.iter_mut().zip(xr).zip(zr).zip(w) {
            *o = ((xv * r) * wv) * silu(*zv);
        }
    }
}

/// `y = (x · 1/sqrt(Σx² + eps)) · scale` per row of `d` values (the FLA/HF `l2norm`, then the
/// optional scale as a separate product, as HF scales q after normalising it).
pub(super) fn l2_norm(x: &[f32], d: usize, eps: f32, scale: f32, y: &mut [f32]) {
    for (xr, yr) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
        l2_norm_row(xr, eps, scale, yr);
    }
}

/// One row of [`l2_norm`]; shared with the gated delta net, which normalises q and k this way.
pub(super) fn l2_norm_row(x: &[f32], eps: f32, scale: f32, y: &mut [f32]) {
    let r = rsqrt(sum_sq(x) + eps);
    for (o, v) in y.iter_mut().zip(x) {
        *o = (v * r) * scale;
    }
}
