#!/usr/bin/env bash
# Session 39, the short form of s39.sh for a call with little device time left (no llama.cpp
# build: its CUDA compile alone takes ~5.5 min). In order of need, each step guarded by LIM:
# hip and wgpu decode on the 27B IQ4_XS synth (roofline from the same process's copy), the
# 16/8-row steps, the DFlash2 drafter step, the hip chain (code) and adaptive (prose), the wgpu
# chain (code), then a second decode round of both backends.
#   run(command="C=carry/s39 LIM=400 bash tools/device/s39c.sh 2>&1 | tee $OUT/c.log", carry=["carry/s39", ".gl"])
set -u
C=${C:-carry/s39}
source tools/device/env.sh
LIM=${LIM:-400}
mk
B_SPARE=35 B_TIMEOUT=90
b "hip 1" hip:cuda -n 64 --bw-mib 2048
b "wgpu 1" wgpu -n 32 --bw-mib 256
for x in 16 8; do b "hip rows $x" hip:cuda -n 16 --rows $x --bw-mib 64 --warmup-ms 1000; done
left 30 && timeout -k 5 60 $B bench draft --model $W/m.gguf --draft $W/d2.gguf --backend hip:cuda -n 24 2>&1 |
    grep -E "draft|target|ratio|rror|panick" | sed "s/^/[$((SECONDS - t0))s draft] /"
sp() { left ${T:-45} && spec "$@" | sed "s/^/[$((SECONDS - t0))s $1 $2 $3] /"; }
sp hip:cuda chain code
sp hip:cuda adaptive prose
T=70 sp wgpu chain code
b "hip 2" hip:cuda -n 64 --bw-mib 2048
b "wgpu 2" wgpu -n 32 --bw-mib 256
st end
