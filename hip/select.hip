// ArgMax and TopK over the last dimension. The order is the CPU reference's:
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

// ArgMax in two launches of argmax_f32: pass 0 finds the best (value, index) of each
// ARGMAX_CHUNK elements of a row (grid: rows x parts, every thread holding ARGMAX_ITEMS
// independent loads); pass 1 then picks the best of a row's parts. The order is total, so the result is exact.
constexpr u32 ARGMAX_ITEMS = 8;
constexpr u32 ARGMAX_CHUNK = SEL_THREADS * ARGMAX_ITEMS;

// Folds (ov, oi) into (bv, bi) if it ranks first (index NONE = nothing).
DEV void take_best(float ov, u32 oi, float* bv, u32* bi) {
    if (oi != NONE && (*bi == NONE || ranks_before(ov, oi, *bv, *bi))) {
        *bv = ov;
        *bi = oi;
    }
}

// The best of the threads' (bv, bi); every thread gets it.
DEV void block_best(float* bv_io, u32* bi_io) {
    __shared__ float sv[SEL_THREADS / WARP];
    __shared__ u32 si[SEL_THREADS / WARP];
    float bv = *bv_io;
    u32 bi = *bi_io;
#pragma unroll
    for (u32 m = 16; m > 0; m >>= 1) {
        const float ov = shfl_xor(bv, m);
        const u32 oi = (u32)shfl_xor_i32((i32)bi, m);
        take_best(ov, oi, &bv, &bi);
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
    for (u32 k = 1; k < SEL_THREADS / WARP; ++k) take_best(sv[k], si[k], &bv, &bi);
    sync_block();
    *bv_io = bv;
    *bi_io = bi;
}

// Pass 0 (grid rows x parts): the best of each ARGMAX_CHUNK elements into part_v/part_i.
DEV void argmax_part(const float* __restrict__ x, float* __restrict__ part_v, u32* __restrict__ part_i, u32 V,
                     u32 parts) {
    const float* row = x + (u64)bid_x() * V;
    const u32 base = bid_y() * ARGMAX_CHUNK + tid_x();
    float v[ARGMAX_ITEMS];
#pragma unroll
    for (u32 j = 0; j < ARGMAX_ITEMS; ++j) {
        const u32 i = base + j * SEL_THREADS;
        v[j] = i < V ? row[i] : 0.0f;
    }
    float bv = 0.0f;
    u32 bi = NONE;
#pragma unroll
    for (u32 j = 0; j < ARGMAX_ITEMS; ++j) {
        const u32 i = base + j * SEL_THREADS;
        if (i < V) take_best(v[j], i, &bv, &bi);
    }
    block_best(&bv, &bi);
    if (tid_x() == 0) {
        part_v[(u64)bid_x() * parts + bid_y()] = bv;
        part_i[(u64)bid_x() * parts + bid_y()] = bi;
    }
}

// Pass 1 (grid rows): the best of a row's parts into out.
DEV void argmax_final(const float* __restrict__ part_v, const u32* __restrict__ part_i, i32* __restrict__ out,
                      u32 parts) {
    const u64 row = (u64)bid_x() * parts;
    float bv = 0.0f;
    u32 bi = NONE;
    for (u32 p = tid_x(); p < parts; p += SEL_THREADS) take_best(part_v[row + p], part_i[row + p], &bv, &bi);
    block_best(&bv, &bi);
    if (tid_x() == 0) out[bid_x()] = bi == NONE ? 0 : (i32)bi;
}

KERNEL(SEL_THREADS) argmax_f32(const float* __restrict__ x, float* __restrict__ part_v, u32* __restrict__ part_i,
                               i32* __restrict__ out, u32 V, u32 parts, u32 pass) {
    if (pass == 0) {
        argmax_part(x, part_v, part_i, V, parts);
    } else {
        argmax_final(part_v, part_i, out, parts);
    }
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
