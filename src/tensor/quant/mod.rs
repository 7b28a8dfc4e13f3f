//! Quantized block formats: CPU dequantization (the reference) and quantizers. (Being written.)

use crate::tensor::DType;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum QuantError {
    #[error("quant: {0}")]
    Other(String),
}

/// Dequantizes `src` (whole blocks of `dtype`) into `dst`, whose length is the element count.
pub fn dequantize_into(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let _ = (src, dst);
    Err(QuantError::Other(format!("{dtype} dequantization is being written")))
}

/// Dequantizes `n` elements of `dtype` from `src`.
pub fn dequantize(dtype: DType, src: &[u8], n: usize) -> Result<Vec<f32>, QuantError> {
    let mut out = vec![0.0; n];
    dequantize_into(dtype, src, &mut out)?;
    Ok(out)
}
