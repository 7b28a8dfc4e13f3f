//! One sequence's drafter: its context K/V caches on a backend, the committed row count, and
//! compiled draft graphs cached by the number of appended rows.

use super::DFlash;
use super::graph::{DraftOut, state_decls};
use crate::backend::{Backend, ExecId, HostData, StatesId, WeightsId};
use crate::model::session::StepOutput;
use crate::model::{ModelError, Qwen35};
use std::collections::HashMap;

/// What one draft returns.
#[derive(Clone, Debug, Default)]
pub struct DraftOutput {
    /// Row-major `[B−1, vocab]`: row i predicts position `first + 1 + i`.
    pub logits: Vec<f32>,
    /// Argmax of each row: the proposals.
    pub tokens: Vec<u32>,
    /// DSpark: the backbone's logits before the Markov correction (`logits` are corrected).
    pub raw_logits: Vec<f32>,
    /// [`DraftOut::TopK`]: the `k` best values and indices of every row, `[B−1, k]`, and each
    /// row's log-softmax normaliser `[B−1]` (empty otherwise).
    pub topk_values: Vec<f32>,
    pub topk_indices: Vec<u32>,
    pub logsumexp: Vec<f32>,
    /// DSpark confidence per proposal, `sigmoid(w · [h_i ; W1[x_{i−1}]] + b)` (uncalibrated).
    pub confidence: Vec<f32>,
    /// The same before the sigmoid, `w · [h_i ; W1[x_{i−1}]] + b` (what calibration rescales).
    pub confidence_logit: Vec<f32>,
}

/// A [`DraftSession`] without its backend borrow (see [`DraftSession::into_parts`]).
pub struct DraftParts {
    weights: WeightsId,
    states: StatesId,
    store: crate::backend::WeightStore,
    vocab: usize,
    cap: usize,
    n_ctx: usize,
    /// Compiled draft graphs by (appended rows, extra outputs).
    execs: HashMap<(usize, DraftOut), ExecId>,
}

impl DraftParts {
    /// Context rows committed so far.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// The state set of the context caches (on the backend the parts belong to).
    pub fn states(&self) -> StatesId {
        self.states
    }
}

pub struct DraftSession<'a> {
    model: &'a DFlash,
    backend: &'a mut dyn Backend,
    weights: WeightsId,
    states: StatesId,
    store: crate::backend::WeightStore,
    vocab: usize,
    cap: usize,
    /// Context rows committed so far (cache rows `0 .. n_ctx`).
    n_ctx: usize,
    /// Compiled draft graphs by (appended rows, extra outputs).
    execs: HashMap<(usize, DraftOut), ExecId>,
}

impl<'a> DraftSession<'a> {
    /// Uploads the drafter's weights (with the target's embedding and lm_head) and allocates
    /// context caches for `cap` positions (context rows plus one block).
    pub fn new(
        model: &'a DFlash,
        target: &Qwen35,
        backend: &'a mut dyn Backend,
        cap: usize,
    ) -> Result<Self, ModelError> {
        let store = model.weights_with_target(target)?;
        let weights = backend.upload_weights(&store)?;
        let states = backend.alloc_states(&state_decls(&model.cfg, cap))?;
        Ok(DraftSession {
            model,
            backend,
            weights,
            states,
            store,
            vocab: target.cfg.vocab,
            cap,
            n_ctx: 0,
            execs: HashMap::new(),
        })
    }

    /// Context rows committed so far.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Forgets committed rows past `n` (after a rejected draft the caller re-appends the
    /// accepted rows' features); rows past `n` are overwritten by later appends.
    pub fn truncate(&mut self, n: usize) {
        self.n_ctx = self.n_ctx.min(n);
    }

    /// Moves the committed row count forward to `pos` without writing the rows in between:
    /// for a drafter whose every layer is windowed, rows that no future block can attend to
    /// (see [`super::FeatureRing::for_drafter`]). A no-op when `pos ≤ n_ctx`.
    pub fn skip_to(&mut self, pos: usize) {
        self.n_ctx = self.n_ctx.max(pos);
    }

    /// Appends the feature rows `feats` (`[tc, n_target_layers·H]`, row-major, the rows of the
    /// next committed positions) to the context, then drafts a block starting with `last` at
    /// position `n_ctx` (after the append): proposals for positions `n_ctx + 1 ..`.
    pub fn draft(&mut self, feats: &[f32], last: u32) -> Result<DraftOutput, ModelError> {
        self.draft_with(feats, last, true)
    }

    /// [`DraftSession::draft`]; with `logits: false` only the proposals and confidences come
    /// back (`logits` and `raw_logits` stay empty; see [`DFlash::draft_graph_with`]).
    pub fn draft_with(
        &mut self,
        feats: &[f32],
        last: u32,
        logits: bool,
    ) -> Result<DraftOutput, ModelError> {
        let out = if logits {
            DraftOut::Logits
        } else {
            DraftOut::Tokens
        };
        self.draft_out(feats, last, out)
    }

