//! `deltaspec logits`: logits of every input position, via prefill or the decode path.

use super::tokens;
use crate::backend;
use crate::model::qwen35::{GraphOptions, LogitRows};
use crate::model::{Qwen35, Session};
use anyhow::{Context, bail};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A qwen35 GGUF file or an HF checkpoint directory.
    #[arg(long)]
    pub model: PathBuf,
    /// A JSON file with an array of token ids, or a comma-separated list.
    #[arg(long)]
    pub tokens: String,
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Prefill the first K tokens, then feed the rest one at a time (the decode path).
    #[arg(long)]
    pub decode_from: Option<usize>,
    /// Output safetensors file.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let mut be = backend::create(&a.backend)?;
    let ids = tokens::parse(&a.tokens)?;
    let m = Qwen35::load(&a.model).with_context(|| format!("loading {}", a.model.display()))?;
    let k = a.decode_from.unwrap_or(ids.len());
    if k > ids.len() {
        bail!("--decode-from {k} is past the {} input tokens", ids.len());
    }
    let mut s = Session::new(&m, be.as_mut(), ids.len())?;
    let opts = GraphOptions {
        logits: LogitRows::All,
        ..Default::default()
    };
    let mut logits = Vec::with_capacity(ids.len() * m.cfg.vocab);
    if k > 0 {
        logits.extend(s.forward(&ids[..k], &opts)?.logits);
    }
    for &t in &ids[k..] {
        logits.extend(s.forward(&[t], &opts)?.logits);
    }
    let bytes: Vec<u8> = bytemuck::cast_slice(&logits).to_vec();
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        vec![ids.len(), m.cfg.vocab],
        &bytes,
    )
    .context("building the logits tensor")?;
    safetensors::serialize_to_file([("logits", view)], None, &a.out)
        .with_context(|| format!("writing {}", a.out.display()))?;
    Ok(())
}
