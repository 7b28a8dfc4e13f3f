//! `deltaspec convert --draft`: a z-lab DFlash checkpoint (`config.json` + safetensors) to a
//! `qwen35-dflash-draft` GGUF file (Lucebox layout, drafters.md §5.1 and §6).
//!
//! * `config.json` is required; tensor shapes override it where they determine a number
//!   (layers counted from `layers.N`, ffn from `gate_proj`, head dim from `k_proj` / n_kv,
//!   `n_target_layers = fc.in / hidden`).
//! * DFlash keys are read from `dflash_config` first, then the top level; target layer ids also
//!   from `aux_hidden_state_layer_ids`. RoPE θ and YaRN come from `rope_parameters`
//!   (transformers ≥ 5) or `rope_theta` / `rope_scaling`.
//! * DSpark heads inline in the safetensors (single-file releases: `markov_head.*`,
//!   `confidence_head.proj.*`; Lucebox sidecar names `dspark_*`; DS4 MTP `mtp.2.*`) are written
//!   as `dflash.dspark.*` with their keys; a confidence head without a bias gets a zero bias.
//! * Every tensor must be known (z-lab names, optionally `model.`-prefixed, or HF
//!   `MuseGlimmerAssistant`'s `encoder.fc` / `encoder.output_norm_enc`), and every expected one
//!   present with its shape; otherwise nothing is written. The file is written to a temporary
//!   path next to the output and renamed into place.

use super::config::{DFlash2Config, DFlashConfig, DSparkConfig};
use super::gguf_load::expected_tensors;
use super::{ARCH, names};
use crate::gguf::{GgufWriter, Value, ValueType};
use crate::model::ModelError;
use crate::model::qwen35::shard_files;
use crate::model::synth::Recipe;
use crate::tensor::{DType, quant};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::Path;

fn err(path: &Path, msg: impl Into<String>) -> ModelError {
    ModelError::Checkpoint {
        path: path.display().to_string(),
        msg: msg.into(),
    }
}

/// Output tensor type of the 2-D weights (1-D norms are always F32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutType {
    F32,
    F16,
    BF16,
    /// A quantized mix, chosen per tensor exactly as `deltaspec synth` chooses it for the same
    /// name and row width ([`Recipe::dtype_for`]: `q8_0`, or the 4-bit `q4_k_m` / `iq4_xs`
    /// with llama.cpp's fallbacks where rows are not whole blocks), so a synthetic drafter
    /// times the same kernels as a converted one.
    Quant(Recipe),
}

impl OutType {
    /// The plain 8-bit type (every 2-D weight Q8_0 where its rows are whole blocks).
    pub const Q8_0: OutType = OutType::Quant(Recipe::Q8_0);

    pub fn parse(s: &str) -> Result<OutType, ModelError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "f32" => OutType::F32,
            "f16" => OutType::F16,
            "bf16" => OutType::BF16,
            q @ ("q8_0" | "q4_k_m" | "iq4_xs") => OutType::Quant(Recipe::parse(q)?),
            other => {
                return Err(ModelError::Config(format!(
                    "unknown --outtype '{other}' (f32, f16, bf16, q8_0, q4_k_m, iq4_xs)"
                )));
            }
        })
    }

    /// The type of 2-D tensor `name` whose rows hold `cols` values.
    fn dtype_for(self, name: &str, cols: usize) -> DType {
        match self {
            OutType::F32 => DType::F32,
            OutType::F16 => DType::F16,
            OutType::BF16 => DType::BF16,
            OutType::Quant(r) => r.dtype_for(name, cols),
        }
    }
}

/// What a conversion wrote.
#[derive(Clone, Debug)]
pub struct ConvertReport {
    pub cfg: DFlashConfig,
    pub tensors: usize,
    pub bytes: u64,
}

