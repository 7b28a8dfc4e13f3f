#!/usr/bin/env bash
# Session 43, call B (carry/s43): the head's 1-, 8- and 16-row steps with the sliced norm on by
# default; the sliced add_rms_norm at verify widths (DELTASPEC_HIP_NORM_SLICE_ROWS=16: it writes
# the matrix-core tiles' fragment order, so the qmma_quantize launch after each goes); the 16-row
# step with the dk = 128
# gated delta net's state columns over 8 lanes (DELTASPEC_HIP_GDN_SPLIT=8: 16 rows a lane, twice
# the blocks) against the default, interleaved; ncu's stall reasons and per-instruction samples of
# gdn_dk128 at 16 and 1 rows (where its ~1.2 µs a token goes); the DFlash2 chain; greedy tokens
# with the sliced norm against the gated norms alone (must be equal).
#   run(command="C=carry/s43 bash tools/device/s43b.sh 2>&1 | tee $OUT/b.log", carry=["carry/s43", ".gl"])
set -u
C=${C:-carry/s43}
source tools/device/env.sh
LIM=${LIM:-480}
mk
mk8
export DV_N=16 DV_WARM=500
r() { # tag rows env...: one step of `rows` rows (env.sh's dv)
    local tag=$1 rows=$2
    shift 2
    DV_ROWS=$rows dv "$tag" 0 "$@"
}
prof() { # tag kernel-regex rows env...
    local tag=$1 k=$2 rows=$3
    shift 3
    left 70 || return
    env "$@" DELTASPEC_HIP_PDL=0 timeout -k 5 120 ncu --clock-control none --set full -k "regex:$k" --launch-skip 2 \
        --launch-count 1 -o /tmp/$tag $B bench decode --model $W/l8.gguf --backend hip:cuda -n 2 --rows $rows \
        --bw-mib 64 --warmup-ms 0 >/tmp/$tag.log 2>&1 || tail -3 /tmp/$tag.log
    ncu -i /tmp/$tag.ncu-rep --page raw --csv >$OUT/${tag}_raw.csv 2>&1
    ncu -i /tmp/$tag.ncu-rep --page source --csv --print-source sass >$OUT/${tag}_sass.csv 2>&1
    ncu -i /tmp/$tag.ncu-rep --page details 2>&1 | grep -E "Duration|Registers|Warp Cycles|Issued Ipc|Achieved Occ|Theoretical Occ|Eligible|Active Warps|No Eligible|Stall|Shared|Bank" | sed "s/^/[$tag] /" | head -40
}
r "1 row" 1 X=1
for i in 1 2; do
    r "16 rows $i" 16 X=1
    r "16 rows slice-rows $i" 16 DELTASPEC_HIP_NORM_SLICE_ROWS=16
    r "16 rows split8 $i" 16 DELTASPEC_HIP_GDN_SPLIT=8
done
prof gdn16 "^gdn_dk128$" 16
r "8 rows" 8 X=1
r "8 rows slice-rows" 8 DELTASPEC_HIP_NORM_SLICE_ROWS=16
prof gdn1 "^gdn_dk128$" 1
left 90 && spec hip:cuda chain code
for e in X=1 DELTASPEC_HIP_NORM_Q8=gated; do
    left 40 || break
    env $e timeout -k 5 40 $B generate --model $W/m.gguf --backend hip:cuda --tokens 1,2,3 -n 16 2>&1 |
        tail -2 | head -1 | sed "s/^/[tokens $e] /"
done
st end