    /// [`DraftSession::draft`] with the extra outputs `out` ([`DraftOut::TopK`]: the rows'
    /// top-k and normalisers instead of the logits).
    pub fn draft_out(
        &mut self,
        feats: &[f32],
        last: u32,
        kind: DraftOut,
    ) -> Result<DraftOutput, ModelError> {
        let c = &self.model.cfg;
        let width = c.feature_width();
        if !feats.len().is_multiple_of(width) {
            return Err(ModelError::Config(format!(
                "draft: {} feature values are not whole rows of {width}",
                feats.len()
            )));
        }
        let tc = feats.len() / width;
        let bsz = c.block_size;
        let start = self.n_ctx + tc;
        if start + bsz > self.cap {
            return Err(ModelError::ContextFull {
                need: start + bsz,
                cap: self.cap,
            });
        }
        if last as usize >= self.vocab {
            return Err(ModelError::BadToken {
                id: last,
                vocab: self.vocab,
            });
        }
        // Where the backend prefers fixed widths, the usual appends (1 .. B rows: a round's
        // accepted rows) are padded to B rows with copies of the last one: same features and
        // cache row, so the same K/V written to it (every op on context rows is per row). One
        // graph instead of one per accepted length; longer appends (the prompt) stay exact.
        let w = if tc > 0 && tc < bsz && crate::backend::fixed_step_widths(&*self.backend) {
            bsz
        } else {
            tc
        };
        let exe = match self.execs.get(&(w, kind)) {
            Some(e) => *e,
            None => {
                let g = self.model.draft_graph_out(&self.store, w, self.cap, kind)?;
                let e = self.backend.compile(&g)?;
                self.execs.insert((w, kind), e);
                e
            }
        };
        let mut inputs: Vec<(&str, HostData)> = Vec::new();
        if tc > 0 {
            let mut cpos: Vec<i32> = (self.n_ctx..start).map(|p| p as i32).collect();
            let mut feat = feats.to_vec();
            if w > tc {
                cpos.resize(w, (start - 1) as i32);
                let last = feats[(tc - 1) * width..].to_vec();
                for _ in tc..w {
                    feat.extend_from_slice(&last);
                }
            }
            inputs.push(("feat", HostData::F32(feat)));
            inputs.push(("cpos", HostData::I32(cpos)));
            let zeros = vec![0.0f32; w * c.n_heads * c.head_dim];
            inputs.push(("cq", HostData::F32(zeros)));
        }
        let mut ids = vec![c.mask_token_id as i32; bsz];
        ids[0] = last as i32;
        inputs.push(("ids", HostData::I32(ids)));
        let pos = (start..start + bsz).map(|p| p as i32).collect();
        inputs.push(("pos", HostData::I32(pos)));
        let outs = self.backend.run(exe, self.weights, self.states, &inputs)?;
        self.n_ctx = start;
        let mut out = DraftOutput::default();
        let dspark = c.dspark.is_some();
        let mut markov_logits = Vec::new();
        let mut markov_tokens = Vec::new();
        let mut conf_logit = Vec::new();
        for (name, t) in outs {
            if name == "draft_logits" && !dspark {
                out.logits = t.to_f32()?;
            } else if name == "draft_tokens" && !dspark {
                out.tokens = t.to_i32().into_iter().map(|v| v as u32).collect();
            } else if name == "draft_logits" {
                out.raw_logits = t.to_f32()?;
            } else if name == "confidence_logit" {
                conf_logit = t.to_f32()?;
            } else if name.starts_with("markov_logits.") {
                markov_logits.extend(t.to_f32()?);
            } else if name == "topk_values" {
                out.topk_values = t.to_f32()?;
            } else if name == "topk_indices" {
                out.topk_indices = t.to_i32().into_iter().map(|v| v as u32).collect();
            } else if name == "logsumexp" {
                out.logsumexp = t.to_f32()?;
            } else if name.starts_with("markov_token.") {
                markov_tokens.extend(t.to_i32().into_iter().map(|v| v as u32));
            }
        }
        if dspark {
            // Outputs come back in declaration order: position 0, 1, …
            out.logits = markov_logits;
            out.tokens = markov_tokens;
            if !conf_logit.is_empty() {
                let b = self.confidence_bias()?;
                out.confidence_logit = conf_logit.iter().map(|z| z + b).collect();
                out.confidence = out
                    .confidence_logit
                    .iter()
                    .map(|z| 1.0 / (1.0 + (-z).exp()))
                    .collect();
            }
        }
        Ok(out)
    }

