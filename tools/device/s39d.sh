#!/usr/bin/env bash
# Session 39, a short call with the norm_q8f build (carry/s39n: deltaspec only): the gated
# norms writing the verify tile's fragment order themselves (default) against the qmma_relayout
# launch (DELTASPEC_HIP_NORM_Q8F=0) and every norm doing so at those widths (DELTASPEC_HIP_NORM_Q8=
# wide), interleaved at 8 and 16 rows on the 27B IQ4_XS synth, then
# the 1-row step with its roofline, the DFlash2 chain (code), the drafter step and wgpu decode.
#   run(command="C=carry/s39n LIM=300 bash tools/device/s39d.sh 2>&1 | tee $OUT/d.log", carry=["carry/s39n", ".gl"])
set -u
C=${C:-carry/s39n}
source tools/device/env.sh
LIM=${LIM:-300}
mk
b() { # tag env backend args...
    local tag=$1 e=$2 be=$3
    shift 3
    left 25 || return
    env $e timeout -k 5 60 $B bench decode --model $W/m.gguf --backend $be "$@" 2>&1 |
        grep -E "decode:|roofline|rror|panick" | sed "s/^/[$((SECONDS - t0))s $tag] /"
}
for i in 1 2; do
    for x in 8 16; do
        b "rows $x q8f" DELTASPEC_HIP_NORM_Q8F=1 hip:cuda -n 16 --rows $x --bw-mib 64 --warmup-ms 500
        b "rows $x relayout" DELTASPEC_HIP_NORM_Q8F=0 hip:cuda -n 16 --rows $x --bw-mib 64 --warmup-ms 500
        b "rows $x wide" DELTASPEC_HIP_NORM_Q8=wide hip:cuda -n 16 --rows $x --bw-mib 64 --warmup-ms 500
    done
done
b "hip 1" X=1 hip:cuda -n 64 --bw-mib 2048
left 45 && spec hip:cuda chain code | sed "s/^/[$((SECONDS - t0))s chain] /"
left 30 && timeout -k 5 50 $B bench draft --model $W/m.gguf --draft $W/d2.gguf --backend hip:cuda -n 24 2>&1 |
    grep -E "draft|target|ratio|rror|panick" | sed "s/^/[$((SECONDS - t0))s draft] /"
b "wgpu 1" X=1 wgpu -n 32 --bw-mib 256
st end
