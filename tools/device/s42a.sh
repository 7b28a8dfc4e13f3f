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
ROUNDS=${ROUNDS:-2}
mk
d() { # tag env...
    local tag=$1
    shift
    left 30 || return
    env "$@" timeout -k 5 60 $B bench decode --model $W/m.gguf --backend hip:cuda -n 48 --bw-mib 64 \
        --warmup-ms 1000 2>&1 | grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $tag] /"
}
for i in $(seq 1 "$ROUNDS"); do
    d "default $i" X=1
    d "slices $i" DELTASPEC_HIP_NORM_Q8=slices
    d "chunk64 $i" DELTASPEC_HIP_ATTN_CHUNK=64
done
d "drop qk_prep" DELTASPEC_HIP_DROP=qk_prep
d "drop attn_hd" DELTASPEC_HIP_DROP=attn_hd
d "drop combine" DELTASPEC_HIP_DROP=attn_combine
d "drop gated norm" DELTASPEC_HIP_DROP=gated_rms
d "drop add_rms" DELTASPEC_HIP_DROP=add_rms
d "drop conv+gdn" DELTASPEC_HIP_DROP=gdn_dk
left 200 && DELTASPEC_REQUIRE_GPU=1 timeout -k 5 150 $C/hip_fused --test-threads=2 norms_feeding 2>&1 |
    grep -E "^test |test result|panicked" | head -6
GT_MIN=90 gpu_tests wgpu_ops
rest=$((LIM - SECONDS + t0))
((rest > 120)) && C=$C WGPU_TESTS=0 LIM=$((rest - 10)) SETS="base small tiles normq gdn attn head base" \
    bash tools/device/s41c.sh 2>&1 | grep -E "^\[|==" | grep -v "^\[backends"
st end
