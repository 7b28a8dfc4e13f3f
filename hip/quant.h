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
// 32-element types only 2-byte aligned, so those are read with 2-byte loads. Q6_K blocks (210
// bytes in the file) are padded to Q6K_QB = 212 bytes at upload (src/backend/hip/kernels.rs,
// pad_q6_k), so they are 4-byte aligned and read with word loads: the 8-row lm_head tile spent
// a third of its instructions on 2-byte loads and their merges (ptxas 12.8, sm_90).
// The vector float types (F32, F16, BF16) need K % 4 (F32) or K % 8 (F16/BF16) == 0; the host
// picks the scalar variants (`*S`) otherwise.
#pragma once
#include "common.h"

// How the matrices of the int8 GEMV types lie in device memory (src/backend/hip/layout.rs makes
// them at upload): in panels of WL_G rows. A round is 1024 values of a row (32 items of 32: what
// one warp's lanes take at once in the int8 GEMVs), RB = 1024 / QK whole blocks; a row of K values
// has nr = ceil(K / 1024) rounds (the last one padded). Round c of row j sits at
//     (j / G) · G · nr · RB  +  c · G · RB  +  (j % G) · RB,
// so the rows a block of warps reads at one round are one run of G · RB bytes instead of pieces a
// row apart (H100, 27B IQ4_XS decode: a timing build reading the GEMVs round-major ran 3.5 %
// faster, docs/perf.md session 32), while a row still advances by a compile-time round stride
// (G · RB), so the GEMVs keep their immediate load offsets (a run-time stride cost the gate/up
// kernel 33 registers). G = 1 is row-major with rows padded to whole rounds. Types opt in with
// `static constexpr bool PANEL = true;` (the float, dp4a and matrix-core decoders of Q8_0, Q4_K,
// Q5_K, Q6_K and IQ4_XS: kernels::QGEMV_TYPES); the others are row-major with the kernels'
// `row_bytes` stride. build.rs passes DS_WL_G (and tells the host the same value). G = 1024 by
// default: 6.71 ms a 27B IQ4_XS step against 6.89 at G = 32 (H100, 4 and 5 interleaved runs,
// docs/perf.md session 36); matrices of fewer rows share panels (layout.rs, plan_pack), so the
// 48-row DeltaNet β/α projections do not pad to 1024 rows each.
#ifndef DS_WL_G
#define DS_WL_G 1024
#endif
template <class Q, class = void>
struct WlPanel {
    static constexpr bool v = false;
};
template <class Q>
struct WlPanel<Q, decltype(void(Q::PANEL))> {
    static constexpr bool v = true;
};
// Bytes of one round of a row (QK <= 1024 for every type).
template <class Q>
constexpr u32 wl_round_bytes() { return 1024 / Q::QK * Q::QB; }
// Bytes from one round of a row to its next.
template <class Q>
constexpr u32 wl_round_stride() { return (WlPanel<Q>::v ? DS_WL_G : 1) * wl_round_bytes<Q>(); }
// Byte offset of row j of a matrix with rows of K values (`row_bytes` apart where row-major).
template <class Q>
DEV u64 wl_row(u32 j, u32 K, u64 row_bytes) {
    if constexpr (WlPanel<Q>::v) {
        constexpr u32 G = DS_WL_G, RB = wl_round_bytes<Q>();
        const u64 nr = (K + 1023) / 1024;
        return (u64)(j / G) * (G * RB) * nr + (u64)(j % G) * RB;
    } else {
        return (u64)j * row_bytes;
    }
}
// Byte offset of block b within its row (row-major: b · QB).
template <class Q>
DEV u64 wl_block(u32 b) {
    constexpr u32 BPR = 1024 / Q::QK;
    if constexpr (WlPanel<Q>::v) {
        return (u64)(b / BPR) * wl_round_stride<Q>() + (u64)(b % BPR) * Q::QB;
    } else {
        return (u64)b * Q::QB;
    }
}

DEV u32 ld_u16(const u8* p) { return *(const u16*)p; }
// 32 bits at a 2-byte aligned address.
DEV u32 ld_u32_a2(const u8* p) { return ld_u16(p) | (ld_u16(p + 2) << 16); }

// (float)v for |v| < 2^22 without a conversion instruction (I2F issues at a quarter of the
// float add rate): the float with bits 1.5 · 2^23 + v, minus 1.5 · 2^23, is exactly v.
DEV float small_float(i32 v) { return __builtin_bit_cast(float, 0x4B400000 + v) - 12582912.0f; }

