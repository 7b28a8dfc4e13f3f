#!/usr/bin/env bash
# One device call: interleaved 1-row 27B steps of builds that differ in the weight panel's rows
# (DS_WL_G) and the default build of the same tree, to attribute a step-time change to G alone.
# $C holds bins.tar.xz with ds_<v> for each v in $VS (default: h t g512 g1024; docs/perf.md
# "session 36"). Run from the repo root:
#   run(command="C=carry/s36b ROUNDS=2 bash tools/device/panel_ab.sh 2>&1 | tee $OUT/p.log",
#       carry=["carry/s36b", ".gl"])
set -u
C=${C:-carry/s36b}
[ -x $C/ds_h ] || (cd $C && xz -dc bins.tar.xz | tar -xf - && chmod +x ds_*)
ln -sf ds_h $C/deltaspec
source tools/device/env.sh
[ -f $W/m.gguf ] || $B synth --preset qwen3.8-27b --quant iq4_xs --out $W/m.gguf >/dev/null
for i in $(seq ${ROUNDS:-2}); do
    for v in ${VS:-h t g512 g1024}; do
        timeout -k 5 100 $C/ds_$v bench decode --model $W/m.gguf --backend hip:cuda -n 64 --bw-mib 256 2>&1 |
            grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $v] /"
    done
done
st end
