//! The single-request adaptive speculation policy (Lucebox `Qwen35AdaptiveSpecPolicy`, from
//! its PR text; speculation.md §4).
//!
//! A spec step yields `1 + a` tokens (a accepted drafts + the bonus) in `r` times the time of
//! a plain step, so it pays when `a > r − 1`. The policy keeps an EMA of `a` and compares it
//! with `a_min = margin · (r − 1)` (margin 0.8), where `r` comes from live EMAs of the measured
//! spec-step and plain-step wall times (1.9 until both are measured), or from a fixed value.
//!
//! Below break-even it runs a burst of `ar_burst` (40) plain steps: those still capture target
//! features so the drafter's context stays valid. Then it probes with one spec step, whose
//! acceptance enters the EMA with the fast alpha 0.5, so a return to predictable text turns
//! speculation back on at once; if the EMA is still low, another burst follows.
//!
//! The base EMA alpha of the original is unknown (§4); ours is 0.3, like its other knobs a
//! [`PolicyConfig`] field and a CLI option.
//!
//! Probes are not free: a probe that fails costs its step time minus the plain time of the
//! tokens it emitted, and it also pays the switch (the burst's rows committed to the drafter,
//! its context append). Two additions keep their cost small when speculation does not pay
//! (prose on a drafter whose spec step costs 3-4 plain steps):
//! - **exponential backoff**: every failed probe in a row multiplies the next burst by
//!   [`PolicyConfig::backoff`] (2), up to [`PolicyConfig::max_burst`] (640 = 16 × 40 steps);
//!   speculation that holds for [`SUSTAINED`] spec steps after a probe resets it;
//! - **the probe's measured cost** (live ratio only): a burst is at least as long as makes the
//!   last probe's loss over plain decoding at most [`PolicyConfig::probe_budget`] (2 %) of the
//!   burst's time. Probe times are kept in their own EMA, apart from steady spec steps: the
//!   switch cost they carry is paid once per probe, not per spec step, and the ratio of
//!   steady speculation uses the steady EMA once it exists (the probe EMA before).
//!
//! One addition ([`PolicyConfig::calibrate`], on by default): with a live ratio the very first
//! step is a plain one, so the plain-step time is known from the first spec step on. Without
//! it the initial ratio (1.9, break-even 0.72) holds until the first burst, and a burst only
//! starts once the acceptance EMA falls below that guess: with a drafter whose spec step costs
//! far more than 1.9 plain steps (DFlash block 16 on the H200: ~7×) and moderate acceptance
//! (prose, ~1.8 drafts), the loop keeps speculating at a loss for many steps. The plain step
//! costs nothing extra: it emits its token like any other step.

use super::evidence::acceptance_sd;
use super::width::WidthModel;

/// Where the spec/plain step time ratio comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ratio {
    /// Live EMAs of measured step times; `initial` until both kinds have been measured.
    Live { initial: f64 },
    /// A fixed ratio (Lucebox `DFLASH_QWEN35_SPEC_STEP_RATIO`, 1.7 in its first form).
    Fixed(f64),
    /// No policy: always speculate (ratio 0). Use it when judging a drafter's quality, since
    /// the policy masks a broken drafter by falling back to plain decoding.
    Disabled,
}

impl Ratio {
    /// `live`, `0` / `off` (disabled) or a fixed number.
    pub fn parse(s: &str) -> Result<Ratio, String> {
        match s {
            "live" => Ok(Ratio::Live { initial: 1.9 }),
            "off" => Ok(Ratio::Disabled),
            _ => match s.parse::<f64>() {
                Ok(0.0) => Ok(Ratio::Disabled),
                Ok(r) if r.is_finite() && r > 0.0 => Ok(Ratio::Fixed(r)),
                _ => Err(format!(
                    "bad spec-step ratio '{s}' (live, 0 to disable, or a positive number)"
                )),
            },
        }
    }
}

/// Every knob of the policy, with the seed's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    pub ratio: Ratio,
    /// `a_min = margin · (r − 1)`.
    pub margin: f64,
    /// EMA alpha for accepted drafts per spec step (base; the seed's value is unknown).
    pub accept_alpha: f64,
    /// EMA alpha of the first spec step after a burst (the probe): fast exit from plain mode.
    pub probe_alpha: f64,
    /// EMA alpha of the step-time measurements.
    pub time_alpha: f64,
    /// Plain steps per burst.
    pub ar_burst: usize,
    /// With a live ratio, run one plain step first to measure the plain-step time (see the
    /// module docs). Off: the original's behaviour (the initial ratio until the first burst).
    pub calibrate: bool,
    /// Burst length multiplier per failed probe in a row (1: no backoff, the original).
    pub backoff: f64,
    /// Longest burst the backoff and the probe-cost rule may reach (never below `ar_burst`).
    pub max_burst: usize,
    /// Live ratio: a burst is long enough that the measured loss of a probe over plain
    /// decoding is at most this fraction of the burst's time (0: off).
    pub probe_budget: f64,
    /// Choose each chain round's number of drafts from live estimates of per-draft survival
    /// and of verify time per row count ([`super::width`]); off: always the full block.
    pub adapt_width: bool,
    /// Evidence a burst needs, in standard errors: a burst starts only once the acceptance
    /// EMA is below break-even by `confidence` standard errors of the EMA, taken at
    /// break-even acceptance (see [`AdaptivePolicy::convinced`]). 0: the seed's rule, a burst
    /// as soon as the EMA is below break-even.
    pub confidence: f64,
    /// Most evidence a burst may need: the EMA's long-run margin below break-even is capped
    /// at this fraction of `a_min` (see [`AdaptivePolicy::convinced`]), so a drafter that
    /// never lands a draft still stops.
    pub burst_cap: f64,
    /// EMA alpha of the long-run acceptance (0: off). While it is at or above break-even, a
    /// short-run dip below break-even starts no burst unless it is a collapse (the short EMA
    /// under [`COLLAPSE`] of break-even): see [`AdaptivePolicy::convinced`].
    pub long_alpha: f64,
}

