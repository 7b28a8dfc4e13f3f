#!/usr/bin/env bash
# One device call that measures everything the issues ask for (tests, decode, verify-sized steps,
# drafters, speculation, llama.cpp on the same file), inside the 10-minute command limit.
# Run from the repository root on the GPU machine, after tools/device/build_carry.sh here:
#
#   bash tools/device/run_all.sh [OUTDIR]
#
# Optional: llcpp/llama.cpp.tar.xz (vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist,
# repacked without docs/models/tests) is built with CUDA in the background while the GPU runs our
# steps, then `llama-bench` runs on the same IQ4_XS file. STEPS selects groups
# (default: "tests hip wgpu draft spec q8 llama"; also "prefill": pp512 of the 27B with the f32
# tiled kernel and on the int8 path, and "kernels": the driver's register counts and code sizes).
# Every step has its own timeout so one hang cannot eat the call; the log says each exit status.
set -u
root="$(pwd)"
out="${1:-${OUT:-/tmp/deltaspec-out}}"
work="${WORK:-/tmp/deltaspec-device}"
steps=" ${STEPS:-tests hip wgpu draft spec q8 llama} "
bin="$root/carry"
ds="$bin/deltaspec"
mkdir -p "$out" "$work"
# build_carry.sh ships the binaries as one xz stream (bins.tar.xz): unpack it once.
if [ -f "$bin/bins.tar.xz" ] && [ ! -x "$ds" ]; then
    xz -dc "$bin/bins.tar.xz" | tar -C "$bin" -xf - || { echo "run_all.sh: cannot unpack $bin/bins.tar.xz" >&2; exit 1; }
fi
failed=()
t_start=$SECONDS

step() { # step TIMEOUT_S CMD...
    local to=$1
    shift
    echo
    echo "=== [t=$((SECONDS - t_start))s] $*"
    local t0=$SECONDS
    timeout --kill-after=5 "$to" "$@"
    local rc=$?
    echo "=== [exit $rc, $((SECONDS - t0)) s] $*"
    [ "$rc" -eq 0 ] || failed+=("$* (rc $rc)")
}
want() { [[ "$steps" == *" $1 "* ]]; }

# llama.cpp: configure and build in the background (CPU only) while our GPU steps run.
llama_pid=""
if want llama && [ -f "$root/llcpp/llama.cpp.tar.xz" ]; then
    (
        cd "$work" && tar xJf "$root/llcpp/llama.cpp.tar.xz" && cd llama.cpp &&
            cmake -S . -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
                -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
                -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release >"$work/llama-cmake.log" 2>&1 &&
            nice -n 10 cmake --build build --target llama-bench -j 13 >"$work/llama-build.log" 2>&1
        echo "llama build exit $?" >>"$work/llama-build.log"
    ) &
    llama_pid=$!
fi

cat "$bin/MANIFEST" 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
step 30 "$ds" backends

iq4="$work/q27-iq4.gguf"
l8="$work/q27-8l-iq4.gguf"
step 120 "$ds" synth --preset qwen3.8-27b --quant iq4_xs --out "$iq4"
step 60 "$ds" synth --preset qwen3.8-27b --layers 8 --quant iq4_xs --out "$l8"
for d in dflash-27b dspark-27b dflash2-27b; do
    step 60 "$ds" synth --preset "$d" --out "$work/$d.gguf"
done

if want tests; then
    # The H200 has cooperative matrices: their wgpu tests must run, not skip.
    export DELTASPEC_REQUIRE_GPU=1 DELTASPEC_REQUIRE_COOP=1 RUST_BACKTRACE=1
    step 30 "$bin/hip_build" --test-threads=1
    for t in hip_ops hip_graph hip_fused tree_ops draft_gpu dflash2_ops spec_tree hip_spec_graphs wgpu_ops wgpu_model wgpu_gemv; do
        # cli_* tests run the deltaspec binary from the build tree, which is not there.
        [ -x "$bin/$t" ] && step 120 "$bin/$t" --test-threads=2 --skip cli_
    done
    unset DELTASPEC_REQUIRE_GPU DELTASPEC_REQUIRE_COOP
fi

if want hip; then
    step 60 "$ds" bench bandwidth --backend hip:cuda --mib 2048
    step 90 "$ds" bench decode --model "$iq4" --backend hip:cuda -n 64 --bw-mib 2048 --json
    for rows in 8 16 32; do
        step 60 "$ds" bench decode --model "$iq4" --backend hip:cuda -n 8 --rows $rows --bw-mib 64 --json
    done
    step 60 env DELTASPEC_PROFILE=1 "$ds" bench decode --model "$l8" --backend hip:cuda -n 4 --rows 16 --bw-mib 64
    step 60 env DELTASPEC_HIP_FUSION=all "$ds" bench decode --model "$iq4" --backend hip:cuda -n 8 --rows 16 --bw-mib 64 --json
    step 60 env DELTASPEC_PROFILE=1 "$ds" bench decode --model "$l8" --backend hip:cuda -n 16 --bw-mib 64
    step 60 env DELTASPEC_PROFILE=1 "$ds" bench decode --model "$l8" --backend hip:cuda -n 4 --rows 16 --bw-mib 64
