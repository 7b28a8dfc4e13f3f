// One rotated value of partial NeoX RoPE (hip/rope.hip): element d < 2·half of a head row, with
// x its value and p its pair partner's (d + half for d < half, else d - half), at position pos.
// Shared by the rope kernel and the fused q/k preparation (hip/norm.hip), so both give the same
// bits: the angle is the same f32 product and sin/cos the same f64 evaluation (common.h).
#pragma once
#include "common.h"

DEV float rope_rotate(float x, float p, u32 d, u32 half, i32 pos, const float* __restrict__ inv_freq, float m) {
    const u32 f = d < half ? d : d - half;
    const float angle = (float)pos * inv_freq[f];
    float s, c;
    ds_sincosf(angle, &s, &c);
    c *= m;
    s *= m;
    return d < half ? x * c - p * s : x * c + p * s;
}
