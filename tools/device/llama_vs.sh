#!/usr/bin/env bash
# llama.cpp's CUDA llama-bench against deltaspec's hip decode on one synthetic 27B IQ4_XS file,
# interleaved, for a same-run ratio (issue 4). On the GPU machine, from the repository root, with
# carry ["carry/bins.tar.xz", "carry/MANIFEST", "llcpp/llama.cpp.tar.xz"] (tools/device/build_carry.sh,
# tools/device/make_llcpp.sh): `bash tools/device/llama_vs.sh`. Builds llama-bench (~4.5 min on 16
# cores) while the model is synthesized; ~6 min in all. Results go to stdout, build logs to $OUT.
set -u
root=$PWD
# A subshell: a failed unpack must not leave the script inside carry/.
(cd carry && xz -dc bins.tar.xz | tar xf -) || { echo "carry/bins.tar.xz did not unpack"; exit 1; }
ds=carry/deltaspec; w=/tmp/w; mkdir -p $w
head -1 carry/MANIFEST
t0=$SECONDS
(
  cd $w && tar xJf "$root/llcpp/llama.cpp.tar.xz" && cd llama.cpp &&
  cmake -S . -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release > $OUT/llama-cmake.log 2>&1 &&
  cmake --build build --target llama-bench -j 16 > $OUT/llama-build.log 2>&1
  echo "llama build exit $?" >> $OUT/llama-build.log
) &
lp=$!
timeout 150 $ds synth --preset qwen3.8-27b --quant iq4_xs --out $w/m.gguf | tail -1
wait $lp
tail -n 2 $OUT/llama-build.log
echo "llama built t=$((SECONDS-t0))"
lb=$w/llama.cpp/build/bin/llama-bench
for i in 1 2; do
  timeout 150 $lb -m $w/m.gguf -fa 1 -ngl 99 -p 16 -n 64 -r 2 2>&1 | grep -E "tg64|pp16" | sed "s/^/[llama $i] /"
  timeout 60 $ds bench decode --model $w/m.gguf --backend hip:cuda -n 64 --bw-mib 2048 2>&1 | grep -E "decode:|roofline|bandwidth" | sed "s/^/[deltaspec $i] /"
done
# Prompt processing (llama-bench pp512; ours the same 512 tokens in one chunk): the default lowering
# (the int8 GEMV / matrix-core path at every width, since session 18) and the old one (prompts
# wider than 64 rows on the f32 tiled kernel: DELTASPEC_HIP_INT8_MAX_N=64).
timeout 150 $lb -m $w/m.gguf -fa 1 -ngl 99 -p 512 -n 0 -r 3 2>&1 | grep -E "pp512" | sed "s/^/[llama] /"
for cfg in - DELTASPEC_HIP_INT8_MAX_N=64; do
  s=(); [ "$cfg" != "-" ] && s=($cfg)
  env "${s[@]}" timeout 120 $ds bench prefill --model $w/m.gguf --backend hip:cuda -p 512 -r 3 2>&1 | grep -E "prefill:" | sed "s/^/[deltaspec $cfg] /"
done
echo "all done t=$((SECONDS-t0))"
