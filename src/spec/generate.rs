//! Greedy generation with speculation: `off` (plain steps that still feed the drafter),
//! `chain` (a chain round every step) and `adaptive` (the single-request policy of
//! [`crate::sched::policy`] chooses per step).

use super::chain::{Accept, ChainRound, Rollback, RollbackMode, chain_round_with};
use super::pending::{MAX_PENDING_ROWS, PendingCommits};
use super::sample::{Sampling, draw};
use super::{Drafter, Features, SpecError, env};
use crate::model::Session;
use crate::model::qwen35::{GraphOptions, LogitRows};
use crate::sched::{AdaptivePolicy, Decision, PolicyConfig, PolicyEvent};
use crate::util::rng::Rng;
use std::time::Instant;

#[derive(Clone, Debug, PartialEq, Default)]
pub enum SpecMode {
    /// Plain decoding (features still captured and committed to the drafter, in batches).
    Off,
    /// A chain round every step.
    #[default]
    Chain,
    /// The adaptive policy decides per step.
    Adaptive(PolicyConfig),
    /// A DDTree round every step ([`super::tree`]), with at most `budget` draft nodes
    /// (greedy, or lossless tree sampling at T > 0).
    Tree { budget: usize },
}

impl SpecMode {
    pub fn name(&self) -> &'static str {
        match self {
            SpecMode::Off => "off",
            SpecMode::Chain => "chain",
            SpecMode::Adaptive(_) => "adaptive",
            SpecMode::Tree { .. } => "tree",
        }
    }
}

#[derive(Clone, Debug)]
pub struct SpecConfig {
    /// Tokens to generate.
    pub n: usize,
    /// Prefill chunk size.
    pub chunk: usize,
    /// Stop after emitting this token.
    pub stop: Option<u32>,
    pub mode: SpecMode,
    /// Drafts per round at most (also limited by the drafter's block).
    pub max_draft: usize,
    pub rollback: RollbackMode,
    /// Greedy (the default) or temperature / top-p; T > 0 uses speculative sampling.
    pub sampling: Sampling,
    /// Seed of the target-side sampler.
    pub seed: u64,
}

impl Default for SpecConfig {
    fn default() -> Self {
        SpecConfig {
            n: 32,
            chunk: 512,
            stop: None,
            mode: SpecMode::Chain,
            max_draft: usize::MAX,
            rollback: RollbackMode::default(),
            sampling: Sampling::greedy(),
            seed: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// A chain round (draft, verify, rollback).
    Spec,
    /// One target row with feature capture, no drafter call (its row is committed to the
    /// drafter with the rest of its burst, see [`super::pending`]).
    Plain,
}

/// One decode step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepStats {
    pub kind: StepKind,
    pub drafted: usize,
    pub accepted: usize,
    /// Tokens this step emitted (after a stop token or the budget, possibly fewer than
    /// accepted + 1).
    pub emitted: usize,
    pub draft_s: f64,
    /// A spec step's verify forward (0 for a plain step).
    pub verify_s: f64,
    pub rollback_s: f64,
    pub commit_s: f64,
    /// A plain step's own work: the target forward of its row and the stash of its features
    /// (0 for a spec step). A stash committed at its cap is in `commit_s`.
    pub plain_s: f64,
    pub total_s: f64,
    /// The policy's decision for this step (adaptive mode).
    pub policy: Option<PolicyEvent>,
}

/// Where decode time went (seconds summed over steps, [`SpecOutput::time_split`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TimeSplit {
    pub draft: f64,
    /// Spec steps' verify forwards.
    pub verify: f64,
    pub rollback: f64,
    pub commit: f64,
    /// Plain steps (target forward + feature stash), apart from verify: a plain step should
    /// cost what a plain AR step does.
    pub plain: f64,
}

impl TimeSplit {
    pub fn total(&self) -> f64 {
        self.draft + self.verify + self.rollback + self.commit + self.plain
    }
}

/// The result of [`generate_spec`].
#[derive(Clone, Debug, Default)]
pub struct SpecOutput {
    pub tokens: Vec<u32>,
    pub steps: Vec<StepStats>,
    pub prefill_s: f64,
    /// From the first token to the last.
    pub decode_s: f64,
}