/// Fraction of break-even under which the short-run acceptance EMA starts a burst whatever
/// the long-run one says (a drafter that stopped landing drafts).
pub const COLLAPSE: f64 = 0.25;

impl PolicyConfig {
    /// Checks the burst-evidence knobs (`--burst-confidence`, `--burst-cap`, `--long-alpha`).
    pub fn check_burst_evidence(confidence: f64, cap: f64, long_alpha: f64) -> Result<(), String> {
        if !(confidence.is_finite() && confidence >= 0.0) {
            return Err(format!(
                "--burst-confidence must be a number of at least 0 (got {confidence})"
            ));
        }
        if !(cap > 0.0 && cap < 1.0) {
            return Err(format!(
                "--burst-cap must be a fraction of break-even above 0 and below 1 (got {cap})"
            ));
        }
        if !(0.0..=1.0).contains(&long_alpha) {
            return Err(format!(
                "--long-alpha must be an EMA alpha from 0 (off) to 1 (got {long_alpha})"
            ));
        }
        Ok(())
    }
}

/// Spec steps in a row (the probe included) after which speculation that falls below
/// break-even again counts as having held: the next burst starts over from `ar_burst`.
/// Shorter, it was a lucky probe and the backoff goes on.
pub const SUSTAINED: usize = 4;

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            ratio: Ratio::Live { initial: 1.9 },
            margin: 0.8,
            accept_alpha: 0.3,
            probe_alpha: 0.5,
            time_alpha: 0.2,
            ar_burst: 40,
            calibrate: true,
            backoff: 2.0,
            max_burst: 640,
            probe_budget: 0.02,
            adapt_width: true,
            confidence: 1.0,
            burst_cap: 0.5,
            long_alpha: 0.05,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Spec,
    Plain,
}

/// Why a decision was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The policy is disabled (ratio 0): always speculate.
    Disabled,
    /// No acceptance measured yet: speculate to find out.
    Start,
    /// The first step with a live ratio: a plain step that measures the plain-step time.
    Calibrate,
    /// The acceptance EMA is at or above break-even.
    AboveBreakEven,
    /// The acceptance EMA is below break-even, by less than the confidence margin
    /// ([`PolicyConfig::confidence`]).
    BelowWithinMargin,
    /// The acceptance EMA is below break-even, its long-run average is not
    /// ([`PolicyConfig::long_alpha`]).
    BelowLongRunAbove,
    /// Inside a plain burst of `len` steps (`left` steps remain after this one).
    Burst { left: usize, len: usize },
    /// The first spec step after a burst.
    Probe,
}

/// One decision and the numbers behind it, for the per-step log.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyEvent {
    pub step: usize,
    pub decision: Decision,
    pub reason: Reason,
    /// Acceptance EMA when deciding (None before the first spec step).
    pub accept_ema: Option<f64>,
    /// Long-run acceptance EMA ([`PolicyConfig::long_alpha`]; None while off or unmeasured).
    pub long_ema: Option<f64>,
    pub ratio: f64,
    pub a_min: f64,
    /// Drafts the round may verify (chain rounds of the adaptive width; set by the loop).
    pub drafts: Option<usize>,
}

impl std::fmt::Display for PolicyEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = match self.decision {
            Decision::Spec => "spec",
            Decision::Plain => "plain",
        };
        let r = match self.reason {
            Reason::Disabled => "policy off".to_string(),
            Reason::Start => "start".to_string(),
            Reason::Calibrate => "measure the plain step".to_string(),
            Reason::AboveBreakEven => "above break-even".to_string(),
            Reason::BelowWithinMargin => "below break-even, within the margin".to_string(),
            Reason::BelowLongRunAbove => "below break-even, above it in the long run".to_string(),
            Reason::Burst { left, len } => format!("burst of {len}, {left} left"),
            Reason::Probe => "probe".to_string(),
        };
        let show = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |e| format!("{e:.3}"));
        write!(
            f,
            "[policy] step {} {d} ({r}) ema {} long {} r {:.3} a_min {:.3}",
            self.step,
            show(self.accept_ema),
            show(self.long_ema),
            self.ratio,
            self.a_min
        )?;
        match self.drafts {
            Some(k) => write!(f, " drafts {k}"),
            None => Ok(()),
        }
    }
}

pub(crate) fn ema(old: Option<f64>, x: f64, alpha: f64) -> f64 {
    match old {
        None => x,
        Some(e) => e + alpha * (x - e),
    }
}

/// The policy's state for one request. Per step: [`AdaptivePolicy::decide`], run the step,
/// then [`AdaptivePolicy::observe_spec`] or [`AdaptivePolicy::observe_plain`].
#[derive(Clone, Debug)]
pub struct AdaptivePolicy {
    cfg: PolicyConfig,
    accept: Option<f64>,
    /// Sum of the squared weights of the acceptance EMA's samples: its variance is that of one
    /// sample times this (1 after the first sample, `α / (2 − α)` in the long run).
    accept_w2: f64,
    /// The most drafts a spec step has verified (None: not told): acceptance is capped there.
    drafts: Option<usize>,
    /// Steady spec steps (not probes).
    spec_time: Option<f64>,
    /// Probes: the first spec step after a burst, with the switch cost it carries.
    probe_time: Option<f64>,
    plain_time: Option<f64>,
    burst_left: usize,
    /// Length of the current (or last) burst.
    burst_len: usize,
    /// Failed probes in a row (the backoff exponent).
    fails: u32,
    /// Spec steps since the last probe (the probe included); None when speculation did not
    /// start from a probe.
    run: Option<usize>,
    /// The next spec step is the probe after a burst.
    probing: bool,
    /// The calibration step was issued (or is not wanted).
    calibrated: bool,
    step: usize,
    width: WidthModel,
    /// Long-run acceptance EMA ([`PolicyConfig::long_alpha`]; None while off or before the
    /// first spec step).
    long: Option<f64>,
}

impl AdaptivePolicy {
    /// As [`AdaptivePolicy::new`], for a backend whose verify cost steps at these row
    /// counts (see [`WidthModel::with_tiles`]).
    pub fn with_row_tiles(cfg: PolicyConfig, tiles: Vec<usize>) -> AdaptivePolicy {
        AdaptivePolicy {
            width: WidthModel::with_tiles(tiles),
            ..AdaptivePolicy::new(cfg)
        }
    }

