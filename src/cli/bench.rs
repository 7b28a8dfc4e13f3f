//! `deltaspec bench`: decode speed against the bandwidth roofline, and copy bandwidth.

use crate::backend;
use crate::model::qwen35::{GraphOptions, LogitRows, names};
use crate::model::{Qwen35, Session};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Subcommand, Debug)]
pub enum Which {
    /// Decode tokens/s, bytes per token and the ratio to the bandwidth roofline.
    Decode(DecodeArgs),
    /// Prompt processing: tokens/s of a `-p`-token prompt from an empty context (llama-bench's
    /// pp512).
    Prefill(super::bench_prefill::Args),
    /// Device copy bandwidth.
    Bandwidth(BandwidthArgs),
    /// What a dispatch costs besides its work: chains of near-empty launches (wgpu).
    Dispatch(DispatchArgs),
    /// The driver compiler's statistics (registers, code size, ...) of every kernel a decode
    /// step at the given widths compiles (wgpu: VK_KHR_pipeline_executable_properties).
    Kernels(KernelsArgs),
    /// Speculative vs plain greedy decode from the same prompt in the same run: tok/s of both,
    /// mean accepted length, draft/verify/rollback time split (`--replay-profile`: REPLAY).
    Spec(Box<super::bench_spec::Args>),
    /// One drafter step vs one verify-sized target step: both times and their ratio.
    Draft(super::bench_draft::Args),
}

#[derive(clap::Args, Debug)]
pub struct DecodeArgs {
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Decode steps timed.
    #[arg(short = 'n', long, default_value_t = 128)]
    pub n: usize,
    /// Tokens per step: 1 is plain decode; 8 or 16 time a verify-sized step.
    #[arg(long, default_value_t = 1)]
    pub rows: usize,
    /// Context capacity of the sequence (KV rows allocated).
    #[arg(long, default_value_t = 1024)]
    pub ctx: usize,
    /// Context rows filled before timing (llama-bench's `-d`): a prompt of this many tokens is
    /// processed first, in chunks of 512, so every timed step attends over at least that many.
    #[arg(short = 'd', long, default_value_t = 0)]
    pub depth: usize,
    /// Buffer size for the bandwidth measurement, MiB.
    #[arg(long, default_value_t = 1024)]
    pub bw_mib: usize,
    /// Untimed steps before timing run for at least this long (see [`warm_up`]).
    #[arg(long, default_value_t = 2000)]
    pub warmup_ms: u64,
    #[arg(long)]
    pub json: bool,
}

/// Most untimed steps [`warm_up`] runs, whatever `--warmup-ms` asks: context rows the
/// benchmark must allocate for them.
pub(crate) const WARM_MAX: usize = 256;

