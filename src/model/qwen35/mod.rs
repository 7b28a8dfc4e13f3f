//! The Qwen3.5 / 3.8 hybrid target: gated DeltaNet layers with gated full attention every
//! `full_attention_interval` layers.
//!
//! Weights are bound under their GGUF names (`blk.N.attn_qkv.weight`, …) whatever the source;
//! HF checkpoints are renamed and transformed on load (zero-centred norms +1, `ssm_a`).

mod gguf_load;
mod graph;
mod hf_load;

pub(crate) use gguf_load::expected_tensors;
pub use graph::{GraphOptions, LogitRows};
pub(crate) use hf_load::shard_files;

use super::{ModelError, Qwen35Config};
use crate::backend::{StateDecl, WeightStore};
use crate::tokenizer::Tokenizer;
use std::path::Path;

/// Where a model came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Gguf,
    HfSafetensors,
}

pub struct Qwen35 {
    pub cfg: Qwen35Config,
    pub weights: WeightStore,
    pub tokenizer: Option<Tokenizer>,
    pub source: Source,
}

impl Qwen35 {
    /// Loads a `qwen35` GGUF file or an HF directory (`config.json` + safetensors).
    pub fn load(path: &Path) -> Result<Qwen35, ModelError> {
        if !path.exists() {
            return Err(ModelError::NotFound {
                path: path.display().to_string(),
            });
        }
        let m = if path.is_dir() {
            hf_load::load(path)?
        } else {
            gguf_load::load(path)?
        };
        m.cfg.validate()?;
        Ok(m)
    }

    /// The per-sequence state buffers for a context of `ctx` positions.
    pub fn state_decls(&self, ctx: usize) -> Vec<StateDecl> {
        crate::state::layout(&self.cfg, ctx)
    }

    /// Count of weight tensors per dtype, e.g. `Q4_K: 120`.
    pub fn dtype_counts(&self) -> Vec<(String, usize)> {
        let mut m = std::collections::BTreeMap::<String, usize>::new();
        for t in self.weights.tensors.values() {
            *m.entry(t.dtype.name().to_string()).or_default() += 1;
        }
        m.into_iter().collect()
    }
}

/// Canonical (GGUF) tensor and state names.
pub mod names {
    pub const TOKEN_EMBD: &str = "token_embd.weight";
    pub const OUTPUT: &str = "output.weight";
    pub const OUTPUT_NORM: &str = "output_norm.weight";

    pub fn blk(i: usize, what: &str) -> String {
        format!("blk.{i}.{what}")
    }
    pub use crate::state::{
        conv_state, conv_tokens, k_cache, ssm_log, ssm_state, ssm_tokens, v_cache,
    };
}