fi

if want wgpu; then
    step 60 "$ds" bench bandwidth --backend wgpu --mib 2048
    step 120 "$ds" bench decode --model "$iq4" --backend wgpu -n 32 --bw-mib 64 --json
    step 120 env DELTASPEC_WGPU_GEMV_UNROLL=1 "$ds" bench decode --model "$iq4" --backend wgpu -n 32 --bw-mib 64 --json
    step 90 "$ds" bench decode --model "$iq4" --backend wgpu -n 8 --rows 16 --bw-mib 64 --json
    step 60 env DELTASPEC_PROFILE=1 "$ds" bench decode --model "$l8" --backend wgpu -n 16 --bw-mib 64
fi

if want prefill; then
    for b in hip:cuda wgpu; do
        step 120 "$ds" bench prefill --model "$iq4" --backend $b -p 512 -r 3 --json
    done
    # The old lowering (prompts wider than 64 rows on the f32 tiled kernel), for the ratio.
    step 120 env DELTASPEC_HIP_INT8_MAX_N=64 "$ds" bench prefill --model "$iq4" --backend hip:cuda -p 512 -r 3 --json
    step 120 env DELTASPEC_WGPU_COOP=0 "$ds" bench prefill --model "$iq4" --backend wgpu -p 512 -r 3 --json
    step 120 env DELTASPEC_WGPU_COOP=0 DELTASPEC_WGPU_INT8_MAX_N=64 "$ds" bench prefill --model "$iq4" --backend wgpu -p 512 -r 3 --json
fi

if want kernels; then
    for b in hip:cuda wgpu; do
        step 120 "$ds" bench kernels --model "$l8" --backend $b --rows 1,16 --json
    done
fi

if want draft; then
    for d in dflash-27b dspark-27b dflash2-27b; do
        step 90 "$ds" bench draft --model "$iq4" --draft "$work/$d.gguf" --backend hip:cuda -n 16 --json
    done
    step 90 env DELTASPEC_PROFILE=1 "$ds" bench draft --model "$iq4" --draft "$work/dflash2-27b.gguf" --backend hip:cuda -n 8
fi

if want spec; then
    for mode in chain tree adaptive; do
        step 120 "$ds" bench spec --model "$iq4" --draft "$work/dflash-27b.gguf" --backend hip:cuda \
            --spec "$mode" --replay-profile code -n 128 --tree-budget 16
    done
    for mode in adaptive off; do
        step 120 "$ds" bench spec --model "$iq4" --draft "$work/dflash-27b.gguf" --backend hip:cuda \
            --spec $mode --replay-profile prose -n 128
    done
    for prof in code:chain prose:adaptive mixed:adaptive; do
        step 120 "$ds" bench spec --model "$iq4" --draft "$work/dflash2-27b.gguf" --backend hip:cuda \
            --spec "${prof#*:}" --replay-profile "${prof%:*}" -n 128
    done
    # A/B: adaptive chain width (default on) against the full block every round.
    for prof in prose mixed code; do
        step 120 "$ds" bench spec --model "$iq4" --draft "$work/dflash2-27b.gguf" --backend hip:cuda \
            --spec adaptive --adapt-width off --replay-profile $prof -n 128
    done
    step 120 "$ds" bench spec --model "$iq4" --draft "$work/dflash-27b.gguf" --backend hip:cuda \
        --spec adaptive --adapt-width off --replay-profile prose -n 128
    # 128 tokens: a short run's few spec steps would carry the compile of a late verify shape.
    step 150 "$ds" bench spec --model "$iq4" --draft "$work/dflash-27b.gguf" --backend wgpu \
        --spec chain --replay-profile code -n 128
    step 150 env DELTASPEC_PROFILE=1 "$ds" bench spec --model "$iq4" --draft "$work/dflash-27b.gguf" \
        --backend wgpu --spec chain --replay-profile code -n 64
fi

if want q8; then
    q8="$work/q27-q8.gguf"
    step 120 "$ds" synth --preset qwen3.8-27b --quant q8_0 --out "$q8"
    step 60 "$ds" bench decode --model "$q8" --backend hip:cuda -n 48 --bw-mib 64 --json
    step 90 "$ds" bench decode --model "$q8" --backend wgpu -n 32 --bw-mib 64 --json
fi

if [ -n "$llama_pid" ]; then
    echo "=== [t=$((SECONDS - t_start))s] waiting for the llama.cpp build"
    wait "$llama_pid"
    tail -n 3 "$work/llama-cmake.log" "$work/llama-build.log"
    lb="$work/llama.cpp/build/bin/llama-bench"
    if [ -x "$lb" ]; then
        step 150 "$lb" -m "$iq4" -fa 1 -ngl 99 -p 16 -n 64 -r 2
    else
        failed+=("llama.cpp build")
    fi
fi

echo
echo "run_all.sh: $((SECONDS - t_start)) s"
if [ "${#failed[@]}" -eq 0 ]; then
    echo "run_all.sh: all steps passed"
else
    echo "run_all.sh: ${#failed[@]} step(s) failed:"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
