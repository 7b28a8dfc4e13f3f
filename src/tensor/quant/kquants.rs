//! K-quants with 256-element super-blocks: Q4_K, Q5_K, Q6_K.
//!
//! Q4_K/Q5_K: `{f16 d; f16 dmin; u8 scales[12]; (Q5_K: u8 qh[32];) u8 qs[128]}`, eight
//! sub-blocks of 32 with 6-bit scales and mins, `x = d*sc * q - dmin*m`. Each 32 bytes
//! of `qs` hold sub-block `2k` in the low nibbles and `2k + 1` in the high nibbles; bit
//! `i` of `qh[l]` is the fifth bit of element `32*i + l`.
//!
//! Q6_K: `{u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}`, sixteen sub-blocks of 16,
//! `x = d*scale * (q - 32)`.

use super::quantize::{
    GROUP_MAX_EPS, f16_at, f16_scale, make_qkx2_quants, make_qx_quants, nearest_int,
};

const QK_K: usize = 256;

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j`. Sub-blocks 0..4
/// use the low 6 bits of bytes 0..8; 4..8 keep their low 4 bits in bytes 8..12 and their
/// top 2 bits in the spare top bits of bytes 0..8.
fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// The inverse of [`scale_min_k4`] for all eight sub-blocks.
fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (ls[j] & 0xf) | ((lm[j] & 0xf) << 4);
            s[j - 4] |= (ls[j] >> 4) << 6;
            s[j] |= (lm[j] >> 4) << 6;
        }
    }
    s
}

pub(super) fn dequant_q4_k(src: &[u8], dst: &mut [f32]) {
    let (blocks, _) = src.as_chunks::<144>();
    let (outs, _) = dst.as_chunks_mut::<QK_K>();
    for (b, y) in blocks.iter().zip(outs) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let scales = &b[4..16];
        for (k, (qs, y)) in b[16..]
            .chunks_exact(32)
            .zip(y.chunks_exact_mut(64))
            .enumerate()
        {
            let (sc0, m0) = scale_min_k4(2 * k, scales);
            let (sc1, m1) = scale_min_k4(2 * k + 1, scales);
            let (d0, dm0) = (d * f32::from(sc0), dmin * f32::from(m0));
            let (d1, dm1) = (d * f32::from(sc1), dmin * f32::from(m1));
            for (l, &q) in qs.iter().enumerate() {
                y[l] = d0 * f32::from(q & 0xf) - dm0;
                y[l + 32] = d1 * f32::from(q >> 4) - dm1;
            }
        }
    }
}

pub(super) fn dequant_q5_k(src: &[u8], dst: &mut [f32]) {
    let (blocks, _) = src.as_chunks::<176>();
    let (outs, _) = dst.as_chunks_mut::<QK_K>();
    for (b, y) in blocks.iter().zip(outs) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let scales = &b[4..16];
        let qh = &b[16..48];
        for (k, (qs, y)) in b[48..]
            .chunks_exact(32)
            .zip(y.chunks_exact_mut(64))
            .enumerate()
        {
            let (sc0, m0) = scale_min_k4(2 * k, scales);
            let (sc1, m1) = scale_min_k4(2 * k + 1, scales);
            let (d0, dm0) = (d * f32::from(sc0), dmin * f32::from(m0));
            let (d1, dm1) = (d * f32::from(sc1), dmin * f32::from(m1));
            for (l, (&q, &h)) in qs.iter().zip(qh).enumerate() {
                let q0 = (q & 0xf) | (((h >> (2 * k)) & 1) << 4);
                let q1 = (q >> 4) | (((h >> (2 * k + 1)) & 1) << 4);
                y[l] = d0 * f32::from(q0) - dm0;
                y[l + 32] = d1 * f32::from(q1) - dm1;
            }
        }
    }
}

pub(super) fn dequant_q6_k(src: &[u8], dst: &mut [f32]) {
    let (blocks, _) = src.as_chunks::<210>();
    let (outs, _) = dst.as_chunks_mut::<QK_K>();
    for (b, y) in blocks.iter().zip(outs) {
        let d = f16_at(b, 208);
        // Each 128-element half: ql[64], qh[32], scales[8].
        for half in 0..2 {
            let ql = &b[64 * half..64 * half + 64];
            let qh = &b[128 + 32 * half..128 + 32 * half + 32];
            let sc = &b[192 + 8 * half..192 + 8 * half + 8];
            let y = &mut y[128 * half..128 * half + 128];
            // Quarter `i` (32 elements) takes nibble `i / 2` of `ql[l + 32*(i % 2)]` and
            // bits `2i..2i+2` of `qh[l]`; its scales are `sc[2i]` and `sc[2i + 1]`.
            for i in 0..4 {
                for l in 0..32 {
                    let lo = (ql[l + 32 * (i % 2)] >> (4 * (i / 2))) & 0xf;
                    let hi = (qh[l] >> (2 * i)) & 3;
                    let q = i32::from(lo | (hi << 4)) - 32;
                    let ds = d * f32::from(sc[2 * i + l / 16] as i8);
                    y[32 * i + l] = ds * q as f32;
                }
            }
        }
    }
}

/// The common part of a quantized Q4_K/Q5_K block, before its quants are packed.
struct KBlock {
    d: [u8; 2],
    dmin: [u8; 2],
    scales: [u8; 12],
    /// One quant per element, `0..=nmax`.
    l: [u8; QK_K],
}

/// Q4_K/Q5_K shared quantizer (`quantize_row_q{4,5}_K_ref`): each sub-block of 32 gets
/// an (x-magnitude weighted) scale and min from `make_qkx2_quants`, the 16 values are
/// quantized to 6 bits against the super-block's `d` and `dmin`, and the quants are then
/// recomputed against the stored scales.
fn quant_k_with_mins(x: &[f32], nmax: i32, rmin: f32, nstep: i32) -> Result<KBlock, f32> {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    for (j, (xb, lb)) in x.chunks_exact(32).zip(l.chunks_exact_mut(32)).enumerate() {
        let sum_x2: f32 = xb.iter().map(|v| v * v).sum();
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|i| av_x + xb[i].abs());
        (scales[j], mins[j]) = make_qkx2_quants(nmax, xb, &weights, lb, rmin, 0.1, nstep);
    }
    let max_scale = scales
        .iter()
        .fold(0.0f32, |a, &s| if s > a { s } else { a });
    let max_min = mins.iter().fold(0.0f32, |a, &m| if m > a { m } else { a });
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let ls: [u8; 8] =
        std::array::from_fn(|j| nearest_int(inv_scale * scales[j]).clamp(0, 63) as u8);
    let lm: [u8; 8] = std::array::from_fn(|j| nearest_int(inv_min * mins[j]).clamp(0, 63) as u8);
    let packed = pack_scale_min_k4(&ls, &lm);
    let d = f16_scale(max_scale / 63.0)?;
    let dmin = f16_scale(max_min / 63.0)?;
    let (df, dminf) = (f16_at(&d, 0), f16_at(&dmin, 0));
    for (j, (xb, lb)) in x.chunks_exact(32).zip(l.chunks_exact_mut(32)).enumerate() {
        let (sc, m) = scale_min_k4(j, &packed);
        let d = df * f32::from(sc);
        if d == 0.0 {
            // The sub-block dequantizes to -dm whatever its quants: keep the fit's.
            continue;
        }
        let dm = dminf * f32::from(m);
        for (q, &v) in lb.iter_mut().zip(xb) {
            *q = nearest_int((v + dm) / d).clamp(0, nmax) as u8;
        }
    }
    Ok(KBlock {
        d,
        dmin,
        scales: packed,
        l,
    })
}

pub(super) fn quant_q4_k(x: &[f32], out: &mut [u8]) -> Result<(), f32> {
    let KBlock { d, dmin, scales, l } = quant_k_with_mins(x, 15, -1.0, 20)?;
    out[0..2].copy_from_slice(&d);
    out[2..4].copy_from_slice(&dmin);
    out[4..16].copy_from_slice(&scales);
    for (k, qs) in out[16..].chunks_exact_mut(32).enumerate() {
        for (i, q) in qs.iter_mut().enumerate() {
            *q = l[64 * k + i] | (l[64 * k + 32 + i] << 4);
        }
    }
    Ok(())
}

pub(super) fn quant_q5_k(x: &[f32], out: &mut [u8]) -> Result<(), f32> {
    let KBlock { d, dmin, scales, l } = quant_k_with_mins(x, 31, -0.5, 15)?;
    out[0..2].copy_from_slice(&d);
    out[2..4].copy_from_slice(&dmin);
    out[4..16].copy_from_slice(&scales);
    let (qh, qs) = out[16..].split_at_mut(32);
    qh.fill(0);
    for (k, qs) in qs.chunks_exact_mut(32).enumerate() {
        for (i, q) in qs.iter_mut().enumerate() {
            let (l0, l1) = (l[64 * k + i], l[64 * k + 32 + i]);
            *q = (l0 & 0xf) | ((l1 & 0xf) << 4);
            qh[i] |= ((l0 >> 4) << (2 * k)) | ((l1 >> 4) << (2 * k + 1));
        }
    }
    Ok(())
}

/// `quantize_row_q6_K_ref`: signed 6-bit quants per sub-block of 16 from
/// `make_qx_quants`, the sub-block scales stored as i8 against one f16 `d` chosen so the
/// largest-magnitude scale maps to -128.
pub(super) fn quant_q6_k(x: &[f32], out: &mut [u8]) -> Result<(), f32> {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
    for (ib, (xb, lb)) in x.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
        scales[ib] = make_qx_quants(32, xb, lb);
        if scales[ib].abs() > max_abs_scale {
            max_abs_scale = scales[ib].abs();
            max_scale = scales[ib];
        }
    }
    out.fill(0);
    if max_abs_scale < GROUP_MAX_EPS {
        return Ok(());
    }
    let iscale = -128.0 / max_scale;
    let d = f16_scale(1.0 / iscale)?;
    out[208..210].copy_from_slice(&d);
    let df = f16_at(&d, 0);
    for (ib, (xb, lb)) in x.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
        let sc = nearest_int(iscale * scales[ib]).clamp(-128, 127) as i8;
        out[192 + ib] = sc as u8;
        let d = df * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        for (q, &v) in lb.iter_mut().zip(xb) {
            *q = (nearest_int(v / d).clamp(-32, 31) + 32) as u8;
        }
    }
    let (ql, rest) = out.split_at_mut(128);
    let qh = &mut rest[..64];
    for half in 0..2 {
        let l = &l[128 * half..128 * half + 128];
        let ql = &mut ql[64 * half..64 * half + 64];
        let qh = &mut qh[32 * half..32 * half + 32];
        for i in 0..32 {
            ql[i] = (l[i] & 0xf) | ((l[i + 64] & 0xf) << 4);
            ql[i + 32] = (l[i + 32] & 0xf) | ((l[i + 96] & 0xf) << 4);
            qh[i] = (l[i] >> 4)
                | ((l[i + 32] >> 4) << 2)
                | ((l[i + 64] >> 4) << 4)
                | ((l[i + 96] >> 4) << 6);
        }
    }
    Ok(())
}
