//! Quantized block formats: CPU dequantization (the reference every backend is checked
//! against) and quantizers (used to build synthetic models and test weights).
//!
//! Layouts and arithmetic follow ggml. Dequantization is bit-exact with the numpy
//! dequantizers of the `gguf` Python package (checked by `tests/quant_vs_gguf_py.rs`);
//! that means doing each product in f32 in the same order, never fusing multiply-adds.

mod float;
mod iq4;
mod kquants;
mod legacy;
mod quantize;

pub use float::f32_to_bf16_bits;
pub use iq4::KVALUES as IQ4_NL_VALUES;

use crate::tensor::DType;
use rayon::prelude::*;
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum QuantError {
    #[error("{dtype}: {n} elements is not a multiple of the block size {block}")]
    NotBlockMultiple {
        dtype: DType,
        n: usize,
        block: usize,
    },
    #[error("{dtype}: {n} elements take {expected} bytes, but the source has {actual}")]
    WrongByteLength {
        dtype: DType,
        n: usize,
        expected: usize,
        actual: usize,
    },
    #[error("{dtype}: dequantization is not supported")]
    UnsupportedDequantize { dtype: DType },
    #[error("{dtype}: quantization is not supported")]
    UnsupportedQuantize { dtype: DType },
    #[error("{dtype}: cannot quantize non-finite value {value} at element {index}")]
    NonFinite {
        dtype: DType,
        index: usize,
        value: f32,
    },
    #[error("{dtype}: block {block} needs scale {scale:e}, which f16 cannot hold")]
    ScaleOverflow {
        dtype: DType,
        block: usize,
        scale: f32,
    },
}

/// Dequantizes a row of whole blocks: `src` holds the blocks of `dst.len()` elements.
type DequantRow = fn(&[u8], &mut [f32]);
/// Quantizes one block; `Err` carries a block scale that does not fit in f16.
type QuantBlock = fn(&[f32], &mut [u8]) -> Result<(), f32>;

fn dequant_row_fn(dtype: DType) -> Option<DequantRow> {
    Some(match dtype {
        DType::F32 => float::dequant_f32,
        DType::F16 => float::dequant_f16,
        DType::BF16 => float::dequant_bf16,
        DType::Q4_0 => legacy::dequant_q4_0,
        DType::Q4_1 => legacy::dequant_q4_1,
        DType::Q5_0 => legacy::dequant_q5_0,
        DType::Q5_1 => legacy::dequant_q5_1,
        DType::Q8_0 => legacy::dequant_q8_0,
        DType::Q4K => kquants::dequant_q4_k,
        DType::Q5K => kquants::dequant_q5_k,
        DType::Q6K => kquants::dequant_q6_k,
        DType::Iq4Nl => iq4::dequant_iq4_nl,
        DType::Iq4Xs => iq4::dequant_iq4_xs,
        _ => return None,
    })
}

fn quant_block_fn(dtype: DType) -> Option<QuantBlock> {
    Some(match dtype {
        DType::Q4_0 => legacy::quant_q4_0,
        DType::Q4_1 => legacy::quant_q4_1,
        DType::Q5_0 => legacy::quant_q5_0,
        DType::Q5_1 => legacy::quant_q5_1,
        DType::Q8_0 => legacy::quant_q8_0,
        DType::Q4K => kquants::quant_q4_k,
        DType::Q5K => kquants::quant_q5_k,
        DType::Q6K => kquants::quant_q6_k,
        DType::Iq4Nl => iq4::quant_iq4_nl,
        DType::Iq4Xs => iq4::quant_iq4_xs,
        _ => return None,
    })
}

/// Whether [`quantize`] can produce `dtype`.
pub fn is_quantizable(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16) || quant_block_fn(dtype).is_some()
}

/// The byte length of `n` elements of `dtype`, or the error naming why there is none.
fn byte_len(dtype: DType, n: usize) -> Result<usize, QuantError> {
    dtype.bytes_for(n).ok_or(QuantError::NotBlockMultiple {
        dtype,
        n,
        block: dtype.block_elems(),
    })
}

