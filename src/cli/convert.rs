//! `deltaspec convert --draft <hf-dir> --out d.gguf [--outtype f32|f16|bf16|q8_0|q4_k_m|iq4_xs]`.

use crate::model::draft::convert::{OutType, convert_dflash};
use anyhow::{Context, bail};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A DFlash drafter checkpoint directory (z-lab layout: config.json + model.safetensors).
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Output GGUF file (written to a temporary file, renamed when complete).
    #[arg(long)]
    pub out: PathBuf,
    /// Type of the 2-D weights: f32, f16, bf16, or a quantized mix: q8_0, q4_k_m, iq4_xs
    /// (per tensor as `deltaspec synth --quant` picks it; norms stay f32).
    #[arg(long, default_value = "bf16")]
    pub outtype: String,
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let Some(dir) = &a.draft else {
        bail!("convert: only --draft <hf-dir> conversions are implemented");
    };
    let outtype = OutType::parse(&a.outtype)?;
    let r = convert_dflash(dir, &a.out, outtype)
        .with_context(|| format!("converting {}", dir.display()))?;
    let c = &r.cfg;
    println!(
        "{}: DFlash drafter, {} layers, hidden {}, block {}, mask {}, target layers {:?}, {} tensors, {} bytes",
        a.out.display(),
        c.n_layers,
        c.hidden,
        c.block_size,
        c.mask_token_id,
        c.target_layer_ids,
        r.tensors,
        r.bytes
    );
    Ok(())
}
