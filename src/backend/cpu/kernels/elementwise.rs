//! Elementwise ops and the last-dimension slice.

use super::math::{sigmoid, silu};

/// `y = a + b`.
pub(super) fn add(a: &[f32], b: &[f32], y: &mut [f32]) {
    for ((o, x), z) in y.iter_mut().zip(a).zip(b) {
        *o = x + z;
    }
}

/// `y = x · sigmoid(g)` (the attention output gate).
pub(super) fn sigmoid_mul(x: &[f32], g: &[f32], y: &mut [f32]) {
    for ((o, xv), gv) in y.iter_mut().zip(x).zip(g) {
        *o = xv * sigmoid(*gv);
    }
}

/// `y = silu(gate) · up` (the MLP activation).
pub(super) fn swiglu(gate: &[f32], up: &[f32], y: &mut [f32]) {
    for ((o, g), u) in y.iter_mut().zip(gate).zip(up) {
        *o = silu(*g) * u;
    }
}

/// `y[r, ..] = x[r, offset .. offset + len]` for rows of `width` values.
pub(super) fn slice_last(x: &[f32], width: usize, offset: usize, len: usize, y: &mut [f32]) {
    for (xr, yr) in x.chunks_exact(width).zip(y.chunks_exact_mut(len)) {
        yr.copy_from_slice(&xr[offset..offset + len]);
    }
}

/// `y = x[start .. start + rows, :]` for rows of `width` values (the contiguous range).
pub(super) fn rows(x: &[f32], width: usize, start: usize, y: &mut [f32]) {
    let from = start * width;
    y.copy_from_slice(&x[from..from + y.len()]);
}