    /// The confidence head's bias (a scalar; 0 when the file has none).
    fn confidence_bias(&self) -> Result<f32, ModelError> {
        let n = super::names::CONFIDENCE_B;
        let t = self.store.get(n).ok_or_else(|| ModelError::Weight {
            name: n.into(),
            msg: "missing from the drafter".into(),
        })?;
        Ok(t.to_f32()?.first().copied().unwrap_or(0.0))
    }

    /// Rows the context caches hold (context rows plus one block).
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Grows the context caches to at least `cap` rows, keeping the committed rows (a no-op
    /// when they are already that large). The compiled graphs depend on the capacity and are
    /// rebuilt on the next draft.
    pub fn reserve(&mut self, cap: usize) -> Result<(), ModelError> {
        if cap <= self.cap {
            return Ok(());
        }
        let c = &self.model.cfg;
        let states = self.backend.alloc_states(&state_decls(c, cap))?;
        let row = c.n_kv_heads * c.head_dim;
        for i in 0..c.n_layers {
            for name in [super::names::k_cache(i), super::names::v_cache(i)] {
                let mut data = self.backend.read_state(self.states, &name)?;
                data.truncate(self.n_ctx * row);
                data.resize(cap * row, 0.0);
                self.backend.write_state(states, &name, &data)?;
            }
        }
        self.backend.free_states(self.states)?;
        self.states = states;
        self.cap = cap;
        self.execs.clear();
        Ok(())
    }

    /// Releases the backend borrow, keeping the session's resources (weights, caches, compiled
    /// graphs, committed rows) for [`DraftSession::from_parts`]: a drafter that gets the
    /// backend per call (the spec loop's `DraftEnv`) holds its session this way between calls.
    pub fn into_parts(self) -> DraftParts {
        DraftParts {
            weights: self.weights,
            states: self.states,
            store: self.store,
            vocab: self.vocab,
            cap: self.cap,
            n_ctx: self.n_ctx,
            execs: self.execs,
        }
    }

    /// Resumes a session from [`DraftSession::into_parts`]. `model` and `backend` must be the
    /// ones the parts were created with.
    pub fn from_parts(
        model: &'a DFlash,
        backend: &'a mut dyn Backend,
        parts: DraftParts,
    ) -> DraftSession<'a> {
        DraftSession {
            model,
            backend,
            weights: parts.weights,
            states: parts.states,
            store: parts.store,
            vocab: parts.vocab,
            cap: parts.cap,
            n_ctx: parts.n_ctx,
            execs: parts.execs,
        }
    }

    /// Frees the caches.
    pub fn free(self) -> Result<(), ModelError> {
        Ok(self.backend.free_states(self.states)?)
    }
}

/// The drafter's context rows from a target step that captured its layers: per row, the
/// captured outputs of `target_layer_ids` concatenated in that order.
///
/// The feature of layer `lid` is the raw residual after the layer (HF `hidden_states[lid+1]`);
/// for the target's last layer HF's state is the final-normed one, so that layer is normed
/// here with the target's `output_norm` to match what the drafter was trained on.
pub fn context_features(
    drafter: &DFlash,
    target: &Qwen35,
    step: &StepOutput,
    rows: usize,
) -> Result<Vec<f32>, ModelError> {
    let h = target.cfg.hidden;
    let ids = &drafter.cfg.target_layer_ids;
    let mut per_layer = Vec::with_capacity(ids.len());
    for &lid in ids {
        let (_, v) = step.hidden.iter().find(|(l, _)| *l == lid).ok_or_else(|| {
            ModelError::Config(format!("draft: target layer {lid} was not captured"))
        })?;
        if v.len() != rows * h {
            return Err(ModelError::Config(format!(
                "draft: captured layer {lid} holds {} values, expected {rows} × {h}",
                v.len()
            )));
        }
        let v = if lid + 1 == target.cfg.n_layers {
            final_norm(target, v)?
        } else {
            v.clone()
        };
        per_layer.push(v);
    }
    let mut out = Vec::with_capacity(rows * h * ids.len());
    for r in 0..rows {
        for v in &per_layer {
            out.extend_from_slice(&v[r * h..(r + 1) * h]);
        }
    }
    Ok(out)
}

/// The target's final RMSNorm on host rows (HF's `hidden_states[L]`).
fn final_norm(target: &Qwen35, x: &[f32]) -> Result<Vec<f32>, ModelError> {
    let name = crate::model::qwen35::names::OUTPUT_NORM;
    let w = target
        .weights
        .get(name)
        .ok_or_else(|| ModelError::Weight {
            name: name.into(),
            msg: "missing from the target".into(),
        })?
        .to_f32()?;
    let h = w.len();
    let eps = target.cfg.eps;
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(h) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / h as f32;
        let r = 1.0 / (ms + eps).sqrt();
        out.extend(row.iter().zip(&w).map(|(v, w)| v * r * w));
    }
    Ok(out)
}
