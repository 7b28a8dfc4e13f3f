// Int8-activation matmul for decode and verify widths (llama.cpp's MMVQ idea, written for our
// layout): the activations are quantized per 32 values to int8 with one f32 scale (and the
// scaled sum, for formats with a per-block minimum), and each weight sub-block is decoded to
// packed int8 words that meet the activations in 4-way integer dot products (dp4a/v_dot4).
// Decoding a weight word costs a few integer ops for 8 values instead of a float conversion
// and multiply per value, which is what kept the float GEMV ALU-bound.
//
// Layout of the quantized activations (written by quantize_q8, read by qgemv_*):
//   XQ int8 [N, K]     XD f32 [N, K/32] (scale d)     XS f32 [N, K/32] (d · Σ q)
// with q = round(x / d), d = max|x| / 127 over each 32 values (ggml's q8_1).
//
// qgemv: a warp owns R consecutive weight rows (no block-wide reduction, so warps never wait on
// each other); its lanes split K in work items of 32 values (one activation block), so K = 5120
// gives every lane exactly 5 items. Each item's weights are decoded once and used for all NT
// input rows; integer sums are exact, so the result of a row does not depend on N (verify and
// decode agree bit for bit, which lossless speculation relies on).
#include "conv4.h"
#include "q8act.h"
#include "qfrag.h"
#include "quant.h"

constexpr u32 QG_WARPS = 4;
constexpr u32 QG_THREADS = QG_WARPS * WARP;
// Weight rows per warp for NT input rows (mirrored by kernels::qgemv_rows).
constexpr u32 qgemv_rows(u32 nt) { return nt >= 16 ? 1 : 2; }

// One 32-value weight item decoded for the integer dot: w[0..8] hold values 0..31 as packed
// int8 (value e in byte e % 4 of word e / 4); the item's contribution to a row is
//   xd · (s0 · Σ_{e<16} w_e q_e + s1 · Σ_{e>=16} w_e q_e) + m · xs.
// SPLIT types (IIQ4_XS on NVIDIA, 1-row kernels) also fill e[]: their value words are
// w[i] + e[i] in the dot products' sense (iq4_words_split), so a row's integer sum adds e's.
struct QItem {
    u32 w[8];
    u32 e[8];
    float s0, s1, m;
};

// 32 bytes at a 2-byte aligned address as 8 words (aligned loads + funnel shifts; the ninth word
// is only read when the address is not 4-byte aligned, so nothing past the data is touched).
DEV void ld32_a2(const u8* p, u32* w) {
    const u64 a = (u64)p;
    const u32* base = (const u32*)(a & ~(u64)3);
    const u32 sh = (u32)(a & 3);
    u32 v[9];
#pragma unroll
    for (u32 i = 0; i < 8; ++i) v[i] = base[i];
    v[8] = sh ? base[8] : 0u;
#pragma unroll
    for (u32 i = 0; i < 8; ++i) w[i] = funnel(v[i], v[i + 1], sh);
}

// Every type: SPLIT = false unless it has deq_split (see QItem).
struct IQ8_0 {  // {f16 d; i8 qs[32]}
    static constexpr u32 QK = 32, QB = 34, UMAX = 4, PF = 0;
    static constexpr bool PANEL = true;  // hip/quant.h, WlPanel
    static constexpr bool SPLIT = false;
    static constexpr bool NOMIN = FQ8_0::NOMIN, SAME = FQ8_0::SAME;  // as the matrix-core decoder
    DEV void deq(const u8* blk, u32, QItem& it) {
        it.s0 = it.s1 = load_f16(blk);
        it.m = 0.0f;
        ld32_a2(blk + 2, it.w);
    }
};

// Q8_0 regrouped at upload (the hip backend's DELTASPEC_HIP_Q8_REGROUP): each run of 16 blocks
// {f16 d; i8 qs[32]} of a row stored as the 16 scales, then the 16 qs arrays (544 bytes, as
// before; rows of K % 512 == 0 keep every qs array 32-byte aligned). A lane then reads its
// item's 32 values with two aligned 16-byte loads instead of nine 4-byte loads at a 2-byte
// offset: a warp's load of 32 consecutive 34-byte blocks touched ~9 lines per instruction,
// ~81 L1 passes per row and item round against ~19 here. Same values, same order: same bits.
struct IQ8_0G {  // {f16 d[16]; i8 qs[16][32]}
    static constexpr u32 QK = 512, QB = 544, UMAX = 4, PF = 0;
    static constexpr bool SPLIT = false;
    static constexpr bool NOMIN = FQ8_0::NOMIN, SAME = FQ8_0::SAME;  // as the matrix-core decoder
    DEV void deq(const u8* blk, u32 ib, QItem& it) {
        it.s0 = it.s1 = load_f16(blk + 2 * ib);
        it.m = 0.0f;
        const u32x4 a = *(const u32x4*)(blk + 32 + 32 * ib);
        const u32x4 b = *(const u32x4*)(blk + 48 + 32 * ib);
        it.w[0] = a.x, it.w[1] = a.y, it.w[2] = a.z, it.w[3] = a.w;
        it.w[4] = b.x, it.w[5] = b.y, it.w[6] = b.z, it.w[7] = b.w;
    }
};

struct IIQ4_XS {  // {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}
    // UMAX: U = 2 and 4 measured no faster on the H200 (r1u2/r2u2 with iq4_words: 9.0-9.3 ms
    // against 8.8 ms a step). With the split decode (deq_split) the 1-row kernels are latency-
    // bound instead, and the host picks U = 2 for them (q1_variant in src/backend/hip/mod.rs).
    static constexpr u32 QK = 256, QB = 136, UMAX = 1, PF = 0;
    static constexpr bool PANEL = true;  // hip/quant.h, WlPanel
    static constexpr bool NOMIN = FIQ4_XS::NOMIN, SAME = FIQ4_XS::SAME;  // as the matrix-core decoder
    // The item's scales into it and its four raw quant words into q (both decodes share them).
    DEV void head(const u8* blk, u32 ib, QItem& it, u32 (&q)[4]) {
        float s0, s1;
        FIQ4_XS::scales(blk, ib, s0, s1, it.m);  // the 8-byte header as one load
        it.s0 = s0;
        it.s1 = s1;
        const u32x2 a = *(const u32x2*)(blk + 8 + 16 * ib);
        const u32x2 b = *(const u32x2*)(blk + 16 + 16 * ib);
        q[0] = a.x, q[1] = a.y, q[2] = b.x, q[3] = b.y;
    }
    DEV void deq(const u8* blk, u32 ib, QItem& it) {
        u32 q[4];
        head(blk, ib, it, q);
        words(q, it);
    }
    DEV void words(const u32 (&q)[4], QItem& it) {
#pragma unroll
        for (u32 i = 0; i < 4; ++i) iq4_words(q[i], it.w[i], it.w[i + 4]);
    }
#if defined(__NVPTX__)
    // The split decode (iq4_words_split): fewer ALU instructions, two more dot products a word.
    static constexpr bool SPLIT = IQ4_REGROUPED;
    DEV void deq_split(const u8* blk, u32 ib, QItem& it) {
        u32 q[4];
        head(blk, ib, it, q);
        words_split(q, it);
    }
    DEV void words_split(const u32 (&q)[4], QItem& it) {
#pragma unroll
        for (u32 i = 0; i < 4; ++i) {
            u32 l[2], h[2];
            iq4_words_split(q[i], l, h);
            it.w[i] = l[0], it.e[i] = h[0], it.w[i + 4] = l[1], it.e[i + 4] = h[1];
        }
    }
#else
    static constexpr bool SPLIT = false;
#endif
    // The pipelined 1-row GEMV's split of deq: the item's loads (header and quant words, 6
    // registers) issued a stage ahead, decoded when the stage is used. Same values as deq.
    static constexpr bool RAW = true;
    struct Raw {
        u32x2 h, a, b;
    };
    DEV void raw(const u8* blk, u32 ib, Raw& r) {
        r.h = *(const u32x2*)blk;
        r.a = *(const u32x2*)(blk + 8 + 16 * ib);
        r.b = *(const u32x2*)(blk + 16 + 16 * ib);
    }
    template <bool SPLIT_>
    DEV void deq_raw(const Raw& r, u32 ib, QItem& it) {
        FIQ4_XS::scales_of(r.h, ib, it.s0, it.s1, it.m);
        const u32 q[4] = {r.a.x, r.a.y, r.b.x, r.b.y};
#if defined(__NVPTX__)
        if constexpr (SPLIT_) {
            words_split(q, it);
            return;
        }
#endif
        words(q, it);
    }
};

