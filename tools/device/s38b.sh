#!/usr/bin/env bash
# Session 38, call 2 (docs/perf.md): the f16 matrix-core IQ4_XS GEMV prototype
# (tools/device/proto/h16.cu: correctness, N-independence of its bits, times at N = 1 .. 32 on
# the 27B shapes), the current kernels' real-clock times on the 8-layer cut for comparison, and
# the greedy tokens of the 1024-row panel build against the 32-row one.
#   run(command="C=carry/s38 bash tools/device/s38b.sh 2>&1 | tee $OUT/c2.log", carry=["carry/s38", ".gl"])
set -u
C=${C:-carry/s38}
source tools/device/env.sh
OUT=${OUT:-/tmp/out}
export PATH=$PATH:/usr/local/cuda/bin
st nvcc
(cd tools/device/proto && nvcc -O3 -arch=sm_90 -Xptxas -v -o /tmp/h16 h16.cu 2>&1 | grep -E "error|h16|registers|spill" | grep -B1 -E "registers|spill|error" | head -40)
st h16
[ -x /tmp/h16 ] && timeout -k 5 240 /tmp/h16
mk8
st "ncu: the current kernels at 1 and 16 rows, real clocks"
for r in 1 16; do
    ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
        -k "regex:qgemv|qmma" --launch-skip 100 --launch-count 60 env DELTASPEC_HIP_PDL=0 \
        $B bench decode --model $W/l8.gguf --backend hip:cuda -n 4 --rows $r --bw-mib 64 2>/dev/null |
        python3 tools/device/ncu_step.py /dev/stdin
done
mk
st greedy tokens, 1024-row panels against 32
for v in deltaspec ds_g32; do
    timeout -k 5 60 $C/$v generate --model $W/m.gguf --backend hip:cuda --tokens 1,2,3 -n 24 --json 2>&1 |
        python3 -c 'import json,sys; j=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(j.get("tokens", j))' |
        sed "s/^/[$v] /"
done
st end
