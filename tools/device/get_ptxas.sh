#!/usr/bin/env bash
# Fetches NVIDIA's ptxas (CUDA 12.8) for a build machine without the CUDA toolkit, from the triton
# 3.4.0 wheel on PyPI (sha256-checked; triton ships ptxas, cuobjdump and nvdisasm), into
# DIR (default ~/.cache/deltaspec/cuda-bin). Then build with it so the binary embeds sm_90 cubins
# (no PTX JIT on a fresh H200: 40-120 s per machine before):
#
#   tools/device/get_ptxas.sh && DELTASPEC_PTXAS=~/.cache/deltaspec/cuda-bin/ptxas cargo build --release
#
# cuobjdump/nvdisasm come along: `cuobjdump -sass -fun <kernel> x.cubin` (nvdisasm on the PATH).
set -euo pipefail
dir="${1:-$HOME/.cache/deltaspec/cuda-bin}"
sha=7b70f5e6a41e52e48cfc087436c8a28c17ff98db369447bcaff3b887a3ab4467
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 -d "$tmp" triton==3.4.0
whl="$(ls "$tmp"/triton-3.4.0-*.whl)"
echo "$sha  $whl" | sha256sum -c -
mkdir -p "$dir"
python3 - "$whl" "$dir" <<'PY'
import os, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for tool in ("ptxas", "cuobjdump", "nvdisasm"):
    path = os.path.join(sys.argv[2], tool)
    with open(path, "wb") as f:
        f.write(z.read(f"triton/backends/nvidia/bin/{tool}"))
    os.chmod(path, 0o755)
PY
"$dir/ptxas" --version | tail -2