// Whether a type has the raw/deq_raw split the pipelined 1-row kernels need (IIQ4_XS only).
template <class Q, class = void>
struct QHasRaw {
    static constexpr bool v = false;
};
template <class Q>
struct QHasRaw<Q, decltype((void)Q::RAW)> {
    static constexpr bool v = Q::RAW;
};

struct IQ4_K {  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}
    static constexpr u32 QK = 256, QB = 144, UMAX = 4, PF = 0;
    static constexpr bool PANEL = true;  // hip/quant.h, WlPanel
    static constexpr bool SPLIT = false;
    static constexpr bool NOMIN = FQ4_K::NOMIN, SAME = FQ4_K::SAME;  // as the matrix-core decoder
    DEV void deq(const u8* blk, u32 j, QItem& it) {
        const float d = load_f16(blk), dmin = load_f16(blk + 2);
        const u64 slo = (u64)*(const u32*)(blk + 4) | ((u64)*(const u32*)(blk + 8) << 32);
        const u32 shi = *(const u32*)(blk + 12);
        u32 sc, m;
        scale_min_k4(j, slo, shi, &sc, &m);
        it.s0 = it.s1 = d * (float)sc;
        it.m = -dmin * (float)m;
        const u32x4 a = *(const u32x4*)(blk + 16 + 32 * (j / 2));
        const u32x4 b = *(const u32x4*)(blk + 32 + 32 * (j / 2));
        const u32 q[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (u32 i = 0; i < 8; ++i) it.w[i] = (q[i] >> (4 * (j % 2))) & 0x0f0f0f0fu;
    }
};

struct IQ5_K {  // {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
    static constexpr u32 QK = 256, QB = 176, UMAX = 2, PF = 0;  // 16 words per item
    static constexpr bool PANEL = true;  // hip/quant.h, WlPanel
    static constexpr bool SPLIT = false;
    static constexpr bool NOMIN = FQ5_K::NOMIN, SAME = FQ5_K::SAME;  // as the matrix-core decoder
    DEV void deq(const u8* blk, u32 j, QItem& it) {
        const float d = load_f16(blk), dmin = load_f16(blk + 2);
        const u64 slo = (u64)*(const u32*)(blk + 4) | ((u64)*(const u32*)(blk + 8) << 32);
        const u32 shi = *(const u32*)(blk + 12);
        u32 sc, m;
        scale_min_k4(j, slo, shi, &sc, &m);
        it.s0 = it.s1 = d * (float)sc;
        it.m = -dmin * (float)m;
        const u32x4 a = *(const u32x4*)(blk + 48 + 32 * (j / 2));
        const u32x4 b = *(const u32x4*)(blk + 64 + 32 * (j / 2));
        const u32x4 ha = *(const u32x4*)(blk + 16);
        const u32x4 hb = *(const u32x4*)(blk + 32);
        const u32 q[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        const u32 h[8] = {ha.x, ha.y, ha.z, ha.w, hb.x, hb.y, hb.z, hb.w};
#pragma unroll
        for (u32 i = 0; i < 8; ++i) {
            it.w[i] = ((q[i] >> (4 * (j % 2))) & 0x0f0f0f0fu) | (((h[i] >> j) & 0x01010101u) << 4);
        }
    }
};

struct IQ6_K {  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; u16 pad}, 4-byte aligned (Q6K_QB)
    static constexpr u32 QK = 256, QB = Q6K_QB, UMAX = 2, PF = 4;  // 18 words per item
    static constexpr bool PANEL = true;  // hip/quant.h, WlPanel
    static constexpr bool SPLIT = false;
    static constexpr bool NOMIN = FQ6_K::NOMIN, SAME = FQ6_K::SAME;  // as the matrix-core decoder
    DEV void deq(const u8* blk, u32 sub, QItem& it) {
        const u32 half = sub / 4, i = sub % 4;
        FQ6_K::scales(blk, sub, it.s0, it.s1, it.m);
        u32 ql[8], qh[8];
        const u8* pl = blk + 64 * half + 32 * (i % 2);
        const u8* ph = blk + 128 + 32 * half;
#pragma unroll
        for (u32 e = 0; e < 8; ++e) ql[e] = *(const u32*)(pl + 4 * e), qh[e] = *(const u32*)(ph + 4 * e);
#pragma unroll
        for (u32 e = 0; e < 8; ++e) {
            const u32 lo = (ql[e] >> (4 * (i / 2))) & 0x0f0f0f0fu;
            const u32 hi = ((qh[e] >> (2 * i)) & 0x03030303u) << 4;
            it.w[e] = sub32_bytes(lo | hi);
        }
    }
};

// 32 values of x → int8 with one scale: one warp per 32-value block, QG_WARPS blocks per CTA.
// GATE: the value is x · sigmoid(g) (the attention output gate folded in, the same float
// operations as the sigmoid_mul kernel, so the quantized values are the unfused ones).
template <bool GATE>
DEV void quantize_q8_impl(const float* __restrict__ X, const float* __restrict__ G, i8* __restrict__ XQ,
                          float* __restrict__ XD, float* __restrict__ XS, u32 N, u32 K) {
    const u32 nb = K / 32;
    const u64 b = (u64)bid_x() * QG_WARPS + tid_x() / WARP;  // block index over [N, nb]
    if (b >= (u64)N * nb) return;
    float x = X[b * 32 + lane_id()];
    if (GATE) x = x * ds_sigmoid(G[b * 32 + lane_id()]);
    q8_store_block(x, b, XQ, XD, XS);
}