impl SpecOutput {
    /// Accepted drafts per spec step (plain steps excluded).
    pub fn accepted_per_step(&self) -> Vec<usize> {
        self.steps
            .iter()
            .filter(|s| s.kind == StepKind::Spec)
            .map(|s| s.accepted)
            .collect()
    }

    /// Mean tokens emitted per spec step (accepted + bonus), or 0 without spec steps.
    pub fn mean_accept_len(&self) -> f64 {
        let a = self.accepted_per_step();
        if a.is_empty() {
            0.0
        } else {
            a.iter().map(|&x| x as f64 + 1.0).sum::<f64>() / a.len() as f64
        }
    }

    /// Seconds per part over all steps.
    pub fn time_split(&self) -> TimeSplit {
        self.steps
            .iter()
            .fold(TimeSplit::default(), |a, s| TimeSplit {
                draft: a.draft + s.draft_s,
                verify: a.verify + s.verify_s,
                rollback: a.rollback + s.rollback_s,
                commit: a.commit + s.commit_s,
                plain: a.plain + s.plain_s,
            })
    }

    pub fn spec_steps(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| s.kind == StepKind::Spec)
            .count()
    }

    pub fn plain_steps(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| s.kind == StepKind::Plain)
            .count()
    }
}

/// Options of a step whose features feed the drafter; the logits are read back only to
/// sample from them (`sampling`), greedy steps read the argmax.
fn capture_opts(layers: &[usize], logits: LogitRows, sampling: bool) -> GraphOptions {
    GraphOptions {
        logits,
        argmax: true,
        capture: layers.to_vec(),
        read_logits: sampling,
    }
}

/// The next token from a step's last logits row: its argmax when greedy, else a draw.
fn pick(out: &crate::model::session::StepOutput, sampler: &mut Option<(Sampling, Rng)>) -> u32 {
    match sampler {
        None => out.argmax[out.argmax.len() - 1],
        Some((sampling, rng)) => {
            let vocab = out.logits.len() / out.rows;
            draw(&sampling.probs(&out.logits[(out.rows - 1) * vocab..]), rng)
        }
    }
}

/// Resets the drafter and prefills `prompt` in chunks of at most `chunk` tokens, committing
/// every row and its features to the drafter. Returns the first generated token (the argmax of
/// the last prompt row): the root of the first round.
pub fn prefill(
    s: &mut Session<'_>,
    drafter: &mut dyn Drafter,
    prompt: &[u32],
    chunk: usize,
) -> Result<u32, SpecError> {
    prefill_with(s, drafter, prompt, chunk, &mut None)
}

fn prefill_with(
    s: &mut Session<'_>,
    drafter: &mut dyn Drafter,
    prompt: &[u32],
    chunk: usize,
    sampler: &mut Option<(Sampling, Rng)>,
) -> Result<u32, SpecError> {
    if prompt.is_empty() {
        return Err(SpecError::Invalid("the prompt is empty".into()));
    }
    drafter.reset(&mut env(s))?;
    let layers = drafter.feature_layers();
    let width = s.model().cfg.hidden;
    let opts = capture_opts(&layers, LogitRows::Last, sampler.is_some());
    let mut last = 0;
    for piece in prompt.chunks(chunk.max(1)) {
        let start = s.pos();
        let out = s.forward(piece, &opts)?;
        last = pick(&out, sampler);
        let f = Features::from_step(out.hidden, &layers, start, piece.len(), width)?;
        drafter.commit(&mut env(s), piece, &f)?;
    }
    Ok(last)
}

