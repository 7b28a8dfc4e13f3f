//! Element and block types of tensors, with ggml's type ids and block geometry.

use std::fmt;

/// A tensor element type as stored in a GGUF file (ggml `ggml_type`).
///
/// Quantized types store `block_elems()` values in `block_bytes()` bytes; a row's
/// length must be a multiple of the block size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq2Xxs,
    Iq2Xs,
    Iq3Xxs,
    Iq1S,
    Iq4Nl,
    Iq3S,
    Iq2S,
    Iq4Xs,
    I8,
    I16,
    I32,
    I64,
    F64,
    Iq1M,
    BF16,
    Tq1_0,
    Tq2_0,
    Mxfp4,
}

/// Every type with its ggml id, name, elements per block and bytes per block.
const TABLE: &[(DType, u32, &str, usize, usize)] = &[
    (DType::F32, 0, "F32", 1, 4),
    (DType::F16, 1, "F16", 1, 2),
    (DType::Q4_0, 2, "Q4_0", 32, 18),
    (DType::Q4_1, 3, "Q4_1", 32, 20),
    (DType::Q5_0, 6, "Q5_0", 32, 22),
    (DType::Q5_1, 7, "Q5_1", 32, 24),
    (DType::Q8_0, 8, "Q8_0", 32, 34),
    (DType::Q8_1, 9, "Q8_1", 32, 36),
    (DType::Q2K, 10, "Q2_K", 256, 84),
    (DType::Q3K, 11, "Q3_K", 256, 110),
    (DType::Q4K, 12, "Q4_K", 256, 144),
    (DType::Q5K, 13, "Q5_K", 256, 176),
    (DType::Q6K, 14, "Q6_K", 256, 210),
    (DType::Q8K, 15, "Q8_K", 256, 292),
    (DType::Iq2Xxs, 16, "IQ2_XXS", 256, 66),
    (DType::Iq2Xs, 17, "IQ2_XS", 256, 74),
    (DType::Iq3Xxs, 18, "IQ3_XXS", 256, 98),
    (DType::Iq1S, 19, "IQ1_S", 256, 50),
    (DType::Iq4Nl, 20, "IQ4_NL", 32, 18),
    (DType::Iq3S, 21, "IQ3_S", 256, 110),
    (DType::Iq2S, 22, "IQ2_S", 256, 82),
    (DType::Iq4Xs, 23, "IQ4_XS", 256, 136),
    (DType::I8, 24, "I8", 1, 1),
    (DType::I16, 25, "I16", 1, 2),
    (DType::I32, 26, "I32", 1, 4),
    (DType::I64, 27, "I64", 1, 8),
    (DType::F64, 28, "F64", 1, 8),
    (DType::Iq1M, 29, "IQ1_M", 256, 56),
    (DType::BF16, 30, "BF16", 1, 2),
    (DType::Tq1_0, 34, "TQ1_0", 256, 54),
    (DType::Tq2_0, 35, "TQ2_0", 256, 66),
    (DType::Mxfp4, 39, "MXFP4", 32, 17),
];

impl DType {
    fn entry(self) -> &'static (DType, u32, &'static str, usize, usize) {
        TABLE
            .iter()
            .find(|e| e.0 == self)
            .expect("every DType variant has a table entry")
    }

    /// The type for a ggml type id, or `None` for an id this build does not know.
    pub fn from_ggml_id(id: u32) -> Option<DType> {
        TABLE.iter().find(|e| e.1 == id).map(|e| e.0)
    }

    /// The type for a ggml type name such as `"Q4_K"` (case-insensitive).
    pub fn from_name(name: &str) -> Option<DType> {
        TABLE
            .iter()
            .find(|e| e.2.eq_ignore_ascii_case(name))
            .map(|e| e.0)
    }

    pub fn ggml_id(self) -> u32 {
        self.entry().1
    }

    pub fn name(self) -> &'static str {
        self.entry().2
    }

    /// Elements per block (1 for plain types).
    pub fn block_elems(self) -> usize {
        self.entry().3
    }

    /// Bytes per block (the element size for plain types).
    pub fn block_bytes(self) -> usize {
        self.entry().4
    }

    pub fn is_quantized(self) -> bool {
        self.block_elems() > 1
    }

    /// Bytes taken by `n` elements, or `None` if `n` is not a whole number of blocks
    /// or the size overflows.
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_elems()) {
            return None;
        }
        (n / self.block_elems()).checked_mul(self.block_bytes())
    }

    /// Whether the CPU reference can turn this type into f32 values.
    pub fn is_dequantizable(self) -> bool {
        matches!(
            self,
            DType::F32
                | DType::F16
                | DType::BF16
                | DType::Q4_0
                | DType::Q4_1
                | DType::Q5_0
                | DType::Q5_1
                | DType::Q8_0
                | DType::Q4K
                | DType::Q5K
                | DType::Q6K
                | DType::Iq4Nl
                | DType::Iq4Xs
        )
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for e in TABLE {
            assert_eq!(DType::from_ggml_id(e.1), Some(e.0));
            assert_eq!(DType::from_name(e.2), Some(e.0));
            assert_eq!(e.0.ggml_id(), e.1);
        }
        assert_eq!(DType::from_ggml_id(4), None, "Q4_2 was removed from ggml");
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(DType::Q4K.bytes_for(512), Some(288));
        assert_eq!(DType::Iq4Xs.bytes_for(5120), Some(20 * 136));
        assert_eq!(DType::Q8_0.bytes_for(33), None);
        assert_eq!(DType::F16.bytes_for(3), Some(6));
    }
}