    pub fn new(cfg: PolicyConfig) -> AdaptivePolicy {
        let calibrated = !(cfg.calibrate && matches!(cfg.ratio, Ratio::Live { .. }));
        AdaptivePolicy {
            cfg,
            accept: None,
            accept_w2: 0.0,
            drafts: None,
            spec_time: None,
            probe_time: None,
            plain_time: None,
            burst_left: 0,
            burst_len: 0,
            fails: 0,
            run: None,
            probing: false,
            calibrated,
            step: 0,
            width: WidthModel::default(),
            long: None,
        }
    }

    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// The spec-step / plain-step time ratio in use.
    pub fn ratio(&self) -> f64 {
        match self.cfg.ratio {
            Ratio::Disabled => 0.0,
            Ratio::Fixed(r) => r,
            Ratio::Live { initial } => {
                match (self.spec_time.or(self.probe_time), self.plain_time) {
                    (Some(s), Some(p)) if p > 0.0 => s / p,
                    _ => initial,
                }
            }
        }
    }

    /// Failed probes in a row.
    pub fn failed_probes(&self) -> u32 {
        self.fails
    }

    /// The length of the current (or last) burst.
    pub fn burst_len(&self) -> usize {
        self.burst_len
    }

    /// The length of a burst starting now: `ar_burst · backoff^fails`, at least long enough
    /// for the probe-cost rule (live ratio), at most `max_burst`.
    fn next_burst(&self) -> usize {
        let base = self.cfg.ar_burst as f64 * self.cfg.backoff.max(1.0).powi(self.fails as i32);
        let mut n = base;
        if let (Ratio::Live { .. }, Some(t), Some(p), Some(a)) = (
            self.cfg.ratio,
            self.probe_time.or(self.spec_time),
            self.plain_time,
            self.accept,
        ) && self.cfg.probe_budget > 0.0
            && p > 0.0
        {
            // A probe's loss over plain decoding of the same tokens, in plain steps.
            let loss = t / p - (1.0 + a);
            n = n.max(loss / self.cfg.probe_budget);
        }
        let cap = self.cfg.max_burst.max(self.cfg.ar_burst) as f64;
        n.min(cap).ceil() as usize
    }

    /// Break-even acceptance: `margin · (r − 1)`.
    pub fn a_min(&self) -> f64 {
        self.cfg.margin * (self.ratio() - 1.0)
    }

    pub fn accept_ema(&self) -> Option<f64> {
        self.accept
    }

    /// Measured step-time EMAs `(spec, plain)` in seconds.
    pub fn step_times(&self) -> (Option<f64>, Option<f64>) {
        (self.spec_time, self.plain_time)
    }

    /// What to run next.
    pub fn decide(&mut self) -> PolicyEvent {
        let (decision, reason) = if self.cfg.ratio == Ratio::Disabled {
            (Decision::Spec, Reason::Disabled)
        } else if !std::mem::replace(&mut self.calibrated, true) && self.plain_time.is_none() {
            (Decision::Plain, Reason::Calibrate)
        } else if self.burst_left > 0 {
            self.burst_left -= 1;
            if self.burst_left == 0 {
                self.probing = true;
            }
            (
                Decision::Plain,
                Reason::Burst {
                    left: self.burst_left,
                    len: self.burst_len,
                },
            )
        } else if self.probing {
            (Decision::Spec, Reason::Probe)
        } else if self.accept.is_none() {
            (Decision::Spec, Reason::Start)
        } else {
            let a_min = self.a_min();
            let reason = match self.accept {
                Some(a) if a < a_min && self.long_run_holds(a, a_min) => Reason::BelowLongRunAbove,
                Some(a) if a < a_min => Reason::BelowWithinMargin,
                _ => Reason::AboveBreakEven,
            };
            (Decision::Spec, reason)
        };
        let ev = PolicyEvent {
            step: self.step,
            decision,
            reason,
            accept_ema: self.accept,
            long_ema: self.long,
            ratio: self.ratio(),
            a_min: self.a_min(),
            drafts: None,
        };
        self.step += 1;
        ev
    }

    /// A spec step accepted `accepted` drafts in `secs` (the whole step: draft, verify,
    /// rollback). Starts a burst when the EMA falls below break-even.
    pub fn observe_spec(&mut self, accepted: usize, secs: f64) {
        self.observe_spec_timed(accepted, Some(secs));
    }

    /// [`AdaptivePolicy::observe_spec`] where `secs` may be no sample (`None`: the step
    /// carried a graph build, see [`crate::backend::graph_builds`]); its acceptance counts.
    fn observe_spec_timed(&mut self, accepted: usize, secs: Option<f64>) {
        let probe = std::mem::replace(&mut self.probing, false);
        let alpha = if probe {
            if let Some(secs) = secs {
                self.probe_time = Some(ema(self.probe_time, secs, self.cfg.time_alpha));
            }
            self.cfg.probe_alpha
        } else {
            if let Some(secs) = secs {
                self.spec_time = Some(ema(self.spec_time, secs, self.cfg.time_alpha));
            }
            self.cfg.accept_alpha
        };
        let accept = ema(self.accept, accepted as f64, alpha);
        if self.cfg.long_alpha > 0.0 {
            self.long = Some(ema(self.long, accepted as f64, self.cfg.long_alpha));
        }
        self.accept_w2 = match self.accept {
            None => 1.0,
            Some(_) => (1.0 - alpha).powi(2) * self.accept_w2 + alpha * alpha,
        };
        self.accept = Some(accept);
        if probe {
            self.run = Some(0);
        }
        if let Some(r) = &mut self.run {
            *r += 1;
        }
        if self.cfg.ratio == Ratio::Disabled || self.cfg.ar_burst == 0 || !self.convinced(accept) {
            return;
        }
        // Below break-even. A probe that failed, or speculation that did not last after one
        // (a lucky probe), backs the next probe off; speculation that held, or the first
        // spec steps, start over from `ar_burst`.
        self.fails = match self.run.take() {
            Some(r) if r < SUSTAINED => self.fails.saturating_add(1),
            _ => 0,
        };
        self.burst_len = self.next_burst();
        self.burst_left = self.burst_len;
    }

