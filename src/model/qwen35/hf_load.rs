//! Binds an HF `qwen3_5_text` checkpoint (`config.json` + safetensors) under GGUF names,
//! applying the transforms llama.cpp's converter would: zero-centred norms become `1 + w`,
//! `A_log` becomes `ssm_a = −exp(A_log)`, conv weights lose their singleton axis. Value heads
//! stay in HF's grouped order (the graph is told so via [`HeadMap::Grouped`]).

use super::{Qwen35, Source, gguf_load::check_weights, names};
use crate::backend::{HostTensor, TensorBytes, WeightStore};
use crate::graph::HeadMap;
use crate::model::{LayerKind, ModelError, Qwen35Config};
use crate::tensor::DType;
use crate::tokenizer::Tokenizer;
use serde_json::Value as Json;
use std::path::Path;
use std::sync::Arc;

fn ckpt_err(path: &Path, msg: impl Into<String>) -> ModelError {
    ModelError::Checkpoint {
        path: path.display().to_string(),
        msg: msg.into(),
    }
}

fn config_from_json(path: &Path, root: &Json) -> Result<Qwen35Config, ModelError> {
    // The composite VL config nests the text model's fields under `text_config`.
    let j = root.get("text_config").unwrap_or(root);
    let mt = j.get("model_type").and_then(Json::as_str).unwrap_or("");
    if !mt.is_empty() && mt != "qwen3_5_text" && mt != "qwen3_5" {
        return Err(ModelError::WrongArch {
            arch: mt.to_string(),
        });
    }
    let u = |k: &str| -> Result<usize, ModelError> {
        j.get(k)
            .and_then(Json::as_u64)
            .map(|v| v as usize)
            .ok_or_else(|| ckpt_err(path, format!("config.json lacks integer '{k}'")))
    };
    let rope = j.get("rope_parameters");
    let rope_f = |k: &str| {
        rope.and_then(|r| r.get(k))
            .or_else(|| j.get(k))
            .and_then(Json::as_f64)
    };
    let n_layers = u("num_hidden_layers")?;
    let layers = match j.get("layer_types").and_then(Json::as_array) {
        Some(types) => types
            .iter()
            .map(|t| match t.as_str() {
                Some("full_attention") => Ok(LayerKind::Attention),
                Some("linear_attention") => Ok(LayerKind::DeltaNet),
                other => Err(ckpt_err(path, format!("unknown layer type {other:?}"))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => {
            Qwen35Config::pattern_from_interval(n_layers, u("full_attention_interval").unwrap_or(4))
        }
    };
    let head_dim = u("head_dim")?;
    let nv = u("linear_num_value_heads")?;
    Ok(Qwen35Config {
        n_layers,
        hidden: u("hidden_size")?,
        ffn: u("intermediate_size")?,
        vocab: u("vocab_size")?,
        n_heads: u("num_attention_heads")?,
        n_kv_heads: u("num_key_value_heads")?,
        head_dim,
        rot: (head_dim as f64 * rope_f("partial_rotary_factor").unwrap_or(1.0)) as usize,
        rope_theta: rope_f("rope_theta").unwrap_or(10_000.0) as f32,
        rope_scaling: crate::model::rope_scaling::from_json(j, path)?.1,
        eps: j.get("rms_norm_eps").and_then(Json::as_f64).unwrap_or(1e-6) as f32,
        conv_kernel: u("linear_conv_kernel_dim")?,
        nk: u("linear_num_key_heads")?,
        nv,
        dk: u("linear_key_head_dim")?,
        dv: u("linear_value_head_dim")?,
        layers,
        head_map: HeadMap::Grouped,
        context_length: u("max_position_embeddings").unwrap_or(4096),
        // `mtp.*` tensors are not loaded (see `weights`).
        mtp_layers: u("mtp_num_hidden_layers").unwrap_or(0),
    })
}

/// The safetensors files of a checkpoint: `model.safetensors`, or the shards named by
/// `model.safetensors.index.json`.
pub(crate) fn shard_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, ModelError> {
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index)
        .map_err(|e| ckpt_err(dir, format!("no model.safetensors and no index: {e}")))?;
    let j: Json = serde_json::from_str(&text).map_err(|e| ckpt_err(&index, e.to_string()))?;
    let map = j
        .get("weight_map")
        .and_then(Json::as_object)
        .ok_or_else(|| ckpt_err(&index, "no weight_map"))?;
    let mut files: Vec<_> = map
        .values()
        .filter_map(Json::as_str)
        .map(|f| dir.join(f))
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// Maps an HF key to its GGUF name, or `None` for tensors the text model does not use.
fn gguf_name(key: &str) -> Option<String> {
    let k = key
        .strip_prefix("model.language_model.")
        .or_else(|| key.strip_prefix("model."))
        .unwrap_or(key);
    match k {
        "embed_tokens.weight" => return Some(names::TOKEN_EMBD.into()),
        "norm.weight" => return Some(names::OUTPUT_NORM.into()),
        "lm_head.weight" => return Some(names::OUTPUT.into()),
        _ => {}
    }
    let rest = k.strip_prefix("layers.")?;
    let (idx, part) = rest.split_once('.')?;
    let i: usize = idx.parse().ok()?;
    let g = match part {
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "post_attention_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        "linear_attn.in_proj_qkv.weight" => "attn_qkv.weight",
        "linear_attn.in_proj_z.weight" => "attn_gate.weight",
        "linear_attn.in_proj_b.weight" => "ssm_beta.weight",
        "linear_attn.in_proj_a.weight" => "ssm_alpha.weight",
        "linear_attn.conv1d.weight" => "ssm_conv1d.weight",
        "linear_attn.A_log" => "ssm_a",
        "linear_attn.dt_bias" => "ssm_dt.bias",
        "linear_attn.norm.weight" => "ssm_norm.weight",
        "linear_attn.out_proj.weight" => "ssm_out.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        _ => return None,
    };
    Some(names::blk(i, g))
}

/// Zero-centred RMSNorm weights (stored as `w`, used as `1 + w`).
fn is_zero_centred_norm(gguf: &str) -> bool {
    gguf == names::OUTPUT_NORM
        || [
            "attn_norm.weight",
            "post_attention_norm.weight",
            "attn_q_norm.weight",
            "attn_k_norm.weight",
        ]
        .iter()
        .any(|s| gguf.ends_with(&format!(".{s}")))
}

fn f32_values(t: &HostTensor) -> Result<Vec<f32>, ModelError> {
    Ok(t.to_f32()?)
}

fn transform(name: &str, t: HostTensor) -> Result<HostTensor, ModelError> {
    if is_zero_centred_norm(name) {
        let v: Vec<f32> = f32_values(&t)?.into_iter().map(|w| 1.0 + w).collect();
        return Ok(HostTensor::from_f32(&t.shape, &v));
    }
    if name.ends_with(".ssm_a") {
        let v: Vec<f32> = f32_values(&t)?.into_iter().map(|a| -a.exp()).collect();
        return Ok(HostTensor::from_f32(&t.shape, &v));
    }
    if name.ends_with(".ssm_conv1d.weight") && t.shape.len() == 3 && t.shape[1] == 1 {
        let shape = [t.shape[0], t.shape[2]];
        return Ok(HostTensor {
            shape: shape.to_vec(),
            ..t
        });
    }
    Ok(t)
}

pub(super) fn load(dir: &Path) -> Result<Qwen35, ModelError> {
    let cfg_path = dir.join("config.json");
    let text =
        std::fs::read_to_string(&cfg_path).map_err(|e| ckpt_err(&cfg_path, e.to_string()))?;
    let json: Json = serde_json::from_str(&text).map_err(|e| ckpt_err(&cfg_path, e.to_string()))?;
    let cfg = config_from_json(&cfg_path, &json)?;
    let tied = json
        .get("tie_word_embeddings")
        .or_else(|| {
            json.get("text_config")
                .and_then(|t| t.get("tie_word_embeddings"))
        })
        .and_then(Json::as_bool)
        .unwrap_or(false);

    let mut weights = WeightStore::default();
    for file in shard_files(dir)? {
        let fh = std::fs::File::open(&file).map_err(|e| ckpt_err(&file, e.to_string()))?;
        // SAFETY: the file is opened read-only and mapped privately; deltaspec never writes to
        // it, and a checkpoint changed underneath a running process is outside our contract
        // (as for every mmap-based loader).
        let map = Arc::new(
            unsafe { memmap2::Mmap::map(&fh) }.map_err(|e| ckpt_err(&file, e.to_string()))?,
        );
        let st = safetensors::SafeTensors::deserialize(&map)
            .map_err(|e| ckpt_err(&file, e.to_string()))?;
        for (key, view) in st.tensors() {
            let Some(name) = gguf_name(&key) else {
                continue;
            };
            let dtype = match view.dtype() {
                safetensors::Dtype::F32 => DType::F32,
                safetensors::Dtype::F16 => DType::F16,
                safetensors::Dtype::BF16 => DType::BF16,
                other => {
                    return Err(ckpt_err(
                        &file,
                        format!("{key}: unsupported dtype {other:?}"),
                    ));
                }
            };
            let start = view.data().as_ptr() as usize - map.as_ptr() as usize;
            let range = start..start + view.data().len();
            let t = HostTensor {
                dtype,
                shape: view.shape().to_vec(),
                data: TensorBytes::Mapped(map.clone(), range),
            };
            weights.insert(name.clone(), transform(&name, t)?);
        }
    }
    if weights.get(names::OUTPUT).is_none()
        && tied
        && let Some(e) = weights.get(names::TOKEN_EMBD).cloned()
    {
        weights.insert(names::OUTPUT, e);
    }
    check_weights(&cfg, &weights)?;
    let tok_path = dir.join("tokenizer.json");
    let tokenizer = if tok_path.exists() {
        Some(Tokenizer::from_file(&tok_path)?)
    } else {
        None
    };
    Ok(Qwen35 {
        cfg,
        weights,
        tokenizer,
        source: Source::HfSafetensors,
    })
}
