//! Speculative decoding on the hybrid target: a drafter proposes a chain of tokens after the
//! last emitted token (the *root*), the target verifies `[root, d_1, …]` in one forward, the
//! longest prefix that matches the target's own greedy tokens is accepted plus one bonus token,
//! and the hybrid state is rolled back exactly to "after root + accepted drafts".
//!
//! - [`Drafter`]: the interface a drafter (DFlash, DSpark, DFlash2, test drafters) implements.
//! - [`chain`]: one chain round (draft → verify → accept → rollback → commit features) and the
//!   rollback strategies.
//! - [`generate`]: the greedy generation loop (`off` / `chain` / `adaptive`) with per-step stats.
//! - [`pending`]: plain steps' rows stashed and committed to the drafter once per burst.
//! - [`sample`]: temperature / top-p sampling and the speculative-sampling accept rule.
//! - [`dflash`]: the DFlash / DSpark drafter ([`crate::model::draft`]) behind [`Drafter`].
//! - [`dflash2`]: the DFlash2 drafter (dynamic convs, candidate selector) behind [`Drafter`].
//! - [`replay`]: the benchmark-only replay drafter (acceptance profiles on random models).
//! - [`tree`]: DDTree speculation (best-first draft tree, one verify with an ancestor mask).
//! - [`testing`]: drafters for tests only (injected continuations, random garbage).
//!
//! Background: `shared/notes/speculation.md` §1–§4.

pub mod chain;
pub mod confidence;
pub mod dflash;
pub mod dflash2;
pub mod generate;
pub mod pending;
pub mod replay;
pub mod sample;
pub mod testing;
pub mod tree;

pub use chain::{Accept, ChainRound, Rollback, RollbackMode, chain_round, chain_round_with};
pub use generate::{
    SpecConfig, SpecMode, SpecOutput, StepKind, StepStats, TimeSplit, generate_spec, prefill,
};
pub use sample::Sampling;

use crate::backend::{Backend, WeightsId};
use crate::model::{ModelError, Qwen35};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SpecError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("drafter {name}: {msg}")]
    Drafter { name: String, msg: String },
    #[error("speculation: {0}")]
    Unsupported(String),
    #[error("speculation: {0}")]
    Invalid(String),
}

impl From<crate::backend::BackendError> for SpecError {
    fn from(e: crate::backend::BackendError) -> Self {
        SpecError::Model(e.into())
    }
}

/// Target features of consecutive committed rows: for each captured layer, the residual
/// stream after that layer (`hidden.{layer}` of [`crate::model::qwen35::GraphOptions`]),
/// row-major `[rows, width]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Features {
    /// Position of the first row in the sequence.
    pub start: usize,
    pub rows: usize,
    /// Hidden size of the target.
    pub width: usize,
    /// `(layer, [rows, width])`, in the order the drafter declared its layers.
    pub layers: Vec<(usize, Vec<f32>)>,
}

impl Features {
    /// Takes the captured layers of a step output over `rows` rows starting at `start`,
    /// ordered like `layers`.
    pub fn from_step(
        hidden: Vec<(usize, Vec<f32>)>,
        layers: &[usize],
        start: usize,
        rows: usize,
        width: usize,
    ) -> Result<Features, SpecError> {
        let mut by_layer = hidden;
        let mut out = Vec::with_capacity(layers.len());
        for &l in layers {
            let i = by_layer
                .iter()
                .position(|(x, _)| *x == l)
                .ok_or_else(|| SpecError::Invalid(format!("target layer {l} was not captured")))?;
            let (_, data) = by_layer.swap_remove(i);
            if data.len() != rows * width {
                return Err(SpecError::Invalid(format!(
                    "captured layer {l} holds {} values, expected {rows}×{width}",
                    data.len()
                )));
            }
            out.push((l, data));
        }
        Ok(Features {
            start,
            rows,
            width,
            layers: out,
        })
    }

    /// The first `n` rows.
    pub fn prefix(&self, n: usize) -> Features {
        let n = n.min(self.rows);
        Features {
            start: self.start,
            rows: n,
            width: self.width,
            layers: self
                .layers
                .iter()
                .map(|(l, d)| (*l, d[..n * self.width].to_vec()))
                .collect(),
        }
    }

    /// Row `r` of layer slot `i` (in declaration order).
    pub fn row(&self, i: usize, r: usize) -> &[f32] {
        &self.layers[i].1[r * self.width..(r + 1) * self.width]
    }
}

/// What the loop asks of [`Drafter::propose`].
#[derive(Clone, Debug, PartialEq)]
pub struct DraftRequest {
    /// The last emitted token, not yet processed by the target.
    pub root: u32,
    /// Propose at most this many tokens.
    pub max: usize,
    /// How the target samples. Greedy: propose the drafter's best chain. T > 0: draw each
    /// token from the drafter's own distribution (same temperature / top-p) and return that
    /// distribution in [`Draft::probs`] (or propose deterministically and return None, which
    /// is lossless too but accepts less).
    pub sampling: Sampling,
}