    /// Whether the acceptance EMA `accept` shows speculation below break-even: below
    /// `a_min` by a margin of [`PolicyConfig::confidence`] standard errors of the EMA, taken
    /// as if the true acceptance were `a_min` (a one-sided test of "speculation pays").
    ///
    /// Accepted drafts per round are a noisy count (prose on 7 drafts: mean 1.7, standard
    /// deviation ~1.9, none 40 % of the time), and the seed's bare comparison, on an EMA of
    /// alpha 0.3 that starts at the first sample, sends speculation that pays into 40-step
    /// plain bursts after one empty round (session 29, hip on an H100: the chain 1.17 × AR on
    /// prose, the policy 0.97 ×, its first round empty). The number of standard errors:
    /// - is divided by `r − 1` where that exceeds 1: a losing spec step costs `r − 1 − a`
    ///   plain steps, so the dearer the step the less evidence a burst needs;
    /// - is capped so that the margin of the EMA's long run (its variance never falls below
    ///   `α / (2 − α)` of one sample's) is at most [`PolicyConfig::burst_cap`] (half) of
    ///   `a_min`: a drafter that never lands a draft must still stop, whatever the
    ///   break-even (after two rounds at hip's costs).
    ///
    /// Simulated (`the_confidence_margin_keeps_paying_speculation_on`): prose at hip's costs
    /// 1.03 × → 1.2 × plain decoding, prose at a cost where it loses still within 1 % of plain.
    fn convinced(&self, accept: f64) -> bool {
        let a_min = self.a_min();
        if accept >= a_min || self.long_run_holds(accept, a_min) {
            return false;
        }
        let z = self.cfg.confidence / (self.ratio() - 1.0).max(1.0);
        let sd = acceptance_sd(a_min, self.drafts);
        if z <= 0.0 || sd <= 0.0 {
            return true;
        }
        let alpha = self.cfg.accept_alpha.clamp(1e-3, 1.0);
        let floor = (alpha / (2.0 - alpha)).sqrt();
        let z = z.min(self.cfg.burst_cap * a_min / (sd * floor));
        accept < a_min - z * sd * self.accept_w2.sqrt()
    }

    /// Whether the long-run acceptance keeps speculation on through a short-run dip to
    /// `accept` below break-even `a_min`: at or above `a_min`, and the dip no collapse.
    ///
    /// The short EMA (alpha 0.3) forgets in a few rounds, and prose that pays (hip's costs,
    /// mean 1.7 accepted drafts of 7 against a break-even of 0.86) has runs of four or five
    /// empty rounds often enough to start a 40-step burst every few hundred tokens even with
    /// the confidence margin. Simulated (`the_long_run_acceptance_keeps_paying_speculation_on`,
    /// alpha 0.05): prose that pays 1.18 → 1.29 × plain (always speculating 1.31), code/prose
    /// phases 1.67 → 1.78 (1.81), prose that loses 0.990 → 0.987; the cost is a slower exit
    /// where acceptance falls just under break-even (128-token phases of code and of 0.6
    /// drafts: 1.25 → 1.23).
    fn long_run_holds(&self, accept: f64, a_min: f64) -> bool {
        matches!(self.long, Some(l) if l >= a_min) && accept >= COLLAPSE * a_min
    }

    /// A chain spec step: [`AdaptivePolicy::observe_spec`] plus the numbers of the width
    /// model: `drafted` drafts verified, `step_s` the step's own time (draft, verify,
    /// rollback, commit; not a burst's switch cost) of which `verify_s` the verify forward.
    pub fn observe_chain(
        &mut self,
        drafted: usize,
        accepted: usize,
        secs: f64,
        step_s: f64,
        verify_s: f64,
    ) {
        self.note_drafts(drafted);
        self.observe_spec(accepted, secs);
        let alpha = self.cfg.accept_alpha;
        self.width
            .observe(drafted, accepted, step_s, verify_s, alpha);
    }

    /// A chain spec step whose time carried a graph build (see
    /// [`crate::backend::graph_builds`]): as [`AdaptivePolicy::observe_chain`] for its
    /// acceptance, with no time sample. Session 28 (wgpu, H100): one such step of 1.1 s, taken
    /// as the spec step's time, sent the policy into plain bursts for the rest of a run.
    pub fn observe_chain_untimed(&mut self, drafted: usize, accepted: usize) {
        self.note_drafts(drafted);
        self.observe_spec_timed(accepted, None);
        let alpha = self.cfg.accept_alpha;
        self.width.observe_acceptance(drafted, accepted, alpha);
    }

    /// Drafts the next chain round should verify, at most `max`: the width that maximises
    /// expected tokens per second ([`WidthModel::best`]), or `max` with the width choice off
    /// or the policy disabled.
    pub fn chain_len(&self, max: usize) -> usize {
        if !self.cfg.adapt_width || self.cfg.ratio == Ratio::Disabled {
            return max;
        }
        self.width.best(max, self.plain_time).min(max)
    }

    /// The width model's per-draft survival estimate.
    pub fn survival(&self) -> Option<f64> {
        self.width.survival()
    }

    fn note_drafts(&mut self, drafted: usize) {
        self.drafts = Some(self.drafts.map_or(drafted, |d| d.max(drafted)));
    }

