// Partial NeoX rotary embedding on x [T, H, D]: dims [0, rot) rotate in pairs (i, i + rot/2)
// by pos[t] · inv_freq[i]; the rest pass through; cos and sin are scaled by the attention factor
// m (YaRN; 1 otherwise) in f32 as HF does. inv_freq is computed on the host exactly as the CPU
// reference computes it (YaRN included), the angle is the same f32 product, and sin/cos are evaluated
// in f64 (common.h), so results match the reference to an ulp.
#include "rope.h"

constexpr u32 ROPE_THREADS = 256;

KERNEL(ROPE_THREADS) rope(const float* __restrict__ x, const i32* __restrict__ pos, const float* __restrict__ inv_freq,
                          float* __restrict__ y, u64 n, u32 HD, u32 D, u32 half, float m) {
    grid_begin();
    const u64 i = (u64)bid_x() * ROPE_THREADS + tid_x();
    if (i >= n) return;
    const u32 d = (u32)(i % D);
    const u64 t = i / HD;
    if (d >= 2 * half) {
        y[i] = x[i];
        return;
    }
    y[i] = rope_rotate(x[i], d < half ? x[i + half] : x[i - half], d, half, pos[t], inv_freq, m);
}
