//! One sequence running on a backend: its states, its position, and compiled step graphs
//! cached by shape.

use super::qwen35::{GraphOptions, LogitRows};
use super::{ModelError, Qwen35};
use crate::backend::{Backend, ExecId, HostData, StatesId, WeightsId};
use crate::state::Snapshot;
use std::collections::HashMap;

/// What one step returns.
#[derive(Clone, Debug, Default)]
pub struct StepOutput {
    /// Row-major `[rows, vocab]`.
    pub logits: Vec<f32>,
    pub rows: usize,
    /// Argmax per logits row, if asked for.
    pub argmax: Vec<u32>,
    /// Captured layer outputs `(layer, [T, hidden])`.
    pub hidden: Vec<(usize, Vec<f32>)>,
}

pub struct Session<'a> {
    model: &'a Qwen35,
    backend: &'a mut dyn Backend,
    weights: WeightsId,
    states: StatesId,
    ctx: usize,
    pos: usize,
    execs: HashMap<(usize, GraphOptions), ExecId>,
}

impl<'a> Session<'a> {
    /// Uploads the model's weights and allocates states for `ctx` positions.
    pub fn new(
        model: &'a Qwen35,
        backend: &'a mut dyn Backend,
        ctx: usize,
    ) -> Result<Self, ModelError> {
        let weights = backend.upload_weights(&model.weights)?;
        let states = backend.alloc_states(&model.state_decls(ctx))?;
        Ok(Session {
            model,
            backend,
            weights,
            states,
            ctx,
            pos: 0,
            execs: HashMap::new(),
        })
    }

    /// Positions consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn ctx(&self) -> usize {
        self.ctx
    }

    pub fn backend(&mut self) -> &mut dyn Backend {
        self.backend
    }

    pub fn states(&self) -> StatesId {
        self.states
    }

    /// Copies the current state (all layers) so it can be restored.
    pub fn snapshot(&mut self) -> Result<Snapshot, ModelError> {
        let decls = self.model.state_decls(self.ctx);
        Ok(Snapshot::take(self.backend, &decls, self.states, self.pos)?)
    }

    /// Returns to a snapshot taken from this session.
    pub fn restore(&mut self, snap: &Snapshot) -> Result<(), ModelError> {
        self.pos = snap.restore(self.backend, self.states)?;
        Ok(())
    }

    /// Copies the current state into an existing snapshot of this session, reusing its
    /// buffers (the speculative loop snapshots before every verify).
    pub fn snapshot_into(&mut self, snap: &mut Snapshot) -> Result<(), ModelError> {
        self.backend.copy_states(self.states, snap.states)?;
        snap.pos = self.pos;
        Ok(())
    }

    /// Moves the position back to `pos` without touching any state. Exact for attention (KV
    /// rows past the position are never read and get overwritten); the caller must bring the
    /// DeltaNet conv and recurrent state back to `pos` itself (speculative rollback).
    pub fn rewind_position(&mut self, pos: usize) {
        assert!(
            pos <= self.pos,
            "rewind to {pos} past the position {}",
            self.pos
        );
        self.pos = pos;
    }

    /// The model this session runs.
    pub fn model(&self) -> &'a Qwen35 {
        self.model
    }

    /// The handle of the target's uploaded weight set (a drafter sharing the target's
    /// backend may bind it).
    pub fn weights_id(&self) -> WeightsId {
        self.weights
    }

    /// Frees a snapshot's buffers.
    pub fn release(&mut self, snap: Snapshot) -> Result<(), ModelError> {
        Ok(snap.release(self.backend)?)
    }

    /// Reads one named state buffer (tests, debugging).
    pub fn read_state(&mut self, name: &str) -> Result<Vec<f32>, ModelError> {
        Ok(self.backend.read_state(self.states, name)?)
    }

    /// Runs the target over `tokens` at the next positions.
    pub fn forward(
        &mut self,
        tokens: &[u32],
        opts: &GraphOptions,
    ) -> Result<StepOutput, ModelError> {
        let t = tokens.len();
        if self.pos + t > self.ctx {
            return Err(ModelError::ContextFull {
                need: self.pos + t,
                cap: self.ctx,
            });
        }
        let vocab = self.model.cfg.vocab;
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= vocab) {
            return Err(ModelError::BadToken { id, vocab });
        }
        let key = (t, opts.clone());
        let exe = match self.execs.get(&key) {
            Some(e) => *e,
            None => {
                let g = self.model.step_graph(t, self.ctx, opts)?;
                let e = self.backend.compile(&g)?;
                self.execs.insert(key, e);
                e
            }
        };
        let ids: Vec<i32> = tokens.iter().map(|&x| x as i32).collect();
        let pos: Vec<i32> = (self.pos..self.pos + t).map(|p| p as i32).collect();
        let outs = self.backend.run(
            exe,
            self.weights,
            self.states,
            &[("ids", HostData::I32(ids)), ("pos", HostData::I32(pos))],
        )?;
        self.pos += t;
        let mut out = StepOutput {
            rows: if opts.logits == LogitRows::All { t } else { 1 },
            ..Default::default()
        };
        for (name, tensor) in outs {
            if name == "logits" {
                out.logits = tensor.to_f32()?;
            } else if name == "argmax" {
                out.argmax = tensor.to_i32().into_iter().map(|v| v as u32).collect();
            } else if let Some(layer) = name.strip_prefix("hidden.").and_then(|l| l.parse().ok()) {
                out.hidden.push((layer, tensor.to_f32()?));
            }
        }
        Ok(out)
    }

    /// Greedy generation: prefills `prompt` in chunks of at most `chunk` tokens, then decodes
    /// one token at a time. Stops after `n` tokens or at `stop`. Calls `on_token` per token.
    pub fn generate_greedy(
        &mut self,
        prompt: &[u32],
        n: usize,
        chunk: usize,
        stop: Option<u32>,
        mut on_token: impl FnMut(u32),
    ) -> Result<Vec<u32>, ModelError> {
        let opts = GraphOptions {
            logits: LogitRows::Last,
            argmax: true,
            capture: Vec::new(),
        };
        let mut out = Vec::with_capacity(n);
        if prompt.is_empty() || n == 0 {
            return Ok(out);
        }
        let mut last = StepOutput::default();
        for piece in prompt.chunks(chunk.max(1)) {
            last = self.forward(piece, &opts)?;
        }
        loop {
            let tok = last.argmax[0];
            out.push(tok);
            on_token(tok);
            if out.len() >= n || Some(tok) == stop {
                return Ok(out);
            }
            last = self.forward(&[tok], &opts)?;
        }
    }
}
