//! Speculative-decoding drafters. For now the DFlash drafter (arch `qwen35-dflash-draft`):
//! config and GGUF loader, the cached-KV draft graph, a per-sequence draft session, and the
//! converter from z-lab's safetensors layout.
//!
//! The drafter has no embedding or lm_head of its own: its graphs bind the target's
//! `token_embd.weight` and `output.weight`, which [`DFlash::weights_with_target`] adds to the
//! drafter's weight set.

pub mod config;
pub mod convert;
pub mod dflash2;
mod gguf_load;
mod graph;
pub mod llamacpp;
mod ring;
mod session;
pub mod synth;

pub use config::{DFlash2Config, DFlashConfig, DSparkConfig, YarnScaling};
pub use graph::DraftOut;
pub use ring::{FeatureDtype, FeatureRing};
pub use session::{DraftOutput, DraftParts, DraftSession, context_features};

use super::{ModelError, Qwen35};
use crate::backend::{HostTensor, WeightStore};
use std::path::Path;

/// The GGUF architecture of Lucebox-style DFlash drafters.
pub const ARCH: &str = "qwen35-dflash-draft";

/// A loaded DFlash drafter.
pub struct DFlash {
    pub cfg: DFlashConfig,
    /// The drafter's own tensors under their GGUF names.
    pub weights: WeightStore,
}

impl DFlash {
    /// Loads a drafter GGUF file: Lucebox's `qwen35-dflash-draft` or llama.cpp's `dflash`
    /// ([`llamacpp`]).
    pub fn load(path: &Path) -> Result<DFlash, ModelError> {
        if !path.exists() {
            return Err(ModelError::NotFound {
                path: path.display().to_string(),
            });
        }
        gguf_load::load(path)
    }

    /// Loads a drafter and checks it fits `target` (hidden size, vocab, target layer ids).
    pub fn load_for(path: &Path, target: &Qwen35) -> Result<DFlash, ModelError> {
        let d = Self::load(path)?;
        d.cfg.check_target(&target.cfg)?;
        Ok(d)
    }

    /// The drafter's weights plus the target's token embedding and lm_head (shared handles, no
    /// copy of the data on the host).
    pub fn weights_with_target(&self, target: &Qwen35) -> Result<WeightStore, ModelError> {
        self.cfg.check_target(&target.cfg)?;
        let mut w = self.weights.clone();
        for name in [names::TOKEN_EMBD, names::OUTPUT] {
            let t = target.weights.get(name).ok_or_else(|| ModelError::Weight {
                name: name.into(),
                msg: "missing from the target".into(),
            })?;
            w.insert(name, t.clone());
        }
        self.add_derived_weights(&mut w)?;
        Ok(w)
    }

    /// Adds the tensors the draft graph derives from the file's (the split confidence head,
    /// see [`names::CONFIDENCE_WH`]) to a weight set holding the drafter's tensors.
    pub fn add_derived_weights(&self, w: &mut WeightStore) -> Result<(), ModelError> {
        if let Some(cd) = self.cfg.dspark.as_ref().and_then(|d| d.confidence_dim) {
            split_confidence(w, self.cfg.hidden, cd)?;
        }
        Ok(())
    }
}

/// Splits the confidence head's `[1, cd]` weight into its hidden part `[1, H]`
/// ([`names::CONFIDENCE_WH`]) and, when `cd = H + r`, its Markov-embedding part `[1, r]`
/// ([`names::CONFIDENCE_WR`]), both f32: the graph has no column concat, so
/// `w · [h ; e] = w_h · h + w_r · e` is two matmuls (a few thousand values, copied once).
fn split_confidence(w: &mut WeightStore, hidden: usize, cd: usize) -> Result<(), ModelError> {
    let t = w
        .get(names::CONFIDENCE_W)
        .ok_or_else(|| ModelError::Weight {
            name: names::CONFIDENCE_W.into(),
            msg: "missing from the drafter".into(),
        })?;
    let v = t.to_f32()?;
    if v.len() != cd || cd < hidden {
        return Err(ModelError::Weight {
            name: names::CONFIDENCE_W.into(),
            msg: format!(
                "{} values for confidence_dim {cd} (hidden {hidden})",
                v.len()
            ),
        });
    }
    let wh = HostTensor::from_f32(&[1, hidden], &v[..hidden]);
    w.insert(names::CONFIDENCE_WH, wh);
    if cd > hidden {
        let wr = HostTensor::from_f32(&[1, cd - hidden], &v[hidden..]);
        w.insert(names::CONFIDENCE_WR, wr);
    }
    Ok(())
}

/// Tensor and state names of the DFlash drafter (GGUF, Lucebox layout).
pub mod names {
    pub use crate::model::qwen35::names::{OUTPUT, OUTPUT_NORM, TOKEN_EMBD, blk};
    pub const FC: &str = "dflash.fc.weight";
    pub const HIDDEN_NORM: &str = "dflash.hidden_norm.weight";
    pub const MARKOV_W1: &str = "dflash.dspark.markov.w1";
    pub const MARKOV_W2: &str = "dflash.dspark.markov.w2";
    pub const CONFIDENCE_W: &str = "dflash.dspark.confidence.weight";
    pub const CONFIDENCE_B: &str = "dflash.dspark.confidence.bias";
    /// Derived at upload ([`super::DFlash::weights_with_target`]): the hidden and Markov parts
    /// of [`CONFIDENCE_W`].
    pub const CONFIDENCE_WH: &str = "dflash.dspark.confidence.weight.h";
    pub const CONFIDENCE_WR: &str = "dflash.dspark.confidence.weight.r";
    pub const SELECTOR_HPROJ: &str = "dflash.selector.hproj.weight";
    pub const SELECTOR_PRED: &str = "dflash.selector.pred_cb";
    pub const SELECTOR_SUCC: &str = "dflash.selector.succ_cb";

    /// Per-layer tensors (suffixes after `blk.N.`).
    pub const LAYER: [&str; 11] = [
        "attn_norm.weight",
        "ffn_norm.weight",
        "attn_q.weight",
        "attn_k.weight",
        "attn_v.weight",
        "attn_output.weight",
        "attn_q_norm.weight",
        "attn_k_norm.weight",
        "ffn_gate.weight",
        "ffn_up.weight",
        "ffn_down.weight",
    ];

    /// The drafter's context K/V cache of layer `i`, `[cap, n_kv, head_dim]`.
    pub fn k_cache(i: usize) -> String {
        format!("dflash.k_cache.{i}")
    }
    pub fn v_cache(i: usize) -> String {
        format!("dflash.v_cache.{i}")
    }
}