/// One plain step: the target processes `root` with its features captured; returns the next
/// token. The row is stashed in `pending`, not committed: the drafter gets a whole burst's rows
/// in one commit ([`super::pending`]) when its context is next needed. Should the stash reach
/// [`MAX_PENDING_ROWS`] it is committed here; that time is in the step's `commit_s` and
/// returned separately so the caller can charge it to the next spec step (see
/// [`generate_spec`]).
fn plain_step(
    s: &mut Session<'_>,
    drafter: &mut dyn Drafter,
    pending: &mut PendingCommits,
    layers: &[usize],
    root: u32,
    sampler: &mut Option<(Sampling, Rng)>,
) -> Result<(u32, StepStats, f64), SpecError> {
    let width = s.model().cfg.hidden;
    let start = s.pos();
    let t0 = Instant::now();
    let out = s.forward(
        &[root],
        &capture_opts(layers, LogitRows::Last, sampler.is_some()),
    )?;
    let next = pick(&out, sampler);
    let f = Features::from_step(out.hidden, layers, start, 1, width)?;
    pending.push(&[root], f)?;
    let t2 = Instant::now();
    if pending.rows() >= MAX_PENDING_ROWS {
        pending.flush(s, drafter)?;
    }
    let t3 = Instant::now();
    let stats = StepStats {
        kind: StepKind::Plain,
        drafted: 0,
        accepted: 0,
        emitted: 1,
        draft_s: 0.0,
        verify_s: 0.0,
        rollback_s: 0.0,
        commit_s: (t3 - t2).as_secs_f64(),
        plain_s: (t2 - t0).as_secs_f64(),
        total_s: (t3 - t0).as_secs_f64(),
        policy: None,
    };
    Ok((next, stats, (t3 - t2).as_secs_f64()))
}

