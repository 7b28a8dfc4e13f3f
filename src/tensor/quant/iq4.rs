//! Non-linear 4-bit types: IQ4_NL (32-element blocks) and IQ4_XS (256-element
//! super-blocks with 6-bit sub-block scales). Each nibble indexes [`KVALUES`].
//!
//! IQ4_NL: `{f16 d; u8 qs[16]}`, `x = d * KVALUES[q]`, nibbles as in Q4_0.
//! IQ4_XS: `{f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}`; sub-block `ib` (32
//! elements, `qs[16*ib..]`) has `ls` = low nibble `ib % 2` of `scales_l[ib / 2]` plus
//! bits `2*ib..2*ib+2` of `scales_h` on top, and `x = d*(ls - 32) * KVALUES[q]`.

use super::quantize::{GROUP_MAX_EPS, best_index_int8, f16_at, f16_scale, nearest_int};

/// ggml's `kvalues_iq4nl`: a 4-bit grid denser near zero, matching weight distributions.
pub const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Dequantizes the 32 elements of `qs[..16]` with scale `d`.
fn dequant_nl32(d: f32, qs: &[u8], y: &mut [f32]) {
    for (j, &q) in qs[..16].iter().enumerate() {
        y[j] = d * f32::from(KVALUES[usize::from(q & 0xf)]);
        y[j + 16] = d * f32::from(KVALUES[usize::from(q >> 4)]);
    }
}

pub(super) fn dequant_iq4_nl(src: &[u8], dst: &mut [f32]) {
    let (blocks, _) = src.as_chunks::<18>();
    let (outs, _) = dst.as_chunks_mut::<32>();
    for (b, y) in blocks.iter().zip(outs) {
        dequant_nl32(f16_at(b, 0), &b[2..], y);
    }
}

pub(super) fn dequant_iq4_xs(src: &[u8], dst: &mut [f32]) {
    let (blocks, _) = src.as_chunks::<136>();
    let (outs, _) = dst.as_chunks_mut::<256>();
    for (b, y) in blocks.iter().zip(outs) {
        let d = f16_at(b, 0);
        let scales_h = u16::from_le_bytes([b[2], b[3]]);
        let scales_l = &b[4..8];
        for (ib, (qs, y)) in b[8..]
            .chunks_exact(16)
            .zip(y.chunks_exact_mut(32))
            .enumerate()
        {
            let lo = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
            let hi = ((scales_h >> (2 * ib)) & 3) as u8;
            let ls = i32::from(lo | (hi << 4));
            dequant_nl32(d * (ls - 32) as f32, qs, y);
        }
    }
}

/// How many perturbed grids each side of the initial one the scale search tries
/// (ggml's `ntry` for IQ4_NL and IQ4_XS).
const NTRY: i32 = 7;

/// The best scale for one 32-element group (`quantize_row_iq4_nl_impl`'s inner loop
/// without importance weights: errors weighted by x²), or 0 for an all-zero group.
fn best_group_scale(xb: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in xb {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = f32::from(KVALUES[0]);
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for &v in xb {
            let q = f32::from(KVALUES[best_index_int8(&KVALUES, id * v)]);
            let w = v * v;
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    // First guess: the extreme value lands on the grid's end (-127).
    let mut d = -max / v0;
    let (sumqx, sumq2) = sums(1.0 / d);
    // Tiny values whose squares underflow give no weights: keep the guess then.
    if sumq2 > 0.0 {
        d = sumqx / sumq2;
    }
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry as f32 + v0) / max;
        let (sumqx, sumq2) = sums(id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Packs 32 grid indices like Q4_0: element `j` low nibble, `j + 16` high.
fn pack(l: &[u8], qs: &mut [u8]) {
    for j in 0..16 {
        qs[j] = l[j] | (l[j + 16] << 4);
    }
}

/// Grid indices for `xb` at scale `d` (all 0 when `d` is 0: the values are then 0).
fn indices(xb: &[f32], d: f32) -> [u8; 32] {
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    std::array::from_fn(|j| best_index_int8(&KVALUES, id * xb[j]) as u8)
}

pub(super) fn quant_iq4_nl(x: &[f32], out: &mut [u8]) -> Result<(), f32> {
    let d = f16_scale(best_group_scale(x))?;
    out[..2].copy_from_slice(&d);
    // Index against the stored (rounded) scale, which is what dequantization uses.
    pack(&indices(x, f16_at(&d, 0)), &mut out[2..]);
    Ok(())
}

/// IQ4_XS: per-group scales as for IQ4_NL, then quantized to 6 bits against a
/// super-block `d` that maps the largest-magnitude scale to -32.
pub(super) fn quant_iq4_xs(x: &[f32], out: &mut [u8]) -> Result<(), f32> {
    let scales: [f32; 8] = std::array::from_fn(|ib| best_group_scale(&x[32 * ib..32 * ib + 32]));
    let mut max_scale = 0.0f32;
    let mut amax_scale = 0.0f32;
    for &s in &scales {
        if s.abs() > amax_scale {
            amax_scale = s.abs();
            max_scale = s;
        }
    }
    let d16 = f16_scale(-max_scale / 32.0)?;
    let d = f16_at(&d16, 0);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.fill(0);
    out[..2].copy_from_slice(&d16);
    let mut scales_h = 0u16;
    for (ib, xb) in x.chunks_exact(32).enumerate() {
        let l = nearest_int(id * scales[ib]).clamp(-32, 31);
        let q = indices(xb, d * l as f32);
        pack(&q, &mut out[8 + 16 * ib..8 + 16 * ib + 16]);
        let l = (l + 32) as u8;
        out[4 + ib / 2] |= (l & 0xf) << (4 * (ib % 2));
        scales_h |= u16::from(l >> 4) << (2 * ib);
    }
    out[2..4].copy_from_slice(&scales_h.to_le_bytes());
    Ok(())
}
