// Weight decoders for matrix-core fragments (hip/qmma.hip): the parts of a 32-value item that
// one lane of an mma tile holds, instead of the whole item (QItem in hip/qmatmul.hip).
//
// Each type has
//   scales(blk, ib, s0, s1, m)  the item's scales, the same float operations as QItem's deq;
//   words(blk, ib, t, lo, hi)   word t (values 4t .. 4t+3, first half) and word t + 4
//                               (values 16 + 4t .., second half) of the item as packed int8,
//                               the bytes QItem's w[t] and w[t + 4] hold;
//   SAME: s1 is always s0;  NOMIN: m is always 0 (fewer values to exchange between lanes);
//   RAW16 (optional): an item is 16 bytes at raw(blk, ib) whose word t decode(word) turns into
//                     words t and t + 4.
// So a sum over fragments is the dp4a kernel's sum, and the scales are the same floats: the
// bit-identity test (tests/hip_ops.rs matmul_int8_rows_do_not_depend_on_the_batch) checks it.
#pragma once
#include "quant.h"

// (float)v for |v| < 2^22 without a conversion instruction (I2F issues at a quarter of the
// float add rate): the float with bits 1.5 · 2^23 + v, minus 1.5 · 2^23, is exactly v.
DEV float qf_small_float(i32 v) { return __builtin_bit_cast(float, 0x4B400000 + v) - 12582912.0f; }

// q - 32 on each of four bytes holding 0..63 (no borrow crosses bytes).
DEV u32 qf_sub32_bytes(u32 v) { return ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u; }

struct FQ8_0 {  // {f16 d; i8 qs[32]}, 2-byte aligned
    static constexpr u32 QK = 32, QB = 34;
    static constexpr bool SAME = true, NOMIN = true;
    DEV void scales(const u8* blk, u32, float& s0, float& s1, float& m) {
        s0 = s1 = load_f16(blk);
        m = 0.0f;
    }
    DEV void words(const u8* blk, u32, u32 t, u32& lo, u32& hi) {
        lo = ld_u32_a2(blk + 2 + 4 * t);
        hi = ld_u32_a2(blk + 18 + 4 * t);
    }
};

struct FIQ4_XS {  // {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}, 8-byte aligned
    static constexpr u32 QK = 256, QB = 136;
    static constexpr bool SAME = true, NOMIN = true;
    static constexpr u32 T0 = 0xBFAD9881u, T1 = 0xF6EADDCFu, T2 = 0x26190D01u, T3 = 0x71594535u;
    DEV void scales(const u8* blk, u32 ib, float& s0, float& s1, float& m) {
        // The 8-byte header as one load (the block is 8-byte aligned): in hip/qmma.hip each
        // lane reads its row's header, so every load instruction touches 16 rows' lines.
        const u32x2 h = *(const u32x2*)blk;
        const float d = f16_to_f32((u16)(h.x & 0xffffu));
        const u32 scales_h = h.x >> 16;
        const u32 scales_l = h.y;
        const u32 lo = (scales_l >> (8 * (ib / 2) + 4 * (ib % 2))) & 0xf;
        const u32 hi = (scales_h >> (2 * ib)) & 3;
        s0 = s1 = d * qf_small_float((i32)(lo | (hi << 4)) - 32);
        m = 0.0f;
    }
    // Item ib's 16 quant bytes, word t holding values 4t .. 4t+3 (low nibbles) and 16 + 4t ..
    // (high): RAW16 lets hip/qmma.hip load two items' words at once and decode them here.
    static constexpr bool RAW16 = true;
    DEV const u8* raw(const u8* blk, u32 ib) { return blk + 8 + 16 * ib; }
    DEV void words(const u8* blk, u32 ib, u32 t, u32& lo, u32& hi) {
        decode(*(const u32*)(raw(blk, ib) + 4 * t), lo, hi);
    }
    DEV void decode(u32 q, u32& lo, u32& hi) {
#if defined(__NVPTX__)
        // Both words from the 8 nibbles at once (llama.cpp's get_int_from_table_16): 8 byte
        // permutes and 6 other ops instead of two lut16 calls (~24); the weight decode is the
        // integer pipe's main load in this kernel. prmt reads a 4-bit selector per byte whose
        // bit 3 means sign-replicate, so the lookups use bits 0-2 and bit 3 picks the half.
        const u32 q7 = q & 0x77777777u;
        const u32 pick = 0x32103210u | ((q & 0x88888888u) >> 1);
        // n = 0: nibbles 0-3 (values lo 0, hi 0, lo 1, hi 1); n = 1: nibbles 4-7.
        u32 v[2];
#pragma unroll
        for (u32 n = 0; n < 2; ++n) {
            u32 a, b;
            asm("prmt.b32 %0, %1, %2, %3;" : "=r"(a) : "r"(T0), "r"(T1), "r"(q7 >> (16 * n)));
            asm("prmt.b32 %0, %1, %2, %3;" : "=r"(b) : "r"(T2), "r"(T3), "r"(q7 >> (16 * n)));
            asm("prmt.b32 %0, %1, %2, %3;" : "=r"(v[n]) : "r"(a), "r"(b), "r"(pick >> (16 * n)));
        }
        // {v1:v0} = lo 0, hi 0, lo 1, hi 1, lo 2, hi 2, lo 3, hi 3: even bytes, then odd bytes.
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(lo) : "r"(v[0]), "r"(v[1]), "r"(0x6420u));
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(hi) : "r"(v[0]), "r"(v[1]), "r"(0x7531u));
#else
        lo = lut16(q & 0x0f0f0f0fu, T0, T1, T2, T3);
        hi = lut16((q >> 4) & 0x0f0f0f0fu, T0, T1, T2, T3);
