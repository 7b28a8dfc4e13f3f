//! Binds a `qwen35` GGUF file: config from `{arch}.*` keys, weights zero-copy from the mmap.

use super::{Qwen35, Source};
use crate::backend::{HostTensor, WeightStore};
use crate::gguf::GgufFile;
use crate::graph::HeadMap;
use crate::model::{LayerKind, ModelError, Qwen35Config};
use crate::tokenizer::{GgufVocab, Tokenizer};
use std::path::Path;

/// A key that may hold a scalar or a per-layer array. Per-layer arrays of hybrid models hold 0
/// for the layers the value does not apply to (llama.cpp writes `head_count_kv` as 0 for
/// recurrent layers in such files), so the first non-zero entry is the value; all-zero is 0.
fn scalar_or_first(f: &GgufFile, key: &str) -> Result<u64, ModelError> {
    if let Ok(a) = f.get_u64_array(key) {
        if a.is_empty() {
            return Err(ModelError::Config(format!("{key} is an empty array")));
        }
        return Ok(a.iter().copied().find(|&v| v != 0).unwrap_or(0));
    }
    Ok(f.get_u64(key)?)
}

fn layer_pattern(f: &GgufFile, a: &str, n_layers: usize) -> Result<Vec<LayerKind>, ModelError> {
    let rec_key = format!("{a}.attention.recurrent_layers");
    if f.get(&rec_key).is_some() {
        let rec = f.get_bool_array(&rec_key)?;
        if rec.len() < n_layers {
            return Err(ModelError::Config(format!(
                "{rec_key} has {} entries for {n_layers} layers",
                rec.len()
            )));
        }
        return Ok(rec[..n_layers]
            .iter()
            .map(|r| {
                if *r {
                    LayerKind::DeltaNet
                } else {
                    LayerKind::Attention
                }
            })
            .collect());
    }
    let interval = f
        .get_u64(&format!("{a}.full_attention_interval"))
        .unwrap_or(4) as usize;
    Ok(Qwen35Config::pattern_from_interval(n_layers, interval))
}

pub(super) fn config_from_gguf(f: &GgufFile) -> Result<Qwen35Config, ModelError> {
    let a = f.architecture()?;
    if a != "qwen35" {
        return Err(ModelError::WrongArch {
            arch: a.to_string(),
        });
    }
    let k = |s: &str| format!("{a}.{s}");
    let u = |s: &str| -> Result<usize, ModelError> { Ok(scalar_or_first(f, &k(s))? as usize) };
    // llama.cpp counts MTP (nextn) blocks in block_count and appends them after the trunk.
    let n_all = u("block_count")?;
    let mtp_layers = f
        .get_u64(&k("nextn_predict_layers"))
        .map_or(0, |v| v as usize);
    if mtp_layers >= n_all {
        return Err(ModelError::Config(format!(
            "nextn_predict_layers {mtp_layers} leaves no trunk layer of block_count {n_all}"
        )));
    }
    let n_layers = n_all - mtp_layers;
    let nv = u("ssm.time_step_rank")?;
    let inner = u("ssm.inner_size")?;
    if nv == 0 || inner % nv != 0 {
        return Err(ModelError::Config(format!(
            "ssm.inner_size {inner} is not a multiple of ssm.time_step_rank {nv}"
        )));
    }
    let embd = f
        .tensor(super::names::TOKEN_EMBD)
        .ok_or_else(|| ModelError::Weight {
            name: super::names::TOKEN_EMBD.into(),
            msg: "missing from the GGUF".into(),
        })?;
    let head_dim = u("attention.key_length")?;
    if let Ok(v) = f.get_u64(&k("attention.value_length"))
        && v as usize != head_dim
    {
        return Err(ModelError::Config(format!(
            "attention.value_length {v} differs from attention.key_length {head_dim} (qwen35 has one head dim)"
        )));
    }
    Ok(Qwen35Config {
        n_layers,
        hidden: u("embedding_length")?,
        ffn: u("feed_forward_length")?,
        vocab: embd.shape()[0],
        n_heads: u("attention.head_count")?,
        n_kv_heads: u("attention.head_count_kv")?,
        head_dim,
        rot: f
            .get_u64(&k("rope.dimension_count"))
            .map(|v| v as usize)
            .unwrap_or(head_dim),
        rope_theta: f.get_f32(&k("rope.freq_base")).unwrap_or(10_000.0),
        rope_scaling: crate::model::rope_scaling::from_gguf(f, a)?,
        eps: f.get_f32(&k("attention.layer_norm_rms_epsilon"))?,
        conv_kernel: u("ssm.conv_kernel")?,
        nk: u("ssm.group_count")?,
        nv,
        dk: u("ssm.state_size")?,
        dv: inner / nv,
        layers: layer_pattern(f, a, n_layers)?,
        // llama.cpp's converter reorders qwen35 V heads so that value head j uses key head j % nk.
        head_map: HeadMap::Tiled,
        context_length: f
            .get_u64(&k("context_length"))
            .map(|v| v as usize)
            .unwrap_or(4096),
        mtp_layers,
    })
}

