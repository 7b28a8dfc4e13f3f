// Read-pattern micro-benchmark (session 32; nvcc -O3 -arch=sm_90 -o rb rb.cu && ./rb on the GPU
// machine): M rows of RB bytes each (a GEMV's weights), one warp per row,
// 16-byte loads, U chunks of 512 bytes in flight per warp. Layouts: 0 row-major (row w at
// w*RB), 1 round-major (chunk c of row w at (c*M + w)*512), 2 linear grid-stride read.
// NCOPY distinct matrices cycled so L2 (50 MB) never holds one from the previous launch.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
template <int U, int LAYOUT>
__global__ void __launch_bounds__(128) rd(const uint4* __restrict__ W, uint32_t* out, int M, int nch) {
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
template <int U, int L>
void bench(const char* name, uint8_t* base, size_t mat, int ncopy, uint32_t* out, int M, int nch) {
    int grid = L == 2 ? 132 * 16 : (M + 3) / 4;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < ncopy; ++i) rd<U, L><<<grid, 128>>>((const uint4*)(base + i * mat), out, M, nch);
    int reps = 4 * ncopy;
    cudaEventRecord(a);
    for (int i = 0; i < reps; ++i) rd<U, L><<<grid, 128>>>((const uint4*)(base + (i % ncopy) * mat), out, M, nch);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    double us = ms * 1000.0 / reps;
    printf("%-28s M %6d bytes/row %6d: %7.2f us  %.3f TB/s\n", name, M, nch * 512, us, mat / us / 1e6);
}
int main() {
    const int shapes[][2] = {{5120, 17408 / 256 * 136}, {34816, 5120 / 256 * 136}, {10240, 5120 / 256 * 136}};
    uint8_t* base;
    size_t cap = (size_t)1 << 30;
    cudaMalloc(&base, cap);
    cudaMemset(base, 1, cap);
    uint32_t* out;
    cudaMalloc(&out, 1 << 20);
    for (auto& s : shapes) {
        int M = s[0], nch = (s[1] + 511) / 512;
        size_t mat = (size_t)M * nch * 512;
        int ncopy = (int)(cap / mat);
        if (ncopy > 8) ncopy = 8;
        bench<1, 0>("row-major U1", base, mat, ncopy, out, M, nch);
        bench<2, 0>("row-major U2", base, mat, ncopy, out, M, nch);
        bench<4, 0>("row-major U4", base, mat, ncopy, out, M, nch);
        bench<1, 1>("round-major U1", base, mat, ncopy, out, M, nch);
        bench<2, 1>("round-major U2", base, mat, ncopy, out, M, nch);
        bench<4, 1>("round-major U4", base, mat, ncopy, out, M, nch);
        bench<2, 2>("linear U2", base, mat, ncopy, out, M, nch);
        bench<4, 2>("linear U4", base, mat, ncopy, out, M, nch);
    }
    cudaError_t e = cudaGetLastError();
    printf("%s\n", cudaGetErrorString(e));
}
