// Read ceilings of a 1-row GEMV's weights on the GPU machine (session 32; docs/perf.md
// "session 32" has the tables). Build and run there: nvcc -O3 -arch=sm_90 -o reads reads.cu && ./reads
//
// plain: M rows of 512-byte chunks (a GEMV's weights), one warp per row, 16-byte loads, U chunks in
//   flight per warp. Layouts: 0 row-major (row w at w*RB), 1 round-major (chunk c of row w at
//   (c*M + w)*512), 2 linear grid-stride read.
// iq4: the IQ4_XS GEMV's exact read pattern without its arithmetic: a warp owns row j of R
//   matrices (M rows of nr rounds x 544 bytes = 4 blocks of 136), each lane reads its block's
//   8-byte header and two 8-byte quant words per round, U rounds in flight; blocks per SM limited
//   by dynamic shared memory.
// bulk: the same bytes streamed by TMA bulk copies through shared-memory stages (bulk.cuh), a
//   persistent grid of 132 x blocks/SM; the question is whether it passes the ~2.5-2.9 TB/s the
//   register-load kernels reach on one 17-95 MB matrix (session 35).
// Matrices are cycled over a 1 GiB buffer so L2 (50 MB) never holds one from the last launch.
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>
#include "bulk.cuh"

template <int U, int LAYOUT>
__global__ void __launch_bounds__(128) rd_plain(const uint4* __restrict__ W, uint32_t* out, int M, int nch) {
    int w = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (LAYOUT != 2 && w >= M) return;  // (the linear read's grid is not one warp per row)
    uint32_t acc = 0;
    if (LAYOUT == 2) {
        size_t tot = (size_t)M * nch * 32, nth = (size_t)gridDim.x * 128;
        for (size_t i = (size_t)blockIdx.x * 128 + threadIdx.x; i < tot; i += nth * U) {
            uint4 v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) v[u] = i + u * nth < tot ? W[i + u * nth] : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        }
    } else {
        for (int c = 0; c < nch; c += U) {
            uint4 v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                int cc = c + u < nch ? c + u : nch - 1;
                size_t idx = LAYOUT == 0 ? ((size_t)w * nch + cc) * 32 + lane : ((size_t)cc * M + w) * 32 + lane;
                v[u] = W[idx];
            }
#pragma unroll
            for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        }
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;
}
template <int U, int R>
__global__ void __launch_bounds__(128) rd_iq4(const uint8_t* __restrict__ W, size_t mstride, uint32_t* out, int M, int nr) {
    extern __shared__ uint32_t pad[];
    int w = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (w >= M) return;
    uint32_t acc = 0;
    const uint8_t* p[R];
#pragma unroll
    for (int r = 0; r < R; ++r) p[r] = W + r * mstride + (size_t)w * nr * 544 + (lane / 8) * 136;
    const int ib = lane % 8;
    int c = 0;
    for (; c + U <= nr; c += U) {
        uint2 h[U][R], a[U][R], b[U][R];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const uint8_t* q = p[r] + (c + u) * 544;
                h[u][r] = *(const uint2*)q;
                a[u][r] = *(const uint2*)(q + 8 + 16 * ib);
                b[u][r] = *(const uint2*)(q + 16 + 16 * ib);
            }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int r = 0; r < R; ++r) acc ^= h[u][r].x ^ a[u][r].x ^ a[u][r].y ^ b[u][r].x ^ b[u][r].y;
    }
    for (; c < nr; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t* q = p[r] + c * 544;
            acc ^= ((const uint2*)q)->x ^ ((const uint2*)(q + 8 + 16 * ib))->y;
        }
    if (acc == 0x12345678u) out[w] = acc + pad[0];
}
// Mean microseconds per launch over 4 passes of `ncopy` matrices, after one warm-up pass.
template <class F>
double time_us(int ncopy, F launch) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < ncopy; ++i) launch(i);
    const int reps = 4 * ncopy;
    cudaEventRecord(a);
    for (int i = 0; i < reps; ++i) launch(i % ncopy);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    return ms * 1000.0 / reps;
}

int ncopies(size_t cap, size_t set) { return cap / set > 8 ? 8 : (int)(cap / set); }

