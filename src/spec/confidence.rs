//! Calibration of a drafter's per-position confidence scores and a confidence gate that cuts
//! the drafted chain (DSpark's confidence head, drafters.md §3).
//!
//! The raw score is `c_i = sigmoid(z_i)`. Lucebox found the RadixArk scores mis-scaled (every
//! threshold in 0.1–0.5 cut to the same short chain), so the gate compares a *calibrated*
//! probability instead: Platt scaling on the logit, `q_i = sigmoid(s_i · z_i + b_i)`, one
//! `(s_i, b_i)` per block position (the DSpark paper's sequential temperature scaling is the
//! `b_i = 0` case), fitted online on the accept/reject labels that verify produces:
//!
//! - after a round that verified `n` drafts and accepted `a`, position `i < a` is labelled 1,
//!   position `a` (when `a < n`) 0, and positions past `a` get no label: `q_i` estimates the
//!   probability that draft `i` is accepted **given** that the drafts before it were;
//! - each label is weighted `decay^age` (age in rounds) so that the fit follows the text;
//! - the fit is a few Newton steps of ridge-regularised logistic regression, per position
//!   towards the pooled fit, and the pooled fit towards the identity `(1, 0)` (the raw score).
//!
//! Selection by the gate does not bias the fit of `P(accept | z)` (it only changes which `z`
//! are seen), but a gate that always cuts would starve the deep positions of labels and never
//! reopen. Hence the exploration floor: the gate never keeps fewer than `min_draft` drafts, and
//! every `explore_every`-th round it keeps the whole chain; it also stays open during the first
//! `warmup` rounds.
//!
//! Cutting a greedy chain is lossless: fewer drafts are verified, the accepted prefix is still
//! the target's own greedy continuation.

use std::collections::VecDeque;

/// How the calibrated probabilities decide the cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GateRule {
    /// Keep drafts up to (excluding) the first position whose probability `q_i` is below the
    /// threshold.
    #[default]
    Position,
    /// Keep drafts while the survival `Π_{j≤i} q_j` (the probability that draft i is reached
    /// and accepted) is at least the threshold.
    Survival,
}

impl GateRule {
    pub fn parse(s: &str) -> Result<GateRule, String> {
        match s {
            "position" => Ok(GateRule::Position),
            "survival" => Ok(GateRule::Survival),
            o => Err(format!("unknown gate rule '{o}' (position, survival)")),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            GateRule::Position => "position",
            GateRule::Survival => "survival",
        }
    }
}

/// Gate and calibration settings.
#[derive(Clone, Debug, PartialEq)]
pub struct GateConfig {
    /// The gate's threshold; None: the gate is off (scores are still calibrated and reported).
    pub threshold: Option<f32>,
    pub rule: GateRule,
    /// Every this many rounds the whole chain is kept (0: never; not recommended).
    pub explore_every: usize,
    /// The gate never keeps fewer drafts than this (at least 1 is enforced).
    pub min_draft: usize,
    /// Rounds with labels before the gate may cut.
    pub warmup: usize,
    /// Per-round decay of a label's weight.
    pub decay: f64,
    /// Ridge strength (in units of label weight) towards the prior fit.
    pub prior: f64,
    /// Labels kept per position at most (the oldest go first).
    pub max_labels: usize,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            threshold: None,
            rule: GateRule::Position,
            explore_every: 8,
            min_draft: 1,
            warmup: 16,
            decay: 0.98,
            prior: 2.0,
            max_labels: 256,
        }
    }
}

/// Platt parameters: `q = sigmoid(scale · z + bias)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Platt {
    pub scale: f64,
    pub bias: f64,
}

