#!/usr/bin/env bash
# Session 41, call C: wgpu_ops on a GPU with cooperative matrices (the test-option fix of
# ad848ff, not yet run there), then where the 16-row verify step goes inside the real step:
# the step without each kernel family (DELTASPEC_HIP_DROP, a timing diagnostic: outputs invalid).
#   run(command="C=carry/s41c bash tools/device/s41c.sh 2>&1 | tee $OUT/c.log", carry=["carry/s41c", ".gl"])
set -u
C=${C:-carry/s41c}
source tools/device/env.sh
LIM=${LIM:-400}
[ "${WGPU_TESTS:-1}" = 1 ] && GT_MIN=60 gpu_tests wgpu_ops
mk
d() { # tag drop-list
    left 25 || return
    DELTASPEC_HIP_DROP=$2 timeout -k 5 60 $B bench decode --model $W/m.gguf --backend hip:cuda -n 16 --rows 16 \
        --bw-mib 64 --warmup-ms 500 2>&1 | grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $1] /"
}
sets=(
    "base="
    "small=rms_norm,quantize,relayout,gdn_,conv_,attn_,qk_prep,kv_write,slice_"
    "tiles=_iq4_xs_16"
    "glu=qmma_glu_"
    "normq=rms_norm,quantize,relayout"
    "gdn=gdn_,conv_"
    "attn=attn_,qk_prep,kv_write"
    "head=qgemv_q6_k"
    "base="
)
# SETS="base small ..." runs only those, in that order (a short call).
if [ -n "${SETS:-}" ]; then
    want=()
    for n in $SETS; do
        for s in "${sets[@]}"; do [ "${s%%=*}" = "$n" ] && want+=("$s") && break; done
    done
    sets=("${want[@]}")
fi
for s in "${sets[@]}"; do d "${s%%=*}" "${s#*=}"; done
st end
