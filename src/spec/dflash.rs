//! The DFlash drafter ([`crate::model::draft`]) behind the spec loop's [`Drafter`] interface.
//!
//! The drafter's resources (its weight set, context K/V caches and compiled draft graphs) live
//! on the **target's backend**, which the loop lends on every call through [`DraftEnv`]; between
//! calls they are held as [`DraftParts`] and a [`DraftSession`] is rebuilt around the borrowed
//! backend for each call.
//!
//! Protocol mapping (see [`Drafter`]):
//! - `commit(tokens, features)`: the committed rows' features are turned into drafter context
//!   rows ([`context_features`]: the declared `target_layer_ids` concatenated, the target's last
//!   layer final-normed) and stored in the per-sequence [`FeatureRing`] (bf16 by default; the
//!   drafter's window + block rows when every layer is windowed, else the whole sequence);
//! - `propose(root)`: one draft graph appends the ring's rows not yet in the context caches
//!   (from the caches' `n_ctx`, or from the ring's oldest row for a windowed drafter) at their
//!   positions and drafts the block `[root, MASK × (B−1)]` at the root's position (the target's
//!   position), giving `B−1` proposals in one forward. The block's own K/V rows are written past
//!   the committed rows and overwritten by the next append, so a rejected draft needs no
//!   rollback on the drafter side: only committed rows ever become context.
//!
//! Sharing the target's `token_embd` / `output` weights: the drafter's weight set is
//! [`DFlash::weights_with_target`], which inserts the *target's* host tensors. On the CPU
//! backend a weight set holds host handles (mmap-backed or `Arc`'d), so nothing is copied. A
//! GPU backend (wgpu, hip) copies every tensor of an uploaded set to the device today, so the
//! embedding and lm_head would be resident twice (≈ 2 × 2.5 GB at 27B shape). What a GPU
//! backend needs to share them instead: either `upload_weights` deduplicating by host-tensor
//! identity (same mmap region / `Arc` → the same ref-counted device buffer), or a `run` that
//! binds names missing from the drafter's set from a second set (the target's
//! [`DraftEnv::target_weights`]). Until then GPU runs are correct but pay that memory.

use super::confidence::{Gate, GateConfig};
use super::sample::draw;
use super::{Draft, DraftEnv, DraftRequest, Drafter, Features, SpecError};
use crate::backend::{Backend, StateDecl, StatesId};
use crate::model::Qwen35;
use crate::model::draft::convert::{OutType, convert_dflash};
use crate::model::draft::{
    DFlash, DraftOut, DraftParts, DraftSession, FeatureDtype, FeatureRing, context_features,
};
use crate::model::session::StepOutput;
use crate::util::rng::Rng;
use std::path::Path;