impl Platt {
    pub const IDENTITY: Platt = Platt {
        scale: 1.0,
        bias: 0.0,
    };
    pub fn prob(&self, z: f64) -> f64 {
        sigmoid(self.scale * z + self.bias)
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Fits `(scale, bias)` to weighted labels `(z, y, w)` by Newton's method on the weighted
/// log-loss plus `lambda/2 · |θ − prior|²`, starting from `start`. The ridge keeps the problem
/// well posed with few or separable labels.
pub fn fit_platt(
    labels: impl Iterator<Item = (f64, f64, f64)> + Clone,
    prior: Platt,
    lambda: f64,
    start: Platt,
    iters: usize,
) -> Platt {
    let lambda = lambda.max(1e-6);
    let objective = |th: Platt| -> f64 {
        let mut f =
            0.5 * lambda * ((th.scale - prior.scale).powi(2) + (th.bias - prior.bias).powi(2));
        for (z, y, w) in labels.clone() {
            // Stable log(1 + e^{-m}) with the signed margin m.
            let x = th.scale * z + th.bias;
            let m = if y > 0.5 { x } else { -x };
            f += w
                * (if m > 0.0 {
                    (-m).exp().ln_1p()
                } else {
                    -m + m.exp().ln_1p()
                });
        }
        f
    };
    let mut th = start;
    let mut f = objective(th);
    for _ in 0..iters {
        // Gradient and Hessian of the objective at th.
        let (mut g0, mut g1) = (
            lambda * (th.scale - prior.scale),
            lambda * (th.bias - prior.bias),
        );
        let (mut h00, mut h01, mut h11) = (lambda, 0.0, lambda);
        for (z, y, w) in labels.clone() {
            let p = th.prob(z);
            let r = w * (p - y);
            g0 += r * z;
            g1 += r;
            let v = w * p * (1.0 - p);
            h00 += v * z * z;
            h01 += v * z;
            h11 += v;
        }
        let det = h00 * h11 - h01 * h01;
        if !(det > 0.0 && det.is_finite()) {
            break;
        }
        let d0 = (h11 * g0 - h01 * g1) / det;
        let d1 = (h00 * g1 - h01 * g0) / det;
        // Backtracking: a Newton step on the logistic loss can overshoot where the Hessian is
        // small (confident wrong scores); halve it until the objective decreases.
        let mut t = 1.0;
        let mut moved = false;
        for _ in 0..20 {
            let cand = Platt {
                scale: th.scale - t * d0,
                bias: th.bias - t * d1,
            };
            let fc = objective(cand);
            if fc <= f {
                th = cand;
                f = fc;
                moved = true;
                break;
            }
            t *= 0.5;
        }
        if !moved || t * (d0.abs() + d1.abs()) < 1e-7 {
            break;
        }
    }
    th
}

#[derive(Clone, Copy, Debug)]
struct Label {
    z: f64,
    y: bool,
    round: u64,
}

/// Running quality of the probabilities, each scored on a label *before* the fit sees it
/// (prequential), raw vs calibrated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CalibrationScore {
    pub labels: u64,
    pub positives: u64,
    pub log_loss_raw: f64,
    pub log_loss_cal: f64,
    pub brier_raw: f64,
    pub brier_cal: f64,
}

impl CalibrationScore {
    fn add(&mut self, raw: f64, cal: f64, y: bool) {
        let yf = if y { 1.0 } else { 0.0 };
        let ll = |p: f64| -(if y { p } else { 1.0 - p }).clamp(1e-9, 1.0).ln();
        self.labels += 1;
        self.positives += y as u64;
        self.log_loss_raw += ll(raw);
        self.log_loss_cal += ll(cal);
        self.brier_raw += (raw - yf).powi(2);
        self.brier_cal += (cal - yf).powi(2);
    }

    /// Mean (log loss raw, log loss calibrated, Brier raw, Brier calibrated).
    pub fn means(&self) -> (f64, f64, f64, f64) {
        let n = self.labels.max(1) as f64;
        (
            self.log_loss_raw / n,
            self.log_loss_cal / n,
            self.brier_raw / n,
            self.brier_cal / n,
        )
    }
}

/// Online Platt calibration per block position.
#[derive(Clone, Debug)]
pub struct Calibrator {
    cfg: GateConfig,
    labels: Vec<VecDeque<Label>>,
    per: Vec<Platt>,
    pooled: Platt,
    /// Rounds observed.
    round: u64,
    pub score: CalibrationScore,
}

impl Calibrator {
    pub fn new(cfg: GateConfig) -> Calibrator {
        Calibrator {
            cfg,
            labels: Vec::new(),
            per: Vec::new(),
            pooled: Platt::IDENTITY,
            round: 0,
            score: CalibrationScore::default(),
        }
    }

    /// The fitted parameters of position `i` (the pooled fit for positions never labelled).
    pub fn params(&self, i: usize) -> Platt {
        self.per.get(i).copied().unwrap_or(self.pooled)
    }

    pub fn pooled(&self) -> Platt {
        self.pooled
    }

    /// Rounds with labels so far.
    pub fn rounds(&self) -> u64 {
        self.round
    }

    /// Calibrated probabilities of the logits `z` (position i = block row i).
    pub fn calibrated(&self, z: &[f32]) -> Vec<f32> {
        z.iter()
            .enumerate()
            .map(|(i, &z)| self.params(i).prob(z as f64) as f32)
            .collect()
    }