KERNEL(QG_THREADS)
quantize_q8(const float* __restrict__ X, i8* __restrict__ XQ, float* __restrict__ XD, float* __restrict__ XS,
            u32 N, u32 K) {
    grid_begin();
    quantize_q8_impl<false>(X, nullptr, XQ, XD, XS, N, K);
}

KERNEL(QG_THREADS)
quantize_q8_gate(const float* __restrict__ X, const float* __restrict__ G, i8* __restrict__ XQ,
                 float* __restrict__ XD, float* __restrict__ XS, u32 N, u32 K) {
    grid_begin();
    quantize_q8_impl<true>(X, G, XQ, XD, XS, N, K);
}

// Items in flight per lane: enough weight bytes outstanding to cover memory latency at decode
// widths, fewer where the NT·R accumulators already fill the registers.
// UMAX: the type's own cap (its raw words per item × U × R must fit gfx11's registers unspilled).
constexpr u32 qgemv_unroll(u32 nt, u32 r, u32 umax) {
    const u32 u = nt * r <= 2 ? 4 : nt * r <= 4 ? 2 : 1;
    return u < umax ? u : umax;
}

// One decoded 32-value item of R weight rows against NT activation rows (block s of each row),
// combined by q8c_same (SAME types: one scale per item) or q8c_split (hip/q8act.h), the float
// operations hip/qmma.hip repeats. NOMIN: the type has no block minimum (m = 0), XS is not read.
// Words v[0..4] of an item against activation words a, v[4..8] against b, onto s0 and s1.
DEV void qgemv_dots(const u32 (&v)[8], const u32x4& a, const u32x4& b, i32& s0, i32& s1) {
    s0 = dot4_i8(v[0], a.x, s0);
    s0 = dot4_i8(v[1], a.y, s0);
    s0 = dot4_i8(v[2], a.z, s0);
    s0 = dot4_i8(v[3], a.w, s0);
    s1 = dot4_i8(v[4], b.x, s1);
    s1 = dot4_i8(v[5], b.y, s1);
    s1 = dot4_i8(v[6], b.z, s1);
    s1 = dot4_i8(v[7], b.w, s1);
}

// One activation row's item: its 32 int8 values, scale and scaled sum (XS unread for NOMIN).
struct QX {
    u32x4 a, b;
    float xd, xs;
};
template <bool NOMIN>
DEV QX qgemv_x(const i8* __restrict__ XQ, const float* __restrict__ XD, const float* __restrict__ XS, u64 xb) {
    QX x;
    x.a = *(const u32x4*)(XQ + xb * 32);
    x.b = *(const u32x4*)(XQ + xb * 32 + 16);
    x.xd = XD[xb];
    x.xs = NOMIN ? 0.0f : XS[xb];
    return x;
}

// One weight row's item against one activation row's, onto acc. SPLIT: the items carry e[] too
// (QItem), summed with w[] into the same integers.
template <bool NOMIN, bool SAME, bool SPLIT = false>
DEV float qgemv_item_one(const QItem& it, const QX& x, float acc) {
    // Half 0 accumulates onto the bias bits (q8c_float), half 1 onto 0: two independent
    // chains of 4 dot products (8 with SPLIT: e[] continues the chains, no adds).
    i32 s0 = Q8C_BIAS_BITS, s1 = SAME ? 0 : Q8C_BIAS_BITS;
    qgemv_dots(it.w, x.a, x.b, s0, s1);
    if constexpr (SPLIT) qgemv_dots(it.e, x.a, x.b, s0, s1);
    if constexpr (SAME) return q8c_same<NOMIN>(acc, x.xd, it.s0, q8c_float(s0 + s1), it.m, x.xs);
    return q8c_split<NOMIN>(acc, x.xd, it.s0, q8c_float(s0), it.s1, q8c_float(s1), it.m, x.xs);
}
// Activation row t's item x against the R weight rows' items, onto acc[.][t].
template <u32 NT, u32 R, bool NOMIN, bool SAME, bool SPLIT = false>
DEV void qgemv_item_row(const QItem (&it)[R], const QX& x, u32 t, float (&acc)[R][NT]) {
#pragma unroll
    for (u32 r = 0; r < R; ++r) acc[r][t] = qgemv_item_one<NOMIN, SAME, SPLIT>(it[r], x, acc[r][t]);
}

// Every activation row's item is loaded where it is used (an NT-row tile holding all of them
// at once would not fit its registers).
template <u32 NT, u32 R, bool NOMIN, bool SAME, bool SPLIT = false>
DEV void qgemv_item(const QItem (&it)[R], const i8* __restrict__ XQ, const float* __restrict__ XD,
                    const float* __restrict__ XS, const u32 (&xrow)[NT], u32 nb, u32 s, float (&acc)[R][NT]) {
#pragma unroll
    for (u32 t = 0; t < NT; ++t)
        qgemv_item_row<NT, R, NOMIN, SAME, SPLIT>(it, qgemv_x<NOMIN>(XQ, XD, XS, (u64)xrow[t] * nb + s), t, acc);
}

// L2 prefetch of the weights Q::PF rounds ahead. A round is the 32 items the warp's lanes take
// at once: 32 / IPB whole blocks, RB contiguous bytes of each row, so a few lanes hint its lines.
// Hints write no register: the warp keeps PF · RB bytes per row requested beyond its loads
// without the registers of a deeper unroll. Measured per type (H200, ncu kernel durations of the
// 8-layer 27B step): Q6_K (128 registers, 4 blocks per SM) lm_head 380 -> 342 us with PF = 4;
// IQ4_XS no faster (gate/up 35.9 -> 36.6 us; 72 -> 95 registers), so PF = 0 there and for the
// types not measured. Round 0 (PF = 0: only it) is hinted before grid_begin, so its fetch
// overlaps the previous kernel's tail. No value depends on a hint.
// A round of 32 items is wl_round_bytes (hip/quant.h): 32 / IPB whole blocks of a row.
static_assert(WARP == 32, "a round is the 32 items of one warp's lanes");
// Rounds of each row a warp hints before grid_begin (at least Q::PF): under PDL the warps that
// are resident during the previous kernel's tail then have that much of their rows on the way.
#ifndef DS_PF0
#define DS_PF0 1
#endif

template <class Q, bool SPLIT>
DEV void qgemv_deq(const u8* blk, u32 ib, QItem& it) {
    if constexpr (SPLIT) {
        Q::deq_split(blk, ib, it);
    } else {
        Q::deq(blk, ib, it);
    }
}

template <class Q, u32 R>
DEV void qgemv_prefetch(const u8* const (&wrow)[R], u32 round, u32 nb, u32 lane) {
    constexpr u32 IPB = Q::QK / 32, RB = wl_round_bytes<Q>();
    if (lane * 128 < RB && (u64)round * RB + lane * 128 < (u64)(nb / IPB) * Q::QB) {
        const u64 off = (u64)round * wl_round_stride<Q>() + lane * 128;
#pragma unroll
        for (u32 r = 0; r < R; ++r) prefetch_l2(wrow[r] + off);
    }
}

