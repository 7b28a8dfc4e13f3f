#!/usr/bin/env bash
# Builds what the GPU machine runs (it has no cargo) and copies it into carry/ (git-ignored):
#   carry/deltaspec    the release binary (CLI, benches)
#   carry/hip_build    release test binary: embedded kernel objects (no GPU needed)
#   carry/hip_ops      release test binary: every op and a tiny model, hip vs cpu
#   carry/run_hip.sh   the script to run there (tools/device/run_hip.sh)
# Usage: tools/device/build_carry.sh [carry-dir]
# Binaries are stripped (panic messages remain) and packed with xz -9e to stay well under
# the 64 MiB carry limit.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/carry}"
cd "$root"
tests=(${TESTS:-hip_build hip_ops hip_graph hip_fused tree_ops draft_gpu dflash2_ops spec_tree hip_spec_graphs wgpu_ops wgpu_model wgpu_gemv})
test_args=()
for t in "${tests[@]}"; do test_args+=(--test "$t"); done

# sm_90 cubins in the binaries where a ptxas is at hand (tools/device/get_ptxas.sh): the H200
# then skips the driver's PTX JIT (40-120 s on a fresh machine).
if [ -z "${DELTASPEC_PTXAS:-}" ] && [ -x "$HOME/.cache/deltaspec/cuda-bin/ptxas" ]; then
    export DELTASPEC_PTXAS="$HOME/.cache/deltaspec/cuda-bin/ptxas"
fi
echo "+ cargo build --release --bin deltaspec"
cargo build --release --bin deltaspec
echo "+ cargo test --release --no-run --message-format=json ${test_args[*]}"
json="$(mktemp)"
trap 'rm -f "$json"' EXIT
cargo test --release --no-run --message-format=json "${test_args[@]}" >"$json"
# The criterion kernel benches (benches/kernels.rs) travel too, as `kernels`.
cargo bench --no-run --message-format=json --bench kernels >>"$json"

mkdir -p "$out"
# One executable per test target: "name path" lines from the compiler-artifact messages.
python3 - "$json" >"$json.list" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and (
        "test" in m["target"]["kind"] or "bench" in m["target"]["kind"]
    ):
        print(m["target"]["name"], m["executable"])
PY
found=0
while read -r name path; do
    echo "+ cp $path $out/$name"
    cp "$path" "$out/$name"
    found=$((found + 1))
done <"$json.list"
rm -f "$json.list"
tests+=(kernels)
[ "$found" -eq "${#tests[@]}" ] || { echo "build_carry.sh: expected ${#tests[@]} test binaries, found $found" >&2; exit 1; }
cp "${CARGO_TARGET_DIR:-target}/release/deltaspec" "$out/deltaspec"
cp tools/device/run_hip.sh "$out/run_hip.sh"
if command -v strip >/dev/null 2>&1; then
    strip --strip-all "$out/deltaspec" "${tests[@]/#/$out/}"
fi
{
    echo "built: $(date -u +%FT%TZ) from $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
    "$out/deltaspec" backends 2>&1 | sed 's/^/  /' || true
} >"$out/MANIFEST"
# The tracked tree (fixtures) already takes ~31 MiB of the 64 MiB a device call carries:
# ship the binaries stripped and xz-compressed with a dictionary (1 GiB) larger than all of them, so the
# library code and kernels they all share are stored once (~70 MB each; 6 binaries -> 10.3 MB, -9e with
# its 64 MiB dictionary gave ~7 MB per binary); preset 1 keeps it fast (~20 s CPU). run_*.sh unpacks them.
tar -C "$out" -cf - deltaspec "${tests[@]}" | xz -T1 --lzma2=preset=1,dict=1GiB >"$out/bins.tar.xz"
rm -f "$out/deltaspec" "${tests[@]/#/$out/}"
ls -la "$out"
du -sh "$out"
cat "$out/MANIFEST"
