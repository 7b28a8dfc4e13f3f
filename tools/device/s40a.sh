#!/usr/bin/env bash
# Session 40, a short first call (machines were taken back mid-call; keep each call small):
# ROUNDS (default 1) rounds of the norm_q8f A/B at 16 and 8 rows (default against
# DELTASPEC_HIP_NORM_Q8F=0 and NORM_Q8=wide, the latter removed after this call); with NUMBERS=1
# (default) the 1-row step with its roofline, the DFlash2 drafter step and the chain on the code
# profile; the GPU test binaries in TESTS (default: the hip ones that run the new kernels); with
# NUMBERS=1 one more A/B round.
#   run(command="C=carry/s40 LIM=330 bash tools/device/s40a.sh 2>&1 | tee $OUT/a.log", carry=["carry/s40", ".gl"])
set -u
C=${C:-carry/s40}
source tools/device/env.sh
OUT=${OUT:-/tmp/out}
LIM=${LIM:-330}
ROUNDS=${ROUNDS:-1}
NUMBERS=${NUMBERS:-1}
TESTS=${TESTS:-hip_fused hip_ops}
mk
b() { # tag env rows
    left 25 || return
    env $2 timeout -k 5 60 $B bench decode --model $W/m.gguf --backend hip:cuda -n 16 --rows $3 --bw-mib 64 --warmup-ms 500 2>&1 |
        grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $1] /"
}
ab() {
    for x in 16 8; do
        b "rows $x q8f" DELTASPEC_HIP_NORM_Q8F=1 $x
        b "rows $x relayout" DELTASPEC_HIP_NORM_Q8F=0 $x
        b "rows $x wide" DELTASPEC_HIP_NORM_Q8=wide $x
    done
}
for i in $(seq 1 "$ROUNDS"); do ab; done
if [ "$NUMBERS" = 1 ]; then
    left 30 && timeout -k 5 60 $B bench decode --model $W/m.gguf --backend hip:cuda -n 64 --bw-mib 2048 2>&1 |
        grep -E "decode:|roofline|bandwidth|rror|panick" | sed "s/^/[$((SECONDS - t0))s hip 1] /"
    left 30 && timeout -k 5 50 $B bench draft --model $W/m.gguf --draft $W/d2.gguf --backend hip:cuda -n 24 2>&1 |
        grep -E "draft|target|ratio|rror|panick" | sed "s/^/[$((SECONDS - t0))s draft] /"
    left 45 && spec hip:cuda chain code | sed "s/^/[$((SECONDS - t0))s chain] /"
fi
st tests
gpu_tests $TESTS
[ "$NUMBERS" = 1 ] && ab
st end