// The DeltaNet conv step folded into a 1-row `qgemv4_*` launch (its segment 0, the qkv
// projection; the host folds it only there, with K = 4 and one input row): conv channel c is
// weight row c, so the warp that finishes row c runs conv_step's update for it (conv4_silu: the
// same float operations on the same value) and writes the conv output y[c] and the new window
// to state [3, M] (oldest row first). The raw projection is still written to Y. `conv`: whether
// this warp's rows take it.
struct QConv {
    const float* w;
    float* state;
    float* y;
    u32 C;  // channels: segment 0's rows
};

// Segment 0's output written as the two halves of a view with rows of 2·half values (the
// attention projection's per-head query and gate, which two SliceLast nodes would copy out):
// row j of input row n goes to a (j % 2·half < half) or b, at n · M/2 + (j / 2·half) · half +
// j % half. half = 0: plain rows. Tiles up to QSPLIT_MAX_NT rows only (mirrored by
// kernels::QSPLIT_MAX_TILE): in the 8-row tile the epilogue made gfx1100 spill.
constexpr u32 QSPLIT_MAX_NT = 4;
struct QSplit {
    float* a;
    float* b;
    u32 half;
};

// Whether a type's 1-row qgemv4 has the folded conv epilogue. Not Q4_K or Q5_K: there it cost
// ptxas ~20 registers (Q4_K 80 -> 102, fewer resident warps), so their conv steps stay separate
// launches (mirrored by kernels::QCONV_TYPES).
template <class Q>
struct QConvFold {
    static constexpr bool v = true;
};
template <>
struct QConvFold<IQ4_K> {
    static constexpr bool v = false;
};
template <>
struct QConvFold<IQ5_K> {
    static constexpr bool v = false;
};

// Output o of weight row j and input row n: into Y[N, M], or into segment 0's query/gate halves
// (QSplit) where sp.half != 0 (the caller keeps that to tiles of at most QSPLIT_MAX_NT rows).
DEV void qgemv_store(float* __restrict__ Y, const QSplit& sp, u32 M, u32 n, u32 j, float o) {
    if (sp.half != 0) {
        const u32 w = 2 * sp.half, c = j % w;
        float* h = c < sp.half ? sp.a : sp.b;
        h[(u64)n * (M / 2) + (j / w) * sp.half + c % sp.half] = o;
    } else {
        Y[(u64)n * M + j] = o;
    }
}

// The folded conv's update of channel `row` with its projection o (QConv).
DEV void qgemv_conv_row(const QConv& cv, u32 row, float o) {
    // The channel and C through an empty asm: the addresses are then computed here, not
    // hoisted above the K loop as invariants (8 more registers held through it).
    u32 C = cv.C;
    opaque_u32(C);
    opaque_u32(row);
    const u64 c = row;
    const float* w = cv.w + c * 4;
    float* st = cv.state + c;
    const float h0 = st[0], h1 = st[C], h2 = st[2 * (u64)C];
    cv.y[c] = conv4_silu(w[0], w[1], w[2], w[3], h0, h1, h2, o);
    st[0] = h1;
    st[C] = h2;
    st[2 * (u64)C] = o;
}

// A folded conv's taps and window hinted into L2 (lane r < rows: channel m0 + r), so the loads
// at the end find them there (loaded early, they held 8 more registers through the loop).
DEV void qgemv_conv_hint(const QConv& cv, u32 m0, u32 rows, u32 M, u32 lane) {
    if (lane < rows && m0 + lane < M) {
        const u64 c = m0 + lane;
        prefetch_l2(cv.w + c * 4);
#pragma unroll
        for (u32 i = 0; i < 3; ++i) prefetch_l2(cv.state + i * (u64)cv.C + c);
    }
}

