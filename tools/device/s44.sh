#!/usr/bin/env bash
# Session 44 (docs/perf.md): the chunked gated delta net (639fc52 + the two-token recurrence)
# against the head before it (966e0c9's deltaspec, carried as ds0 in $C/bins.tar.xz beside
# deltaspec, hip_ops and tree_ops), interleaved in one call:
# - 1-, 16- and 8-row steps of the 27B IQ4_XS synth, each build alternately; the 16-row step
#   also with the sliced norm at verify widths (DELTASPEC_HIP_NORM_SLICE_ROWS=16, untimed so far);
# - ncu's duration of gdn_dk128 at 16 and 1 rows in the 8-layer cut, both builds;
# - greedy tokens of both builds (must be equal) and the gdn GPU tests (bit equality of 37 rows
#   at once against one-row calls, the tree ops);
# - the wgpu 16-row step, both builds (the wgpu gated delta net is chunked too);
# - the DFlash2 chain on the code profile (its verify runs gdn_dk128_log), both builds;
# - on an H200, llama.cpp's CUDA build beside all that, then the same-run table.
#   run(command="C=carry/s44b bash tools/device/s44.sh 2>&1 | tee $OUT/a.log",
#       carry=["carry/s44b", ".gl", "llcpp"])
set -u
C=${C:-carry/s44b}
source tools/device/env.sh
LIM=${LIM:-570}
h200=0
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && h200=1
((h200)) && [ -f llcpp/llama.cpp.tar.xz ] && llama_bg $OUT/llama.log
mk
mk8
export DV_N=16 DV_WARM=500
ab() { # tag rows env...: the step with each build, new first
    local tag=$1 rows=$2
    shift 2
    B=$B1 DV_ROWS=$rows dv "$tag new" 0 "$@"
    B=$B0 DV_ROWS=$rows dv "$tag old" 0 "$@"
    B=$B1
}
ab "1 row" 1 X=1
ab "16 rows" 16 X=1
ab "8 rows" 8 X=1
DV_ROWS=16 dv "16 rows new slice-rows" 0 DELTASPEC_HIP_NORM_SLICE_ROWS=16
gdn_ncu() { # tag binary rows
    left 60 || return
    DELTASPEC_HIP_PDL=0 timeout -k 5 90 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:^gdn_dk128$" \
        --launch-skip 4 --launch-count 3 $2 bench decode --model $W/l8.gguf --backend hip:cuda -n 2 --rows $3 \
        --bw-mib 64 --warmup-ms 0 2>&1 | grep -E "gpu__time_duration" | sed "s/^/[ncu $1] /"
}
gdn_ncu "16 new" $B1 16
gdn_ncu "16 old" $B0 16
for b in $B1 $B0; do
    left 40 || break
    timeout -k 5 40 $b generate --model $W/m.gguf --backend hip:cuda --tokens 1,2,3 -n 24 2>&1 |
        tail -2 | head -1 | sed "s|^|[tokens $b] |"
done
left 60 && DELTASPEC_REQUIRE_GPU=1 timeout -k 5 60 $C/hip_ops --test-threads=1 gated_delta 2>&1 |
    grep -E "^test |result|panicked" | sed "s/^/[hip_ops] /"
# The wgpu 16-row step (its gated delta net chunked the same way at defd71c).
B=$B1 b "wgpu 16 rows new" wgpu -n 8 --rows 16 --bw-mib 64 --warmup-ms 500
B=$B0 b "wgpu 16 rows old" wgpu -n 8 --rows 16 --bw-mib 64 --warmup-ms 500
# On an H200 the same-run table comes first of what is left.
if ((h200 == 0)); then
    left 150 && spec hip:cuda chain code | sed "s/^/[new] /"
    left 110 && B=$B0 spec hip:cuda chain code | sed "s/^/[old] /"
    ab "16 rows b" 16 X=1
    left 40 && DELTASPEC_REQUIRE_GPU=1 timeout -k 5 30 $C/tree_ops --test-threads=1 hip 2>&1 |
        grep -E "^test |result|panicked" | sed "s/^/[tree_ops] /"
    gdn_ncu "1 new" $B1 1
    gdn_ncu "1 old" $B0 1
fi
if ((h200)) && [ -n "${lp:-}" ]; then
    st waiting for the llama.cpp build
    wait $lp
    tail -n 2 $OUT/llama.log
    same_run_table
fi
st end
