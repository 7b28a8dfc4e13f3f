//! Deferred drafter commits for plain steps: a plain step (the target alone, features
//! captured) stashes its row here instead of calling [`Drafter::commit`]; the stash is handed
//! to the drafter in one commit when its context is next needed (before a spec step), when it
//! reaches [`MAX_PENDING_ROWS`], and at the end of generation.
//!
//! Why it is exact: every drafter's context is a function of the committed rows by position,
//! not of how they were split into commits (DFlash / DSpark / DFlash2 push them into the
//! [`crate::model::draft::FeatureRing`], whose long pushes keep the same newest rows that many
//! short pushes would; the drafter's K/V append runs in `propose`, from the ring). The stash is
//! always flushed before any `propose`, so the protocol of [`Drafter`] holds at every call the
//! drafter sees: the committed rows sum to the target's position.
//!
//! What a commit costs per drafter kind (so what batching saves): DFlash, DSpark and DFlash2
//! do host work only: [`crate::model::draft::context_features`] (the captured layers
//! concatenated, the target's final norm on its last layer) and a ring push (bf16 rounding).
//! No device launches; DSpark also labels its confidence calibration, which only a commit right
//! after a chain proposal does (never a burst's). The replay wrapper forwards to its inner
//! drafter; the test drafters count rows. So per plain step this saves host work of
//! O(layers × hidden), not a drafter launch sequence.

use super::{Drafter, Features, SpecError, env};
use crate::model::Session;

/// A stash larger than this is committed at once: bounds the host memory of a long plain run
/// (`spec off`, or a long burst) at `rows × layers × hidden` floats (5 × 5120 × 4 B = 100 KiB
/// per row at 27B: 25 MiB). The adaptive policy's bursts (40 by default) fit in one commit.
pub const MAX_PENDING_ROWS: usize = 256;

/// Rows the target committed that the drafter has not been handed yet.
#[derive(Debug, Default)]
pub struct PendingCommits {
    tokens: Vec<u32>,
    features: Features,
    /// Drafter commits issued by [`PendingCommits::flush`] (for tests and stats).
    flushes: usize,
}

impl PendingCommits {
    pub fn new() -> PendingCommits {
        PendingCommits::default()
    }

    /// Rows waiting.
    pub fn rows(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Drafter commits issued so far.
    pub fn flushes(&self) -> usize {
        self.flushes
    }

    /// Appends `token`'s row(s): `f` must start where the stash ends and hold the same layers
    /// in the same order as the rows already stashed.
    pub fn push(&mut self, tokens: &[u32], f: Features) -> Result<(), SpecError> {
        if f.rows != tokens.len() {
            return Err(SpecError::Invalid(format!(
                "{} tokens stashed with {} feature rows",
                tokens.len(),
                f.rows
            )));
        }
        if self.tokens.is_empty() {
            self.tokens.extend_from_slice(tokens);
            self.features = f;
            return Ok(());
        }
        let cur = &mut self.features;
        let end = cur.start + cur.rows;
        let same_layers = cur.width == f.width
            && cur.layers.len() == f.layers.len()
            && cur.layers.iter().zip(&f.layers).all(|(a, b)| a.0 == b.0);
        if f.start != end || !same_layers {
            return Err(SpecError::Invalid(format!(
                "stashed rows end at {end}, the next start at {} (or their layers differ)",
                f.start
            )));
        }
        for ((_, have), (_, add)) in cur.layers.iter_mut().zip(f.layers) {
            have.extend_from_slice(&add);
        }
        cur.rows += f.rows;
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// Hands every stashed row to the drafter in one commit (nothing when empty).
    pub fn flush(
        &mut self,
        s: &mut Session<'_>,
        drafter: &mut dyn Drafter,
    ) -> Result<(), SpecError> {
        if self.tokens.is_empty() {
            return Ok(());
        }
        let tokens = std::mem::take(&mut self.tokens);
        let features = std::mem::take(&mut self.features);
        self.flushes += 1;
        drafter.commit(&mut env(s), &tokens, &features)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(start: usize, layers: &[usize], width: usize, v: f32) -> Features {
        Features {
            start,
            rows: 1,
            width,
            layers: layers
                .iter()
                .map(|&l| (l, vec![v + l as f32; width]))
                .collect(),
        }
    }

    #[test]
    fn stash_concatenates_rows_per_layer_and_refuses_gaps() {
        let mut p = PendingCommits::new();
        p.push(&[7], row(10, &[3, 1], 2, 0.5)).unwrap();
        p.push(&[8], row(11, &[3, 1], 2, 2.5)).unwrap();
        assert_eq!(p.rows(), 2);
        assert_eq!(p.tokens, vec![7, 8]);
        let f = &p.features;
        assert_eq!((f.start, f.rows, f.width), (10, 2, 2));
        assert_eq!(f.layers[0], (3, vec![3.5, 3.5, 5.5, 5.5]));
        assert_eq!(f.layers[1], (1, vec![1.5, 1.5, 3.5, 3.5]));
        // A gap, another layer order, a row count mismatch: all refused, stash unchanged.
        assert!(p.push(&[9], row(13, &[3, 1], 2, 0.0)).is_err());
        assert!(p.push(&[9], row(12, &[1, 3], 2, 0.0)).is_err());
        assert!(p.push(&[9, 10], row(12, &[3, 1], 2, 0.0)).is_err());
        assert_eq!(p.rows(), 2);
        // No captured layers (a drafter without features) stashes tokens only.
        let mut q = PendingCommits::new();
        q.push(&[1], row(0, &[], 4, 0.0)).unwrap();
        q.push(&[2], row(1, &[], 4, 0.0)).unwrap();
        assert_eq!((q.rows(), q.features.rows), (2, 2));
    }
}
