//! `deltaspec info`.

use crate::model::Qwen35;
use anyhow::Context;
use std::path::Path;

pub fn run(path: &Path) -> anyhow::Result<()> {
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
