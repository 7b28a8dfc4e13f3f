//! The tokenizer against the oracle fixture from `tools/oracle/make_tokenizer_fixture.py`:
//! ids computed by Hugging Face `tokenizers` (Python) for a small byte-level BPE trained with
//! Qwen's settings, loaded here from its `tokenizer.json` and from the same vocabulary written
//! as GGUF metadata the way llama.cpp's converter does.

use std::path::{Path, PathBuf};

use deltaspec::gguf::GgufFile;
use deltaspec::tokenizer::{GgufVocab, Tokenizer, TokenizerError};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
    ids_qwen35: Vec<u32>,
    decoded: String,
    decoded_skip_special: String,
}

#[derive(Deserialize)]
struct Expected {
    cases: Vec<Case>,
}

const ENDOFTEXT: u32 = 1000;
const IM_END: u32 = 1002;
const N_TOKENS: usize = 1005;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tokenizer")
        .join(name)
}

fn expected() -> Vec<Case> {
    let text = std::fs::read_to_string(fixture("expected.json")).unwrap();
    let e: Expected = serde_json::from_str(&text).unwrap();
    assert!(e.cases.len() >= 30);
    e.cases
}

fn gguf_vocab() -> GgufVocab {
    let f = GgufFile::open(&fixture("vocab.gguf")).unwrap();
    GgufVocab::from_gguf(&f)
        .unwrap()
        .expect("the fixture has a vocabulary")
}

/// Checks `tok` against every case; `qwen35` picks the ids expected under the qwen35 split.
fn check(tok: &Tokenizer, qwen35: bool) {
    for c in expected() {
        let want = if qwen35 { &c.ids_qwen35 } else { &c.ids };
        let ids = tok.encode(&c.text, true).unwrap();
        assert_eq!(&ids, want, "encode {:?}", c.text);
        assert_eq!(tok.encode(&c.text, false).unwrap(), ids, "no bos to add");
        assert_eq!(
            tok.decode(&ids, false).unwrap(),
            c.decoded,
            "decode {:?}",
            c.text
        );
        assert_eq!(
            tok.decode(&ids, true).unwrap(),
            c.decoded_skip_special,
            "decode skipping special {:?}",
            c.text
        );
    }
}

#[test]
fn fixture_round_trips_except_the_non_nfc_case() {
    // decode(encode(s)) == s wherever s is already NFC; the one decomposed case comes back
    // composed, as the normalizer intends.
    for c in expected() {
        if c.text.contains('\u{301}') {
            assert_ne!(c.decoded, c.text);
            assert_eq!(c.decoded, c.text.replace("e\u{301}", "\u{e9}"));
        } else {
            assert_eq!(c.decoded, c.text);
        }
    }
}

#[test]
fn from_file_matches_reference() {
    let tok = Tokenizer::from_file(&fixture("tokenizer.json")).unwrap();
    check(&tok, false);
    assert_eq!(tok.vocab_size(), N_TOKENS);
    // From tokenizer_config.json, which names no bos.
    assert_eq!(tok.eos(), Some(IM_END));
    assert_eq!(tok.bos(), None);
    assert_eq!(tok.pad(), Some(ENDOFTEXT));
    assert_eq!(tok.token_id("<|im_end|>"), Some(IM_END));
}

#[test]
fn gguf_metadata_is_read() {
    let v = gguf_vocab();
    assert_eq!(v.model, "gpt2");
    assert_eq!(v.pre.as_deref(), Some("qwen2"));
    assert_eq!(v.tokens.len(), N_TOKENS);
    assert_eq!(v.token_types.len(), N_TOKENS);
    assert_eq!(&v.token_types[1000..], &[3, 3, 3, 4, 4]);
    assert!(!v.merges.is_empty());
    assert_eq!(
        (v.bos, v.eos, v.eot, v.pad),
        (Some(ENDOFTEXT), Some(IM_END), None, Some(ENDOFTEXT))
    );
    assert!(!v.add_bos);
}