/// Loads a drafter model: a `qwen35-dflash-draft` GGUF file, or a checkpoint directory
/// (config.json + safetensors) converted to a temporary f32 GGUF first (the same converter as
/// `deltaspec convert --draft`).
pub fn load_model(path: &Path) -> Result<DFlash, SpecError> {
    if !path.is_dir() {
        return Ok(DFlash::load(path)?);
    }
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = std::env::temp_dir().join(format!(
        "deltaspec-drafter-{}-{k}-{}.gguf",
        std::process::id(),
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    convert_dflash(path, &tmp, OutType::F32)?;
    let m = DFlash::load(&tmp);
    // The loaded tensors are mapped or read; the file can go.
    let _ = std::fs::remove_file(&tmp);
    Ok(m?)
}

/// Opens the drafter at `path` for `target` behind [`Drafter`]: DFlash / DSpark (seeded with
/// `seed` for sampled proposals), or DFlash2 when the drafter declares the `dflash2` keys.
pub fn open_any(path: &Path, target: &Qwen35, seed: u64) -> Result<Box<dyn Drafter>, SpecError> {
    open_any_with(path, target, seed, &DrafterOptions::default())
}

/// [`open_any`] with options (ignored by drafters they do not apply to: DFlash2 has no
/// confidence head).
pub fn open_any_with(
    path: &Path,
    target: &Qwen35,
    seed: u64,
    opts: &DrafterOptions,
) -> Result<Box<dyn Drafter>, SpecError> {
    let model = load_model(path)?;
    if model.cfg.dflash2.is_some() {
        return Ok(Box::new(
            super::dflash2::DFlash2Drafter::new(model, target)?
                .with_seed(seed)
                .with_source(path)
                .with_feature_dtype(opts.feature_dtype),
        ));
    }
    let mut d = DFlashDrafter::new(model, target)?
        .with_seed(seed)
        .with_options(opts);
    d.source = path.display().to_string();
    Ok(Box::new(d))
}

/// Context rows the caches hold at first (they grow by doubling as the context does).
pub const DEFAULT_CAPACITY: usize = 512;

/// The cache rows to grow to when a draft needs `need` rows and the caches hold `cap`: twice
/// the old size, and at least 1.5 × `need`. A growth copies every cache through host memory and
/// recompiles (and re-captures) the draft graphs, which depend on the capacity. Growing to just
/// `need` after a long first commit (a 1024-row prompt: 1032 rows) left 8 rows of headroom, so
/// the growth came two rounds later, inside `bench draft`'s timed steps (~30 ms in 16 steps).
pub fn grown_capacity(need: usize, cap: usize) -> usize {
    (need + need / 2).max(2 * cap)
}

/// A DFlash (or DSpark-headed) drafter for one sequence at a time.
pub struct DFlashDrafter {
    model: DFlash,
    /// The session's resources between calls (None before the first [`Drafter::reset`]).
    parts: Option<DraftParts>,
    /// Identifies the backend `parts` live on: a one-value state set holding a random nonce.
    /// A reset whose backend does not hold it (another backend, maybe at the same address)
    /// starts over there; handles are per backend, so stale ones must never be used.
    owner: Option<(StatesId, f32)>,
    /// The committed context rows by position (bf16 by default); rows from the caches'
    /// `n_ctx` on are not yet appended to them.
    ring: FeatureRing,
    /// Initial cache capacity in context rows.
    capacity: usize,
    /// Draws proposals when the target samples (T > 0).
    rng: Rng,
    /// Where the drafter came from (for the name).
    source: String,
    /// DSpark confidence head: calibration and the optional gate (None without the head).
    gate: Option<Gate>,
    /// Print every round's raw and calibrated confidences to stderr.
    print_confidence: bool,
    /// The last chain proposal, for the calibration labels of the next commit.
    last: Option<LastDraft>,
}

/// A chain proposal awaiting its verify result.
struct LastDraft {
    /// Confidence logits of every offered draft (the kept ones first).
    z: Vec<f32>,
    /// Calibrated probabilities of every offered draft.
    calibrated: Vec<f32>,
    /// Kept drafts.
    tokens: Vec<u32>,
    offered: usize,
    explore: bool,
}

/// Options of the DFlash / DSpark drafter (the CLI's `--dspark-*` flags).
#[derive(Clone, Debug, Default)]
pub struct DrafterOptions {
    /// The DSpark confidence gate and its calibration (threshold None: off).
    pub gate: GateConfig,
    /// Print per-round raw and calibrated confidences to stderr.
    pub print_confidence: bool,
    /// Storage type of the per-sequence feature ring (bf16 by default).
    pub feature_dtype: FeatureDtype,
}

fn drafter_err(msg: impl Into<String>) -> SpecError {
    SpecError::Drafter {
        name: "dflash".into(),
        msg: msg.into(),
    }
}

const OWNER: &str = "dflash.owner";

/// Whether `owner` is a state set of `b` holding the nonce.
pub(crate) fn owns(b: &mut dyn Backend, owner: Option<(StatesId, f32)>) -> bool {
    owner.is_some_and(|(id, nonce)| {
        b.read_state(id, OWNER)
            .is_ok_and(|v| v.len() == 1 && v[0] == nonce)
    })
}

/// A fresh owner mark on `b`: a one-value state set holding a process-unique nonce.
pub(crate) fn new_owner(b: &mut dyn Backend) -> Result<(StatesId, f32), SpecError> {
    let id = b.alloc_states(&[StateDecl::new(OWNER, &[1])])?;
    // Unique in the process (integers below 2^24 are exact in f32).
    static NONCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let nonce = (NONCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0xff_ffff) as f32;
    b.write_state(id, OWNER, &[nonce])?;
    Ok((id, nonce))
}

impl DFlashDrafter {
    /// Wraps a loaded drafter after checking it fits `target`: hidden size, vocab, mask token,
    /// target depth and layer ids ([`crate::model::draft::DFlashConfig::check_target`]), that
    /// the graph implements its configuration (no YaRN yet), and that the target has the
    /// embedding and lm_head the drafter binds.
    pub fn new(model: DFlash, target: &Qwen35) -> Result<DFlashDrafter, SpecError> {
        model.cfg.check_target(&target.cfg)?;
        model.cfg.check_supported()?;
        model.weights_with_target(target)?;
        let ring = FeatureRing::for_drafter(&model.cfg, FeatureDtype::default());
        let conf = model
            .cfg
            .dspark
            .as_ref()
            .is_some_and(|d| d.confidence_dim.is_some());
        Ok(DFlashDrafter {
            gate: conf.then(|| Gate::new(GateConfig::default())),
            print_confidence: false,
            last: None,
            model,
            parts: None,
            owner: None,
            ring,
            capacity: DEFAULT_CAPACITY,
            rng: Rng::new(0x0df1a5),
            source: String::new(),
        })
    }

    /// Opens a drafter for `target`: a `qwen35-dflash-draft` GGUF file, or a z-lab layout
    /// checkpoint directory (config.json + model.safetensors), converted to a temporary f32
    /// GGUF first (the same converter as `deltaspec convert --draft`).
    pub fn open(path: &Path, target: &Qwen35) -> Result<DFlashDrafter, SpecError> {
        let model = load_model(path)?;
        let mut d = DFlashDrafter::new(model, target).map_err(|e| match e {
            SpecError::Model(m) => drafter_err(format!("{}: {m}", path.display())),
            other => other,
        })?;
        d.source = path.display().to_string();
        Ok(d)
    }

    /// Sets the initial capacity of the context caches (rows; they still grow on demand).
    pub fn with_capacity(mut self, rows: usize) -> Self {
        self.capacity = rows.max(1);
        self
    }

    /// Applies options: the confidence gate's settings (a drafter without a confidence head
    /// ignores them) and the debug print.
    pub fn with_options(mut self, opts: &DrafterOptions) -> Self {
        if let Some(g) = &mut self.gate {
            *g = Gate::new(opts.gate.clone());
        }
        self.print_confidence = opts.print_confidence;
        self.with_feature_dtype(opts.feature_dtype)
    }

    /// Stores the committed context rows as `dtype` (forgets the rows held so far: call it
    /// before the first sequence).
    pub fn with_feature_dtype(mut self, dtype: FeatureDtype) -> Self {
        self.ring = FeatureRing::for_drafter(&self.model.cfg, dtype);
        self
    }

    /// Replaces the feature ring (tests: another capacity or dtype than the drafter's own).
    pub fn with_feature_ring(mut self, ring: FeatureRing) -> Self {
        self.ring = ring;
        self
    }

    /// The per-sequence feature ring.
    pub fn ring(&self) -> &FeatureRing {
        &self.ring
    }

    /// The confidence gate (DSpark drafters with a confidence head).
    pub fn gate(&self) -> Option<&Gate> {
        self.gate.as_ref()
    }

    /// Seeds the draw of proposals under sampling (T > 0).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = Rng::new(seed);
        self
    }

    pub fn model(&self) -> &DFlash {
        &self.model
    }

    /// Context rows in the caches plus pending ones.
    pub fn context_rows(&self) -> usize {
        self.ring.end()
    }

    fn parts(&mut self) -> Result<DraftParts, SpecError> {
        self.parts
            .take()
            .ok_or_else(|| drafter_err("used before reset (no draft session)"))
    }
}

impl Drafter for DFlashDrafter {
    fn name(&self) -> String {
        let c = &self.model.cfg;
        let kind = if c.dspark.is_some() {
            "dspark"
        } else {
            "dflash"
        };
        format!(
            "{kind} (block {}, {} layers){}",
            c.block_size,
            c.n_layers,
            if self.source.is_empty() {
                String::new()
            } else {
                format!(" {}", self.source)
            }
        )
    }

    fn feature_layers(&self) -> Vec<usize> {
        self.model.cfg.target_layer_ids.clone()
    }

    fn report(&self) -> Option<serde_json::Value> {
        self.gate
            .as_ref()
            .map(|g| serde_json::json!({ "confidence": g.report() }))
    }

    fn max_draft(&self) -> usize {
        self.model.cfg.block_size - 1
    }

    fn reset(&mut self, env: &mut DraftEnv<'_>) -> Result<(), SpecError> {
        // The calibration is the drafter's, not the sequence's: it carries over.
        self.last = None;
        self.ring.clear();
        let same = self.parts.is_some() && owns(env.backend, self.owner);
        match self.parts.take() {
            Some(p) if same => {
                let mut ds = DraftSession::from_parts(&self.model, &mut *env.backend, p);
                ds.truncate(0);
                self.parts = Some(ds.into_parts());
            }
            // None yet, or they live on another backend (abandoned: that backend's handles
            // cannot be freed through this one).
            _ => {
                let cap = self.capacity + self.model.cfg.block_size;
                let ds = DraftSession::new(&self.model, env.target, &mut *env.backend, cap)?;
                self.parts = Some(ds.into_parts());
                self.owner = Some(new_owner(&mut *env.backend)?);
            }
        }
        Ok(())
    }

    fn commit(
        &mut self,
        env: &mut DraftEnv<'_>,
        tokens: &[u32],
        features: &Features,
    ) -> Result<(), SpecError> {
        let n_ctx = self
            .parts
            .as_ref()
            .ok_or_else(|| drafter_err("commit before reset"))?
            .n_ctx();
        if features.rows != tokens.len() {
            return Err(drafter_err(format!(
                "{} tokens committed with {} feature rows",
                tokens.len(),
                features.rows
            )));
        }
        self.label(tokens);
        let end = self.ring.end();
        if features.start > end {
            return Err(drafter_err(format!(
                "committed rows start at position {}, the drafter's context ends at {end}",
                features.start
            )));
        }
        if features.start < end {
            // The caller went back (not done by the spec loop, which commits only accepted
            // rows): forget the rows from `start` on, in the caches and in the ring.
            if features.start < n_ctx {
                let p = self.parts()?;
                let mut ds = DraftSession::from_parts(&self.model, &mut *env.backend, p);
                ds.truncate(features.start);
                self.parts = Some(ds.into_parts());
            }
            self.ring.truncate(features.start);
        }
        if features.rows == 0 {
            return Ok(());
        }
        let step = StepOutput {
            hidden: features.layers.clone(),
            rows: features.rows,
            ..Default::default()
        };
        let rows = context_features(&self.model, env.target, &step, features.rows)?;
        self.ring.push(&rows)?;
        Ok(())
    }

    fn propose(&mut self, env: &mut DraftEnv<'_>, req: &DraftRequest) -> Result<Draft, SpecError> {
        // A greedy chain needs only the proposals (and confidences): the block's logits stay
        // on the device. Sampling draws from them.
        let kind = if req.sampling.is_greedy() {
            DraftOut::Tokens
        } else {
            DraftOut::Logits
        };
        let (out, n) = self.run_draft(env, req, kind)?;
        let n = self.gate_chain(&out, n);
        if req.sampling.is_greedy() {
            return Ok(Draft::greedy(out.tokens[..n].to_vec()));
        }
        let d = self.sample(env, req, &out, n)?;
        // Labels then compare the drawn tokens with what was accepted.
        if let Some(last) = &mut self.last {
            last.tokens.clone_from(&d.tokens);
        }
        Ok(d)
    }

    /// Top-k of each block row's logits (the DSpark-corrected ones when the head is on). The
    /// block is drafted in one parallel forward, so a position's candidates do not depend on
    /// the tokens before it: one list per depth serves every branch of the tree.
    ///
    /// The top-k and each row's log-softmax normaliser are computed on the device
    /// ([`DraftOut::TopK`]): only `k + 1` values per row come back, not the `[B−1, vocab]`
    /// logits (15 MB at a 248k vocab, then a host top-k over every row: ~40 ms per tree
    /// round on the H200 against ~5 ms for a chain draft). On the CPU backend the values are
    /// those of [`super::top_logprobs`] bit for bit (same selection order for distinct values,
    /// same normaliser code). A GPU sums the normaliser as a tree, the CPU in index order:
    /// at a 248k vocab they differ by ~1e-5 relative (a shift of every log-prob of that
    /// depth; the candidates and their order within a depth are the same).
    fn propose_topk(
        &mut self,
        env: &mut DraftEnv<'_>,
        req: &DraftRequest,
        k: usize,
    ) -> Result<Vec<Vec<(u32, f32)>>, SpecError> {
        // A tree has its own budget: no gate, and its commit labels nothing.
        self.last = None;
        let k = k.clamp(1, env.target.cfg.vocab);
        let (out, n) = self.run_draft(env, req, DraftOut::TopK(k))?;
        if out.topk_values.len() < n * k
            || out.topk_indices.len() < n * k
            || out.logsumexp.len() < n
        {
            return Err(drafter_err(format!(
                "top-{k} of {} values, {} indices, {} normalisers for {n} positions",
                out.topk_values.len(),
                out.topk_indices.len(),
                out.logsumexp.len()
            )));
        }
        Ok((0..n)
            .zip(&out.tokens)
            .map(|(r, &tok)| {
                let lse = out.logsumexp[r];
                let mut c: Vec<(u32, f32)> = out.topk_indices[r * k..(r + 1) * k]
                    .iter()
                    .zip(&out.topk_values[r * k..(r + 1) * k])
                    .map(|(&i, &v)| (i, v - lse))
                    .collect();
                // The chain's token leads (equal to the argmax but for exact ties).
                if let Some(i) = c.iter().position(|(t, _)| *t == tok) {
                    let e = c.remove(i);
                    c.insert(0, e);
                }
                c
            })
            .collect())
    }
}

impl DFlashDrafter {
    /// The confidence gate on a chain of `n` proposals: how many to keep (all without a
    /// confidence head or with the gate off). Remembers the round for [`Self::label`].
    fn gate_chain(&mut self, out: &crate::model::draft::DraftOutput, n: usize) -> usize {
        self.last = None;
        let Some(gate) = &mut self.gate else {
            return n;
        };
        if out.confidence_logit.len() < n {
            return n;
        }
        let z = &out.confidence_logit[..n];
        let d = gate.decide(z);
        self.last = Some(LastDraft {
            z: z.to_vec(),
            calibrated: d.calibrated,
            tokens: out.tokens[..d.keep].to_vec(),
            offered: n,
            explore: d.explore,
        });
        d.keep
    }

    /// Calibration labels from a commit that follows a chain proposal: `tokens` are the root
    /// then the accepted drafts. Position `i < a` was accepted, position `a` rejected (when
    /// verified). Under a replay wrapper the verified chain is not this drafter's; its
    /// proposals are then labelled by how far they match the committed continuation.
    fn label(&mut self, tokens: &[u32]) {
        let (Some(last), Some(gate)) = (self.last.take(), &mut self.gate) else {
            return;
        };
        let committed = tokens.get(1..).unwrap_or(&[]);
        let a = super::chain::accept_len(&last.tokens, committed);
        let kept = last.tokens.len();
        gate.observe(&last.z[..kept.min(last.z.len())], a);
        if self.print_confidence {
            let f = |v: &[f32]| {
                v.iter()
                    .map(|x| format!("{x:.3}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let raw: Vec<f32> = last.z.iter().map(|z| 1.0 / (1.0 + (-z).exp())).collect();
            eprintln!(
                "[confidence] round {}: kept {}/{}{} accepted {a}; raw [{}] calibrated [{}]",
                gate.stats.rounds,
                kept,
                last.offered,
                if last.explore { " (explore)" } else { "" },
                f(&raw),
                f(&last.calibrated),
            );
        }
    }

    /// Runs the draft graph for `req`: the block's output (with the extra outputs `kind`) and
    /// how many proposals to use.
    fn run_draft(
        &mut self,
        env: &mut DraftEnv<'_>,
        req: &DraftRequest,
        kind: DraftOut,
    ) -> Result<(crate::model::draft::DraftOutput, usize), SpecError> {
        let bsz = self.model.cfg.block_size;
        let p = self.parts()?;
        let mut ds = DraftSession::from_parts(&self.model, &mut *env.backend, p);
        // The rows not yet in the caches; for a windowed drafter, rows that fell out of the
        // ring are out of every future block's window and are skipped.
        let from = ds.n_ctx().max(self.ring.start());
        ds.skip_to(from);
        let end = self.ring.end();
        let need = end + bsz;
        let grown = if need > ds.cap() {
            ds.reserve(grown_capacity(need, ds.cap()))
        } else {
            Ok(())
        };
        let out = grown
            .and_then(|()| self.ring.read(from, end))
            .and_then(|feats| ds.draft_out(&feats, req.root, kind));
        self.parts = Some(ds.into_parts());
        let out = out?;

        let n = req.max.min(bsz - 1).min(out.tokens.len());
        Ok((out, n))
    }

    /// T > 0: the proposals drawn from the drafter's distribution, with it.
    fn sample(
        &mut self,
        env: &mut DraftEnv<'_>,
        req: &DraftRequest,
        out: &crate::model::draft::DraftOutput,
        n: usize,
    ) -> Result<Draft, SpecError> {
        // T > 0: draw each proposal from the drafter's own distribution under the target's
        // temperature / top-p. The block's rows are computed in one parallel forward, so q_i
        // does not depend on the drawn d_{<i}; it is still a fixed distribution given the
        // context, which is all the rejection rule needs to stay lossless.
        let vocab = env.target.cfg.vocab;
        if out.logits.len() < n * vocab {
            return Err(drafter_err(format!(
                "{} logits for {n} proposals over a vocab of {vocab}",
                out.logits.len()
            )));
        }
        let mut tokens = Vec::with_capacity(n);
        let mut probs = Vec::with_capacity(n * vocab);
        for row in out.logits.chunks_exact(vocab).take(n) {
            let q = req.sampling.probs(row);
            tokens.push(draw(&q, &mut self.rng));
            probs.extend_from_slice(&q);
        }
        Ok(Draft {
            tokens,
            probs: Some(probs),
        })
    }
}
