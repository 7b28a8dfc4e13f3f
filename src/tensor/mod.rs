//! Tensor element types and quantized block formats.

pub mod dtype;
pub mod quant;

pub use dtype::DType;
