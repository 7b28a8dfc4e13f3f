//! The DFlash2 drafter ([`crate::model::draft::dflash2`]) behind the spec loop's [`Drafter`].
//!
//! Same protocol mapping as the DFlash adapter ([`super::dflash`]): committed rows go to
//! the per-sequence feature ring; `propose` appends them and drafts the block
//! `[root, MASK × (B−1)]` in one launch, whose proposals are the candidate selector's greedy
//! walk. The session is a one-slot [`BatchSession`] held as [`BatchParts`] between calls on the
//! target's backend (the scheduler's many-request drafting uses `BatchSession` with more slots).
//!
//! Sampling (T > 0): the walk is sampled on the host, `x_l ~ softmax(score(l, x_{l−1}, ·)/T)`
//! over each position's candidates (drafters.md §4.3), from the selector's inputs the launch
//! returns ([`DraftExtras::walk_parts`]), and [`Draft::probs`] holds those distributions, so
//! the spec loop's rejection sampling accepts by `min(1, p/q)` (lossless; a point-mass walk
//! would accept only by `p(x)`).
//!
//! Tree mode ([`Drafter::propose_topk`]): each position's top-k candidates with their selector
//! scores given the walk's previous proposal, renormalised per position (log-softmax over the
//! k; drafters.md §4.3), the walk's proposal first, so the tree's seed chain is the walk.

use super::dflash::{new_owner, owns};
use super::sample::draw;
use super::{Draft, DraftEnv, DraftRequest, Drafter, Features, SpecError};
use crate::backend::StatesId;
use crate::model::Qwen35;
use crate::model::draft::dflash2::{BatchParts, BatchSession, DraftExtras, SeqDraft, WalkParts};
use crate::model::draft::{DFlash, FeatureDtype, FeatureRing, context_features};
use crate::model::session::StepOutput;
use crate::util::rng::Rng;
use std::path::Path;

/// Context rows the caches hold at first (they grow by doubling).
pub const DEFAULT_CAPACITY: usize = 512;

fn drafter_err(msg: impl Into<String>) -> SpecError {
    SpecError::Drafter {
        name: "dflash2".into(),
        msg: msg.into(),
    }
}

/// A DFlash2 drafter for one sequence at a time.
pub struct DFlash2Drafter {
    model: DFlash,
    parts: Option<BatchParts>,
    /// Identifies the backend `parts` live on (see [`super::dflash`]).
    owner: Option<(StatesId, f32)>,
    /// The committed context rows by position (see [`super::dflash`]).
    ring: FeatureRing,
    capacity: usize,
    source: String,
    /// The selector scores of the last proposal, `[B−1, k]` (for inspection).
    last_scores: Vec<f32>,
    /// The candidates those scores are for, `[B−1, k]`.
    last_cand: Vec<u32>,
    /// Draws the sampled walks.
    rng: Rng,
}

impl DFlash2Drafter {
    /// Wraps a loaded DFlash2 drafter after checking it fits `target`.
    pub fn new(model: DFlash, target: &Qwen35) -> Result<DFlash2Drafter, SpecError> {
        if model.cfg.dflash2.is_none() {
            return Err(drafter_err("the drafter has no dflash2 config"));
        }
        model.cfg.check_target(&target.cfg)?;
        model.cfg.check_supported()?;
        model.weights_with_target(target)?;
        let ring = FeatureRing::for_drafter(&model.cfg, FeatureDtype::default());
        Ok(DFlash2Drafter {
            model,
            parts: None,
            owner: None,
            ring,
            capacity: DEFAULT_CAPACITY,
            source: String::new(),
            last_scores: Vec::new(),
            last_cand: Vec::new(),
            rng: Rng::new(0xdf1a52),
        })
    }

    /// Opens a DFlash2 GGUF file or checkpoint directory for `target`.
    pub fn open(path: &Path, target: &Qwen35) -> Result<DFlash2Drafter, SpecError> {
        let model = super::dflash::load_model(path)?;
        Ok(Self::new(model, target)?.with_source(path))
    }

