#!/usr/bin/env python3
"""Build the tokenizer oracle fixture in tests/fixtures/tokenizer/.

We cannot ship (or download) Qwen3.5's real 248k-token vocabulary, so this trains a
small byte-level BPE with exactly the Qwen2/Qwen3.5 tokenizer.json settings (NFC
normalizer, the Qwen split regex, byte-level without its own regex, byte-level
decoder), adds Qwen's special tokens, and writes:

  tokenizer.json         the Hugging Face tokenizer (what `Tokenizer::from_file` loads)
  tokenizer_config.json  the bos/eos names, as an HF model dir carries them
  vocab.gguf             the same vocabulary as GGUF metadata, written the way
                         llama.cpp's convert_hf_to_gguf.py writes a Qwen vocab
                         (tokenizer.ggml.model = "gpt2", pre = "qwen2"); no tensors
  expected.json          ids from the Python `tokenizers` library for each test
                         string, for both the qwen2 split and the qwen35 split
                         (which also keeps combining marks \\p{M} with letters)

Usage (outside the repo's toolchain; CI only reads the outputs):
  python3 -m venv /tmp/tok && /tmp/tok/bin/pip install tokenizers gguf==0.19.0 numpy
  /tmp/tok/bin/python tools/oracle/make_tokenizer_fixture.py
"""

from __future__ import annotations

import json
import pathlib

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "tokenizer"

# From Qwen2's tokenizer.json (llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN2).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# From Qwen3.5's tokenizer.json (llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN35).
QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Special tokens the way Qwen marks them: `special` ones become CONTROL (3) in
# GGUF, the think tags are plain added tokens and become USER_DEFINED (4).
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED = ["<think>", "</think>"]

CORPUS = """
The quick brown fox jumps over the lazy dog. It's a well-known pangram; we'll use it, they've seen it.
I'm sure you'd agree that tokenizers are tricky: numbers like 12345, 3.14159 and 1,000,000 split per digit.
Prices: $19.99, €5, £3.50 — and percentages such as 42% or 99.9%.
Dates: 2024-06-01T12:34:56Z, times 08:15, phone +1 (555) 010-9999.
def fibonacci(n: int) -> int:
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)

fn main() {
    let xs: Vec<u32> = (0..10).map(|x| x * x).collect();
    println!("{:?}", xs);
}

for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
    \tindented with tabs\tand spaces   here.
Multiple   spaces,\ttabs,\r\nwindows newlines\nand unix ones.\n\n\nBlank lines too.
HTML: <div class="note">Hello &amp; goodbye</div> <br/>
JSON: {"key": "value", "list": [1, 2, 3], "nested": {"a": null, "b": true}}
URLs: https://example.com/path?query=1&other=two#frag and emails: someone@example.org
Unicode: café, naïve, résumé, Ångström, Zürich, São Paulo, Kraków, İstanbul.
Greek: Καλημέρα κόσμε. Russian: Привет, мир! Как дела?
Chinese: 你好，世界！今天天气很好。我们一起学习机器学习和自然语言处理。
Japanese: こんにちは世界。カタカナとひらがなと漢字。
Korean: 안녕하세요 세계. 반갑습니다.
Arabic: مرحبا بالعالم. Hebrew: שלום עולם.
Hindi: नमस्ते दुनिया। हिन्दी भाषा। मैं हिन्दी सीख रहा हूँ। स्कूल, क्या, प्यार, नमस्ते नमस्ते।
Thai: สวัสดีครับ ผมชื่อสมชาย ขอบคุณครับ สวัสดีค่ะ ยินดีที่ได้รู้จัก สวัสดี สวัสดี
Emoji: 😀 😃 🎉 👍🏽 👨‍👩‍👧‍👦 ❤️ 🚀 ✨ 🇯🇵
Math: ∀x ∈ ℝ, x² ≥ 0; ∑_{i=1}^{n} i = n(n+1)/2; α + β = γ.
Shouting: THIS IS ALL CAPS. Mixed CaSe WoRdS. snake_case camelCase PascalCase kebab-case.
Contractions in caps: IT'S, WE'LL, THEY'VE, I'D, YOU'RE, I'M.
"""

