// DFlash2 ops (drafters.md §4).
// dyn_conv: grouped dynamic causal conv along block positions (graph op DynConv), one thread per
//   (row i, channel c): y[i, c] = sum over t < K, t <= i mod block of
//   (base[side, t, c] + dyn[i, (side*K + t)*G + c / group]) * x[i - t, c];
//   dyn_conv_q8[f]: the same, also writing its output as int8 activations.
// selector_walk: the candidate-selector greedy walk (graph op SelectorWalk), one block per
//   sequence; a warp scores a candidate of the current row given the previous row's choice,
//   then every thread finds the first maximum in shared memory (the CPU reference's order).
#include "common.h"
#include "q8act.h"

constexpr u32 DYN_THREADS = 256;

// Output (row i, channel c) of the conv (see the file's header).
DEV float dyn_conv_value(const float* __restrict__ x, const float* __restrict__ base, const float* __restrict__ dyn,
                         u32 i, u32 c, u32 C, u32 K, u32 side, u32 block, u32 group, u32 G, u32 dyn_width) {
    const u32 in_block = i % block + 1;
    const u32 taps = K < in_block ? K : in_block;
    const u32 g = c / group;
    float acc = 0.0f;
    for (u32 t = 0; t < taps; ++t) {
        const u32 st = side * K + t;
        const float coef = base[(u64)st * C + c] + dyn[(u64)i * dyn_width + (u64)st * G + g];
        acc += coef * x[(u64)(i - t) * C + c];
    }
    return acc;
}

KERNEL(DYN_THREADS) dyn_conv(const float* __restrict__ x, const float* __restrict__ base,
                             const float* __restrict__ dyn, float* __restrict__ y, u64 total, u32 C, u32 K,
                             u32 side, u32 block, u32 group, u32 G, u32 dyn_width) {
    grid_begin();
    const u64 e = (u64)bid_x() * DYN_THREADS + tid_x();
    if (e >= total) return;
    y[e] = dyn_conv_value(x, base, dyn, (u32)(e / C), (u32)(e % C), C, K, side, block, group, G, dyn_width);
}

// dyn_conv_q8 / dyn_conv_q8f: dyn_conv over `rows` rows whose output also goes out as the int8
// activations of the matmul it feeds (hip/q8act.h), so that matmul needs no quantize launch
// (the DFlash2 drafter: the convs before q/k/v and before gate/up, 10 launches a step). C % 32
// == 0, so a warp holds one 32-value block of one row. The plain rows XQ/XD/XS as quantize_q8
// writes them and, with F, the fragment-ordered copy as qmma_quantize writes it (rows rounded up
// to 8, the padding rows zeros). The values are those kernels' on the same floats.
template <bool F>
DEV void dyn_conv_q8_impl(const float* __restrict__ x, const float* __restrict__ base, const float* __restrict__ dyn,
                          float* __restrict__ y, i8* __restrict__ XQ, float* __restrict__ XD, float* __restrict__ XS,
                          i8* __restrict__ XQF, float* __restrict__ XDF, float* __restrict__ XSF, u32 rows, u32 C,
                          u32 K, u32 side, u32 block, u32 group, u32 G, u32 dyn_width) {
    const u64 e = (u64)bid_x() * DYN_THREADS + tid_x();
    const u32 padded = F ? (rows + 7) / 8 * 8 : rows;
    if (e >= (u64)padded * C) return;  // whole warps
    const u32 i = (u32)(e / C), c = (u32)(e % C);
    float v = 0.0f;
    if (i < rows) {
        v = dyn_conv_value(x, base, dyn, i, c, C, K, side, block, group, G, dyn_width);
        y[e] = v;
    }
    q8_store_rows<F>(v, i, c / 32, C / 32, rows, XQ, XD, XS, XQF, XDF, XSF);
}

#define DS_DYN_CONV_Q8(SFX, F)                                                                               \
    KERNEL(DYN_THREADS)                                                                                      \
    dyn_conv_q8##SFX(const float* __restrict__ x, const float* __restrict__ base, const float* __restrict__ dyn, \
                     float* __restrict__ y, i8* __restrict__ XQ, float* __restrict__ XD, float* __restrict__ XS,   \
                     i8* __restrict__ XQF, float* __restrict__ XDF, float* __restrict__ XSF, u32 rows, u32 C, u32 K, \
                     u32 side, u32 block, u32 group, u32 G, u32 dyn_width) {                                    \
        grid_begin();                                                                                        \
        dyn_conv_q8_impl<F>(x, base, dyn, y, XQ, XD, XS, XQF, XDF, XSF, rows, C, K, side, block, group, G,     \
                            dyn_width);                                                                      \
    }
DS_DYN_CONV_Q8(, false)
DS_DYN_CONV_Q8(f, true)

constexpr u32 WALK_WARPS = 16;
constexpr u32 WALK_THREADS = WALK_WARPS * WARP;  // mirrored by lower.rs (SelectorWalk)

// Warp w scores candidates w, w + WALK_WARPS, ... (k <= 64): its lanes split the rank r and add
// their partial sums with warp_sum. (The previous kernel gave each candidate one thread and a
// serial loop over r = 256 strided loads: 82 µs a DFlash2 step on the H200, for 7 rows × 16
// candidates × 256 values.) The order of the sum differs from the CPU reference's, as the serial
// loop's did; the tests compare scores to a tolerance and the tokens exactly.
KERNEL(WALK_THREADS) selector_walk(const float* __restrict__ unary, const i32* __restrict__ cand,
                                   const float* __restrict__ hp, const float* __restrict__ succ,
                                   const float* __restrict__ pred, const float* __restrict__ seed,
                                   i32* __restrict__ tokens, float* __restrict__ scores, u32 rows, u32 k,
                                   u32 r) {
    grid_begin();
    __shared__ float sc[64];
    const u32 n = bid_x(), lane = lane_id(), w = tid_x() / WARP;
    const float* prev = seed + (u64)n * r;
    for (u32 l = 0; l < rows; ++l) {
        const u64 m = (u64)n * rows + l;
        const float* h_row = hp + m * r;
        for (u32 c = w; c < k; c += WALK_WARPS) {
            const float* s_row = succ + (m * k + c) * r;
            float acc = 0.0f;
            for (u32 j = lane; j < r; j += WARP) acc += prev[j] * h_row[j] * s_row[j];
            acc = warp_sum(acc);
            if (lane == 0) {
                const float s = unary[m * k + c] + acc;
                sc[c] = s;
                scores[m * k + c] = s;
            }
        }
        sync_block();
        // The first maximum (a NaN never replaces the best so far), as the CPU reference.
        u32 best = 0;
        for (u32 c = 1; c < k; ++c)
            if (sc[c] > sc[best]) best = c;
        if (tid_x() == 0) tokens[m] = cand[m * k + best];
        prev = pred + (m * k + best) * r;
        sync_block();
    }
}
