//! Graph builders for the target model (and, later, the drafters), and the loaders that bind
//! their weights from GGUF files or Hugging Face checkpoints.

pub mod config;
pub mod draft;
pub mod qwen35;
pub mod rope_scaling;
pub mod session;
pub mod synth;

pub use config::{LayerKind, Qwen35Config};
pub use qwen35::Qwen35;
pub use session::Session;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("{path}: not found")]
    NotFound { path: String },
    #[error("unsupported architecture '{arch}' (deltaspec runs qwen35)")]
    WrongArch { arch: String },
    #[error("model config: {0}")]
    Config(String),
    #[error("weight {name}: {msg}")]
    Weight { name: String, msg: String },
    #[error("{path}: {msg}")]
    Checkpoint { path: String, msg: String },
    #[error("context full: {need} positions needed, the sequence holds {cap}")]
    ContextFull { need: usize, cap: usize },
    #[error("token id {id} is outside the vocabulary ({vocab})")]
    BadToken { id: u32, vocab: usize },
    #[error(transparent)]
    Gguf(#[from] crate::gguf::GgufError),
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    #[error(transparent)]
    Quant(#[from] crate::tensor::quant::QuantError),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
}

/// Checks `store` holds every `(name, shape)` of `expected`, in a dequantizable type; `missing`
/// says what a missing tensor is missing from.
/// The layer index of a `blk.N.*` tensor name.
pub(crate) fn block_index(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// Refuses a `blk.N.*` tensor of a layer past the model's `n_layers` (a smaller `block_count`
/// would otherwise drop layers without a word).
pub(crate) fn check_layer_index(name: &str, n_layers: usize) -> Result<(), ModelError> {
    match block_index(name) {
        Some(i) if i >= n_layers => Err(ModelError::Weight {
            name: name.into(),
            msg: format!("layer {i} is past the model's {n_layers} layers (block_count)"),
        }),
        _ => Ok(()),
    }
}

pub(crate) fn check_tensors(
    expected: Vec<(String, Vec<usize>)>,
    store: &crate::backend::WeightStore,
    missing: &str,
) -> Result<(), ModelError> {
    for (name, shape) in expected {
        let t = store.get(&name).ok_or_else(|| ModelError::Weight {
            name: name.clone(),
            msg: missing.into(),
        })?;
        if t.shape != shape {
            return Err(ModelError::Weight {
                name,
                msg: format!("has shape {:?}, the config implies {:?}", t.shape, shape),
            });
        }
        if !t.dtype.is_dequantizable() {
            return Err(ModelError::Weight {
                name,
                msg: format!("type {} is not supported", t.dtype),
            });
        }
    }
    Ok(())
}
