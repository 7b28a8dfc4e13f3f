//! Reading [`GgufVocab`] out of a GGUF file's `tokenizer.ggml.*` metadata.

use crate::gguf::GgufFile;

use super::{GgufVocab, TokenizerError};

const MODEL: &str = "tokenizer.ggml.model";
const PRE: &str = "tokenizer.ggml.pre";
const TOKENS: &str = "tokenizer.ggml.tokens";
const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const MERGES: &str = "tokenizer.ggml.merges";
const BOS: &str = "tokenizer.ggml.bos_token_id";
const EOS: &str = "tokenizer.ggml.eos_token_id";
const EOT: &str = "tokenizer.ggml.eot_token_id";
const PAD: &str = "tokenizer.ggml.padding_token_id";
const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";

impl GgufVocab {
    /// The tokenizer metadata of `f`, or `None` when the file carries no vocabulary
    /// (no `tokenizer.ggml.model`, or `"no_vocab"` / `"none"` as llama.cpp writes for
    /// embedding-only files). Keys that are present must have the right types.
    pub fn from_gguf(f: &GgufFile) -> Result<Option<GgufVocab>, TokenizerError> {
        if f.get(MODEL).is_none() {
            return Ok(None);
        }
        let model = f.get_str(MODEL)?;
        if matches!(model, "no_vocab" | "none") {
            return Ok(None);
        }
        let owned = |v: Vec<&str>| v.into_iter().map(str::to_owned).collect::<Vec<_>>();
        let token_types = match f.get(TOKEN_TYPE) {
            None => Vec::new(),
            Some(_) => f
                .get_i64_array(TOKEN_TYPE)?
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    i32::try_from(t).map_err(|_| {
                        TokenizerError::InvalidVocab(format!(
                            "{TOKEN_TYPE}[{i}] = {t} is not an i32"
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        // llama.cpp refuses a BPE vocabulary without merges; other models have none.
        let merges = if model == "gpt2" || f.get(MERGES).is_some() {
            owned(f.get_str_array(MERGES)?)
        } else {
            Vec::new()
        };
        Ok(Some(GgufVocab {
            model: model.to_owned(),
            pre: f
                .get(PRE)
                .map(|_| f.get_str(PRE))
                .transpose()?
                .map(str::to_owned),
            tokens: owned(f.get_str_array(TOKENS)?),
            token_types,
            merges,
            bos: token_id(f, BOS)?,
            eos: token_id(f, EOS)?,
            eot: token_id(f, EOT)?,
            pad: token_id(f, PAD)?,
            add_bos: f
                .get(ADD_BOS)
                .map(|_| f.get_bool(ADD_BOS))
                .transpose()?
                .unwrap_or(false),
        }))
    }
}

/// An optional token-id key; range against the vocabulary is checked when building.
fn token_id(f: &GgufFile, key: &str) -> Result<Option<u32>, TokenizerError> {
    let Some(_) = f.get(key) else {
        return Ok(None);
    };
    let id = f.get_u64(key)?;
    u32::try_from(id)
        .map(Some)
        .map_err(|_| TokenizerError::InvalidVocab(format!("{key} = {id} does not fit u32")))
}