// q - 32 on each of four bytes holding 0..63 (no borrow crosses bytes).
DEV u32 sub32_bytes(u32 v) { return ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u; }

// Bytes of a Q6_K block in device memory: the file's 210, then 2 zero bytes (see above).
constexpr u32 Q6K_QB = 212;

// The IQ4_NL grid as four words of int8 (see iq4_value below).
constexpr u32 IQ4_T0 = 0xBFAD9881u, IQ4_T1 = 0xF6EADDCFu, IQ4_T2 = 0x26190D01u, IQ4_T3 = 0x71594535u;

// IQ4_XS quant words on NVIDIA are regrouped at upload (src/backend/hip/kernels.rs,
// regroup_iq4_xs): a word's eight nibbles, stored as (lo 0, hi 0, lo 1, hi 1, ...) in the file
// (byte k: value 4t + k low, 16 + 4t + k high), become (lo 0, lo 1, lo 2, lo 3, hi 0, ..., hi 3),
// so the table lookup below yields the two dot-product words without a final regrouping. The
// CPU emulator of the CUDA driver (tools/device/emu) receives the same uploads.
#if defined(__NVPTX__) || defined(DS_EMULATE)
constexpr bool IQ4_REGROUPED = true;
#else
constexpr bool IQ4_REGROUPED = false;
#endif
// The nibble of an IQ4_XS quant word holding value 4t + k (hi: 16 + 4t + k), k < 4.
DEV constexpr u32 iq4_nibble(u32 k, bool hi) { return IQ4_REGROUPED ? k + 4 * hi : 2 * k + hi; }

#if defined(__NVPTX__)
// prmt's table operands: one may be an immediate, the other must be a register, and ptxas
// otherwise rematerialises that constant from a uniform register before every use (a move per
// lookup). A value it cannot prove constant stays in a register: z is 0 (tid.x < 1024 never
// hashes to that value), computed once per kernel since every operation in it is speculatable.
DEV u32 opaque_zero() {
    return __nvvm_read_ptx_sreg_tid_x() * 0x9E3779B9u == 0xDEADBEEFu ? 0x80000000u : 0u;
}
#endif

// The eight grid values of one IQ4 qs word as packed int8: lo gets the values 4t + k of the
// word's sub-block (byte k), hi the values 16 + 4t + k. The integer-dot kernels spend most of
// their integer ops here, so each target uses its byte permute.
DEV void iq4_words(u32 q, u32& lo, u32& hi) {
#if defined(__NVPTX__)
    // A regrouped word (IQ4_REGROUPED): nibbles 0-3 are lo's, 4-7 hi's. Per half, two byte
    // permutes look the low three bits up in each half of the grid and a third picks by bit 3
    // (llama.cpp's get_int_from_table_16 idea). prmt reads a selector nibble per byte from the
    // low 16 bits, bit 3 meaning sign-replicate, hence the masks.
    // On sm_90 the decode-bound GEMVs are limited by the integer ALU pipe (prmt, lop3, shf and
    // lea issue at half rate there), so the two shifts by 16 are multiplies by 2^16 (mul.hi,
    // on the otherwise idle multiply pipe).
    const u32 q7 = q & 0x77777777u;
    u32 pick, q7h, pickh;
    asm("mad.hi.u32 %0, %1, 0x80000000, 0x32103210;" : "=r"(pick) : "r"(q & 0x88888888u));
    asm("mul.hi.u32 %0, %1, 0x10000;" : "=r"(q7h) : "r"(q7));
    asm("mul.hi.u32 %0, %1, 0x10000;" : "=r"(pickh) : "r"(pick));
    const u32 sel[2] = {q7, q7h}, pk[2] = {pick, pickh};
    const u32 t0 = IQ4_T0 ^ opaque_zero(), t2 = IQ4_T2 ^ opaque_zero();
    u32 v[2];
#pragma unroll
    for (u32 n = 0; n < 2; ++n) {
        u32 a, b;
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(a) : "r"(t0), "r"(IQ4_T1), "r"(sel[n]));
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(b) : "r"(t2), "r"(IQ4_T3), "r"(sel[n]));
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(v[n]) : "r"(a), "r"(b), "r"(pk[n]));
    }
    lo = v[0];
    hi = v[1];
