#!/usr/bin/env bash
# One device call (session 37, docs/perf.md): the GPU tests of the 1024-row panels with shared
# small-matrix panels (never run on a GPU before) and of the staged verify tile (`qmma*t`,
# DELTASPEC_HIP_QMMA_V2=4), then 8/16-row steps default (n) against staged (nt), interleaved;
# ncu of both at 16 and 8 rows; 1-row steps of n against the 32-row-panel build (h); greedy
# tokens of n and h (must be equal); the DFlash2 chain with and without the staged tile.
# $C holds bins.tar.xz: ds_n (this tree), ds_h (DELTASPEC_HIP_DEFINES=DS_WL_G=32), and the
# test binaries hip_ops hip_fused hip_graph spec_tree hip_spec_graphs. From the repo root:
#   run(command="C=carry/s37 bash tools/device/staged_mma.sh 2>&1 | tee $OUT/c1.log",
#       carry=["carry/s37", ".gl"])
set -u
C=${C:-carry/s37}
[ -x $C/ds_n ] || (cd $C && xz -dc bins.tar.xz | tar -xf - && chmod +x ds_* hip_* spec_*)
ln -sf ds_n $C/deltaspec
source tools/device/env.sh
OUT=${OUT:-/tmp/out}
LIM=${LIM:-540}
mk &>$OUT/mk.log &
mk8 &
t() { # name [env...]: one test binary, its summary lines
    local n=$1
    shift
    st "test $n $*"
    env DELTASPEC_REQUIRE_GPU=1 "$@" timeout -k 5 ${TT:-150} $C/$n 2>&1 | grep -E "test result|FAILED|panicked|is .* not" | head -8
}
t hip_ops
t hip_fused
t hip_graph
TT=90 t hip_spec_graphs DELTASPEC_HIP_QMMA_V2=4
TT=90 t spec_tree DELTASPEC_HIP_QMMA_V2=4
wait
st synth done
cmd() {
    case $1 in
    nt) echo "env DELTASPEC_HIP_QMMA_V2=4 $C/ds_n" ;;
    *) echo "$C/ds_$1" ;;
    esac
}
b() { # tag bin args...
    local tag=$1 bin=$2
    shift 2
    (( SECONDS - t0 > LIM - 15 )) && return
    timeout -k 5 100 $(cmd $bin) bench decode --model $W/m.gguf --backend hip:cuda "$@" 2>&1 |
        grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $tag] /"
}
# A staged kernel that hangs must not eat the call: one short 16-row run first.
vs="n nt"
st staged probe
timeout -k 5 40 $(cmd nt) bench decode --model $W/m.gguf --backend hip:cuda -n 4 --rows 16 --bw-mib 64 2>&1 |
    grep -E "decode:|rror|panick" || { echo "staged probe failed: nt dropped"; vs=n; }
st rows
for i in 1 2; do
    for r in 16 8; do
        for v in $vs; do b "$v rows $r" $v -n 16 --rows $r --bw-mib 256; done
    done
done
st one row
for v in n h n h; do b "$v" $v -n 64 --bw-mib 256; done
st ncu
for r in 16 8; do
    for v in $vs; do
        (( SECONDS - t0 > LIM - 80 )) && break
        ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
            --launch-skip 400 --launch-count 140 env DELTASPEC_HIP_PDL=0 \
            $(cmd $v) bench decode --model $W/l8.gguf --backend hip:cuda -n 8 --rows $r --bw-mib 64 >$OUT/ncu_${v}_r$r.csv 2>/dev/null
    done
    [ -f $OUT/ncu_nt_r$r.csv ] && python3 tools/device/ncu_step.py $OUT/ncu_n_r$r.csv $OUT/ncu_nt_r$r.csv | tail -24
done
st greedy
for v in n h; do
    (( SECONDS - t0 > LIM - 40 )) && break
    timeout -k 5 40 $C/ds_$v generate --model $W/m.gguf --backend hip:cuda --tokens 1,2,3 -n 12 2>&1 | tail -1 | sed "s/^/[$v] /"
done
(( SECONDS - t0 < LIM - 120 )) && spec hip:cuda chain code
[ "$vs" = "n nt" ] && (( SECONDS - t0 < LIM - 60 )) && DELTASPEC_HIP_QMMA_V2=4 spec hip:cuda chain code
st end
