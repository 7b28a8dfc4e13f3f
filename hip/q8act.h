// Int8 activations for the qgemv kernels (hip/qmatmul.hip): 32 values → int8 with one f32 scale
// d = max|x| / 127 and the scaled sum d · Σ q (ggml's q8_1). Written by quantize_q8 and, fused,
// by the norm kernels whose output only feeds int8 matmuls (hip/norm.hip), with the same float
// operations in both places so the bits do not depend on which kernel wrote them.
#pragma once
#include "common.h"

// One quantized block: this lane's int8 value (as the float it rounds to), the scale d and the
// sum Σ q (before scaling).
struct Q8Block {
    float qf, d, s;
};

// The calling warp's 32 lanes hold the 32 values of one quantization block (lane i: value i).
DEV Q8Block q8_quantize(float x) {
    const float amax = warp_max(__builtin_fabsf(x));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float qf = __builtin_roundf(x * id);
    return Q8Block{qf, d, warp_sum(qf)};
}

// The calling warp's 32 lanes hold the 32 values of quantization block `b` (lane i: value i).
DEV void q8_store_block(float x, u64 b, i8* __restrict__ XQ, float* __restrict__ XD, float* __restrict__ XS) {
    const u32 lane = lane_id();
    const Q8Block q = q8_quantize(x);
    XQ[b * 32 + lane] = (i8)(i32)q.qf;
    if (lane == 0) {
        XD[b] = q.d;
        XS[b] = q.d * q.s;
    }
}