#else
    if constexpr (IQ4_REGROUPED) {  // the emulator: nibble k of each half to byte k
        const auto spread = [](u32 h) {
            return (h & 0xfu) | (h & 0xf0u) << 4 | (h & 0xf00u) << 8 | (h & 0xf000u) << 12;
        };
        q = spread(q & 0xffffu) | spread(q >> 16) << 4;
    }
    lo = lut16(q & 0x0f0f0f0fu, IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3);
    hi = lut16((q >> 4) & 0x0f0f0f0fu, IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3);
#endif
}

#if defined(__NVPTX__)
// The upper half of the grid plus one (1 .. 113 -> 2 .. 114), for iq4_words_split.
constexpr u32 IQ4_T2P = 0x271A0E02u, IQ4_T3P = 0x725A4636u;

// One regrouped IQ4 word as two pairs of int8 words whose dot products sum to those of
// iq4_words' lo and hi: dot(l[n], x) + dot(h[n], x) == dot(v[n], x) for every x (n = 0: lo).
// No pick: prmt's sign-replicate does it. l looks every nibble up in the lower half of the grid
// (all negative), so a nibble with bit 3 set yields the sign of a negative byte, -1; h looks
// the nibbles with bit 3 flipped up in the upper half plus one (all positive), so the lower
// nibbles yield 0 and the upper ones their value + 1, which cancels l's -1. Half the ALU
// instructions of iq4_words (a flip and four permutes per word) for two more dot products (the
// multiply pipe): the 1-row GEMV, whose decode is not shared by other rows, uses it. The sums
// are exact integers, so results equal iq4_words' bit for bit.
DEV void iq4_words_split(u32 q, u32 (&l)[2], u32 (&h)[2]) {
    const u32 qx = q ^ 0x88888888u;
    u32 qh, qxh;
    asm("mul.hi.u32 %0, %1, 0x10000;" : "=r"(qh) : "r"(q));
    asm("mul.hi.u32 %0, %1, 0x10000;" : "=r"(qxh) : "r"(qx));
    const u32 sl[2] = {q, qh}, sh[2] = {qx, qxh};
    const u32 t0 = IQ4_T0 ^ opaque_zero(), t2 = IQ4_T2P ^ opaque_zero();
#pragma unroll
    for (u32 n = 0; n < 2; ++n) {
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(l[n]) : "r"(t0), "r"(IQ4_T1), "r"(sl[n]));
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(h[n]) : "r"(t2), "r"(IQ4_T3P), "r"(sh[n]));
    }
}
#endif

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
    static constexpr bool PANEL = true;
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
    static constexpr bool PANEL = true;
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
    static constexpr bool PANEL = true;
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

struct Q6_K {  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; u16 pad}, x = d*sc * (q - 32)
    static constexpr u32 QK = 256, QB = Q6K_QB, SUB = 32;
    static constexpr bool PANEL = true;
    DEV void deq(const u8* blk, u32 sub, float* w) {
        const u32 half = sub / 4, i = sub % 4;
        const float d = load_f16(blk + 208);
        const u8* ql = blk + 64 * half + 32 * (i % 2);
        const u8* qh = blk + 128 + 32 * half;
        const u32 scw = ld_u16(blk + 192 + 8 * half + 2 * i);
        const float ds0 = d * (float)(i8)(u8)(scw & 0xff);
        const float ds1 = d * (float)(i8)(u8)(scw >> 8);
#pragma unroll
        for (u32 l = 0; l < 32; l += 4) {
            const u32 lo4 = *(const u32*)(ql + l), hi4 = *(const u32*)(qh + l);
#pragma unroll
            for (u32 k = 0; k < 4; ++k) {
                const u32 lo = (lo4 >> (8 * k + 4 * (i / 2))) & 0xf;
                const u32 hi = (hi4 >> (8 * k + 2 * i)) & 3;
                const i32 q = (i32)(lo | (hi << 4)) - 32;
                w[l + k] = ((l + k) < 16 ? ds0 : ds1) * (float)q;
            }
        }
    }
};

struct IQ4_XS {  // {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}
    static constexpr u32 QK = 256, QB = 136, SUB = 32;
    static constexpr bool PANEL = true;
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
                w[4 * i + k] = dl * iq4_value((v[i] >> (4 * iq4_nibble(k, false))) & 0xf);
                w[4 * i + k + 16] = dl * iq4_value((v[i] >> (4 * iq4_nibble(k, true))) & 0xf);
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
