#!/usr/bin/env bash
# Session 42, call B: the L2 prefetch of the next 1-row GEMV's weights (DELTASPEC_HIP_L2PF=<MiB>,
# src/backend/hip/prefetch.rs) against none, ROUNDS (default 3) interleaved rounds of the 1-row
# 27B step at budgets PFS (default "8 24 48"); greedy tokens with and without it (must be equal);
# hip_graph on the GPU with it on.
#   run(command="C=carry/s42 bash tools/device/s42b.sh 2>&1 | tee $OUT/b.log", carry=["carry/s42", ".gl"])
set -u
C=${C:-carry/s42}
source tools/device/env.sh
LIM=${LIM:-560}
export DV_N=48 DV_WARM=1000 DV_SPARE=30
ROUNDS=${ROUNDS:-3}
PFS=${PFS:-8 24 48}
mk
for i in $(seq 1 "$ROUNDS"); do
    dv "off $i" 0 X=1
    for p in $PFS; do dv "pf$p $i" 0 DELTASPEC_HIP_L2PF=$p; done
done
for p in 0 24; do
    left 40 || break
    DELTASPEC_HIP_L2PF=$p timeout -k 5 40 $B generate --model $W/m.gguf --backend hip:cuda --tokens 1,2,3 -n 16 \
        2>&1 | tail -1 | sed "s/^/[tokens pf$p] /"
done
DELTASPEC_HIP_L2PF=24 GT_MIN=60 gpu_tests hip_graph
st end