    /// Labels from one verified round: the logits of the `z.len()` verified drafts and how
    /// many of them were accepted. Refits the positions that got labels.
    pub fn observe(&mut self, z: &[f32], accepted: usize) {
        if z.is_empty() {
            return;
        }
        self.round += 1;
        let labelled = (accepted + 1).min(z.len());
        if self.labels.len() < labelled {
            self.labels.resize_with(labelled, VecDeque::new);
            self.per.resize(labelled, self.pooled);
        }
        for (i, &zi) in z.iter().enumerate().take(labelled) {
            let y = i < accepted;
            let raw = sigmoid(zi as f64);
            let cal = self.params(i).prob(zi as f64);
            self.score.add(raw, cal, y);
            let q = &mut self.labels[i];
            q.push_back(Label {
                z: zi as f64,
                y,
                round: self.round,
            });
            while q.len() > self.cfg.max_labels.max(1) {
                q.pop_front();
            }
        }
        self.forget();
        self.refit();
    }

    /// Drops labels whose weight fell below 1%.
    fn forget(&mut self) {
        let min_w = 0.01f64;
        let max_age = if self.cfg.decay < 1.0 && self.cfg.decay > 0.0 {
            (min_w.ln() / self.cfg.decay.ln()).ceil() as u64
        } else {
            u64::MAX
        };
        let now = self.round;
        for q in &mut self.labels {
            while q.front().is_some_and(|l| now - l.round > max_age) {
                q.pop_front();
            }
        }
    }

    fn weighted<'s>(
        &'s self,
        q: &'s VecDeque<Label>,
    ) -> impl Iterator<Item = (f64, f64, f64)> + Clone + 's {
        let (now, decay) = (self.round, self.cfg.decay);
        q.iter().map(move |l| {
            let w = decay.powi((now - l.round) as i32);
            (l.z, if l.y { 1.0 } else { 0.0 }, w)
        })
    }

    /// Refits the pooled parameters, then every position towards them (a handful of
    /// positions and at most `max_labels` labels each: microseconds per round).
    fn refit(&mut self) {
        // Warm-started from the previous fit, which moves little per round.
        const ITERS: usize = 3;
        let lambda = self.cfg.prior;
        let all = self.labels.iter().flat_map(|q| self.weighted(q));
        self.pooled = fit_platt(all, Platt::IDENTITY, lambda, self.pooled, ITERS);
        for i in 0..self.labels.len() {
            let fit = fit_platt(
                self.weighted(&self.labels[i]),
                self.pooled,
                lambda,
                self.per[i],
                ITERS,
            );
            self.per[i] = fit;
        }
    }
}

/// Counters of a gate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GateStats {
    pub rounds: u64,
    /// Rounds in which the gate removed at least one draft.
    pub cut_rounds: u64,
    pub explore_rounds: u64,
    /// Drafts offered by the drafter and kept by the gate, summed over rounds.
    pub offered: u64,
    pub kept: u64,
}

/// The confidence gate of one drafter: a calibrator and the cut rule.
#[derive(Clone, Debug)]
pub struct Gate {
    pub cfg: GateConfig,
    pub cal: Calibrator,
    pub stats: GateStats,
}

/// What the gate decided for one round.
#[derive(Clone, Debug, PartialEq)]
pub struct GateDecision {
    /// Drafts to keep (a prefix).
    pub keep: usize,
    /// The calibrated probabilities of every offered draft.
    pub calibrated: Vec<f32>,
    pub explore: bool,
}

impl Gate {
    pub fn new(cfg: GateConfig) -> Gate {
        Gate {
            cal: Calibrator::new(cfg.clone()),
            cfg,
            stats: GateStats::default(),
        }
    }

    /// Decides how many of the offered drafts (logits `z`) to keep.
    pub fn decide(&mut self, z: &[f32]) -> GateDecision {
        let n = z.len();
        let calibrated = self.cal.calibrated(z);
        self.stats.rounds += 1;
        self.stats.offered += n as u64;
        let explore = self.cfg.explore_every > 0
            && self
                .stats
                .rounds
                .is_multiple_of(self.cfg.explore_every as u64);
        let open = explore || self.cal.rounds() < self.cfg.warmup as u64;
        let keep = match self.cfg.threshold {
            Some(p) if !open => {
                let cut = match self.cfg.rule {
                    GateRule::Position => calibrated.iter().position(|&q| q < p),
                    GateRule::Survival => {
                        let mut s = 1.0f32;
                        calibrated.iter().position(|&q| {
                            s *= q;
                            s < p
                        })
                    }
                };
                cut.unwrap_or(n).max(self.cfg.min_draft.max(1)).min(n)
            }
            _ => n,
        };
        if keep < n {
            self.stats.cut_rounds += 1;
        }
        if explore {
            self.stats.explore_rounds += 1;
        }
        self.stats.kept += keep as u64;
        GateDecision {
            keep,
            calibrated,
            explore,
        }
    }

