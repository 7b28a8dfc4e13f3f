//! RoPE scaling of a model's config, shared by the target and the drafters: YaRN read from GGUF
//! keys or an HF `config.json`; other scaling types are refused rather than ignored.

use crate::gguf::GgufFile;
use crate::model::ModelError;
use serde_json::Value as Json;
use std::path::Path;

fn cfg_err(msg: String) -> ModelError {
    ModelError::Config(msg)
}

fn err(path: &Path, msg: impl Into<String>) -> ModelError {
    ModelError::Checkpoint {
        path: path.display().to_string(),
        msg: msg.into(),
    }
}

/// YaRN RoPE scaling as a model declares it (GGUF `{A}.rope.scaling.*`, HF `rope_parameters` /
/// `rope_scaling`), applied by the graph's rope ops as HF transformers computes it
/// ([`crate::graph::Yarn`]).
#[derive(Clone, Debug, PartialEq)]
pub struct YarnScaling {
    pub factor: f32,
    pub original_context_length: usize,
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// An explicit cos/sin multiplier (HF `attention_factor`, or the one `mscale` /
    /// `mscale_all_dim` give); `None`: `0.1·ln(factor) + 1`.
    pub attention_factor: Option<f32>,
    /// Whether the ramp bounds are rounded outward to whole dims (HF `truncate`, default true).
    pub truncate: bool,
}

impl YarnScaling {
    /// The graph's parameters.
    pub fn to_graph(&self) -> crate::graph::Yarn {
        crate::graph::Yarn {
            factor: self.factor,
            original_context: self.original_context_length,
            beta_fast: self.beta_fast,
            beta_slow: self.beta_slow,
            attention_factor: self.attention_factor,
            truncate: self.truncate,
        }
    }
}

/// YaRN keys (`{A}.rope.scaling.*`); both beta spellings are accepted (Lucebox `beta_fast`,
/// llama.cpp `yarn_beta_fast`), `attn_factor` and `truncate` are optional.
pub(crate) fn from_gguf(f: &GgufFile, a: &str) -> Result<Option<YarnScaling>, ModelError> {
    let k = |s: &str| format!("{a}.rope.scaling.{s}");
    let Some(ty) = f.get(&k("type")) else {
        return Ok(None);
    };
    let ty = ty
        .as_str()
        .ok_or_else(|| cfg_err(format!("{} is not a string", k("type"))))?;
    // llama.cpp's default type is "linear", and a linear factor of 1 scales nothing.
    let unit_linear = ty == "linear"
        && match f.get(&k("factor")) {
            None => true,
            Some(_) => f.get_f32(&k("factor"))? == 1.0,
        };
    if ty == "none" || unit_linear {
        return Ok(None);
    }
    if ty != "yarn" {
        return Err(cfg_err(format!(
            "rope scaling type '{ty}' is not supported"
        )));
    }
    let opt = |names: &[&str]| -> Result<Option<f32>, ModelError> {
        for n in names {
            if f.get(&k(n)).is_some() {
                return Ok(Some(f.get_f32(&k(n))?));
            }
        }
        Ok(None)
    };
    let num = |names: &[&str], default: Option<f32>| -> Result<f32, ModelError> {
        opt(names)?
            .or(default)
            .ok_or_else(|| cfg_err(format!("{} is missing", k(names[0]))))
    };
    let orig = match f.get(&k("original_context_length")) {
        Some(_) => f.get_u64(&k("original_context_length"))? as usize,
        None => {
            return Err(cfg_err(format!(
                "{} is missing",
                k("original_context_length")
            )));
        }
    };
    let truncate = match f.get(&k("truncate")) {
        Some(_) => f.get_bool(&k("truncate"))?,
        None => true,
    };
    Ok(Some(YarnScaling {
        factor: num(&["factor"], None)?,
        original_context_length: orig,
        beta_fast: num(&["beta_fast", "yarn_beta_fast"], Some(32.0))?,
        beta_slow: num(&["beta_slow", "yarn_beta_slow"], Some(1.0))?,
        attention_factor: opt(&["attn_factor"])?,
        truncate,
    }))
}

pub(crate) fn from_json(
    j: &Json,
    cfg_path: &Path,
) -> Result<(f32, Option<YarnScaling>), ModelError> {
    let params = j.get("rope_parameters").filter(|v| v.is_object());
    let scaling = j.get("rope_scaling").filter(|v| v.is_object());
    let theta = params
        .and_then(|p| p.get("rope_theta"))
        .or_else(|| j.get("rope_theta"))
        .and_then(Json::as_f64)
        .unwrap_or(10_000.0) as f32;
    let mut yarn = None;
    for block in [params, scaling].into_iter().flatten() {
        let ty = block
            .get("rope_type")
            .or_else(|| block.get("type"))
            .and_then(Json::as_str)
            .unwrap_or("default");
        match ty {
            // Multimodal RoPE sections: text positions are equal in every section.
            "default" | "mrope" => {}
            "yarn" => {
                let num = |k: &str| block.get(k).and_then(Json::as_f64);
                let factor = num("factor")
                    .ok_or_else(|| err(cfg_path, "yarn rope scaling without a factor"))?;
                let orig = num("original_max_position_embeddings").ok_or_else(|| {
                    err(
                        cfg_path,
                        "yarn rope scaling without original_max_position_embeddings",
                    )
                })?;
                // HF: `attention_factor`, else from `mscale` / `mscale_all_dim` when both are
                // set, else 0.1·ln(factor) + 1 (left to the graph).
                let mscale = |m: f64| {
                    if factor <= 1.0 {
                        1.0
                    } else {
                        0.1 * m * factor.ln() + 1.0
                    }
                };
                let attention_factor = match (
                    num("attention_factor"),
                    num("mscale"),
                    num("mscale_all_dim"),
                ) {
                    (Some(a), _, _) => Some(a as f32),
                    (None, Some(m), Some(ma)) if m != 0.0 && ma != 0.0 => {
                        Some((mscale(m) / mscale(ma)) as f32)
                    }
                    _ => None,
                };
                yarn = Some(YarnScaling {
                    factor: factor as f32,
                    original_context_length: orig as usize,
                    // HF: `get("beta_fast") or 32` (a 0 also means the default).
                    beta_fast: num("beta_fast").filter(|&v| v != 0.0).unwrap_or(32.0) as f32,
                    beta_slow: num("beta_slow").filter(|&v| v != 0.0).unwrap_or(1.0) as f32,
                    attention_factor,
                    truncate: block
                        .get("truncate")
                        .and_then(Json::as_bool)
                        .unwrap_or(true),
                });
                break;
            }
            other => {
                return Err(err(
                    cfg_path,
                    format!("rope type '{other}' is not supported"),
                ));
            }
        }
    }
    Ok((theta, yarn))
}