/// Runs `step` untimed until `ms` milliseconds have passed, at least twice (compilation, then
/// hip graph capture) and at most [`WARM_MAX`] times; returns the number of steps run. A
/// GPU must be busy for a while before the timed steps: NVIDIA's Vulkan driver raises the SM
/// clock only after some time under load (session 27 on an H100: wgpu benchmarks that timed
/// right after loading the model sat at 300-600 MHz in a third of the samples, reason "idle",
/// and read 1.3-4 × slower than the same steps inside a long spec run; session 28: 8 steps
/// with no warm-up 29.0 ms against 12.2-12.7 for 200 steps after 1 s, and even after 1 s the
/// first process on a fresh machine still measured a 48-step run at 15.3 ms), where a CUDA
/// context starts at full clock.
pub(crate) fn warm_up(
    ms: u64,
    mut step: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<usize> {
    let t = Instant::now();
    let mut n = 0;
    while n < 2 || (n < WARM_MAX && t.elapsed().as_millis() < u128::from(ms)) {
        step()?;
        n += 1;
    }
    Ok(n)
}

/// Prompt tokens per forward of `bench decode --depth` (as `generate`'s default chunk).
const DEPTH_CHUNK: usize = 512;

#[derive(clap::Args, Debug)]
pub struct BandwidthArgs {
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    #[arg(long, default_value_t = 1024)]
    pub mib: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct DispatchArgs {
    #[arg(long, default_value = "wgpu")]
    pub backend: String,
    /// Dispatches per timed chain.
    #[arg(long, default_value_t = 256)]
    pub count: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct KernelsArgs {
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long, default_value = "wgpu")]
    pub backend: String,
    /// Step widths whose graphs are compiled (1: decode; 8, 16: verify-sized steps).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub rows: Vec<usize>,
    /// Only kernels whose name contains this.
    #[arg(long)]
    pub filter: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(w: &Which) -> anyhow::Result<()> {
    match w {
        Which::Decode(a) => decode(a),
        Which::Prefill(a) => super::bench_prefill::run(a),
        Which::Bandwidth(a) => bandwidth(a),
        Which::Dispatch(a) => dispatch(a),
        Which::Kernels(a) => kernels(a),
        Which::Spec(a) => super::bench_spec::run(a),
        Which::Draft(a) => super::bench_draft::run(a),
    }
}

fn bandwidth(a: &BandwidthArgs) -> anyhow::Result<()> {
    let mut be = backend::create(&a.backend)?;
    let bw = be.copy_bandwidth(a.mib << 20)?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"backend": be.name(), "copy_bytes_per_second": bw})
        );
    } else {
        println!(
            "{}: copy bandwidth {:.1} GB/s ({} MiB buffer)",
            be.name(),
            bw / 1e9,
            a.mib
        );
    }
    Ok(())
}

fn dispatch(a: &DispatchArgs) -> anyhow::Result<()> {
    let mut be = backend::create(&a.backend)?;
    let costs = be.dispatch_costs(a.count)?;
    if a.json {
        let rows: Vec<_> = costs
            .iter()
            .map(|(k, s)| serde_json::json!({"probe": k, "seconds": s}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"backend": be.name(), "probes": rows})
        );
    } else {
        println!("{}: chains of {} dispatches", be.name(), a.count);
        for (k, s) in &costs {
            println!("  {:>9.2} us  {k}", s * 1e6);
        }
    }
    Ok(())
}

fn kernels(a: &KernelsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !a.rows.is_empty() && a.rows.iter().all(|&r| r >= 1),
        "--rows needs widths of at least 1"
    );
    let mut be = backend::create(&a.backend)?;
    let m = Qwen35::load(&a.model).with_context(|| format!("loading {}", a.model.display()))?;
    let name = be.name();
    let ctx = 2 * a.rows.iter().sum::<usize>() + 2;
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: Vec::new(),
        read_logits: false,
    };
    {
        // One step at each width compiles its graph, so every kernel it runs is built.
        let mut s = Session::new(&m, be.as_mut(), ctx)?;
        for &r in &a.rows {
            s.forward(&vec![1; r], &opts)?;
        }
    }
    let mut stats = be.kernel_stats()?;
    if let Some(f) = &a.filter {
        stats.retain(|k| k.kernel.contains(f.as_str()));
    }
    if a.json {
        let rows: Vec<_> = stats
            .iter()
            .map(|k| {
                let st: serde_json::Map<String, serde_json::Value> = k
                    .stats
                    .iter()
                    .map(|(n, v)| (n.clone(), serde_json::json!(v)))
                    .collect();
                serde_json::json!({"kernel": k.kernel, "threads": k.threads, "stats": st})
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"backend": name, "rows": a.rows, "kernels": rows})
        );
    } else {
        println!("{name}: {} kernels (step widths {:?})", stats.len(), a.rows);
        for k in &stats {
            let threads = k
                .threads
                .map(|t| format!(" [{t} threads]"))
                .unwrap_or_default();
            println!("{}{threads}", k.kernel);
            let line: Vec<String> = k.stats.iter().map(|(n, v)| format!("{n}={v}")).collect();
            if line.is_empty() {
                println!("    (the driver reported no statistics)");
            } else {
                println!("    {}", line.join("  "));
            }
        }
    }
    Ok(())
}

