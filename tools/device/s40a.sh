#!/usr/bin/env bash
# Session 40, a short first call (machines were taken back mid-call; keep each call small):
# the norm_q8f A/B at 16 and 8 rows (default against DELTASPEC_HIP_NORM_Q8F=0 and NORM_Q8=wide),
# the 1-row step with its roofline, the DFlash2 drafter step, the chain on the code profile, then the
# hip test binaries that run the new kernels, and a second A/B round if time is left.
#   run(command="C=carry/s40 LIM=330 bash tools/device/s40a.sh 2>&1 | tee $OUT/a.log", carry=["carry/s40", ".gl"])
set -u
C=${C:-carry/s40}
source tools/device/env.sh
OUT=${OUT:-/tmp/out}
LIM=${LIM:-330}
left() { (( SECONDS - t0 < LIM - $1 )); }
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
ab
left 30 && timeout -k 5 60 $B bench decode --model $W/m.gguf --backend hip:cuda -n 64 --bw-mib 2048 2>&1 |
    grep -E "decode:|roofline|bandwidth|rror|panick" | sed "s/^/[$((SECONDS - t0))s hip 1] /"
left 30 && timeout -k 5 50 $B bench draft --model $W/m.gguf --draft $W/d2.gguf --backend hip:cuda -n 24 2>&1 |
    grep -E "draft|target|ratio|rror|panick" | sed "s/^/[$((SECONDS - t0))s draft] /"
left 45 && spec hip:cuda chain code | sed "s/^/[$((SECONDS - t0))s chain] /"
export DELTASPEC_REQUIRE_GPU=1 DELTASPEC_REQUIRE_COOP=1 RUST_BACKTRACE=1
for t in hip_fused hip_ops; do
    left 40 || { echo "[$t] not run: no time"; continue; }
    s0=$SECONDS
    timeout -k 5 $((LIM - SECONDS + t0 - 10)) $C/$t --test-threads=2 --skip cli_ >$OUT/t_$t.log 2>&1
    echo "[$t] exit $? in $((SECONDS - s0)) s: $(grep -E '^test result' $OUT/t_$t.log | tail -1)"
    grep -E "FAILED|panicked" $OUT/t_$t.log | head -5
done
ab
st end
