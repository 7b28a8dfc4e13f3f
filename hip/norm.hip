// Normalisations over the last dimension, one block per row:
//   rms_norm       y = (x · r) · w,              r = 1 / sqrt(mean(x²) + eps)
//   add_rms_norm   s = x + res; y = rms_norm(s)  (two outputs)
//   gated_rms_norm y = ((x · r) · w) · silu(z)   per group of D
//   l2_norm        y = (x · 1/sqrt(Σx² + eps)) · scale
// Products in the CPU reference's order (normalise, then weight, then gate).
#include "common.h"

constexpr u32 NORM_THREADS = 256;

KERNEL(NORM_THREADS) rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, u32 D,
                              float eps) {
    __shared__ float buf[NORM_THREADS / WARP];
    const u64 row = (u64)bid_x() * D;
    float ss = 0.0f;
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) ss += x[row + i] * x[row + i];
    ss = block_sum<NORM_THREADS>(ss, buf);
    const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) y[row + i] = (x[row + i] * r) * w[i];
}

KERNEL(NORM_THREADS) add_rms_norm(const float* __restrict__ x, const float* __restrict__ res,
                                  const float* __restrict__ w, float* __restrict__ sum, float* __restrict__ y, u32 D,
                                  float eps) {
    __shared__ float buf[NORM_THREADS / WARP];
    const u64 row = (u64)bid_x() * D;
    float ss = 0.0f;
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) {
        const float s = x[row + i] + res[row + i];
        sum[row + i] = s;
        ss += s * s;
    }
    ss = block_sum<NORM_THREADS>(ss, buf);
    const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
    // Each thread re-reads only the elements it wrote itself.
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) y[row + i] = (sum[row + i] * r) * w[i];
}

KERNEL(NORM_THREADS) gated_rms_norm(const float* __restrict__ x, const float* __restrict__ z,
                                    const float* __restrict__ w, float* __restrict__ y, u32 D, float eps) {
    __shared__ float buf[NORM_THREADS / WARP];
    const u64 row = (u64)bid_x() * D;
    float ss = 0.0f;
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) ss += x[row + i] * x[row + i];
    ss = block_sum<NORM_THREADS>(ss, buf);
    const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) y[row + i] = ((x[row + i] * r) * w[i]) * ds_silu(z[row + i]);
}

KERNEL(NORM_THREADS) l2_norm(const float* __restrict__ x, float* __restrict__ y, u32 D, float eps, float scale) {
    __shared__ float buf[NORM_THREADS / WARP];
    const u64 row = (u64)bid_x() * D;
    float ss = 0.0f;
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) ss += x[row + i] * x[row + i];
    ss = block_sum<NORM_THREADS>(ss, buf);
    const float r = 1.0f / ds_sqrt(ss + eps);
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) y[row + i] = (x[row + i] * r) * scale;
}