/// The GGUF name of a checkpoint key, or `None` if it is not a DFlash tensor.
fn gguf_name(key: &str) -> Option<String> {
    let k = key.strip_prefix("model.").unwrap_or(key);
    match k {
        "fc.weight" | "encoder.fc.weight" => return Some(names::FC.into()),
        "hidden_norm.weight" | "encoder.output_norm_enc.weight" => {
            return Some(names::HIDDEN_NORM.into());
        }
        "norm.weight" => return Some(names::OUTPUT_NORM.into()),
        // DFlash2 candidate selector (the codebooks have no `.weight` suffix).
        "candidate_selector.predecessor_codebook" => return Some(names::SELECTOR_PRED.into()),
        "candidate_selector.successor_codebook" => return Some(names::SELECTOR_SUCC.into()),
        "candidate_selector.hidden_projection.weight" => {
            return Some(names::SELECTOR_HPROJ.into());
        }
        _ => {}
    }
    // DSpark heads: single-file releases, the Lucebox sidecar names, DS4 MTP shards.
    let head = k.strip_prefix("mtp.2.").unwrap_or(k);
    match head {
        "markov_head.markov_w1.weight" | "dspark_markov_head.markov_w1.weight" => {
            return Some(names::MARKOV_W1.into());
        }
        "markov_head.markov_w2.weight" | "dspark_markov_head.markov_w2.weight" => {
            return Some(names::MARKOV_W2.into());
        }
        "confidence_head.proj.weight" | "dspark_confidence_head.weight" => {
            return Some(names::CONFIDENCE_W.into());
        }
        "confidence_head.proj.bias" | "dspark_confidence_head.bias" => {
            return Some(names::CONFIDENCE_B.into());
        }
        _ => {}
    }
    let rest = k.strip_prefix("layers.")?;
    let (idx, part) = rest.split_once('.')?;
    let i: usize = idx.parse().ok()?;
    let g = match part {
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        // DFlash2 per-layer convs.
        "attention_conv.base_kernel" => "attn_conv.base",
        "attention_conv.kernel_projection.weight" => "attn_conv.proj.weight",
        "mlp_conv.base_kernel" => "ffn_conv.base",
        "mlp_conv.kernel_projection.weight" => "ffn_conv.proj.weight",
        _ => return None,
    };
    Some(names::blk(i, g))
}

struct Loaded {
    shape: Vec<usize>,
    values: Vec<f32>,
}

fn read_tensors(dir: &Path) -> Result<BTreeMap<String, Loaded>, ModelError> {
    let mut out = BTreeMap::new();
    for file in shard_files(dir)? {
        let bytes = std::fs::read(&file).map_err(|e| err(&file, e.to_string()))?;
        let st =
            safetensors::SafeTensors::deserialize(&bytes).map_err(|e| err(&file, e.to_string()))?;
        let mut keys: Vec<_> = st.names().into_iter().map(str::to_string).collect();
        keys.sort();
        for key in keys {
            let name = gguf_name(&key).ok_or_else(|| {
                err(
                    &file,
                    format!("unknown tensor '{key}' (not part of a DFlash drafter)"),
                )
            })?;
            let view = st.tensor(&key).map_err(|e| err(&file, e.to_string()))?;
            let dtype = match view.dtype() {
                safetensors::Dtype::F32 => DType::F32,
                safetensors::Dtype::F16 => DType::F16,
                safetensors::Dtype::BF16 => DType::BF16,
                other => return Err(err(&file, format!("{key}: unsupported dtype {other:?}"))),
            };
            let shape = view.shape().to_vec();
            let n: usize = shape.iter().product();
            let values = quant::dequantize(dtype, view.data(), n)?;
            if out.insert(name.clone(), Loaded { shape, values }).is_some() {
                return Err(err(&file, format!("{key}: a second tensor maps to {name}")));
            }
        }
    }
    Ok(out)
}

/// Looks `key` up in `dflash_config`, then at the top level.
fn dflash_key<'a>(j: &'a Json, key: &str) -> Option<&'a Json> {
    j.get("dflash_config")
        .and_then(|d| d.get(key))
        .or_else(|| j.get(key))
}

