//! Per-sequence state of the hybrid target: the attention KV cache and the DeltaNet conv and
//! recurrent state, declared as named f32 buffers that backends allocate and ops update in place.
//!
//! Attention KV rows past the current position are never read (the causal mask stops at each
//! query's position), so rolling attention back is only moving the position. DeltaNet state is
//! overwritten in place, so rolling it back needs a snapshot or the per-row states a tree
//! verify writes ([`token_layout`]).

use crate::backend::{Backend, BackendError, StateDecl, StatesId};
use crate::model::{LayerKind, Qwen35Config};

pub fn k_cache(layer: usize) -> String {
    format!("blk.{layer}.k_cache")
}
pub fn v_cache(layer: usize) -> String {
    format!("blk.{layer}.v_cache")
}
pub fn conv_state(layer: usize) -> String {
    format!("blk.{layer}.conv_state")
}
pub fn ssm_state(layer: usize) -> String {
    format!("blk.{layer}.ssm_state")
}

/// Per-row conv states of a tree/chain verify (`Op::ConvTree`), `[rows, K − 1, conv_dim]`.
pub fn conv_tokens(layer: usize) -> String {
    format!("blk.{layer}.conv_tokens")
}
/// Per-row recurrent states of a tree/chain verify (`Op::GatedDeltaNetTree`),
/// `[rows, nv, dk, dv]`.
pub fn ssm_tokens(layer: usize) -> String {
    format!("blk.{layer}.ssm_tokens")
}

/// The log of a factor-replay verify (`Op::GatedDeltaNetLog`): every row's recurrent-step
/// inputs `[rows, conv_dim + 2·nv]`.
pub fn ssm_log(layer: usize) -> String {
    format!("blk.{layer}.ssm_log")
}

/// The buffers a factor-replay verify of up to `rows` rows writes: every DeltaNet layer's
/// per-row conv state (as [`token_layout`]) and the log of its recurrent-step inputs, from
/// which committing replays the accepted rows. `conv_dim + 2·nv` floats per row and layer for
/// the recurrent part, against `nv · dk · dv` for per-row states (~10K against ~786K at the
/// 27B shape).
pub fn log_layout(c: &Qwen35Config, rows: usize) -> Vec<StateDecl> {
    verify_layout(c, rows, |i| {
        StateDecl::new(ssm_log(i), &[rows, c.conv_dim() + 2 * c.nv])
    })
}

/// The per-row state buffers a verify forward of up to `rows` rows writes (per-token-state
/// rollback and tree speculation): every DeltaNet layer's conv and recurrent state after each
/// row, so that committing row `a` is a copy. Memory-hungry: `rows · nv · dk · dv` floats per
/// DeltaNet layer.
pub fn token_layout(c: &Qwen35Config, rows: usize) -> Vec<StateDecl> {
    verify_layout(c, rows, |i| {
        StateDecl::new(ssm_tokens(i), &[rows, c.nv, c.dk, c.dv])
    })
}

/// Per DeltaNet layer `i`: its per-row conv states, then `recurrent(i)`.
fn verify_layout(
    c: &Qwen35Config,
    rows: usize,
    recurrent: impl Fn(usize) -> StateDecl,
) -> Vec<StateDecl> {
    let mut v = Vec::new();
    for (i, kind) in c.layers.iter().enumerate() {
        if *kind == LayerKind::DeltaNet {
            v.push(StateDecl::new(
                conv_tokens(i),
                &[rows, c.conv_kernel - 1, c.conv_dim()],
            ));
            v.push(recurrent(i));
        }
    }
    v
}

/// The state buffers of one sequence with room for `ctx` positions:
/// attention layers hold `k_cache`/`v_cache` `[ctx, n_kv_heads, head_dim]`; DeltaNet layers hold
/// `conv_state` `[conv_kernel − 1, conv_dim]` (the previous inputs, llama.cpp's K−1 convention)
/// and `ssm_state` `[nv, dk, dv]`.
pub fn layout(c: &Qwen35Config, ctx: usize) -> Vec<StateDecl> {
    let mut v = Vec::new();
    for (i, kind) in c.layers.iter().enumerate() {
        match kind {
            LayerKind::Attention => {
                v.push(StateDecl::new(k_cache(i), &[ctx, c.n_kv_heads, c.head_dim]));
                v.push(StateDecl::new(v_cache(i), &[ctx, c.n_kv_heads, c.head_dim]));
            }
            LayerKind::DeltaNet => {
                v.push(StateDecl::new(
                    conv_state(i),
                    &[c.conv_kernel - 1, c.conv_dim()],
                ));
                v.push(StateDecl::new(ssm_state(i), &[c.nv, c.dk, c.dv]));
            }
        }
    }
    v
}

/// Bytes of one sequence's state (f32).
pub fn bytes(decls: &[StateDecl]) -> usize {
    decls.iter().map(|d| d.numel() * 4).sum()
}

/// A copy of a sequence's state at a position, restorable later.
pub struct Snapshot {
    pub(crate) states: StatesId,
    pub pos: usize,
}

impl Snapshot {
    /// Copies `live` (at `pos`) into a fresh state set on `backend`.
    pub fn take(
        backend: &mut dyn Backend,
        decls: &[StateDecl],
        live: StatesId,
        pos: usize,
    ) -> Result<Snapshot, BackendError> {
        let states = backend.alloc_states(decls)?;
        backend.copy_states(live, states)?;
        Ok(Snapshot { states, pos })
    }

    /// Copies the snapshot back into `live`; returns the position to resume from.
    pub fn restore(
        &self,
        backend: &mut dyn Backend,
        live: StatesId,
    ) -> Result<usize, BackendError> {
        backend.copy_states(self.states, live)?;
        Ok(self.pos)
    }

    /// Frees the snapshot's buffers.
    pub fn release(self, backend: &mut dyn Backend) -> Result<(), BackendError> {
        backend.free_states(self.states)
    }
}