// The rows of warp `wi`. Plain (GLU = false): weight rows [wi·R, wi·R + R) of W into Y[N, M].
// GLU: the warp owns R / 2 output columns j and decodes gate row j of W and up row j of WU
// together, writing silu(gate) · up (the swiglu kernel's float operations on the same sums, so
// the result equals matmul → matmul → swiglu bit for bit).
template <class Q, u32 NT, u32 R, bool GLU, u32 UF = 0, bool PIPE = false>
DEV void qgemv(const u8* __restrict__ W, const u8* __restrict__ WU, const i8* __restrict__ XQ,
               const float* __restrict__ XD, const float* __restrict__ XS, float* __restrict__ Y, u32 N, u32 K,
               u32 M, u64 row_bytes, u32 wi, QConv cv = QConv{nullptr, nullptr, nullptr, 0}, bool conv = false,
               QSplit sp = QSplit{nullptr, nullptr, 0}) {
    constexpr u32 IPB = Q::QK / 32;
    constexpr u32 RO = GLU ? R / 2 : R;  // output columns per warp
    static_assert(!GLU || R % 2 == 0, "a GLU warp owns gate/up row pairs");
    const u32 lane = lane_id();
    const u32 m0 = wi * RO;
    const u32 nb = K / 32;
    const u8* wrow[R];
#pragma unroll
    for (u32 r = 0; r < R; ++r) {
        const u32 j = m0 + r % RO;
        wrow[r] = (GLU && r >= RO ? WU : W) + wl_row<Q>(j < M ? j : M - 1, K, row_bytes);
    }
    constexpr u32 rs = wl_round_stride<Q>();  // bytes a row advances per round of 32 items
    // Weights are never written by a kernel, so they may be hinted before the wait.
    if (m0 < M) {
        constexpr u32 PF1 = Q::PF ? Q::PF : 1;
#pragma unroll
        for (u32 j = 0; j < PF1; ++j) qgemv_prefetch<Q, R>(wrow, j, nb, lane);
        if constexpr (DS_PF0 > PF1) {
            // Rolled and bounded by the row's rounds, because unrolled, ptxas kept addresses live
            // into the loop (qgemv4_iq4_xs_1 64 -> 72 registers, qgemv_q6_k_1 96 -> 114).
            const u32 rounds = (nb + WARP - 1) / WARP;
#pragma unroll 1
            for (u32 j = PF1; j < DS_PF0 && j < rounds; ++j) qgemv_prefetch<Q, R>(wrow, j, nb, lane);
        }
    }
    grid_begin();
    if (m0 >= M) return;  // the whole warp: no block-wide barrier below
    constexpr bool CONV = NT == 1 && !GLU && QConvFold<Q>::v;
    if constexpr (CONV) {
        if (conv) qgemv_conv_hint(cv, m0, RO, M, lane);
    }
    for (u32 n0 = 0; n0 < N; n0 += NT) {
        u32 xrow[NT];
#pragma unroll
        for (u32 t = 0; t < NT; ++t) xrow[t] = n0 + t < N ? n0 + t : N - 1;
        float acc[R][NT];
#pragma unroll
        for (u32 r = 0; r < R; ++r)
#pragma unroll
            for (u32 t = 0; t < NT; ++t) acc[r][t] = 0.0f;
        // U items per lane in flight: every weight load of a group is issued before the first
        // one is used (a single item per iteration left the 1-row GEMV latency-bound at ~1.8 TB/s).
        // The items are still accumulated in increasing s, so the sums are the same for every U.
        // UF: a forced U (the 1-row variants below); 0: the type's default for this tile.
        constexpr u32 U = UF ? UF : qgemv_unroll(NT, R, Q::UMAX);
        // The split decode only where no other activation row shares an item's decode.
        constexpr bool SPLIT = Q::SPLIT && NT == 1;
        // Item s of a row sits in block s / IPB at index s % IPB; with s = lane + 32·j the
        // index is the lane's for every j (IPB divides 32) and the block advances by rs bytes a
        // round, so each row is a running pointer: no 64-bit address product per item, and the
        // index's shifts and offsets are loop-invariant.
        const u32 ib = lane % IPB;
        const u8* p[R];
#pragma unroll
        for (u32 r = 0; r < R; ++r) p[r] = wrow[r] + (u64)(lane / IPB) * Q::QB;
        u32 s = lane;
        if constexpr (PIPE) {
            static_assert(NT == 1 && QHasRaw<Q>::v, "the pipelined GEMV is a 1-row kernel of a type with raw()");
            // Stages of U rounds: the next stage's weight words (raw, undecoded) are loaded
            // before the current stage is decoded and used, so the warp keeps a stage of loads in
            // flight while it computes (the loop below waits for its loads, then computes with
            // none outstanding); the activations (L2-resident) are read where used, as there.
            // Items still accumulate in increasing s: same bits.
            using Raw = typename Q::Raw;
            Raw wa[U][R], wb[U][R];
            const u64 xbase = (u64)xrow[0] * nb;
            u32 sl = lane;  // the first item of the next stage to load
            auto load = [&](Raw(&w)[U][R]) {
#pragma unroll
                for (u32 u = 0; u < U; ++u) {
                    if (sl + u * WARP < nb) {
#pragma unroll
                        for (u32 r = 0; r < R; ++r) Q::raw(p[r] + u * rs, ib, w[u][r]);
                    }
                }
#pragma unroll
                for (u32 r = 0; r < R; ++r) p[r] += U * rs;
                sl += U * WARP;
            };
            auto use = [&](const Raw(&w)[U][R]) {
#pragma unroll
                for (u32 u = 0; u < U; ++u) {
                    if (s + u * WARP < nb) {
                        // One row's item decoded at a time: fewer words live than decoding all R.
                        const QX x = qgemv_x<Q::NOMIN>(XQ, XD, XS, xbase + s + u * WARP);
#pragma unroll
                        for (u32 r = 0; r < R; ++r) {
                            QItem it;
                            Q::template deq_raw<SPLIT>(w[u][r], ib, it);
                            acc[r][0] = qgemv_item_one<Q::NOMIN, Q::SAME, SPLIT>(it, x, acc[r][0]);
                        }
                    }
                }
                s += U * WARP;
            };
            load(wa);
            while (s < nb) {
                load(wb);
                use(wa);
                if (s >= nb) break;
                load(wa);
                use(wb);
            }
        }
        for (; !PIPE && s + (U - 1) * WARP < nb; s += U * WARP) {
            if constexpr (Q::PF > 0) {
#pragma unroll
                for (u32 u = 0; u < U; ++u) qgemv_prefetch<Q, R>(wrow, s / WARP + Q::PF + u, nb, lane);
            }
            QItem it[U][R];
#pragma unroll
            for (u32 u = 0; u < U; ++u)
#pragma unroll
                for (u32 r = 0; r < R; ++r) qgemv_deq<Q, SPLIT>(p[r] + u * rs, ib, it[u][r]);
#pragma unroll
            for (u32 u = 0; u < U; ++u)
                qgemv_item<NT, R, Q::NOMIN, Q::SAME, SPLIT>(it[u], XQ, XD, XS, xrow, nb, s + u * WARP, acc);
#pragma unroll
            for (u32 r = 0; r < R; ++r) p[r] += U * rs;
        }
        for (; !PIPE && s < nb; s += WARP) {
            if constexpr (Q::PF > 0) qgemv_prefetch<Q, R>(wrow, s / WARP + Q::PF, nb, lane);
            QItem it[R];
#pragma unroll
            for (u32 r = 0; r < R; ++r) qgemv_deq<Q, SPLIT>(p[r], ib, it[r]);
            qgemv_item<NT, R, Q::NOMIN, Q::SAME, SPLIT>(it, XQ, XD, XS, xrow, nb, s, acc);
#pragma unroll
            for (u32 r = 0; r < R; ++r) p[r] += rs;
        }
        float out[RO];  // row m0 + r's output of input row n0 (the conv's input where folded)
#pragma unroll
        for (u32 r = 0; r < RO; ++r)
#pragma unroll
            for (u32 t = 0; t < NT; ++t) {
                const float v = warp_sum(acc[r][t]);
                const float o = GLU ? ds_silu(v) * warp_sum(acc[GLU ? r + RO : r][t]) : v;
                if (lane == 0 && m0 + r < M && n0 + t < N) {
                    constexpr bool HALVES = !GLU && NT <= QSPLIT_MAX_NT;
                    qgemv_store(Y, HALVES ? sp : QSplit{nullptr, nullptr, 0}, M, n0 + t, m0 + r, o);
                }
                if (t == 0) out[r] = o;
            }
        if constexpr (CONV) {
            // Every lane holds every row's output (warp_sum's butterfly); lane r updates row m0 + r.
            if (conv && lane < RO && m0 + lane < M) {
                float o = out[0];
#pragma unroll
                for (u32 r = 1; r < RO; ++r) o = lane == r ? out[r] : o;
                qgemv_conv_row(cv, m0 + lane, o);
            }
        }
    }
}

// The segment of a fused launch this block computes, with RPB rows a block: blocks are dealt to
// segments by their cumulative block counts. `first`: segment 0 (which may fold the conv step
// or be written as halves). (The pointers stay kernel parameters: selecting null for the other
// segments held them in registers through the whole loop.)
struct QSeg {
    const u8* W;
    float* Y;
    u32 M, b;
    bool first;
};
template <u32 RPB>
DEV QSeg qgemv_pick(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1, const u8* W2, float* Y2,
                    u32 M2, const u8* W3, float* Y3, u32 M3) {
    QSeg s{W0, Y0, M0, bid_x(), true};
    const u32 b0 = (M0 + RPB - 1) / RPB, b1 = (M1 + RPB - 1) / RPB, b2 = (M2 + RPB - 1) / RPB;
    if (s.b >= b0) {
        s = QSeg{W1, Y1, M1, s.b - b0, false};
        if (s.b >= b1) {
            s = QSeg{W2, Y2, M2, s.b - b1, false};
            if (s.b >= b2) s = QSeg{W3, Y3, M3, s.b - b2, false};
        }
    }
    return s;
}

