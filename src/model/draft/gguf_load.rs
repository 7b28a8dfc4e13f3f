//! Binds a `qwen35-dflash-draft` GGUF file: config from `{arch}.*` keys, weights zero-copy.

use super::config::{DFlash2Config, DFlashConfig, DSparkConfig};
use super::{ARCH, DFlash, llamacpp, names};
use crate::backend::{HostTensor, WeightStore};
use crate::gguf::GgufFile;
use crate::model::ModelError;
use std::path::Path;

pub(super) fn cfg_err(msg: String) -> ModelError {
    ModelError::Config(format!("dflash drafter: {msg}"))
}

/// The sliding-window layers: `{A}.attention.sliding_window_pattern` (bool per layer), if any.
pub(super) fn sliding(
    f: &GgufFile,
    a: &str,
    n_layers: usize,
) -> Result<(Option<usize>, Vec<bool>), ModelError> {
    let window = match f.get(&format!("{a}.attention.sliding_window")) {
        Some(_) => Some(f.get_u64(&format!("{a}.attention.sliding_window"))? as usize),
        None => None,
    };
    let key = format!("{a}.attention.sliding_window_pattern");
    let pattern = if f.get(&key).is_some() {
        let p = f.get_bool_array(&key)?;
        if p.len() != n_layers {
            return Err(cfg_err(format!(
                "{key} has {} entries for {n_layers} layers",
                p.len()
            )));
        }
        p
    } else {
        vec![false; n_layers]
    };
    Ok((window, pattern))
}