/// Generation of up to `cfg.n` tokens after `prompt` with the drafter. Greedy output equals
/// [`Session::generate_greedy`]'s token for token (speculation is lossless); sampled output
/// (T > 0) follows the distribution of plain sampling. Needs a
/// context of `prompt.len() + n − 1` positions, like plain decoding. `on_token` is called per
/// emitted token, `on_step` per decode step.
pub fn generate_spec(
    s: &mut Session<'_>,
    drafter: &mut dyn Drafter,
    prompt: &[u32],
    cfg: &SpecConfig,
    mut on_token: impl FnMut(u32),
    mut on_step: impl FnMut(&StepStats),
) -> Result<SpecOutput, SpecError> {
    let mut res = SpecOutput::default();
    if prompt.is_empty() || cfg.n == 0 {
        return Ok(res);
    }
    let mut rollback = Rollback::new(cfg.rollback)?;
    let tree_budget = match cfg.mode {
        SpecMode::Tree { budget } => Some(budget.max(1)),
        _ => None,
    };
    match tree_budget {
        // Every tree row needs a per-row state (and the root one more); trees stop at the
        // backend's row tiles.
        Some(b) => s.reserve_tree_rows(super::tree::session_budget(s, b) + 1)?,
        None => rollback.prepare(s, cfg.max_draft.min(drafter.max_draft()).saturating_add(1))?,
    }
    let mut policy = match &cfg.mode {
        // `DELTASPEC_WIDTH_TILES=0`: the width model without the backend's row tiles (A/B).
        SpecMode::Adaptive(p) => Some(AdaptivePolicy::with_row_tiles(
            p.clone(),
            match std::env::var("DELTASPEC_WIDTH_TILES").as_deref() {
                Ok("0") => Vec::new(),
                _ => s.step_row_tiles(),
            },
        )),
        _ => None,
    };
    let layers = drafter.feature_layers();
    let mut sampler = (!cfg.sampling.is_greedy()).then(|| (cfg.sampling, Rng::new(cfg.seed)));

    let t0 = Instant::now();
    let mut root = prefill_with(s, drafter, prompt, cfg.chunk, &mut sampler)?;
    let t_first = Instant::now();
    res.prefill_s = (t_first - t0).as_secs_f64();
    res.tokens.push(root);
    on_token(root);

    // Plain steps' rows not yet handed to the drafter, and the time spent committing stashed
    // rows mid-burst (a stash at its cap) not yet charged to a spec step.
    let mut pending = PendingCommits::new();
    let mut owed_commit_s = 0.0;
    let result = (|| -> Result<(), SpecError> {
        while res.tokens.len() < cfg.n && Some(root) != cfg.stop {
            let left = cfg.n - res.tokens.len();
            // Never draft past the budget: a round emits at most drafts + 1 tokens.
            let mut max = cfg.max_draft.min(left - 1);
            let mut ev = policy.as_mut().map(|p| p.decide());
            // Adaptive chain rounds verify the width that pays best (sched::width), except
            // where verifies run padded to a fixed width (wgpu): fewer drafts save nothing
            // there.
            if let (Some(p), Some(e), None) = (&policy, &mut ev, tree_budget)
                && e.decision == Decision::Spec
                && !s.fixed_verify_width()
            {
                max = p.chain_len(max.min(drafter.max_draft()));
                e.drafts = Some(max);
            }
            let spec = match (&cfg.mode, &ev) {
                (SpecMode::Off, _) => false,
                (_, Some(e)) => e.decision == Decision::Spec,
                _ => true,
            };
            // A step that builds a graph is no timing sample for the policy.
            let builds = crate::backend::graph_builds();
            let mut stats = if spec && max > 0 {
                let t = Instant::now();
                // The drafter needs the rows of the plain steps before it proposes: one commit
                // for the whole burst.
                pending.flush(s, drafter)?;
                let flush_s = t.elapsed().as_secs_f64();
                let mut acc = match &mut sampler {
                    None => Accept::Greedy,
                    Some((sampling, rng)) => Accept::Sample {
                        sampling: *sampling,
                        rng,
                    },
                };
                let r: ChainRound = match tree_budget {
                    Some(budget) => {
                        super::tree::tree_round_with(s, drafter, root, max, budget, &mut acc)?
                    }
                    None => chain_round_with(s, drafter, &mut rollback, root, max, &mut acc)?,
                };
                let total = t.elapsed().as_secs_f64();
                // The burst's deferred commit is charged to this spec step, not spread over the
                // plain steps: it is work done only because the loop speculates again (a run
                // that stayed plain would never need the drafter's context), and it is paid
                // once per switch from plain to spec, which is what this step is. The plain
                // steps' EMA then measures what a plain step costs (target + feature capture),
                // and the spec EMA decays the switch cost away while speculation stays on.
                // Host-only for the DFlash / DSpark / DFlash2 drafters (their K/V append runs
                // in `propose`, which was always part of the spec step).
                if let Some(p) = policy.as_mut() {
                    if crate::backend::graph_builds() != builds {
                        p.observe_chain_untimed(r.drafted, r.accepted);
                    } else {
                        // A stash committed mid-burst at its cap (outside this step's time) too.
                        let step_s = r.draft_s + r.verify_s + r.rollback_s + r.commit_s;
                        p.observe_chain(
                            r.drafted,
                            r.accepted,
                            total + owed_commit_s,
                            step_s,
                            r.verify_s,
                        );
                    }
                }
                owed_commit_s = 0.0;
                root = r.bonus();
                let mut emitted = 0;
                for &tok in &r.emitted {
                    if res.tokens.len() >= cfg.n {
                        break;
                    }
                    res.tokens.push(tok);
                    on_token(tok);
                    emitted += 1;
                    if Some(tok) == cfg.stop {
                        root = tok;
                        break;
                    }
                }
                StepStats {
                    kind: StepKind::Spec,
                    drafted: r.drafted,
                    accepted: r.accepted,
                    emitted,
                    draft_s: r.draft_s,
                    verify_s: r.verify_s,
                    rollback_s: r.rollback_s,
                    commit_s: r.commit_s + flush_s,
                    plain_s: 0.0,
                    total_s: total,
                    policy: None,
                }
            } else {
                let (next, st, flushed_s) =
                    plain_step(s, drafter, &mut pending, &layers, root, &mut sampler)?;
                owed_commit_s += flushed_s;
                // A plain step forced by the budget (no room to draft) is not a policy sample.
                if let (Some(p), Some(e)) = (policy.as_mut(), &ev)
                    && e.decision == Decision::Plain
                    && crate::backend::graph_builds() == builds
                {
                    p.observe_plain(st.total_s - flushed_s);
                }
                root = next;
                res.tokens.push(next);
                on_token(next);
                st
            };
            stats.policy = ev;
            on_step(&stats);
            res.steps.push(stats);
        }
        // The drafter's context is whole on return (the protocol of [`Drafter`]), e.g. for a
        // caller that continues the sequence.
        pending.flush(s, drafter)
    })();
    res.decode_s = t_first.elapsed().as_secs_f64();
    rollback.release(s)?;
    result?;
    Ok(res)
}
