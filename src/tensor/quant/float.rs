//! Plain float types: F32, F16 and BF16 (one element per "block").

use half::f16;

pub(super) fn dequant_f32(src: &[u8], dst: &mut [f32]) {
    let (words, _) = src.as_chunks::<4>();
    for (y, w) in dst.iter_mut().zip(words) {
        *y = f32::from_le_bytes(*w);
    }
}

pub(super) fn dequant_f16(src: &[u8], dst: &mut [f32]) {
    let (halves, _) = src.as_chunks::<2>();
    for (y, h) in dst.iter_mut().zip(halves) {
        *y = f16::from_le_bytes(*h).to_f32();
    }
}

/// BF16 is the top half of an f32, so widening is a shift (exact, NaN payloads kept).
pub(super) fn dequant_bf16(src: &[u8], dst: &mut [f32]) {
    let (halves, _) = src.as_chunks::<2>();
    for (y, h) in dst.iter_mut().zip(halves) {
        *y = f32::from_bits(u32::from(u16::from_le_bytes(*h)) << 16);
    }
}

pub(super) fn quant_f32(src: &[f32]) -> Vec<u8> {
    src.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Round-to-nearest-even, as ggml's `GGML_FP32_TO_FP16` and numpy's `astype(float16)`.
pub(super) fn quant_f16(src: &[f32]) -> Vec<u8> {
    src.iter()
        .flat_map(|&v| f16::from_f32(v).to_le_bytes())
        .collect()
}

/// ggml's `ggml_compute_fp32_to_bf16`: NaNs are forced quiet (truncation could turn a
/// NaN into an infinity), everything else rounds to nearest even.
pub fn f32_to_bf16_bits(v: f32) -> u16 {
    let u = v.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        ((u >> 16) | 64) as u16
    } else {
        // Cannot overflow: the largest finite/infinite input is 0xff80_0000.
        ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
    }
}

pub(super) fn quant_bf16(src: &[f32]) -> Vec<u8> {
    src.iter()
        .flat_map(|&v| f32_to_bf16_bits(v).to_le_bytes())
        .collect()
}
