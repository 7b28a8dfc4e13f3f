//! `deltaspec generate`: greedy decoding from a prompt or token ids.

use super::tokens;
use crate::backend;
use crate::model::{Qwen35, Session};
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
    let ctx = a.ctx.unwrap_or(prompt.len() + a.n);
    let stop = if a.ignore_eos {
        None
    } else {
        m.tokenizer.as_ref().and_then(|t| t.eos())
    };
    let mut s = Session::new(&m, be.as_mut(), ctx)?;

    let t0 = Instant::now();
    let mut first_at = None;
    let stream = !a.json;
    let tok = m.tokenizer.as_ref();
    let mut out = std::io::stdout();
    let generated = s.generate_greedy(&prompt, a.n, a.chunk, stop, |id| {
        first_at.get_or_insert_with(Instant::now);
        if stream {
            match tok.and_then(|t| t.decode(&[id], false).ok()) {
                Some(text) => print!("{text}"),
                None => print!("{id} "),
            }
            let _ = out.flush();
        }
    })?;
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
