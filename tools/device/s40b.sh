#!/usr/bin/env bash
# Session 40, call B (docs/perf.md), on the machine call A (s39.sh) warmed (/tmp/w keeps its files):
# - the norm_q8f A/B of s39d.sh: the default (norms write the tile's fragment order) against
#   DELTASPEC_HIP_NORM_Q8F=0 (a qmma_relayout launch) and DELTASPEC_HIP_NORM_Q8=wide, interleaved
#   at 16 and 8 rows on the 27B IQ4_XS synth;
# - then the GPU test binaries (hip and wgpu against the CPU), the ones that run the new kernels first.
#   run(command="C=carry/s40 bash tools/device/s40b.sh 2>&1 | tee $OUT/b.log", carry=["carry/s40", ".gl"])
set -u
C=${C:-carry/s40}
source tools/device/env.sh
OUT=${OUT:-/tmp/out}
LIM=${LIM:-575}
AB=${AB:-2}
left() { (( SECONDS - t0 < LIM - $1 )); }
mk
b() { # tag env rows
    left 200 || return
    env $2 timeout -k 5 60 $B bench decode --model $W/m.gguf --backend hip:cuda -n 16 --rows $3 --bw-mib 64 --warmup-ms 500 2>&1 |
        grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $1] /"
}
for i in $(seq 1 $AB); do
    for x in 16 8; do
        b "rows $x q8f" DELTASPEC_HIP_NORM_Q8F=1 $x
        b "rows $x relayout" DELTASPEC_HIP_NORM_Q8F=0 $x
        b "rows $x wide" DELTASPEC_HIP_NORM_Q8=wide $x
    done
done
st tests
export DELTASPEC_REQUIRE_GPU=1 DELTASPEC_REQUIRE_COOP=1 RUST_BACKTRACE=1
for t in hip_fused hip_ops hip_spec_graphs spec_tree draft_gpu dflash2_ops tree_ops hip_graph hip_build wgpu_ops wgpu_model wgpu_gemv; do
    left 40 || { echo "[$t] not run: no time"; continue; }
    s0=$SECONDS
    timeout -k 5 $((LIM - SECONDS + t0 - 10)) $C/$t --test-threads=2 --skip cli_ >$OUT/t_$t.log 2>&1
    echo "[$t] exit $? in $((SECONDS - s0)) s: $(grep -E '^test result' $OUT/t_$t.log | tail -1)"
    grep -E "FAILED|panicked" $OUT/t_$t.log | head -5
done
st end