TEST_STRINGS = [
    "",
    "Hello world",
    "Hello, world!",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "It's we'll they've I'm you'd she'd YOU'RE",
    "1234567890",
    "3.14159 and 1,000,000",
    "The year 2024 had 366 days.",
    "def add(a, b):\n    return a + b\n",
    "fn main() {\n\tprintln!(\"hi\");\n}",
    "line one\nline two\r\nline three\n\n\nend",
    "tabs\tand   spaces\t\t mixed",
    "café naïve résumé Zürich",
    "Привет, мир!",
    "你好，世界！今天天气很好。",
    "こんにちは世界",
    "안녕하세요",
    "नमस्ते दुनिया",
    "สวัสดีครับ",
    "Emoji: 😀🎉👍🏽 and family 👨‍👩‍👧‍👦",
    "∑ x² ≥ 0",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nreasoning here\n</think>\n\nThe answer is 4.",
    "<|endoftext|>",
    "a<|im_end|>b",
    "https://example.com/path?query=1&x=y",
    "zqxj unseen wordz qwertyuiop",
    "e\u0301 decomposed accent",  # not NFC: the normalizer composes it
    "\u00a0non-breaking\u2003em-space",
    "   ",
    "\n",
    "!!!???...",
]


def build_tokenizer(split: str) -> Tokenizer:
    tok = Tokenizer(BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    return tok


def train() -> Tokenizer:
    # Merges are learned under the qwen35 split so that some of them join a letter
    # with a following combining mark (Devanagari, Thai): those merges can apply
    # only under qwen35, which makes the two splits give different ids and the
    # qwen35 cases worth checking. The saved tokenizer then uses the qwen2 split,
    # matching the GGUF's `tokenizer.ggml.pre = "qwen2"`.
    tok = build_tokenizer(QWEN35_SPLIT)
    trainer = BpeTrainer(
        vocab_size=1000,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([line for line in CORPUS.splitlines() if line], trainer=trainer)
    # Added after training so they sit at the end of the vocabulary, as in Qwen's.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in USER_DEFINED])
    tok.pre_tokenizer = build_tokenizer(QWEN2_SPLIT).pre_tokenizer
    return tok


def write_gguf(tok: Tokenizer, path: pathlib.Path) -> None:
    """Mirror convert_hf_to_gguf.py's `_set_vocab_gpt2` / `get_vocab_base`."""
    vocab = tok.get_vocab(with_added_tokens=True)
    reverse = {i: t for t, i in vocab.items()}
    n = max(reverse) + 1
    added = {i: a for i, a in tok.get_added_tokens_decoder().items()}
    tokens, types = [], []
    for i in range(n):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        tokens.append(reverse[i])
        if i in added:
            types.append(gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)

    model = json.loads(tok.to_str())["model"]
    # tokenizers >= 0.20 saves merges as pairs; GGUF stores "left right" strings.
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]

    w = gguf.GGUFWriter(str(path), "qwen35")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab["<|endoftext|>"])
    w.add_eos_token_id(vocab["<|im_end|>"])
    w.add_pad_token_id(vocab["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tok = train()
    tok.save(str(OUT / "tokenizer.json"), pretty=False)
    (OUT / "tokenizer_config.json").write_text(
        json.dumps(
            {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
            indent=2,
        )
        + "\n"
    )
    write_gguf(tok, OUT / "vocab.gguf")

    # The same vocabulary behind the qwen35 split: only the pre-tokenizer changes.
    tok35 = Tokenizer.from_str(tok.to_str())
    tok35.pre_tokenizer = build_tokenizer(QWEN35_SPLIT).pre_tokenizer

    cases = []
    for text in TEST_STRINGS:
        ids = tok.encode(text, add_special_tokens=True).ids
        cases.append(
            {
                "text": text,
                "ids": ids,
                "ids_qwen35": tok35.encode(text, add_special_tokens=True).ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
            }
        )
    differ = sum(c["ids"] != c["ids_qwen35"] for c in cases)
    (OUT / "expected.json").write_text(json.dumps({"cases": cases}, ensure_ascii=False, indent=1) + "\n")
    print(f"vocab {tok.get_vocab_size()} tokens, {len(cases)} cases ({differ} differ under qwen35) -> {OUT}")


if __name__ == "__main__":
    main()
