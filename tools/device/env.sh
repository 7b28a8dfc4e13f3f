# Helpers for one-call device scripts, sourced on the GPU machine from the repo root:
#
#   C=carry/sNN source tools/device/env.sh
#   mk                                  # the 27B IQ4_XS target and DFlash2 drafter in /tmp/w
#   spec hip:cuda chain code            # bench spec, the summary lines (N=256 for -n 256)
#   DELTASPEC_X=0 spec wgpu adaptive prose --long-alpha 0
#   mk8; ncu ... $B bench decode --model $W/l8.gguf ...   # the 8-layer cut for ncu
#
# $C is a folder made by `tools/device/build_carry.sh $C` and carried with
# run(carry=["$C", ".gl"]); `.gl` holds the Vulkan loader debs (see the device README).
# Every line the helpers print is prefixed with the seconds since sourcing.
C=${C:?set C to the carried folder, e.g. C=carry/s31}
[ -x "$C/deltaspec" ] || (cd "$C" && xz -dc bins.tar.xz | tar -xf -)
for f in .gl/*.deb; do dpkg -x "$f" / >/dev/null 2>&1; done
ldconfig
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f $icd ] && export VK_DRIVER_FILES=$icd \
    __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=$(mktemp -d)
# The CLI tests among the carried test binaries run this binary.
export DELTASPEC_BIN="$C/deltaspec"
B=$C/deltaspec
# A/B scripts: B1 the carried build, B0 a base build carried beside it as ds0 (if any).
B1=$B
B0=$C/ds0
OUT=${OUT:-/tmp/out}  # where scripts put logs ($OUT on the device)
mkdir -p "$OUT"
W=/tmp/w
mkdir -p $W
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader
head -3 "$C/MANIFEST" 2>/dev/null
t0=$SECONDS
# left S: more than S of the call's LIM seconds (default 575) remain since sourcing.
left() { ((SECONDS - t0 < ${LIM:-575} - $1)); }
# b tag backend args...: one `bench decode` of $W/m.gguf, its summary lines tagged; skipped with
# B_SPARE (default 30) seconds or fewer to spare, killed after B_TIMEOUT (default 100).
b() {
    local tag=$1 be=$2
    shift 2
    left ${B_SPARE:-30} || return
    timeout -k 5 ${B_TIMEOUT:-100} $B bench decode --model $W/m.gguf --backend $be "$@" 2>&1 |
        grep -E "decode:|roofline|bandwidth|rror|panick" | sed "s/^/[$((SECONDS - t0))s $tag] /"
}
st() { echo "== [$((SECONDS - t0)) s] $*"; }
# dv tag depth env...: one hip `bench decode` of $W/m.gguf with the given environment (X=1:
# none) after `depth` context rows, its summary line tagged; DV_ROWS rows a step (default 1),
# DV_N steps (default 32), DV_WARM ms of warm-up (default 500); skipped with DV_SPARE (default
# 40) seconds or fewer left.
dv() {
    local tag=$1 depth=$2
    shift 2
    left ${DV_SPARE:-40} || return
    env "$@" timeout -k 5 90 $B bench decode --model $W/m.gguf --backend hip:cuda -n ${DV_N:-32} --rows ${DV_ROWS:-1} --bw-mib 64 \
        -d $depth --ctx $((depth + 1024)) --warmup-ms ${DV_WARM:-500} 2>&1 | grep -E "decode:|rror|panick" |
        sed "s/^/[$((SECONDS - t0))s $tag] /"
}
mk() {
    [ -f $W/m.gguf ] || { st synth target; $B synth --preset qwen3.8-27b --quant iq4_xs --out $W/m.gguf >/dev/null; }
    [ -f $W/d2.gguf ] || { st synth drafter; $B synth --preset dflash2-27b --quant iq4_xs --out $W/d2.gguf >/dev/null; }
    st synth done
}
mk8() {
    [ -f $W/l8.gguf ] || { st synth l8; $B synth --preset qwen3.8-27b --layers 8 --quant iq4_xs --out $W/l8.gguf >/dev/null; }
}
# llama.cpp's CUDA llama-bench ($LB), configured and built from llcpp/llama.cpp.tar.xz
# (tools/device/make_llcpp.sh; carry "llcpp") in the background on the CPU: ~5.5 min on 13 cores.
# The build log goes to $1; `wait $lp` waits for it.
LB=/tmp/llama.cpp/build/bin/llama-bench
llama_bg() {
    local log=$1 root=$PWD
    (
        cd /tmp && tar xJf "$root/llcpp/llama.cpp.tar.xz" && cd llama.cpp &&
            cmake -S . -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
                -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
                -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1 &&
            nice -n 10 cmake --build build --target llama-bench -j 13 >>"$log" 2>&1
        echo "llama build exit $?" >>"$log"
    ) &
    lp=$!
}
spec() { # backend mode profile [bench spec options...]; N= sets -n (default 64)
    local be=$1 mode=$2 prof=$3
    shift 3
    st "spec $be $mode $prof $*"
    timeout -k 5 200 $B bench spec --model $W/m.gguf --draft $W/d2.gguf --backend "$be" --spec "$mode" \
        --replay-profile "$prof" -n "${N:-64}" "$@" 2>&1 |
        grep -E "AR:|spec |accept|split|plain:|graphs|output|rror|panick" | head -14
}
# gpu_tests name...: the carried test binaries against a GPU (a skip is a failure), each to
# $OUT/t_<name>.log with the seconds left of LIM (default 575) since sourcing, none started with
# fewer than GT_MIN (default 40) left; a line each here, with the first failures.
gpu_tests() {
    export DELTASPEC_REQUIRE_GPU=1 DELTASPEC_REQUIRE_COOP=1 RUST_BACKTRACE=1
    local t s0 rest
    for t in "$@"; do
        rest=$((${LIM:-575} - SECONDS + t0))
        ((rest >= ${GT_MIN:-40})) || { echo "[$t] not run: no time"; continue; }
        s0=$SECONDS
        timeout -k 5 $((rest - 10)) $C/$t --test-threads=2 --skip cli_ >"${OUT:-/tmp/out}/t_$t.log" 2>&1
        echo "[$t] exit $? in $((SECONDS - s0)) s: $(grep -E '^test result' "${OUT:-/tmp/out}/t_$t.log" | tail -1)"
        grep -E "FAILED|panicked" "${OUT:-/tmp/out}/t_$t.log" | head -5
    done
}
# same_run_table: after the llama.cpp build (`wait $lp`), llama-bench tg64 and our hip and wgpu
# decode on $W/m.gguf, interleaved twice. Uses the caller's `left S` (seconds to spare) and
# `b tag backend args...` (one `bench decode` run).
same_run_table() {
    local i
    for i in 1 2; do
        if [ -x $LB ] && left 40; then
            st "llama $i"
            timeout -k 5 120 $LB -m $W/m.gguf -fa 1 -ngl 99 -p 16 -n 64 -r 2 2>&1 | grep -E "tg64|pp16|model" | sed "s/^/[llama $i] /"
        fi
        b "hip $i" hip:cuda -n 64 --bw-mib 2048
        b "wgpu $i" wgpu -n 32 --bw-mib 256
    done
}
