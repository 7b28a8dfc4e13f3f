// Elementwise ops and the last-dimension slice. 1-D grids of ELEM_THREADS threads; every
// thread handles ELEM_PER_THREAD elements spaced a block apart (coalesced).
#include "common.h"

constexpr u32 ELEM_THREADS = 256;
constexpr u32 ELEM_PER_THREAD = 4;

#define DS_ELEMENTWISE(name, expr)                                                                \
    KERNEL(ELEM_THREADS) name(const float* __restrict__ a, const float* __restrict__ b,           \
                              float* __restrict__ y, u64 n) {                                     \
        grid_begin();                                                                             \
        const u64 base = (u64)bid_x() * ELEM_THREADS * ELEM_PER_THREAD + tid_x();                 \
        _Pragma("unroll") for (u32 k = 0; k < ELEM_PER_THREAD; ++k) {                             \
            const u64 i = base + (u64)k * ELEM_THREADS;                                           \
            if (i < n) {                                                                          \
                const float x = a[i], g = b[i];                                                   \
                y[i] = (expr);                                                                    \
            }                                                                                     \
        }                                                                                         \
    }

DS_ELEMENTWISE(add_f32, x + g)
// The attention output gate: x · sigmoid(g).
DS_ELEMENTWISE(sigmoid_mul, x * ds_sigmoid(g))
// The MLP activation: silu(gate) · up (here x = gate, g = up).
DS_ELEMENTWISE(swiglu, ds_silu(x) * g)

// y[r, j] = x[r, offset + j] for rows of `width`, j < len.
KERNEL(ELEM_THREADS) slice_last(const float* __restrict__ x, float* __restrict__ y, u64 n, u32 width, u32 offset,
                                u32 len) {
    grid_begin();
    const u64 base = (u64)bid_x() * ELEM_THREADS * ELEM_PER_THREAD + tid_x();
#pragma unroll
    for (u32 k = 0; k < ELEM_PER_THREAD; ++k) {
        const u64 i = base + (u64)k * ELEM_THREADS;
        if (i < n) {
            const u64 r = i / len, j = i % len;
            y[i] = x[r * width + offset + j];
        }
    }
}

// Fills n floats with v (NaN poisoning in tests, zeroing).
KERNEL(ELEM_THREADS) fill_f32(float* __restrict__ y, u64 n, float v) {
    grid_begin();
    const u64 base = (u64)bid_x() * ELEM_THREADS * ELEM_PER_THREAD + tid_x();
#pragma unroll
    for (u32 k = 0; k < ELEM_PER_THREAD; ++k) {
        const u64 i = base + (u64)k * ELEM_THREADS;
        if (i < n) y[i] = v;
    }
}
