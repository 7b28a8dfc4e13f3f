// MatMul `y[N, M] = x[N, K] · w[M, K]ᵀ` over every weight type, plus Embed and whole-tensor
// dequantization. One template per path, instantiated per type (quant.h) behind extern "C".
//
// GEMV path (decode, small N): a block of GEMV_WARPS warps owns R consecutive weight rows and
// splits K between all its threads (thread t takes work items t, t + GEMV_THREADS, ...; one work
// item is SUB contiguous elements of a row). Each thread loads the activations of its work item
// once and applies them to all R rows (registers), so activation traffic is 1/R of one-row-per-warp;
// the per-thread partial sums are reduced per warp (shuffles) and then across the block (shared
// memory). NT input rows are accumulated per pass over the weights, so for N <= NT the weights
// are read exactly once; larger N loops over tiles of NT rows (re-reading the rows from cache).
//
// Tiled path (prefill): 64 x 64 output tiles, K in steps of 32 elements; the weight tile is
// dequantized into shared memory once per step and shared by all 64 input rows.
#include "quant.h"

constexpr u32 GEMV_WARPS = 4;
constexpr u32 GEMV_THREADS = GEMV_WARPS * WARP;
// Weight rows per block for NT input rows (mirrored by kernels::gemv_rows).
constexpr u32 gemv_rows(u32 nt) { return nt == 1 ? 4 : 2; }

// Σ w[e] * x[e] over one work item, in four interleaved partial sums (latency, not order).
template <u32 SUB>
DEV float dot_sub(const float* w, const float* x) {
    if constexpr (SUB >= 4) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll
        for (u32 e = 0; e < SUB; e += 4) {
            a0 += w[e] * x[e];
            a1 += w[e + 1] * x[e + 1];
            a2 += w[e + 2] * x[e + 2];
            a3 += w[e + 3] * x[e + 3];
        }
        return (a0 + a1) + (a2 + a3);
    } else {
        float acc = 0.0f;
#pragma unroll
        for (u32 e = 0; e < SUB; ++e) acc += w[e] * x[e];
        return acc;
    }
}

// The SUB activations of one work item (16-byte loads when SUB % 4 == 0: K is then a multiple
// of 4 and the item starts at a multiple of 4).
template <u32 SUB>
DEV void load_x(const float* __restrict__ x, float* v) {
    if constexpr (SUB % 4 == 0) {
#pragma unroll
        for (u32 e = 0; e < SUB; e += 4) {
            const f32x4 q = *(const f32x4*)(x + e);
            v[e] = q.x;
            v[e + 1] = q.y;
            v[e + 2] = q.z;
            v[e + 3] = q.w;
        }
    } else {
#pragma unroll
        for (u32 e = 0; e < SUB; ++e) v[e] = x[e];
    }
}

