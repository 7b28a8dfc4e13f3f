#!/usr/bin/env bash
# One short device call (session 36): the hip op tests of a build with DS_WL_G = 1024 and shared
# panels for small matrices (ds_n, hip_ops) on the GPU, then 1-row 27B steps of ds_n against the
# DS_WL_G = 32 build (ds_h), then greedy tokens of both (must be equal). $C holds bins.tar.xz:
#   run(command="bash tools/device/g1024_check.sh 2>&1 | tee $OUT/g.log", carry=["carry/s36c", ".gl"])
set -u
C=${C:-carry/s36c}
[ -x $C/ds_n ] || (cd $C && xz -dc bins.tar.xz | tar -xf - && chmod +x ds_* hip_ops)
ln -sf ds_n $C/deltaspec
source tools/device/env.sh
$B synth --preset qwen3.8-27b --quant iq4_xs --out $W/m.gguf >/dev/null &
st hip_ops
DELTASPEC_REQUIRE_GPU=1 timeout 90 $C/hip_ops 2>&1 | grep -E "test result|FAILED|panicked" | head -8
wait
for v in ${VS:-n h}; do
    timeout -k 5 60 $C/ds_$v bench decode --model $W/m.gguf --backend hip:cuda -n 64 --bw-mib 256 2>&1 |
        grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $v] /"
done
for v in n h; do
    (( SECONDS - t0 > ${LIM:-140} )) && break
    timeout -k 5 40 $C/ds_$v generate --model $W/m.gguf --backend hip:cuda --tokens 1,2,3 -n 12 2>&1 | tail -2 | sed "s/^/[$v] /"
done
st end
