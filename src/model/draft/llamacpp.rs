//! llama.cpp's `dflash` drafter arch: its keys and tensor names mapped onto [`DFlashConfig`] and
//! the Lucebox tensor names the draft graph binds.
//!
//! Differences from `qwen35-dflash-draft` (names from llama.cpp `src/models/dflash.cpp` and the
//! converter vendored in llama-cpp-python 0.3.36):
//! - `fc.weight` and `enc.output_norm.weight` (DFlash's `hidden_norm`) instead of
//!   `dflash.fc.weight` / `dflash.hidden_norm.weight`; the `blk.N.*` and `output_norm` names
//!   are the same.
//! - `dflash.target_layers` instead of `target_layer_ids` + `n_target_layers`. Its meaning
//!   depends on the converter: the vendored one writes `target_layer_id + 1` (HF's
//!   hidden-state index, 0 = the embeddings), another revision writes the raw ids together with
//!   `dflash.target_hidden_size`. The ids are taken as raw when `target_hidden_size` is present
//!   or a 0 occurs (the embeddings are never a drafter feature), else as HF indices (minus 1).
//! - The mask token is `tokenizer.ggml.mask_token_id` (some revisions: `dflash.mask_token_id`).
//! - YaRN uses llama.cpp's `rope.scaling.yarn_beta_*` / `attn_factor` spellings, which the
//!   shared reader accepts.
//!
//! DSpark / DFlash2 heads in llama.cpp's layout are not mapped: a file holding tensors other
//! than the DFlash ones is refused, naming them.

use super::config::DFlashConfig;
use super::gguf_load::{cfg_err, sliding};
use super::names;
use crate::gguf::GgufFile;
use crate::model::ModelError;

/// The GGUF architecture name llama.cpp gives DFlash drafters.
pub const ARCH: &str = "dflash";

/// llama.cpp tensor name → the name the draft graph binds.
pub(super) fn tensor_name(name: &str) -> Option<String> {
    match name {
        "fc.weight" => Some(names::FC.into()),
        "enc.output_norm.weight" => Some(names::HIDDEN_NORM.into()),
        n if n == names::OUTPUT_NORM => Some(n.into()),
        n => {
            let rest = n.strip_prefix("blk.")?;
            let (i, suffix) = rest.split_once('.')?;
            i.parse::<usize>().ok()?;
            names::LAYER.contains(&suffix).then(|| n.to_string())
        }
    }
}

/// How `dflash.target_layers` numbers the layers.
fn target_layer_ids(f: &GgufFile) -> Result<Vec<usize>, ModelError> {
    let key = format!("{ARCH}.target_layers");
    if f.get(&key).is_none() {
        return Err(cfg_err(format!(
            "{key} is missing (target layer ids are never derived)"
        )));
    }
    let raw = f.get_i64_array(&key)?;
    if let Some(v) = raw.iter().find(|&&v| v < 0) {
        return Err(cfg_err(format!("{key} holds {v}")));
    }
    let raw_ids = f.get(&format!("{ARCH}.target_hidden_size")).is_some() || raw.contains(&0);
    Ok(raw
        .into_iter()
        .map(|v| if raw_ids { v as usize } else { v as usize - 1 })
        .collect())
}

pub(super) fn config(f: &GgufFile) -> Result<DFlashConfig, ModelError> {
    let a = ARCH;
    let k = |s: &str| format!("{a}.{s}");
    let u = |s: &str| -> Result<usize, ModelError> { Ok(f.get_u64(&k(s))? as usize) };
    let opt_u = |key: &str| -> Result<Option<usize>, ModelError> {
        match f.get(key) {
            Some(_) => Ok(Some(f.get_u64(key)? as usize)),
            None => Ok(None),
        }
    };
    let n_layers = u("block_count")?;
    let hidden = u("embedding_length")?;
    let n_heads = u("attention.head_count")?;
    let head_dim = match opt_u(&k("attention.key_length"))? {
        Some(d) => d,
        None if n_heads > 0 => hidden / n_heads,
        None => 0,
    };
    if let Some(th) = opt_u(&k("target_hidden_size"))?
        && th != hidden
    {
        return Err(cfg_err(format!(
            "target_hidden_size {th} differs from the drafter's hidden size {hidden}"
        )));
    }
    let target_layer_ids = target_layer_ids(f)?;
    let mask = opt_u("tokenizer.ggml.mask_token_id")?
        .or(opt_u(&k("mask_token_id"))?)
        .ok_or_else(|| {
            cfg_err("no mask token (tokenizer.ggml.mask_token_id or dflash.mask_token_id)".into())
        })?;
    let mask_token_id =
        u32::try_from(mask).map_err(|_| cfg_err(format!("mask token id {mask} is too large")))?;
    let (sliding_window, sliding_layers) = sliding(f, a, n_layers)?;
    Ok(DFlashConfig {
        n_layers,
        hidden,
        ffn: u("feed_forward_length")?,
        vocab: opt_u(&k("vocab_size"))?,
        n_heads,
        n_kv_heads: u("attention.head_count_kv")?,
        head_dim,
        eps: f.get_f32(&k("attention.layer_norm_rms_epsilon"))?,
        rope_theta: f.get_f32(&k("rope.freq_base")).unwrap_or(10_000.0),
        rope_scaling: crate::model::rope_scaling::from_gguf(f, a)?,
        context_length: opt_u(&k("context_length"))?.unwrap_or(32_768),
        block_size: u("block_size")?,
        mask_token_id,
        n_target_layers: target_layer_ids.len(),
        target_layer_ids,
        target_block_count: None,
        sliding_window,
        sliding_layers,
        dspark: None,
        dflash2: None,
    })
}
