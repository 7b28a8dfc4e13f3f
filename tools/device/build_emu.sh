#!/usr/bin/env bash
# Builds the CPU emulator of the CUDA driver API (tools/device/emu) that runs the real kernels
# from hip/*.hip on host threads, so the hip backend's op tests run without a GPU:
#
#   tools/device/build_emu.sh [out.so]       # default: target/libdsemu.so
#   DELTASPEC_CUDA_LIB=$PWD/target/libdsemu.so cargo test --release --test hip_ops
#
# Needs clang++ (>= 15, for _Float16 on x86) or g++ >= 12 with C++20.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/target/libdsemu.so}"
cxx="${CXX:-}"
if [ -z "$cxx" ]; then
    for c in clang++-19 clang++ g++; do
        if command -v "$c" >/dev/null 2>&1; then cxx="$c"; break; fi
    done
fi
[ -n "$cxx" ] || { echo "build_emu.sh: no C++ compiler (set CXX)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
# The weight panel's rows must be the host's (build.rs: DS_WL_G among $DELTASPEC_HIP_DEFINES, else
# hip/quant.h's default).
wlg=()
for d in ${DELTASPEC_HIP_DEFINES:-}; do
    case "$d" in DS_WL_G=*) wlg=("-D$d") ;; esac
done
echo "+ $cxx -std=c++20 -O2 -fPIC -shared ${wlg[*]:-} ... -o $out"
"$cxx" -std=c++20 -O2 -ffp-contract=off -fPIC -shared -pthread -Wall -Werror -Wno-unknown-pragmas \
    "${wlg[@]}" -I "$here/emu" -o "$out" "$here/emu/cuda_emu.cpp"
echo "built $out"