/// Checks the arguments of a dequantization and returns the row function.
fn dequant_checked(dtype: DType, src: &[u8], n: usize) -> Result<DequantRow, QuantError> {
    let f = dequant_row_fn(dtype).ok_or(QuantError::UnsupportedDequantize { dtype })?;
    let expected = byte_len(dtype, n)?;
    if src.len() != expected {
        return Err(QuantError::WrongByteLength {
            dtype,
            n,
            expected,
            actual: src.len(),
        });
    }
    Ok(f)
}

/// Dequantizes `src` (whole blocks of `dtype`) into `dst`, whose length is the element
/// count; `src` must hold exactly `dtype.bytes_for(dst.len())` bytes.
///
/// Runs on the calling thread and never allocates: the CPU matmul calls it per weight
/// row into a scratch buffer.
pub fn dequantize_into(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let f = dequant_checked(dtype, src, dst.len())?;
    f(src, dst);
    Ok(())
}

/// Elements per parallel task in whole-tensor calls: a multiple of every block size
/// (32 and 256), and large enough that scheduling costs nothing next to the work.
const PAR_ELEMS: usize = 1 << 16;

/// Dequantizes `n` elements of `dtype` from `src`, splitting large tensors over the
/// rayon pool (results are identical to [`dequantize_into`]: blocks are independent).
pub fn dequantize(dtype: DType, src: &[u8], n: usize) -> Result<Vec<f32>, QuantError> {
    let f = dequant_checked(dtype, src, n)?;
    let mut out = vec![0.0; n];
    if n <= PAR_ELEMS {
        f(src, &mut out);
    } else {
        let chunk_bytes = PAR_ELEMS / dtype.block_elems() * dtype.block_bytes();
        out.par_chunks_mut(PAR_ELEMS)
            .zip(src.par_chunks(chunk_bytes))
            .for_each(|(y, x)| f(x, y));
    }
    Ok(out)
}

/// Quantizes `src` to `dtype` (`src.len()` must be a whole number of blocks).
///
/// F32/F16/BF16 convert with round-to-nearest-even like ggml. Q8_0 (and the other
/// legacy types) are bit-identical to ggml's reference quantizers; the K-quants and
/// IQ4 types follow the reference algorithms without importance weights.
/// Block types reject non-finite input and blocks whose scale would overflow f16, so
/// the output never holds NaN or infinite scales.
pub fn quantize(dtype: DType, src: &[f32]) -> Result<Vec<u8>, QuantError> {
    let len = byte_len(dtype, src.len())?;
    match dtype {
        DType::F32 => return Ok(float::quant_f32(src)),
        DType::F16 => return Ok(float::quant_f16(src)),
        DType::BF16 => return Ok(float::quant_bf16(src)),
        _ => {}
    }
    let f = quant_block_fn(dtype).ok_or(QuantError::UnsupportedQuantize { dtype })?;
    if let Some((index, &value)) = src.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(QuantError::NonFinite {
            dtype,
            index,
            value,
        });
    }
    let mut out = vec![0u8; len];
    src.par_chunks(dtype.block_elems())
        .zip(out.par_chunks_mut(dtype.block_bytes()))
        .enumerate()
        // K-quant blocks take microseconds each: batch them so tiny tensors stay serial.
        .with_min_len(64)
        .try_for_each(|(block, (x, y))| {
            f(x, y).map_err(|scale| QuantError::ScaleOverflow {
                dtype,
                block,
                scale,
            })
        })?;
    Ok(out)
}

#[cfg(test)]
mod tests;

/// The activations as the int8-activation matmuls see them (ggml's q8_1 rounding, hip
/// `quantize_q8`): per 32 consecutive values `d = max|x| / 127`, `q = round(x · (1/d))`, value
/// `d · q`. A trailing partial group is quantized the same way. The reference for those kernels:
/// their result equals the f32 matmul of the dequantized weights with these values, to rounding.
pub fn q8_activation_roundtrip(x: &[f32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for g in x.chunks(32) {
        let amax = g.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend(g.iter().map(|v| d * (v * id).round()));
    }
    out
}
