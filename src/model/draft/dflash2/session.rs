//! Several sequences' DFlash2 drafters on one backend: per-slot context caches and committed row
//! counts, and compiled batched draft graphs cached by their padded context-row count.

use super::graph::{BatchShape, DraftExtras, draft_graph, k_cache, state_decls, v_cache};
use crate::backend::{Backend, ExecId, HostData, StatesId, WeightStore, WeightsId};
use crate::model::draft::DFlash;
use crate::model::{ModelError, Qwen35};
use std::collections::HashMap;

/// One sequence's part of a batched draft.
#[derive(Clone, Copy, Debug)]
pub struct SeqDraft<'f> {
    /// The sequence's new context rows (`[tc, n_target_layers·H]`, row-major, the features of
    /// its next committed positions; may be empty).
    pub feats: &'f [f32],
    /// The last committed token: the block's anchor, at the position after the new rows.
    pub last: u32,
}

/// One sequence's proposals.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeqOutput {
    /// The selector's walk: `B−1` proposals.
    pub tokens: Vec<u32>,
    /// `[B−1, k]`: each position's candidate scores given the previous proposal.
    pub scores: Vec<f32>,
    /// `[B−1, k]`: the candidates (top-k of the lm_head, best first).
    pub cand: Vec<u32>,
    /// `[B−1, vocab]` lm_head logits (only when asked for).
    pub logits: Vec<f32>,
    /// The selector's inputs (only when asked for, [`DraftExtras::walk_parts`]).
    pub walk: Option<WalkParts>,
}

/// One sequence's selector inputs: enough to score any predecessor on the host
/// (drafters.md §4.3: `score(l, prev, c) = unary[l,c] + Σ_r pred[prev][r] · hp_l[r] ·
/// succ[cand[l,c]][r]`, with `prev` the seed at l = 0, else a candidate of l − 1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WalkParts {
    /// `[B−1, k]`.
    pub unary: Vec<f32>,
    /// `[B−1, rank]`.
    pub hp: Vec<f32>,
    /// `[B−1, k, rank]`: the successor and predecessor codebook rows of each candidate.
    pub succ: Vec<f32>,
    pub pred: Vec<f32>,
    /// `[rank]`: the seed's predecessor row.
    pub seed_pred: Vec<f32>,
}

/// A [`BatchSession`] without its backend borrow.
pub struct BatchParts {
    weights: WeightsId,
    states: StatesId,
    store: WeightStore,
    vocab: usize,
    cap: usize,
    /// Committed context rows per slot.
    n_ctx: Vec<usize>,
    execs: HashMap<(usize, DraftExtras), ExecId>,
}

impl BatchParts {
    pub fn n_ctx(&self, slot: usize) -> usize {
        self.n_ctx.get(slot).copied().unwrap_or(0)
    }
    pub fn states(&self) -> StatesId {
        self.states
    }
}

pub struct BatchSession<'a> {
    model: &'a DFlash,
    backend: &'a mut dyn Backend,
    p: BatchParts,
}

/// Whether a round's append pads to the block on fixed-width backends (see
/// [`BatchSession::draft`]); `DELTASPEC_DFLASH2_PAD=0` turns it off. Session 29 (wgpu, H100,
/// adaptive on prose, 256 tokens): 1.06 × AR with it, 0.72 × without, whose timed run
/// compiled append shapes for 0.9 s. (Session 28's wgpu adaptive drift, first blamed on it,
/// was the target's padded verifies.)
fn pad_to_block() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("DELTASPEC_DFLASH2_PAD").map_or(true, |v| v != "0"))
}

/// Padded context rows per sequence for `max` new rows: a power of two, so that a few graphs
/// cover every round.
fn bucket(max: usize) -> usize {
    if max == 0 { 0 } else { max.next_power_of_two() }
}

impl<'a> BatchSession<'a> {
    /// Uploads the drafter's weights (with the target's embedding and lm_head) and allocates
    /// context caches of `cap` rows (context plus one block) for `seqs` slots.
    pub fn new(
        model: &'a DFlash,
        target: &Qwen35,
        backend: &'a mut dyn Backend,
        seqs: usize,
        cap: usize,
    ) -> Result<Self, ModelError> {
        if seqs == 0 {
            return Err(ModelError::Config("dflash2 session: no slots".into()));
        }
        if model.cfg.dflash2.is_none() {
            return Err(ModelError::Config(
                "dflash2 session: the drafter has no dflash2 config".into(),
            ));
        }
        let store = model.weights_with_target(target)?;
        let weights = backend.upload_weights(&store)?;
        let states = backend.alloc_states(&state_decls(&model.cfg, seqs, cap))?;
        Ok(BatchSession {
            model,
            backend,
            p: BatchParts {
                weights,
                states,
                store,
                vocab: target.cfg.vocab,
                cap,
                n_ctx: vec![0; seqs],
                execs: HashMap::new(),
            },
        })
    }