    /// A plain step (one token, features captured) took `secs`.
    pub fn observe_plain(&mut self, secs: f64) {
        self.plain_time = Some(ema(self.plain_time, secs, self.cfg.time_alpha));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `n` steps with fixed timings and acceptance; returns the decisions.
    fn drive(
        p: &mut AdaptivePolicy,
        n: usize,
        spec_s: f64,
        plain_s: f64,
        acc: usize,
    ) -> Vec<Decision> {
        (0..n)
            .map(|_| {
                let ev = p.decide();
                match ev.decision {
                    Decision::Spec => p.observe_spec(acc, spec_s),
                    Decision::Plain => p.observe_plain(plain_s),
                }
                ev.decision
            })
            .collect()
    }

    /// The original's behaviour: no calibration step, fixed-length bursts.
    fn original() -> PolicyConfig {
        PolicyConfig {
            calibrate: false,
            backoff: 1.0,
            probe_budget: 0.0,
            confidence: 0.0,
            long_alpha: 0.0,
            ..Default::default()
        }
    }

    #[test]
    fn break_even_uses_initial_ratio_until_both_times_are_measured() {
        let mut p = AdaptivePolicy::new(original());
        assert!((p.a_min() - 0.72).abs() < 1e-12);
        p.decide();
        p.observe_spec(3, 0.018);
        assert!(
            (p.ratio() - 1.9).abs() < 1e-12,
            "plain time not measured yet"
        );
        p.observe_plain(0.010);
        assert!((p.ratio() - 1.8).abs() < 1e-9);
        assert!((p.a_min() - 0.64).abs() < 1e-9);
    }

    #[test]
    fn stays_on_while_acceptance_pays() {
        let mut p = AdaptivePolicy::new(original());
        let d = drive(&mut p, 100, 0.018, 0.010, 2);
        assert!(d.iter().all(|&x| x == Decision::Spec));
        assert_eq!(p.accept_ema(), Some(2.0));
    }

    #[test]
    fn turns_off_below_break_even_probes_after_burst_and_recovers() {
        let cfg = original();
        let burst = cfg.ar_burst;
        let mut p = AdaptivePolicy::new(cfg);
        // Acceptance 0 is below any break-even with r > 1: the first spec step starts a burst.
        let ev = p.decide();
        assert_eq!((ev.decision, ev.reason), (Decision::Spec, Reason::Start));
        p.observe_spec(0, 0.018);
        for i in 0..burst {
            let ev = p.decide();
            assert_eq!(ev.decision, Decision::Plain, "burst step {i}");
            assert_eq!(
                ev.reason,
                Reason::Burst {
                    left: burst - 1 - i,
                    len: burst
                }
            );
            p.observe_plain(0.010);
        }
        // Probe: still bad, so a second burst.
        let ev = p.decide();
        assert_eq!((ev.decision, ev.reason), (Decision::Spec, Reason::Probe));
        assert!((ev.ratio - 1.8).abs() < 1e-9, "live ratio after a burst");
        p.observe_spec(0, 0.018);
        let d = drive(&mut p, burst, 0.018, 0.010, 0);
        assert!(d.iter().all(|&x| x == Decision::Plain));
        // The text becomes predictable: one probe with 2 accepted lifts the EMA (alpha 0.5)
        // from 0 to 1.0 > 0.64 and speculation stays on.
        let ev = p.decide();
        assert_eq!(ev.reason, Reason::Probe);
        p.observe_spec(2, 0.018);
        assert_eq!(p.accept_ema(), Some(1.0));
        let d = drive(&mut p, 20, 0.018, 0.010, 2);
        assert!(d.iter().all(|&x| x == Decision::Spec));
        assert_eq!(p.decide().reason, Reason::AboveBreakEven);
    }

    #[test]
    fn slow_decay_with_base_alpha_then_burst() {
        let mut p = AdaptivePolicy::new(original());
        // Establish both timings: r = 2.0, a_min = 0.8.
        drive(&mut p, 1, 0.020, 0.010, 3);
        p.observe_plain(0.010);
        assert!((p.a_min() - 0.8).abs() < 1e-9);
        // EMA from 3 with alpha 0.3 toward 0: 2.1, 1.47, 1.029, 0.72 → below 0.8 at the 4th.
        let d = drive(&mut p, 5, 0.020, 0.010, 0);
        assert_eq!(
            d,
            vec![
                Decision::Spec,
                Decision::Spec,
                Decision::Spec,
                Decision::Spec,
                Decision::Plain
            ]
        );
    }

    #[test]
    fn fixed_and_disabled_ratios() {
        let mut p = AdaptivePolicy::new(PolicyConfig {
            ratio: Ratio::Fixed(1.7),
            ..Default::default()
        });
        p.observe_plain(1.0);
        p.observe_spec(1, 100.0);
        assert!((p.ratio() - 1.7).abs() < 1e-12);
        assert!((p.a_min() - 0.56).abs() < 1e-9);
        assert_eq!(p.decide().decision, Decision::Spec, "1 > 0.56");

        let mut p = AdaptivePolicy::new(PolicyConfig {
            ratio: Ratio::Disabled,
            ..Default::default()
        });
        let d = drive(&mut p, 50, 0.1, 0.01, 0);
        assert!(d.iter().all(|&x| x == Decision::Spec));
        assert_eq!(Ratio::parse("0").unwrap(), Ratio::Disabled);
        assert_eq!(Ratio::parse("1.7").unwrap(), Ratio::Fixed(1.7));
        assert!(Ratio::parse("-1").is_err());
    }

    #[test]
    fn burst_length_is_configurable_and_logged() {
        let mut p = AdaptivePolicy::new(PolicyConfig {
            ar_burst: 3,
            ..original()
        });
        p.decide();
        p.observe_spec(0, 0.02);
        let evs: Vec<String> = (0..4)
            .map(|_| {
                let e = p.decide();
                match e.decision {
                    Decision::Spec => p.observe_spec(0, 0.02),
                    Decision::Plain => p.observe_plain(0.01),
                }
                e.to_string()
            })
            .collect();
        assert!(evs[0].contains("plain (burst of 3, 2 left)"), "{}", evs[0]);
        assert!(evs[2].contains("plain (burst of 3, 0 left)"), "{}", evs[2]);
        assert!(evs[3].contains("spec (probe)"), "{}", evs[3]);
    }

    #[test]
    fn calibration_step_measures_plain_time_before_the_first_spec_step() {
        // The H200 prose case: a spec step ~7× a plain step, ~1.8 drafts accepted per step.
        let (spec_s, plain_s, acc) = (0.085, 0.012, 2);
        let mut p = AdaptivePolicy::new(PolicyConfig::default());
        let ev = p.decide();
        assert_eq!(
            (ev.decision, ev.reason),
            (Decision::Plain, Reason::Calibrate)
        );
        assert!(
            ev.to_string().contains("plain (measure the plain step)"),
            "{ev}"
        );
        p.observe_plain(plain_s);
        let ev = p.decide();
        assert_eq!((ev.decision, ev.reason), (Decision::Spec, Reason::Start));
        p.observe_spec(acc, spec_s);
        // r = 7.08, a_min = 4.87 > 2: a burst right after the first spec step, long enough
        // that the next probe's loss (7.083 − 3 plain steps) is 2 % of it: 205 steps.
        assert!((p.a_min() - 0.8 * (spec_s / plain_s - 1.0)).abs() < 1e-9);
        assert_eq!(p.burst_len(), 205);
        let d = drive(&mut p, 205, spec_s, plain_s, acc);
        assert!(d.iter().all(|&x| x == Decision::Plain), "{d:?}");
        assert_eq!(p.decide().reason, Reason::Probe);

        // Without it the guessed ratio 1.9 (a_min 0.72) keeps a loss-making drafter on.
        let mut p = AdaptivePolicy::new(original());
        let d = drive(&mut p, 40, spec_s, plain_s, acc);
        assert!(d.iter().all(|&x| x == Decision::Spec));

        // Only a live ratio needs it; an observation before the first decision skips it.
        for ratio in [Ratio::Fixed(1.7), Ratio::Disabled] {
            let mut p = AdaptivePolicy::new(PolicyConfig {
                ratio,
                ..Default::default()
            });
            assert_eq!(p.decide().decision, Decision::Spec, "{ratio:?}");
        }
        let mut p = AdaptivePolicy::new(PolicyConfig::default());
        p.observe_plain(plain_s);
        assert_eq!(p.decide().reason, Reason::Start);
    }

    #[test]
    fn a_step_that_built_a_graph_counts_its_acceptance_not_its_time() {
        // The wgpu code case: a 1-row step 12 ms, a chain round 26 ms accepting ~5.7 drafts;
        // the first round of a new drafter shape also compiled its pipelines (1.1 s).
        let (spec_s, plain_s) = (0.026, 0.012);
        let mut p = AdaptivePolicy::new(PolicyConfig::default());
        assert_eq!(p.decide().reason, Reason::Calibrate);
        p.observe_plain(plain_s);
        assert_eq!(p.decide().reason, Reason::Start);
        p.observe_chain_untimed(7, 6);
        let d = (0..20)
            .map(|_| {
                let ev = p.decide();
                if ev.decision == Decision::Spec {
                    p.observe_chain(7, 6, spec_s, spec_s, 0.02);
                }
                ev.decision
            })
            .collect::<Vec<_>>();
        assert!(d.iter().all(|&x| x == Decision::Spec), "{d:?}");
        assert!((p.a_min() - 0.8 * (spec_s / plain_s - 1.0)).abs() < 1e-9);

        // Taken as a sample, the build's 1.1 s would have sent it into a plain burst.
        let mut p = AdaptivePolicy::new(PolicyConfig::default());
        p.decide();
        p.observe_plain(plain_s);
        p.decide();
        p.observe_chain(7, 6, 1.1, 1.1, 0.02);
        assert_eq!(p.decide().decision, Decision::Plain);
    }

    /// Steps of a simulated run: `(decision, seconds, tokens)`; the spec step accepts
    /// `acc(rng)` drafts.
    fn simulate(
        p: &mut AdaptivePolicy,
        n: usize,
        spec_s: f64,
        plain_s: f64,
        acc: &mut dyn FnMut() -> usize,
    ) -> Vec<(Decision, f64, usize)> {
        (0..n)
            .map(|_| match p.decide().decision {
                Decision::Spec => {
                    let a = acc();
                    p.observe_spec(a, spec_s);
                    (Decision::Spec, spec_s, 1 + a)
                }
                Decision::Plain => {
                    p.observe_plain(plain_s);
                    (Decision::Plain, plain_s, 1)
                }
            })
            .collect()
    }

    /// Tokens per second of a simulated run over plain decoding's.
    fn speed_vs_plain(steps: &[(Decision, f64, usize)], plain_s: f64) -> f64 {
        let secs: f64 = steps.iter().map(|s| s.1).sum();
        let tokens: usize = steps.iter().map(|s| s.2).sum();
        tokens as f64 / secs * plain_s
    }

    /// The H200 prose case: a 16-row verify step of 30 ms against a 9.2 ms plain step, mean
    /// accepted length 2.7 (1.7 drafts: the replay profile's geometric cut over 15 drafts).
    /// Speculation loses there (2.7 tokens per 30 ms = 11.1 ms/token): in steady state at least
    /// 95 % of the steps are plain and the run is within 2 % of plain decoding's speed.
    #[test]
    fn prose_on_a_costly_verify_stays_plain() {
        use crate::util::rng::Rng;
        let alpha = crate::spec::replay::solve_alpha(2.7, 15) as f32;
        let mut rng = Rng::new(5);
        let mut geometric = move || {
            let mut a = 0;
            while a < 15 && rng.uniform() < alpha {
                a += 1;
            }
            a
        };
        let (spec_s, plain_s) = (0.030, 0.0092);
        let mut p = AdaptivePolicy::new(PolicyConfig::default());
        let steps = simulate(&mut p, 5000, spec_s, plain_s, &mut geometric);
        let steady = &steps[500..];
        let plain = steady.iter().filter(|s| s.0 == Decision::Plain).count();
        let frac = plain as f64 / steady.len() as f64;
        let speed = speed_vs_plain(&steps, plain_s);
        eprintln!("prose: {frac:.4} of the steady steps plain, {speed:.4} of plain speed");
        assert!(frac >= 0.95, "{frac:.3} of the steady steps plain");
        assert!(speed >= 0.98, "{speed:.3} of plain speed");

        // Always 1 accepted draft: the start takes two spec steps (after one, 1 is within
        // the confidence margin of a_min 1.81), then every probe fails, the bursts double up
        // to the cap: 63 (the probe-cost rule: (3.26 − 2) / 2 %), 80, 160, 320, 640, 640, 640.
        let mut p = AdaptivePolicy::new(PolicyConfig::default());
        let steps = simulate(&mut p, 3000, spec_s, plain_s, &mut || 1);
        let spec = steps.iter().filter(|s| s.0 == Decision::Spec).count();
        assert_eq!(spec, 9, "spec steps in 3000");
        assert_eq!(p.burst_len(), 640);
        assert!(speed_vs_plain(&steps, plain_s) >= 0.995);
    }

    /// The code profile on the same costs: 7 of 15 drafts accepted per step pays (8 tokens
    /// per 30 ms): after the calibration step, every step speculates.
    #[test]
    fn code_profile_speculates() {
        let (spec_s, plain_s) = (0.030, 0.0092);
        let mut p = AdaptivePolicy::new(PolicyConfig::default());
        let steps = simulate(&mut p, 500, spec_s, plain_s, &mut || 7);
        assert_eq!(steps[0].0, Decision::Plain, "calibration");
        assert!(steps[1..].iter().all(|s| s.0 == Decision::Spec));
        assert!(speed_vs_plain(&steps, plain_s) > 2.4);
    }

    /// Failed probes in a row double the burst up to `max_burst`; speculation that holds for
    /// `SUSTAINED` steps after a probe resets it, a lucky probe does not.
    #[test]
    fn backoff_doubles_after_failed_probes_and_resets_when_speculation_holds() {
        let mut p = AdaptivePolicy::new(PolicyConfig {
            ratio: Ratio::Fixed(3.0),
            ar_burst: 5,
            max_burst: 30,
            // The seed's burst rule: single poor steps below decide.
            confidence: 0.0,
            long_alpha: 0.0,
            ..PolicyConfig::default()
        });
        // a_min = 1.6. The start fails: a burst of 5; then every probe fails.
        let mut bursts = Vec::new();
        for _ in 0..6 {
            assert_eq!(p.decide().decision, Decision::Spec);
            p.observe_spec(0, 0.03);
            bursts.push(p.burst_len());
            let len = p.burst_len();
            let d = drive(&mut p, len, 0.03, 0.01, 0);
            assert!(d.iter().all(|&x| x == Decision::Plain));
        }
        assert_eq!(bursts, vec![5, 10, 20, 30, 30, 30]);
        assert_eq!(p.failed_probes(), 5);
        // A lucky probe (EMA 0 → 2.0) then one poor step (2.0 → 1.4 < 1.6): still backed off.
        assert_eq!(p.decide().reason, Reason::Probe);
        p.observe_spec(4, 0.03);
        assert_eq!(p.decide().reason, Reason::AboveBreakEven);
        p.observe_spec(0, 0.03);
        assert_eq!((p.failed_probes(), p.burst_len()), (6, 30));
        drive(&mut p, 30, 0.03, 0.01, 0);
        // The text turns predictable: speculation holds, then fades: back to 5.
        assert_eq!(p.decide().reason, Reason::Probe);
        p.observe_spec(6, 0.03);
        let d = drive(&mut p, SUSTAINED, 0.03, 0.01, 3);
        assert!(d.iter().all(|&x| x == Decision::Spec));
        // EMA 3.17 → 2.22 → 1.55: the second poor step starts a burst, of 5 again.
        let d = drive(&mut p, 2, 0.03, 0.01, 0);
        assert_eq!(d, vec![Decision::Spec, Decision::Spec]);
        assert_eq!((p.failed_probes(), p.burst_len()), (0, 5));
        assert_eq!(p.decide().decision, Decision::Plain);
    }

    /// A live ratio prices the probe: a burst is long enough that the measured probe's loss
    /// over plain decoding is `probe_budget` of it (here (10 − 1) plain steps / 2 % = 450).
    #[test]
    fn measured_probe_cost_lengthens_the_burst() {
        let mut p = AdaptivePolicy::new(PolicyConfig::default());
        let d = simulate(&mut p, 2, 0.1, 0.01, &mut || 0);
        assert_eq!((d[0].0, d[1].0), (Decision::Plain, Decision::Spec));
        assert_eq!(p.burst_len(), 450);
        // The budget off: the seed's 40.
        let mut p = AdaptivePolicy::new(PolicyConfig {
            probe_budget: 0.0,
            ..PolicyConfig::default()
        });
        simulate(&mut p, 2, 0.1, 0.01, &mut || 0);
        assert_eq!(p.burst_len(), 40);
        // Probes keep their own time EMA (the switch cost they carry); the steady one sets
        // the ratio once it exists.
        let mut p = AdaptivePolicy::new(PolicyConfig {
            ratio: Ratio::Live { initial: 1.9 },
            ar_burst: 2,
            ..original()
        });
        p.observe_plain(0.01);
        p.decide();
        p.observe_spec(0, 0.02);
        drive(&mut p, 2, 0.02, 0.01, 0);
        assert_eq!(p.decide().reason, Reason::Probe);
        p.observe_spec(0, 0.05);
        assert!((p.ratio() - 2.0).abs() < 1e-9, "{}", p.ratio());
    }

    /// Tokens per second over plain decoding's of `n` tokens, averaged over `reps` seeded
    /// runs: chain rounds of `k` drafts, each surviving with probability `alpha(tokens so
    /// far)` given its predecessors did (the replay profiles' model).
    fn mean_speed(
        cfg: &PolicyConfig,
        (spec_s, plain_s, k): (f64, f64, usize),
        alpha: &dyn Fn(usize) -> f64,
        n: usize,
        reps: u64,
    ) -> f64 {
        use crate::util::rng::Rng;
        let mut sum = 0.0;
        for seed in 0..reps {
            let mut p = AdaptivePolicy::new(cfg.clone());
            let mut rng = Rng::new(100 + seed);
            let (mut secs, mut toks) = (0.0, 0usize);
            while toks < n {
                if p.decide().decision == Decision::Spec {
                    let al = alpha(toks) as f32;
                    let mut a = 0;
                    while a < k && rng.uniform() < al {
                        a += 1;
                    }
                    p.observe_chain(k, a, spec_s, spec_s, 0.8 * spec_s);
                    (secs, toks) = (secs + spec_s, toks + 1 + a);
                } else {
                    p.observe_plain(plain_s);
                    (secs, toks) = (secs + plain_s, toks + 1);
                }
            }
            sum += toks as f64 / secs * plain_s;
        }
        sum / reps as f64
    }

    /// Prose where speculation pays (hip on an H100, session 29: a chain round of 7 drafts
    /// 15.1 ms, a plain step 7.3 ms, the chain 1.17 × AR), where it loses (the 30 ms verify
    /// of `prose_on_a_costly_verify_stays_plain`), a drafter that never lands a draft, and
    /// 128-token phases of code and prose: the confidence margin keeps paying speculation on
    /// and still stops losing speculation.
    #[test]
    fn the_confidence_margin_keeps_paying_speculation_on() {
        use crate::spec::replay::solve_alpha;
        let (prose, code) = (solve_alpha(2.7, 7), solve_alpha(6.0, 7));
        let prose15 = solve_alpha(2.7, 15);
        let seed_rule = PolicyConfig {
            confidence: 0.0,
            long_alpha: 0.0,
            ..PolicyConfig::default()
        };
        // The margin alone (the long-run gate has its own test below).
        let ours = PolicyConfig {
            long_alpha: 0.0,
            ..PolicyConfig::default()
        };
        let always = PolicyConfig {
            ratio: Ratio::Disabled,
            ..PolicyConfig::default()
        };
        let hip = (0.0151, 0.0073, 7);
        let dear = (0.030, 0.0092, 15);
        let mixed = |t: usize| {
            if (t / 128).is_multiple_of(2) {
                code
            } else {
                prose
            }
        };
        let speeds = |costs, alpha: &dyn Fn(usize) -> f64| {
            [&seed_rule, &ours, &always].map(|c| mean_speed(c, costs, alpha, 4096, 12))
        };
        let pays = speeds(hip, &|_| prose);
        let loses = speeds(dear, &|_| prose15);
        let never = speeds(hip, &|_| 0.0);
        let phases = speeds(hip, &mixed);
        eprintln!(
            "seed rule / ours / always: prose that pays {pays:.3?}, prose that loses {loses:.3?}, no draft lands {never:.3?}, code/prose phases {phases:.3?}"
        );
        assert!(pays[2] > 1.25, "speculation pays here: {pays:?}");
        assert!(pays[0] < 1.1, "the seed's rule leaves most of it: {pays:?}");
        assert!(pays[1] > 1.15, "{pays:?}");
        assert!(loses[2] < 0.85 && loses[1] > 0.985, "{loses:?}");
        assert!(never[1] > 0.99, "{never:?}");
        assert!(phases[1] > phases[0] + 0.15, "{phases:?}");
        // At hip's costs one empty round is no evidence yet (the seed's rule burst there);
        // a second one is.
        let mut p = AdaptivePolicy::new(ours.clone());
        assert_eq!(p.decide().reason, Reason::Calibrate);
        p.observe_plain(hip.1);
        assert_eq!(p.decide().reason, Reason::Start);
        p.observe_chain(7, 0, hip.0, hip.0, 0.8 * hip.0);
        assert_eq!(p.decide().reason, Reason::BelowWithinMargin);
        p.observe_chain(7, 0, hip.0, hip.0, 0.8 * hip.0);
        assert_eq!(p.decide().decision, Decision::Plain);
    }

    /// The long-run acceptance EMA against the margin alone, at hip's costs unless noted:
    /// prose that pays and code/prose phases keep speculating through short dips; prose that
    /// loses (the costly verify), a drafter that never lands a draft, and code followed by
    /// a drafter that stops landing drafts still go plain; acceptance just under break-even
    /// costs little.
    #[test]
    fn the_long_run_acceptance_keeps_paying_speculation_on() {
        use crate::spec::replay::solve_alpha;
        let (prose, code) = (solve_alpha(2.7, 7), solve_alpha(6.0, 7));
        let prose15 = solve_alpha(2.7, 15);
        let under = solve_alpha(1.6, 7); // 0.6 drafts a round: under hip's break-even (0.86)
        let margin_only = PolicyConfig {
            long_alpha: 0.0,
            ..PolicyConfig::default()
        };
        let ours = PolicyConfig::default();
        let always = PolicyConfig {
            ratio: Ratio::Disabled,
            ..PolicyConfig::default()
        };
        let hip = (0.0151, 0.0073, 7);
        let dear = (0.030, 0.0092, 15);
        let speeds = |costs, alpha: &dyn Fn(usize) -> f64| {
            [&margin_only, &ours, &always].map(|c| mean_speed(c, costs, alpha, 4096, 12))
        };
        let phase = |a: f64, b: f64, len: usize| {
            move |t: usize| if (t / len).is_multiple_of(2) { a } else { b }
        };
        let pays = speeds(hip, &|_| prose);
        let phases = speeds(hip, &phase(code, prose, 128));
        let loses = speeds(dear, &|_| prose15);
        let never = speeds(hip, &|_| 0.0);
        let stops = speeds(hip, &|t| if t < 1024 { code } else { 0.0 });
        let near = speeds(hip, &phase(code, under, 128));
        eprintln!(
            "margin only / with the long run / always: prose that pays {pays:.3?}, code/prose \
             phases {phases:.3?}, prose that loses {loses:.3?}, no draft lands {never:.3?}, \
             code then none {stops:.3?}, code/under break-even phases {near:.3?}"
        );
        assert!(pays[1] > pays[0] + 0.07 && pays[1] > 1.25, "{pays:?}");
        assert!(phases[1] > phases[0] + 0.07, "{phases:?}");
        assert!(loses[1] > 0.98, "{loses:?}");
        assert!(never[1] > 0.99, "{never:?}");
        assert!(
            stops[1] > stops[0] - 0.01 && stops[1] > stops[2] + 0.2,
            "{stops:?}"
        );
        assert!(near[1] > near[0] - 0.03, "{near:?}");
    }
}
