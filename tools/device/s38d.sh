#!/usr/bin/env bash
# Session 38, calls 3-4 (docs/perf.md): the f16 prototype (plain, and with its activations staged in shared
# memory: tools/device/proto/h16.cu h16s), every width; then ncu of one 16-row launch of the
# plain and the staged kernel.
#   run(command="bash tools/device/s38d.sh 2>&1 | tee $OUT/c4.log")
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
(cd tools/device/proto && nvcc -O3 -arch=sm_90 -Xptxas -v -o /tmp/h16 h16.cu 2>&1 | grep -E "error|Function prop|registers|spill" | sed 's/ptxas info    : //' | paste - - - | grep -E "h16s|error" | sed -E 's/Function properties for _Z4h16sIL//; s/EEvPK5uint2.*Used/ Used/' | head -40)
timeout -k 5 300 /tmp/h16
ncu --set full -k regex:h16 -o /tmp/hp /tmp/h16 prof >/dev/null 2>&1
ncu -i /tmp/hp.ncu-rep --page details 2>&1 | grep -E "h16|Duration|Registers Per|Issued Ipc|Achieved Active|Eligible Warps|No Eligible|DRAM Through|L2 Cache Through|L1/TEX Cache Through|Mem Busy|Max Bandwidth|L1/TEX Hit|L2 Hit" 
ncu -i /tmp/hp.ncu-rep --page raw --csv 2>/dev/null > $OUT/hp_raw.csv
