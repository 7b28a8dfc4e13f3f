#!/usr/bin/env bash
# Runs on the GPU machine (no cargo there), from the repository root, with the binaries that
# tools/device/build_carry.sh put into carry/:
#
#   bash carry/run_hip.sh            # tests, then benches (about 5 minutes on an H200)
#   BENCH=0 bash carry/run_hip.sh    # tests only
#   FULL=1 bash carry/run_hip.sh     # also the full 64-layer 27B Q4_K_M decode bench (writes ~16 GB)
#
# Every step prints the command it runs and its exit status; the script goes on after a
# failure and exits non-zero if any step failed.
set -u
carry="${CARRY:-$(cd "$(dirname "$0")" && pwd)}"
backend="${BACKEND:-hip:cuda}"
work="${WORK:-${TMPDIR:-/tmp}/deltaspec-device}"
failed=()

run() {
    echo
    echo "================================================================================"
    echo "+ $*"
    local t0=$SECONDS
    "$@"
    local rc=$?
    echo "[exit $rc, $((SECONDS - t0)) s] $*"
    [ "$rc" -eq 0 ] || failed+=("$*")
    return 0
}

echo "carry: $carry"
[ -f "$carry/MANIFEST" ] && cat "$carry/MANIFEST"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
mkdir -p "$work"

# The CLI tests run the carried binary (their build-time path does not exist here).
export DELTASPEC_BIN="$carry/deltaspec"
run "$carry/deltaspec" backends
# Test binaries: one thread (one GPU context at a time keeps failures readable), output shown.
run "$carry/hip_build" --test-threads=1
run env RUST_BACKTRACE=1 DELTASPEC_REQUIRE_GPU=1 "$carry/hip_ops" --test-threads=1 --nocapture

if [ "${BENCH:-1}" != "0" ]; then
    run "$carry/deltaspec" bench bandwidth --backend "$backend" --mib 1024
    # Decode on 27B-shaped models cut to 8 layers (all real tensor shapes, incl. the 248k vocab).
    for quant in q4_k_m iq4_xs q8_0; do
        model="$work/qwen27b-8l-$quant.gguf"
        [ -f "$model" ] || run "$carry/deltaspec" synth --preset qwen3.8-27b --layers 8 --quant "$quant" --out "$model"
        run "$carry/deltaspec" bench decode --model "$model" --backend "$backend" -n 64 --ctx 1024
    done
    if [ "${FULL:-0}" = "1" ]; then
        model="$work/qwen27b-q4_k_m.gguf"
        [ -f "$model" ] || run "$carry/deltaspec" synth --preset qwen3.8-27b --quant q4_k_m --out "$model"
        run "$carry/deltaspec" bench decode --model "$model" --backend "$backend" -n 64 --ctx 1024
    fi
fi

echo
if [ "${#failed[@]}" -eq 0 ]; then
    echo "run_hip.sh: all steps passed"
else
    echo "run_hip.sh: ${#failed[@]} step(s) failed:"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
