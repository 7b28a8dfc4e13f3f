//! `deltaspec bench prefill --model M [--backend ..] [-p 512] [--chunk 512] [-r 3] [--json]`:
//! prompt processing speed, as llama-bench's `pp512`: a prompt of `p` tokens from an empty
//! context, in the chunks `generate` uses, timed from the first chunk to the last chunk's
//! next-token argmax on the host.
//!
//! Every repetition starts from the same empty state (a snapshot taken before the warm-up), so
//! each times the same work. The prompt's ids are random: a step's time does not depend on them.

use crate::backend;
use crate::model::qwen35::{GraphOptions, LogitRows};
use crate::model::{Qwen35, Session};
use crate::util::rng::Rng;
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Prompt tokens.
    #[arg(short = 'p', long, default_value_t = 512)]
    pub prompt: usize,
    /// Tokens per forward (as `generate --chunk`).
    #[arg(long, default_value_t = 512)]
    pub chunk: usize,
    /// Timed repetitions (after one untimed warm-up).
    #[arg(short = 'r', long, default_value_t = 3)]
    pub reps: usize,
    #[arg(long)]
    pub json: bool,
}

/// Mean and sample standard deviation.
fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(a.prompt >= 1, "--prompt must be at least 1 token");
    anyhow::ensure!(a.chunk >= 1, "--chunk must be at least 1 token");
    anyhow::ensure!(a.reps >= 1, "--reps must be at least 1");
    let mut be = backend::create(&a.backend)?;
    let m = Qwen35::load(&a.model).with_context(|| format!("loading {}", a.model.display()))?;
    let name = be.name();
    let mut rng = Rng::new(0x5eed);
    let prompt: Vec<u32> = (0..a.prompt)
        .map(|_| rng.below(m.cfg.vocab) as u32)
        .collect();
    let mut s = Session::new(&m, be.as_mut(), a.prompt + 1)?;
    let opts = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: Vec::new(),
        read_logits: false, // as generate: only the next token comes back
    };
    let empty = s.snapshot()?;
    let mut times = Vec::with_capacity(a.reps);
    // Run 0 is the warm-up: it compiles the chunk graphs and touches every weight.
    for rep in 0..=a.reps {
        s.restore(&empty)?;
        let t = Instant::now();
        for piece in prompt.chunks(a.chunk) {
            s.forward(piece, &opts)?;
        }
        if rep > 0 {
            times.push(t.elapsed().as_secs_f64());
        } else {
            // DELTASPEC_PROFILE=1: the table covers the timed prompts only.
            crate::backend::profile::reset();
        }
    }
    s.release(empty)?;
    // Per prompt ("ms/step" is ms per prompt here).
    crate::backend::profile::report(a.reps as f64);
    let tps: Vec<f64> = times.iter().map(|t| a.prompt as f64 / t).collect();
    let (tps_mean, tps_sd) = mean_sd(&tps);
    let (ms_mean, _) = mean_sd(&times);
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "backend": name, "model": a.model.display().to_string(),
                "prompt_tokens": a.prompt, "chunk": a.chunk, "reps": a.reps,
                "seconds": times, "tokens_per_second": tps_mean, "tokens_per_second_sd": tps_sd,
            })
        );
    } else {
        println!("backend: {name}");
        println!(
            "prefill: pp{} {tps_mean:.1} ± {tps_sd:.1} tok/s ({:.2} ms per prompt, chunks of {}, {} runs)",
            a.prompt,
            ms_mean * 1e3,
            a.chunk,
            a.reps
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_sd() {
        let (m, sd) = mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(m, 5.0);
        assert!((sd - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_sd(&[3.0]), (3.0, 0.0));
    }
}
