#!/usr/bin/env bash
# Session 38, call 7 (docs/perf.md): with the one-barrier epilogue, the matrix-core variants again:
# 16 rows `w` (default) against `q` (DELTASPEC_HIP_QMMA_V2=2: 16 warps, whose stepwise epilogue
# had four cross-warp steps), 8 rows `q` (default) against `w` (3), interleaved.
#   run(command="C=carry/s38e LIM=300 bash tools/device/s38f.sh", carry=["carry/s38e", ".gl"])
set -u
C=${C:-carry/s38e}
[ -x $C/ds_new ] || (cd $C && xz -dc bins.tar.xz | tar -xf -)
ln -sf ds_new $C/deltaspec
source tools/device/env.sh
LIM=${LIM:-300}
[ -f $W/m.gguf ] || { st synth target; $B synth --preset qwen3.8-27b --quant iq4_xs --out $W/m.gguf >/dev/null; }
b() { # tag v2 rows
    (( SECONDS - t0 > LIM - 25 )) && return
    env ${2:+DELTASPEC_HIP_QMMA_V2=$2} timeout -k 5 60 $B bench decode --model $W/m.gguf --backend hip:cuda -n 16 \
        --rows $3 --bw-mib 64 --warmup-ms 1000 2>&1 | grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $1] /"
}
for i in 1 2; do
    b "w 16" "" 16
    b "q 16" 2 16
    b "q 8" "" 8
    b "w 8" 3 8
done
st end
