#!/usr/bin/env bash
# Fetches the llama-cpp-python 0.3.36 sdist from PyPI (sha256-checked), takes its vendor/llama.cpp,
# drops what the CUDA llama-bench build does not need (docs, models, tests, other GPU backends, the
# server UI) and packs it as llcpp/llama.cpp.tar.xz (~4 MB) for tools/device/run_all.sh's `llama`
# step, which builds it with CUDA on the GPU machine (-DLLAMA_BUILD_APP=OFF: the app dir is gone).
# llama.cpp stays outside the repository: llcpp/ is git-ignored and only travels with `carry`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
url=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz
sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
curl -sSL -o "$tmp/sdist.tar.gz" "$url"
echo "$sha  $tmp/sdist.tar.gz" | sha256sum -c -
tar -C "$tmp" -xzf "$tmp/sdist.tar.gz"
ll="$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp"
rm -rf "$ll"/{docs,models,tests,benches,examples,media,app,pocs,gguf-py,conversion,scripts,skills,ci} \
    "$ll"/tools/{server,ui,cli}
for b in et metal hexagon sycl vulkan opencl cann musa webgpu zdnn rpc blas kompute openvino virtgpu zendnn; do
    rm -rf "$ll/ggml/src/ggml-$b"
done
mkdir -p "$root/llcpp"
tar -C "$(dirname "$ll")" -cf - llama.cpp | xz -6 -T2 >"$root/llcpp/llama.cpp.tar.xz"
ls -la "$root/llcpp/llama.cpp.tar.xz"