// Up to four matmuls of one quantized input in one launch (a fused group: q/k/v, the DeltaNet
// projections, gate/up): blocks are dealt to segments by their cumulative block counts, each
// segment's blocks map to rows exactly as in its own launch (so results are bit-identical).
// Unused segments have M = 0. The signature is fixed so a captured launch stays valid.
// CW/CS/CY: a conv folded into segment 0 (QConv; null CW: none). SA/SB/SH: segment 0 written as
// halves (QSplit; SH = 0: not).
template <class Q, u32 NT, u32 R = qgemv_rows(NT), u32 UF = 0, bool PIPE = false>
DEV void qgemv_seg(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1, const u8* W2, float* Y2,
                   u32 M2, const u8* W3, float* Y3, u32 M3, const i8* XQ, const float* XD, const float* XS, u32 N,
                   u32 K, u64 row_bytes, const float* CW, float* CS, float* CY, float* SA, float* SB, u32 SH) {
    const QSeg s = qgemv_pick<R * QG_WARPS>(W0, Y0, M0, W1, Y1, M1, W2, Y2, M2, W3, Y3, M3);
    qgemv<Q, NT, R, false, UF, PIPE>(s.W, nullptr, XQ, XD, XS, s.Y, N, K, s.M, row_bytes,
                                     s.b * QG_WARPS + tid_x() / WARP, QConv{CW, CS, CY, M0},
                                     CW != nullptr && s.first, QSplit{SA, SB, s.first ? SH : 0u});
}

#define DS_QGEMV(name, Q, NT)                                                                             \
    KERNEL(QG_THREADS)                                                                                    \
    qgemv_##name##_##NT(const u8* W, const i8* XQ, const float* XD, const float* XS, float* Y, u32 N,       \
                        u32 K, u32 M, u64 row_bytes) {                                                    \
        qgemv<Q, NT, qgemv_rows(NT), false>(W, nullptr, XQ, XD, XS, Y, N, K, M, row_bytes,                \
                                            bid_x() * QG_WARPS + tid_x() / WARP);                         \
    }                                                                                                     \
    KERNEL(QG_THREADS)                                                                                    \
    qgemv4_##name##_##NT(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1, const u8* W2,    \
                         float* Y2, u32 M2, const u8* W3, float* Y3, u32 M3, const i8* XQ, const float* XD, \
                         const float* XS, u32 N, u32 K, u64 row_bytes, const float* CW, float* CS,        \
                         float* CY, float* SA, float* SB, u32 SH) {                                       \
        qgemv_seg<Q, NT>(W0, Y0, M0, W1, Y1, M1, W2, Y2, M2, W3, Y3, M3, XQ, XD, XS, N, K, row_bytes, CW, CS, \
                         CY, SA, SB, SH);                                                                 \
    }
// The gate/up pair holds two weight rows per warp; tiles up to 8 (a 16-row tile spills on gfx11
// for Q6_K; at 16 rows the lowering runs gate/up as qgemv4 plus the swiglu kernel instead).
#define DS_QGEMV_GLU(name, Q, NT)                                                                      \
    KERNEL(QG_THREADS)                                                                                 \
    qgemv_glu_##name##_##NT(const u8* WG, const u8* WU, const i8* XQ, const float* XD, const float* XS,  \
                            float* Y, u32 N, u32 K, u32 M, u64 row_bytes) {                            \
        qgemv<Q, NT, 2, true>(WG, WU, XQ, XD, XS, Y, N, K, M, row_bytes,                               \
                              bid_x() * QG_WARPS + tid_x() / WARP);                                    \
    }
// A wide variant: R weight rows per warp share each activation load (verify widths spend most
// of their time loading activations: NT · 40 bytes per 32-value item against ~18 bytes of weights).
// Every row is accumulated in the same order as in the R = qgemv_rows(NT) kernel, so results are
// bit-identical. NVIDIA only (its 255-register budget holds R · NT accumulators; gfx11 spills).
#define DS_QGEMV_WIDE(name, Q, NT, R)                                                                       \
    KERNEL(QG_THREADS)                                                                                      \
    qgemv_##name##_##NT##x##R(const u8* W, const i8* XQ, const float* XD, const float* XS, float* Y, u32 N, \
                              u32 K, u32 M, u64 row_bytes) {                                                \
        qgemv<Q, NT, R, false>(W, nullptr, XQ, XD, XS, Y, N, K, M, row_bytes,                               \
                               bid_x() * QG_WARPS + tid_x() / WARP);                                        \
    }
#define DS_QGEMV_TYPE(name, Q) \
    DS_QGEMV(name, Q, 1)       \
    DS_QGEMV(name, Q, 2)       \
    DS_QGEMV(name, Q, 4)       \
    DS_QGEMV(name, Q, 8)       \
    DS_QGEMV(name, Q, 16)      \
    DS_QGEMV_GLU(name, Q, 1)   \
    DS_QGEMV_GLU(name, Q, 2)   \
    DS_QGEMV_GLU(name, Q, 4)   \
    DS_QGEMV_GLU(name, Q, 8)

// Every weight type with an integer path: X(name, struct).
#define DS_FOR_EACH_QTYPE(X) \
    X(q8_0, IQ8_0)           \
    X(q8_0g, IQ8_0G)         \
    X(q4_k, IQ4_K)           \
    X(q5_k, IQ5_K)           \
    X(q6_k, IQ6_K)           \
    X(iq4_xs, IIQ4_XS)

DS_FOR_EACH_QTYPE(DS_QGEMV_TYPE)

#if !defined(__AMDGPU__)
// 1-row variants with R weight rows per warp and U items in flight per lane (plain and 4-segment),
// and U for the gate/up pair: named qgemv_<type>_1r<R>u<U>, qgemv4_<type>_1r<R>u<U>,
// qgemv_glu_<type>_1u<U>. Same per-lane order as the default kernels (bit-identical); the
// lowering picks one per weight shape (kernels::q1_variant). Mirrored by kernels::Q1_VARIANTS.
// L: the name's letter, u (U items in flight) or p (pipelined, PIPE: stages of U rounds).
#define DS_QGEMV1_RV(name, Q, R, U, L, PIPE)                                                                \
    KERNEL(QG_THREADS)                                                                                      \
    qgemv_##name##_1r##R##L##U(const u8* W, const i8* XQ, const float* XD, const float* XS, float* Y, u32 N, \
                               u32 K, u32 M, u64 row_bytes) {                                               \
        qgemv<Q, 1, R, false, U, PIPE>(W, nullptr, XQ, XD, XS, Y, N, K, M, row_bytes,                       \
                                       bid_x() * QG_WARPS + tid_x() / WARP);                                \
    }                                                                                                       \
    KERNEL(QG_THREADS)                                                                                      \
    qgemv4_##name##_1r##R##L##U(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1,            \
                                const u8* W2, float* Y2, u32 M2, const u8* W3, float* Y3, u32 M3,           \
                                const i8* XQ, const float* XD, const float* XS, u32 N, u32 K, u64 row_bytes, \
                                const float* CW, float* CS, float* CY, float* SA, float* SB, u32 SH) {      \
        qgemv_seg<Q, 1, R, U, PIPE>(W0, Y0, M0, W1, Y1, M1, W2, Y2, M2, W3, Y3, M3, XQ, XD, XS, N, K, row_bytes, \
                                    CW, CS, CY, SA, SB, SH);                                                \
    }
