#!/usr/bin/env bash
# A/B of runtime switches on one deltaspec binary on the GPU machine, interleaved (config 1, 2, ...,
# then again, REPEAT rounds) so clock and thermal drift hit every config alike. Each config is a
# space-separated list of VAR=value settings ("-" for none); every output line is tagged with it.
#
#   bash tools/device/ab_env.sh BIN MODEL.gguf "-" "DELTASPEC_HIP_NORM_Q8=gated" ...
#
# ROWS (default "1") lists the step widths to time (`bench decode --rows`; 1 row: -n N, default 48,
# wider: -n 8); REPEAT (default 3) the rounds; BACKEND (default hip:cuda) the backend, e.g. wgpu. Use it for switches read at backend creation (DELTASPEC_HIP_*); a
# change that needs another build goes through tools/device/ab.sh instead. Session 13 measured the
# 1-row defaults and DELTASPEC_HIP_QMMA_PERSIST / DELTASPEC_HIP_NORM_Q8 this way (docs/perf.md).
# DRAFT=d.gguf times the drafter step instead (`bench draft -n N`, its step, ratio and weights
# lines), e.g. DRAFT=d2.gguf ... "-" "DELTASPEC_HIP_FUSED_WIDE=1".
set -u
bin="$1"
model="$2"
shift 2
repeat="${REPEAT:-3}"
rows="${ROWS:-1}"
backend="${BACKEND:-hip:cuda}"
n1="${N:-48}"
for ((i = 0; i < repeat; i++)); do
    for cfg in "$@"; do
        settings=()
        [ "$cfg" != "-" ] && read -r -a settings <<<"$cfg"
        if [ -n "${DRAFT:-}" ]; then
            env "${settings[@]}" timeout --kill-after=5 120 "$bin" bench draft --model "$model" \
                --draft "$DRAFT" --backend "$backend" -n "${N:-16}" 2>&1 |
                grep -E "step|ratio|weights" | sed "s/^/[$cfg draft] /"
            continue
        fi
        for r in $rows; do
            n="$n1"
            [ "$r" != 1 ] && n=8
            env "${settings[@]}" timeout --kill-after=5 120 "$bin" bench decode --model "$model" \
                --backend "$backend" -n "$n" --rows "$r" --bw-mib 64 2>&1 |
                grep -E "decode:" | sed "s/^/[$cfg rows $r] /"
        done
    done
done