/// Every tensor the graph binds for `cfg`, with the shape it must have (row-major).
pub(crate) fn expected_tensors(c: &Qwen35Config) -> Vec<(String, Vec<usize>)> {
    use super::names::*;
    let mut v = vec![
        (TOKEN_EMBD.to_string(), vec![c.vocab, c.hidden]),
        (OUTPUT.to_string(), vec![c.vocab, c.hidden]),
        (OUTPUT_NORM.to_string(), vec![c.hidden]),
    ];
    for (i, kind) in c.layers.iter().enumerate() {
        let mut add = |n: &str, s: Vec<usize>| v.push((blk(i, n), s));
        add("attn_norm.weight", vec![c.hidden]);
        add("post_attention_norm.weight", vec![c.hidden]);
        add("ffn_gate.weight", vec![c.ffn, c.hidden]);
        add("ffn_up.weight", vec![c.ffn, c.hidden]);
        add("ffn_down.weight", vec![c.hidden, c.ffn]);
        match kind {
            LayerKind::Attention => {
                let (q, kv) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
                add("attn_q.weight", vec![2 * q, c.hidden]);
                add("attn_k.weight", vec![kv, c.hidden]);
                add("attn_v.weight", vec![kv, c.hidden]);
                add("attn_output.weight", vec![c.hidden, q]);
                add("attn_q_norm.weight", vec![c.head_dim]);
                add("attn_k_norm.weight", vec![c.head_dim]);
            }
            LayerKind::DeltaNet => {
                add("attn_qkv.weight", vec![c.conv_dim(), c.hidden]);
                add("attn_gate.weight", vec![c.value_dim(), c.hidden]);
                add("ssm_beta.weight", vec![c.nv, c.hidden]);
                add("ssm_alpha.weight", vec![c.nv, c.hidden]);
                add("ssm_conv1d.weight", vec![c.conv_dim(), c.conv_kernel]);
                add("ssm_a", vec![c.nv]);
                add("ssm_dt.bias", vec![c.nv]);
                add("ssm_norm.weight", vec![c.dv]);
                add("ssm_out.weight", vec![c.hidden, c.value_dim()]);
            }
        }
    }
    v
}

/// Checks `store` holds every expected tensor with its expected shape.
pub(super) fn check_weights(c: &Qwen35Config, store: &WeightStore) -> Result<(), ModelError> {
    crate::model::check_tensors(expected_tensors(c), store, "missing")
}

pub(super) fn load(path: &Path) -> Result<Qwen35, ModelError> {
    // A split model: the first shard holds the metadata, every shard some tensors.
    let shards = crate::gguf::split::open_all(path)?;
    let f = &shards[0];
    let cfg = config_from_gguf(f)?;
    let mut weights = WeightStore::default();
    for (f, t) in shards
        .iter()
        .flat_map(|f| f.tensors.iter().map(move |t| (f, t)))
    {
        match crate::model::block_index(&t.name) {
            // The MTP blocks: not run, so not loaded (nor uploaded to a device).
            Some(i) if i >= cfg.n_layers && i < cfg.n_layers + cfg.mtp_layers => continue,
            // Without `nextn_predict_layers` an MTP block would run as one more trunk layer.
            Some(i) if t.name.contains(".nextn.") => {
                return Err(ModelError::Weight {
                    name: t.name.clone(),
                    msg: format!(
                        "an MTP (nextn) tensor in trunk layer {i}: nextn_predict_layers is missing or too small"
                    ),
                });
            }
            _ => crate::model::check_layer_index(&t.name, cfg.n_layers)?,
        }
        weights.insert(
            t.name.clone(),
            HostTensor {
                dtype: t.dtype,
                shape: t.shape(),
                data: f.tensor_data(t),
            },
        );
    }
    // Tied embeddings: llama.cpp omits `output.weight` and reuses the token table.
    if weights.get(super::names::OUTPUT).is_none()
        && let Some(e) = weights.get(super::names::TOKEN_EMBD).cloned()
    {
        weights.insert(super::names::OUTPUT, e);
    }
    check_weights(&cfg, &weights)?;
    let tokenizer = match GgufVocab::from_gguf(f)? {
        Some(v) => Some(Tokenizer::from_gguf_vocab(&v)?),
        None => None,
    };
    Ok(Qwen35 {
        cfg,
        weights,
        tokenizer,
        source: Source::Gguf,
    })
}
