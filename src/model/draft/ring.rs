//! The per-sequence store of the drafter's context rows (the captured target features,
//! concatenated per row, `[n_target_layers · H]`) between the target's commit and the draft
//! graph that turns them into context K/V.
//!
//! Rows are kept at 16 bits (bf16 by default, as Lucebox's `target_feat` ring; f16 keeps more
//! mantissa for features of small range; f32 is the exact reference) in a ring indexed by
//! position: row `p` lives in slot `p % cap`. `cap` is the drafter's context window plus one
//! block when every drafter layer is windowed (older rows can never be attended), otherwise
//! unbounded: the ring then holds the whole sequence, growing as rows arrive (the target's
//! context capacity bounds it). Storage grows lazily in both cases.
//!
//! Rollback: the spec loop commits only accepted rows, so the ring only ever truncates when a
//! caller goes back ([`FeatureRing::truncate`]); rows past the end are dropped and the next
//! commit writes from there.

use crate::model::ModelError;

/// Storage type of the ring's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FeatureDtype {
    #[default]
    Bf16,
    F16,
    F32,
}

impl FeatureDtype {
    pub fn parse(s: &str) -> Result<FeatureDtype, String> {
        match s {
            "bf16" => Ok(FeatureDtype::Bf16),
            "f16" => Ok(FeatureDtype::F16),
            "f32" => Ok(FeatureDtype::F32),
            o => Err(format!("unknown feature dtype '{o}' (bf16, f16, f32)")),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            FeatureDtype::Bf16 => "bf16",
            FeatureDtype::F16 => "f16",
            FeatureDtype::F32 => "f32",
        }
    }
}

#[derive(Clone, Debug)]
enum Rows {
    Half(Vec<u16>),
    F32(Vec<f32>),
}

/// A ring of context rows by position.
#[derive(Clone, Debug)]
pub struct FeatureRing {
    dtype: FeatureDtype,
    width: usize,
    /// Slots (None: unbounded, slot = position).
    cap: Option<usize>,
    rows: Rows,
    /// Oldest position held.
    start: usize,
    /// One past the newest position held.
    end: usize,
}

fn err(msg: String) -> ModelError {
    ModelError::Config(format!("feature ring: {msg}"))
}

impl FeatureRing {
    pub fn new(width: usize, cap: Option<usize>, dtype: FeatureDtype) -> FeatureRing {
        let rows = match dtype {
            FeatureDtype::F32 => Rows::F32(Vec::new()),
            _ => Rows::Half(Vec::new()),
        };
        FeatureRing {
            dtype,
            width,
            cap: cap.map(|c| c.max(1)),
            rows,
            start: 0,
            end: 0,
        }
    }

    /// The ring of `drafter`'s context rows: capacity = window + block when every layer is
    /// windowed, else unbounded.
    pub fn for_drafter(c: &super::DFlashConfig, dtype: FeatureDtype) -> FeatureRing {
        let windows: Vec<usize> = (0..c.n_layers).map(|i| c.window(i)).collect();
        let cap = (!windows.is_empty() && windows.iter().all(|&w| w > 0))
            .then(|| windows.iter().max().copied().unwrap_or(0) + c.block_size);
        FeatureRing::new(c.feature_width(), cap, dtype)
    }

    pub fn dtype(&self) -> FeatureDtype {
        self.dtype
    }
    pub fn capacity(&self) -> Option<usize> {
        self.cap
    }
    /// Oldest position held (rows before it were overwritten).
    pub fn start(&self) -> usize {
        self.start
    }
    /// One past the newest position.
    pub fn end(&self) -> usize {
        self.end
    }
    /// Bytes of row storage allocated.
    pub fn bytes(&self) -> usize {
        match &self.rows {
            Rows::Half(v) => 2 * v.len(),
            Rows::F32(v) => 4 * v.len(),
        }
    }

    /// Forgets every row; the next push starts at position 0.
    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Keeps the rows before position `end` (a no-op past the end).
    pub fn truncate(&mut self, end: usize) {
        if end < self.end {
            self.end = end;
            self.start = self.start.min(end);
        }
    }

    fn slot(&self, pos: usize) -> usize {
        self.cap.map_or(pos, |c| pos % c)
    }

