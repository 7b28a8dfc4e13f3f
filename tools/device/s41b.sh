#!/usr/bin/env bash
# Session 41, call B: the 16-warp decode attention (binary $N) against the head before it ($O),
# interleaved, at an empty and a 4096-row context; the GDN column splits (DELTASPEC_HIP_GDN_SPLIT)
# and r1u2 on the DeltaNet projection group (DELTASPEC_HIP_Q1_SMALL_M) on the new binary; then
# the GPU tests of the changed kernels and a chain whose output must equal AR.
# $N was built from d5ad341 (the experiment, reverted in 0847980). As run, the d4096 lines failed
# (-n given twice) and the chain got "-n carry/s41b" (spec reads $N); both were rerun inline the
# same session (docs/perf.md, session 41), and are fixed below.
#   run(command="O=carry/s41 N=carry/s41b bash tools/device/s41b.sh 2>&1 | tee $OUT/b.log",
#       carry=["carry/s41", "carry/s41b", ".gl"])
set -u
O=${O:-carry/s41}
N=${N:-carry/s41b}
C=$O source tools/device/env.sh
(cd "$N" && [ -x deltaspec ] || xz -dc bins.tar.xz | tar -xf -)
OUT=${OUT:-/tmp/out}
LIM=${LIM:-575}
mk
d() { # tag binary env [bench args...] (default -n 48)
    local tag=$1 bin=$2 e=$3
    shift 3
    left 30 || return
    [ $# -gt 0 ] || set -- -n 48
    env $e timeout -k 5 90 $bin/deltaspec bench decode --model $W/m.gguf --backend hip:cuda --bw-mib 64 \
        --warmup-ms 1000 "$@" 2>&1 | grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $tag] /"
}
d "old" $O X=1
d "new" $N X=1
d "new s8" $N DELTASPEC_HIP_GDN_SPLIT=8
d "new s16" $N DELTASPEC_HIP_GDN_SPLIT=16
d "new qkv r1u2" $N DELTASPEC_HIP_Q1_SMALL_M=20000
d "new" $N X=1
d "old" $O X=1
d "new s8" $N DELTASPEC_HIP_GDN_SPLIT=8
d "old d4096" $O X=1 -d 4096 --ctx 4400 -n 32
d "new d4096" $N X=1 -d 4096 --ctx 4400 -n 32
st tests
C=$N
export DELTASPEC_BIN=$N/deltaspec
left 120 && DELTASPEC_REQUIRE_GPU=1 timeout -k 5 100 $N/hip_ops --test-threads=2 attention gated_delta 2>&1 | grep -E "^test |test result|panicked" | head -12
left 100 && DELTASPEC_REQUIRE_GPU=1 timeout -k 5 90 $N/hip_graph --test-threads=2 2>&1 | grep -E "^test |test result|panicked" | head -12
left 80 && DELTASPEC_HIP_GDN_SPLIT=8 DELTASPEC_REQUIRE_GPU=1 timeout -k 5 60 $N/hip_ops --test-threads=2 gated_delta 2>&1 | grep -E "test result|panicked" | head -4
B=$N/deltaspec
left 60 && N=64 spec hip:cuda chain code
st end
