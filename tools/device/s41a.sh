#!/usr/bin/env bash
# Session 41, call A: where the hip 1-row step's time goes inside the real (captured, overlapped)
# step. Each run leaves some kernels out of the step (DELTASPEC_HIP_DROP, a timing diagnostic:
# the outputs are invalid) and times what is left; the difference to the full step is what those
# launches cost there, boundaries and overlap included, which per-kernel timers (ncu, events
# between launches) cannot show. ROUNDS (default 2) interleaved rounds over the sets below.
# On an H200 it runs the same-run table (s39.sh) instead, which the issues still lack.
#   run(command="C=carry/s41 bash tools/device/s41a.sh 2>&1 | tee $OUT/a.log",
#       carry=["carry/s41", ".gl", "llcpp"])
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ "${FORCE_DROP:-0}" != 1 ]; then
    exec bash tools/device/s39.sh
fi
C=${C:-carry/s41}
source tools/device/env.sh
LIM=${LIM:-560}
ROUNDS=${ROUNDS:-2}
mk
d() { # tag drop-list
    left 25 || return
    DELTASPEC_HIP_DROP=$2 timeout -k 5 60 $B bench decode --model $W/m.gguf --backend hip:cuda -n 48 --bw-mib 64 \
        --warmup-ms 1000 2>&1 | grep -E "decode:|rror|panick" | sed "s/^/[$((SECONDS - t0))s $1] /"
}
sets=(
    "base="
    "norms=rms_norm"
    "quant=quantize_q8"
    "gdn=gdn_dk"
    "attn=qk_prep,attn_"
    "small=rms_norm,quantize_q8,gdn_dk,qk_prep,attn_"
    "glu=qgemv_glu"
    "plain=qgemv_iq4_xs_1r"
    "proj=qgemv4_"
    "head=qgemv_q6_k,argmax"
    "gemv=qgemv,argmax"
    "all=_"
)
for i in $(seq 1 "$ROUNDS"); do
    for s in "${sets[@]}"; do d "${s%%=*} $i" "${s#*=}"; done
done
st end