    /// Stores the committed context rows as `dtype` (see [`super::dflash`]).
    pub fn with_feature_dtype(mut self, dtype: FeatureDtype) -> Self {
        self.ring = FeatureRing::for_drafter(&self.model.cfg, dtype);
        self
    }

    /// Seeds the sampled walks (T > 0).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = Rng::new(seed);
        self
    }

    pub fn with_source(mut self, path: &Path) -> Self {
        self.source = path.display().to_string();
        self
    }

    /// Sets the initial capacity of the context caches (rows; they still grow on demand).
    pub fn with_capacity(mut self, rows: usize) -> Self {
        self.capacity = rows.max(1);
        self
    }

    pub fn model(&self) -> &DFlash {
        &self.model
    }

    /// Context rows in the caches plus pending ones.
    pub fn context_rows(&self) -> usize {
        self.ring.end()
    }

    /// The selector scores of the last proposal, `[B−1, k]`.
    pub fn last_scores(&self) -> &[f32] {
        &self.last_scores
    }

    fn parts(&mut self) -> Result<BatchParts, SpecError> {
        self.parts
            .take()
            .ok_or_else(|| drafter_err("used before reset (no draft session)"))
    }
}

impl Drafter for DFlash2Drafter {
    fn name(&self) -> String {
        let c = &self.model.cfg;
        let k = c.dflash2.as_ref().map_or(0, |d| d.selector_top_k);
        format!(
            "dflash2 (block {}, {} layers, top-k {k}){}",
            c.block_size,
            c.n_layers,
            if self.source.is_empty() {
                String::new()
            } else {
                format!(" {}", self.source)
            }
        )
    }

    fn feature_layers(&self) -> Vec<usize> {
        self.model.cfg.target_layer_ids.clone()
    }

    fn max_draft(&self) -> usize {
        self.model.cfg.block_size - 1
    }

    fn reset(&mut self, env: &mut DraftEnv<'_>) -> Result<(), SpecError> {
        self.ring.clear();
        let same = self.parts.is_some() && owns(env.backend, self.owner);
        match self.parts.take() {
            Some(p) if same => {
                let mut s = BatchSession::from_parts(&self.model, &mut *env.backend, p);
                s.truncate(0, 0);
                self.parts = Some(s.into_parts());
            }
            _ => {
                let cap = self.capacity + self.model.cfg.block_size;
                let s = BatchSession::new(&self.model, env.target, &mut *env.backend, 1, cap)?;
                self.parts = Some(s.into_parts());
                self.owner = Some(new_owner(&mut *env.backend)?);
            }
        }
        Ok(())
    }

    fn commit(
        &mut self,
        env: &mut DraftEnv<'_>,
        tokens: &[u32],
        features: &Features,
    ) -> Result<(), SpecError> {
        let n_ctx = self
            .parts
            .as_ref()
            .ok_or_else(|| drafter_err("commit before reset"))?
            .n_ctx(0);
        if features.rows != tokens.len() {
            return Err(drafter_err(format!(
                "{} tokens committed with {} feature rows",
                tokens.len(),
                features.rows
            )));
        }
        let end = self.ring.end();
        if features.start > end {
            return Err(drafter_err(format!(
                "committed rows start at position {}, the drafter's context ends at {end}",
                features.start
            )));
        }
        if features.start < end {
            // The caller went back (not done by the spec loop, which commits only accepted
            // rows): forget the rows from `start` on, in the caches and in the ring.
            if features.start < n_ctx {
                let p = self.parts()?;
                let mut s = BatchSession::from_parts(&self.model, &mut *env.backend, p);
                s.truncate(0, features.start);
                self.parts = Some(s.into_parts());
            }
            self.ring.truncate(features.start);
        }
        if features.rows == 0 {
            return Ok(());
        }
        let step = StepOutput {
            hidden: features.layers.clone(),
            rows: features.rows,
            ..Default::default()
        };
        let rows = context_features(&self.model, env.target, &step, features.rows)?;
        self.ring.push(&rows)?;
        Ok(())
    }

