#!/usr/bin/env bash
# Session 39, call A (docs/perf.md): the first H200 run of the head in many sessions.
# - while llama.cpp's CUDA llama-bench builds beside them on the CPU: the 16/8/1-row steps (hip),
#   the DFlash2 drafter step against the target's verify-sized step (bench draft),
#   bench spec with the DFlash2 drafter (hip chain/tree on the code profile, adaptive on prose,
#   wgpu chain on code), each with its AR baseline from the same run;
# - then the same-run table: llama-bench tg64, our hip and wgpu decode on one 27B IQ4_XS file,
#   interleaved twice, the roofline from the copy bandwidth of the same process.
# $C is a tools/device/build_carry.sh folder:
#   run(command="C=carry/s39 bash tools/device/s39.sh 2>&1 | tee $OUT/a.log",
#       carry=["carry/s39", ".gl", "llcpp"])
set -u
C=${C:-carry/s39}
source tools/device/env.sh
OUT=${OUT:-/tmp/out}
LIM=${LIM:-575}
llama_bg $OUT/llama.log
$B backends 2>&1 | sed "s/^/[backends] /"
mk
r() { # tag backend rows
    left 250 || return
    timeout -k 5 90 $B bench decode --model $W/m.gguf --backend $2 -n 16 --rows $3 --bw-mib 64 --warmup-ms 1000 2>&1 |
        grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $1] /"
}
st "rows and spec (the llama.cpp build runs beside them)"
for x in 16 8 1; do r "hip rows $x" hip:cuda $x; done
left 250 && timeout -k 5 90 $B bench draft --model $W/m.gguf --draft $W/d2.gguf --backend hip:cuda -n 24 2>&1 |
    grep -E "draft|target|ratio|rror|panick" | sed "s/^/[$((SECONDS - t0))s draft] /"
sp() { left 260 && spec "$@" | sed "s/^/[$((SECONDS - t0))s $1 $2 $3] /"; }
sp hip:cuda chain code
sp hip:cuda tree code --tree-budget 16
sp hip:cuda adaptive prose
sp wgpu chain code
st waiting for the llama.cpp build
wait $lp
tail -n 2 $OUT/llama.log
same_run_table
st end
