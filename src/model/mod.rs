//! Graph builders for the target model (and, later, the drafters), and the loaders that bind
//! their weights from GGUF files or Hugging Face checkpoints.

pub mod config;
pub mod draft;
pub mod qwen35;
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