/// One proposal: a chain of tokens that follow the root.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Draft {
    /// `d_1 … d_n` (n may be shorter than asked for: a chain truncated by confidence).
    pub tokens: Vec<u32>,
    /// The drafter's distribution `q_i` at each proposed position, row-major
    /// `[tokens.len(), vocab]`, for lossless speculative sampling (T > 0). Greedy
    /// speculation ignores it.
    pub probs: Option<Vec<f32>>,
}

impl Draft {
    pub fn greedy(tokens: Vec<u32>) -> Draft {
        Draft {
            tokens,
            probs: None,
        }
    }
}

/// What a drafter may use on each call besides its own state: the target's backend (a
/// drafter on the same device uploads its weights and states there and runs its graphs on
/// it), the target model and its uploaded weight set (DFlash shares the target's embedding
/// and LM head).
pub struct DraftEnv<'a> {
    pub backend: &'a mut dyn Backend,
    pub target: &'a Qwen35,
    pub target_weights: WeightsId,
}

/// A speculative drafter.
///
/// Protocol, for one sequence (the spec loop guarantees it):
/// 1. [`Drafter::reset`] once;
/// 2. [`Drafter::commit`] with every row the target commits, in order, with its features:
///    the prompt (possibly in chunks), then after every round the root and the accepted
///    drafts (`a + 1` rows), and the rows of a run of plain steps in one commit (made before
///    the next proposal, at the end of generation, or every
///    [`pending::MAX_PENDING_ROWS`] rows). `features.start` is the position of the first row;
///    whenever `propose` is called, the committed rows sum to the target's position. A
///    drafter's context must depend only on the rows committed, not on how they were split
///    into commits;
/// 3. [`Drafter::propose`] between commits, with the root: the last emitted token, which the
///    target has not processed yet (the previous round's bonus).
///
/// A drafter that runs on the target's backend gets it through [`DraftEnv`] on every call
/// (the session owns the backend borrow between calls).
pub trait Drafter {
    /// Short name for logs and JSON output. Test drafters say so in their name.
    fn name(&self) -> String;

    /// Target layers whose outputs the drafter consumes (`target_layer_ids`); the spec loop
    /// captures them on every target forward whose rows it commits. Empty: no features.
    fn feature_layers(&self) -> Vec<usize>;

    /// Most tokens one proposal can hold (block size − 1).
    fn max_draft(&self) -> usize;

    /// Drafter-specific diagnostics for JSON output (the DSpark confidence gate's counters and
    /// calibration); None when there are none.
    fn report(&self) -> Option<serde_json::Value> {
        None
    }

    /// Forgets the context: a new sequence starts.
    fn reset(&mut self, env: &mut DraftEnv<'_>) -> Result<(), SpecError>;

    /// Appends committed rows: `tokens[i]` was processed by the target at position
    /// `features.start + i` and `features` holds its captured rows.
    fn commit(
        &mut self,
        env: &mut DraftEnv<'_>,
        tokens: &[u32],
        features: &Features,
    ) -> Result<(), SpecError>;

    /// Proposes up to `req.max` tokens that follow `req.root`, given the committed context.
    fn propose(&mut self, env: &mut DraftEnv<'_>, req: &DraftRequest) -> Result<Draft, SpecError>;

    /// For tree speculation ([`tree`]): the drafter's `k` best candidates at each of up to
    /// `req.max` positions after the root, as (token, log-probability), best first (greedy
    /// `req.sampling`). Position i's first candidate is the chain `propose` gives. The
    /// default has no distribution to offer: the proposed chain with log-probability 0 (a
    /// tree that is that chain).
    fn propose_topk(
        &mut self,
        env: &mut DraftEnv<'_>,
        req: &DraftRequest,
        k: usize,
    ) -> Result<Vec<Vec<(u32, f32)>>, SpecError> {
        let _ = k;
        let d = self.propose(env, req)?;
        Ok(d.tokens.iter().map(|&t| vec![(t, 0.0)]).collect())
    }
}

/// The `k` best entries of a logits row as (index, log-softmax), best first (ties: lower
/// index first).
pub fn top_logprobs(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let lse = crate::util::log_sum_exp(row);
    let mut idx: Vec<u32> = (0..row.len() as u32).collect();
    let k = k.min(row.len());
    let by = |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
    if k < idx.len() && k > 0 {
        idx.select_nth_unstable_by(k - 1, by);
    }
    idx.truncate(k);
    idx.sort_by(by);
    idx.into_iter()
        .map(|i| (i, row[i as usize] - lse))
        .collect()
}

/// Builds the environment for a drafter call from a session.
pub(crate) fn env<'s, 'a>(s: &'s mut crate::model::Session<'a>) -> DraftEnv<'s> {
    let target = s.model();
    let target_weights = s.weights_id();
    DraftEnv {
        backend: s.backend(),
        target,
        target_weights,
    }
}
