#!/usr/bin/env bash
# Session 42, one call for everything new (carry/s42g = 2543265): the L2 prefetch of the next
# 1-row GEMV's weights (DELTASPEC_HIP_L2PF=<MiB>) and the sliced norm (NORM_Q8=slices) against
# the default at the default context, interleaved; the grouped-query attention
# (DELTASPEC_HIP_ATTN_GQA=1) after 4096 context rows; greedy tokens with everything on against
# the default (must be equal); the grouped kernel's GPU test.
#   run(command="C=carry/s42g bash tools/device/s42d.sh 2>&1 | tee $OUT/d.log", carry=["carry/s42g", ".gl"])
set -u
C=${C:-carry/s42g}
source tools/device/env.sh
LIM=${LIM:-570}
mk
DELTASPEC_REQUIRE_GPU=1 timeout -k 5 50 $C/hip_attn_gqa 2>&1 | grep -E "test result|panicked" | head -3
dv "off 1" 0 X=1
dv "pf40 1" 0 DELTASPEC_HIP_L2PF=40
dv "d4096 off 1" 4096 X=1
dv "d4096 gqa 1" 4096 DELTASPEC_HIP_ATTN_GQA=1
dv "slices 1" 0 DELTASPEC_HIP_NORM_Q8=slices
dv "pf16 1" 0 DELTASPEC_HIP_L2PF=16
dv "off 2" 0 X=1
dv "pf40 2" 0 DELTASPEC_HIP_L2PF=40
dv "d4096 off 2" 4096 X=1
dv "d4096 gqa 2" 4096 DELTASPEC_HIP_ATTN_GQA=1
dv "slices 2" 0 DELTASPEC_HIP_NORM_Q8=slices
dv "pf16 2" 0 DELTASPEC_HIP_L2PF=16
for e in X=1 "DELTASPEC_HIP_L2PF=40 DELTASPEC_HIP_ATTN_GQA=1 DELTASPEC_HIP_NORM_Q8=slices"; do
    left 40 || break
    env $e timeout -k 5 40 $B generate --model $W/m.gguf --backend hip:cuda --tokens 1,2,3 -n 16 2>&1 |
        tail -2 | sed "s/^/[tokens ${e%% *}] /"
done
st end
