#!/usr/bin/env bash
# Session 39, call B (docs/perf.md), on the machine call A warmed (/tmp/w keeps its files), in
# order of need, each step guarded by the time left:
# - the 8-layer cut's in-step kernel profile (hip at 1 and 16 rows, wgpu at 1 by timestamp
#   queries): the GEMVs' achieved GB/s and where each step's time goes;
# - the 16/8/1-row steps on wgpu; bench spec: wgpu tree (code) and adaptive (prose), hip adaptive
#   on code and mixed;
# - the 27B Q8_0 file's decode on hip and wgpu (issue 3);
# - the GPU test binaries (hip and wgpu against the CPU).
#   run(command="C=carry/s39 bash tools/device/s39b.sh 2>&1 | tee $OUT/b.log", carry=["carry/s39", ".gl"])
set -u
C=${C:-carry/s39}
source tools/device/env.sh
OUT=${OUT:-/tmp/out}
LIM=${LIM:-575}
mk
mk8
pr() { # backend rows: the whole profile to $OUT, its tail here
    left 60 || return
    st "profile l8 $1 rows $2"
    DELTASPEC_PROFILE=1 timeout 60 $B bench decode --model $W/l8.gguf --backend $1 -n 8 --rows $2 --bw-mib 64 >$OUT/prof_${1%%:*}_$2.log 2>&1
    tail -30 $OUT/prof_${1%%:*}_$2.log
}
pr hip:cuda 1
pr hip:cuda 16
pr wgpu 1
r() { # tag backend rows
    left 40 || return
    timeout -k 5 90 $B bench decode --model $W/m.gguf --backend $2 -n 16 --rows $3 --bw-mib 64 --warmup-ms 1000 2>&1 |
        grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $1] /"
}
st rows
for x in 16 8 1; do r "wgpu rows $x" wgpu $x; done
s() { left ${T:-60} && spec "$@" | sed "s/^/[$((SECONDS - t0))s $1 $2 $3] /"; }
T=90 s wgpu tree code --tree-budget 16
T=90 s wgpu adaptive prose
s hip:cuda adaptive code
s hip:cuda adaptive mixed
if left 150; then
    st synth q8_0
    [ -f $W/q8.gguf ] || $B synth --preset qwen3.8-27b --quant q8_0 --out $W/q8.gguf >/dev/null
    for be in hip:cuda wgpu; do
        left 40 && timeout -k 5 100 $B bench decode --model $W/q8.gguf --backend $be -n 32 --bw-mib 256 2>&1 |
            grep -E "decode:|roofline|rror|panick" | sed "s/^/[$((SECONDS - t0))s q8_0 $be] /"
    done
fi
st tests
GT_MIN=60 gpu_tests hip_build hip_ops hip_fused hip_graph tree_ops draft_gpu dflash2_ops spec_tree hip_spec_graphs wgpu_ops wgpu_model wgpu_gemv
st end
