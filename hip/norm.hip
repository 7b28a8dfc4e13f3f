// Normalisations over the last dimension, one block per row:
//   rms_norm       y = (x · r) · w,              r = 1 / sqrt(mean(x²) + eps)
//   add_rms_norm   s = x + res; y = rms_norm(s)  (two outputs)
//   gated_rms_norm y = ((x · r) · w) · silu(z)   per group of D
//   l2_norm        y = (x · 1/sqrt(Σx² + eps)) · scale
// Products in the CPU reference's order (normalise, then weight, then gate).
//
// The `_q8` variants also write y as int8 activations for the qgemv kernels (hip/q8act.h), which
// saves the separate quantize_q8 launch before every projection. They need D % 32 == 0: each
// warp then holds one whole 32-value quantization block per pass of the output loop.
#include "q8act.h"

constexpr u32 NORM_THREADS = 256;
// Values per thread held in registers: rows of up to NORM_THREADS · NORM_NV values are read once,
// with every load of a thread issued before the first use. (A strided loop that re-reads the
// row waited one memory round trip per 256 values: ~20 µs for a 5120-wide row on the H200.)
// Wider rows take the loop. Both forms add the same values in the same order, bit for bit.
constexpr u32 NORM_NV = 32;

// Loads this thread's values i = tid + j · NORM_THREADS (j < NORM_NV, zero past D) of f(i), and
// returns their sum of squares accumulated in increasing i (the loop form's order: the extra
// terms are +0.0f).
template <class F>
DEV float norm_load(F f, u32 D, float (&v)[NORM_NV]) {
#pragma unroll
    for (u32 j = 0; j < NORM_NV; ++j) {
        const u32 i = tid_x() + j * NORM_THREADS;
        v[j] = i < D ? f(i) : 0.0f;
    }
    float ss = 0.0f;
#pragma unroll
    for (u32 j = 0; j < NORM_NV; ++j) ss += v[j] * v[j];
    return ss;
}

// Stores y[row + i] and, with Q8, its quantization block (the whole warp calls this together).
template <bool Q8>
DEV void norm_out(float v, u64 at, float* __restrict__ y, i8* XQ, float* XD, float* XS) {
    y[at] = v;
    if (Q8) q8_store_block(v, at / 32, XQ, XD, XS);
}

// Writes this thread's outputs norm(v[j] · r, i) of the values norm_load gave it (i < D).
template <bool Q8, class F>
DEV void norm_store(const float (&v)[NORM_NV], float r, u32 D, u64 row, F norm, float* __restrict__ y, i8* XQ,
                    float* XD, float* XS) {
#pragma unroll
    for (u32 j = 0; j < NORM_NV; ++j) {
        const u32 i = tid_x() + j * NORM_THREADS;
        if (i < D) norm_out<Q8>(norm(v[j] * r, i), row + i, y, XQ, XD, XS);
    }
}

template <bool Q8>
DEV void rms_norm_impl(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, i8* XQ,
                       float* XD, float* XS, u32 D, float eps) {
    __shared__ float buf[NORM_THREADS / WARP];
    const u64 row = (u64)bid_x() * D;
    if (D <= NORM_THREADS * NORM_NV) {
        float v[NORM_NV];
        float ss = norm_load([&](u32 i) { return x[row + i]; }, D, v);
        ss = block_sum<NORM_THREADS>(ss, buf);
        const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
        norm_store<Q8>(v, r, D, row, [&](float n, u32 i) { return n * w[i]; }, y, XQ, XD, XS);
        return;
    }
    float ss = 0.0f;
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) ss += x[row + i] * x[row + i];
    ss = block_sum<NORM_THREADS>(ss, buf);
    const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) norm_out<Q8>((x[row + i] * r) * w[i], row + i, y, XQ, XD, XS);
}

