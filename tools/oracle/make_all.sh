#!/usr/bin/env bash
# Regenerates every external-oracle fixture: tests/fixtures/models/** and
# tests/fixtures/quant/llamacpp_blocks.safetensors. See tools/oracle/README.md.
#
#   tools/oracle/make_all.sh setup   # once: both venvs + the llama-cpp-python sdist (~15 min on 2 cores)
#   tools/oracle/make_all.sh         # everything else (~6 min on 2 cores)
#
# Env: ORACLE_PY (default .venv-oracle/bin/python), LLAMA_PY (default .venv-llama/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
O=tools/oracle
W=$O/work
M=tests/fixtures/models
ORACLE_PY=${ORACLE_PY:-$ROOT/.venv-oracle/bin/python}
LLAMA_PY=${LLAMA_PY:-$ROOT/.venv-llama/bin/python}
SDIST_VER=0.3.36
SDIST_DIR=$W/llama_cpp_python-$SDIST_VER

if [[ "${1:-}" == setup ]]; then
  mkdir -p "$W"
  [[ -x .venv-oracle/bin/python ]] || python3 -m venv .venv-oracle
  .venv-oracle/bin/pip install torch==2.15.0 transformers==5.23.0 safetensors numpy gguf==0.19.0 sentencepiece
  # sdist only; --no-binary :all: would also try to build cmake/ninja from source
  [[ -f $W/llama_cpp_python-$SDIST_VER.tar.gz ]] || \
    pip download --no-deps --no-binary llama-cpp-python llama-cpp-python==$SDIST_VER -d "$W"
  [[ -d $SDIST_DIR ]] || tar xzf "$W/llama_cpp_python-$SDIST_VER.tar.gz" -C "$W"
  [[ -x .venv-llama/bin/python ]] || python3 -m venv .venv-llama
  .venv-llama/bin/pip install numpy safetensors
  CMAKE_BUILD_PARALLEL_LEVEL=2 \
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_CURL=OFF" \
    .venv-llama/bin/pip install "$W/llama_cpp_python-$SDIST_VER.tar.gz"
  exit 0
fi

[[ -d $SDIST_DIR/vendor/llama.cpp ]] || { echo "run '$0 setup' first" >&2; exit 1; }
mkdir -p "$W/extra" tests/fixtures/quant
export LLAMA_CPP_DIR=$ROOT/$SDIST_DIR/vendor/llama.cpp

# 1. HF models + fp32 references
rm -rf "$M"/tiny-*
"$ORACLE_PY" $O/make_oracle.py $M

# 2. llama.cpp's converter (tokenizer patched to no_vocab)
for n in tiny-a tiny-b tiny-c; do
  "$ORACLE_PY" $O/convert_novocab.py $M/$n --no-mtp --outtype f32 --outfile $M/$n/model-f32.gguf >/dev/null 2>&1
done
"$ORACLE_PY" $O/convert_novocab.py $M/tiny-a --no-mtp --outtype bf16 --outfile $M/tiny-a/model-bf16.gguf >/dev/null 2>&1

# 3. llama.cpp's quantizer
q() { timeout 300 "$LLAMA_PY" $O/quantize.py "$1" "$2" "$3"; }
for t in q8_0 q6_k q4_k_m iq4_xs; do q $M/tiny-b/model-f32.gguf $M/tiny-b/model-$t.gguf $t; done
q $M/tiny-a/model-f32.gguf $M/tiny-a/model-q8_0.gguf q8_0
# extra files (not committed), only to get blocks of more types for the block fixture
for t in q4_0 q4_1 q5_0 q5_1 q5_k_m iq4_nl; do q $M/tiny-b/model-f32.gguf $W/extra/tiny-b-$t.gguf $t; done

# 4. exact HF references of every GGUF (+ check of the transform undo on the f32 GGUFs), manifest.json
rm -f $M/manifest.json $M/llamacpp.json
"$ORACLE_PY" $O/make_gguf_refs.py $M

# 5. llama.cpp sanity run of every GGUF, llamacpp.json
"$LLAMA_PY" $O/run_llamacpp.py $M

# 6. raw llama.cpp-quantized blocks + gguf-py dequantization, cross-checked against ggml's own to_float
"$ORACLE_PY" $O/make_blocks.py tests/fixtures/quant/llamacpp_blocks.safetensors \
  $M/tiny-b/model-q4_k_m.gguf $M/tiny-b/model-iq4_xs.gguf $M/tiny-b/model-q6_k.gguf $M/tiny-b/model-q8_0.gguf \
  $M/tiny-a/model-q8_0.gguf $M/tiny-a/model-bf16.gguf $W/extra/tiny-b-*.gguf
"$LLAMA_PY" $O/check_blocks_ggml.py tests/fixtures/quant/llamacpp_blocks.safetensors

# 7. README table
python3 $O/write_fixture_readme.py $M >/dev/null
du -sh $M tests/fixtures/quant/llamacpp_blocks.safetensors
