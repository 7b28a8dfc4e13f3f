//! One sequence running on a backend: its states, its position, and compiled step graphs
//! cached by shape.

use super::qwen35::names;
use super::qwen35::{GraphOptions, LogitRows};
use super::{ModelError, Qwen35};
use crate::backend::{Backend, ExecId, HostData, StateCopy, StateDecl, StatesId, WeightsId};
use crate::state::Snapshot;
use std::collections::HashMap;

mod greedy;

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
    /// Rows of the KV caches: `ctx`, and on backends whose verifies run padded to a fixed
    /// width [`PAD_SLACK`] more for the padding rows' K/V (see `pad_verify`).
    cache_rows: usize,
    pos: usize,
    /// The state set's declarations: the sequence state, then the per-row verify states.
    decls: Vec<StateDecl>,
    /// Rows of the per-row verify states (0: none allocated).
    tree_rows: usize,
    /// Whether those verify states are a factor-replay log ([`Session::reserve_log_rows`])
    /// rather than per-row recurrent states.
    logged: bool,
    /// Compiled graphs by (rows, options, per-row state rows (0 for a plain step), logged).
    execs: HashMap<(usize, GraphOptions, usize, bool), ExecId>,
    /// Compiled factor replays by (accepted rows, log rows).
    replays: HashMap<(usize, usize), ExecId>,
}

/// Depth of every row of a tree given by its parents (`parent[i] < i`, −1 for a root), and
/// the ancestor-or-self mask `[T, T]` (row-major, 1 = visible).
pub fn tree_layout(parents: &[i32]) -> Result<(Vec<usize>, Vec<i32>), ModelError> {
    let t = parents.len();
    let mut depth = vec![0usize; t];
    let mut mask = vec![0i32; t * t];
    for (i, &p) in parents.iter().enumerate() {
        if p >= 0 {
            let p = p as usize;
            if p >= i {
                return Err(ModelError::Config(format!(
                    "tree row {i} has parent {p}: parents must come before their rows"
                )));
            }
            depth[i] = depth[p] + 1;
            let (above, row) = mask.split_at_mut(i * t);
            row[..t].copy_from_slice(&above[p * t..(p + 1) * t]);
        }
        mask[i * t + i] = 1;
    }
    Ok((depth, mask))
}

/// KV cache rows past the context kept for the padding rows of fixed-width verifies: a verify
/// of up to `PAD_SLACK + 1` reserved rows runs at its full width up to the last position.
pub const PAD_SLACK: usize = 16;

