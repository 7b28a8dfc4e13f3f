#!/usr/bin/env bash
# Session 44, call C: the chunked gated delta net with its loads issued together (carry/s44c)
# against 966e0c9 (ds0 in the same tar): 1-row steps twice each way, 16-row once each way,
# ncu's gdn_dk128 duration at 1 and 16 rows (new), the gdn GPU tests, the wgpu 1-row step both
# ways.
#   run(command="C=carry/s44c bash tools/device/s44c.sh 2>&1 | tee $OUT/c.log", carry=["carry/s44c", ".gl"])
set -u
C=${C:-carry/s44c}
source tools/device/env.sh
LIM=${LIM:-350}
mk
mk8
export DV_N=16 DV_WARM=500 DV_SPARE=30
for i in 1 2; do
    B=$B1 dv "1 row new $i" 0 X=1
    B=$B0 dv "1 row old $i" 0 X=1
done
DV_ROWS=16 B=$B1 dv "16 rows new" 0 X=1
DV_ROWS=16 B=$B0 dv "16 rows old" 0 X=1
for r in 1 16; do
    left 20 || break
    DELTASPEC_HIP_PDL=0 timeout -k 5 60 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:^gdn_dk128$" \
        --launch-skip 4 --launch-count 3 $B1 bench decode --model $W/l8.gguf --backend hip:cuda -n 2 --rows $r \
        --bw-mib 64 --warmup-ms 0 2>&1 | grep gpu__time | sed "s/^/[ncu $r new] /"
done
left 15 && DELTASPEC_REQUIRE_GPU=1 timeout -k 5 30 $C/hip_ops --test-threads=1 gated_delta 2>&1 |
    grep -E "^test |result|panicked" | sed "s/^/[hip_ops] /"
# The wgpu 1-row step (its gated delta net chunked at defd71c), both builds.
B=$B1 b "wgpu 1 row new" wgpu -n 16 --bw-mib 64 --warmup-ms 500
B=$B0 b "wgpu 1 row old" wgpu -n 16 --bw-mib 64 --warmup-ms 500
st end