#define DS_QGEMV1_GLU_V(name, Q, U, L, PIPE)                                                           \
    KERNEL(QG_THREADS)                                                                                 \
    qgemv_glu_##name##_1##L##U(const u8* WG, const u8* WU, const i8* XQ, const float* XD, const float* XS, \
                               float* Y, u32 N, u32 K, u32 M, u64 row_bytes) {                         \
        qgemv<Q, 1, 2, true, U, PIPE>(WG, WU, XQ, XD, XS, Y, N, K, M, row_bytes,                       \
                                      bid_x() * QG_WARPS + tid_x() / WARP);                            \
    }
#define DS_QGEMV1_RU(name, Q, R, U) DS_QGEMV1_RV(name, Q, R, U, u, false)
#define DS_QGEMV1_GLU_U(name, Q, U) DS_QGEMV1_GLU_V(name, Q, U, u, false)
#define DS_QGEMV1_TYPE(name, Q)   \
    DS_QGEMV1_RU(name, Q, 1, 1)   \
    DS_QGEMV1_RU(name, Q, 1, 2)   \
    DS_QGEMV1_RU(name, Q, 1, 4)   \
    DS_QGEMV1_RU(name, Q, 2, 1)   \
    DS_QGEMV1_RU(name, Q, 2, 2)   \
    DS_QGEMV1_RU(name, Q, 2, 4)   \
    DS_QGEMV1_RU(name, Q, 4, 1)   \
    DS_QGEMV1_RU(name, Q, 4, 2)   \
    DS_QGEMV1_GLU_U(name, Q, 1)   \
    DS_QGEMV1_GLU_U(name, Q, 2)   \
    DS_QGEMV1_GLU_U(name, Q, 4)
DS_FOR_EACH_QTYPE(DS_QGEMV1_TYPE)

// The pipelined 1-row variants (qgemv's PIPE: a stage of U rounds loaded while the previous one
// is used), for the types with raw(): qgemv_<type>_1r<R>p<U>, qgemv4_<type>_1r<R>p<U>,
// qgemv_glu_<type>_1p<U>. Bit-identical to the others. Mirrored by kernels::Q1_PIPE_*.
#define DS_QGEMV1_RP(name, Q, R, U) DS_QGEMV1_RV(name, Q, R, U, p, true)
#define DS_QGEMV1_GLU_P(name, Q, U) DS_QGEMV1_GLU_V(name, Q, U, p, true)
#define DS_QGEMV1_PIPE_TYPE(name, Q) \
    DS_QGEMV1_RP(name, Q, 1, 1)      \
    DS_QGEMV1_RP(name, Q, 1, 2)      \
    DS_QGEMV1_RP(name, Q, 2, 1)      \
    DS_QGEMV1_GLU_P(name, Q, 1)      \
    DS_QGEMV1_GLU_P(name, Q, 2)
DS_QGEMV1_PIPE_TYPE(iq4_xs, IIQ4_XS)

// The staged 1-row kernels: qgemv_<type>_1t<S> and the gate/up pair qgemv_glu_<type>_1t<S>
// (`DELTASPEC_HIP_Q1_SMALL=t<S>`, `DELTASPEC_HIP_Q1_GLU=t<S>`). A block owns QT_COLS output
// rows (columns of the pair), 2 per warp, and streams its weight rows round by round through S
// shared-memory stages: thread 0 issues each round's run of QT_COLS · RB bytes per matrix (one
// bulk copy where a panel holds the block's rows) and every warp decodes its rows' items from
// the stage. Why: a register-loading warp keeps only a round or two of its rows in flight, and
// a single 95 MB read of that kind reaches ~2.8 TB/s at best on an H100 (session 32's probe)
// against ~3.15 for a copy; the copy engine keeps S rounds of the whole block in flight with no
// registers, and the first S rounds are requested before grid_begin (weights are never
// written), so they stream during the previous kernel's tail. Each lane still accumulates
// items s = lane, lane + 32, ... of each row with the same decode and float steps as the
// pipelined kernel (deq_raw, qgemv_item_one), then the same warp_sum (and silu · up): the same
// bits as every other 1-row and verify kernel. Mirrored by kernels::Q1_STAGES and
// kernels::Q1_STAGED_ROWS.
constexpr u32 QT_COLS = 8;
template <class Q, u32 S, bool GLU>
DEV void qgemv_staged(const u8* __restrict__ WG, const u8* __restrict__ WU, const i8* __restrict__ XQ,
                      const float* __restrict__ XD, const float* __restrict__ XS, float* __restrict__ Y, u32 K,
                      u32 M, u64 row_bytes, u32 b, QConv cv = QConv{nullptr, nullptr, nullptr, 0},
                      bool conv = false, QSplit sp = QSplit{nullptr, nullptr, 0}) {
    static_assert(QT_COLS == 2 * QG_WARPS, "two output rows per warp");
    constexpr u32 IPB = Q::QK / 32, RB = wl_round_bytes<Q>(), RS = wl_round_stride<Q>();
    constexpr u32 MATS = GLU ? 2 : 1, RW = 2 * MATS;  // matrices; weight rows per warp
    constexpr u32 PIECE = QT_COLS * RB, STAGE = MATS * PIECE;  // one matrix's rows of a round; all
    static_assert(RB % 16 == 0, "bulk copies move multiples of 16 bytes");
    // The block's rows of a round are one run when a panel holds them (panels are padded to
    // whole panels, so the last block's run stays inside the matrix).
    constexpr bool RUN = WlPanel<Q>::v && DS_WL_G % QT_COLS == 0;
    constexpr bool SPLIT = Q::SPLIT;
    alignas(128) __shared__ u8 stage[S][STAGE];
    __shared__ u64 bar[S];
    const u32 tid = tid_x(), lane = lane_id(), lc = 2 * (tid / WARP);
    const u32 c0 = b * QT_COLS, nb = K / 32, nr = (nb + WARP - 1) / WARP;
    auto issue = [&](u32 k) {  // round k into stage k % S (thread 0)
        u64* b = &bar[k % S];
        mbar_expect(b, STAGE);
#pragma unroll
        for (u32 m = 0; m < MATS; ++m) {
            const u8* W = m ? WU : WG;
            u8* dst = stage[k % S] + m * PIECE;
            if constexpr (RUN) {
                bulk_copy(dst, W + wl_row<Q>(c0, K, row_bytes) + (u64)k * RS, PIECE, b);
            } else {
                for (u32 r = 0; r < QT_COLS; ++r) {
                    const u32 j = c0 + r < M ? c0 + r : M - 1;
                    bulk_copy(dst + r * RB, W + wl_row<Q>(j, K, row_bytes) + (u64)k * RS, RB, b);
                }
            }
        }
    };
    if (tid == 0) {
        for (u32 i = 0; i < S; ++i) mbar_init(&bar[i]);
        for (u32 k = 0; k < S && k < nr; ++k) issue(k);
    }
    sync_block();  // the barriers are initialised before anyone waits on them
    grid_begin();
    constexpr bool CONV = !GLU && QConvFold<Q>::v;
    if constexpr (CONV) {
        if (conv) qgemv_conv_hint(cv, c0 + lc, 2, M, lane);
    }
    const u32 ib = lane % IPB;
    float acc[RW];  // row lc, lc + 1 (of the gate, then of the up matrix)
#pragma unroll
    for (u32 r = 0; r < RW; ++r) acc[r] = 0.0f;
    for (u32 k = 0; k < nr; ++k) {
        mbar_wait(&bar[k % S], (k / S) & 1);
        const u32 s = k * WARP + lane;
        if (s < nb) {
            const QX x = qgemv_x<Q::NOMIN>(XQ, XD, XS, s);
            const u8* st = stage[k % S] + (lane / IPB) * Q::QB;
#pragma unroll
            for (u32 r = 0; r < RW; ++r) {
                typename Q::Raw raw;
                Q::raw(st + (r / 2) * PIECE + (lc + r % 2) * RB, ib, raw);
                QItem it;
                Q::template deq_raw<SPLIT>(raw, ib, it);
                acc[r] = qgemv_item_one<Q::NOMIN, Q::SAME, SPLIT>(it, x, acc[r]);
            }
        }
        if (k + S < nr) {  // (the same for the whole block)
            sync_block();  // every warp is done with stage k % S before it is refilled
            if (tid == 0) issue(k + S);
        }
    }
    float out[2];
#pragma unroll
    for (u32 c = 0; c < 2; ++c) {
        const float v = warp_sum(acc[c]);
        const float o = GLU ? ds_silu(v) * warp_sum(acc[GLU ? 2 + c : c]) : v;
        if (lane == 0 && c0 + lc + c < M) qgemv_store(Y, sp, M, 0, c0 + lc + c, o);
        out[c] = o;
    }
    if constexpr (CONV) {
        // Every lane holds both rows' outputs (warp_sum's butterfly); lane c updates row lc + c.
        if (conv && lane < 2 && c0 + lc + lane < M) qgemv_conv_row(cv, c0 + lc + lane, lane ? out[1] : out[0]);
    }
}