/// The inputs of a verify of the tree `tokens`/`parents` (depths and ancestor mask from
/// [`tree_layout`]) at committed length `base`, padded to `w ≥ t` rows: `ids`, `pos`, `kv_rows`,
/// `parent` and the `[w, w]` `mask`.
///
/// Rows t.. continue a chain from the last row (token repeated, next position, next cache row,
/// the row before as parent): a well-formed tree whatever the per-row state kind. Their K/V
/// land in cache rows past the verified ones, which no real row sees and which the next step
/// overwrites; their per-row states and logs land in the unused rows t..; their outputs are
/// dropped. They must not share the last row's cache row: in a factor-replay (logged) verify
/// the recurrent step runs the rows in sequence, so a repeat of the last row computes other
/// K/V than it and would overwrite that row's (session 28's drift on the 27B).
fn pad_verify(
    tokens: &[u32],
    parents: &[i32],
    depth: &[usize],
    mask: Vec<i32>,
    base: usize,
    w: usize,
) -> [(&'static str, HostData); 5] {
    let t = tokens.len();
    let base = base as i32;
    let last = t - 1;
    let ids: Vec<i32> = (0..w).map(|i| tokens[i.min(last)] as i32).collect();
    let pos: Vec<i32> = (0..w)
        .map(|i| base + (depth[i.min(last)] + i.saturating_sub(last)) as i32)
        .collect();
    let kv_rows: Vec<i32> = (0..w as i32).map(|i| base + i).collect();
    let par: Vec<i32> = (0..w)
        .map(|i| if i < t { parents[i] } else { i as i32 - 1 })
        .collect();
    let m = if w == t {
        mask
    } else {
        let mut m = vec![0i32; w * w];
        for i in 0..w {
            if i < t {
                m[i * w..i * w + t].copy_from_slice(&mask[i * t..(i + 1) * t]);
            } else {
                // The row before's ancestors, and itself.
                let (above, row) = m.split_at_mut(i * w);
                row[..w].copy_from_slice(&above[(i - 1) * w..i * w]);
                row[i] = 1;
            }
        }
        m
    };
    [
        ("ids", HostData::I32(ids)),
        ("pos", HostData::I32(pos)),
        ("kv_rows", HostData::I32(kv_rows)),
        ("parent", HostData::I32(par)),
        ("mask", HostData::I32(m)),
    ]
}

impl<'a> Session<'a> {
    /// Uploads the model's weights and allocates states for `ctx` positions.
    pub fn new(
        model: &'a Qwen35,
        backend: &'a mut dyn Backend,
        ctx: usize,
    ) -> Result<Self, ModelError> {
        let weights = backend.upload_weights(&model.weights)?;
        // The same on every session of a backend, so that a plain and a speculative session of
        // one context run the same attention splits (they depend on the cache's rows).
        let cache_rows = if crate::backend::fixed_step_widths(&*backend) {
            ctx + PAD_SLACK
        } else {
            ctx
        };
        let decls = model.state_decls(cache_rows);
        let states = backend.alloc_states(&decls)?;
        Ok(Session {
            model,
            backend,
            weights,
            states,
            ctx,
            cache_rows,
            pos: 0,
            decls,
            tree_rows: 0,
            logged: false,
            execs: HashMap::new(),
            replays: HashMap::new(),
        })
    }

    /// Makes room for verify forwards of up to `rows` rows with per-row states
    /// ([`Session::forward_tree`]): reallocates the state set with the per-row buffers
    /// ([`crate::state::token_layout`]) and moves the sequence state over (best called before
    /// the prompt, when there is nothing to move). Never shrinks.
    pub fn reserve_tree_rows(&mut self, rows: usize) -> Result<(), ModelError> {
        self.reserve_verify(rows, false)
    }

    /// Makes room for chain verifies of up to `rows` rows with factor-replay rollback
    /// ([`Session::forward_tree`] then logs every row's DeltaNet step inputs, and
    /// [`Session::commit_tree`] replays the accepted ones): per-row conv states and the logs
    /// ([`crate::state::log_layout`]) instead of per-row recurrent states. Trees need
    /// [`Session::reserve_tree_rows`]; reserving one kind after the other reallocates.
    pub fn reserve_log_rows(&mut self, rows: usize) -> Result<(), ModelError> {
        self.reserve_verify(rows, true)
    }

    fn reserve_verify(&mut self, rows: usize, log: bool) -> Result<(), ModelError> {
        if rows <= self.tree_rows && log == self.logged {
            return Ok(());
        }
        let rows = rows.max(self.tree_rows);
        let mut decls = self.model.state_decls(self.cache_rows);
        let base = decls.len();
        decls.extend(if log {
            crate::state::log_layout(&self.model.cfg, rows)
        } else {
            crate::state::token_layout(&self.model.cfg, rows)
        });
        let fresh = self.backend.alloc_states(&decls)?;
        if self.pos > 0 {
            for d in &decls[..base] {
                let v = self.backend.read_state(self.states, &d.name)?;
                self.backend.write_state(fresh, &d.name, &v)?;
            }
        }
        self.backend.free_states(self.states)?;
        self.states = fresh;
        self.decls = decls;
        self.tree_rows = rows;
        self.logged = log;
        Ok(())
    }

    /// Rows a [`Session::forward_tree`] may verify at most (0 before
    /// [`Session::reserve_tree_rows`]).
    pub fn tree_rows(&self) -> usize {
        self.tree_rows
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
        Ok(Snapshot::take(
            self.backend,
            &self.decls,
            self.states,
            self.pos,
        )?)
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

    /// Checks that `tokens` fit the context and the vocabulary.
    fn check_tokens(&self, tokens: &[u32]) -> Result<(), ModelError> {
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
        Ok(())
    }

    /// The compiled graph for `t` rows (per-row state rows `tree`, 0 for a plain step).
    fn exec(&mut self, t: usize, opts: &GraphOptions, tree: usize) -> Result<ExecId, ModelError> {
        let key = (t, opts.clone(), tree, tree > 0 && self.logged);
        if let Some(e) = self.execs.get(&key) {
            return Ok(*e);
        }
        let g = if tree == 0 {
            self.model.step_graph(t, self.cache_rows, opts)?
        } else if self.logged {
            self.model.log_graph(t, self.cache_rows, tree, opts)?
        } else {
            self.model.tree_graph(t, self.cache_rows, tree, opts)?
        };
        let e = self.backend.compile(&g)?;
        self.execs.insert(key, e);
        Ok(e)
    }

    /// Runs the target over `tokens` at the next positions.
    pub fn forward(
        &mut self,
        tokens: &[u32],
        opts: &GraphOptions,
    ) -> Result<StepOutput, ModelError> {
        self.check_tokens(tokens)?;
        let t = tokens.len();
        let exe = self.exec(t, opts, 0)?;
        let ids: Vec<i32> = tokens.iter().map(|&x| x as i32).collect();
        let pos: Vec<i32> = (self.pos..self.pos + t).map(|p| p as i32).collect();
        let outs = self.backend.run(
            exe,
            self.weights,
            self.states,
            &[("ids", HostData::I32(ids)), ("pos", HostData::I32(pos))],
        )?;
        self.pos += t;
        Self::output(outs, opts, t)
    }

    /// Verifies a tree of `tokens` (row i's parent `parents[i] < i`, −1 for the root, which
    /// follows the committed tokens) in one forward: row i sits at position `pos + depth(i)`
    /// and sees the committed context and its ancestors. Every row's K/V goes to cache row
    /// `pos + i` and its DeltaNet states to the per-row buffers; the live state and the
    /// position are unchanged until [`Session::commit_tree`]. Needs
    /// [`Session::reserve_tree_rows`] of at least `tokens.len()` rows.
    pub fn forward_tree(
        &mut self,
        tokens: &[u32],
        parents: &[i32],
        opts: &GraphOptions,
    ) -> Result<StepOutput, ModelError> {
        self.check_tokens(tokens)?;
        let t = tokens.len();
        if parents.len() != t {
            return Err(ModelError::Config(format!(
                "{t} tree rows with {} parents",
                parents.len()
            )));
        }
        if t > self.tree_rows {
            return Err(ModelError::Config(format!(
                "a verify of {t} rows with per-row states needs reserve_tree_rows({t}) (have {})",
                self.tree_rows
            )));
        }
        if self.logged && parents.iter().enumerate().any(|(i, &p)| p != i as i32 - 1) {
            return Err(ModelError::Config(format!(
                "factor-replay verify runs chains only (parents {parents:?}); trees need \
                 reserve_tree_rows"
            )));
        }
        let (depth, mask) = tree_layout(parents)?;
        // Padded to the reserved width where the backend prefers one graph for every verify,
        // as far as the cache has rows for the padding (see `pad_verify` and `PAD_SLACK`).
        let w = if self.fixed_verify_width() {
            self.tree_rows.min(self.cache_rows - self.pos)
        } else {
            t
        };
        let exe = self.exec(w, opts, self.tree_rows)?;
        let inputs = pad_verify(tokens, parents, &depth, mask, self.pos, w);
        let outs = self.backend.run(exe, self.weights, self.states, &inputs)?;
        let mut out = Self::output(outs, opts, w)?;
        if w > t {
            if opts.logits == LogitRows::All {
                let vocab = self.model.cfg.vocab;
                out.rows = t;
                out.logits.truncate(t * vocab);
                out.argmax.truncate(t);
            }
            let width = self.model.cfg.hidden;
            for (_, h) in &mut out.hidden {
                h.truncate(t * width);
            }
        }
        Ok(out)
    }

    /// The backend's step row tiles ([`crate::backend::Backend::step_row_tiles`]).
    pub fn step_row_tiles(&self) -> Vec<usize> {
        self.backend.step_row_tiles()
    }

    /// Whether verifies run at the reserved width ([`Session::forward_tree`], see
    /// [`crate::backend::fixed_step_widths`]).
    pub fn fixed_verify_width(&self) -> bool {
        crate::backend::fixed_step_widths(&*self.backend)
    }

    /// Commits the rows `path` of the last [`Session::forward_tree`] (a root-to-node path:
    /// `path[d]` is the row at depth d, `path[0]` the root): their K/V rows move to the
    /// positions `pos + d`, the last row's conv and recurrent state becomes the live state,
    /// and the position advances by `path.len()`. One batch of device copies; with factor
    /// replay ([`Session::reserve_log_rows`]; the path is a chain prefix `0, 1, …`) the
    /// recurrent states are instead advanced over the path's logged rows by a replay graph.
    pub fn commit_tree(&mut self, path: &[usize]) -> Result<(), ModelError> {
        let Some(&last) = path.last() else {
            return Ok(());
        };
        if last >= self.tree_rows
            || self.pos + path.len() > self.ctx
            || path
                .iter()
                .enumerate()
                .any(|(d, &r)| r < d || (self.logged && r != d))
        {
            return Err(ModelError::Config(format!(
                "cannot commit tree path {path:?} ({} per-row states, position {} of {})",
                self.tree_rows, self.pos, self.ctx
            )));
        }
        let c = &self.model.cfg;
        let kv_row = c.n_kv_heads * c.head_dim;
        let conv = (c.conv_kernel - 1) * c.conv_dim();
        let ssm = c.nv * c.dk * c.dv;
        let mut copies = Vec::new();
        let copy = |src: String, so: usize, dst: String, dso: usize, len: usize| StateCopy {
            src,
            src_off: so,
            dst,
            dst_off: dso,
            len,
        };
        for (i, kind) in c.layers.iter().enumerate() {
            match kind {
                crate::model::LayerKind::Attention => {
                    // Increasing depth: path[d] ≥ d, and a later source row path[d'] > d is
                    // never a row already written.
                    for (d, &r) in path.iter().enumerate().filter(|(d, r)| *d != **r) {
                        let (from, to) = ((self.pos + r) * kv_row, (self.pos + d) * kv_row);
                        for name in [names::k_cache(i), names::v_cache(i)] {
                            copies.push(copy(name.clone(), from, name, to, kv_row));
                        }
                    }
                }
                crate::model::LayerKind::DeltaNet => {
                    copies.push(copy(
                        names::conv_tokens(i),
                        last * conv,
                        names::conv_state(i),
                        0,
                        conv,
                    ));
                    if self.logged {
                        continue;
                    }
                    copies.push(copy(
                        names::ssm_tokens(i),
                        last * ssm,
                        names::ssm_state(i),
                        0,
                        ssm,
                    ));
                }
            }
        }
        self.backend.copy_state_ranges(self.states, &copies)?;
        if self.logged {
            let key = (path.len(), self.tree_rows);
            let exe = match self.replays.get(&key) {
                Some(e) => *e,
                None => {
                    let g = self.model.replay_graph(key.0, key.1)?;
                    let e = self.backend.compile(&g)?;
                    self.replays.insert(key, e);
                    e
                }
            };
            self.backend.run(exe, self.weights, self.states, &[])?;
        }
        self.pos += path.len();
        Ok(())
    }

    fn output(
        outs: Vec<(String, crate::backend::HostTensor)>,
        opts: &GraphOptions,
        t: usize,
    ) -> Result<StepOutput, ModelError> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(inputs: &[(&'static str, HostData)]) -> Vec<Vec<i32>> {
        inputs
            .iter()
            .map(|(_, d)| match d {
                HostData::I32(v) => v.clone(),
                _ => panic!("verify inputs are i32"),
            })
            .collect()
    }

    /// Padding rows continue a chain from the last row into the next cache rows, so that
    /// every backend's contract holds (consecutive cache rows, an ancestor mask with the row
    /// itself) and no padding row writes a real row's K/V.
    #[test]
    fn padding_rows_continue_a_chain_into_their_own_cache_rows() {
        // A tree: 0 ← 1, 0 ← 2 ← 3, at committed length 10, padded from 4 to 6 rows.
        let parents = [-1, 0, 0, 2];
        let (depth, mask) = tree_layout(&parents).unwrap();
        let pad = |w| {
            ints(&pad_verify(
                &[7, 8, 9, 5],
                &parents,
                &depth,
                mask.clone(),
                10,
                w,
            ))
        };
        let v = pad(6);
        let (ids, pos, kv, par, m) = (&v[0], &v[1], &v[2], &v[3], &v[4]);
        assert_eq!(ids, &[7, 8, 9, 5, 5, 5]);
        assert_eq!(pos, &[10, 11, 11, 12, 13, 14]);
        assert_eq!(kv, &[10, 11, 12, 13, 14, 15]);
        assert_eq!(par, &[-1, 0, 0, 2, 3, 4]);
        let rows: Vec<&[i32]> = m.chunks(6).collect();
        for (i, r) in rows.iter().enumerate().take(4) {
            assert_eq!(&r[..4], &mask[i * 4..(i + 1) * 4], "real row {i}");
            assert_eq!(&r[4..], &[0, 0], "real row {i} sees no padding");
        }
        assert_eq!(rows[4], &[1, 0, 1, 1, 1, 0]);
        assert_eq!(rows[5], &[1, 0, 1, 1, 1, 1]);
        // No padding: the inputs as they are.
        let v = pad(4);
        assert_eq!(
            (&v[2], &v[3], &v[4]),
            (&vec![10, 11, 12, 13], &parents.to_vec(), &mask)
        );
    }
}
