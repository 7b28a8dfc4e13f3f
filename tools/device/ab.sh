#!/usr/bin/env bash
# A/B of two deltaspec binaries on the GPU machine, interleaved (A, B, A, B) so clock and thermal
# drift hit both alike: the hip 1-row decode step, verify-sized steps (8 and 16 rows) and, with a
# drafter, its step (`bench draft`: drafter step and its ratio to the 8-row target step) and
# DFlash2 chain speculation on the replay profiles; optionally wgpu's 1-row step. Every line of
# output is tagged with the binary it came from.
#
#   bash tools/device/ab.sh A_BIN B_BIN MODEL.gguf [DRAFT.gguf]
#
# Use it for a change that cannot sit behind a runtime flag (a kernel's float order, which the
# 1-row and verify kernels must share): build the base commit's binary and the new one here,
# carry both (xz), unpack there, synthesize the model once (`deltaspec synth --preset
# qwen3.8-27b --quant iq4_xs --out MODEL.gguf`) and run this. REPEAT (default 2) sets the rounds,
# WGPU=1 adds the wgpu decode step.
set -u
a="$1"
b="$2"
model="$3"
draft="${4:-}"
repeat="${REPEAT:-2}"

run() { # run TAG TIMEOUT BIN ARGS...
    local tag=$1 to=$2 bin=$3
    shift 3
    timeout --kill-after=5 "$to" "$bin" "$@" 2>&1 | grep -E "decode:|spec |AR:|accept:|output:|drafter step|ratio:" |
        sed "s/^/[$tag] /"
}

for ((i = 0; i < repeat; i++)); do
    for tag in A B; do
        bin=$a
        [ "$tag" = B ] && bin=$b
        run "$tag" 120 "$bin" bench decode --model "$model" --backend hip:cuda -n 48 --bw-mib 64
        for rows in 8 16; do
            run "$tag rows $rows" 120 "$bin" bench decode --model "$model" --backend hip:cuda -n 8 --rows "$rows" --bw-mib 64
        done
        if [ "${WGPU:-0}" = 1 ]; then
            run "$tag wgpu" 120 "$bin" bench decode --model "$model" --backend wgpu -n 32 --bw-mib 64
        fi
        if [ -n "$draft" ]; then
            run "$tag draft" 120 "$bin" bench draft --model "$model" --draft "$draft" --backend hip:cuda -n 32
            for p in code prose; do
                run "$tag spec $p" 120 "$bin" bench spec --model "$model" --draft "$draft" --backend hip:cuda \
                    --spec chain --replay-profile "$p" -n 128
            done
        fi
    done
done
