//! How noisy a chain round's acceptance is: the spread the adaptive policy's burst rule
//! ([`super::policy`], `PolicyConfig::confidence`) measures its evidence in.

/// Standard deviation of the accepted drafts of one round whose mean is `mean`, each draft
/// surviving with the same probability given its predecessors did (the acceptance model of
/// [`super::width`]), over at most `drafts` drafts (None: unbounded, the geometric law).
pub fn acceptance_sd(mean: f64, drafts: Option<usize>) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    let Some(k) = drafts else {
        return (mean * (1.0 + mean)).sqrt();
    };
    if mean >= k as f64 {
        return 0.0;
    }
    // P(a = j) = q^j (1 − q) for j < k, P(a = k) = q^k, with q the survival of the replay
    // profiles' model whose mean accepted length (bonus included) is `mean + 1`.
    let q = crate::spec::replay::solve_alpha(mean + 1.0, k);
    let (mut m1, mut m2, mut qj) = (0.0, 0.0, 1.0);
    for j in 1..=k {
        qj *= q;
        // P(a ≥ j) = q^j: Σ P(a ≥ j) = E[a], Σ (2j − 1) P(a ≥ j) = E[a²].
        m1 += qj;
        m2 += (2 * j - 1) as f64 * qj;
    }
    (m2 - m1 * m1).max(0.0).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_truncated_geometric_counts() {
        // Unbounded: the geometric law, variance m (1 + m).
        assert!((acceptance_sd(0.5, None) - 0.75f64.sqrt()).abs() < 1e-12);
        // A mean at the cap: every round lands every draft.
        assert!(acceptance_sd(1.0, Some(1)).abs() < 1e-12);
        // One draft at survival q: Bernoulli(q), sd √(q (1 − q)).
        assert!((acceptance_sd(0.3, Some(1)) - 0.21f64.sqrt()).abs() < 1e-9);
        // Two drafts at q = 0.5: P(0, 1, 2) = 1/2, 1/4, 1/4; mean 0.75, E[a²] 1.25.
        let sd = (1.25f64 - 0.75 * 0.75).sqrt();
        assert!((acceptance_sd(0.75, Some(2)) - sd).abs() < 1e-9);
        // Truncation only narrows the spread.
        assert!(acceptance_sd(1.7, Some(7)) < acceptance_sd(1.7, None));
        assert_eq!(acceptance_sd(0.0, Some(7)), 0.0);
    }
}
