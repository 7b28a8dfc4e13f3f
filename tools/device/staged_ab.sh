#!/usr/bin/env bash
# One device call (sessions 35-36, docs/perf.md): the staged 1-row kernels' bit test on the
# GPU, the TMA bulk-read probe (reads.cu), interleaved 1-row steps of several builds, ncu of the
# 1-row 8-layer step (default against every IQ4_XS 1-row GEMV staged), 8/16-row steps, the 16-row
# ncu, the wgpu step. $C holds *.tar.xz with ds_h (the default build), ds_t (a build with the
# staged kernels; ds_h where absent), the define variants ds_nh ds_pf32 ds_pq32 ds_g256 ds_g1024
# (any may be absent) and the hip_fused test binary; docs/perf.md "session 36" says how they were
# built. Run from the repo root:
#   run(command="LIM=500 C=carry/s36 bash tools/device/staged_ab.sh 2>&1 | tee $OUT/c1.log",
#       carry=["carry/s36", ".gl"])
# LIM: the seconds the call may run (later steps are skipped so the log comes back).
set -u
C=${C:-carry/s36}
# Every *.tar.xz in $C is unpacked there. A build from 76e3d9d on has the staged kernels, so
# ds_t falls back to ds_h; variants whose binary is absent are left out of the rounds.
[ -x $C/ds_h ] || (cd $C && for t in *.tar.xz; do xz -dc $t | tar -xf -; done && chmod +x ds_* hip_fused)
ln -sf ds_h $C/deltaspec
[ -e $C/ds_t ] || ln -sf ds_h $C/ds_t
source tools/device/env.sh
OUT=${OUT:-/tmp/out}
( [ -f $W/m.gguf ] || $B synth --preset qwen3.8-27b --quant iq4_xs --out $W/m.gguf >/dev/null ) &
mk8
(cd tools/device && nvcc -O3 -arch=sm_90 -o /tmp/reads reads.cu 2>&1 | tail -5) &
st staged kernel bits
timeout 120 $C/hip_fused staged_one_row pipelined_one_row 2>&1 | grep -E "test result|panicked|left|right|rror" | head -8
wait
st synth done
vs="h s5 a5 t5 pf32 nh s3 g256 pq32 g1024"
LIM=${LIM:-430}  # seconds the call may run after sourcing env.sh
# bin: a build (ds_<bin>), or ds_t (the staged kernels) with t<S>: DELTASPEC_HIP_Q1_GLU=t<S>;
# s<S>: also DELTASPEC_HIP_Q1_SMALL=t<S>; a<S>: also DELTASPEC_HIP_Q1=t<S> (every IQ4_XS
# 1-row GEMV staged, the grouped qgemv4_*_1t<S> included: ds_t from session 36 on).
cmd() {
    local s=${1#?}
    case $1 in
    t3 | t5) echo "env DELTASPEC_HIP_Q1_GLU=t$s $C/ds_t" ;;
    s3 | s5) echo "env DELTASPEC_HIP_Q1_GLU=t$s DELTASPEC_HIP_Q1_SMALL=t$s $C/ds_t" ;;
    a3 | a5) echo "env DELTASPEC_HIP_Q1_GLU=t$s DELTASPEC_HIP_Q1_SMALL=t$s DELTASPEC_HIP_Q1=t$s $C/ds_t" ;;
    *) echo "$C/ds_$1" ;;
    esac
}
b() { # tag bin args...
    local tag=$1 bin=$2
    shift 2
    (( SECONDS - t0 > LIM - 15 )) && return  # leave the call's last minute for the copy-back
    timeout -k 5 100 $(cmd $bin) bench decode --model $W/m.gguf --backend hip:cuda "$@" 2>&1 |
        grep -E "decode:|ratio|rror|panick" | sed "s/^/[$((SECONDS - t0))s $tag] /"
}
vs=$(for v in $vs; do c=$(cmd $v); [ -x "${c##* }" ] && echo $v; done | xargs)
echo "variants: $vs"
round() {
    for v in $vs; do b "$v" $v -n 64 --bw-mib 256; done
}
st reads
BULK_ONLY=1 timeout 60 /tmp/reads
st round 1; round
st ncu 1 row
for v in h a5; do
    (( SECONDS - t0 > LIM - 100 )) && break
    ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
        --launch-skip 400 --launch-count 130 env DELTASPEC_HIP_PDL=0 \
        $(cmd $v) bench decode --model $W/l8.gguf --backend hip:cuda -n 8 --bw-mib 64 >$OUT/ncu_${v}_r1.csv 2>/dev/null
done
python3 tools/device/ncu_step.py $OUT/ncu_h_r1.csv $OUT/ncu_a5_r1.csv | tail -30
st round 2; round
st rows
for v in h pq32 g256; do
    for r in 8 16; do b "$v rows $r" $v -n 16 --rows $r --bw-mib 64; done
done
st ncu 16 rows
(( SECONDS - t0 < LIM - 60 )) && ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --launch-skip 400 --launch-count 140 env DELTASPEC_HIP_PDL=0 \
    $C/ds_h bench decode --model $W/l8.gguf --backend hip:cuda -n 8 --rows 16 --bw-mib 64 >$OUT/ncu_h_r16.csv 2>$OUT/ncu_h_r16.err
python3 tools/device/ncu_step.py $OUT/ncu_h_r16.csv | tail -40
st round 3; round
st wgpu
(( SECONDS - t0 < LIM - 40 )) && timeout -k 5 60 $B bench decode --model $W/m.gguf --backend wgpu -n 32 --bw-mib 64 2>&1 | grep -E "decode:|ratio|rror"
st end
