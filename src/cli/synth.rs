//! `deltaspec synth`: random models with real shapes for speed measurements and tests.

use crate::model::synth::{self, Recipe};
use anyhow::Context;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model shape: `qwen3.8-27b` or `tiny`; or a drafter for the 27B target: `dflash-27b`
    /// (block 16), `dspark-27b` (block 8, Markov rank 256), `dflash2-27b` (block 8, selector
    /// rank 256, top-k 16).
    #[arg(long)]
    pub preset: String,
    /// Keep only the first N layers (the pattern is kept: full attention every 4th).
    #[arg(long)]
    pub layers: Option<usize>,
    /// f32 | f16 | q8_0 | q4_k_m | iq4_xs
    #[arg(long, default_value = "q8_0")]
    pub quant: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    if let Some(cfg) = crate::model::draft::synth::preset(&a.preset) {
        return drafter(a, &cfg);
    }
    let mut cfg = synth::preset(&a.preset)?;
    if let Some(n) = a.layers {
        anyhow::ensure!(n > 0, "--layers must be at least 1");
        cfg.n_layers = n;
        cfg.layers.truncate(n);
        anyhow::ensure!(
            cfg.layers.len() == n,
            "--layers {n} is more than the preset's {}",
            cfg.layers.len()
        );
    }
    let recipe = Recipe::parse(&a.quant)?;
    let t = std::time::Instant::now();
    let bytes = synth::write(&cfg, recipe, a.seed, &a.out)
        .with_context(|| format!("writing {}", a.out.display()))?;
    eprintln!(
        "wrote {} ({:.2} GiB, {} layers, {:?}) in {:.1} s",
        a.out.display(),
        bytes as f64 / (1u64 << 30) as f64,
        cfg.n_layers,
        recipe,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A synthetic drafter (`--preset dflash-27b | dspark-27b | dflash2-27b`).
fn drafter(a: &Args, cfg: &crate::model::draft::DFlashConfig) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.layers.is_none(),
        "--layers applies to target presets, not to drafter preset {}",
        a.preset
    );
    let recipe = Recipe::parse(&a.quant)?;
    let t = std::time::Instant::now();
    let bytes = crate::model::draft::synth::write(cfg, recipe, a.seed, &a.out)
        .with_context(|| format!("writing {}", a.out.display()))?;
    eprintln!(
        "wrote {} ({:.2} GiB, drafter {}, block {}, {:?}) in {:.1} s",
        a.out.display(),
        bytes as f64 / (1u64 << 30) as f64,
        a.preset,
        cfg.block_size,
        recipe,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
