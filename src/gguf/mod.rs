//! GGUF v3 reader (over mmap) and writer. (Being written.)

use thiserror::Error;

#[derive(Debug, Error)]
pub enum GgufError {
    #[error("gguf: {0}")]
    Other(String),
}
