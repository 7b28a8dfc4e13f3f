#!/usr/bin/env python3
"""convert_novocab.py <hf_dir> [convert_hf_to_gguf.py args...]   (torch venv)

Runs llama.cpp's own convert_hf_to_gguf.py (vendored in the llama-cpp-python 0.3.36 sdist) on a tiny HF model
that has no tokenizer: only `set_vocab` is patched, to write tokenizer.ggml.model = "no_vocab" and
{arch}.vocab_size. Everything else (tensor transforms, metadata) is the converter's own.

LLAMA_CPP_DIR overrides the location of the vendored llama.cpp
(default tools/oracle/work/llama_cpp_python-0.3.36/vendor/llama.cpp).

Example: convert_novocab.py tests/fixtures/models/tiny-a --no-mtp --outtype f32 --outfile .../model-f32.gguf
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LC = os.environ.get("LLAMA_CPP_DIR",
                    os.path.join(HERE, "work", "llama_cpp_python-0.3.36", "vendor", "llama.cpp"))
if not os.path.exists(os.path.join(LC, "convert_hf_to_gguf.py")):
    sys.exit(f"vendored llama.cpp not found at {LC}; see tools/oracle/README.md")
sys.path[:0] = [LC, os.path.join(LC, "gguf-py")]
# make sure the vendored gguf-py wins over the PyPI gguf in the venv
for mod in [m for m in sys.modules if m == "gguf" or m.startswith("gguf.")]:
    del sys.modules[mod]

import conversion.qwen as Q  # noqa: E402


def no_vocab(self):
    self.gguf_writer.add_tokenizer_model("no_vocab")
    self.gguf_writer.add_vocab_size(self.hparams["vocab_size"])


for c in (Q.Qwen3NextModel, Q.Qwen3_5TextModel, Q.Qwen3_5MoeTextModel):
    c.set_vocab = no_vocab

sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[1:]
runpy.run_path(os.path.join(LC, "convert_hf_to_gguf.py"), run_name="__main__")
