//! Pre-tokenizer split patterns: the regex that cuts text into words before byte-level BPE.
//!
//! GGUF names the pattern only indirectly, through `tokenizer.ggml.pre`; the patterns below
//! are the ones llama.cpp selects for those names (`llm_tokenizer_bpe` in `llama-vocab.cpp`),
//! written in the `(?i:...)` form of the models' own `tokenizer.json` (llama.cpp spells the
//! contractions out as `'[sS]|...` only because its regex engine lacks inline flags).

/// Qwen2 / Qwen2.5 / Qwen3 (`LLAMA_VOCAB_PRE_TYPE_QWEN2`): like GPT-4's split, but every
/// digit is its own word.
pub const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5 (`LLAMA_VOCAB_PRE_TYPE_QWEN35`): Qwen2's split with combining marks (`\p{M}`) kept
/// in words. Under the Qwen2 pattern a Devanagari vowel sign or a Thai tone mark would end
/// the word and start a punctuation run, so the two give different ids on such text.
pub const QWEN35_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GPT-2's split (the pattern of the `tokenizers` ByteLevel pre-tokenizer).
pub const GPT2_SPLIT: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Which split a GGUF vocabulary gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Qwen2,
    Qwen35,
    Gpt2,
}

impl Split {
    /// The split for a `tokenizer.ggml.pre` value, and whether the name was recognised.
    ///
    /// Unknown or missing names fall back to GPT-2's split (the byte-level BPE default)
    /// rather than failing, so that an unfamiliar GGUF still loads; the caller reports the
    /// fallback because the ids may then differ from the model's own tokenizer.
    pub fn for_pre(pre: Option<&str>) -> (Split, bool) {
        match pre {
            Some("qwen35") => (Split::Qwen35, true),
            // llama.cpp maps these names to the same pattern as qwen2.
            Some("qwen2" | "deepseek-r1-qwen" | "stablelm2") => (Split::Qwen2, true),
            Some("gpt2" | "gpt-2") => (Split::Gpt2, true),
            _ => (Split::Gpt2, false),
        }
    }

    pub fn pattern(self) -> &'static str {
        match self {
            Split::Qwen2 => QWEN2_SPLIT,
            Split::Qwen35 => QWEN35_SPLIT,
            Split::Gpt2 => GPT2_SPLIT,
        }
    }

    /// Qwen's `tokenizer.json` NFC-normalizes before splitting; GPT-2's has no normalizer.
    ///
    /// llama.cpp skips the NFC step, so it can differ from the reference tokenizer (and from
    /// us) on text that is not already NFC, e.g. a decomposed "e\u{301}".
    pub fn nfc(self) -> bool {
        matches!(self, Split::Qwen2 | Split::Qwen35)
    }

    pub fn name(self) -> &'static str {
        match self {
            Split::Qwen2 => "qwen2",
            Split::Qwen35 => "qwen35",
            Split::Gpt2 => "gpt2",
        }
    }
}
