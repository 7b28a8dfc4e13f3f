//! Building a byte-level BPE tokenizer from GGUF tokenizer metadata (`tokenizer.ggml.*`).

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split as SplitPre, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use super::TokenizerError;
use super::split::Split;

/// The GGUF tokenizer metadata (`tokenizer.ggml.*`), decoupled from the GGUF reader so that a
/// tokenizer can be built (and tested) without a model file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: "gpt2" (byte-level BPE), "llama" (SentencePiece), "no_vocab", ...
    pub model: String,
    /// `tokenizer.ggml.pre`: selects the pre-tokenizer split, e.g. "qwen2", "qwen35".
    pub pre: Option<String>,
    /// Token strings indexed by id, in GPT-2's byte-to-unicode alphabet (added tokens raw).
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type` per token (see [`TokenType`]); empty means all normal.
    pub token_types: Vec<i32>,
    /// BPE merges in rank order, each "left right".
    pub merges: Vec<String>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub pad: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`: prepend `bos` when encoding with special tokens.
    pub add_bos: bool,
}

/// llama.cpp's token attributes as stored in `tokenizer.ggml.token_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    /// Special tokens such as `<|im_end|>`: matched in text, skipped by `decode(.., true)`.
    Control,
    /// Added tokens such as `<think>`: matched in text, stored raw, kept when decoding.
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    pub fn from_i32(v: i32) -> Option<TokenType> {
        Some(match v {
            0 => TokenType::Undefined,
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return None,
        })
    }
}

/// What building from a [`GgufVocab`] produced, beyond the tokenizer itself.
pub(super) struct Built {
    pub inner: tokenizers::Tokenizer,
    pub split: Split,
    /// False when `pre` was unknown and the GPT-2 split was used instead.
    pub split_known: bool,
}

fn invalid(msg: impl Into<String>) -> TokenizerError {
    TokenizerError::InvalidVocab(msg.into())
}

impl GgufVocab {
    /// Checks the cross-field invariants a GGUF file cannot enforce.
    fn validate(&self) -> Result<(), TokenizerError> {
        let n = self.tokens.len();
        if n == 0 {
            return Err(invalid("the token list is empty"));
        }
        if u32::try_from(n).is_err() {
            return Err(invalid(format!("{n} tokens do not fit u32 ids")));
        }
        if !self.token_types.is_empty() && self.token_types.len() != n {
            return Err(invalid(format!(
                "{} token types for {n} tokens",
                self.token_types.len()
            )));
        }
        for (name, id) in [
            ("bos", self.bos),
            ("eos", self.eos),
            ("eot", self.eot),
            ("pad", self.pad),
        ] {
            if let Some(id) = id
                && id as usize >= n
            {
                return Err(invalid(format!(
                    "{name} token id {id} is out of range ({n} tokens)"
                )));
            }
        }
        if self.add_bos && self.bos.is_none() {
            return Err(invalid("add_bos is set but there is no bos token"));
        }
        Ok(())
    }

    fn token_type(&self, id: usize) -> Result<TokenType, TokenizerError> {
        match self.token_types.get(id) {
            None => Ok(TokenType::Normal),
            Some(&t) => TokenType::from_i32(t)
                .ok_or_else(|| invalid(format!("token {id} has unknown token type {t}"))),
        }
    }

    pub(super) fn build(&self) -> Result<Built, TokenizerError> {
        if self.model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(self.model.clone()));
        }
        self.validate()?;

        // Every token goes into the BPE vocabulary, added ones included: `add_special_tokens`
        // then finds them there and keeps their GGUF ids instead of appending new ones.
        // A repeated string keeps its first id (a map cannot hold both); the later id then
        // never comes out of `encode`, which is what llama.cpp does too.
        let mut vocab = Vocab::default();
        vocab.reserve(self.tokens.len());
        for (id, tok) in self.tokens.iter().enumerate() {
            vocab.entry(tok.clone()).or_insert(id as u32);
        }
        // Without an unknown token, BPE silently drops a byte it has no token for, so a
        // vocabulary missing part of the byte alphabet would lose text without an error.
        let mut missing: Vec<char> = ByteLevel::alphabet()
            .into_iter()
            .filter(|c| !vocab.contains_key(c.encode_utf8(&mut [0; 4]) as &str))
            .collect();
        if !missing.is_empty() {
            missing.sort_unstable();
            return Err(invalid(format!(
                "the vocabulary lacks {} of the 256 byte-level tokens (first: {:?})",
                missing.len(),
                missing[0]
            )));
        }

        let merges: Merges = self
            .merges
            .iter()
            .enumerate()
            .map(|(rank, m)| {
                // Byte-level tokens never contain a literal space (it is 'Ġ'), so the first
                // space is the separator.
                m.split_once(' ')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .ok_or_else(|| invalid(format!("merge {rank} {m:?} is not \"left right\"")))
            })
            .collect::<Result<_, _>>()?;

        // Qwen's tokenizer.json: `ignore_merges` off, no unknown token, no dropout.
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|source| TokenizerError::Build {
                what: "the BPE model",
                source,
            })?;

        let (split, split_known) = Split::for_pre(self.pre.as_deref());
        let split_pre = SplitPre::new(
            SplitPattern::Regex(split.pattern().to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|source| TokenizerError::Build {
            what: "the pre-tokenizer regex",
            source,
        })?;
        // The split has already cut the words: ByteLevel only maps bytes to its alphabet.
        let byte_level = ByteLevel::new(false, false, false);
        let pre = Sequence::new(vec![
            PreTokenizerWrapper::Split(split_pre),
            PreTokenizerWrapper::ByteLevel(byte_level),
        ]);

        let mut inner = tokenizers::Tokenizer::new(bpe);
        if split.nfc() {
            inner.with_normalizer(Some(NFC));
        }
        inner
            .with_pre_tokenizer(Some(pre))
            .with_decoder(Some(ByteLevelDecoder::new(false, false, false)));

        // Added tokens are matched on the raw text before splitting (`normalized(false)`, as
        // llama.cpp stores them pre-normalized); only control tokens count as special, so only
        // they are dropped by `decode(.., skip_special = true)`.
        let mut special = Vec::new();
        let mut user = Vec::new();
        for (id, tok) in self.tokens.iter().enumerate() {
            match self.token_type(id)? {
                TokenType::Control => special.push(AddedToken::from(tok.clone(), true)),
                TokenType::UserDefined => {
                    user.push(AddedToken::from(tok.clone(), false).normalized(false))
                }
                _ => {}
            }
        }
        inner.add_special_tokens(&special);
        inner.add_tokens(&user);

        Ok(Built {
            inner,
            split,
            split_known,
        })
    }
}