template <int U, int L>
void plain(const char* name, uint8_t* base, size_t cap, uint32_t* out, int M, int nch) {
    const size_t mat = (size_t)M * nch * 512;
    const int grid = L == 2 ? 132 * 16 : (M + 3) / 4;
    const double us = time_us(ncopies(cap, mat), [&](int i) {
        rd_plain<U, L><<<grid, 128>>>((const uint4*)(base + i * mat), out, M, nch);
    });
    printf("%-28s M %6d bytes/row %6d: %7.2f us  %.3f TB/s\n", name, M, nch * 512, us, mat / us / 1e6);
}

template <int U, int R>
void iq4(uint8_t* base, size_t cap, uint32_t* out, int M, int nr, int bps) {
    const size_t mat = (size_t)M * nr * 544, set = mat * R;
    const int smem = bps >= 16 ? 0 : (228 * 1024) / bps - 1024;
    cudaFuncSetAttribute(rd_iq4<U, R>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    const double us = time_us(ncopies(cap, set), [&](int i) {
        rd_iq4<U, R><<<(M + 3) / 4, 128, smem>>>(base + i * set, mat, out, M, nr);
    });
    printf("R %d U %d M %6d rounds %2d blocks/SM %2d: %7.2f us  %.3f TB/s\n", R, U, M, nr, bps, us, set / us / 1e6);
}

template <int S, int CH, bool WORK = false>
void bulk(uint8_t* base, size_t cap, uint32_t* out, size_t bytes) {
    const size_t nch = bytes / CH, mat = nch * CH;
    const int smem = S * CH + 128, bps = (227 * 1024) / smem > 4 ? 4 : (227 * 1024) / smem;
    cudaFuncSetAttribute(rd_bulk<S, CH, WORK>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    for (int b = 1; b <= bps; ++b) {
        const double us = time_us(ncopies(cap, mat), [&](int i) {
            rd_bulk<S, CH, WORK><<<132 * b, 128, smem>>>(base + i * mat, out, nch);
        });
        printf("bulk%s S %2d CH %5d blocks/SM %d bytes %9zu: %7.2f us  %.3f TB/s\n", WORK ? "+work" : "", S, CH, b, mat, us, mat / us / 1e6);
    }
}

int main() {
    uint8_t* base;
    const size_t cap = (size_t)1 << 30;
    cudaMalloc(&base, cap);
    cudaMemset(base, 1, cap);
    uint32_t* out;
    cudaMalloc(&out, 1 << 20);
    const int shapes[][2] = {{5120, 17408 / 256 * 136}, {34816, 5120 / 256 * 136}, {10240, 5120 / 256 * 136}};
    for (auto& s : shapes) {
        const int M = s[0], nch = (s[1] + 511) / 512;
        plain<1, 0>("row-major U1", base, cap, out, M, nch);
        plain<2, 0>("row-major U2", base, cap, out, M, nch);
        plain<4, 0>("row-major U4", base, cap, out, M, nch);
        plain<1, 1>("round-major U1", base, cap, out, M, nch);
        plain<2, 1>("round-major U2", base, cap, out, M, nch);
        plain<4, 1>("round-major U4", base, cap, out, M, nch);
        plain<2, 2>("linear U2", base, cap, out, M, nch);
        plain<4, 2>("linear U4", base, cap, out, M, nch);
    }
    if (getenv("BULK_ONLY")) {
        for (size_t bytes : {(size_t)34816 * 2720, (size_t)5120 * 9248, (size_t)5120 * 3264}) {
            plain<4, 2>("linear U4", base, cap, out, (int)(bytes / 512 / 32), 32);
            bulk<4, 16384>(base, cap, out, bytes);
            bulk<6, 16384>(base, cap, out, bytes);
            bulk<8, 8192>(base, cap, out, bytes);
            bulk<12, 8192>(base, cap, out, bytes);
            bulk<4, 32768>(base, cap, out, bytes);
            bulk<6, 32768>(base, cap, out, bytes);
            bulk<4, 16384, true>(base, cap, out, bytes);
            bulk<8, 8192, true>(base, cap, out, bytes);
        }
        printf("%s\n", cudaGetErrorString(cudaGetLastError()));
        return 0;
    }
    for (int bps : {16, 10, 7, 5}) {
        iq4<2, 2>(base, cap, out, 17408, 5, bps);
        iq4<5, 2>(base, cap, out, 17408, 5, bps);
        iq4<2, 1>(base, cap, out, 5120, 17, bps);
        iq4<4, 1>(base, cap, out, 5120, 17, bps);
    }
    printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
