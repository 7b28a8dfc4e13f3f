//! How many drafts a chain round should verify (the adaptive policy's width choice).
//!
//! A chain step that verifies `k` drafts costs `other + V(k + 1)`: the drafter's forward and
//! the commit (`other`, the same for every `k`: DFlash-type drafters propose a whole block in
//! one forward) plus a target forward over `k + 1` rows, whose cost grows with the rows (on the
//! H200 the 27B step: 1 row 7.2 ms, 8 rows 16.1, 16 rows 24.6). It yields on average
//! `E(k) = 1 + α + α² + … + α^k` tokens when each draft survives with probability `α` given its
//! predecessors did (the acceptance model of speculation.md §1, also the replay profiles'). With
//! high α the full block pays; with prose-like α (≈ 0.6) the last rows of a 16-row verify buy
//! almost nothing: `E` saturates near `1 / (1 − α)` while `V` keeps growing. So the width that
//! maximises tokens per second, `E(k) / (other + V(k + 1))`, is chosen each round from live
//! estimates:
//! - `α`: EMA-weighted counts of surviving drafts over drafts offered up to the first
//!   rejection (the maximum-likelihood estimate of a truncated geometric run);
//! - `V(r)`: an EMA of the measured verify time per row count `r`; rows never measured are
//!   interpolated linearly between the measured ones and the plain step `(1, plain)`, and
//!   extrapolated past the widest with the slope of the last two points;
//! - `other`: an EMA of step time minus verify time.
//!
//! The first verify at each width is left out of its time: it carries the build of that
//! shape's graph (a CUDA graph capture, wgpu pipelines), tens of milliseconds.
//!
//! Until `α`, one verify time and the plain time are known, the full width is used.

use std::collections::{BTreeMap, BTreeSet};

/// Live estimates behind the width choice; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct WidthModel {
    /// EMA-weighted surviving drafts and drafts offered (up to and including the first miss).
    survived: f64,
    offered: f64,
    /// Verify-forward seconds per row count (root + drafts).
    verify: BTreeMap<usize, f64>,
    /// Step seconds outside the verify forward.
    other: Option<f64>,
    /// Row counts verified at least once.
    seen: BTreeSet<usize>,
    /// The backend's row tiles ([`crate::backend::Backend::step_row_tiles`]; empty: none).
    tiles: Vec<usize>,
}

impl WidthModel {
    /// A model for a backend whose verify cost steps at these row counts (ascending; see
    /// [`crate::backend::Backend::step_row_tiles`]): a verify of `r` rows then costs what
    /// one of the smallest tile holding `r` does, so only the widths that fill a tile (and
    /// the full block) are worth choosing. Without tiles every width is a candidate and
    /// unmeasured ones are interpolated: on hip (H100, 27B, session 30) that took 5-row
    /// verifies for ~9.5 ms where they cost the 8-row tile's 11.2 ms, and every narrowed
    /// width captured a graph of its own.
    pub fn with_tiles(tiles: Vec<usize>) -> WidthModel {
        WidthModel {
            tiles,
            ..WidthModel::default()
        }
    }

    /// The row count whose verify time stands for `rows` rows: the smallest tile holding
    /// them, or `rows` itself past the widest tile or without tiles.
    fn tile_of(&self, rows: usize) -> usize {
        self.tiles
            .iter()
            .copied()
            .find(|&t| t >= rows)
            .unwrap_or(rows)
    }

    /// One chain step: `drafted` drafts verified, `accepted` of them kept, `total_s` for the
    /// whole step of which `verify_s` was the target's forward over `drafted + 1` rows.
    pub fn observe(
        &mut self,
        drafted: usize,
        accepted: usize,
        total_s: f64,
        verify_s: f64,
        alpha: f64,
    ) {
        if drafted == 0 {
            return;
        }
        self.observe_acceptance(drafted, accepted, alpha);
        // The first verify at a width carries that shape's graph build (lowering, capture,
        // pipeline compiles): only later ones enter its time.
        if !self.seen.insert(drafted + 1) {
            let v = self.verify.entry(drafted + 1).or_insert(verify_s);
            *v += alpha * (verify_s - *v);
        }
        let rest = (total_s - verify_s).max(0.0);
        self.other = Some(super::policy::ema(self.other, rest, alpha));
    }

