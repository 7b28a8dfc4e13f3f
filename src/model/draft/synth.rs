//! Synthetic drafter GGUF files at real size (random data, real names, shapes and keys), so a
//! drafter step can be timed against the `qwen3.8-27b` synthetic target
//! ([`crate::model::synth`]). The shapes are those of drafters.md §0/§4.1.

use super::config::{DFlash2Config, DFlashConfig, DSparkConfig};
use super::convert::write_metadata;
use super::gguf_load::expected_tensors;
use super::names;
use crate::gguf::GgufWriter;
use crate::model::ModelError;
use crate::model::synth::{Fill, Recipe, seed_of, write_tensor};
use crate::tensor::DType;
use std::io::Write;
use std::path::Path;

/// Names of the drafter presets (all fit the `qwen3.8-27b` target preset).
pub const PRESETS: &[&str] = &["dflash-27b", "dspark-27b", "dflash2-27b"];

/// A drafter preset: the 27B DFlash backbone (5 layers, hidden 5120, 32q/8kv × 128, FFN 17408)
/// with `dflash-27b` block 16; `dspark-27b` block 8 with a rank-256 Markov head and an H + r
/// confidence head; `dflash2-27b` block 8 with K = 2 / group 16 convs and a rank-256, top-16
/// selector. `None` for an unknown name.
pub fn preset(name: &str) -> Option<DFlashConfig> {
    let (block, ids, mask): (usize, [usize; 5], u32) = match name {
        "dflash-27b" => (16, [1, 16, 31, 46, 61], 248_070),
        "dspark-27b" => (8, [4, 16, 28, 40, 52], 248_077),
        "dflash2-27b" => (8, [5, 19, 33, 47, 61], 248_070),
        _ => return None,
    };
    let (hidden, vocab) = (5120, 248_320);
    Some(DFlashConfig {
        n_layers: 5,
        hidden,
        ffn: 17408,
        vocab: Some(vocab),
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 128,
        eps: 1e-6,
        rope_theta: 1e7,
        rope_scaling: None,
        context_length: 32_768,
        block_size: block,
        mask_token_id: mask,
        n_target_layers: 5,
        target_layer_ids: ids.to_vec(),
        target_block_count: Some(64),
        sliding_window: None,
        sliding_layers: vec![false; 5],
        dspark: (name == "dspark-27b").then_some(DSparkConfig {
            markov_rank: 256,
            vocab,
            confidence_dim: Some(hidden + 256),
        }),
        dflash2: (name == "dflash2-27b").then_some(DFlash2Config {
            conv_kernel: 2,
            conv_group: 16,
            selector_rank: 256,
            selector_top_k: 16,
        }),
    })
}

/// How a drafter tensor is filled: norms and conv bases near one, the rest N(0, 0.5/√fan_in)
/// (codebooks N(0, 0.1)) so that activations stay finite.
fn fill(name: &str, cols: usize) -> Fill {
    if name.ends_with("norm.weight") || name.ends_with("_conv.base") {
        Fill::NearOne
    } else if name == names::SELECTOR_PRED || name == names::SELECTOR_SUCC {
        Fill::Normal(0.1)
    } else {
        Fill::Normal(0.5 / (cols as f32).sqrt())
    }
}

/// Writes a synthetic drafter of `cfg` to `path`: 1-D tensors and conv bases F32, the
/// confidence bias F32, the rest by `recipe`. Returns the file size.
pub fn write(
    cfg: &DFlashConfig,
    recipe: Recipe,
    seed: u64,
    path: &Path,
) -> Result<u64, ModelError> {
    cfg.validate()?;
    let mut w = GgufWriter::new();
    write_metadata(&mut w, cfg);
    for (name, shape) in expected_tensors(cfg) {
        let cols = *shape.last().expect("tensors have a shape");
        let rows: usize = shape[..shape.len() - 1].iter().product();
        let dtype = if shape.len() == 1 || name.ends_with("_conv.base") {
            DType::F32
        } else {
            recipe.dtype_for(&name, cols)
        };
        let ne: Vec<u64> = shape.iter().rev().map(|d| *d as u64).collect();
        let (f, s) = (fill(&name, cols), seed_of(&name, seed));
        w.add_tensor_generated(
            &name,
            &ne,
            dtype,
            Box::new(move |out| write_tensor(out, dtype, rows, cols, f, s)),
        )?;
    }
    let io = |e: std::io::Error| ModelError::Checkpoint {
        path: path.display().to_string(),
        msg: e.to_string(),
    };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut bw = std::io::BufWriter::with_capacity(1 << 22, file);
    w.write_to(&mut bw)?;
    bw.flush().map_err(io)?;
    Ok(std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::synth as target_synth;

    #[test]
    fn presets_fit_the_27b_target_and_validate() {
        let target = target_synth::preset("qwen3.8-27b").unwrap();
        for name in PRESETS {
            let c = preset(name).unwrap();
            c.validate().unwrap();
            c.check_target(&target)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert_eq!(preset("dflash-27b").unwrap().block_size, 16);
        let d2 = preset("dflash2-27b").unwrap();
        assert_eq!(d2.block_size, 8);
        let s = d2.dflash2.unwrap();
        assert_eq!((s.selector_rank, s.selector_top_k), (256, 16));
        let ds = preset("dspark-27b").unwrap();
        assert_eq!((ds.block_size, ds.dspark.unwrap().markov_rank), (8, 256));
        assert!(preset("qwen3.8-27b").is_none());
    }

    /// Every preset kind written at a small width loads back through the GGUF loader (every
    /// expected tensor present with its shape, the keys read back equal).
    #[test]
    fn written_drafters_load_back() {
        let dir = std::env::temp_dir().join(format!("deltaspec-dsynth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in PRESETS {
            let mut c = preset(name).unwrap();
            (c.hidden, c.ffn, c.n_heads, c.n_kv_heads, c.head_dim) = (64, 96, 4, 2, 16);
            c.vocab = Some(300);
            c.mask_token_id = 299;
            if let Some(d) = c.dspark.as_mut() {
                (d.markov_rank, d.vocab, d.confidence_dim) = (8, 300, Some(72));
            }
            if let Some(d) = c.dflash2.as_mut() {
                d.selector_rank = 8;
            }
            let path = dir.join(format!("{name}.gguf"));
            write(&c, Recipe::Q8_0, 1, &path).unwrap();
            let back = super::super::DFlash::load(&path).unwrap();
            assert_eq!(back.cfg, c, "{name}");
            let base = back.weights.get("blk.4.attn_conv.base");
            assert_eq!(base.is_some(), c.dflash2.is_some(), "{name}");
            if let Some(b) = base {
                assert_eq!(b.dtype, DType::F32);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
