//! `deltaspec generate`: greedy decoding from a prompt or token ids, optionally speculative
//! (`--spec chain|tree|adaptive --draft D`, `--replay-profile` for benchmark-only proposals).

use super::tokens;
use crate::backend;
use crate::model::{Qwen35, Session};
use crate::sched::{PolicyConfig, Ratio};
use crate::spec::replay::{ReplayDrafter, ReplayProfile};
use crate::spec::{Drafter, RollbackMode, SpecConfig, SpecMode, StepKind};
use crate::util::rng::Rng;
use anyhow::{Context, bail};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A qwen35 GGUF file or an HF checkpoint directory.
    #[arg(long)]
    pub model: PathBuf,
    /// Prompt text (needs a tokenizer in the model).
    #[arg(long, conflicts_with = "tokens")]
    pub prompt: Option<String>,
    /// Prompt token ids: a JSON file or a comma-separated list.
    #[arg(long)]
    pub tokens: Option<String>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 32)]
    pub n: usize,
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Context size in positions (default: prompt + n).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Prefill chunk size.
    #[arg(long, default_value_t = 512)]
    pub chunk: usize,
    /// Keep going past the end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// Speculative decoding: off, chain (a chain round every step), tree (a DDTree round every
    /// step; with --temperature its children are tested one by one against the target), or adaptive (the single-request policy turns speculation off when
    /// it does not pay). Needs --draft.
    #[arg(long, default_value = "off", value_parser = ["off", "chain", "tree", "adaptive"])]
    pub spec: String,
    /// --spec tree: draft nodes per tree at most (the tree verifies budget + 1 rows).
    #[arg(long, default_value_t = 8)]
    pub tree_budget: usize,
    /// BENCHMARK ONLY: replace the drafter's proposals by the target's own greedy continuation
    /// (computed first by a plain run) cut by an acceptance profile: code, prose, mixed, or a
    /// mean accepted length. The drafter still runs at full cost. Never for real output.
    #[arg(long)]
    pub replay_profile: Option<String>,
    /// The drafter (GGUF) for --spec.
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Drafts per round at most (default: the drafter's block size − 1).
    #[arg(long)]
    pub max_draft: Option<usize>,
    /// Rollback of the DeltaNet state after a partial accept: snapshot (copy the whole state
    /// before verify, restore and replay the accepted rows), recurrent-host (copy only the
    /// DeltaNet state through host memory, move the position back, replay), per-token (verify
    /// writes every row's DeltaNet state, commit copies one) or factors (the default: verify
    /// logs every row's DeltaNet step inputs, commit replays the accepted ones; ~77× less
    /// verify memory than per-token at the 27B shape and faster on hip; trees always use
    /// per-token states).
    #[arg(long, default_value = "factors")]
    pub rollback: String,
    /// Adaptive policy: spec-step / plain-step time ratio: `live` (measured EMAs, 1.9 until
    /// measured), a fixed number, or 0 to disable the policy (always speculate).
    #[arg(long, default_value = "live")]
    pub spec_ratio: String,
    /// Adaptive policy: break-even margin (a_min = margin · (r − 1)).
    #[arg(long, default_value_t = 0.8)]
    pub policy_margin: f64,
    /// Adaptive policy: EMA alpha of accepted drafts per spec step.
    #[arg(long, default_value_t = 0.3)]
    pub accept_alpha: f64,
    /// Adaptive policy: EMA alpha of the probe after a plain burst (fast exit).
    #[arg(long, default_value_t = 0.5)]
    pub probe_alpha: f64,
    /// Adaptive policy: EMA alpha of the measured step times.
    #[arg(long, default_value_t = 0.2)]
    pub time_alpha: f64,
    /// Adaptive policy: plain steps per burst below break-even.
    #[arg(long, default_value_t = 40)]
    pub ar_burst: usize,
    /// Adaptive policy: burst length multiplier per failed probe in a row (1: fixed bursts).
    #[arg(long, default_value_t = 2.0)]
    pub burst_backoff: f64,
    /// Adaptive policy: longest burst the backoff may reach.
    #[arg(long, default_value_t = 640)]
    pub max_burst: usize,
    /// Adaptive policy (live ratio): bursts long enough that a probe's measured loss is at
    /// most this fraction of the burst's time (0: off).
    #[arg(long, default_value_t = 0.02)]
    pub probe_budget: f64,
    /// Adaptive policy: print every decision to stderr.
    #[arg(long)]
    pub policy_log: bool,
    #[command(flatten)]
    pub policy: super::policy_args::PolicyArgs,
    #[command(flatten)]
    pub sampling: super::sampling_args::SamplingArgs,
    /// Sampler seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub drafter: super::drafter_args::DrafterArgs,
}