    /// The acceptance part of [`WidthModel::observe`] alone: a step whose time is not a
    /// sample (it carried a graph build, see [`crate::backend::graph_builds`]).
    pub fn observe_acceptance(&mut self, drafted: usize, accepted: usize, alpha: f64) {
        if drafted == 0 {
            return;
        }
        let offered = (accepted + usize::from(accepted < drafted)) as f64;
        let decay = 1.0 - alpha;
        self.survived = self.survived * decay + alpha * accepted as f64;
        self.offered = self.offered * decay + alpha * offered;
    }

    /// Per-draft survival estimate, once any draft was offered.
    pub fn survival(&self) -> Option<f64> {
        (self.offered > 0.0).then(|| (self.survived / self.offered).clamp(0.0, 0.999))
    }

    /// Estimated verify seconds over `rows` rows (`plain`: a plain step, the 1-row point).
    pub fn verify_time(&self, rows: usize, plain: f64) -> f64 {
        let rows = self.tile_of(rows);
        if let Some(&v) = self.verify.get(&rows) {
            return v;
        }
        let mut pts: Vec<(f64, f64)> = vec![(1.0, plain)];
        pts.extend(
            self.verify
                .iter()
                .filter(|(r, _)| **r > 1)
                .map(|(&r, &v)| (r as f64, v)),
        );
        let x = rows as f64;
        // The segment holding x, or the last one (extrapolation past the widest).
        let i = pts
            .windows(2)
            .position(|w| x <= w[1].0)
            .unwrap_or(pts.len().saturating_sub(2));
        match (pts.get(i), pts.get(i + 1)) {
            (Some(&(x0, y0)), Some(&(x1, y1))) if x1 > x0 => {
                (y0 + (y1 - y0) * (x - x0) / (x1 - x0)).max(0.0)
            }
            _ => plain * x,
        }
    }

    /// Expected tokens per step with `k` drafts at survival `a`: `1 + a + … + a^k`.
    pub fn expected_tokens(a: f64, k: usize) -> f64 {
        (0..=k).map(|i| a.powi(i as i32)).sum()
    }

