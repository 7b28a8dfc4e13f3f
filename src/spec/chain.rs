//! One chain round (speculation.md §1) and the rollback of the hybrid state (§2).
//!
//! ```text
//! root = last emitted token (the previous bonus), not yet processed by the target
//! d_1 … d_n       = drafter proposals                      (n ≤ max; v_len = n + 1)
//! t_0 … t_n       = argmax of the target over [root, d_1 … d_n]   (ONE forward, all rows)
//! a               = longest prefix with d_{i+1} == t_i
//! emit              d_1 … d_a, then the bonus t_a
//! commit            a + 1 rows of target state (root + accepted drafts); roll back the rest
//! drafter context += the features of those a + 1 rows
//! ```
//!
//! Attention KV rows past the committed position are never read, so rolling attention back is
//! only moving the position. DeltaNet conv and recurrent state are overwritten in place by
//! verify, so they need one of the [`RollbackMode`]s.

use super::sample::{Sampling, accept_sampled};
use super::{DraftRequest, Drafter, Features, SpecError, env};
use crate::model::Session;
use crate::model::qwen35::{GraphOptions, LogitRows};
use crate::state::Snapshot;
use crate::util::rng::Rng;
use std::time::Instant;

/// How the state is brought back to "after root + accepted drafts" when verify rejected some.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RollbackMode {
    /// Copy the whole state before verify; on a partial accept restore the copy and replay the
    /// accepted rows through the target (one extra forward of a + 1 rows). Exact, simple,
    /// works on every backend; costs a state copy per round. A full accept needs nothing.
    SnapshotReplay,
    /// Copy only the DeltaNet conv and recurrent state to host memory before verify; on a
    /// partial accept write it back, move the position back (attention needs nothing more) and
    /// replay the accepted rows. Cost independent of the context length (the full snapshot
    /// copies every KV row), but a device→host→device round trip.
    RecurrentHost,
    /// The verify forward ([`Session::forward_tree`] over the chain) writes every row's
    /// DeltaNet conv and recurrent state to per-row buffers and leaves the live state alone;
    /// committing `a + 1` rows copies row `a`'s states in (Lucebox `rollback_to`). No replay
    /// forward and no snapshot; costs `rows · nv · dk · dv` floats of memory per DeltaNet
    /// layer and writing every row's state during verify (8 rows of the 27B shape: 1.2 GB of
    /// state written per verify). Trees always use it. Faster than the snapshot and
    /// recurrent-host replays (CPU, tiny-a + dflash-a, code replay profile: rollback 0.3% of
    /// decode time against 4–8%, same verify time).
    PerTokenStates,
    /// The verify forward logs every row's DeltaNet step inputs (q, k, v, b, a: `conv_dim +
    /// 2·nv` floats per row and layer) and per-row conv states, and leaves the live state
    /// alone; committing `a + 1` rows copies row `a`'s conv state and replays those rows'
    /// recurrent steps from the log (one small graph of one op per DeltaNet layer; the
    /// seed's memory-lean form, z-lab's record-and-recompute). No per-row recurrent states
    /// (~77× less memory at the 27B shape) and no replay forward; chains only (trees keep
    /// per-token states). The default: H100, 27B IQ4_XS + DFlash2, hip: 374 against 354 tok/s
    /// (code replay profile) and 173 against 152 (prose) for per-token states; wgpu: equal
    /// (147 both, code; 107 against 106, prose). See docs/perf.md, session 22.
    #[default]
    FactorReplay,
}