    pub fn seqs(&self) -> usize {
        self.p.n_ctx.len()
    }

    /// Context rows slot `slot` has committed.
    pub fn n_ctx(&self, slot: usize) -> usize {
        self.p.n_ctx(slot)
    }

    /// Rows each slot's caches hold.
    pub fn cap(&self) -> usize {
        self.p.cap
    }

    /// Forgets slot `slot`'s committed rows past `n`.
    pub fn truncate(&mut self, slot: usize, n: usize) {
        if let Some(c) = self.p.n_ctx.get_mut(slot) {
            *c = (*c).min(n);
        }
    }

    /// Moves slot `slot`'s committed row count forward to `pos` without writing the rows in
    /// between (see [`crate::model::draft::DraftSession::skip_to`]).
    pub fn skip_to(&mut self, slot: usize, pos: usize) {
        if let Some(c) = self.p.n_ctx.get_mut(slot) {
            *c = (*c).max(pos);
        }
    }

    /// Appends each slot's new rows and drafts a block per slot, all in one launch:
    /// `reqs[s]` is slot s (one request per slot). The block of slot s starts with its `last`
    /// at position `n_ctx(s)` (after the append) and proposes the next `B−1` positions.
    pub fn draft(
        &mut self,
        reqs: &[SeqDraft],
        extras: DraftExtras,
    ) -> Result<Vec<SeqOutput>, ModelError> {
        let c = &self.model.cfg;
        let seqs = self.seqs();
        if reqs.len() != seqs {
            return Err(ModelError::Config(format!(
                "dflash2 draft: {} requests for {seqs} slots",
                reqs.len()
            )));
        }
        let width = c.feature_width();
        let bsz = c.block_size;
        let mut rows = Vec::with_capacity(seqs);
        for (s, r) in reqs.iter().enumerate() {
            if !r.feats.len().is_multiple_of(width) {
                return Err(ModelError::Config(format!(
                    "dflash2 draft: slot {s}: {} feature values are not whole rows of {width}",
                    r.feats.len()
                )));
            }
            if r.last as usize >= self.p.vocab {
                return Err(ModelError::BadToken {
                    id: r.last,
                    vocab: self.p.vocab,
                });
            }
            let start = self.p.n_ctx[s] + r.feats.len() / width;
            if start + bsz > self.p.cap {
                return Err(ModelError::ContextFull {
                    need: start + bsz,
                    cap: self.p.cap,
                });
            }
            rows.push(r.feats.len() / width);
        }
        let widest = rows.iter().copied().max().unwrap_or(0);
        // Where the backend prefers fixed widths (wgpu: a new graph shape compiles pipelines
        // mid-generation, up to a second), a round's append (1 .. B rows) pads to the block:
        // one graph for every chain round instead of one per power of two. Session 28, H100:
        // the adaptive policy met appends of 1, 2 and 4 rows only in its timed runs and spent
        // 0.08-1.1 s of their drafting compiling them.
        let tc =
            if widest > 0 && pad_to_block() && crate::backend::fixed_step_widths(&*self.backend) {
                bucket(widest.max(bsz))
            } else {
                bucket(widest)
            };
        let exe = match self.p.execs.get(&(tc, extras)) {
            Some(e) => *e,
            None => {
                let shape = BatchShape {
                    seqs,
                    tc,
                    cap: self.p.cap,
                    extras,
                };
                let g = draft_graph(self.model, &self.p.store, shape)?;
                let e = self.backend.compile(&g)?;
                self.p.execs.insert((tc, extras), e);
                e
            }
        };

        let starts: Vec<usize> = (0..seqs).map(|s| self.p.n_ctx[s] + rows[s]).collect();
        let mut inputs: Vec<(String, HostData)> = Vec::new();
        if tc > 0 {
            let mut feat = vec![0.0f32; seqs * tc * width];
            let mut cpos = Vec::with_capacity(seqs * tc);
            for (s, r) in reqs.iter().enumerate() {
                feat[s * tc * width..][..r.feats.len()].copy_from_slice(r.feats);
                // Padding rows sit at the anchor position: the block overwrites that row.
                let real = self.p.n_ctx[s]..starts[s];
                let per: Vec<i32> = real
                    .map(|p| p as i32)
                    .chain(std::iter::repeat(starts[s] as i32))
                    .take(tc)
                    .collect();
                cpos.extend_from_slice(&per);
                inputs.push((format!("cpos.{s}"), HostData::I32(per)));
            }
            inputs.push(("feat".into(), HostData::F32(feat)));
            inputs.push(("cpos".into(), HostData::I32(cpos)));
            inputs.push((
                "cq".into(),
                HostData::F32(vec![0.0; tc * c.n_heads * c.head_dim]),
            ));
        }
        let mut ids = Vec::with_capacity(seqs * bsz);
        let mut pos = Vec::with_capacity(seqs * bsz);
        for (s, r) in reqs.iter().enumerate() {
            ids.push(r.last as i32);
            ids.extend(std::iter::repeat_n(c.mask_token_id as i32, bsz - 1));
            let p: Vec<i32> = (starts[s]..starts[s] + bsz).map(|p| p as i32).collect();
            pos.extend_from_slice(&p);
            inputs.push((format!("pos.{s}"), HostData::I32(p)));
        }
        let seed = reqs.iter().map(|r| r.last as i32).collect();
        inputs.push(("ids".into(), HostData::I32(ids)));
        inputs.push(("pos".into(), HostData::I32(pos)));
        inputs.push(("seed".into(), HostData::I32(seed)));
        let (names, data): (Vec<String>, Vec<HostData>) = inputs.into_iter().unzip();
        let refs: Vec<(&str, HostData)> = names.iter().map(String::as_str).zip(data).collect();
        let outs = self
            .backend
            .run(exe, self.p.weights, self.p.states, &refs)?;
        self.p.n_ctx = starts;

        let per = bsz - 1;
        let k = c.dflash2.as_ref().map_or(1, |d| d.selector_top_k);
        let mut res = vec![SeqOutput::default(); seqs];
        for (name, t) in outs {
            match name.as_str() {
                "draft_tokens" => {
                    for (s, ch) in t.to_i32().chunks(per).enumerate() {
                        res[s].tokens = ch.iter().map(|&v| v as u32).collect();
                    }
                }
                "selector_cand" => {
                    for (s, ch) in t.to_i32().chunks(per * k).enumerate() {
                        res[s].cand = ch.iter().map(|&v| v as u32).collect();
                    }
                }
                "selector_scores" => {
                    for (s, ch) in t.to_f32()?.chunks(per * k).enumerate() {
                        res[s].scores = ch.to_vec();
                    }
                }
                "draft_logits" => {
                    for (s, ch) in t.to_f32()?.chunks(per * self.p.vocab).enumerate() {
                        res[s].logits = ch.to_vec();
                    }
                }
                "selector_unary" | "selector_hp" | "selector_succ" | "selector_pred"
                | "selector_seed_pred" => {
                    let v = t.to_f32()?;
                    let part = v.len() / seqs.max(1);
                    for (s, ch) in v.chunks(part.max(1)).enumerate().take(seqs) {
                        let w = res[s].walk.get_or_insert_with(WalkParts::default);
                        let dst = match name.as_str() {
                            "selector_unary" => &mut w.unary,
                            "selector_hp" => &mut w.hp,
                            "selector_succ" => &mut w.succ,
                            "selector_pred" => &mut w.pred,
                            _ => &mut w.seed_pred,
                        };
                        *dst = ch.to_vec();
                    }
                }
                _ => {}
            }
        }
        Ok(res)
    }