pub(super) fn config_from_gguf(f: &GgufFile) -> Result<DFlashConfig, ModelError> {
    let a = f.architecture()?;
    if a == llamacpp::ARCH {
        return llamacpp::config(f);
    }
    if a != ARCH {
        return Err(cfg_err(format!(
            "architecture '{a}' is not a DFlash drafter (expected {ARCH} or llama.cpp's {})",
            llamacpp::ARCH
        )));
    }
    let k = |s: &str| format!("{a}.{s}");
    let u = |s: &str| -> Result<usize, ModelError> { Ok(f.get_u64(&k(s))? as usize) };
    let opt_u = |s: &str| -> Result<Option<usize>, ModelError> {
        match f.get(&k(s)) {
            Some(_) => Ok(Some(u(s)?)),
            None => Ok(None),
        }
    };
    let n_layers = u("block_count")?;
    let hidden = u("embedding_length")?;
    let n_heads = u("attention.head_count")?;
    let head_dim = match opt_u("attention.key_length")? {
        Some(d) => d,
        None if n_heads > 0 => hidden / n_heads,
        None => 0,
    };
    if let Some(vl) = opt_u("attention.value_length")?
        && vl != head_dim
    {
        return Err(cfg_err(format!(
            "value_length {vl} differs from key_length {head_dim}"
        )));
    }
    let n_target_layers = u("dflash.n_target_layers")?;
    let ids_key = k("dflash.target_layer_ids");
    if f.get(&ids_key).is_none() {
        return Err(cfg_err(format!(
            "{ids_key} is missing (target layer ids are never derived)"
        )));
    }
    let target_layer_ids = f
        .get_i64_array(&ids_key)?
        .into_iter()
        .map(|v| usize::try_from(v).map_err(|_| cfg_err(format!("{ids_key} holds {v}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let mask = f.get_u64(&k("dflash.mask_token_id"))?;
    let mask_token_id =
        u32::try_from(mask).map_err(|_| cfg_err(format!("mask token id {mask} is too large")))?;
    let (sliding_window, sliding_layers) = sliding(f, a, n_layers)?;
    Ok(DFlashConfig {
        n_layers,
        hidden,
        ffn: u("feed_forward_length")?,
        vocab: opt_u("vocab_size")?,
        n_heads,
        n_kv_heads: u("attention.head_count_kv")?,
        head_dim,
        eps: f.get_f32(&k("attention.layer_norm_rms_epsilon"))?,
        rope_theta: f.get_f32(&k("rope.freq_base")).unwrap_or(10_000.0),
        rope_scaling: crate::model::rope_scaling::from_gguf(f, a)?,
        context_length: opt_u("context_length")?.unwrap_or(32_768),
        block_size: u("dflash.block_size")?,
        mask_token_id,
        n_target_layers,
        target_layer_ids,
        target_block_count: opt_u("dflash.target_block_count")?,
        sliding_window,
        sliding_layers,
        dspark: dspark(f, a)?,
        dflash2: dflash2(f, a)?,
    })
}

/// DFlash2 keys (`{A}.dflash.dflash2.*`): all four or none.
fn dflash2(f: &GgufFile, a: &str) -> Result<Option<DFlash2Config>, ModelError> {
    let k = |s: &str| format!("{a}.dflash.dflash2.{s}");
    let keys = [
        "conv_kernel_size",
        "conv_group_size",
        "selector_rank",
        "selector_top_k",
    ];
    let present: Vec<bool> = keys.iter().map(|s| f.get(&k(s)).is_some()).collect();
    if !present.contains(&true) {
        return Ok(None);
    }
    if let Some(i) = present.iter().position(|p| !p) {
        return Err(cfg_err(format!(
            "{} is missing (the other dflash2 keys are present)",
            k(keys[i])
        )));
    }
    let u = |s: &str| -> Result<usize, ModelError> { Ok(f.get_u64(&k(s))? as usize) };
    Ok(Some(DFlash2Config {
        conv_kernel: u(keys[0])?,
        conv_group: u(keys[1])?,
        selector_rank: u(keys[2])?,
        selector_top_k: u(keys[3])?,
    }))
}

/// DSpark keys (`{A}.dflash.dspark.*`), when `enabled` is true.
fn dspark(f: &GgufFile, a: &str) -> Result<Option<DSparkConfig>, ModelError> {
    let k = |s: &str| format!("{a}.dflash.dspark.{s}");
    if f.get(&k("enabled")).is_none() || !f.get_bool(&k("enabled"))? {
        return Ok(None);
    }
    let conf = f.get(&k("confidence.enabled")).is_some() && f.get_bool(&k("confidence.enabled"))?;
    Ok(Some(DSparkConfig {
        markov_rank: f.get_u64(&k("markov_rank"))? as usize,
        vocab: f.get_u64(&k("vocab_size"))? as usize,
        confidence_dim: if conf {
            Some(f.get_u64(&k("confidence_dim"))? as usize)
        } else {
            None
        },
    }))
}

/// Every tensor the drafter graph binds, with its shape (row-major).
pub(crate) fn expected_tensors(c: &DFlashConfig) -> Vec<(String, Vec<usize>)> {
    let (h, q, kv) = (c.hidden, c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
    let mut v = vec![
        (names::FC.to_string(), vec![h, c.feature_width()]),
        (names::HIDDEN_NORM.to_string(), vec![h]),
        (names::OUTPUT_NORM.to_string(), vec![h]),
    ];
    if let Some(d) = &c.dspark {
        v.push((names::MARKOV_W1.to_string(), vec![d.vocab, d.markov_rank]));
        v.push((names::MARKOV_W2.to_string(), vec![d.vocab, d.markov_rank]));
        if let Some(cd) = d.confidence_dim {
            v.push((names::CONFIDENCE_W.to_string(), vec![1, cd]));
            v.push((names::CONFIDENCE_B.to_string(), vec![1]));
        }
    }
    if let Some(d) = &c.dflash2 {
        let r = d.selector_rank;
        let vocab = c.vocab.unwrap_or(0);
        v.push((names::SELECTOR_HPROJ.to_string(), vec![r, h]));
        v.push((names::SELECTOR_PRED.to_string(), vec![vocab, r]));
        v.push((names::SELECTOR_SUCC.to_string(), vec![vocab, r]));
        for i in 0..c.n_layers {
            for conv in ["attn_conv", "ffn_conv"] {
                v.push((
                    names::blk(i, &format!("{conv}.base")),
                    vec![2, d.conv_kernel, h],
                ));
                v.push((
                    names::blk(i, &format!("{conv}.proj.weight")),
                    vec![d.proj_rows(h), h],
                ));
            }
        }
    }
    for i in 0..c.n_layers {
        for (suffix, shape) in names::LAYER.iter().zip([
            vec![h],
            vec![h],
            vec![q, h],
            vec![kv, h],
            vec![kv, h],
            vec![h, q],
            vec![c.head_dim],
            vec![c.head_dim],
            vec![c.ffn, h],
            vec![c.ffn, h],
            vec![h, c.ffn],
        ]) {
            v.push((names::blk(i, suffix), shape));
        }
    }
    v
}

pub(crate) fn check_weights(c: &DFlashConfig, store: &WeightStore) -> Result<(), ModelError> {
    crate::model::check_tensors(expected_tensors(c), store, "missing from the drafter")
}

pub(super) fn load(path: &Path) -> Result<DFlash, ModelError> {
    let f = GgufFile::open(path)?;
    let cfg = config_from_gguf(&f)?;
    cfg.validate()?;
    let llama = f.architecture()? == llamacpp::ARCH;
    let mut weights = WeightStore::default();
    let mut unknown = Vec::new();
    for t in &f.tensors {
        let name = if llama {
            match llamacpp::tensor_name(&t.name) {
                Some(n) => n,
                None => {
                    unknown.push(t.name.as_str());
                    continue;
                }
            }
        } else {
            t.name.clone()
        };
        crate::model::check_layer_index(&name, cfg.n_layers)?;
        weights.insert(
            name,
            HostTensor {
                dtype: t.dtype,
                shape: t.shape(),
                data: f.tensor_data(t),
            },
        );
    }
    if !unknown.is_empty() {
        return Err(cfg_err(format!(
            "llama.cpp dflash file holds tensors this loader does not map ({}); only plain \
             DFlash drafters are read in that layout",
            unknown.join(", ")
        )));
    }
    check_weights(&cfg, &weights)?;
    Ok(DFlash { cfg, weights })
}
