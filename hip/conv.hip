// Causal depthwise conv + SiLU over T new rows, continuing from a state of the previous K-1
// inputs: x [T, C], w [C, K], state [K-1, C] (oldest row first) -> y [T, C]; the state is
// updated in place to the last K-1 rows of (state ++ x). One thread per channel: it reads its
// whole window before writing its own state column, so there is no race.
#include "common.h"

constexpr u32 CONV_THREADS = 128;

KERNEL(CONV_THREADS) conv_step(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ state,
                               float* __restrict__ y, u32 T, u32 C, u32 K) {
    const u32 c = bid_x() * CONV_THREADS + tid_x();
    if (c >= C) return;
    const u32 H = K - 1;  // history rows
    // xin(i) = row i of (state ++ x) for channel c.
    auto xin = [&](u32 i) -> float { return i < H ? state[(u64)i * C + c] : x[(u64)(i - H) * C + c]; };
    for (u32 t = 0; t < T; ++t) {
        float acc = 0.0f;
        for (u32 j = 0; j < K; ++j) acc += w[(u64)c * K + j] * xin(t + j);
        y[(u64)t * C + c] = ds_silu(acc);
    }
    // New state: rows T .. T + H of xin. Row T + i reads state row T + i (> i) or x, so writing
    // state rows in increasing order never overwrites a row still to be read.
    for (u32 i = 0; i < H; ++i) state[(u64)i * C + c] = xin(T + i);
}
