// Weight formats: one dequantizer per type, written once and used by every kernel that reads
// weights (matmul GEMV and tiled paths, embed, whole-tensor dequant).
//
// Each type is a struct with
//   QK   elements per block,  QB  bytes per block,
//   SUB  elements one work item decodes (contiguous, QK % SUB == 0),
//   deq(blk, sub, w)  writes elements [sub*SUB, sub*SUB + SUB) of the block at `blk` to w[].
// Layouts and arithmetic follow ggml and the CPU reference (src/tensor/quant): same products in
// the same order, so results agree to rounding (the GPU may fuse a multiply-add).
//
// Alignment: weight rows start at multiples of the row size inside a 256-byte aligned buffer.
// Q4_K/Q5_K blocks (144/176 bytes) are 16-byte aligned, IQ4_XS (136) 8-byte aligned, the
// 32-element types and Q6_K only 2-byte aligned, so those are read with 2-byte loads.
// The vector float types (F32, F16, BF16) need K % 4 (F32) or K % 8 (F16/BF16) == 0; the host
// picks the scalar variants (`*S`) otherwise.
#pragma once
#include "common.h"

DEV u32 ld_u16(const u8* p) { return *(const u16*)p; }
// 32 bits at a 2-byte aligned address.
DEV u32 ld_u32_a2(const u8* p) { return ld_u16(p) | (ld_u16(p + 2) << 16); }

// (float)v for |v| < 2^22 without a conversion instruction (I2F issues at a quarter of the
// float add rate): the float with bits 1.5 · 2^23 + v, minus 1.5 · 2^23, is exactly v.
DEV float small_float(i32 v) { return __builtin_bit_cast(float, 0x4B400000 + v) - 12582912.0f; }

// q - 32 on each of four bytes holding 0..63 (no borrow crosses bytes).
DEV u32 sub32_bytes(u32 v) { return ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u; }

// The IQ4_NL grid as four words of int8 (see iq4_value below).
constexpr u32 IQ4_T0 = 0xBFAD9881u, IQ4_T1 = 0xF6EADDCFu, IQ4_T2 = 0x26190D01u, IQ4_T3 = 0x71594535u;

// The eight grid values of one IQ4 qs word as packed int8: byte k of the word holds value
// 4t + k in its low nibble and value 16 + 4t + k in its high one; lo gets the low nibbles'
// values (bytes in order), hi the high nibbles'. The integer-dot kernels spend most of their
// integer ops here, so each target uses its byte permute.
DEV void iq4_words(u32 q, u32& lo, u32& hi) {
#if defined(__NVPTX__)
    // All eight nibbles at once (llama.cpp's get_int_from_table_16 idea): 8 byte permutes and
    // 6 other ops instead of two lut16 calls (~24). prmt reads a 4-bit selector per byte whose
    // bit 3 means sign-replicate, so the lookups use bits 0-2 and bit 3 picks the half.
    // (Tried on the H200: the file's nibbles regrouped at upload to save the two final
    // permutes, with the halves split by sign so no pick is needed either; the two extra dot
    // products per word made the 1-row step 10 % slower than this.)
    const u32 q7 = q & 0x77777777u;
    const u32 pick = 0x32103210u | ((q & 0x88888888u) >> 1);
    // n = 0: nibbles 0-3 (values lo 0, hi 0, lo 1, hi 1); n = 1: nibbles 4-7.
    u32 v[2];
#pragma unroll
    for (u32 n = 0; n < 2; ++n) {
        u32 a, b;
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(a) : "r"(IQ4_T0), "r"(IQ4_T1), "r"(q7 >> (16 * n)));
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(b) : "r"(IQ4_T2), "r"(IQ4_T3), "r"(q7 >> (16 * n)));
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(v[n]) : "r"(a), "r"(b), "r"(pick >> (16 * n)));
    }
    // {v1:v0} = lo 0, hi 0, lo 1, hi 1, lo 2, hi 2, lo 3, hi 3: even bytes, then odd bytes.
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(lo) : "r"(v[0]), "r"(v[1]), "r"(0x6420u));
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(hi) : "r"(v[0]), "r"(v[1]), "r"(0x7531u));
#else
    lo = lut16(q & 0x0f0f0f0fu, IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3);
    hi = lut16((q >> 4) & 0x0f0f0f0fu, IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3);
#endif
}

// The 16 IQ4_NL grid values, packed as bytes of two 64-bit constants (no memory lookup).
DEV float iq4_value(u32 q) {
    const u64 lo = 0xF6EADDCFBFAD9881ull;  // -127 -104 -83 -65 -49 -35 -22 -10
    const u64 hi = 0x7159453526190D01ull;  //    1   13  25  38  53  69  89 113
    const u64 t = (q & 8) ? hi : lo;
    return (float)(i8)(u8)(t >> (8 * (q & 7)));
}