/// Weight bytes one decode step streams: every weight once, but only one embedding row.
pub(crate) fn bytes_per_token(m: &Qwen35) -> usize {
    let embd = m
        .weights
        .get(names::TOKEN_EMBD)
        .map(|t| t.bytes().len())
        .unwrap_or(0);
    m.weights.total_bytes() - embd + embd / m.cfg.vocab.max(1)
}

fn decode(a: &DecodeArgs) -> anyhow::Result<()> {
    let mut be = backend::create(&a.backend)?;
    let m = Qwen35::load(&a.model).with_context(|| format!("loading {}", a.model.display()))?;
    anyhow::ensure!(a.rows >= 1, "--rows must be at least 1");
    anyhow::ensure!(a.n >= 1, "-n must be at least 1 (steps timed)");
    let ctx = a.ctx.max(a.depth + (a.n.max(WARM_MAX) + 1) * a.rows + 1);
    let name = be.name();
    let mut s = Session::new(&m, be.as_mut(), ctx)?;
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: Vec::new(),
        read_logits: false, // as greedy decoding
    };
    // The context the timed steps attend over: token ids spread over the vocabulary.
    let vocab = m.cfg.vocab.max(1);
    let prompt: Vec<u32> = (0..a.depth)
        .map(|i| ((i * 7919 + 1) % vocab) as u32)
        .collect();
    for chunk in prompt.chunks(DEPTH_CHUNK) {
        s.forward(chunk, &opts)?;
    }
    // Warm-up: compiles the step graph, touches every weight and brings the GPU to its
    // working clock; the timed steps then start from the state the prompt left.
    let start = s.snapshot()?;
    let warmed = warm_up(a.warmup_ms, || {
        s.forward(&vec![1; a.rows], &opts)?;
        Ok(())
    });
    // The roofline's bandwidth is measured warm too, between the warm-up and the timed steps.
    let bw = s.backend().copy_bandwidth(a.bw_mib << 20).ok();
    let restored = warmed.and_then(|_| Ok(s.restore(&start)?));
    s.release(start)?;
    restored?;
    let mut tok = 1;
    let bar = indicatif::ProgressBar::new(a.n as u64);
    if a.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    crate::backend::profile::reset();
    let t = Instant::now();
    if a.rows == 1 {
        // As `generate` decodes: pipelined where the backend queues steps.
        s.decode_greedy(tok, a.n + 1, None, |_| bar.inc(1))?;
    } else {
        for _ in 0..a.n {
            tok = s.forward(&vec![tok; a.rows], &opts)?.argmax[0];
            bar.inc(1);
        }
    }
    let secs = t.elapsed().as_secs_f64();
    bar.finish_and_clear();
    crate::backend::profile::report(a.n as f64);
    // Steps per second; with --rows R each step carries R tokens (a verify-sized batch).
    let tps = a.n as f64 / secs;
    let bpt = bytes_per_token(&m);
    let roofline = bw.map(|b| b / bpt as f64);
    let ratio = roofline.map(|r| tps / r);
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "backend": name, "model": a.model.display().to_string(), "n": a.n, "rows": a.rows,
                "depth": a.depth,
                "tokens_per_second": tps, "ms_per_token": 1e3 / tps,
                "weight_bytes_per_token": bpt, "copy_bytes_per_second": bw,
                "roofline_tokens_per_second": roofline, "roofline_ratio": ratio,
            })
        );
    } else {
        println!("backend:        {name}");
        let after = if a.depth > 0 {
            format!(" after {} context rows", a.depth)
        } else {
            String::new()
        };
        println!(
            "decode:         {tps:.2} steps/s ({:.3} ms/step, {} steps of {} rows{after})",
            1e3 / tps,
            a.n,
            a.rows
        );
        println!(
            "bytes/token:    {:.3} GiB of weights",
            bpt as f64 / (1u64 << 30) as f64
        );
        match (bw, roofline, ratio) {
            (Some(b), Some(r), Some(q)) => {
                println!("copy bandwidth: {:.1} GB/s", b / 1e9);
                println!("roofline:       {r:.2} tok/s  → ratio {q:.3}");
            }
            _ => println!("roofline:       n/a (backend cannot measure bandwidth)"),
        }
    }
    Ok(())
}
