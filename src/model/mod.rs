//! Graph builders for the target model and the drafters. (Being written.)

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("model: {0}")]
    Other(String),
}
