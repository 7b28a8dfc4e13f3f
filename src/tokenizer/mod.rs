//! Tokenizers from GGUF metadata or a Hugging Face `tokenizer.json`.
//!
//! Both routes end in a [`tokenizers::Tokenizer`] (the Hugging Face implementation, pure-Rust
//! build), so the GGUF route is checked against the reference library by building the same
//! pipeline Qwen's `tokenizer.json` describes: NFC, the model's split regex, byte-level BPE,
//! byte-level decoding, and added tokens matched before splitting.

mod file;
mod gguf_meta;
mod split;
mod vocab;

use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;
use tokenizers::ModelWrapper;

pub use split::{GPT2_SPLIT, QWEN2_SPLIT, QWEN35_SPLIT};
pub use vocab::{GgufVocab, TokenType};

#[derive(Debug, Error)]
pub enum TokenizerError {
    #[error("tokenizer: cannot read {path}: {source}", path = path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("tokenizer: cannot load {path}: {message}", path = path.display())]
    Load { path: PathBuf, message: String },
    #[error("tokenizer: unsupported tokenizer model {0:?} (only \"gpt2\" byte-level BPE is)")]
    UnsupportedModel(String),
    #[error("tokenizer: invalid vocabulary: {0}")]
    InvalidVocab(String),
    #[error("tokenizer: cannot build {what}: {source}")]
    Build {
        what: &'static str,
        #[source]
        source: tokenizers::Error,
    },
    #[error("tokenizer: encoding failed: {0}")]
    Encode(#[source] tokenizers::Error),
    #[error("tokenizer: decoding failed: {0}")]
    Decode(#[source] tokenizers::Error),
    #[error("tokenizer metadata: {0}")]
    Gguf(#[from] crate::gguf::GgufError),
    #[error("tokenizer: token id {id} is out of the vocabulary ({vocab_size} tokens)")]
    UnknownId { id: u32, vocab_size: usize },
}

/// Where a tokenizer came from, for [`Tokenizer::summary`].
#[derive(Debug, Clone)]
enum Origin {
    Gguf {
        model: String,
        pre: Option<String>,
        split: &'static str,
        split_known: bool,
    },
    File(PathBuf),
}

/// A text tokenizer: encode text to token ids and decode ids back to text.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    origin: Origin,
    /// Rows of the id space (highest id + 1), which is what embeddings are sized by.
    vocab_size: usize,
    merges: Option<usize>,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    pad: Option<u32>,
    /// Prepend `bos` ourselves: a GGUF has no post-processor to do it. A `tokenizer.json`
    /// carries its own, so this stays false there.
    add_bos: bool,
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes: byte-level BPE with the split regex its
    /// `tokenizer.ggml.pre` names (GPT-2's when unknown), a byte-level decoder, and the
    /// control (3) and user-defined (4) tokens as added tokens.
    pub fn from_gguf_vocab(v: &GgufVocab) -> Result<Tokenizer, TokenizerError> {
        let built = v.build()?;
        Ok(Tokenizer {
            inner: built.inner,
            origin: Origin::Gguf {
                model: v.model.clone(),
                pre: v.pre.clone(),
                split: built.split.name(),
                split_known: built.split_known,
            },
            vocab_size: v.tokens.len(),
            merges: Some(v.merges.len()),
            bos: v.bos,
            eos: v.eos,
            eot: v.eot,
            pad: v.pad,
            add_bos: v.add_bos,
        })
    }

    /// Loads a Hugging Face `tokenizer.json`. bos/eos/pad come from `tokenizer_config.json`
    /// beside it when there is one (`tokenizer.json` does not say which token ends a turn).
    pub fn from_file(path: &Path) -> Result<Tokenizer, TokenizerError> {
        let loaded = file::load(path)?;
        let vocab_size = loaded
            .inner
            .get_vocab(true)
            .values()
            .max()
            .map_or(0, |&id| id as usize + 1);
        Ok(Tokenizer {
            inner: loaded.inner,
            origin: Origin::File(path.to_owned()),
            vocab_size,
            merges: loaded.merges,
            bos: loaded.specials.bos,
            eos: loaded.specials.eos,
            eot: None,
            pad: loaded.specials.pad,
            add_bos: false,
        })
    }

    /// Text to token ids. Special and added tokens written in `text` (e.g. `<|im_start|>`)
    /// are always recognised, as in Hugging Face `tokenizers`; `add_special` only controls
    /// the BOS/post-processor tokens added around the text.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, TokenizerError> {
        // `encode_fast` skips the character offsets, which nothing here needs.
        let enc = self
            .inner
            .encode_fast(text, add_special)
            .map_err(TokenizerError::Encode)?;
        let ids = enc.get_ids();
        match self.bos {
            Some(bos) if add_special && self.add_bos => {
                let mut out = Vec::with_capacity(ids.len() + 1);
                out.push(bos);
                out.extend_from_slice(ids);
                Ok(out)
            }
            _ => Ok(ids.to_vec()),
        }
    }

    /// Token ids to text. With `skip_special`, control tokens (`<|im_end|>`, ...) are left
    /// out; user-defined ones (`<think>`) are kept. Ids that end mid-character decode to
    /// U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        // The library silently drops ids it does not know; an id from a model with a larger
        // embedding than vocabulary is a bug worth reporting instead.
        if let Some(&id) = ids.iter().find(|&&id| self.inner.id_to_token(id).is_none()) {
            return Err(TokenizerError::UnknownId {
                id,
                vocab_size: self.vocab_size,
            });
        }
        self.inner
            .decode(ids, skip_special)
            .map_err(TokenizerError::Decode)
    }

