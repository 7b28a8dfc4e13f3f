#!/usr/bin/env bash
# Rollback A/B in the speculative loop on the GPU machine: `bench spec --spec chain` for every
# rollback mode and replay profile given, interleaved (mode 1, mode 2, ... per profile, then again,
# REPEAT rounds) so clock drift hits every mode alike; each output line is tagged.
#
#   bash tools/device/spec_ab.sh BIN TARGET.gguf DRAFT.gguf [modes...]
#
# modes default to "per-token factors"; PROFILES (default "code prose") the replay profiles;
# REPEAT (default 2) the rounds; BACKEND (default hip:cuda), e.g. wgpu; N (default 96) tokens.
# Session 22 measured factor replay against per-token states this way (docs/perf.md). The first
# wgpu run of a call includes shader compilation: run one round more and drop it.
set -u
bin="$1"
target="$2"
draft="$3"
shift 3
modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(per-token factors)
for ((i = 0; i < ${REPEAT:-2}; i++)); do
    for prof in ${PROFILES:-code prose}; do
        for mode in "${modes[@]}"; do
            timeout --kill-after=5 150 "$bin" bench spec --model "$target" --draft "$draft" \
                --backend "${BACKEND:-hip:cuda}" --spec chain --replay-profile "$prof" \
                --rollback "$mode" -n "${N:-96}" 2>&1 |
                grep -E "AR:|spec chain|accept:|split" | sed "s/^/[$prof $mode] /"
        done
    done
done
