//! How the matrices of the int8 GEMV types lie in device memory: in panels of [`GROUP`] rows,
//! stored round by round (`WlPanel` in `hip/quant.h` has the kernels' side and the why). A round
//! is [`ROUND`] values of a row, RB = its device bytes (whole blocks); a row of K values has
//! nr = ceil(K / ROUND) rounds, the last one padded; round `c` of row `j` sits at
//! `(j / G) · G · nr · RB + c · G · RB + (j % G) · RB`. Tensors of more dimensions are matrices of
//! their last dimension's rows. Every other type stays row-major.

use super::kernels::{self, QGEMV_TYPES};
use crate::tensor::DType;

/// Values of a row per round: the 32 items of 32 values one warp's lanes take at once.
pub const ROUND: usize = 1024;

/// Rows per panel: `DS_WL_G`, which build.rs passes to every kernel and writes into the kernel
/// table (1: row-major, rows padded to whole rounds; `DELTASPEC_HIP_DEFINES=DS_WL_G=1` builds
/// that for comparisons).
pub const GROUP: usize = kernels::WL_GROUP;

/// Device bytes of one round of a row of `dtype`, where `dtype` is stored in panels (`None`:
/// row-major).
pub fn round_bytes(dtype: DType) -> Option<usize> {
    let suffix = kernels::weight_kernel(dtype, ROUND)?;
    if !QGEMV_TYPES.contains(&suffix) {
        return None;
    }
    let (qk, qb, _) = kernels::geometry(suffix);
    Some(ROUND / qk * qb)
}

/// Device bytes of `rows` rows of `k` values of `dtype` in panels, or `None` where `dtype` is
/// row-major or `k` is not whole blocks.
pub fn panel_bytes(dtype: DType, rows: usize, k: usize) -> Option<usize> {
    let rb = round_bytes(dtype)?;
    kernels::dev_bytes_for(dtype, k)?;
    Some(rows.div_ceil(GROUP) * GROUP * k.div_ceil(ROUND) * rb)
}

/// The device copy in panels of the row-major device bytes `dev` of a tensor of `dtype` holding
/// `numel` values in rows of `k`, or `None` where `dtype` stays row-major (or the bytes do not fit
/// the shape: they stay as they are, for the weight check to report).
pub fn panels_of(dtype: DType, k: usize, numel: usize, dev: &[u8]) -> Option<Vec<u8>> {
    let rb = round_bytes(dtype)?;
    let row_bytes = kernels::dev_bytes_for(dtype, k).filter(|&r| r > 0)?;
    let rows = dev.len() / row_bytes;
    (rows * row_bytes == dev.len() && rows * k == numel)
        .then(|| to_panels(dev, rows, row_bytes, rb, GROUP))
}

/// The panel copy of the row-major device bytes `dev` of `rows` rows of `row_bytes` bytes, rounds
/// of `rb` bytes, `g` rows per panel (padding zero).
pub fn to_panels(dev: &[u8], rows: usize, row_bytes: usize, rb: usize, g: usize) -> Vec<u8> {
    debug_assert_eq!(dev.len(), rows * row_bytes);
    let nr = row_bytes.div_ceil(rb);
    let mut out = vec![0u8; rows.div_ceil(g) * g * nr * rb];
    for (j, row) in dev.chunks_exact(row_bytes.max(1)).enumerate() {
        let base = (j / g) * g * nr * rb + (j % g) * rb;
        for (c, piece) in row.chunks(rb).enumerate() {
            let at = base + c * g * rb;
            out[at..at + piece.len()].copy_from_slice(piece);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_are_whole_blocks_of_1024_values() {
        assert_eq!(round_bytes(DType::Iq4Xs), Some(4 * 136));
        assert_eq!(round_bytes(DType::Q6K), Some(4 * kernels::Q6K_DEV_BLOCK));
        assert_eq!(round_bytes(DType::Q8_0), Some(32 * 34));
        assert_eq!(round_bytes(DType::Q4_0), None);
        assert_eq!(round_bytes(DType::F16), None);
        let g = GROUP;
        assert_eq!(panel_bytes(DType::Iq4Xs, 1, 256), Some(g * 544));
        assert_eq!(
            panel_bytes(DType::Iq4Xs, g + 1, 2048),
            Some(2 * g * 2 * 544)
        );
        assert_eq!(panel_bytes(DType::Iq4Xs, 3, 100), None);
    }

    #[test]
    fn round_c_of_row_j_lands_in_its_panel() {
        // 5 rows of 10 bytes, rounds of 4 (4 + 4 + 2, padded), panels of 2 rows (the last half
        // empty).
        let (rows, rb, g) = (5, 4, 2);
        let dev: Vec<u8> = (1..=50).collect();
        let p = to_panels(&dev, rows, 10, rb, g);
        assert_eq!(p.len(), 3 * 2 * 3 * 4);
        for j in 0..rows {
            for b in 0..10 {
                let (c, o) = (b / rb, b % rb);
                let at = (j / g) * g * 3 * rb + c * g * rb + (j % g) * rb + o;
                assert_eq!(p[at], dev[j * 10 + b], "row {j} byte {b}");
            }
        }
        let nonzero = p.iter().filter(|&&v| v != 0).count();
        assert_eq!(nonzero, 50, "padding stays zero");
    }
}
