// MatMul `y[N, M] = x[N, K] · w[M, K]ᵀ` over every weight type, plus Embed and whole-tensor
// dequantization. One template per path, instantiated per type (quant.h) behind extern "C".
//
// GEMV path (decode, small N): a block of GEMV_WARPS warps, each warp owns one weight row and
// walks it with every lane decoding SUB-element work items (16-byte loads where the format is
// aligned). NT input rows are accumulated per pass over the weight row, so for N <= NT the weights
// are read exactly once; larger N loops over tiles of NT rows (re-reading the row from cache).
//
// Tiled path (prefill): 64 x 64 output tiles, K in steps of 32 elements; the weight tile is
// dequantized into shared memory once per step and shared by all 64 input rows.
#include "quant.h"

constexpr u32 GEMV_WARPS = 4;
constexpr u32 GEMV_THREADS = GEMV_WARPS * WARP;

// Σ w[e] * x[e] over one work item; x is 16-byte aligned when SUB % 4 == 0.
template <u32 SUB>
DEV float dot_sub(const float* w, const float* x) {
    float acc = 0.0f;
    if constexpr (SUB % 4 == 0) {
#pragma unroll
        for (u32 e = 0; e < SUB; e += 4) {
            const f32x4 v = *(const f32x4*)(x + e);
            acc += w[e] * v.x;
            acc += w[e + 1] * v.y;
            acc += w[e + 2] * v.z;
            acc += w[e + 3] * v.w;
        }
    } else {
#pragma unroll
        for (u32 e = 0; e < SUB; ++e) acc += w[e] * x[e];
    }
    return acc;
}

template <class Q, u32 NT>
DEV void gemv(const u8* __restrict__ W, const float* __restrict__ X, float* __restrict__ Y, u32 N,
              u32 K, u32 M, u64 row_bytes) {
    constexpr u32 SPB = Q::QK / Q::SUB;
    const u32 lane = lane_id();
    const u32 m = bid_x() * GEMV_WARPS + tid_x() / WARP;
    if (m >= M) return;  // whole warps leave; there are no block barriers below
    const u8* wrow = W + (u64)m * row_bytes;
    const u32 nsub = K / Q::SUB;
    for (u32 n0 = 0; n0 < N; n0 += NT) {
        float acc[NT];
#pragma unroll
        for (u32 t = 0; t < NT; ++t) acc[t] = 0.0f;
        for (u32 s = lane; s < nsub; s += WARP) {
            float w[Q::SUB];
            Q::deq(wrow + (u64)(s / SPB) * Q::QB, s % SPB, w);
#pragma unroll
            for (u32 t = 0; t < NT; ++t) {
                if (n0 + t < N) acc[t] += dot_sub<Q::SUB>(w, X + (u64)(n0 + t) * K + (u64)s * Q::SUB);
            }
        }
#pragma unroll
        for (u32 t = 0; t < NT; ++t) {
            const float v = warp_sum(acc[t]);
            if (lane == 0 && n0 + t < N) Y[(u64)(n0 + t) * M + m] = v;
        }
    }
}

constexpr u32 MM_T = 64;   // output tile (weight rows and input rows)
constexpr u32 MM_K = 32;   // K step
constexpr u32 MM_THREADS = 256;

