//! `deltaspec bench draft --model T --draft D [--backend ..] [-n N] [--ctx C] [--accept A]
//! [--seqs S] [--json]`: one drafter step against one target step, on the same backend.
//!
//! - target step: a verify-sized forward of `B` rows (B = the drafter's block size: the root
//!   and B−1 drafts) capturing the drafter's feature layers, as a chain round runs it;
//! - drafter step: one proposal through the [`Drafter`] protocol (DFlash, DSpark or DFlash2)
//!   after committing `A` new context rows (the accepted rows of a round), with `C` context
//!   rows committed before timing starts. With `--seqs S > 1` (DFlash2 only) one batched launch
//!   drafts for S sequences ([`BatchSession`]).
//!
//! Prints both times and the drafter-step / target-step ratio, and the weight bytes each step
//! streams: on a bandwidth-bound GPU the time ratio follows the bytes ratio, so a drafter's
//! weight type (Q8_0 against a 4-bit mix) sets what ratio is reachable at all. Feature rows are
//! random: the time of a step does not depend on the values.

use crate::backend;
use crate::model::draft::dflash2::{BatchSession, SeqDraft};
use crate::model::draft::{DFlash, names};
use crate::model::qwen35::{GraphOptions, LogitRows};
use crate::model::{Qwen35, Session};
use crate::spec::{DraftRequest, Features, Sampling};
use crate::util::rng::Rng;
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The target: a qwen35 GGUF file or an HF checkpoint directory.
    #[arg(long)]
    pub model: PathBuf,
    /// The drafter: a qwen35-dflash-draft GGUF file or a checkpoint directory.
    #[arg(long)]
    pub draft: PathBuf,
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Steps timed (each kind).
    #[arg(short = 'n', long, default_value_t = 32)]
    pub n: usize,
    /// Context rows committed to the drafter before timing.
    #[arg(long, default_value_t = 1024)]
    pub ctx: usize,
    /// New context rows the drafter appends per step (accepted drafts + 1).
    #[arg(long, default_value_t = 4)]
    pub accept: usize,
    /// Sequences drafted in one launch (DFlash2 only).
    #[arg(long, default_value_t = 1)]
    pub seqs: usize,
    /// Untimed target steps before timing run for at least this long (the GPU's clock, see
    /// `bench decode`).
    #[arg(long, default_value_t = 2000)]
    pub warmup_ms: u64,
    #[arg(long)]
    pub json: bool,
}

/// Untimed drafter rounds of `--accept` rows before timing (compile, then graph capture).
const WARMUP: usize = 2;

/// Weight bytes one drafter step streams: the drafter's tensors except the tables it gathers
/// rows from (the DFlash2 selector codebooks, the DSpark Markov embedding), plus the target's
/// lm_head it shares (the token embedding is gathered too).
fn drafter_step_bytes(d: &DFlash, m: &Qwen35) -> usize {
    let gathered = [names::SELECTOR_PRED, names::SELECTOR_SUCC, names::MARKOV_W1];
    let own: usize = d
        .weights
        .tensors
        .iter()
        .filter(|(n, _)| !gathered.contains(&n.as_str()))
        .map(|(_, t)| t.bytes().len())
        .sum();
    own + m.weights.get(names::OUTPUT).map_or(0, |t| t.bytes().len())
}

