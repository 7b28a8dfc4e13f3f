//! The original ggml block types, 32 elements per block: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! Nibble order: byte `j` of `qs` holds element `j` in its low nibble and element
//! `j + 16` in its high nibble; Q5's fifth bits are bit `j` of the little-endian `qh`.
//! The quantizers are ggml's `quantize_row_*_ref`, bit for bit.

use super::quantize::{f16_at, f16_scale, signed_amax};

/// Q4_0: `{f16 d; u8 qs[16]}`, `x = (q - 8) * d`.
pub(super) fn dequant_q4_0(src: &[u8], dst: &mut [f32]) {
    let (blocks, _) = src.as_chunks::<18>();
    let (outs, _) = dst.as_chunks_mut::<32>();
    for (b, y) in blocks.iter().zip(outs) {
        let d = f16_at(b, 0);
        for (j, &q) in b[2..].iter().enumerate() {
            y[j] = (i32::from(q & 0xf) - 8) as f32 * d;
            y[j + 16] = (i32::from(q >> 4) - 8) as f32 * d;
        }
    }
}

/// Q4_1: `{f16 d; f16 m; u8 qs[16]}`, `x = q * d + m`.
pub(super) fn dequant_q4_1(src: &[u8], dst: &mut [f32]) {
    let (blocks, _) = src.as_chunks::<20>();
    let (outs, _) = dst.as_chunks_mut::<32>();
    for (b, y) in blocks.iter().zip(outs) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        for (j, &q) in b[4..].iter().enumerate() {
            y[j] = f32::from(q & 0xf) * d + m;
            y[j + 16] = f32::from(q >> 4) * d + m;
        }
    }
}

/// The two 5-bit values of byte `j` of a Q5 block's `qs`, given the 32 high bits.
fn q5_pair(qs: u8, qh: u32, j: usize) -> (u8, u8) {
    let h0 = ((qh >> j) & 1) as u8;
    let h1 = ((qh >> (j + 16)) & 1) as u8;
    ((qs & 0xf) | (h0 << 4), (qs >> 4) | (h1 << 4))
}

/// Q5_0: `{f16 d; u8 qh[4]; u8 qs[16]}`, `x = (q - 16) * d`.
pub(super) fn dequant_q5_0(src: &[u8], dst: &mut [f32]) {
    let (blocks, _) = src.as_chunks::<22>();
    let (outs, _) = dst.as_chunks_mut::<32>();
    for (b, y) in blocks.iter().zip(outs) {
        let d = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        for (j, &q) in b[6..].iter().enumerate() {
            let (q0, q1) = q5_pair(q, qh, j);
            y[j] = (i32::from(q0) - 16) as f32 * d;
            y[j + 16] = (i32::from(q1) - 16) as f32 * d;
        }
    }
}

/// Q5_1: `{f16 d; f16 m; u8 qh[4]; u8 qs[16]}`, `x = q * d + m`.
pub(super) fn dequant_q5_1(src: &[u8], dst: &mut [f32]) {
    let (blocks, _) = src.as_chunks::<24>();
    let (outs, _) = dst.as_chunks_mut::<32>();
    for (b, y) in blocks.iter().zip(outs) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        for (j, &q) in b[8..].iter().enumerate() {
            let (q0, q1) = q5_pair(q, qh, j);
            y[j] = f32::from(q0) * d + m;
            y[j + 16] = f32::from(q1) * d + m;
        }
    }
}

/// Q8_0: `{f16 d; i8 qs[32]}`, `x = q * d`.
pub(super) fn dequant_q8_0(src: &[u8], dst: &mut [f32]) {
    let (blocks, _) = src.as_chunks::<34>();
    let (outs, _) = dst.as_chunks_mut::<32>();
    for (b, y) in blocks.iter().zip(outs) {
        let d = f16_at(b, 0);
        for (y, &q) in y.iter_mut().zip(&b[2..]) {
            *y = f32::from(q as i8) * d;
        }
    }
}