    /// Grows every slot's caches to at least `cap` rows, keeping the committed rows.
    pub fn reserve(&mut self, cap: usize) -> Result<(), ModelError> {
        if cap <= self.p.cap {
            return Ok(());
        }
        let c = &self.model.cfg;
        let seqs = self.seqs();
        let states = self.backend.alloc_states(&state_decls(c, seqs, cap))?;
        let row = c.n_kv_heads * c.head_dim;
        for i in 0..c.n_layers {
            for s in 0..seqs {
                for name in [k_cache(i, s), v_cache(i, s)] {
                    let mut data = self.backend.read_state(self.p.states, &name)?;
                    data.truncate(self.p.n_ctx[s] * row);
                    data.resize(cap * row, 0.0);
                    self.backend.write_state(states, &name, &data)?;
                }
            }
        }
        self.backend.free_states(self.p.states)?;
        self.p.states = states;
        self.p.cap = cap;
        self.p.execs.clear();
        Ok(())
    }

    /// Releases the backend borrow, keeping every resource for [`BatchSession::from_parts`].
    pub fn into_parts(self) -> BatchParts {
        self.p
    }

    /// Resumes a session; `model` and `backend` must be the ones the parts were created with.
    pub fn from_parts(
        model: &'a DFlash,
        backend: &'a mut dyn Backend,
        parts: BatchParts,
    ) -> BatchSession<'a> {
        BatchSession {
            model,
            backend,
            p: parts,
        }
    }

    /// Frees the caches.
    pub fn free(self) -> Result<(), ModelError> {
        Ok(self.backend.free_states(self.p.states)?)
    }
}