/// Random feature rows of `layers` for `rows` positions from `start`.
fn features(rng: &mut Rng, layers: &[usize], start: usize, rows: usize, h: usize) -> Features {
    Features {
        start,
        rows,
        width: h,
        layers: layers
            .iter()
            .map(|&l| (l, rng.vec_normal(rows * h, 1.0)))
            .collect(),
    }
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.n >= 1 && a.accept >= 1 && a.seqs >= 1,
        "-n, --accept and --seqs must be ≥ 1"
    );
    let mut be = backend::create(&a.backend)?;
    let name = be.name();
    let m = Qwen35::load(&a.model).with_context(|| format!("loading {}", a.model.display()))?;
    let mut drafter = crate::spec::dflash::open_any(&a.draft, &m, 0)
        .with_context(|| format!("opening {}", a.draft.display()))?;
    let bsz = drafter.max_draft() + 1;
    let layers = drafter.feature_layers();
    let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
    // A directory (an HF checkpoint) has no GGUF bytes to count: only files get the bytes line.
    let draft_bytes = if a.draft.is_file() {
        Some(drafter_step_bytes(&DFlash::load(&a.draft)?, &m))
    } else {
        None
    };
    let target_bytes = super::bench::bytes_per_token(&m);
    let h = m.cfg.hidden;
    let mut rng = Rng::new(1);

    // Target: verify-sized steps with feature capture.
    // Room for the timed and warm-up target steps, and for the one before every drafter round.
    let cap =
        a.ctx + (a.n + 2) * (bsz + a.accept) + (super::bench::WARM_MAX + 1 + WARMUP + a.n) * bsz;
    let mut s = Session::new(&m, be.as_mut(), cap)?;
    let opts = GraphOptions {
        logits: LogitRows::All,
        argmax: true,
        capture: layers.clone(),
        read_logits: false, // as a greedy verify
    };
    let block = vec![1u32; bsz];
    // Warm-up: the first run compiles the graph and touches the weights, the second captures
    // it (hip graphs), and more follow until the GPU runs at its working clock; timing after
    // that gives the steady state a spec loop pays.
    super::bench::warm_up(a.warmup_ms, || {
        s.forward(&block, &opts)?;
        Ok(())
    })?;
    let t = Instant::now();
    for _ in 0..a.n {
        s.forward(&block, &opts)?;
    }
    let target_ms = t.elapsed().as_secs_f64() * 1e3 / a.n as f64;

    // Drafter: commit the context, then time propose after each append of `accept` rows.
    let draft_ms = if a.seqs == 1 {
        let mut env = crate::spec::env(&mut s);
        drafter.reset(&mut env)?;
        let ctx_tokens = vec![1u32; a.ctx];
        let f = features(&mut rng, &layers, 0, a.ctx, h);
        drafter.commit(&mut env, &ctx_tokens, &f)?;
        let req = DraftRequest {
            root: 1,
            max: bsz - 1,
            sampling: Sampling::greedy(),
        };
        let pos = a.ctx;
        drafter.propose(&mut env, &req)?; // warm-up: the context append and the graphs
        let acc = vec![1u32; a.accept];
        let mut total = 0.0;
        // Two untimed rounds of `accept` rows: the first compiles that graph and runs it
        // directly, the second captures it (hip graphs); a spec loop pays that once per shape,
        // the steady state is what every later round costs.
        // Every round follows an untimed verify-sized target step, as in a spec loop: the
        // device is as busy and its caches as cold as there. Alone, the drafter rounds (a few
        // ms of GPU work between host round trips) let NVIDIA's Vulkan driver hold the clock
        // low (session 28, H100: the wgpu drafter step read 9.1 ms here after a 3 s warm-up,
        // against 3.6 ms a round inside a chain). Every round's features are drawn before the
        // loop, for the same reason.
        let rounds: Vec<Features> = (0..WARMUP + a.n)
            .map(|i| features(&mut rng, &layers, pos + i * a.accept, a.accept, h))
            .collect();
        for (i, f) in rounds.iter().enumerate() {
            s.forward(&block, &opts)?;
            let mut env = crate::spec::env(&mut s);
            drafter.commit(&mut env, &acc, f)?;
            if i == WARMUP {
                crate::backend::profile::reset();
            }
            let t = Instant::now();
            drafter.propose(&mut env, &req)?;
            if i >= WARMUP {
                total += t.elapsed().as_secs_f64();
            }
        }
        // DELTASPEC_PROFILE=1: where the drafter step's time goes (per node, synced).
        crate::backend::profile::report(a.n as f64);
        total * 1e3 / a.n as f64
    } else {
        batched(a, &m, &mut s, bsz, &mut rng)?
    };
    let ratio = draft_ms / target_ms;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "backend": name, "model": a.model.display().to_string(),
                "draft": a.draft.display().to_string(), "drafter": drafter.name(),
                "block": bsz, "ctx": a.ctx, "accept": a.accept, "seqs": a.seqs, "n": a.n,
                "warmup": WARMUP,
                "target_step_ms": target_ms, "draft_step_ms": draft_ms,
                "draft_to_target_ratio": ratio,
                "draft_step_weight_bytes": draft_bytes, "target_step_weight_bytes": target_bytes,
            })
        );
    } else {
        println!("backend:      {name}");
        println!("drafter:      {}", drafter.name());
        println!("target step:  {target_ms:.3} ms ({bsz} rows, verify-sized, with capture)");
        println!(
            "drafter step: {draft_ms:.3} ms ({} seq, +{} ctx rows after {}, block {bsz})",
            a.seqs, a.accept, a.ctx
        );
        println!("ratio:        {ratio:.3} (drafter step / target step)");
        if let Some(db) = draft_bytes {
            println!(
                "weights:      {:.3} GiB a drafter step (with the target's lm_head), {:.3} GiB a target step: bytes ratio {:.3}",
                gib(db),
                gib(target_bytes),
                db as f64 / target_bytes as f64
            );
        }
    }
    Ok(())
}

/// One batched DFlash2 launch for `--seqs` sequences per step (random context rows).
fn batched(
    a: &Args,
    m: &Qwen35,
    s: &mut Session<'_>,
    bsz: usize,
    rng: &mut Rng,
) -> anyhow::Result<f64> {
    let d = crate::spec::dflash::load_model(&a.draft)?;
    anyhow::ensure!(
        d.cfg.dflash2.is_some(),
        "--seqs > 1 needs a DFlash2 drafter (batched launches)"
    );
    let width = d.cfg.feature_width();
    let cap = a.ctx + (a.n + 2) * a.accept + bsz;
    let mut bs = BatchSession::new(&d, m, s.backend(), a.seqs, cap)?;
    let mut step = |rows: usize| -> anyhow::Result<f64> {
        let feats: Vec<Vec<f32>> = (0..a.seqs)
            .map(|_| rng.vec_normal(rows * width, 1.0))
            .collect();
        let reqs: Vec<SeqDraft> = feats
            .iter()
            .map(|f| SeqDraft { feats: f, last: 1 })
            .collect();
        let t = Instant::now();
        bs.draft(&reqs, Default::default())?;
        Ok(t.elapsed().as_secs_f64())
    };
    step(a.ctx)?;
    for _ in 0..WARMUP {
        step(a.accept)?; // compiles, then captures the graph for `accept` rows
    }
    crate::backend::profile::reset();
    let mut total = 0.0;
    for _ in 0..a.n {
        total += step(a.accept)?;
    }
    crate::backend::profile::report(a.n as f64);
    Ok(total * 1e3 / a.n as f64)
}