/// `1 / d`, or 0 for an all-zero block (whose quants then all sit at the zero point).
fn inverse(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

/// The smallest and largest value, from ggml's `±FLT_MAX` starting points with its
/// strict comparisons (so among equal values, e.g. `0.0` and `-0.0`, the first wins).
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < lo {
            lo = v;
        }
        if v > hi {
            hi = v;
        }
    }
    (lo, hi)
}

/// Packs 32 quants of up to 4 bits: element `j` low, `j + 16` high.
fn pack_nibbles(q: &[u8; 32], qs: &mut [u8]) {
    for (j, dst) in qs[..16].iter_mut().enumerate() {
        *dst = (q[j] & 0xf) | ((q[j + 16] & 0xf) << 4);
    }
}

/// The fifth bits of 32 quants as Q5's little-endian `qh`.
fn fifth_bits(q: &[u8; 32]) -> [u8; 4] {
    let qh = q
        .iter()
        .enumerate()
        .fold(0u32, |acc, (j, &v)| acc | (u32::from(v >> 4) << j));
    qh.to_le_bytes()
}

/// `quantize_row_q4_0_ref`: the signed extreme maps to -8, so the scale can be negative.
pub(super) fn quant_q4_0(x: &[f32], out: &mut [u8]) -> Result<(), f32> {
    let (_, max) = signed_amax(x);
    let d = max / -8.0;
    let id = inverse(d);
    // `as u8` truncates like C's `(int8_t)` for these non-negative values.
    let q: [u8; 32] = std::array::from_fn(|j| ((x[j] * id + 8.5) as u8).min(15));
    out[..2].copy_from_slice(&f16_scale(d)?);
    pack_nibbles(&q, &mut out[2..]);
    Ok(())
}

/// `quantize_row_q4_1_ref`: 16 levels spanning `[min, max]`.
pub(super) fn quant_q4_1(x: &[f32], out: &mut [u8]) -> Result<(), f32> {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = inverse(d);
    let q: [u8; 32] = std::array::from_fn(|j| (((x[j] - min) * id + 0.5) as u8).min(15));
    out[..2].copy_from_slice(&f16_scale(d)?);
    out[2..4].copy_from_slice(&f16_scale(min)?);
    pack_nibbles(&q, &mut out[4..]);
    Ok(())
}

/// `quantize_row_q5_0_ref`: the signed extreme maps to -16.
pub(super) fn quant_q5_0(x: &[f32], out: &mut [u8]) -> Result<(), f32> {
    let (_, max) = signed_amax(x);
    let d = max / -16.0;
    let id = inverse(d);
    let q: [u8; 32] = std::array::from_fn(|j| ((x[j] * id + 16.5) as u8).min(31));
    out[..2].copy_from_slice(&f16_scale(d)?);
    out[2..6].copy_from_slice(&fifth_bits(&q));
    pack_nibbles(&q, &mut out[6..]);
    Ok(())
}

/// `quantize_row_q5_1_ref`: 32 levels spanning `[min, max]`.
pub(super) fn quant_q5_1(x: &[f32], out: &mut [u8]) -> Result<(), f32> {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = inverse(d);
    let q: [u8; 32] = std::array::from_fn(|j| (((x[j] - min) * id + 0.5) as u8).min(31));
    out[..2].copy_from_slice(&f16_scale(d)?);
    out[2..4].copy_from_slice(&f16_scale(min)?);
    out[4..8].copy_from_slice(&fifth_bits(&q));
    pack_nibbles(&q, &mut out[8..]);
    Ok(())
}

/// `quantize_row_q8_0_ref`: `d = amax / 127`, quants rounded half away from zero
/// (`f32::round`, like C's `roundf`) from the unrounded f32 `1 / d`.
pub(super) fn quant_q8_0(x: &[f32], out: &mut [u8]) -> Result<(), f32> {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = inverse(d);
    out[..2].copy_from_slice(&f16_scale(d)?);
    for (dst, &v) in out[2..].iter_mut().zip(x) {
        *dst = (v * id).round() as i8 as u8;
    }
    Ok(())
}
