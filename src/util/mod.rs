//! Small shared helpers.

pub mod rng;

/// `m + ln Σ exp(x − m)` over `row`, `m` its maximum (−∞ for an empty row): the log-softmax
/// normaliser, summed in index order. The CPU backend's [`crate::graph::Op::LogSumExp`] and
/// the host's top-k log-probabilities share it, so both give the same bits.
pub fn log_sum_exp(row: &[f32]) -> f32 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    max + row.iter().map(|x| (x - max).exp()).sum::<f32>().ln()
}
