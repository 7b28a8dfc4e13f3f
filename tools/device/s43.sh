#!/usr/bin/env bash
# Session 43, one call (carry/s42g = 2543265): s42d.sh's A/Bs (the L2 prefetch L2PF=40/16, the
# sliced norm, the grouped-query attention after 4096 rows) in priority order, with s42a.sh's
# leave-one-out of the 1-row attention chain's kernels after round 1; greedy tokens with all three
# switches on against the default last (must be equal).
#   run(command="C=carry/s42g bash tools/device/s43.sh 2>&1 | tee $OUT/d.log", carry=["carry/s42g", ".gl"])
# Ran once (docs/perf.md, session 43); L2PF and ATTN_GQA lost and are gone from the tree since, so
# it only means something with carry/s42g's binary.
set -u
C=${C:-carry/s42g}
source tools/device/env.sh
LIM=${LIM:-560}
export DV_N=48 DV_WARM=1000 DV_SPARE=60
mk
DELTASPEC_REQUIRE_GPU=1 timeout -k 5 50 $C/hip_attn_gqa 2>&1 | grep -E "test result|panicked" | head -3
round() {
    dv "off $1" 0 X=1
    dv "pf40 $1" 0 DELTASPEC_HIP_L2PF=40
    dv "slices $1" 0 DELTASPEC_HIP_NORM_Q8=slices
    dv "d4096 off $1" 4096 X=1
    dv "d4096 gqa $1" 4096 DELTASPEC_HIP_ATTN_GQA=1
}
round 1
dv "drop qk_prep" 0 DELTASPEC_HIP_DROP=qk_prep
dv "drop attn_hd" 0 DELTASPEC_HIP_DROP=attn_hd
dv "drop combine" 0 DELTASPEC_HIP_DROP=attn_combine
round 2
dv "pf16" 0 DELTASPEC_HIP_L2PF=16
for e in X=1 "DELTASPEC_HIP_L2PF=40 DELTASPEC_HIP_ATTN_GQA=1 DELTASPEC_HIP_NORM_Q8=slices"; do
    left 45 || break
    env $e timeout -k 5 40 $B generate --model $W/m.gguf --backend hip:cuda --tokens 1,2,3 -n 16 2>&1 |
        tail -2 | sed "s/^/[tokens ${e%% *}] /"
done
st end
