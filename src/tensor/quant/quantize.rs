//! Building blocks shared by the quantizers, ported from ggml-quants.c.

use half::f16;

/// ggml's `GROUP_MAX_EPS`: groups whose largest magnitude is below this quantize to zero.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int` (round half to even, via the 1.5 * 2^23 trick in C).
/// Out-of-range and NaN inputs saturate instead of being undefined, which only matters
/// for degenerate scales whose results are discarded.
pub(super) fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// A scale as stored f16 bytes, or `Err(scale)` if f16 cannot hold it (overflow or NaN):
/// storing it would poison every value of the block.
pub(super) fn f16_scale(scale: f32) -> Result<[u8; 2], f32> {
    let h = f16::from_f32(scale);
    if h.is_finite() {
        Ok(h.to_le_bytes())
    } else {
        Err(scale)
    }
}

/// The f32 value of little-endian f16 bytes.
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// The first value of largest magnitude (ggml's `amax`/`max` scan with a strict `<`).
pub(super) fn signed_amax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// ggml's `make_qkx2_quants`: fits `x ≈ scale * L - min` with `L` in `0..=nmax`,
/// weighting errors by `weights`, trying `nstep + 1` perturbed grids after the
/// min/max one. Writes `L` and returns `(scale, min)` with `min >= 0`.
pub(super) fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = min.min(x[i]);
        max = max.max(x[i]);
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    // The offset only ever shifts values up: a block of positives keeps min = 0.
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut laux = [0u8; 32];
    let laux = &mut laux[..n];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            // A NaN error (degenerate sums) compares false and is never taken.
            if cur_error < best_error {
                l_out[..n].copy_from_slice(laux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// ggml's `make_qx_quants` with `rmse_type = 1` and no importance weights: a signed
/// scale for `x ≈ scale * (L - nmax)` with `L` in `0..2*nmax`, searching 18 perturbed
/// grids for the best x²-weighted fit. Writes `L` and returns the scale.
pub(super) fn make_qx_quants(nmax: i32, x: &[f32], l_out: &mut [u8]) -> f32 {
    let (amax, max) = signed_amax(x);
    if amax < GROUP_MAX_EPS {
        l_out[..x.len()].fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = quant(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let iscale = -(nmax as f32) / max;
    for (dst, &v) in l_out.iter_mut().zip(x) {
        *dst = (quant(iscale, v) + nmax) as u8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (dst, &v) in l_out.iter_mut().zip(x) {
                *dst = (quant(iscale, v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `best_index_int8`: the index of the table value nearest to `x` (ties go up)
/// in the sorted table `values`.
pub(super) fn best_index_int8(values: &[i8; 16], x: f32) -> usize {
    if x <= values[0] as f32 {
        return 0;
    }
    if x >= values[15] as f32 {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < values[mid] as f32 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - (values[hi - 1] as f32) < values[hi] as f32 - x {
        hi - 1
    } else {
        hi
    }
}
