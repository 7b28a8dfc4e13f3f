// ArgMax and TopK over the last dimension, one block per row. The order is the CPU reference's:
// larger first, NaN above every number, -0.0 == +0.0, equal values in index order. ArgMax is
// the first element of that order; TopK takes k passes, pass i finding the best element that
// ranks after the one pass i-1 found (the order is strict and total, so this is exact).
#include "common.h"

constexpr u32 SEL_THREADS = 256;

// (va, ia) ranks before (vb, ib).
DEV bool ranks_before(float va, u32 ia, float vb, u32 ib) {
    const bool na = ds_isnan(va), nb = ds_isnan(vb);
    if (na != nb) return na;
    if (!na && va != vb) return va > vb;
    return ia < ib;
}

constexpr u32 NONE = 0xffffffffu;

// The best (value, index) of the row that ranks after (pv, pi) (everything if pi == NONE);
// index NONE if there is none. Every thread gets the result.
DEV void best_after(const float* __restrict__ x, u32 V, float pv, u32 pi, float* bv_out, u32* bi_out) {
    __shared__ float sv[SEL_THREADS / WARP];
    __shared__ u32 si[SEL_THREADS / WARP];
    float bv = 0.0f;
    u32 bi = NONE;
    for (u32 i = tid_x(); i < V; i += SEL_THREADS) {
        const float v = x[i];
        if (pi != NONE && !ranks_before(pv, pi, v, i)) continue;
        if (bi == NONE || ranks_before(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
#pragma unroll
    for (u32 m = 16; m > 0; m >>= 1) {
        const float ov = shfl_xor(bv, m);
        const u32 oi = (u32)shfl_xor_i32((i32)bi, m);
        if (oi != NONE && (bi == NONE || ranks_before(ov, oi, bv, bi))) {
            bv = ov;
            bi = oi;
        }
    }
    const u32 w = tid_x() / WARP;
    if (lane_id() == 0) {
        sv[w] = bv;
        si[w] = bi;
    }
    sync_block();
    bv = sv[0];
    bi = si[0];
#pragma unroll
    for (u32 k = 1; k < SEL_THREADS / WARP; ++k) {
        if (si[k] != NONE && (bi == NONE || ranks_before(sv[k], si[k], bv, bi))) {
            bv = sv[k];
            bi = si[k];
        }
    }
    sync_block();
    *bv_out = bv;
    *bi_out = bi;
}

KERNEL(SEL_THREADS) argmax_f32(const float* __restrict__ x, i32* __restrict__ out, u32 V) {
    float bv;
    u32 bi;
    best_after(x + (u64)bid_x() * V, V, 0.0f, NONE, &bv, &bi);
    if (tid_x() == 0) out[bid_x()] = bi == NONE ? 0 : (i32)bi;
}

KERNEL(SEL_THREADS) top_k_f32(const float* __restrict__ x, float* __restrict__ values, i32* __restrict__ indices,
                              u32 V, u32 k) {
    const float* row = x + (u64)bid_x() * V;
    float pv = 0.0f;
    u32 pi = NONE;
    for (u32 r = 0; r < k; ++r) {
        float bv;
        u32 bi;
        best_after(row, V, pv, pi, &bv, &bi);
        if (tid_x() == 0) {
            values[(u64)bid_x() * k + r] = bv;
            indices[(u64)bid_x() * k + r] = (i32)bi;
        }
        pv = bv;
        pi = bi;
    }
}
