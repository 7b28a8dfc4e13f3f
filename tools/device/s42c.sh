#!/usr/bin/env bash
# Session 42, call C: the grouped-query attention kernel (DELTASPEC_HIP_ATTN_GQA=<min splits>,
# attn_gqa_hd*: one block per kv head and split, each K/V row read once for its query heads;
# the same bits as attn_hd*) against the per-head kernel on the 27B step after 4096 context rows
# and at the default context, ROUNDS (default 2) interleaved rounds; its GPU test; the L2
# prefetch (DELTASPEC_HIP_L2PF=24) at depth too.
#   run(command="C=carry/s42g bash tools/device/s42c.sh 2>&1 | tee $OUT/c.log", carry=["carry/s42g", ".gl"])
set -u
C=${C:-carry/s42g}
source tools/device/env.sh
LIM=${LIM:-560}
ROUNDS=${ROUNDS:-2}
mk
d() { # tag depth env...
    local tag=$1 depth=$2
    shift 2
    left 40 || return
    env "$@" timeout -k 5 90 $B bench decode --model $W/m.gguf --backend hip:cuda -n 32 --bw-mib 64 \
        -d $depth --ctx $((depth + 400)) --warmup-ms 500 2>&1 | grep -E "decode:|rror|panick" |
        sed "s/^/[$((SECONDS - t0))s $tag] /"
}
left 200 && DELTASPEC_REQUIRE_GPU=1 timeout -k 5 120 $C/hip_attn_gqa --test-threads=2 2>&1 |
    grep -E "^test |test result|panicked" | head -6
for i in $(seq 1 "$ROUNDS"); do
    d "d4096 off $i" 4096 X=1
    d "d4096 gqa $i" 4096 DELTASPEC_HIP_ATTN_GQA=1
    d "d0 off $i" 0 X=1
    d "d0 gqa $i" 0 DELTASPEC_HIP_ATTN_GQA=1
done
d "d4096 gqa+pf24" 4096 DELTASPEC_HIP_ATTN_GQA=1 DELTASPEC_HIP_L2PF=24
st end