impl Args {
    fn spec_mode(&self) -> anyhow::Result<SpecMode> {
        Ok(match self.spec.as_str() {
            "off" => SpecMode::Off,
            "chain" => SpecMode::Chain,
            "tree" => {
                if self.tree_budget == 0 {
                    bail!("--tree-budget must be at least 1");
                }
                SpecMode::Tree {
                    budget: self.tree_budget,
                }
            }
            _ => SpecMode::Adaptive(self.policy.apply(PolicyConfig {
                ratio: Ratio::parse(&self.spec_ratio).map_err(anyhow::Error::msg)?,
                margin: self.policy_margin,
                accept_alpha: self.accept_alpha,
                probe_alpha: self.probe_alpha,
                time_alpha: self.time_alpha,
                ar_burst: self.ar_burst,
                backoff: self.burst_backoff,
                max_burst: self.max_burst,
                probe_budget: self.probe_budget,
                ..PolicyConfig::default()
            })?),
        })
    }
}

/// Opens the drafter of `--draft` (DFlash, DSpark or DFlash2): a `qwen35-dflash-draft` GGUF
/// file, or a z-lab checkpoint directory (converted on the fly). Refuses one that does not fit the target.
pub(crate) fn open_drafter(
    path: &std::path::Path,
    target: &Qwen35,
    seed: u64,
    args: &super::drafter_args::DrafterArgs,
) -> anyhow::Result<Box<dyn Drafter>> {
    let opts = args.options()?;
    crate::spec::dflash::open_any_with(path, target, seed, &opts)
        .context("opening the drafter (--draft)")
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let mut be = backend::create(&a.backend)?;
    let m = Qwen35::load(&a.model).with_context(|| format!("loading {}", a.model.display()))?;
    let prompt: Vec<u32> = match (&a.prompt, &a.tokens) {
        (Some(text), None) => {
            let Some(tok) = &m.tokenizer else {
                bail!("{} has no tokenizer: pass --tokens", a.model.display());
            };
            tok.encode(text, true)?
        }
        (None, Some(spec)) => tokens::parse(spec)?,
        _ => bail!("give --prompt TEXT or --tokens IDS"),
    };
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    // Refused before any work rather than failing with "context full" halfway through.
    let need = prompt.len() + a.n;
    if let Some(c) = a.ctx
        && c < need
    {
        bail!(
            "--ctx {c} is too small: the prompt ({} tokens) and -n {} need {need} positions",
            prompt.len(),
            a.n
        );
    }
    let ctx = a.ctx.unwrap_or(need);
    let stop = if a.ignore_eos {
        None
    } else {
        m.tokenizer.as_ref().and_then(|t| t.eos())
    };
    let mode = a.spec_mode()?;
    let sampling = a.sampling.sampling()?;
    let rollback = RollbackMode::parse(&a.rollback)?;
    let drafter = match (&mode, &a.draft) {
        (SpecMode::Off, None) => None,
        (_, Some(d)) => Some(open_drafter(d, &m, a.seed ^ 0xd4af7, &a.drafter)?),
        (_, None) => bail!("--spec {} needs --draft", a.spec),
    };
    if a.replay_profile.is_some() && drafter.is_none() {
        bail!("--replay-profile needs --spec and --draft");
    }
    let drafter = match (drafter, &a.replay_profile) {
        (Some(d), Some(p)) => {
            let profile = ReplayProfile::parse(p).map_err(anyhow::Error::msg)?;
            if !sampling.is_greedy() {
                bail!("--replay-profile replays the greedy continuation: use greedy decoding");
            }
            // The continuation the replay proposes: plain greedy from the same prompt.
            let cont = {
                let mut s0 = Session::new(&m, be.as_mut(), ctx)?;
                s0.generate_greedy(&prompt, a.n, a.chunk, stop, |_| {})?
            };
            eprintln!(
                "REPLAY ({} profile): benchmark-only proposals (the target's own continuation \
                 cut by the profile); not a real drafter's output",
                profile.name()
            );
            let r = ReplayDrafter::new(d, profile, prompt.len(), cont, m.cfg.vocab, a.seed);
            Some(Box::new(r) as Box<dyn Drafter>)
        }
        (d, _) => d,
    };
    let mut s = Session::new(&m, be.as_mut(), ctx)?;
    if let Some(d) = drafter {
        let cfg = SpecConfig {
            n: a.n,
            chunk: a.chunk,
            stop,
            mode,
            max_draft: a.max_draft.unwrap_or(usize::MAX),
            rollback,
            sampling,
            seed: a.seed,
        };
        return run_spec(a, &m, &mut s, d, &prompt, &cfg);
    }

    let t0 = Instant::now();
    let mut first_at = None;
    let stream = !a.json;
    let tok = m.tokenizer.as_ref();
    let mut out = std::io::stdout();
    let on_token = |id| {
        first_at.get_or_insert_with(Instant::now);
        if stream {
            match tok.and_then(|t| t.decode(&[id], false).ok()) {
                Some(text) => print!("{text}"),
                None => print!("{id} "),
            }
            let _ = out.flush();
        }
    };
    let generated = if sampling.is_greedy() {
        s.generate_greedy(&prompt, a.n, a.chunk, stop, on_token)?
    } else {
        let mut rng = Rng::new(a.seed);
        crate::spec::sample::generate_sampled(
            &mut s, &prompt, a.n, a.chunk, stop, &sampling, &mut rng, on_token,
        )?
    };
    let end = Instant::now();
    let first = first_at.unwrap_or(end);
    let decode_steps = generated.len().saturating_sub(1);
    let decode_secs = (end - first).as_secs_f64();
    let tps = if decode_steps > 0 && decode_secs > 0.0 {
        decode_steps as f64 / decode_secs
    } else {
        0.0
    };
    let text = tok.map(|t| t.decode(&generated, false)).transpose()?;
    if a.json {
        let j = serde_json::json!({
            "tokens": generated,
            "text": text,
            "tokens_per_second": tps,
            "prompt_tokens": prompt.len(),
            "prefill_seconds": (first - t0).as_secs_f64(),
            "backend": s.backend().name(),
            "spec": "off",
            "accepted_per_step": Vec::<usize>::new(),
        });
        println!("{j}");
    } else {
        println!();
        eprintln!(
            "[{} prompt tokens, {} generated, prefill {:.3} s, decode {:.2} tok/s, backend {}]",
            prompt.len(),
            generated.len(),
            (first - t0).as_secs_f64(),
            tps,
            s.backend().name()
        );
    }
    Ok(())
}

