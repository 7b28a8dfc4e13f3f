#!/usr/bin/env bash
# Session 38, call 5 (docs/perf.md): the one-barrier epilogue of the 8/16-row matrix-core tiles
# (qmma_finish ONE) against the stepwise one, interleaved, on the 27B IQ4_XS synth; ncu kernel
# times of both at 16 and 8 rows; greedy tokens of both (must be equal) and a DFlash2 chain whose
# output must equal AR. $C/bins.tar.xz: ds_old (922cf3e), ds_new (this tree).
#   run(command="C=carry/s38e bash tools/device/s38e.sh 2>&1 | tee $OUT/c5.log", carry=["carry/s38e", ".gl"])
set -u
C=${C:-carry/s38e}
[ -x $C/ds_new ] || (cd $C && xz -dc bins.tar.xz | tar -xf -)
ln -sf ds_new $C/deltaspec
source tools/device/env.sh
OUT=${OUT:-/tmp/out}
LIM=${LIM:-540}
mk8
mk
b() { # tag bin args...
    local tag=$1 bin=$2
    shift 2
    (( SECONDS - t0 > LIM - 20 )) && return
    timeout -k 5 100 $C/$bin bench decode --model $W/m.gguf --backend hip:cuda "$@" 2>&1 |
        grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $tag] /"
}
st rows
for i in 1 2 3; do
    for r in 16 8; do
        for v in old new; do b "$v rows $r" ds_$v -n 16 --rows $r --bw-mib 256; done
    done
done
for v in old new; do b "$v rows 1" ds_$v -n 64 --bw-mib 256; done
st ncu
for r in 16 8; do
    for v in old new; do
        (( SECONDS - t0 > LIM - 60 )) && break
        ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
            -k "regex:qmma" --launch-skip 60 --launch-count 60 env DELTASPEC_HIP_PDL=0 \
            $C/ds_$v bench decode --model $W/l8.gguf --backend hip:cuda -n 4 --rows $r --bw-mib 64 2>/dev/null |
            python3 tools/device/ncu_step.py /dev/stdin
    done
done
st greedy
for v in old new; do
    (( SECONDS - t0 > LIM - 40 )) && break
    timeout -k 5 60 $C/ds_$v generate --model $W/m.gguf --backend hip:cuda --tokens 1,2,3 -n 24 --json 2>&1 |
        python3 -c 'import json,sys; j=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(j.get("tokens", j))' |
        sed "s/^/[$v] /"
done
(( SECONDS - t0 < LIM - 60 )) && spec hip:cuda chain code
st end
