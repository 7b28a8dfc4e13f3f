//! `deltaspec info`.

use crate::gguf::GgufFile;
use crate::model::Qwen35;
use crate::model::draft::{self, DFlash};
use anyhow::Context;
use std::path::Path;

pub fn run(path: &Path) -> anyhow::Result<()> {
    if path.is_file() {
        let f = GgufFile::open(path).with_context(|| format!("reading {}", path.display()))?;
        let arch = f.architecture().unwrap_or_default();
        if arch == draft::ARCH || arch == draft::llamacpp::ARCH {
            return drafter(path, arch);
        }
    }
    let m = Qwen35::load(path).with_context(|| format!("loading {}", path.display()))?;
    let c = &m.cfg;
    println!("model:       {}", path.display());
    println!("source:      {:?}", m.source);
    println!(
        "arch:        qwen35 ({} layers: {} DeltaNet, {} attention)",
        c.n_layers,
        c.n_layers - c.n_attention_layers(),
        c.n_attention_layers()
    );
    println!("pattern:     {}", c.pattern_string());
    if c.mtp_layers > 0 {
        println!(
            "mtp:         {} nextn block(s) in the file, not loaded",
            c.mtp_layers
        );
    }
    println!(
        "hidden:      {}   ffn: {}   vocab: {}",
        c.hidden, c.ffn, c.vocab
    );
    let yarn = c
        .rope_scaling
        .as_ref()
        .map(|y| {
            format!(
                ", YaRN ×{} of {} positions",
                y.factor, y.original_context_length
            )
        })
        .unwrap_or_default();
    println!(
        "attention:   {} q / {} kv heads × {}   rope: {} dims, theta {}{yarn}",
        c.n_heads, c.n_kv_heads, c.head_dim, c.rot, c.rope_theta
    );
    println!(
        "deltanet:    nk {} nv {} dk {} dv {} conv {}   v-head order: {:?}",
        c.nk, c.nv, c.dk, c.dv, c.conv_kernel, c.head_map
    );
    println!("rms eps:     {:e}   context: {}", c.eps, c.context_length);
    let counts: Vec<String> = m
        .dtype_counts()
        .iter()
        .map(|(d, n)| format!("{d} ×{n}"))
        .collect();
    println!(
        "tensors:     {} ({:.2} MiB): {}",
        m.weights.tensors.len(),
        m.weights.total_bytes() as f64 / (1 << 20) as f64,
        counts.join(", ")
    );
    match &m.tokenizer {
        Some(t) => println!("tokenizer:   {}", t.summary()),
        None => println!("tokenizer:   none (token ids in and out)"),
    }
    Ok(())
}

/// A drafter file: its shape, what it reads from the target, its heads and its tensor types.
fn drafter(path: &Path, arch: &str) -> anyhow::Result<()> {
    let d = DFlash::load(path).with_context(|| format!("loading {}", path.display()))?;
    let c = &d.cfg;
    println!("drafter:     {}", path.display());
    let kind = match (&c.dspark, &c.dflash2) {
        (_, Some(_)) => "DFlash2",
        (Some(_), _) => "DFlash + DSpark heads",
        _ => "DFlash",
    };
    println!("arch:        {arch} ({kind}, {} layers)", c.n_layers);
    println!(
        "hidden:      {}   ffn: {}   vocab: {}",
        c.hidden,
        c.ffn,
        c.vocab.map_or("the target's".into(), |v| v.to_string())
    );
    println!(
        "attention:   {} q / {} kv heads × {}   rope theta {}{}",
        c.n_heads,
        c.n_kv_heads,
        c.head_dim,
        c.rope_theta,
        c.rope_scaling
            .as_ref()
            .map(|y| format!(", YaRN ×{}", y.factor))
            .unwrap_or_default()
    );
    println!(
        "block:       {}   mask token: {}   target layers: {:?}",
        c.block_size, c.mask_token_id, c.target_layer_ids
    );
    if let Some(s) = &c.dspark {
        println!(
            "dspark:      markov rank {}   confidence head: {}",
            s.markov_rank,
            s.confidence_dim
                .map_or("none".into(), |n| format!("{n} inputs"))
        );
    }
    if let Some(s) = &c.dflash2 {
        println!(
            "dflash2:     conv K {} groups of {}   selector rank {} top-k {}",
            s.conv_kernel, s.conv_group, s.selector_rank, s.selector_top_k
        );
    }
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for t in d.weights.tensors.values() {
        *counts.entry(t.dtype.name()).or_default() += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(d, n)| format!("{d} ×{n}")).collect();
    println!(
        "tensors:     {} ({:.2} MiB, without the target's embedding and lm_head): {}",
        d.weights.tensors.len(),
        d.weights.total_bytes() as f64 / (1 << 20) as f64,
        counts.join(", ")
    );
    Ok(())
}