impl RollbackMode {
    pub fn parse(s: &str) -> Result<RollbackMode, SpecError> {
        match s {
            "snapshot" | "snapshot-replay" | "replay" => Ok(RollbackMode::SnapshotReplay),
            "recurrent-host" | "host" => Ok(RollbackMode::RecurrentHost),
            "per-token" | "per-token-states" => Ok(RollbackMode::PerTokenStates),
            "factors" | "factor-replay" => Ok(RollbackMode::FactorReplay),
            other => Err(SpecError::Invalid(format!(
                "unknown rollback mode '{other}' (known: snapshot, recurrent-host, per-token, \
                 factors)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RollbackMode::SnapshotReplay => "snapshot",
            RollbackMode::RecurrentHost => "recurrent-host",
            RollbackMode::PerTokenStates => "per-token",
            RollbackMode::FactorReplay => "factors",
        }
    }

    /// Whether verify runs [`Session::forward_tree`] and committing is
    /// [`Session::commit_tree`] (no snapshot, no replay forward).
    fn commits(self) -> bool {
        matches!(
            self,
            RollbackMode::PerTokenStates | RollbackMode::FactorReplay
        )
    }
}

/// The replay forward's options: its outputs are not needed, since the verify rows already
/// gave the logits and features of these positions (causal attention, same prefix).
fn replay_opts() -> GraphOptions {
    GraphOptions {
        logits: LogitRows::Last,
        argmax: false,
        capture: Vec::new(),
        read_logits: false,
    }
}

/// The rollback strategy of one sequence, with the buffers it reuses across rounds.
/// Call [`Rollback::release`] when the sequence ends.
pub struct Rollback {
    mode: RollbackMode,
    snap: Option<Snapshot>,
    /// RecurrentHost: `(state name, values)` of every DeltaNet buffer, and the position.
    host: Vec<(String, Vec<f32>)>,
    host_pos: usize,
}

impl Rollback {
    pub fn new(mode: RollbackMode) -> Result<Rollback, SpecError> {
        Ok(Rollback {
            mode,
            snap: None,
            host: Vec::new(),
            host_pos: 0,
        })
    }

    pub fn mode(&self) -> RollbackMode {
        self.mode
    }

    /// Prepares a session for verifies of up to `rows` rows (per-token states: allocates the
    /// per-row buffers; best before the prompt, see [`Session::reserve_tree_rows`]).
    pub fn prepare(&self, s: &mut Session<'_>, rows: usize) -> Result<(), SpecError> {
        match self.mode {
            RollbackMode::PerTokenStates => s.reserve_tree_rows(rows)?,
            RollbackMode::FactorReplay => s.reserve_log_rows(rows)?,
            _ => {}
        }
        Ok(())
    }

    /// The verify forward over `rows` (the root then the drafts), after
    /// [`Rollback::before_verify`]. The position has advanced past `rows` afterwards, except with
    /// per-token states, where [`Rollback::finish`] commits.
    fn verify(
        &mut self,
        s: &mut Session<'_>,
        rows: &[u32],
        opts: &GraphOptions,
    ) -> Result<crate::model::session::StepOutput, SpecError> {
        if self.tree_verify(s, rows.len()) {
            let parents: Vec<i32> = (0..rows.len() as i32).map(|i| i - 1).collect();
            return Ok(s.forward_tree(rows, &parents, opts)?);
        }
        Ok(s.forward(rows, opts)?)
    }

    /// Whether a verify of `rows` rows goes through [`Session::forward_tree`] (per-token
    /// states). A lone root does too where verifies run at one fixed width (wgpu): that graph
    /// is compiled already, a 1-row graph with every row's logits would be one more.
    fn tree_verify(&self, s: &Session<'_>, rows: usize) -> bool {
        self.mode.commits() && (rows > 1 || (s.tree_rows() >= rows && s.fixed_verify_width()))
    }

    /// After [`Rollback::verify`] of `rows` from position `base`: keeps the first `keep`.
    fn finish(
        &mut self,
        s: &mut Session<'_>,
        base: usize,
        rows: &[u32],
        keep: usize,
    ) -> Result<(), SpecError> {
        if self.tree_verify(s, rows.len()) {
            let path: Vec<usize> = (0..keep).collect();
            s.commit_tree(&path)?;
        } else if keep < rows.len() {
            self.rollback(s, base, &rows[..keep])?;
        }
        Ok(())
    }

    /// Called right before a verify forward of `rows` > 1 rows.
    fn before_verify(&mut self, s: &mut Session<'_>, rows: usize) -> Result<(), SpecError> {
        match self.mode {
            RollbackMode::SnapshotReplay => match &mut self.snap {
                Some(snap) => s.snapshot_into(snap)?,
                None => self.snap = Some(s.snapshot()?),
            },
            RollbackMode::RecurrentHost => {
                if self.host.is_empty() {
                    let m = s.model();
                    for (i, kind) in m.cfg.layers.iter().enumerate() {
                        if *kind == crate::model::LayerKind::DeltaNet {
                            self.host.push((crate::state::conv_state(i), Vec::new()));
                            self.host.push((crate::state::ssm_state(i), Vec::new()));
                        }
                    }
                }
                for (name, data) in &mut self.host {
                    *data = s.read_state(name)?;
                }
                self.host_pos = s.pos();
            }
            // Nothing to save (the verify leaves the live state alone); only room needed.
            RollbackMode::PerTokenStates => s.reserve_tree_rows(rows)?,
            RollbackMode::FactorReplay => s.reserve_log_rows(rows)?,
        }
        Ok(())
    }

    /// Brings the state to `base + keep.len()` after a verify that went further: `keep` are
    /// the rows to keep (root + accepted drafts), `base` the position before verify.
    fn rollback(
        &mut self,
        s: &mut Session<'_>,
        base: usize,
        keep: &[u32],
    ) -> Result<(), SpecError> {
        match self.mode {
            RollbackMode::SnapshotReplay => {
                let snap = self.snap.as_ref().expect("snapshot taken before verify");
                debug_assert_eq!(snap.pos, base);
                s.restore(snap)?;
                // The replay's outputs are not needed: the verify rows already gave the
                // logits and features of these positions (causal attention, same prefix).
                s.forward(keep, &replay_opts())?;
            }
            RollbackMode::RecurrentHost => {
                debug_assert_eq!(self.host_pos, base);
                for (name, data) in &self.host {
                    let st = s.states();
                    s.backend().write_state(st, name, data)?;
                }
                s.rewind_position(base);
                s.forward(keep, &replay_opts())?;
            }
            RollbackMode::PerTokenStates | RollbackMode::FactorReplay => {
                return Err(SpecError::Invalid(format!(
                    "{} rollback commits rows; it never replays a forward",
                    self.mode.name()
                )));
            }
        }
        debug_assert_eq!(s.pos(), base + keep.len());
        Ok(())
    }

    /// Frees the reusable buffers.
    pub fn release(self, s: &mut Session<'_>) -> Result<(), SpecError> {
        if let Some(snap) = self.snap {
            s.release(snap)?;
        }
        Ok(())
    }
}

/// The session's position and the positions left after it (at least one: the root), or a
/// full-context error.
pub(super) fn room(s: &Session<'_>) -> Result<(usize, usize), SpecError> {
    let base = s.pos();
    let room = s.ctx().saturating_sub(base);
    if room == 0 {
        return Err(crate::model::ModelError::ContextFull {
            need: base + 1,
            cap: s.ctx(),
        }
        .into());
    }
    Ok((base, room))
}

/// The outcome of one chain round.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChainRound {
    /// Drafts verified (v_len − 1).
    pub drafted: usize,
    /// Drafts accepted (a).
    pub accepted: usize,
    /// The accepted drafts then the bonus token (a + 1 tokens); the bonus is the next root.
    pub emitted: Vec<u32>,
    pub draft_s: f64,
    pub verify_s: f64,
    /// Snapshot before verify + restore and replay after it.
    pub rollback_s: f64,
    /// Handing the committed rows' features to the drafter.
    pub commit_s: f64,
}

impl ChainRound {
    pub fn bonus(&self) -> u32 {
        *self
            .emitted
            .last()
            .expect("a round emits at least the bonus")
    }
}

/// Length of the longest prefix with `drafts[i] == argmax[i]` (z-lab
/// `cumprod(block[1:] == post[:-1]).sum()`).
pub fn accept_len(drafts: &[u32], argmax: &[u32]) -> usize {
    drafts
        .iter()
        .zip(argmax)
        .take_while(|(d, t)| d == t)
        .count()
}

/// How verified drafts are accepted.
pub enum Accept<'r> {
    /// The longest prefix matching the target's argmax; the bonus is the argmax after it.
    Greedy,
    /// Speculative sampling: rejection against the drafter's distribution (see
    /// [`super::sample`]); lossless for the target's distribution under `sampling`.
    Sample {
        sampling: Sampling,
        rng: &'r mut Rng,
    },
}

/// Runs one greedy chain round after `root` with at most `max` drafts (also limited by the
/// drafter's block and the context left). On return the target has processed root + the
/// accepted drafts, the drafter has been handed their features, and the bonus is the next
/// root.
pub fn chain_round(
    s: &mut Session<'_>,
    drafter: &mut dyn Drafter,
    rollback: &mut Rollback,
    root: u32,
    max: usize,
) -> Result<ChainRound, SpecError> {
    chain_round_with(s, drafter, rollback, root, max, &mut Accept::Greedy)
}

/// [`chain_round`] with a chosen accept rule.
pub fn chain_round_with(
    s: &mut Session<'_>,
    drafter: &mut dyn Drafter,
    rollback: &mut Rollback,
    root: u32,
    max: usize,
    accept: &mut Accept<'_>,
) -> Result<ChainRound, SpecError> {
    let (base, room) = room(s)?;
    let max = max.min(drafter.max_draft()).min(room - 1);
    let layers = drafter.feature_layers();
    let width = s.model().cfg.hidden;
    let vocab = s.model().cfg.vocab;
    let sampling = match accept {
        Accept::Greedy => Sampling::greedy(),
        Accept::Sample { sampling, .. } => *sampling,
    };

    let t0 = Instant::now();
    let mut draft = if max > 0 {
        let req = DraftRequest {
            root,
            max,
            sampling,
        };
        drafter.propose(&mut env(s), &req)?
    } else {
        super::Draft::default()
    };
    if draft.tokens.len() > max {
        draft.tokens.truncate(max);
        if let Some(q) = &mut draft.probs {
            q.truncate(max * vocab);
        }
    }
    let t1 = Instant::now();

    let mut rows = Vec::with_capacity(draft.tokens.len() + 1);
    rows.push(root);
    rows.extend_from_slice(&draft.tokens);
    if !draft.tokens.is_empty() {
        rollback.before_verify(s, rows.len())?;
    }
    let t2 = Instant::now();
    let opts = GraphOptions {
        logits: LogitRows::All,
        argmax: true,
        capture: layers.clone(),
        // Greedy acceptance reads only the argmax.
        read_logits: matches!(accept, Accept::Sample { .. }),
    };
    let out = rollback.verify(s, &rows, &opts)?;
    let t3 = Instant::now();

    let (a, next) = match accept {
        Accept::Greedy => {
            let a = accept_len(&draft.tokens, &out.argmax);
            (a, out.argmax[a])
        }
        Accept::Sample { sampling, rng } => {
            let p: Vec<f32> = out
                .logits
                .chunks(vocab)
                .flat_map(|row| sampling.probs(row))
                .collect();
            accept_sampled(&draft.tokens, draft.probs.as_deref(), &p, vocab, rng)?
        }
    };
    let keep = a + 1;
    rollback.finish(s, base, &rows, keep)?;
    let t4 = Instant::now();

    let feats = Features::from_step(out.hidden, &layers, base, rows.len(), width)?;
    let feats = if keep < rows.len() {
        feats.prefix(keep)
    } else {
        feats
    };
    drafter.commit(&mut env(s), &rows[..keep], &feats)?;
    let t5 = Instant::now();

    let mut emitted = draft.tokens[..a].to_vec();
    emitted.push(next);
    Ok(ChainRound {
        drafted: draft.tokens.len(),
        accepted: a,
        emitted,
        draft_s: (t1 - t0).as_secs_f64(),
        verify_s: (t3 - t2).as_secs_f64(),
        rollback_s: (t2 - t1).as_secs_f64() + (t4 - t3).as_secs_f64(),
        commit_s: (t5 - t4).as_secs_f64(),
    })
}