    /// The labels of a verified round (see [`Calibrator::observe`]).
    pub fn observe(&mut self, z: &[f32], accepted: usize) {
        self.cal.observe(z, accepted);
    }

    /// A JSON summary: settings, counters, fitted parameters and calibration scores.
    pub fn report(&self) -> serde_json::Value {
        let (llr, llc, br, bc) = self.cal.score.means();
        let per: Vec<[f64; 2]> = (0..self.cal.labels.len())
            .map(|i| {
                let p = self.cal.params(i);
                [p.scale, p.bias]
            })
            .collect();
        serde_json::json!({
            "threshold": self.cfg.threshold,
            "rule": self.cfg.rule.name(),
            "explore_every": self.cfg.explore_every,
            "rounds": self.stats.rounds,
            "cut_rounds": self.stats.cut_rounds,
            "explore_rounds": self.stats.explore_rounds,
            "offered": self.stats.offered,
            "kept": self.stats.kept,
            "labels": self.cal.score.labels,
            "label_accept_rate": self.cal.score.positives as f64 / self.cal.score.labels.max(1) as f64,
            "log_loss_raw": llr,
            "log_loss_calibrated": llc,
            "brier_raw": br,
            "brier_calibrated": bc,
            "pooled": [self.cal.pooled.scale, self.cal.pooled.bias],
            "per_position": per,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::rng::Rng;

    fn bern(rng: &mut Rng, p: f64) -> bool {
        (rng.uniform() as f64) < p
    }

    /// Synthetic mis-scaled scores: the true acceptance is `sigmoid(z / 3 − 0.5)`.
    #[test]
    fn calibrator_recovers_a_known_temperature() {
        let mut rng = Rng::new(7);
        let cfg = GateConfig {
            decay: 1.0,
            max_labels: 2000,
            ..GateConfig::default()
        };
        let mut c = Calibrator::new(cfg);
        let truth = Platt {
            scale: 1.0 / 3.0,
            bias: -0.5,
        };
        for _ in 0..4000 {
            // One verified draft per round: position 0 only.
            let z = 4.0 * rng.normal();
            let y = bern(&mut rng, truth.prob(z as f64));
            c.observe(&[z], y as usize);
        }
        let p = c.params(0);
        assert!((p.scale - truth.scale).abs() < 0.05, "{p:?}");
        assert!((p.bias - truth.bias).abs() < 0.15, "{p:?}");
        // Calibration beats the raw scores on fresh labels.
        let (llr, llc, br, bc) = c.score.means();
        assert!(llc < llr && bc < br, "{:?}", c.score);
    }

    /// Calibrated probabilities match the empirical acceptance rate per bin on fresh data.
    #[test]
    fn calibrated_probabilities_match_empirical_rates() {
        let mut rng = Rng::new(11);
        let mut c = Calibrator::new(GateConfig {
            decay: 1.0,
            max_labels: 1500,
            ..GateConfig::default()
        });
        // Four positions, each mis-scaled its own way; chain labels (conditional on the prefix).
        let truth = [
            Platt {
                scale: 0.25,
                bias: 1.0,
            },
            Platt {
                scale: 0.5,
                bias: 0.0,
            },
            Platt {
                scale: 2.0,
                bias: -0.5,
            },
            Platt {
                scale: 0.2,
                bias: -1.0,
            },
        ];
        let draw = |rng: &mut Rng| -> (Vec<f32>, usize) {
            let z: Vec<f32> = (0..4).map(|_| 3.0 * rng.normal()).collect();
            let a = (0..4)
                .position(|i| !bern(rng, truth[i].prob(z[i] as f64)))
                .unwrap_or(4);
            (z, a)
        };
        for _ in 0..3000 {
            let (z, a) = draw(&mut rng);
            c.observe(&z, a);
        }
        // Fresh rounds: bin calibrated q of every labelled position, compare with the rate.
        let mut bins = [(0.0f64, 0.0f64, 0u32); 5];
        for _ in 0..20000 {
            let (z, a) = draw(&mut rng);
            let q = c.calibrated(&z);
            for (i, &qi) in q.iter().enumerate().take((a + 1).min(4)) {
                let b = ((qi as f64 * 5.0) as usize).min(4);
                bins[b].0 += qi as f64;
                bins[b].1 += (i < a) as u8 as f64;
                bins[b].2 += 1;
            }
        }
        for (k, (sq, sy, n)) in bins.iter().enumerate() {
            if *n < 300 {
                continue;
            }
            let (mq, my) = (sq / *n as f64, sy / *n as f64);
            assert!(
                (mq - my).abs() < 0.04,
                "bin {k}: mean q {mq:.3} vs rate {my:.3} ({n})"
            );
        }
        for (i, t) in truth.iter().enumerate() {
            let p = c.params(i);
            assert!(
                (p.scale - t.scale).abs() < 0.2 * t.scale.max(0.5),
                "{i}: {p:?} vs {t:?}"
            );
        }
    }

    /// Simulates the gate in a loop: drafts offered each round, labels only for kept drafts.
    fn run(gate: &mut Gate, rng: &mut Rng, rounds: usize, accept: f64) -> (u64, u64) {
        let (k0, o0) = (gate.stats.kept, gate.stats.offered);
        for _ in 0..rounds {
            // Scores carry no information here; acceptance is `accept` per position.
            let z: Vec<f32> = (0..7).map(|_| 0.5 * rng.normal()).collect();
            let d = gate.decide(&z);
            let a = (0..d.keep)
                .position(|_| !bern(rng, accept))
                .unwrap_or(d.keep);
            gate.observe(&z[..d.keep], a);
        }
        (gate.stats.kept - k0, gate.stats.offered - o0)
    }

    #[test]
    fn gate_cuts_in_a_bad_patch_and_reopens_after_it() {
        let mut rng = Rng::new(3);
        let mut gate = Gate::new(GateConfig {
            threshold: Some(0.5),
            ..GateConfig::default()
        });
        let (k, o) = run(&mut gate, &mut rng, 100, 0.9);
        assert!(k as f64 > 0.9 * o as f64, "good start: kept {k}/{o}");
        // A bad patch: nearly nothing is accepted; the gate cuts to the floor.
        run(&mut gate, &mut rng, 300, 0.05);
        let (k, o) = run(&mut gate, &mut rng, 40, 0.05);
        assert!((k as f64) < 0.35 * o as f64, "bad patch: kept {k}/{o}");
        assert!(gate.cal.params(0).prob(0.0) < 0.2);
        // Good text again: exploration rounds and the floor bring labels; the gate reopens.
        run(&mut gate, &mut rng, 300, 0.95);
        let (k, o) = run(&mut gate, &mut rng, 50, 0.95);
        assert!(k as f64 > 0.9 * o as f64, "after the patch: kept {k}/{o}");
    }

    #[test]
    fn gate_keeps_the_floor_and_is_off_without_threshold() {
        let mut g = Gate::new(GateConfig {
            threshold: Some(0.99),
            warmup: 0,
            explore_every: 0,
            min_draft: 2,
            ..GateConfig::default()
        });
        // Identity calibration before any label: q = sigmoid(z).
        let d = g.decide(&[-5.0, -5.0, -5.0]);
        assert_eq!(d.keep, 2);
        let d = g.decide(&[-5.0]);
        assert_eq!(d.keep, 1);
        let mut off = Gate::new(GateConfig::default());
        assert_eq!(off.decide(&[-9.0, -9.0]).keep, 2);
        // Survival vs position rule.
        let mut s = Gate::new(GateConfig {
            threshold: Some(0.5),
            rule: GateRule::Survival,
            warmup: 0,
            explore_every: 0,
            ..GateConfig::default()
        });
        // q ≈ 0.73, 0.73, 0.73: survival 0.73, 0.53, 0.39 -> keep 2; position rule keeps 3.
        assert_eq!(s.decide(&[1.0, 1.0, 1.0]).keep, 2);
        s.cfg.rule = GateRule::Position;
        assert_eq!(s.decide(&[1.0, 1.0, 1.0]).keep, 3);
        // Exploration rounds keep everything.
        let mut e = Gate::new(GateConfig {
            threshold: Some(0.99),
            warmup: 0,
            explore_every: 2,
            ..GateConfig::default()
        });
        assert_eq!(e.decide(&[-5.0, -5.0]).keep, 1);
        let d = e.decide(&[-5.0, -5.0]);
        assert!(d.explore && d.keep == 2);
    }
}
