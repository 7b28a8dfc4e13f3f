// Causal depthwise conv + SiLU over T new rows, continuing from a state of the previous K-1
// inputs: x [T, C], w [C, K], state [K-1, C] (oldest row first) -> y [T, C]; the state is
// updated in place to the last K-1 rows of (state ++ x). One thread per channel: it reads its
// whole window before writing its own state column, so there is no race.
#include "conv4.h"

constexpr u32 CONV_THREADS = 128;

// K = 4 (the models' kernel width): the window slides through registers, and the inputs load
// CONV_ROWS rows at a time, each batch's loads issued together (with the weights and state on
// the first), so a call costs about one memory round trip per CONV_ROWS rows. (The generic loop
// below loads inside its dependent loops.) Same products and sums in the same order.
constexpr u32 CONV_ROWS = 8;

DEV void conv_step_k4(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ state,
                      float* __restrict__ y, u32 T, u32 C, u32 c) {
    const float w0 = w[(u64)c * 4], w1 = w[(u64)c * 4 + 1], w2 = w[(u64)c * 4 + 2], w3 = w[(u64)c * 4 + 3];
    float h0 = state[c], h1 = state[(u64)C + c], h2 = state[2 * (u64)C + c];  // oldest first
    for (u32 t0 = 0; t0 < T; t0 += CONV_ROWS) {
        float xr[CONV_ROWS];
#pragma unroll
        for (u32 r = 0; r < CONV_ROWS; ++r) xr[r] = t0 + r < T ? x[(u64)(t0 + r) * C + c] : 0.0f;
#pragma unroll
        for (u32 r = 0; r < CONV_ROWS; ++r) {
            if (t0 + r < T) {
                y[(u64)(t0 + r) * C + c] = conv4_silu(w0, w1, w2, w3, h0, h1, h2, xr[r]);
                h0 = h1;
                h1 = h2;
                h2 = xr[r];
            }
        }
    }
    state[c] = h0;
    state[(u64)C + c] = h1;
    state[2 * (u64)C + c] = h2;
}

KERNEL(CONV_THREADS) conv_step(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ state,
                               float* __restrict__ y, u32 T, u32 C, u32 K) {
    grid_begin();
    const u32 c = bid_x() * CONV_THREADS + tid_x();
    if (c >= C) return;
    if (K == 4) {
        conv_step_k4(x, w, state, y, T, C, c);
        return;
    }
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

// conv_step over a tree of rows (graph op ConvTree): parent [T] (parent[t] < t, or < 0 for the
// state), tokens [R, K-1, C] per-row conv states. Row t's window is its parent's conv state
// (tokens[parent], or the state) then x[t]; its last K-1 rows go to tokens[t]. The state is
// only read. One thread per channel, reading and writing only that channel.
KERNEL(CONV_THREADS) conv_tree(const float* __restrict__ x, const float* __restrict__ w, const i32* __restrict__ parent,
                               const float* __restrict__ state, float* __restrict__ tokens, float* __restrict__ y,
                               u32 T, u32 C, u32 K) {
    grid_begin();
    const u32 c = bid_x() * CONV_THREADS + tid_x();
    if (c >= C) return;
    const u32 H = K - 1;
    for (u32 t = 0; t < T; ++t) {
        const i32 par = parent[t];
        const float* prev = par < 0 ? state : tokens + (u64)par * H * C;
        auto win = [&](u32 i) -> float { return i < H ? prev[(u64)i * C + c] : x[(u64)t * C + c]; };
        float acc = 0.0f;
        for (u32 j = 0; j < K; ++j) acc += w[(u64)c * K + j] * win(j);
        y[(u64)t * C + c] = ds_silu(acc);
        // tokens[t] != tokens[par] (par < t), so the window is intact while it is written.
        for (u32 i = 0; i < H; ++i) tokens[((u64)t * H + i) * C + c] = win(i + 1);
    }
}
