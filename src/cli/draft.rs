//! `deltaspec draft --model T --draft D --tokens t.json --out f.safetensors [--backend cpu]`:
//! one DFlash draft after the committed context t[0..n−1).
//!
//! The target runs over t[0..n−1) capturing the drafter's target layers; the block is
//! [t[n−1], MASK × (B−1)] at positions n−1 … n+B−2. The file gets `draft_logits` f32 [B−1, vocab]
//! (rows predict positions n … n+B−2) and `draft_tokens` i32 [B−1].

use super::tokens;
use crate::backend;
use crate::model::draft::{DFlash, DraftSession, context_features};
use crate::model::qwen35::{GraphOptions, LogitRows};
use crate::model::{Qwen35, Session};
use anyhow::{Context, bail};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The target: a qwen35 GGUF file or an HF checkpoint directory.
    #[arg(long)]
    pub model: PathBuf,
    /// The drafter: a qwen35-dflash-draft GGUF file.
    #[arg(long)]
    pub draft: PathBuf,
    /// A JSON file with an array of token ids, or a comma-separated list.
    #[arg(long)]
    pub tokens: String,
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Output safetensors file.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let ids = tokens::parse(&a.tokens)?;
    let Some((&last, context)) = ids.split_last() else {
        bail!("--tokens is empty");
    };
    let target =
        Qwen35::load(&a.model).with_context(|| format!("loading {}", a.model.display()))?;
    let drafter = DFlash::load_for(&a.draft, &target)
        .with_context(|| format!("loading {}", a.draft.display()))?;
    let vocab = target.cfg.vocab;
    if let Some(&bad) = ids.iter().find(|&&t| t as usize >= vocab) {
        bail!("token id {bad} is outside the vocabulary ({vocab})");
    }
    let mut be = backend::create(&a.backend)?;
    let n_ctx = context.len();
    let feats = if n_ctx > 0 {
        let opts = GraphOptions {
            logits: LogitRows::Last,
            argmax: false,
            capture: drafter.cfg.target_layer_ids.clone(),
            read_logits: true,
        };
        let mut s = Session::new(&target, be.as_mut(), n_ctx)?;
        let step = s.forward(context, &opts)?;
        context_features(&drafter, &target, &step, n_ctx)?
    } else {
        Vec::new()
    };
    let bsz = drafter.cfg.block_size;
    let mut ds = DraftSession::new(&drafter, &target, be.as_mut(), n_ctx + bsz)?;
    let out = ds.draft(&feats, last)?;

    let logit_bytes: Vec<u8> = bytemuck::cast_slice(&out.logits).to_vec();
    let toks: Vec<i32> = out.tokens.iter().map(|&t| t as i32).collect();
    let tok_bytes: Vec<u8> = bytemuck::cast_slice(&toks).to_vec();
    let lv = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        vec![bsz - 1, vocab],
        &logit_bytes,
    )
    .context("building draft_logits")?;
    let tv =
        safetensors::tensor::TensorView::new(safetensors::Dtype::I32, vec![bsz - 1], &tok_bytes)
            .context("building draft_tokens")?;
    safetensors::serialize_to_file([("draft_logits", lv), ("draft_tokens", tv)], None, &a.out)
        .with_context(|| format!("writing {}", a.out.display()))?;
    Ok(())
}
