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

// The fragment order of int8 activations that hip/qmma.hip's `f`/`p`/`q` kernels read (see that
// file's header); here because other kernels that quantize their output write it too.
// The k order of a quad: lane t of a quad holds word qm_pos(t) of each half (see hip/qmma.hip).
DEV u32 qm_pos(u32 t) { return 2 * (t & 1) + t / 2; }
// Fragment order of the activations (XF, see hip/qmma.hip's header): the offset of value e (0 .. 31) of an
// item within its row's 32 bytes. Lane t reads bytes 8t .. 8t + 7: word qm_pos(t) of half 0,
// then of half 1; word p of a half is read by lane qm_pos(p) (qm_pos is its own inverse).
DEV u32 qm_frag_byte(u32 e) {
    const u32 w = e / 4;
    return 8 * qm_pos(w % 4) + 4 * (w / 4) + e % 4;
}
// The index of (input row n, item s) among the fragment-ordered rows: groups of 8 input rows,
// then items, then the row within the group. XQF holds 32 bytes at each index, XDF/XSF one float.
DEV u64 qm_frag_index(u32 n, u32 s, u32 nb) { return ((u64)(n / 8) * nb + s) * 8 + n % 8; }

// The calling warp's 32 lanes hold block s (of nb per row) of row n: quantized, it goes to the
// fragment-ordered copy XQF/XDF/XSF where F (rows up to N rounded up to 8; past N the caller
// passes x = 0, so those are zeros) and to the plain rows XQ/XD/XS where n < N.
template <bool F>
DEV void q8_store_rows(float x, u32 n, u32 s, u32 nb, u32 N, i8* __restrict__ XQ, float* __restrict__ XD,
                       float* __restrict__ XS, i8* __restrict__ XQF, float* __restrict__ XDF,
                       float* __restrict__ XSF) {
    const u32 lane = lane_id();
    const Q8Block q = q8_quantize(x);
    if constexpr (F) {
        const u64 f = qm_frag_index(n, s, nb);
        XQF[f * 32 + qm_frag_byte(lane)] = (i8)(i32)q.qf;
        if (lane == 0) XDF[f] = q.d, XSF[f] = q.d * q.s;
    }
    if (n >= N) return;
    const u64 b = (u64)n * nb + s;
    XQ[b * 32 + lane] = (i8)(i32)q.qf;
    if (lane == 0) XD[b] = q.d, XS[b] = q.d * q.s;
}

// The float combine of one 32-value item into a partial sum, shared by the dp4a kernel
// (hip/qmatmul.hip) and the matrix-core tile (hip/qmma.hip): the same operations on the same
// values in both is what makes a row of an N-row matmul equal the 1-row result bit for bit.
// sum0 / sum1: the exact integer sums of values 0..15 / 16..31 as floats; s0 / s1 their weight
// scales; xd the activation scale; m · xs the block minimum's term (NOMIN: m = 0, term skipped).
//
// SAME types (one weight scale per item, s0 = s1): the kernels add the two halves as integers
// (exact) and combine once, acc + c · sum with c = xd · s0 in one fused multiply-add: 3 float
// operations (with the bias subtraction). The split form stays for types with two scales per
// item (Q6_K).
constexpr i32 Q8C_BIAS_BITS = 0x4B400000;  // 12582912.0f = 1.5 · 2^23: integers near it are exact
constexpr float Q8C_BIAS = 12582912.0f;

// The float of an integer sum accumulated onto Q8C_BIAS_BITS: one subtraction instead of an
// int → float conversion (a quarter-rate instruction on NVIDIA). Exact for |sum| < 2^22
// (32 · 128 · 127 < 2^19).
DEV float q8c_float(i32 biased) { return __builtin_bit_cast(float, biased) - Q8C_BIAS; }

template <bool NOMIN>
DEV float q8c_same(float acc, float xd, float s, float sum, float m, float xs) {
    const float c = xd * s;
    if constexpr (NOMIN) {
        return __builtin_fmaf(c, sum, acc);
    } else {
        return acc + __builtin_fmaf(c, sum, m * xs);
    }
}

// The split form: both halves' products meet in one fused multiply-add, and the activation
// scale in another (5 float operations with the two bias subtractions; it was 7, a quarter of
// the 8-row Q6_K tile's instructions: ptxas 12.8, sm_90).
template <bool NOMIN>
DEV float q8c_split(float acc, float xd, float s0, float sum0, float s1, float sum1, float m, float xs) {
    const float e = __builtin_fmaf(s0, sum0, s1 * sum1);
    if constexpr (NOMIN) {
        return __builtin_fmaf(xd, e, acc);
    } else {
        return acc + __builtin_fmaf(xd, e, m * xs);
    }
}