    fn propose(&mut self, env: &mut DraftEnv<'_>, req: &DraftRequest) -> Result<Draft, SpecError> {
        let bsz = self.model.cfg.block_size;
        let p = self.parts()?;
        let mut s = BatchSession::from_parts(&self.model, &mut *env.backend, p);
        // The rows not yet in the caches (see [`super::dflash`]).
        let from = s.n_ctx(0).max(self.ring.start());
        s.skip_to(0, from);
        let end = self.ring.end();
        let need = end + bsz;
        let grown = if need > s.cap() {
            s.reserve(super::dflash::grown_capacity(need, s.cap()))
        } else {
            Ok(())
        };
        let sampled = !req.sampling.is_greedy();
        let extras = DraftExtras {
            walk_parts: sampled,
            ..Default::default()
        };
        let out = grown
            .and_then(|()| self.ring.read(from, end))
            .and_then(|feats| {
                let req_one = SeqDraft {
                    feats: &feats,
                    last: req.root,
                };
                s.draft(&[req_one], extras)
            });
        self.parts = Some(s.into_parts());
        let mut out = out?;
        let one = out
            .pop()
            .ok_or_else(|| drafter_err("no output for the slot"))?;
        self.last_scores = one.scores;
        self.last_cand = one.cand;
        let n = req.max.min(bsz - 1).min(one.tokens.len());
        if !sampled {
            return Ok(Draft::greedy(one.tokens[..n].to_vec()));
        }
        let parts = one
            .walk
            .ok_or_else(|| drafter_err("the launch returned no selector inputs"))?;
        let kc = self
            .model
            .cfg
            .dflash2
            .as_ref()
            .map_or(0, |d| d.selector_top_k);
        let vocab = env.target.cfg.vocab;
        let (tokens, q) = sampled_walk(
            &parts,
            &self.last_cand,
            kc,
            n,
            req.sampling.temperature,
            vocab,
            &mut self.rng,
        )?;
        Ok(Draft {
            tokens,
            probs: Some(q),
        })
    }

    fn propose_topk(
        &mut self,
        env: &mut DraftEnv<'_>,
        req: &DraftRequest,
        k: usize,
    ) -> Result<Vec<Vec<(u32, f32)>>, SpecError> {
        let walk = self.propose(env, req)?.tokens;
        let kc = self
            .model
            .cfg
            .dflash2
            .as_ref()
            .map_or(0, |d| d.selector_top_k);
        candidates_per_position(&walk, &self.last_cand, &self.last_scores, kc, k)
    }
}

/// The selector's walk over `n` positions, sampled: `x_l ~ softmax(score(l, x_{l−1}, ·) / t)`
/// over position l's `kc` candidates `cand`, with `x_{−1}` the seed. Returns the tokens and,
/// per position, the distribution its token was drawn from as a `vocab` row (zero outside the
/// candidates).
fn sampled_walk(
    w: &WalkParts,
    cand: &[u32],
    kc: usize,
    n: usize,
    t: f32,
    vocab: usize,
    rng: &mut Rng,
) -> Result<(Vec<u32>, Vec<f32>), SpecError> {
    let rank = w.seed_pred.len();
    let positions = cand.len().checked_div(kc).unwrap_or(0);
    let fits = kc > 0
        && rank > 0
        && n <= positions
        && w.unary.len() == positions * kc
        && w.hp.len() == positions * rank
        && w.succ.len() == positions * kc * rank
        && w.pred.len() == positions * kc * rank
        && cand.iter().all(|&c| (c as usize) < vocab);
    if !fits || t.is_nan() || t <= 0.0 {
        return Err(drafter_err(format!(
            "sampled walk: {n} of {positions} positions, {kc} candidates, rank {rank}, \
             temperature {t}, selector inputs {}/{}/{}/{}",
            w.unary.len(),
            w.hp.len(),
            w.succ.len(),
            w.pred.len()
        )));
    }
    let mut tokens = Vec::with_capacity(n);
    let mut q = vec![0.0f32; n * vocab];
    let mut prev: &[f32] = &w.seed_pred;
    for l in 0..n {
        let hp = &w.hp[l * rank..(l + 1) * rank];
        let scores: Vec<f64> = (0..kc)
            .map(|j| {
                let succ = &w.succ[(l * kc + j) * rank..][..rank];
                let bil: f64 = (0..rank)
                    .map(|r| f64::from(prev[r]) * f64::from(hp[r]) * f64::from(succ[r]))
                    .sum();
                f64::from(w.unary[l * kc + j]) + bil
            })
            .collect();
        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores
            .iter()
            .map(|&x| ((x - m) / f64::from(t)).exp())
            .collect();
        let z: f64 = e.iter().sum();
        let probs: Vec<f32> = e.iter().map(|&x| (x / z) as f32).collect();
        let j = draw(&probs, rng) as usize;
        let row = &mut q[l * vocab..(l + 1) * vocab];
        for (i, &p) in probs.iter().enumerate() {
            row[cand[l * kc + i] as usize] += p;
        }
        tokens.push(cand[l * kc + j]);
        prev = &w.pred[(l * kc + j) * rank..][..rank];
    }
    Ok((tokens, q))
}