// The staged kernel over up to four segments of one activation row (qgemv_seg's grouping with
// QT_COLS rows a block): the qkv segment's folded conv and the query/gate halves included.
template <class Q, u32 S>
DEV void qgemv_staged_seg(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1, const u8* W2,
                          float* Y2, u32 M2, const u8* W3, float* Y3, u32 M3, const i8* XQ, const float* XD,
                          const float* XS, u32 K, u64 row_bytes, const float* CW, float* CS, float* CY, float* SA,
                          float* SB, u32 SH) {
    const QSeg s = qgemv_pick<QT_COLS>(W0, Y0, M0, W1, Y1, M1, W2, Y2, M2, W3, Y3, M3);
    qgemv_staged<Q, S, false>(s.W, nullptr, XQ, XD, XS, s.Y, K, s.M, row_bytes, s.b, QConv{CW, CS, CY, M0},
                              CW != nullptr && s.first, QSplit{SA, SB, s.first ? SH : 0u});
}
#define DS_QGEMV1_T(name, Q, S)                                                                            \
    KERNEL(QG_THREADS)                                                                                     \
    qgemv_##name##_1t##S(const u8* W, const i8* XQ, const float* XD, const float* XS, float* Y, u32 N,      \
                         u32 K, u32 M, u64 row_bytes) {                                                    \
        (void)N;                                                                                           \
        qgemv_staged<Q, S, false>(W, nullptr, XQ, XD, XS, Y, K, M, row_bytes, bid_x());                    \
    }                                                                                                      \
    KERNEL(QG_THREADS)                                                                                     \
    qgemv4_##name##_1t##S(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1, const u8* W2,  \
                          float* Y2, u32 M2, const u8* W3, float* Y3, u32 M3, const i8* XQ, const float* XD, \
                          const float* XS, u32 N, u32 K, u64 row_bytes, const float* CW, float* CS,       \
                          float* CY, float* SA, float* SB, u32 SH) {                                      \
        (void)N;                                                                                           \
        qgemv_staged_seg<Q, S>(W0, Y0, M0, W1, Y1, M1, W2, Y2, M2, W3, Y3, M3, XQ, XD, XS, K, row_bytes, CW, \
                               CS, CY, SA, SB, SH);                                                        \
    }                                                                                                      \
    KERNEL(QG_THREADS)                                                                                     \
    qgemv_glu_##name##_1t##S(const u8* WG, const u8* WU, const i8* XQ, const float* XD, const float* XS,   \
                             float* Y, u32 N, u32 K, u32 M, u64 row_bytes) {                               \
        (void)N;                                                                                           \
        qgemv_staged<Q, S, true>(WG, WU, XQ, XD, XS, Y, K, M, row_bytes, bid_x());                         \
    }
DS_QGEMV1_T(iq4_xs, IIQ4_XS, 3)
DS_QGEMV1_T(iq4_xs, IIQ4_XS, 5)

// Mirrored by kernels::QGEMV_WIDE.
#define DS_QGEMV_WIDE_TYPE(name, Q) \
    DS_QGEMV_WIDE(name, Q, 8, 4)    \
    DS_QGEMV_WIDE(name, Q, 16, 2)   \
    DS_QGEMV_WIDE(name, Q, 16, 4)
DS_FOR_EACH_QTYPE(DS_QGEMV_WIDE_TYPE)

// The fused launches with a wide tile's rows per warp: qgemv4_<type>_<NT>x<R> (R weight rows of
// one segment per warp) and qgemv_glu_<type>_<NT>x<R> (R / 2 gate/up row pairs per warp). Every
// row is accumulated as in the R = qgemv_rows(NT) kernels, so results are bit-identical; the
// fused groups of a tile with a wide variant then keep its shared activation loads (a drafter's
// 8-row q/k/v and gate/up groups ran the 2-row kernels). Mirrored by kernels::QGEMV_FUSED_WIDE.
#define DS_QGEMV_FUSED_WIDE(name, Q, NT, R)                                                                 \
    KERNEL(QG_THREADS)                                                                                      \
    qgemv4_##name##_##NT##x##R(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1,             \
                               const u8* W2, float* Y2, u32 M2, const u8* W3, float* Y3, u32 M3,            \
                               const i8* XQ, const float* XD, const float* XS, u32 N, u32 K, u64 row_bytes, \
                               const float* CW, float* CS, float* CY, float* SA, float* SB, u32 SH) {       \
        qgemv_seg<Q, NT, R>(W0, Y0, M0, W1, Y1, M1, W2, Y2, M2, W3, Y3, M3, XQ, XD, XS, N, K, row_bytes, CW, CS, \
                            CY, SA, SB, SH);                                                                \
    }                                                                                                       \
    KERNEL(QG_THREADS)                                                                                      \
    qgemv_glu_##name##_##NT##x##R(const u8* WG, const u8* WU, const i8* XQ, const float* XD, const float* XS, \
                                  float* Y, u32 N, u32 K, u32 M, u64 row_bytes) {                           \
        qgemv<Q, NT, R, true>(WG, WU, XQ, XD, XS, Y, N, K, M, row_bytes, bid_x() * QG_WARPS + tid_x() / WARP); \
    }
#define DS_QGEMV_FUSED_WIDE_TYPE(name, Q) DS_QGEMV_FUSED_WIDE(name, Q, 8, 4)
DS_FOR_EACH_QTYPE(DS_QGEMV_FUSED_WIDE_TYPE)
#endif