template <class Q, u32 NT>
DEV void gemv(const u8* __restrict__ W, const float* __restrict__ X, float* __restrict__ Y, u32 N,
              u32 K, u32 M, u64 row_bytes) {
    constexpr u32 R = gemv_rows(NT);
    constexpr u32 SUB = Q::SUB;
    constexpr u32 SPB = Q::QK / SUB;
    // Hold the activations of all NT rows in registers and decode one weight row at a time, or
    // hold all R decoded weight rows and load one activation row at a time: whichever is fewer.
    constexpr bool HOLD_X = NT <= R;
    __shared__ float red[GEMV_WARPS][R * NT];
    const u32 tid = tid_x(), lane = lane_id(), warp = tid / WARP;
    const u32 m0 = bid_x() * R;
    const u32 nsub = K / SUB;
    // Rows past M (last block) decode row M - 1 again and are never written: loads stay
    // unconditional so they can all be issued up front.
    u64 roff[R];
#pragma unroll
    for (u32 r = 0; r < R; ++r) roff[r] = wl_row<Q>(m0 + r < M ? m0 + r : M - 1, K, row_bytes);
    for (u32 n0 = 0; n0 < N; n0 += NT) {
        const float* xr[NT];
#pragma unroll
        for (u32 t = 0; t < NT; ++t) xr[t] = X + (u64)(n0 + t < N ? n0 + t : N - 1) * K;
        float acc[R][NT];
#pragma unroll
        for (u32 r = 0; r < R; ++r)
#pragma unroll
            for (u32 t = 0; t < NT; ++t) acc[r][t] = 0.0f;
        for (u32 s = tid; s < nsub; s += GEMV_THREADS) {
            const u64 boff = wl_block<Q>(s / SPB);
            const u32 sub = s % SPB;
            const u64 xoff = (u64)s * SUB;
            if constexpr (HOLD_X) {
                float x[NT][SUB];
#pragma unroll
                for (u32 t = 0; t < NT; ++t) load_x<SUB>(xr[t] + xoff, x[t]);
#pragma unroll
                for (u32 r = 0; r < R; ++r) {
                    float w[SUB];
                    Q::deq(W + roff[r] + boff, sub, w);
#pragma unroll
                    for (u32 t = 0; t < NT; ++t) acc[r][t] += dot_sub<SUB>(w, x[t]);
                }
            } else {
                float w[R][SUB];
#pragma unroll
                for (u32 r = 0; r < R; ++r) Q::deq(W + roff[r] + boff, sub, w[r]);
#pragma unroll
                for (u32 t = 0; t < NT; ++t) {
                    float x[SUB];
                    load_x<SUB>(xr[t] + xoff, x);
#pragma unroll
                    for (u32 r = 0; r < R; ++r) acc[r][t] += dot_sub<SUB>(w[r], x);
                }
            }
        }
#pragma unroll
        for (u32 r = 0; r < R; ++r)
#pragma unroll
            for (u32 t = 0; t < NT; ++t) {
                const float v = warp_sum(acc[r][t]);
                if (lane == 0) red[warp][r * NT + t] = v;
            }
        sync_block();
        if (tid < R * NT) {
            const u32 r = tid / NT, t = tid % NT;
            float v = 0.0f;
#pragma unroll
            for (u32 w = 0; w < GEMV_WARPS; ++w) v += red[w][tid];
            if (m0 + r < M && n0 + t < N) Y[(u64)(n0 + t) * M + m0 + r] = v;
        }
        sync_block();
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
                Q::deq(W + wl_row<Q>(m0 + r, K, row_bytes) + wl_block<Q>(s / SPB), s % SPB, w);
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
        Q::deq(table + wl_row<Q>(id, D, row_bytes) + wl_block<Q>(s / SPB), s % SPB, w);
    } else {
#pragma unroll
        for (u32 e = 0; e < Q::SUB; ++e) w[e] = nan_f32();
    }
#pragma unroll
    for (u32 e = 0; e < Q::SUB; ++e) out[(u64)t * D + (u64)s * Q::SUB + e] = w[e];
}

// out = the whole tensor as f32 (a weight used where an op reads plain f32 values): `items` work
// items, rows of K values (row_bytes apart where row-major; hip/quant.h, wl_row).
template <class Q>
DEV void dequant(const u8* __restrict__ src, float* __restrict__ out, u64 items, u32 K, u64 row_bytes) {
    constexpr u32 SPB = Q::QK / Q::SUB;
    const u64 s = (u64)bid_x() * EMBED_THREADS + tid_x();
    if (s >= items) return;
    const u32 ipr = K / Q::SUB;  // work items per row
    const u32 i = (u32)(s % ipr);
    float w[Q::SUB];
    Q::deq(src + wl_row<Q>((u32)(s / ipr), K, row_bytes) + wl_block<Q>(i / SPB), i % SPB, w);
#pragma unroll
    for (u32 e = 0; e < Q::SUB; ++e) out[s * Q::SUB + e] = w[e];
}

#define DS_GEMV(name, Q, NT)                                                                       \
    KERNEL(GEMV_THREADS)                                                                           \
    gemv_##name##_##NT(const u8* W, const float* X, float* Y, u32 N, u32 K, u32 M, u64 row_bytes) { \
        grid_begin();                                                                               \
        gemv<Q, NT>(W, X, Y, N, K, M, row_bytes);                                                  \
    }

#define DS_MATMUL_TYPE(name, Q)                                                                    \
    DS_GEMV(name, Q, 1)                                                                            \
    DS_GEMV(name, Q, 2)                                                                            \
    DS_GEMV(name, Q, 4)                                                                            \
    DS_GEMV(name, Q, 8)                                                                            \
    KERNEL(MM_THREADS)                                                                             \
    mm_##name(const u8* W, const float* X, float* Y, u32 N, u32 K, u32 M, u64 row_bytes) {         \
        grid_begin();                                                                              \
        mm_tiled<Q>(W, X, Y, N, K, M, row_bytes);                                                  \
    }                                                                                              \
    KERNEL(EMBED_THREADS)                                                                          \
    embed_##name(const u8* table, const i32* ids, float* out, u32 D, u32 V, u64 row_bytes) {       \
        grid_begin();                                                                              \
        embed<Q>(table, ids, out, D, V, row_bytes);                                                \
    }                                                                                              \
    KERNEL(EMBED_THREADS) dequant_##name(const u8* src, float* out, u64 items, u32 K, u64 row_bytes) { \
        grid_begin();                                                                              \
        dequant<Q>(src, out, items, K, row_bytes);                                                 \
    }

DS_FOR_EACH_WTYPE(DS_MATMUL_TYPE)
