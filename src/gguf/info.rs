//! Tensor descriptors and the shape rules shared by the reader and the writer.

use super::GgufError;
use crate::tensor::DType;

/// The most dimensions accepted. ggml uses 4 (`GGML_MAX_DIMS`); 8 leaves room for future files while
/// still rejecting garbage early.
pub const MAX_DIMS: usize = 8;

/// One tensor of a GGUF file, as described by its header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions in ggml order: `ne[0]` is the contiguous (innermost) one.
    pub ne: Vec<u64>,
    pub dtype: DType,
    /// Byte offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes.
    pub size: usize,
}

impl TensorInfo {
    /// The row-major (PyTorch-style) shape: `ne` reversed. A Linear `[out, in]` is stored as
    /// `ne = {in, out}`.
    ///
    /// Valid for infos read from a file or built by the writer, whose element counts were checked to
    /// fit in usize.
    pub fn shape(&self) -> Vec<usize> {
        self.ne.iter().rev().map(|&n| n as usize).collect()
    }

    /// The number of elements (1 for a tensor with no dimensions).
    pub fn numel(&self) -> usize {
        self.ne.iter().map(|&n| n as usize).product()
    }
}

/// Checks a tensor's shape against its type and returns its data size in bytes.
///
/// Rules (as ggml's loader applies them): at most [`MAX_DIMS`] dimensions, the element count fits in
/// usize, and the row length `ne[0]` is a whole number of quant blocks (so every row starts on a block).
/// Zero-sized dimensions are allowed and give an empty tensor.
pub(crate) fn data_size(name: &str, ne: &[u64], dtype: DType) -> Result<usize, GgufError> {
    let bad = |reason: String| GgufError::BadShape {
        name: name.to_owned(),
        ne: ne.to_vec(),
        reason,
    };
    if ne.len() > MAX_DIMS {
        return Err(bad(format!("more than {MAX_DIMS} dimensions")));
    }
    let numel = ne
        .iter()
        .try_fold(1usize, |acc, &n| {
            usize::try_from(n).ok().and_then(|n| acc.checked_mul(n))
        })
        .ok_or_else(|| bad("element count overflows".to_owned()))?;
    let row = ne.first().copied().unwrap_or(1);
    let block = dtype.block_elems() as u64;
    if row % block != 0 {
        return Err(bad(format!(
            "row length {row} is not a multiple of the {dtype} block size {block}"
        )));
    }
    dtype.bytes_for(numel).ok_or_else(|| {
        bad(format!(
            "{numel} elements of {dtype} overflow the byte size"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_shape_rules() {
        assert_eq!(data_size("t", &[256, 2], DType::Q4K).unwrap(), 288);
        assert_eq!(data_size("t", &[], DType::F32).unwrap(), 4);
        assert_eq!(data_size("t", &[0, 5], DType::F16).unwrap(), 0);
        assert!(matches!(
            data_size("t", &[16, 2], DType::Q8_0),
            Err(GgufError::BadShape { .. })
        ));
        assert!(matches!(
            data_size("t", &[u64::MAX, 2], DType::F32),
            Err(GgufError::BadShape { .. })
        ));
        assert!(matches!(
            data_size("t", &[1 << 62], DType::F32),
            Err(GgufError::BadShape { .. })
        ));
        assert!(matches!(
            data_size("t", &[1; 9], DType::F32),
            Err(GgufError::BadShape { .. })
        ));
        let t = TensorInfo {
            name: "w".into(),
            ne: vec![4, 3],
            dtype: DType::F32,
            offset: 0,
            size: 48,
        };
        assert_eq!(t.shape(), vec![3, 4]);
        assert_eq!(t.numel(), 12);
    }
}
