//! Loading a Hugging Face `tokenizer.json` (and its sibling `tokenizer_config.json`).

use std::path::Path;

use serde_json::Value;

use super::TokenizerError;

pub(super) struct Loaded {
    pub inner: tokenizers::Tokenizer,
    /// Number of BPE merges, when the model has them.
    pub merges: Option<usize>,
    pub specials: Specials,
}

#[derive(Default)]
pub(super) struct Specials {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
}

fn read_json(path: &Path) -> Result<Value, TokenizerError> {
    let bytes = std::fs::read(path).map_err(|source| TokenizerError::Io {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|e| TokenizerError::Load {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

pub(super) fn load(path: &Path) -> Result<Loaded, TokenizerError> {
    // Parsed once into a Value: the merge count is not readable from the built model.
    let json = read_json(path)?;
    let merges = json
        .pointer("/model/merges")
        .and_then(Value::as_array)
        .map(Vec::len);
    let inner: tokenizers::Tokenizer =
        serde_json::from_value(json).map_err(|e| TokenizerError::Load {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    let config = path.with_file_name("tokenizer_config.json");
    let specials = if config.is_file() {
        specials_from_config(&inner, &config)?
    } else {
        Specials::default()
    };
    Ok(Loaded {
        inner,
        merges,
        specials,
    })
}

/// bos/eos/pad from `tokenizer_config.json`, where each is a token string, an
/// `{"content": ...}` object, or null.
fn specials_from_config(
    inner: &tokenizers::Tokenizer,
    path: &Path,
) -> Result<Specials, TokenizerError> {
    let config = read_json(path)?;
    let lookup = |key: &str| -> Result<Option<u32>, TokenizerError> {
        let content = match config.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(s)) => s.as_str(),
            Some(v) => match v.get("content").and_then(Value::as_str) {
                Some(s) => s,
                None => {
                    return Err(TokenizerError::Load {
                        path: path.to_owned(),
                        message: format!("{key} is neither a string nor {{\"content\": ...}}"),
                    });
                }
            },
        };
        // A config naming a token the vocabulary lacks belongs to another tokenizer.
        inner
            .token_to_id(content)
            .map(Some)
            .ok_or_else(|| TokenizerError::Load {
                path: path.to_owned(),
                message: format!("{key} {content:?} is not in the vocabulary"),
            })
    };
    Ok(Specials {
        bos: lookup("bos_token")?,
        eos: lookup("eos_token")?,
        pad: lookup("pad_token")?,
    })
}