#[test]
fn from_gguf_matches_reference() {
    let tok = Tokenizer::from_gguf_vocab(&gguf_vocab()).unwrap();
    check(&tok, false);
    assert_eq!(tok.vocab_size(), N_TOKENS);
    assert_eq!(tok.bos(), Some(ENDOFTEXT));
    assert_eq!(tok.eos(), Some(IM_END));
    let s = tok.summary();
    assert!(s.contains("pre qwen2") && s.contains("1005 tokens"), "{s}");
    assert!(s.contains(r#"eos 1002 "<|im_end|>""#), "{s}");
}

#[test]
fn qwen35_split_keeps_combining_marks_in_words() {
    let mut v = gguf_vocab();
    v.pre = Some("qwen35".into());
    let tok = Tokenizer::from_gguf_vocab(&v).unwrap();
    check(&tok, true);
    // The fixture is only a useful check if the two splits disagree somewhere.
    assert!(expected().iter().any(|c| c.ids != c.ids_qwen35));
}

#[test]
fn unknown_pre_falls_back_to_gpt2_and_says_so() {
    let mut v = gguf_vocab();
    v.pre = Some("mystery".into());
    let tok = Tokenizer::from_gguf_vocab(&v).unwrap();
    assert!(tok.summary().contains("fallback"), "{}", tok.summary());
    let ids = tok.encode("hello world", false).unwrap();
    assert_eq!(tok.decode(&ids, false).unwrap(), "hello world");
}

#[test]
fn add_bos_prepends_only_with_special() {
    let mut v = gguf_vocab();
    v.add_bos = true;
    let tok = Tokenizer::from_gguf_vocab(&v).unwrap();
    let plain = tok.encode("Hello world", false).unwrap();
    let with = tok.encode("Hello world", true).unwrap();
    assert_eq!(with[0], ENDOFTEXT);
    assert_eq!(&with[1..], &plain[..]);
}

#[test]
fn decode_rejects_unknown_ids() {
    let tok = Tokenizer::from_gguf_vocab(&gguf_vocab()).unwrap();
    let err = tok.decode(&[1, N_TOKENS as u32], false).unwrap_err();
    assert!(matches!(err, TokenizerError::UnknownId { id, .. } if id == N_TOKENS as u32));
}

#[test]
fn invalid_vocabularies_are_errors() {
    let base = gguf_vocab();

    let v = GgufVocab {
        model: "llama".into(),
        ..base.clone()
    };
    let err = Tokenizer::from_gguf_vocab(&v).unwrap_err();
    assert!(
        matches!(err, TokenizerError::UnsupportedModel(ref m) if m == "llama"),
        "{err}"
    );

    let mut v = base.clone();
    v.token_types.pop();
    let err = Tokenizer::from_gguf_vocab(&v).unwrap_err();
    assert!(err.to_string().contains("token types"), "{err}");

    let mut v = base.clone();
    v.eos = Some(N_TOKENS as u32);
    let err = Tokenizer::from_gguf_vocab(&v).unwrap_err();
    assert!(err.to_string().contains("eos token id"), "{err}");

    let mut v = base.clone();
    v.merges[0] = "nospace".into();
    let err = Tokenizer::from_gguf_vocab(&v).unwrap_err();
    assert!(err.to_string().contains("merge 0"), "{err}");

    let mut v = base.clone();
    v.merges.push("Ġ zzzzzz".into());
    let err = Tokenizer::from_gguf_vocab(&v).unwrap_err();
    assert!(matches!(err, TokenizerError::Build { .. }), "{err}");

    // Byte-level tokens are the first 256 of the fixture; renaming one loses that byte.
    let mut v = base.clone();
    v.tokens[0] = "renamed".into();
    let err = Tokenizer::from_gguf_vocab(&v).unwrap_err();
    assert!(err.to_string().contains("byte-level tokens"), "{err}");
}

#[test]
fn missing_file_is_an_io_error() {
    let err = Tokenizer::from_file(Path::new("/nonexistent/tokenizer.json")).unwrap_err();
    assert!(matches!(err, TokenizerError::Io { .. }), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/tokenizer.json"),
        "{err}"
    );
}