// ---------------------------------------------------------------------------------------------
// Plain floats. Vector variants read 16 bytes per work item.

struct QF32 {
    static constexpr u32 QK = 4, QB = 16, SUB = 4;
    DEV void deq(const u8* blk, u32, float* w) {
        const f32x4 v = *(const f32x4*)blk;
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
    }
};
struct QF32S {
    static constexpr u32 QK = 1, QB = 4, SUB = 1;
    DEV void deq(const u8* blk, u32, float* w) { w[0] = *(const float*)blk; }
};
struct QF16 {
    static constexpr u32 QK = 8, QB = 16, SUB = 8;
    DEV void deq(const u8* blk, u32, float* w) {
        const u32x4 v = *(const u32x4*)blk;
        const u32 a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (u32 i = 0; i < 4; ++i) {
            w[2 * i] = f16_to_f32((u16)(a[i] & 0xffff));
            w[2 * i + 1] = f16_to_f32((u16)(a[i] >> 16));
        }
    }
};
struct QF16S {
    static constexpr u32 QK = 1, QB = 2, SUB = 1;
    DEV void deq(const u8* blk, u32, float* w) { w[0] = f16_to_f32(*(const u16*)blk); }
};
struct QBF16 {
    static constexpr u32 QK = 8, QB = 16, SUB = 8;
    DEV void deq(const u8* blk, u32, float* w) {
        const u32x4 v = *(const u32x4*)blk;
        const u32 a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (u32 i = 0; i < 4; ++i) {
            w[2 * i] = bf16_to_f32((u16)(a[i] & 0xffff));
            w[2 * i + 1] = bf16_to_f32((u16)(a[i] >> 16));
        }
    }
};
struct QBF16S {
    static constexpr u32 QK = 1, QB = 2, SUB = 1;
    DEV void deq(const u8* blk, u32, float* w) { w[0] = bf16_to_f32(*(const u16*)blk); }
};

// ---------------------------------------------------------------------------------------------
// 32-element block types; a work item decodes half a block (16 elements). Byte j of qs holds
// element j in its low nibble and j + 16 in its high nibble.

// The 16 bytes of qs at a 2-byte aligned address, as 8 halfwords.
DEV void ld_qs16(const u8* qs, u32* h) {
#pragma unroll
    for (u32 i = 0; i < 8; ++i) h[i] = ld_u16(qs + 2 * i);
}

struct Q8_0 {  // {f16 d; i8 qs[32]}, x = q * d
    static constexpr u32 QK = 32, QB = 34, SUB = 16;
    DEV void deq(const u8* blk, u32 sub, float* w) {
        const float d = load_f16(blk);
        u32 h[8];
        ld_qs16(blk + 2 + 16 * sub, h);
#pragma unroll
        for (u32 i = 0; i < 8; ++i) {
            w[2 * i] = (float)(i8)(u8)(h[i] & 0xff) * d;
            w[2 * i + 1] = (float)(i8)(u8)(h[i] >> 8) * d;
        }
    }
};

// Nibble `hi` (0 low, 1 high) of the 16 qs bytes, as 16 values.
DEV void nibbles16(const u8* qs, u32 hi, u32* q) {
    u32 h[8];
    ld_qs16(qs, h);
#pragma unroll
    for (u32 i = 0; i < 8; ++i) {
        q[2 * i] = (h[i] >> (4 * hi)) & 0xf;
        q[2 * i + 1] = (h[i] >> (8 + 4 * hi)) & 0xf;
    }
}

struct Q4_0 {  // {f16 d; u8 qs[16]}, x = (q - 8) * d
    static constexpr u32 QK = 32, QB = 18, SUB = 16;
    DEV void deq(const u8* blk, u32 sub, float* w) {
        const float d = load_f16(blk);
        u32 q[16];
        nibbles16(blk + 2, sub, q);
#pragma unroll
        for (u32 i = 0; i < 16; ++i) w[i] = (float)((i32)q[i] - 8) * d;
    }
};

struct Q4_1 {  // {f16 d; f16 m; u8 qs[16]}, x = q * d + m
    static constexpr u32 QK = 32, QB = 20, SUB = 16;
    DEV void deq(const u8* blk, u32 sub, float* w) {
        const float d = load_f16(blk), m = load_f16(blk + 2);
        u32 q[16];
        nibbles16(blk + 4, sub, q);
#pragma unroll
        for (u32 i = 0; i < 16; ++i) w[i] = (float)q[i] * d + m;
    }
};