    /// Appends `rows` (row-major, `width` each) at positions `end ..`.
    pub fn push(&mut self, rows: &[f32]) -> Result<(), ModelError> {
        if self.width == 0 || !rows.len().is_multiple_of(self.width) {
            return Err(err(format!(
                "{} values are not whole rows of {}",
                rows.len(),
                self.width
            )));
        }
        let n = rows.len() / self.width;
        let new_end = self.end + n;
        let slots = self.cap.map_or(new_end, |c| new_end.min(c));
        let w = self.width;
        match &mut self.rows {
            Rows::Half(v) if v.len() < slots * w => v.resize(slots * w, 0),
            Rows::F32(v) if v.len() < slots * w => v.resize(slots * w, 0.0),
            _ => {}
        }
        // Only the newest `cap` rows of a long push survive: skip the rest.
        let first = self.cap.map_or(0, |c| n.saturating_sub(c));
        for r in first..n {
            let at = self.slot(self.end + r) * w;
            let src = &rows[r * w..(r + 1) * w];
            match (&mut self.rows, self.dtype) {
                (Rows::F32(v), _) => v[at..at + w].copy_from_slice(src),
                (Rows::Half(v), FeatureDtype::F16) => {
                    for (d, &x) in v[at..at + w].iter_mut().zip(src) {
                        *d = half::f16::from_f32(x).to_bits();
                    }
                }
                (Rows::Half(v), _) => {
                    for (d, &x) in v[at..at + w].iter_mut().zip(src) {
                        *d = half::bf16::from_f32(x).to_bits();
                    }
                }
            }
        }
        self.end = new_end;
        if let Some(c) = self.cap {
            self.start = self.start.max(new_end.saturating_sub(c));
        }
        Ok(())
    }

    /// Rows `from .. to` as f32 (they must still be held: `start ≤ from ≤ to ≤ end`).
    pub fn read(&self, from: usize, to: usize) -> Result<Vec<f32>, ModelError> {
        if from < self.start || to > self.end || from > to {
            return Err(err(format!(
                "rows {from}..{to} asked, {}..{} held",
                self.start, self.end
            )));
        }
        let w = self.width;
        let mut out = Vec::with_capacity((to - from) * w);
        for p in from..to {
            let at = self.slot(p) * w;
            match (&self.rows, self.dtype) {
                (Rows::F32(v), _) => out.extend_from_slice(&v[at..at + w]),
                (Rows::Half(v), FeatureDtype::F16) => out.extend(
                    v[at..at + w]
                        .iter()
                        .map(|&b| half::f16::from_bits(b).to_f32()),
                ),
                (Rows::Half(v), _) => out.extend(
                    v[at..at + w]
                        .iter()
                        .map(|&b| half::bf16::from_bits(b).to_f32()),
                ),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(p: usize, w: usize) -> Vec<f32> {
        (0..w).map(|i| (p * 10 + i) as f32).collect()
    }

    #[test]
    fn wraparound_keeps_the_newest_rows() {
        let w = 3;
        let mut r = FeatureRing::new(w, Some(4), FeatureDtype::F32);
        // Pushes of 1, 3 and 3 rows: positions 0..7, the ring keeps 3..7.
        r.push(&row(0, w)).unwrap();
        r.push(&[row(1, w), row(2, w), row(3, w)].concat()).unwrap();
        r.push(&[row(4, w), row(5, w), row(6, w)].concat()).unwrap();
        assert_eq!((r.start(), r.end()), (3, 7));
        assert_eq!(r.bytes(), 4 * w * 4);
        let got = r.read(3, 7).unwrap();
        let want: Vec<f32> = (3..7).flat_map(|p| row(p, w)).collect();
        assert_eq!(got, want);
        assert!(r.read(2, 7).is_err(), "overwritten rows are refused");
        // A push longer than the ring keeps its newest rows only.
        let long: Vec<f32> = (7..17).flat_map(|p| row(p, w)).collect();
        r.push(&long).unwrap();
        assert_eq!((r.start(), r.end()), (13, 17));
        assert_eq!(
            r.read(13, 17).unwrap(),
            (13..17).flat_map(|p| row(p, w)).collect::<Vec<_>>()
        );
        // Rollback: truncate, then the next rows land at the new end.
        r.truncate(15);
        r.push(&row(99, w)).unwrap();
        assert_eq!((r.start(), r.end()), (13, 16));
        assert_eq!(r.read(15, 16).unwrap(), row(99, w));
        assert_eq!(r.read(13, 15).unwrap(), [row(13, w), row(14, w)].concat());
        assert!(r.push(&[1.0, 2.0]).is_err());
    }

    #[test]
    fn unbounded_ring_holds_the_sequence_and_half_types_round() {
        let w = 5;
        for dt in [FeatureDtype::Bf16, FeatureDtype::F16] {
            let mut r = FeatureRing::new(w, None, dt);
            let vals: Vec<f32> = (0..40 * w)
                .map(|i| ((i as f32) * 0.37).sin() * 3.0)
                .collect();
            for c in vals.chunks(7 * w) {
                r.push(c).unwrap();
            }
            assert_eq!((r.start(), r.end()), (0, 40));
            assert_eq!(r.bytes(), 2 * 40 * w);
            let got = r.read(0, 40).unwrap();
            // bf16 keeps 8 mantissa bits (rel 2^-9), f16 11 (rel 2^-12) in this range.
            let tol = if dt == FeatureDtype::Bf16 { 4e-3 } else { 5e-4 };
            for (g, v) in got.iter().zip(&vals) {
                assert!((g - v).abs() <= tol * v.abs() + 1e-6, "{dt:?}: {g} vs {v}");
            }
        }
    }
}