    /// The number of drafts in `1..=max` that maximises expected tokens per second, or `max`
    /// while the estimates are missing (`plain`: the measured plain-step time).
    pub fn best(&self, max: usize, plain: Option<f64>) -> usize {
        let (Some(a), Some(other), Some(plain)) = (self.survival(), self.other, plain) else {
            return max;
        };
        if max <= 1 || self.verify.is_empty() {
            return max;
        }
        let rate = |k: usize| {
            Self::expected_tokens(a, k) / (other + self.verify_time(k + 1, plain)).max(1e-9)
        };
        // With tiles, only the widths that fill one (and `max`): a narrower verify in the
        // same tile costs the same. Ties go to the wider verify: it keeps measuring the
        // acceptance further out.
        (1..=max)
            .rev()
            .filter(|&k| k == max || self.tiles.is_empty() || self.tiles.contains(&(k + 1)))
            .fold((max, f64::MIN), |(bk, br), k| {
                let r = rate(k);
                if r > br * (1.0 + 1e-9) {
                    (k, r)
                } else {
                    (bk, br)
                }
            })
            .0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survival_is_the_truncated_geometric_estimate() {
        let mut m = WidthModel::default();
        // 3 of 7 accepted (4 offered: 3 survivors + the miss), then 7 of 7 (7 offered).
        m.observe(7, 3, 0.02, 0.015, 0.5);
        assert!((m.survival().unwrap() - 0.75).abs() < 1e-12);
        m.observe(7, 7, 0.02, 0.015, 0.5);
        // survived 0.75 + 3.5 = 4.25 (after decay: 1.5·0.5 + 3.5), offered 2·0.5 + 3.5.
        assert!((m.survival().unwrap() - (0.75 + 3.5) / (1.0 + 3.5)).abs() < 1e-12);
    }

    #[test]
    fn verify_time_interpolates_and_extrapolates() {
        let mut m = WidthModel::default();
        for _ in 0..2 {
            m.observe(7, 2, 0.030, 0.016, 1.0); // 8 rows: 16 ms
            m.observe(15, 2, 0.040, 0.024, 1.0); // 16 rows: 24 ms
        }
        let p = 0.009;
        assert!((m.verify_time(8, p) - 0.016).abs() < 1e-12);
        // Between (1, 9 ms) and (8, 16 ms): 1 ms per row.
        assert!((m.verify_time(4, p) - 0.012).abs() < 1e-12);
        assert!((m.verify_time(12, p) - 0.020).abs() < 1e-12);
        // Past 16 rows with the last slope (1 ms per row).
        assert!((m.verify_time(20, p) - 0.028).abs() < 1e-12);
    }

    #[test]
    fn first_verify_at_a_width_is_not_timed() {
        let mut m = WidthModel::default();
        m.observe(7, 2, 0.5, 0.45, 0.3); // graph build
        assert!(m.verify.is_empty());
        m.observe(7, 2, 0.03, 0.016, 0.3);
        assert_eq!(m.verify.get(&8), Some(&0.016));
    }

    #[test]
    fn full_width_until_measured() {
        let m = WidthModel::default();
        assert_eq!(m.best(15, Some(0.007)), 15);
        let mut m = WidthModel::default();
        m.observe(15, 3, 0.03, 0.025, 0.3);
        assert_eq!(m.best(15, None), 15);
    }

    #[test]
    fn low_acceptance_shortens_high_acceptance_keeps_the_block() {
        // H200-like costs: plain 7.2 ms, 16 rows 24.6 ms, drafter 6 ms.
        let plain = Some(0.0072);
        let mut lo = WidthModel::default();
        for _ in 0..20 {
            lo.observe(15, 1, 0.0306, 0.0246, 0.3); // α ≈ 0.5
        }
        let k = lo.best(15, plain);
        assert!(
            (2..=6).contains(&k),
            "prose-like acceptance picks a short chain, got {k}"
        );
        let mut hi = WidthModel::default();
        for _ in 0..20 {
            hi.observe(15, 15, 0.0306, 0.0246, 0.3); // every draft survives
        }
        assert_eq!(hi.best(15, plain), 15);
    }

    #[test]
    fn best_maximises_the_modelled_rate() {
        let mut m = WidthModel::default();
        for (d, a) in [(15, 4), (15, 9), (7, 7), (7, 2), (3, 3)] {
            m.observe(d, a, 0.01 + 0.001 * d as f64, 0.004 + 0.001 * d as f64, 0.3);
        }
        let plain = 0.005;
        let a = m.survival().unwrap();
        let other = m.other.unwrap();
        let k = m.best(15, Some(plain));
        let rate =
            |k: usize| WidthModel::expected_tokens(a, k) / (other + m.verify_time(k + 1, plain));
        for j in 1..=15 {
            assert!(rate(k) >= rate(j) * (1.0 - 1e-9), "k {k} rate below k {j}");
        }
    }

    #[test]
    fn with_tiles_only_tile_filling_widths_are_chosen() {
        // hip-like costs on an H100 (27B): plain 7.2 ms, 8 rows (the 8-row tile) 11.2 ms,
        // drafter and commit 1.7 ms; prose-like survival ≈ 0.4.
        let plain = Some(0.0072);
        let hip = [1, 2, 4, 8, 16, 32];
        let mut tiled = WidthModel::with_tiles(hip.to_vec());
        let mut free = WidthModel::default();
        for _ in 0..20 {
            for m in [&mut tiled, &mut free] {
                for (d, a) in [(7, 0), (7, 1), (7, 2), (7, 1)] {
                    m.observe(d, a, 0.0129, 0.0112, 0.3);
                }
            }
        }
        // Interpolating between (1, plain) and (8, 11.2 ms) prices 5 rows below the 8-row
        // tile they run.
        assert!(free.verify_time(5, 0.0072) < 0.0105);
        let k = tiled.best(7, plain);
        assert!([1, 3, 7].contains(&k), "tiled pick {k}");
        // Any width in a tile costs what the tile does.
        for r in 5..=8 {
            assert_eq!(tiled.verify_time(r, 0.0072), 0.0112);
        }
        // The full block is always a candidate, tile or not.
        assert_eq!(WidthModel::with_tiles(hip.to_vec()).best(6, plain), 6);
    }
}
