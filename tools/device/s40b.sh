#!/usr/bin/env bash
# Session 40, call B (docs/perf.md), on the machine call A warmed (/tmp/w keeps its files):
# s40a.sh's norm_q8f A/B twice, then every GPU test binary (hip and wgpu against the CPU), the
# ones that run the new kernels first.
#   run(command="C=carry/s40 LIM=330 bash tools/device/s40b.sh 2>&1 | tee $OUT/b.log", carry=["carry/s40", ".gl"])
ROUNDS=${ROUNDS:-2} NUMBERS=0 TESTS="hip_fused hip_ops hip_spec_graphs spec_tree draft_gpu dflash2_ops tree_ops hip_graph hip_build wgpu_ops wgpu_model wgpu_gemv" \
    exec bash tools/device/s40a.sh
