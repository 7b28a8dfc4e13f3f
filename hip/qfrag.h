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
//                     words t and t + 4;
//   OFF (optional): words() leaves out a constant OFF subtracted from every value, and
//                   hip/qmma.hip takes OFF · Σ x off the sum with one more mma instead (the same
//                   exact integer; the per-word subtraction cost 3 integer ops).
// So a sum over fragments is the dp4a kernel's sum, and the scales are the same floats: the
// bit-identity test (tests/hip_ops.rs matmul_int8_rows_do_not_depend_on_the_batch) checks it.
#pragma once
#include "quant.h"

struct FQ8_0 {  // {f16 d; i8 qs[32]}, 2-byte aligned
    static constexpr u32 QK = 32, QB = 34;
    static constexpr bool PANEL = true;  // hip/quant.h, WlPanel
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
    static constexpr bool PANEL = true;  // hip/quant.h, WlPanel
    static constexpr bool SAME = true, NOMIN = true;
    DEV void scales(const u8* blk, u32 ib, float& s0, float& s1, float& m) {
        // The 8-byte header as one load (the block is 8-byte aligned): in hip/qmma.hip each
        // lane reads its row's header, so every load instruction touches 16 rows' lines.
        scales_of(*(const u32x2*)blk, ib, s0, s1, m);
    }
    // The same from the header's value (loaded ahead by the pipelined 1-row GEMV).
    DEV void scales_of(u32x2 h, u32 ib, float& s0, float& s1, float& m) {
        const float d = f16_to_f32((u16)(h.x & 0xffffu));
        const u32 scales_h = h.x >> 16;
        const u32 scales_l = h.y;
        const u32 lo = (scales_l >> (8 * (ib / 2) + 4 * (ib % 2))) & 0xf;
        const u32 hi = (scales_h >> (2 * ib)) & 3;
        s0 = s1 = d * small_float((i32)(lo | (hi << 4)) - 32);
        m = 0.0f;
    }
    // Item ib's 16 quant bytes, word t holding values 4t .. 4t+3 and 16 + 4t .. 19 + 4t (in
    // the file's nibble order, or regrouped on NVIDIA: iq4_nibble in hip/quant.h): RAW16 lets hip/qmma.hip load two items' words at once and decode them here.
    static constexpr bool RAW16 = true;
    DEV const u8* raw(const u8* blk, u32 ib) { return blk + 8 + 16 * ib; }
    DEV void words(const u8* blk, u32 ib, u32 t, u32& lo, u32& hi) {
        decode(*(const u32*)(raw(blk, ib) + 4 * t), lo, hi);
    }
    DEV void decode(u32 q, u32& lo, u32& hi) { iq4_words(q, lo, hi); }
};

// Q4_K/Q5_K scales: d · sc and -dmin · m of sub-block j.
DEV void qf_kscales(const u8* blk, u32 j, float& s0, float& s1, float& m) {
    const float d = load_f16(blk), dmin = load_f16(blk + 2);
    const u64 slo = (u64)*(const u32*)(blk + 4) | ((u64)*(const u32*)(blk + 8) << 32);
    const u32 shi = *(const u32*)(blk + 12);
    u32 sc, mm;
    scale_min_k4(j, slo, shi, &sc, &mm);
    s0 = s1 = d * small_float((i32)sc);
    m = -dmin * small_float((i32)mm);
}

struct FQ4_K {  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}, 16-byte aligned
    static constexpr u32 QK = 256, QB = 144;
    static constexpr bool PANEL = true;  // hip/quant.h, WlPanel
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
    static constexpr bool PANEL = true;  // hip/quant.h, WlPanel
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

struct FQ6_K {  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; u16 pad}, 4-byte aligned (Q6K_QB)
    static constexpr u32 QK = 256, QB = Q6K_QB;
    static constexpr bool PANEL = true;  // hip/quant.h, WlPanel
    static constexpr bool SAME = false, NOMIN = true;
    DEV void scales(const u8* blk, u32 sub, float& s0, float& s1, float& m) {
        const u32 half = sub / 4, i = sub % 4;
        const float d = load_f16(blk + 208);
        // Items i and i ^ 1 share this word: one load serves both (the same address).
        const u32 scw = *(const u32*)(blk + 192 + 8 * half + 4 * (i / 2)) >> (16 * (i % 2));
        s0 = d * small_float((i8)(u8)(scw & 0xff));
        s1 = d * small_float((i8)(u8)((scw >> 8) & 0xff));
        m = 0.0f;
    }
    // The 6-bit q (0 .. 63, a valid int8), without the - 32 (OFF).
    static constexpr u32 OFF = 32;
    DEV void words(const u8* blk, u32 sub, u32 t, u32& lo, u32& hi) {
        const u32 half = sub / 4, i = sub % 4;
        const u8* ql = blk + 64 * half + 32 * (i % 2) + 4 * t;
        const u8* qh = blk + 128 + 32 * half + 4 * t;
        const u32 l0 = *(const u32*)ql, l1 = *(const u32*)(ql + 16);
        const u32 h0 = *(const u32*)qh, h1 = *(const u32*)(qh + 16);
        lo = ((l0 >> (4 * (i / 2))) & 0x0f0f0f0fu) | (((h0 >> (2 * i)) & 0x03030303u) << 4);
        hi = ((l1 >> (4 * (i / 2))) & 0x0f0f0f0fu) | (((h1 >> (2 * i)) & 0x03030303u) << 4);
    }
};

// Every weight type with a fragment decoder: X(name, struct).
#define DS_FOR_EACH_FTYPE(X) \
    X(q8_0, FQ8_0)           \
    X(q4_k, FQ4_K)           \
    X(q5_k, FQ5_K)           \
    X(q6_k, FQ6_K)           \
    X(iq4_xs, FIQ4_XS)