// Adds the fifth bits (bit j + 16*sub of qh) to 16 nibbles.
DEV void fifth16(u32 qh, u32 sub, u32* q) {
#pragma unroll
    for (u32 i = 0; i < 16; ++i) q[i] |= ((qh >> (i + 16 * sub)) & 1) << 4;
}

struct Q5_0 {  // {f16 d; u8 qh[4]; u8 qs[16]}, x = (q - 16) * d
    static constexpr u32 QK = 32, QB = 22, SUB = 16;
    DEV void deq(const u8* blk, u32 sub, float* w) {
        const float d = load_f16(blk);
        const u32 qh = ld_u32_a2(blk + 2);
        u32 q[16];
        nibbles16(blk + 6, sub, q);
        fifth16(qh, sub, q);
#pragma unroll
        for (u32 i = 0; i < 16; ++i) w[i] = (float)((i32)q[i] - 16) * d;
    }
};

struct Q5_1 {  // {f16 d; f16 m; u8 qh[4]; u8 qs[16]}, x = q * d + m
    static constexpr u32 QK = 32, QB = 24, SUB = 16;
    DEV void deq(const u8* blk, u32 sub, float* w) {
        const float d = load_f16(blk), m = load_f16(blk + 2);
        const u32 qh = ld_u32_a2(blk + 4);
        u32 q[16];
        nibbles16(blk + 8, sub, q);
        fifth16(qh, sub, q);
#pragma unroll
        for (u32 i = 0; i < 16; ++i) w[i] = (float)q[i] * d + m;
    }
};

struct IQ4_NL {  // {f16 d; u8 qs[16]}, x = d * grid[q]
    static constexpr u32 QK = 32, QB = 18, SUB = 16;
    DEV void deq(const u8* blk, u32 sub, float* w) {
        const float d = load_f16(blk);
        u32 q[16];
        nibbles16(blk + 2, sub, q);
#pragma unroll
        for (u32 i = 0; i < 16; ++i) w[i] = d * iq4_value(q[i]);
    }
};

// ---------------------------------------------------------------------------------------------
// 256-element super-blocks; a work item decodes one 32-element sub-block.

// ggml's get_scale_min_k4 over the 12 scale bytes, passed as a 64-bit and a 32-bit
// little-endian word (shifts and selects: a runtime-indexed array would go to scratch memory).
DEV u32 kscale_byte(u64 lo, u32 hi, u32 i) {
    return (u32)((i < 8 ? (lo >> (8 * i)) : (u64)(hi >> (8 * (i - 8)))) & 0xff);
}
DEV void scale_min_k4(u32 j, u64 lo, u32 hi, u32* sc, u32* m) {
    if (j < 4) {
        *sc = kscale_byte(lo, hi, j) & 63;
        *m = kscale_byte(lo, hi, j + 4) & 63;
    } else {
        *sc = (kscale_byte(lo, hi, j + 4) & 0xf) | ((kscale_byte(lo, hi, j - 4) >> 6) << 4);
        *m = (kscale_byte(lo, hi, j + 4) >> 4) | ((kscale_byte(lo, hi, j) >> 6) << 4);
    }
}

// 32 nibbles: nibble `hi` of the 32 bytes at a 16-byte aligned address.
DEV void nibbles32_a16(const u8* p, u32 hi, u32* q) {
    const u32x4 a = *(const u32x4*)p;
    const u32x4 b = *(const u32x4*)(p + 16);
    const u32 v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (u32 i = 0; i < 8; ++i) {
#pragma unroll
        for (u32 k = 0; k < 4; ++k) q[4 * i + k] = (v[i] >> (8 * k + 4 * hi)) & 0xf;
    }
}

struct Q4_K {  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}, x = d*sc*q - dmin*m
    static constexpr u32 QK = 256, QB = 144, SUB = 32;
    DEV void deq(const u8* blk, u32 j, float* w) {
        const float d = load_f16(blk), dmin = load_f16(blk + 2);
        const u64 slo = (u64)*(const u32*)(blk + 4) | ((u64)*(const u32*)(blk + 8) << 32);
        const u32 shi = *(const u32*)(blk + 12);
        u32 sc, m;
        scale_min_k4(j, slo, shi, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        u32 q[32];
        nibbles32_a16(blk + 16 + 32 * (j / 2), j % 2, q);
#pragma unroll
        for (u32 i = 0; i < 32; ++i) w[i] = d1 * (float)q[i] - m1;
    }
};