/// Per position of the walk: its candidates as (token, log-softmax of the selector score over
/// the position's candidates), the walk's token first, then by score (ties: candidate order),
/// at most `k`. `cand` and `scores` hold `kc` entries a position, for at least the walk's
/// positions.
fn candidates_per_position(
    walk: &[u32],
    cand: &[u32],
    scores: &[f32],
    kc: usize,
    k: usize,
) -> Result<Vec<Vec<(u32, f32)>>, SpecError> {
    if cand.len() != scores.len() || (!walk.is_empty() && (kc == 0 || cand.len() < walk.len() * kc))
    {
        return Err(drafter_err(format!(
            "{} proposals of {kc} candidates each with {} candidates and {} scores",
            walk.len(),
            cand.len(),
            scores.len()
        )));
    }
    walk.iter()
        .enumerate()
        .map(|(l, &t)| {
            let (c, sc) = (&cand[l * kc..(l + 1) * kc], &scores[l * kc..(l + 1) * kc]);
            let lse = crate::util::log_sum_exp(sc);
            let mut order: Vec<usize> = (0..kc).collect();
            order.sort_by(|&a, &b| {
                (c[b] == t)
                    .cmp(&(c[a] == t))
                    .then(sc[b].total_cmp(&sc[a]))
                    .then(a.cmp(&b))
            });
            if c[order[0]] != t {
                return Err(drafter_err(format!(
                    "position {l}: the walk's token {t} is not among its candidates"
                )));
            }
            Ok(order
                .into_iter()
                .take(k.max(1))
                .map(|i| (c[i], sc[i] - lse))
                .collect())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_put_the_walk_first_then_rank_by_score() {
        // Two positions of 3 candidates; the walk took 7 and 4 (7 does not score best here:
        // the walk's token leads whatever the scores).
        let cand = [5, 7, 9, 4, 6, 8];
        let scores = [2.0, 1.0, 3.0, 0.5, 0.5, -1.0];
        let got = candidates_per_position(&[7, 4], &cand, &scores, 3, 3).unwrap();
        let toks: Vec<Vec<u32>> = got
            .iter()
            .map(|p| p.iter().map(|x| x.0).collect())
            .collect();
        assert_eq!(toks, vec![vec![7, 9, 5], vec![4, 6, 8]]);
        // Log-softmax over each position's candidates.
        for p in &got {
            let z: f32 = p.iter().map(|x| x.1.exp()).sum();
            assert!((z - 1.0).abs() < 1e-5, "{p:?}");
        }
        assert!((got[0][0].1 - (1.0 - crate::util::log_sum_exp(&[2.0, 1.0, 3.0]))).abs() < 1e-6);
        // k caps the list.
        assert_eq!(
            candidates_per_position(&[7, 4], &cand, &scores, 3, 1).unwrap()[1].len(),
            1
        );
        // A walk shorter than the block reads only its positions.
        assert_eq!(
            candidates_per_position(&[7], &cand, &scores, 3, 3)
                .unwrap()
                .len(),
            1
        );
        // A walk token outside its candidates, or shapes that do not match, are errors.
        assert!(candidates_per_position(&[1, 4], &cand, &scores, 3, 3).is_err());
        assert!(candidates_per_position(&[7, 4], &cand, &scores[..5], 3, 3).is_err());
        assert!(candidates_per_position(&[7, 4, 1], &cand, &scores, 3, 3).is_err());
        assert!(
            candidates_per_position(&[], &[], &[], 3, 3)
                .unwrap()
                .is_empty()
        );
    }

    /// Two positions, 3 candidates, rank 2.
    fn parts() -> (WalkParts, Vec<u32>) {
        let w = WalkParts {
            unary: vec![1.0, 0.5, 0.0, 0.2, 0.1, 0.0],
            hp: vec![1.0, -1.0, 0.5, 2.0],
            succ: vec![1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 2.0, 0.0, 0.0, 2.0, 1.0, 1.0],
            pred: vec![1.0, 1.0, 0.0, 3.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            seed_pred: vec![0.0, 2.0],
        };
        (w, vec![10, 11, 12, 20, 21, 22])
    }

    /// score(l, prev, j) written out for the test.
    fn score(w: &WalkParts, l: usize, prev: &[f32], j: usize) -> f64 {
        let bil: f64 = (0..2)
            .map(|r| f64::from(prev[r] * w.hp[l * 2 + r] * w.succ[(l * 3 + j) * 2 + r]))
            .sum();
        f64::from(w.unary[l * 3 + j]) + bil
    }

    #[test]
    fn sampled_walk_draws_from_the_scores_it_reports() {
        let (w, cand) = parts();
        let vocab = 32;
        let mut rng = Rng::new(2);
        let n = 60_000;
        let mut first = [0usize; 3];
        for _ in 0..n {
            let (toks, q) = sampled_walk(&w, &cand, 3, 2, 0.7, vocab, &mut rng).unwrap();
            // Each row is a distribution on the position's candidates holding its token.
            for (l, row) in q.chunks(vocab).enumerate() {
                let z: f32 = row.iter().sum();
                assert!((z - 1.0).abs() < 1e-5);
                assert!(
                    row.iter()
                        .enumerate()
                        .all(|(i, &p)| p == 0.0 || cand[l * 3..l * 3 + 3].contains(&(i as u32)))
                );
                assert!(row[toks[l] as usize] > 0.0);
            }
            first[(toks[0] - 10) as usize] += 1;
        }
        // Position 0 from the seed: softmax(score / 0.7).
        let s: Vec<f64> = (0..3)
            .map(|j| score(&w, 0, &w.seed_pred, j) / 0.7)
            .collect();
        let z: f64 = s.iter().map(|x| x.exp()).sum();
        for j in 0..3 {
            let f = first[j] as f64 / n as f64;
            let p = s[j].exp() / z;
            assert!((f - p).abs() < 0.01, "candidate {j}: {f:.4} vs {p:.4}");
        }
        // Cold: the argmax walk, position 1 scored from position 0's pick.
        let (toks, _) = sampled_walk(&w, &cand, 3, 2, 1e-6, vocab, &mut rng).unwrap();
        let best =
            |sc: &dyn Fn(usize) -> f64| (0..3).max_by(|&a, &b| sc(a).total_cmp(&sc(b))).unwrap();
        let j0 = best(&|j| score(&w, 0, &w.seed_pred, j));
        let j1 = best(&|j| score(&w, 1, &w.pred[j0 * 2..j0 * 2 + 2], j));
        assert_eq!(toks, vec![cand[j0], cand[3 + j1]]);
        // Bad inputs are errors.
        assert!(sampled_walk(&w, &cand, 3, 3, 0.7, vocab, &mut rng).is_err());
        assert!(sampled_walk(&w, &cand, 3, 2, 0.0, vocab, &mut rng).is_err());
        assert!(sampled_walk(&w, &cand, 3, 2, 0.7, 16, &mut rng).is_err());
    }
}
