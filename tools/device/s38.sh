#!/usr/bin/env bash
# One device call (session 38, docs/perf.md): the same-run table the issues ask for, on the head.
# - llama.cpp's CUDA llama-bench (tg64) interleaved with our hip and wgpu decode on one 27B IQ4_XS
#   file, the roofline from the copy bandwidth of the same process;
# - the 8/16-row verify steps against the 1-row step;
# - the DFlash2 chain (code) and the adaptive policy (prose) with their AR baselines;
# - greedy tokens of the 1024-row panel build against the 32-row one (must be equal);
# - ncu's full section set (stall reasons, per-instruction samples) of one 16-row gate/up tile and
#   one 1-row gate/up launch, exported as csv.
# $C holds bins.tar.xz (deltaspec, ds_g32 = the same tree with DELTASPEC_HIP_DEFINES=DS_WL_G=32).
#   run(command="C=carry/s38 bash tools/device/s38.sh 2>&1 | tee $OUT/c1.log",
#       carry=["carry/s38", ".gl", "llcpp"])
set -u
C=${C:-carry/s38}
source tools/device/env.sh
OUT=${OUT:-/tmp/out}
LIM=${LIM:-540}
root=$PWD
(
    cd /tmp && tar xJf "$root/llcpp/llama.cpp.tar.xz" && cd llama.cpp &&
        cmake -S . -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release >$OUT/llama.log 2>&1 &&
        nice -n 10 cmake --build build --target llama-bench -j 14 >>$OUT/llama.log 2>&1
    echo "llama build exit $?" >>$OUT/llama.log
) &
lp=$!
mk8
mk
st "ncu (the llama.cpp build runs beside it)"
prof() { # tag kernel-regex rows
    left 60 || return
    ncu --set full -k "regex:$2" --launch-skip 6 --launch-count 1 -o /tmp/$1 \
        env DELTASPEC_HIP_PDL=0 $B bench decode --model $W/l8.gguf --backend hip:cuda -n 2 --rows $3 --bw-mib 64 \
        >/tmp/$1.log 2>&1 || tail -3 /tmp/$1.log
    ncu -i /tmp/$1.ncu-rep --page raw --csv >$OUT/$1_raw.csv 2>&1
    ncu -i /tmp/$1.ncu-rep --page source --csv --print-source sass >$OUT/$1_sass.csv 2>&1 ||
        ncu -i /tmp/$1.ncu-rep --page source --csv >$OUT/$1_sass.csv 2>&1
    ncu -i /tmp/$1.ncu-rep --page details 2>&1 | grep -E "Duration|Registers|Warp Cycles|Issued Ipc|Achieved Occ|Theoretical Occ|Eligible|Active Warps|No Eligible|Memory Throughput|DRAM Through" | sed "s/^/[$1] /"
}
prof glu16 qmma_glu_iq4_xs 16
prof glu1 qgemv_glu_iq4_xs_1 1
st greedy tokens, 1024-row panels against 32
for v in deltaspec ds_g32; do
    left 40 && timeout -k 5 60 $C/$v generate --model $W/m.gguf --backend hip:cuda --tokens 1,2,3 -n 16 2>&1 |
        tail -1 | sed "s/^/[$v] /"
done
left 100 && spec hip:cuda chain code
left 100 && spec hip:cuda adaptive prose
st "rows (the llama.cpp build may still run beside it)"
for r in 16 8 1; do b "hip rows $r" hip:cuda -n 16 --rows $r --bw-mib 256; done
st waiting for the llama.cpp build
wait $lp
tail -n 2 $OUT/llama.log
same_run_table
st end
