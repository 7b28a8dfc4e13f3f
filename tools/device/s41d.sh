#!/usr/bin/env bash
# Session 41, prepared for the next call (not yet run): the sliced one-row add_rms_norm_q8s
# (DELTASPEC_HIP_NORM_Q8=slices) against the default, ROUNDS (default 3) interleaved rounds of
# the 1-row 27B step, then its GPU test (hip_fused norms_feeding_int8_matmuls...), wgpu_ops, and
# the leave-one-out sets of s41c.sh at 16 rows in the time left.
#   run(command="C=carry/s41d bash tools/device/s41d.sh 2>&1 | tee $OUT/d.log", carry=["carry/s41d", ".gl"])
# where carry/s41d = TESTS="hip_fused wgpu_ops" tools/device/build_carry.sh carry/s41d.
set -u
C=${C:-carry/s41d}
source tools/device/env.sh
LIM=${LIM:-560}
ROUNDS=${ROUNDS:-3}
mk
d() { # tag env
    left 30 || return
    env $2 timeout -k 5 60 $B bench decode --model $W/m.gguf --backend hip:cuda -n 48 --bw-mib 64 \
        --warmup-ms 1000 2>&1 | grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $1] /"
}
for i in $(seq 1 "$ROUNDS"); do
    d "default $i" X=1
    d "slices $i" DELTASPEC_HIP_NORM_Q8=slices
done
left 200 && DELTASPEC_REQUIRE_GPU=1 timeout -k 5 150 $C/hip_fused --test-threads=2 norms_feeding 2>&1 |
    grep -E "^test |test result|panicked" | head -6
GT_MIN=90 gpu_tests wgpu_ops
# The 16-row leave-one-out table of s41c.sh in the time left (its wgpu_ops run is the one above).
rest=$((LIM - SECONDS + t0))
((rest > 120)) && C=$C WGPU_TESTS=0 LIM=$((rest - 10)) SETS="base small tiles normq gdn attn head base" \
    bash tools/device/s41c.sh 2>&1 | grep -E "^\[|==" | grep -v "^\[backends"
st end