    /// Size of the id space (highest id + 1).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// End-of-turn token, when the GGUF names one apart from eos.
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }

    pub fn pad(&self) -> Option<u32> {
        self.pad
    }

    /// The id of a token given by its text, e.g. `"<|im_end|>"` (added tokens are looked
    /// up by their raw text, ordinary ones in the byte-level alphabet).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The text of a token id as stored in the vocabulary (see [`Tokenizer::token_id`]).
    pub fn token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// One line for `deltaspec info`: kind, vocabulary size, merges, special tokens.
    pub fn summary(&self) -> String {
        let kind = match self.inner.get_model() {
            ModelWrapper::BPE(_) => "BPE",
            ModelWrapper::WordPiece(_) => "WordPiece",
            ModelWrapper::WordLevel(_) => "WordLevel",
            ModelWrapper::Unigram(_) => "Unigram",
        };
        let source = match &self.origin {
            Origin::Gguf {
                model,
                pre,
                split,
                split_known,
            } => {
                let pre = pre.as_deref().unwrap_or("none");
                let fallback = if *split_known {
                    ""
                } else {
                    " (unknown pre: fallback)"
                };
                format!(
                    "byte-level {kind} from GGUF (model {model}, pre {pre}, split {split}{fallback})"
                )
            }
            Origin::File(path) => format!("{kind} from {}", path.display()),
        };
        let merges = self
            .merges
            .map_or_else(|| "no".to_owned(), |m| m.to_string());
        let n_special = self
            .inner
            .get_added_tokens_decoder()
            .values()
            .filter(|t| t.special)
            .count();
        format!(
            "{source}: {} tokens, {merges} merges, {n_special} special; bos {}, eos {}{}",
            self.vocab_size,
            self.describe(self.bos),
            self.describe(self.eos),
            if self.add_bos { ", adds bos" } else { "" },
        )
    }

    fn describe(&self, id: Option<u32>) -> String {
        match id {
            None => "none".to_owned(),
            Some(id) => match self.inner.id_to_token(id) {
                Some(tok) => format!("{id} {tok:?}"),
                None => format!("{id} (not in vocabulary)"),
            },
        }
    }
}

impl fmt::Debug for Tokenizer {
    // The derived form would print the whole vocabulary.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Tokenizer").field(&self.summary()).finish()
    }
}