/// The drafter config from `config.json` and the tensor shapes.
fn derive_config(
    cfg_path: &Path,
    j: &Json,
    t: &BTreeMap<String, Loaded>,
) -> Result<DFlashConfig, ModelError> {
    let num = |k: &str| j.get(k).and_then(Json::as_u64).map(|v| v as usize);
    let need = |k: &str| num(k).ok_or_else(|| err(cfg_path, format!("{k} is missing")));
    let shape = |name: &str| -> Result<&[usize], ModelError> {
        t.get(name)
            .map(|l| l.shape.as_slice())
            .ok_or_else(|| err(cfg_path, format!("tensor {name} is missing")))
    };
    let hidden = need("hidden_size")?;
    let n_layers = t
        .keys()
        .filter_map(|k| {
            k.strip_prefix("blk.")?
                .split_once('.')?
                .0
                .parse::<usize>()
                .ok()
        })
        .max()
        .map_or(0, |m| m + 1);
    if n_layers == 0 {
        return Err(err(cfg_path, "the checkpoint has no layers.N tensors"));
    }
    if let Some(n) = num("num_hidden_layers")
        && n != n_layers
    {
        return Err(err(
            cfg_path,
            format!("num_hidden_layers {n} but the tensors have {n_layers} layers"),
        ));
    }
    let n_heads = need("num_attention_heads")?;
    let n_kv_heads = num("num_key_value_heads").unwrap_or(n_heads);
    let k_rows = shape(&names::blk(0, "attn_k.weight"))?[0];
    if n_kv_heads == 0 || !k_rows.is_multiple_of(n_kv_heads) {
        return Err(err(
            cfg_path,
            format!("k_proj has {k_rows} rows for {n_kv_heads} kv heads"),
        ));
    }
    let head_dim = k_rows / n_kv_heads;
    if let Some(hd) = num("head_dim")
        && hd != head_dim
    {
        return Err(err(
            cfg_path,
            format!("head_dim {hd} but k_proj implies {head_dim}"),
        ));
    }
    let ffn = shape(&names::blk(0, "ffn_gate.weight"))?[0];
    let fc = shape(names::FC)?;
    if fc.len() != 2 || fc[0] != hidden || fc[1] == 0 || !fc[1].is_multiple_of(hidden) {
        return Err(err(
            cfg_path,
            format!("fc.weight {fc:?} is not [hidden {hidden}, n·hidden]"),
        ));
    }
    let n_target_layers = fc[1] / hidden;
    let ids_json = dflash_key(j, "target_layer_ids")
        .or_else(|| j.get("aux_hidden_state_layer_ids"))
        .ok_or_else(|| {
            err(
                cfg_path,
                "target_layer_ids is missing (looked in dflash_config and at the top level)",
            )
        })?;
    let target_layer_ids = ids_json
        .as_array()
        .and_then(|a| {
            a.iter()
                .map(|v| v.as_u64().map(|x| x as usize))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| err(cfg_path, "target_layer_ids is not an array of layer ids"))?;
    if target_layer_ids.len() != n_target_layers {
        return Err(err(
            cfg_path,
            format!(
                "{} target_layer_ids but fc takes {n_target_layers} layers",
                target_layer_ids.len()
            ),
        ));
    }
    let mask = dflash_key(j, "mask_token_id")
        .and_then(Json::as_u64)
        .ok_or_else(|| err(cfg_path, "mask_token_id is missing"))?;
    let block_size = dflash_key(j, "block_size")
        .and_then(Json::as_u64)
        .ok_or_else(|| err(cfg_path, "block_size is missing"))? as usize;
    let (rope_theta, rope_scaling) = crate::model::rope_scaling::from_json(j, cfg_path)?;
    // Sliding window: only where attention is not declared bidirectional everywhere
    // (Lucebox: a top-level `is_causal: false` drops the pattern).
    let causal_flag = j.get("is_causal").and_then(Json::as_bool);
    let layer_types: Vec<String> = j
        .get("layer_types")
        .and_then(Json::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Json::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let window = num("sliding_window");
    let mut sliding_layers = vec![false; n_layers];
    if causal_flag != Some(false) && window.is_some_and(|w| w > 0) {
        for (i, ty) in layer_types.iter().enumerate().take(n_layers) {
            sliding_layers[i] = ty == "sliding_attention";
        }
    }
    let any_sliding = sliding_layers.contains(&true);
    let dspark = match (t.get(names::MARKOV_W1), t.get(names::MARKOV_W2)) {
        (None, None) => {
            if t.contains_key(names::CONFIDENCE_W) || t.contains_key(names::CONFIDENCE_B) {
                return Err(err(
                    cfg_path,
                    "a DSpark confidence head without a Markov head",
                ));
            }
            None
        }
        (Some(w1), Some(w2)) => {
            if w1.shape.len() != 2 || w1.shape != w2.shape {
                return Err(err(
                    cfg_path,
                    format!(
                        "DSpark Markov weights {:?} and {:?} are not both [vocab, rank]",
                        w1.shape, w2.shape
                    ),
                ));
            }
            let confidence_dim = match t.get(names::CONFIDENCE_W) {
                Some(c) if c.shape.len() == 2 && c.shape[0] == 1 => Some(c.shape[1]),
                Some(c) => {
                    return Err(err(
                        cfg_path,
                        format!("DSpark confidence weight {:?} is not [1, dim]", c.shape),
                    ));
                }
                None if t.contains_key(names::CONFIDENCE_B) => {
                    return Err(err(cfg_path, "a DSpark confidence bias without its weight"));
                }
                None => None,
            };
            Some(DSparkConfig {
                markov_rank: w1.shape[1],
                vocab: w1.shape[0],
                confidence_dim,
            })
        }
        _ => {
            return Err(err(
                cfg_path,
                "an incomplete DSpark Markov head (w1 and w2 needed)",
            ));
        }
    };
    let dflash2 = dflash2_config(cfg_path, j, t, hidden)?;
    let vocab = num("vocab_size").or_else(|| {
        dflash2
            .as_ref()
            .and_then(|_| t.get(names::SELECTOR_PRED))
            .map(|p| p.shape[0])
    });
    let cfg = DFlashConfig {
        n_layers,
        hidden,
        ffn,
        vocab,
        n_heads,
        n_kv_heads,
        head_dim,
        eps: j.get("rms_norm_eps").and_then(Json::as_f64).unwrap_or(1e-6) as f32,
        rope_theta,
        rope_scaling,
        context_length: num("max_position_embeddings").unwrap_or(32_768),
        block_size,
        mask_token_id: u32::try_from(mask)
            .map_err(|_| err(cfg_path, format!("mask_token_id {mask} is too large")))?,
        n_target_layers,
        target_layer_ids,
        target_block_count: num("num_target_layers"),
        sliding_window: if any_sliding { window } else { None },
        sliding_layers,
        dspark,
        dflash2,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// DFlash2 hyper-parameters: present when `config.json` declares any of them or the checkpoint
/// has any DFlash2 tensor. Group size and top-k come from the config (`dflash_config` first);
/// taps and rank from the config or, when absent there, the tensor shapes, which must agree.
fn dflash2_config(
    cfg_path: &Path,
    j: &Json,
    t: &BTreeMap<String, Loaded>,
    hidden: usize,
) -> Result<Option<DFlash2Config>, ModelError> {
    let key = |k: &str| dflash_key(j, k).and_then(Json::as_u64).map(|v| v as usize);
    let keys = [
        "conv_kernel_size",
        "conv_group_size",
        "selector_rank",
        "selector_top_k",
    ];
    let any_key = keys.iter().any(|k| dflash_key(j, k).is_some());
    let any_tensor = t
        .keys()
        .any(|k| k.starts_with("dflash.selector.") || k.contains("_conv."));
    if !any_key && !any_tensor {
        return Ok(None);
    }
    let base = t.get(&names::blk(0, "attn_conv.base"));
    let hproj = t.get(names::SELECTOR_HPROJ);
    let from_shape = |what: &str, cfg: Option<usize>, shape: Option<usize>| match (cfg, shape) {
        (Some(c), Some(s)) if c != s => Err(err(
            cfg_path,
            format!("{what} {c} but the tensors imply {s}"),
        )),
        (Some(v), _) | (None, Some(v)) => Ok(v),
        (None, None) => Err(err(
            cfg_path,
            format!("DFlash2 {what} is missing (config and tensors)"),
        )),
    };
    let conv_kernel = from_shape(
        "conv_kernel_size",
        key("conv_kernel_size"),
        base.filter(|b| b.shape.len() == 3).map(|b| b.shape[1]),
    )?;
    let selector_rank = from_shape(
        "selector_rank",
        key("selector_rank"),
        hproj.filter(|h| h.shape.len() == 2).map(|h| h.shape[0]),
    )?;
    let need = |k: &str| {
        key(k).ok_or_else(|| err(cfg_path, format!("DFlash2 {k} is missing from the config")))
    };
    let cfg = DFlash2Config {
        conv_kernel,
        conv_group: need("conv_group_size")?,
        selector_rank,
        selector_top_k: need("selector_top_k")?,
    };
    if cfg.conv_group == 0 || !hidden.is_multiple_of(cfg.conv_group) {
        return Err(err(
            cfg_path,
            format!(
                "conv_group_size {} does not divide hidden {hidden}",
                cfg.conv_group
            ),
        ));
    }
    Ok(Some(cfg))
}

pub(crate) fn write_metadata(w: &mut GgufWriter, c: &DFlashConfig) {
    let k = |s: &str| format!("{ARCH}.{s}");
    let u32v = |v: usize| Value::U32(v as u32);
    w.add_kv("general.architecture", Value::from(ARCH));
    w.add_kv("general.name", Value::from("DFlash drafter"));
    w.add_kv(&k("context_length"), u32v(c.context_length));
    w.add_kv(&k("embedding_length"), u32v(c.hidden));
    w.add_kv(&k("block_count"), u32v(c.n_layers));
    w.add_kv(&k("feed_forward_length"), u32v(c.ffn));
    w.add_kv(&k("attention.head_count"), u32v(c.n_heads));
    w.add_kv(&k("attention.head_count_kv"), u32v(c.n_kv_heads));
    w.add_kv(&k("attention.key_length"), u32v(c.head_dim));
    w.add_kv(&k("attention.value_length"), u32v(c.head_dim));
    if let Some(v) = c.vocab {
        w.add_kv(&k("vocab_size"), u32v(v));
    }
    w.add_kv(&k("attention.layer_norm_rms_epsilon"), Value::F32(c.eps));
    w.add_kv(&k("rope.freq_base"), Value::F32(c.rope_theta));
    if let Some(y) = &c.rope_scaling {
        // Lucebox's keys; `attn_factor` (llama.cpp's name) and `truncate` only when not the
        // defaults the loader assumes.
        w.add_kv(&k("rope.scaling.type"), Value::from("yarn"));
        w.add_kv(&k("rope.scaling.factor"), Value::F32(y.factor));
        w.add_kv(
            &k("rope.scaling.original_context_length"),
            u32v(y.original_context_length),
        );
        w.add_kv(&k("rope.scaling.beta_fast"), Value::F32(y.beta_fast));
        w.add_kv(&k("rope.scaling.beta_slow"), Value::F32(y.beta_slow));
        if let Some(a) = y.attention_factor {
            w.add_kv(&k("rope.scaling.attn_factor"), Value::F32(a));
        }
        if !y.truncate {
            w.add_kv(&k("rope.scaling.truncate"), Value::Bool(false));
        }
    }
    w.add_kv(&k("dflash.n_target_layers"), u32v(c.n_target_layers));
    w.add_kv(&k("dflash.block_size"), u32v(c.block_size));
    w.add_kv(&k("dflash.mask_token_id"), Value::U32(c.mask_token_id));
    w.add_kv(
        &k("dflash.target_layer_ids"),
        Value::array(ValueType::I32, c.target_layer_ids.iter().map(|&i| i as i32)),
    );
    if let Some(n) = c.target_block_count {
        w.add_kv(&k("dflash.target_block_count"), u32v(n));
    }
    if let Some(d) = &c.dspark {
        w.add_kv(&k("dflash.dspark.enabled"), Value::Bool(true));
        w.add_kv(&k("dflash.dspark.markov_rank"), u32v(d.markov_rank));
        w.add_kv(&k("dflash.dspark.vocab_size"), u32v(d.vocab));
        w.add_kv(
            &k("dflash.dspark.confidence.enabled"),
            Value::Bool(d.confidence_dim.is_some()),
        );
        if let Some(cd) = d.confidence_dim {
            w.add_kv(&k("dflash.dspark.confidence_dim"), u32v(cd));
        }
    }
    if let Some(d) = &c.dflash2 {
        w.add_kv(&k("dflash.dflash2.conv_kernel_size"), u32v(d.conv_kernel));
        w.add_kv(&k("dflash.dflash2.conv_group_size"), u32v(d.conv_group));
        w.add_kv(&k("dflash.dflash2.selector_rank"), u32v(d.selector_rank));
        w.add_kv(&k("dflash.dflash2.selector_top_k"), u32v(d.selector_top_k));
    }
    if let Some(win) = c.sliding_window {
        w.add_kv(&k("attention.sliding_window"), u32v(win));
        w.add_kv(
            &k("attention.sliding_window_pattern"),
            Value::array(ValueType::Bool, c.sliding_layers.iter().copied()),
        );
    }
}

/// Converts the checkpoint in `dir` to `out`. Nothing is left at `out` on error.
pub fn convert_dflash(
    dir: &Path,
    out: &Path,
    outtype: OutType,
) -> Result<ConvertReport, ModelError> {
    if !dir.is_dir() {
        return Err(ModelError::NotFound {
            path: dir.display().to_string(),
        });
    }
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path)
        .map_err(|e| err(&cfg_path, format!("cannot read the drafter config: {e}")))?;
    let j: Json = serde_json::from_str(&text).map_err(|e| err(&cfg_path, e.to_string()))?;
    let mut tensors = read_tensors(dir)?;
    let cfg = derive_config(&cfg_path, &j, &tensors)?;

    if cfg
        .dspark
        .as_ref()
        .is_some_and(|d| d.confidence_dim.is_some())
        && !tensors.contains_key(names::CONFIDENCE_B)
    {
        // A confidence head without a bias gets a zero bias (as Lucebox writes it).
        tensors.insert(
            names::CONFIDENCE_B.to_string(),
            Loaded {
                shape: vec![1],
                values: vec![0.0],
            },
        );
    }
    let expected = expected_tensors(&cfg);
    let mut w = GgufWriter::new();
    write_metadata(&mut w, &cfg);
    for (name, shape) in &expected {
        let t = tensors
            .remove(name)
            .ok_or_else(|| err(dir, format!("tensor {name} is missing")))?;
        if &t.shape != shape {
            return Err(err(
                dir,
                format!(
                    "{name} has shape {:?}, the config implies {shape:?}",
                    t.shape
                ),
            ));
        }
        // Norms and the DFlash2 conv bases stay F32.
        let dtype = if shape.len() == 1 || name.ends_with("_conv.base") {
            DType::F32
        } else {
            outtype.dtype_for(name, shape[1])
        };
        let data = quant::quantize(dtype, &t.values)?;
        let ne: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        w.add_tensor(name, &ne, dtype, data)?;
    }
    if let Some(name) = tensors.keys().next() {
        return Err(err(
            dir,
            format!(
                "tensor {name} is not used by a {}-layer drafter",
                cfg.n_layers
            ),
        ));
    }

    let file_name = out
        .file_name()
        .ok_or_else(|| err(out, "not a file path"))?
        .to_string_lossy()
        .to_string();
    let tmp = out.with_file_name(format!(".{file_name}.tmp.{}", std::process::id()));
    let res = w.write_file(&tmp);
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    std::fs::rename(&tmp, out).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(out, format!("renaming the finished file into place: {e}"))
    })?;
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    Ok(ConvertReport {
        cfg,
        tensors: expected.len(),
        bytes,
    })
}