template <bool Q8>
DEV void add_rms_norm_impl(const float* __restrict__ x, const float* __restrict__ res, const float* __restrict__ w,
                           float* __restrict__ sum, float* __restrict__ y, i8* XQ, float* XD, float* XS, u32 D,
                           float eps) {
    __shared__ float buf[NORM_THREADS / WARP];
    const u64 row = (u64)bid_x() * D;
    if (D <= NORM_THREADS * NORM_NV) {
        float v[NORM_NV];
        float ss = norm_load([&](u32 i) { return x[row + i] + res[row + i]; }, D, v);
#pragma unroll
        for (u32 j = 0; j < NORM_NV; ++j) {
            const u32 i = tid_x() + j * NORM_THREADS;
            if (i < D) sum[row + i] = v[j];
        }
        ss = block_sum<NORM_THREADS>(ss, buf);
        const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
        norm_store<Q8>(v, r, D, row, [&](float n, u32 i) { return n * w[i]; }, y, XQ, XD, XS);
        return;
    }
    float ss = 0.0f;
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) {
        const float s = x[row + i] + res[row + i];
        sum[row + i] = s;
        ss += s * s;
    }
    ss = block_sum<NORM_THREADS>(ss, buf);
    const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
    // Each thread re-reads only the elements it wrote itself.
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) norm_out<Q8>((sum[row + i] * r) * w[i], row + i, y, XQ, XD, XS);
}

template <bool Q8>
DEV void gated_rms_norm_impl(const float* __restrict__ x, const float* __restrict__ z, const float* __restrict__ w,
                             float* __restrict__ y, i8* XQ, float* XD, float* XS, u32 D, float eps) {
    __shared__ float buf[NORM_THREADS / WARP];
    const u64 row = (u64)bid_x() * D;
    if (D <= NORM_THREADS * NORM_NV) {
        float v[NORM_NV];
        float ss = norm_load([&](u32 i) { return x[row + i]; }, D, v);
        ss = block_sum<NORM_THREADS>(ss, buf);
        const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
        norm_store<Q8>(
            v, r, D, row, [&](float n, u32 i) { return (n * w[i]) * ds_silu(z[row + i]); }, y, XQ, XD, XS);
        return;
    }
    float ss = 0.0f;
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) ss += x[row + i] * x[row + i];
    ss = block_sum<NORM_THREADS>(ss, buf);
    const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
    for (u32 i = tid_x(); i < D; i += NORM_THREADS)
        norm_out<Q8>(((x[row + i] * r) * w[i]) * ds_silu(z[row + i]), row + i, y, XQ, XD, XS);
}

KERNEL(NORM_THREADS) rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, u32 D,
                              float eps) {
    rms_norm_impl<false>(x, w, y, nullptr, nullptr, nullptr, D, eps);
}
KERNEL(NORM_THREADS)
rms_norm_q8(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, i8* XQ, float* XD,
            float* XS, u32 D, float eps) {
    rms_norm_impl<true>(x, w, y, XQ, XD, XS, D, eps);
}

KERNEL(NORM_THREADS) add_rms_norm(const float* __restrict__ x, const float* __restrict__ res,
                                  const float* __restrict__ w, float* __restrict__ sum, float* __restrict__ y, u32 D,
                                  float eps) {
    add_rms_norm_impl<false>(x, res, w, sum, y, nullptr, nullptr, nullptr, D, eps);
}
KERNEL(NORM_THREADS)
add_rms_norm_q8(const float* __restrict__ x, const float* __restrict__ res, const float* __restrict__ w,
                float* __restrict__ sum, float* __restrict__ y, i8* XQ, float* XD, float* XS, u32 D, float eps) {
    add_rms_norm_impl<true>(x, res, w, sum, y, XQ, XD, XS, D, eps);
}

KERNEL(NORM_THREADS) gated_rms_norm(const float* __restrict__ x, const float* __restrict__ z,
                                    const float* __restrict__ w, float* __restrict__ y, u32 D, float eps) {
    gated_rms_norm_impl<false>(x, z, w, y, nullptr, nullptr, nullptr, D, eps);
}
KERNEL(NORM_THREADS)
gated_rms_norm_q8(const float* __restrict__ x, const float* __restrict__ z, const float* __restrict__ w,
                  float* __restrict__ y, i8* XQ, float* XD, float* XS, u32 D, float eps) {
    gated_rms_norm_impl<true>(x, z, w, y, XQ, XD, XS, D, eps);
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