#endif
    }
};

// Q4_K/Q5_K scales: d · sc and -dmin · m of sub-block j.
DEV void qf_kscales(const u8* blk, u32 j, float& s0, float& s1, float& m) {
    const float d = load_f16(blk), dmin = load_f16(blk + 2);
    const u64 slo = (u64)*(const u32*)(blk + 4) | ((u64)*(const u32*)(blk + 8) << 32);
    const u32 shi = *(const u32*)(blk + 12);
    u32 sc, mm;
    scale_min_k4(j, slo, shi, &sc, &mm);
    s0 = s1 = d * qf_small_float((i32)sc);
    m = -dmin * qf_small_float((i32)mm);
}

struct FQ4_K {  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}, 16-byte aligned
    static constexpr u32 QK = 256, QB = 144;
    static constexpr bool SAME = true, NOMIN = false;
    DEV void scales(const u8* blk, u32 j, float& s0, float& s1, float& m) { qf_kscales(blk, j, s0, s1, m); }
    DEV void words(const u8* blk, u32 j, u32 t, u32& lo, u32& hi) {
        const u8* q = blk + 16 + 32 * (j / 2) + 4 * t;
        lo = (*(const u32*)q >> (4 * (j % 2))) & 0x0f0f0f0fu;
        hi = (*(const u32*)(q + 16) >> (4 * (j % 2))) & 0x0f0f0f0fu;
    }
};

struct FQ5_K {  // {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}, 16-byte aligned
    static constexpr u32 QK = 256, QB = 176;
    static constexpr bool SAME = true, NOMIN = false;
    DEV void scales(const u8* blk, u32 j, float& s0, float& s1, float& m) { qf_kscales(blk, j, s0, s1, m); }
    DEV void words(const u8* blk, u32 j, u32 t, u32& lo, u32& hi) {
        const u8* q = blk + 48 + 32 * (j / 2) + 4 * t;
        const u8* h = blk + 16 + 4 * t;
        lo = ((*(const u32*)q >> (4 * (j % 2))) & 0x0f0f0f0fu) | (((*(const u32*)h >> j) & 0x01010101u) << 4);
        hi = ((*(const u32*)(q + 16) >> (4 * (j % 2))) & 0x0f0f0f0fu) |
             (((*(const u32*)(h + 16) >> j) & 0x01010101u) << 4);
    }
};

struct FQ6_K {  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}, 2-byte aligned
    static constexpr u32 QK = 256, QB = 210;
    static constexpr bool SAME = false, NOMIN = true;
    DEV void scales(const u8* blk, u32 sub, float& s0, float& s1, float& m) {
        const u32 half = sub / 4, i = sub % 4;
        const float d = load_f16(blk + 208);
        const u32 scw = ld_u16(blk + 192 + 8 * half + 2 * i);
        s0 = d * qf_small_float((i8)(u8)(scw & 0xff));
        s1 = d * qf_small_float((i8)(u8)(scw >> 8));
        m = 0.0f;
    }
    DEV void words(const u8* blk, u32 sub, u32 t, u32& lo, u32& hi) {
        const u32 half = sub / 4, i = sub % 4;
        const u8* ql = blk + 64 * half + 32 * (i % 2) + 4 * t;
        const u8* qh = blk + 128 + 32 * half + 4 * t;
        const u32 l0 = ld_u32_a2(ql), l1 = ld_u32_a2(ql + 16);
        const u32 h0 = ld_u32_a2(qh), h1 = ld_u32_a2(qh + 16);
        lo = qf_sub32_bytes(((l0 >> (4 * (i / 2))) & 0x0f0f0f0fu) | (((h0 >> (2 * i)) & 0x03030303u) << 4));
        hi = qf_sub32_bytes(((l1 >> (4 * (i / 2))) & 0x0f0f0f0fu) | (((h1 >> (2 * i)) & 0x03030303u) << 4));
    }
};

// Every weight type with a fragment decoder: X(name, struct).
#define DS_FOR_EACH_FTYPE(X) \
    X(q8_0, FQ8_0)           \
    X(q4_k, FQ4_K)           \
    X(q5_k, FQ5_K)           \
    X(q6_k, FQ6_K)           \
    X(iq4_xs, FIQ4_XS)
