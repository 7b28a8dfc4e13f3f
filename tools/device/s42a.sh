#!/usr/bin/env bash
# Session 42, call A: the sliced one-row norm (DELTASPEC_HIP_NORM_Q8=slices) against the default,
# and 64-key attention splits (DELTASPEC_HIP_ATTN_CHUNK=64; default 256), ROUNDS (default 2)
# interleaved rounds of the 1-row 27B step; the 1-row attention chain's
# kernels left out one at a time (DELTASPEC_HIP_DROP: outputs invalid, a timing diagnostic);
# the sliced norm's GPU test; wgpu_ops on the GPU (ad848ff's fix); s41c.sh's 16-row sets in the
# time left.
#   run(command="C=carry/s41d bash tools/device/s42a.sh 2>&1 | tee $OUT/a.log", carry=["carry/s41d", ".gl"])
set -u
C=${C:-carry/s41d}
source tools/device/env.sh
LIM=${LIM:-560}
export DV_N=48 DV_WARM=1000 DV_SPARE=30
ROUNDS=${ROUNDS:-2}
mk
for i in $(seq 1 "$ROUNDS"); do
    dv "default $i" 0 X=1
    dv "slices $i" 0 DELTASPEC_HIP_NORM_Q8=slices
    dv "chunk64 $i" 0 DELTASPEC_HIP_ATTN_CHUNK=64
done
dv "drop qk_prep" 0 DELTASPEC_HIP_DROP=qk_prep
dv "drop attn_hd" 0 DELTASPEC_HIP_DROP=attn_hd
dv "drop combine" 0 DELTASPEC_HIP_DROP=attn_combine
dv "drop gated norm" 0 DELTASPEC_HIP_DROP=gated_rms
dv "drop add_rms" 0 DELTASPEC_HIP_DROP=add_rms
dv "drop conv+gdn" 0 DELTASPEC_HIP_DROP=gdn_dk
left 200 && DELTASPEC_REQUIRE_GPU=1 timeout -k 5 150 $C/hip_fused --test-threads=2 norms_feeding 2>&1 |
    grep -E "^test |test result|panicked" | head -6
GT_MIN=90 gpu_tests wgpu_ops
rest=$((LIM - SECONDS + t0))
((rest > 120)) && C=$C WGPU_TESTS=0 LIM=$((rest - 10)) SETS="base small tiles normq gdn attn head base" \
    bash tools/device/s41c.sh 2>&1 | grep -E "^\[|==" | grep -v "^\[backends"
st end