template <class Q>
DEV void mm_tiled(const u8* __restrict__ W, const float* __restrict__ X, float* __restrict__ Y, u32 N,
                  u32 K, u32 M, u64 row_bytes) {
    static_assert(MM_K % Q::SUB == 0, "a K step holds whole work items");
    constexpr u32 SPB = Q::QK / Q::SUB;
    constexpr u32 ITEMS_PER_ROW = MM_K / Q::SUB;
    __shared__ float ws[MM_K][MM_T + 1];
    __shared__ float xs[MM_K][MM_T + 1];
    const u32 tid = tid_x();
    const u32 m0 = bid_x() * MM_T, n0 = bid_y() * MM_T;
    const u32 tm = tid % 16, tn = tid / 16;
    const u32 nsub = K / Q::SUB;
    float acc[4][4];
#pragma unroll
    for (u32 i = 0; i < 4; ++i)
#pragma unroll
        for (u32 j = 0; j < 4; ++j) acc[i][j] = 0.0f;

    for (u32 k0 = 0; k0 < K; k0 += MM_K) {
        for (u32 it = tid; it < MM_T * ITEMS_PER_ROW; it += MM_THREADS) {
            const u32 r = it / ITEMS_PER_ROW, c = it % ITEMS_PER_ROW;
            const u32 s = k0 / Q::SUB + c;
            float w[Q::SUB];
            if (m0 + r < M && s < nsub) {
                Q::deq(W + (u64)(m0 + r) * row_bytes + (u64)(s / SPB) * Q::QB, s % SPB, w);
            } else {
#pragma unroll
                for (u32 e = 0; e < Q::SUB; ++e) w[e] = 0.0f;
            }
#pragma unroll
            for (u32 e = 0; e < Q::SUB; ++e) ws[c * Q::SUB + e][r] = w[e];
        }
        for (u32 it = tid; it < MM_T * MM_K; it += MM_THREADS) {
            const u32 r = it / MM_K, k = it % MM_K;
            xs[k][r] = (n0 + r < N && k0 + k < K) ? X[(u64)(n0 + r) * K + k0 + k] : 0.0f;
        }
        sync_block();
#pragma unroll 8
        for (u32 k = 0; k < MM_K; ++k) {
            float a[4], b[4];
#pragma unroll
            for (u32 i = 0; i < 4; ++i) a[i] = ws[k][tm * 4 + i];
#pragma unroll
            for (u32 j = 0; j < 4; ++j) b[j] = xs[k][tn * 4 + j];
#pragma unroll
            for (u32 i = 0; i < 4; ++i)
#pragma unroll
                for (u32 j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        sync_block();
    }
#pragma unroll
    for (u32 j = 0; j < 4; ++j) {
        const u32 n = n0 + tn * 4 + j;
        if (n >= N) continue;
#pragma unroll
        for (u32 i = 0; i < 4; ++i) {
            const u32 m = m0 + tm * 4 + i;
            if (m < M) Y[(u64)n * M + m] = acc[i][j];
        }
    }
}

constexpr u32 EMBED_THREADS = 128;

// out[t, :] = dequant(table row ids[t]); an id outside [0, V) yields NaN (the host checks ids
// that come from inputs before launching).
template <class Q>
DEV void embed(const u8* __restrict__ table, const i32* __restrict__ ids, float* __restrict__ out, u32 D,
               u32 V, u64 row_bytes) {
    constexpr u32 SPB = Q::QK / Q::SUB;
    const u32 t = bid_y();
    const u32 s = bid_x() * EMBED_THREADS + tid_x();
    if (s >= D / Q::SUB) return;
    const i32 id = ids[t];
    float w[Q::SUB];
    if (id >= 0 && (u32)id < V) {
        Q::deq(table + (u64)id * row_bytes + (u64)(s / SPB) * Q::QB, s % SPB, w);
    } else {
#pragma unroll
        for (u32 e = 0; e < Q::SUB; ++e) w[e] = nan_f32();
    }
#pragma unroll
    for (u32 e = 0; e < Q::SUB; ++e) out[(u64)t * D + (u64)s * Q::SUB + e] = w[e];
}

// out = the whole tensor as f32 (a weight used where an op reads plain f32 values).
template <class Q>
DEV void dequant(const u8* __restrict__ src, float* __restrict__ out, u64 items) {
    constexpr u32 SPB = Q::QK / Q::SUB;
    const u64 s = (u64)bid_x() * EMBED_THREADS + tid_x();
    if (s >= items) return;
    float w[Q::SUB];
    Q::deq(src + (s / SPB) * Q::QB, (u32)(s % SPB), w);
#pragma unroll
    for (u32 e = 0; e < Q::SUB; ++e) out[s * Q::SUB + e] = w[e];
}

#define DS_GEMV(name, Q, NT)                                                                       \
    KERNEL(GEMV_THREADS)                                                                           \
    gemv_##name##_##NT(const u8* W, const float* X, float* Y, u32 N, u32 K, u32 M, u64 row_bytes) { \
        gemv<Q, NT>(W, X, Y, N, K, M, row_bytes);                                                  \
    }

#define DS_MATMUL_TYPE(name, Q)                                                                    \
    DS_GEMV(name, Q, 1)                                                                            \
    DS_GEMV(name, Q, 2)                                                                            \
    DS_GEMV(name, Q, 4)                                                                            \
    DS_GEMV(name, Q, 8)                                                                            \
    KERNEL(MM_THREADS)                                                                             \
    mm_##name(const u8* W, const float* X, float* Y, u32 N, u32 K, u32 M, u64 row_bytes) {         \
        mm_tiled<Q>(W, X, Y, N, K, M, row_bytes);                                                  \
    }                                                                                              \
    KERNEL(EMBED_THREADS)                                                                          \
    embed_##name(const u8* table, const i32* ids, float* out, u32 D, u32 V, u64 row_bytes) {       \
        embed<Q>(table, ids, out, D, V, row_bytes);                                                \
    }                                                                                              \
    KERNEL(EMBED_THREADS) dequant_##name(const u8* src, float* out, u64 items) {                   \
        dequant<Q>(src, out, items);                                                               \
    }

DS_FOR_EACH_WTYPE(DS_MATMUL_TYPE)