struct Q5_K {  // {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
    static constexpr u32 QK = 256, QB = 176, SUB = 32;
    DEV void deq(const u8* blk, u32 j, float* w) {
        const float d = load_f16(blk), dmin = load_f16(blk + 2);
        const u64 slo = (u64)*(const u32*)(blk + 4) | ((u64)*(const u32*)(blk + 8) << 32);
        const u32 shi = *(const u32*)(blk + 12);
        u32 sc, m;
        scale_min_k4(j, slo, shi, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        u32 q[32];
        nibbles32_a16(blk + 48 + 32 * (j / 2), j % 2, q);
        const u32x4 ha = *(const u32x4*)(blk + 16);
        const u32x4 hb = *(const u32x4*)(blk + 32);
        const u32 hv[8] = {ha.x, ha.y, ha.z, ha.w, hb.x, hb.y, hb.z, hb.w};
#pragma unroll
        for (u32 i = 0; i < 8; ++i) {
#pragma unroll
            for (u32 k = 0; k < 4; ++k) q[4 * i + k] |= ((hv[i] >> (8 * k + j)) & 1) << 4;
        }
#pragma unroll
        for (u32 i = 0; i < 32; ++i) w[i] = d1 * (float)q[i] - m1;
    }
};

struct Q6_K {  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}, x = d*sc * (q - 32)
    static constexpr u32 QK = 256, QB = 210, SUB = 32;
    DEV void deq(const u8* blk, u32 sub, float* w) {
        const u32 half = sub / 4, i = sub % 4;
        const float d = load_f16(blk + 208);
        const u8* ql = blk + 64 * half + 32 * (i % 2);
        const u8* qh = blk + 128 + 32 * half;
        const u8* sc = blk + 192 + 8 * half + 2 * i;
        const u32 scw = ld_u16(sc);
        const float ds0 = d * (float)(i8)(u8)(scw & 0xff);
        const float ds1 = d * (float)(i8)(u8)(scw >> 8);
#pragma unroll
        for (u32 l = 0; l < 32; l += 2) {
            const u32 lo2 = ld_u16(ql + l), hi2 = ld_u16(qh + l);
#pragma unroll
            for (u32 k = 0; k < 2; ++k) {
                const u32 lo = (lo2 >> (8 * k + 4 * (i / 2))) & 0xf;
                const u32 hi = (hi2 >> (8 * k + 2 * i)) & 3;
                const i32 q = (i32)(lo | (hi << 4)) - 32;
                w[l + k] = ((l + k) < 16 ? ds0 : ds1) * (float)q;
            }
        }
    }
};

struct IQ4_XS {  // {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}
    static constexpr u32 QK = 256, QB = 136, SUB = 32;
    DEV void deq(const u8* blk, u32 ib, float* w) {
        const float d = load_f16(blk);
        const u32 scales_h = ld_u16(blk + 2);
        const u32 scales_l = ld_u32_a2(blk + 4);
        const u32 lo = (scales_l >> (8 * (ib / 2) + 4 * (ib % 2))) & 0xf;
        const u32 hi = (scales_h >> (2 * ib)) & 3;
        const float dl = d * (float)((i32)(lo | (hi << 4)) - 32);
        const u32x2 a = *(const u32x2*)(blk + 8 + 16 * ib);
        const u32x2 b = *(const u32x2*)(blk + 16 + 16 * ib);
        const u32 v[4] = {a.x, a.y, b.x, b.y};
#pragma unroll
        for (u32 i = 0; i < 4; ++i) {
#pragma unroll
            for (u32 k = 0; k < 4; ++k) {
                const u32 byte = (v[i] >> (8 * k)) & 0xff;
                w[4 * i + k] = dl * iq4_value(byte & 0xf);
                w[4 * i + k + 16] = dl * iq4_value(byte >> 4);
            }
        }
    }
};

// Every type the kernels are instantiated for: X(name, struct).
#define DS_FOR_EACH_WTYPE(X) \
    X(f32, QF32)             \
    X(f32s, QF32S)           \
    X(f16, QF16)             \
    X(f16s, QF16S)           \
    X(bf16, QBF16)           \
    X(bf16s, QBF16S)         \
    X(q4_0, Q4_0)            \
    X(q4_1, Q4_1)            \
    X(q5_0, Q5_0)            \
    X(q5_1, Q5_1)            \
    X(q8_0, Q8_0)            \
    X(q4_k, Q4_K)            \
    X(q5_k, Q5_K)            \
    X(q6_k, Q6_K)            \
    X(iq4_nl, IQ4_NL)        \
    X(iq4_xs, IQ4_XS)
