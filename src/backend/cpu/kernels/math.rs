//! Scalar helpers shared by the kernels, written in the forms PyTorch's CPU kernels use.

/// Number of interleaved partial sums in [`dot`].
const LANES: usize = 8;

/// `Σ a[i]·b[i]` in a fixed order: lane `l` sums the products at indices `≡ l (mod 8)` in index
/// order, the eight lanes are combined pairwise, and the leftover tail is added in index order.
///
/// The order is deterministic (no fast-math reassociation), the error grows with `n / 8` instead
/// of `n`, and the independent lanes let the compiler vectorise without changing the result.
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; LANES];
    let (a_body, a_tail) = a.split_at(a.len() - a.len() % LANES);
    let b_body = &b[..a_body.len()];
    for (ca, cb) in a_body.chunks_exact(LANES).zip(b_body.chunks_exact(LANES)) {
        for ((s, x), y) in acc.iter_mut().zip(ca).zip(cb) {
            *s += x * y;
        }
    }
    let mut sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (x, y) in a_tail.iter().zip(&b[a_body.len()..]) {
        sum += x * y;
    }
    sum
}

/// `Σ x²` in [`dot`]'s order.
pub(super) fn sum_sq(x: &[f32]) -> f32 {
    dot(x, x)
}

/// `1 / (1 + e^-x)`, as torch computes `sigmoid`; saturates cleanly to 0 and 1.
pub(super) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `x · sigmoid(x)`, in torch's form `x / (1 + e^-x)` (one rounding fewer than a product).
pub(super) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// torch's `softplus` (beta 1, threshold 20): `x` above the threshold, where `ln(1 + e^x)`
/// equals `x` in f32 anyway, else `log1p(e^x)`, which stays accurate for very negative `x`.
pub(super) fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// `1 / sqrt(v)`: torch's `rsqrt` is this, correctly rounded per step (no approximate rsqrt).
pub(super) fn rsqrt(v: f32) -> f32 {
    1.0 / v.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_f64_on_all_tail_lengths() {
        for n in 0..40 {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((dot(&a, &b) as f64 - want).abs() < 1e-5, "n = {n}");
        }
    }

    #[test]
    fn activations_at_extremes() {
        assert_eq!(sigmoid(-200.0), 0.0);
        assert_eq!(sigmoid(200.0), 1.0);
        assert_eq!(silu(-200.0), 0.0);
        assert_eq!(silu(200.0), 200.0);
        assert_eq!(softplus(30.0), 30.0);
        assert!((softplus(0.0) - std::f32::consts::LN_2).abs() < 1e-7);
        assert!(softplus(-100.0) > 0.0, "log1p keeps tiny values");
    }
}
