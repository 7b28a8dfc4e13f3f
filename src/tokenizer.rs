//! Tokenizers from GGUF metadata or `tokenizer.json`. (Being written.)

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TokenizerError {
    #[error("tokenizer: {0}")]
    Other(String),
}