/// Speculative generation with a drafter: streams tokens, prints per-step policy decisions
/// with `--policy-log`, and reports acceptance and the time split.
fn run_spec(
    a: &Args,
    m: &Qwen35,
    s: &mut Session<'_>,
    mut d: Box<dyn Drafter>,
    prompt: &[u32],
    cfg: &SpecConfig,
) -> anyhow::Result<()> {
    let stream = !a.json;
    let tok = m.tokenizer.as_ref();
    let mut stdout = std::io::stdout();
    let res = crate::spec::generate_spec(
        s,
        d.as_mut(),
        prompt,
        cfg,
        |id| {
            if stream {
                match tok.and_then(|t| t.decode(&[id], false).ok()) {
                    Some(text) => print!("{text}"),
                    None => print!("{id} "),
                }
                let _ = stdout.flush();
            }
        },
        |st| {
            if a.policy_log
                && let Some(ev) = &st.policy
            {
                let kind = match st.kind {
                    StepKind::Spec => format!("accepted {}/{}", st.accepted, st.drafted),
                    StepKind::Plain => "1 token".to_string(),
                };
                eprintln!("{ev} -> {kind} in {:.3} ms", st.total_s * 1e3);
            }
        },
    )?;
    let decode_tokens = res.tokens.len().saturating_sub(1);
    let tps = if decode_tokens > 0 && res.decode_s > 0.0 {
        decode_tokens as f64 / res.decode_s
    } else {
        0.0
    };
    let split = res.time_split();
    let (draft_s, verify_s, rollback_s, commit_s) =
        (split.draft, split.verify, split.rollback, split.commit);
    let text = tok.map(|t| t.decode(&res.tokens, false)).transpose()?;
    if a.json {
        let j = serde_json::json!({
            "tokens": res.tokens,
            "text": text,
            "tokens_per_second": tps,
            "prompt_tokens": prompt.len(),
            "prefill_seconds": res.prefill_s,
            "backend": s.backend().name(),
            "spec": cfg.mode.name(),
            "drafter": d.name(),
            "replay": a.replay_profile.is_some(),
            "tree_budget": match cfg.mode {
                SpecMode::Tree { budget } => Some(budget),
                _ => None,
            },
            // The nodes a tree round may use: the budget trimmed to the backend's row tiles.
            "tree_nodes": match cfg.mode {
                SpecMode::Tree { budget } => Some(crate::spec::tree::session_budget(s, budget)),
                _ => None,
            },
            "rollback": cfg.rollback.name(),
            "accepted_per_step": res.accepted_per_step(),
            "mean_accept_len": res.mean_accept_len(),
            "spec_steps": res.spec_steps(),
            "plain_steps": res.plain_steps(),
            "draft_seconds": draft_s,
            "verify_seconds": verify_s,
            "rollback_seconds": rollback_s,
            "commit_seconds": commit_s,
            "plain_seconds": split.plain,
            "drafter_report": d.report(),
        });
        println!("{j}");
    } else {
        println!();
        eprintln!(
            "[{} prompt tokens, {} generated, prefill {:.3} s, decode {:.2} tok/s, backend {}; \
             spec {} with {}: {} spec steps (mean accepted length {:.2}), {} plain; \
             draft {:.3} s, verify {:.3} s, rollback {:.3} s, commit {:.3} s, plain {:.3} s]",
            prompt.len(),
            res.tokens.len(),
            res.prefill_s,
            tps,
            s.backend().name(),
            cfg.mode.name(),
            d.name(),
            res.spec_steps(),
            res.mean_accept_len(),
            res.plain_steps(),
            draft_s,
            verify_s,
            rollback_s,
            commit_s,
            split.plain,
        );
        if let Some(r) = d.report() {
            eprintln!("[drafter report: {r}]");
        }
    }
    Ok(())
}
