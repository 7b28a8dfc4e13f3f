// Normalisations over the last dimension:
//   rms_norm       y = (x · r) · w,              r = 1 / sqrt(mean(x²) + eps)
//   add_rms_norm   s = x + res; y = rms_norm(s)  (two outputs)
//   gated_rms_norm y = ((x · r) · w) · silu(z)   per group of D
//   l2_norm        y = (x · 1/sqrt(Σx² + eps)) · scale
// Products in the CPU reference's order (normalise, then weight, then gate).
//
// The `_q8` variants also write y as int8 activations for the qgemv kernels (hip/q8act.h), which
// saves the separate quantize_q8 launch before every projection. They need D % 32 == 0. The
// `_q8f` variants write the fragment-ordered copy that the matrix-core kernels read as well
// (hip/qmma.hip's header; qm_frag_index in hip/q8act.h), which saves the `qmma_relayout` launch
// that would otherwise reorder the plain rows: a verify step's norms then feed their tiles with
// no launch in between. The same quantized values go to both places.
//
// Three forms, picked from D alone (so a row's bits never depend on the number of rows):
//  - D % 4 == 0 and D <= NORM_WARP_MAX: one warp per row (the host launches WARP-thread blocks,
//    one per row; no barrier);
//  - D % 4 == 0 and D <= NORM_BLOCK_MAX: one NORM_THREADS block per row (512 threads: a
//    5120-wide row is 3 float4 passes per thread. With 256 threads it was 5 passes, run as the
//    8-pass template, whose per-pass quantization (two IEEE divisions, four roundings) added
//    ~1000 instructions to each thread's serial chain. H200, ncu, 5120 wide: add_rms_norm_q8
//    10.0 -> 5.2 µs, rms_norm_q8 9.8 -> 4.5, add_rms_norm 3.6 -> 3.3. What is left is mostly
//    instruction fetch: 44 % of add_rms_norm_q8's stall cycles wait on it, the usual lot of a
//    kernel of one block that runs its code once, cold);
//  - otherwise a strided loop over the row (one NORM_THREADS block per row).
// In the register forms thread t of a row holds the float4 chunks c = t + k · TPR (k < NP) of
// x and of every other operand (w, res, z), all loaded before the first reduction, so a row
// costs one memory round trip. A quantization block (32 values) is then 8 consecutive chunks,
// held by 8 consecutive lanes: its max and sum take 3 shuffles each, and the NP passes'
// reductions are interleaved level by level. (The previous form had one lane per value: 20
// serial blocks per warp of 2 × 5 shuffles each at D = 5120, and w was read after the norm's
// reduction, a second round trip: 9.7 µs per add_rms_norm_q8 on the H200.)
// The host side of the form choice is `norm_threads` in src/backend/hip/lower.rs.
#include "q8act.h"
#include "rope.h"

constexpr u32 NORM_THREADS = 512;  // mirrored by lower::norm_threads
constexpr u32 NORM_NP = 4;  // most float4 passes per thread in the register forms
constexpr u32 NORM_WARP_MAX = WARP * 4 * NORM_NP;
constexpr u32 NORM_BLOCK_MAX = NORM_THREADS * 4 * NORM_NP;

DEV bool norm_warp_form(u32 D) { return D % 4 == 0 && D <= NORM_WARP_MAX; }
DEV bool norm_block_form(u32 D) { return D % 4 == 0 && D > NORM_WARP_MAX && D <= NORM_BLOCK_MAX; }

DEV f32x4 ld4(const float* __restrict__ p, u64 chunk) { return ((const f32x4*)p)[chunk]; }
DEV void st4(float* __restrict__ p, u64 chunk, f32x4 v) { ((f32x4*)p)[chunk] = v; }
DEV f32x4 zero4() { return f32x4{0.0f, 0.0f, 0.0f, 0.0f}; }
DEV f32x4 add4(f32x4 a, f32x4 b) { return f32x4{a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w}; }
DEV f32x4 mul4(f32x4 a, f32x4 b) { return f32x4{a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w}; }
DEV f32x4 scale4(f32x4 a, float s) { return f32x4{a.x * s, a.y * s, a.z * s, a.w * s}; }

// One row of a register form: thread t of tpr, chunks per row nc = D / 4, first chunk base.
struct NormRow {
    u32 t, tpr, nc;
    u64 base;
};
template <u32 TPR>
DEV NormRow norm_row(u32 D) {
    return NormRow{TPR == WARP ? lane_id() : tid_x(), TPR, D / 4, (u64)bid_x() * (D / 4)};
}
// Pass k's chunk of this thread within the row, and whether the row has it.
DEV u32 nr_chunk(const NormRow& nr, u32 k) { return nr.t + k * nr.tpr; }
DEV bool nr_has(const NormRow& nr, u32 k) { return nr_chunk(nr, k) < nr.nc; }

// r = 1 / sqrt(mean + eps) from this thread's chunks (sum of squares in increasing index per
// thread, then over the warp, then over the block's warps in order).
template <u32 TPR, u32 NP>
DEV float norm_r(const f32x4 (&v)[NP], u32 D, float eps) {
    float ss = 0.0f;
#pragma unroll
    for (u32 k = 0; k < NP; ++k) {
        ss += v[k].x * v[k].x;
        ss += v[k].y * v[k].y;
        ss += v[k].z * v[k].z;
        ss += v[k].w * v[k].w;
    }
    if constexpr (TPR == WARP) {
        ss = warp_sum(ss);
    } else {
        __shared__ float buf[NORM_THREADS / WARP];
        ss = block_sum<NORM_THREADS>(ss, buf);
    }
    return 1.0f / ds_sqrt(ss / (float)D + eps);
}

DEV float q8_round(float v, float id) { return __builtin_roundf(v * id); }
DEV u32 q8_byte(float q) { return (u32)(u8)(i8)(i32)q; }
// A chunk's share of its 32-value quantization block (8 chunks, 8 lanes): its max |value|; given
// the block's scale d, its 4 quantized values; their int8 word and their sum.
DEV float q8_amax4(const f32x4& o) {
    return __builtin_fmaxf(__builtin_fmaxf(__builtin_fabsf(o.x), __builtin_fabsf(o.y)),
                           __builtin_fmaxf(__builtin_fabsf(o.z), __builtin_fabsf(o.w)));
}
DEV f32x4 q8_quant4(const f32x4& o, float d) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    return f32x4{q8_round(o.x, id), q8_round(o.y, id), q8_round(o.z, id), q8_round(o.w, id)};
}
DEV u32 q8_pack4(const f32x4& q) {
    return q8_byte(q.x) | q8_byte(q.y) << 8 | q8_byte(q.z) << 16 | q8_byte(q.w) << 24;
}
DEV float q8_sum4(const f32x4& q) { return ((q.x + q.y) + q.z) + q.w; }

// Where a `_q8f` kernel writes its fragment-ordered copy: the int8 bytes, scales and scaled
// sums (see qm_frag_index), the matmul's quantization blocks per input row (its K / 32: a
// norm row of D values is D / 32 blocks of one such row), and the norm rows that hold values
// (blocks past them fill the copy's padding rows with zeros). Unused by the other kernels.
struct Q8F {
    i8* q;
    float* d;
    float* s;
    u32 nb, rows;
};
// The fragment slot of global quantization block b (32 values of the flattened output).
DEV u64 q8f_slot(const Q8F& f, u64 b) { return qm_frag_index((u32)(b / f.nb), (u32)(b % f.nb), f.nb); }
// Word w (values 4w .. 4w + 3) of block b: one 4-byte store, as the word's 4 bytes stay together
// in the fragment order.
DEV void q8f_word(const Q8F& f, u64 b, u32 w, u32 v) {
    *(u32*)(f.q + q8f_slot(f, b) * 32 + qm_frag_byte(4 * w)) = v;
}
// The padding rows of the copy (a block of norm row bid_x() >= f.rows): zeros, as
// qmma_quantize writes them, by the block's `threads` threads.
DEV void q8f_zero_row(const Q8F& f, u32 D, u32 threads) {
    const u64 c0 = (u64)bid_x() * (D / 4);
    for (u32 c = tid_x(); c < D / 4; c += threads) {
        const u64 b = (c0 + c) / 8;
        q8f_word(f, b, (u32)((c0 + c) % 8), 0u);
        if ((c0 + c) % 8 == 0) {
            const u64 i = q8f_slot(f, b);
            f.d[i] = 0.0f, f.s[i] = 0.0f;
        }
    }
}

// Stores the outputs o (chunks of NormRow) to y and, with Q8, their int8 quantization: the
// float operations of q8_store_block (hip/q8act.h) on the same values. The max is exact in any
// order and the sum adds integers of at most 32 · 127, exact in f32, so the bits match
// quantize_q8's. Needs D % 32 == 0 for Q8 (whole quantization blocks per 8-lane group).
// Q8: 0 none, 1 the plain int8 rows, 2 those and the fragment-ordered copy f.
template <u32 TPR, u32 NP, u32 Q8>
DEV void norm_store4(const NormRow& nr, const f32x4 (&o)[NP], float* __restrict__ y, i8* __restrict__ XQ,
                     float* __restrict__ XD, float* __restrict__ XS, const Q8F& f) {
#pragma unroll
    for (u32 k = 0; k < NP; ++k)
        if (nr_has(nr, k)) st4(y, nr.base + nr_chunk(nr, k), o[k]);
    if constexpr (Q8) {
        float am[NP], qs[NP], d[NP];
#pragma unroll
        for (u32 k = 0; k < NP; ++k) am[k] = q8_amax4(o[k]);
#pragma unroll
        for (u32 m = 1; m < 8; m <<= 1)
#pragma unroll
            for (u32 k = 0; k < NP; ++k) am[k] = __builtin_fmaxf(am[k], shfl_xor(am[k], m));
#pragma unroll
        for (u32 k = 0; k < NP; ++k) {
            d[k] = am[k] / 127.0f;
            const f32x4 q = q8_quant4(o[k], d[k]);
            const u64 c = nr.base + nr_chunk(nr, k);  // global chunk: values 4c .. 4c + 3
            if (nr_has(nr, k)) {
                const u32 word = q8_pack4(q);
                ((u32*)XQ)[c] = word;
                if constexpr (Q8 == 2) q8f_word(f, c / 8, (u32)(c % 8), word);
            }
            qs[k] = q8_sum4(q);
        }
#pragma unroll
        for (u32 m = 1; m < 8; m <<= 1)
#pragma unroll
            for (u32 k = 0; k < NP; ++k) qs[k] += shfl_xor(qs[k], m);
#pragma unroll
        for (u32 k = 0; k < NP; ++k) {
            const u64 c = nr.base + nr_chunk(nr, k);
            if (nr_has(nr, k) && lane_id() % 8 == 0) {
                XD[c / 8] = d[k];
                XS[c / 8] = d[k] * qs[k];
                if constexpr (Q8 == 2) {
                    const u64 i = q8f_slot(f, c / 8);
                    f.d[i] = d[k], f.s[i] = d[k] * qs[k];
                }
            }
        }
    }
}

// The rms-normed chunks o of row nr: (x · r) · w. Shared by rms_norm and qk_prep.
template <u32 TPR, u32 NP>
DEV void rms_norm_row(const NormRow& nr, const float* __restrict__ x, const float* __restrict__ w, u32 D, float eps,
                      f32x4 (&o)[NP]) {
    f32x4 v[NP], wv[NP];
#pragma unroll
    for (u32 k = 0; k < NP; ++k) {
        const bool h = nr_has(nr, k);
        v[k] = h ? ld4(x, nr.base + nr_chunk(nr, k)) : zero4();
        wv[k] = h ? ld4(w, nr_chunk(nr, k)) : zero4();
    }
    const float r = norm_r<TPR, NP>(v, D, eps);
#pragma unroll
    for (u32 k = 0; k < NP; ++k) o[k] = mul4(scale4(v[k], r), wv[k]);
}

template <u32 TPR, u32 NP, u32 Q8>
DEV void rms_norm_regs(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, i8* XQ,
                       float* XD, float* XS, const Q8F& f, u32 D, float eps) {
    const NormRow nr = norm_row<TPR>(D);
    f32x4 o[NP];
    rms_norm_row<TPR, NP>(nr, x, w, D, eps, o);
    norm_store4<TPR, NP, Q8>(nr, o, y, XQ, XD, XS, f);
}

// This thread's chunks of the row sum x + res and of the weight (zeros past the row).
template <u32 NP>
DEV void add_norm_in(const NormRow& nr, const float* __restrict__ x, const float* __restrict__ res,
                     const float* __restrict__ w, f32x4 (&v)[NP], f32x4 (&wv)[NP]) {
#pragma unroll
    for (u32 k = 0; k < NP; ++k) {
        const bool h = nr_has(nr, k);
        const u64 c = nr.base + nr_chunk(nr, k);
        v[k] = h ? add4(ld4(x, c), ld4(res, c)) : zero4();
        wv[k] = h ? ld4(w, nr_chunk(nr, k)) : zero4();
    }
}

template <u32 TPR, u32 NP, u32 Q8>
DEV void add_rms_norm_regs(const float* __restrict__ x, const float* __restrict__ res, const float* __restrict__ w,
                           float* __restrict__ sum, float* __restrict__ y, i8* XQ, float* XD, float* XS,
                           const Q8F& f, u32 D, float eps) {
    const NormRow nr = norm_row<TPR>(D);
    f32x4 v[NP], wv[NP], o[NP];
    add_norm_in<NP>(nr, x, res, w, v, wv);
#pragma unroll
    for (u32 k = 0; k < NP; ++k)
        if (nr_has(nr, k)) st4(sum, nr.base + nr_chunk(nr, k), v[k]);
    const float r = norm_r<TPR, NP>(v, D, eps);
#pragma unroll
    for (u32 k = 0; k < NP; ++k) o[k] = mul4(scale4(v[k], r), wv[k]);
    norm_store4<TPR, NP, Q8>(nr, o, y, XQ, XD, XS, f);
}

// The sliced block form (add_rms_norm_q8s[f], NormQ8::Slices, the default): block (row, s) of a
// grid (rows, slices) loads and reduces the whole row exactly as add_rms_norm_q8's block form
// (same loads, same order: the same r and outputs), but stores the sum, y and the int8
// activations only for the chunks of slice s, [s·cs, (s + 1)·cs) with cs = nc / slices a
// multiple of WARP chunks, so every warp is wholly in or out of the slice in each pass. Why: the
// one-block add_rms_norm_q8 quantizes all NP passes in series (5.2 µs against 3.3 for the plain
// norm at D = 5120, session 14), while here each warp quantizes at most one pass, and the
// separate quantize_q8 launch (~0.6 µs inside a 1-row step, session 41) goes. Each pass's
// quantization is norm_store4's (q8_amax4, q8_quant4, the same shuffles) on the same values: the
// same bits.
// Q8 = 2 (add_rms_norm_q8sf, verify widths on the matrix-core tiles) also writes the
// fragment-ordered copy f, as norm_store4 does.
template <u32 NP, u32 Q8>
DEV void add_rms_norm_slice(const float* __restrict__ x, const float* __restrict__ res, const float* __restrict__ w,
                            float* __restrict__ sum, float* __restrict__ y, i8* __restrict__ XQ,
                            float* __restrict__ XD, float* __restrict__ XS, const Q8F& f, u32 slices, u32 D,
                            float eps) {
    const NormRow nr = norm_row<NORM_THREADS>(D);
    f32x4 v[NP], wv[NP];
    add_norm_in<NP>(nr, x, res, w, v, wv);
    const float r = norm_r<NORM_THREADS, NP>(v, D, eps);
    const u32 cs = nr.nc / slices, lo = bid_y() * cs, hi = lo + cs;
#pragma unroll
    for (u32 k = 0; k < NP; ++k) {
        const u32 c0 = nr_chunk(nr, k) - lane_id();  // the warp's first chunk: uniform
        if (c0 < lo || c0 >= hi || !nr_has(nr, k)) continue;
        const u64 c = nr.base + nr_chunk(nr, k);
        st4(sum, c, v[k]);
        const f32x4 o = mul4(scale4(v[k], r), wv[k]);
        st4(y, c, o);
        float am = q8_amax4(o);
#pragma unroll
        for (u32 m = 1; m < 8; m <<= 1) am = __builtin_fmaxf(am, shfl_xor(am, m));
        const float d = am / 127.0f;
        const f32x4 q = q8_quant4(o, d);
        const u32 word = q8_pack4(q);
        ((u32*)XQ)[c] = word;
        if constexpr (Q8 == 2) q8f_word(f, c / 8, (u32)(c % 8), word);
        float qs = q8_sum4(q);
#pragma unroll
        for (u32 m = 1; m < 8; m <<= 1) qs += shfl_xor(qs, m);
        if (lane_id() % 8 == 0) {
            XD[c / 8] = d;
            XS[c / 8] = d * qs;
            if constexpr (Q8 == 2) {
                const u64 i = q8f_slot(f, c / 8);
                f.d[i] = d, f.s[i] = d * qs;
            }
        }
    }
}

template <u32 TPR, u32 NP, u32 Q8>
DEV void gated_rms_norm_regs(const float* __restrict__ x, const float* __restrict__ z, const float* __restrict__ w,
                             float* __restrict__ y, i8* XQ, float* XD, float* XS, const Q8F& f, u32 D, float eps) {
    const NormRow nr = norm_row<TPR>(D);
    f32x4 v[NP], wv[NP], zv[NP], o[NP];
#pragma unroll
    for (u32 k = 0; k < NP; ++k) {
        const bool h = nr_has(nr, k);
        const u64 c = nr.base + nr_chunk(nr, k);
        v[k] = h ? ld4(x, c) : zero4();
        zv[k] = h ? ld4(z, c) : zero4();
        wv[k] = h ? ld4(w, nr_chunk(nr, k)) : zero4();
    }
    const float r = norm_r<TPR, NP>(v, D, eps);
#pragma unroll
    for (u32 k = 0; k < NP; ++k) {
        const f32x4 g{ds_silu(zv[k].x), ds_silu(zv[k].y), ds_silu(zv[k].z), ds_silu(zv[k].w)};
        o[k] = mul4(mul4(scale4(v[k], r), wv[k]), g);
    }
    norm_store4<TPR, NP, Q8>(nr, o, y, XQ, XD, XS, f);
}

// Runs BODY<TPR, NP, Q8>(args...) for the register form of D, with NP the fewest of 1 .. 4
// passes that cover the row; returns false for the loop form. (Up to 8 passes, the gated
// norms' registers did not fit the 128 of a 512-thread block.)
#define NORM_REGS(BODY, Q8, ...)                                          \
    do {                                                                  \
        if (norm_warp_form(D) || norm_block_form(D)) {                    \
            const u32 tpr = norm_warp_form(D) ? WARP : NORM_THREADS;      \
            const u32 np = (D / 4 + tpr - 1) / tpr;                       \
            if (tpr == WARP) {                                            \
                if (np <= 1) BODY<WARP, 1, Q8>(__VA_ARGS__);              \
                else if (np <= 2) BODY<WARP, 2, Q8>(__VA_ARGS__);         \
                else if (np <= 3) BODY<WARP, 3, Q8>(__VA_ARGS__);         \
                else BODY<WARP, 4, Q8>(__VA_ARGS__);                      \
            } else {                                                      \
                if (np <= 1) BODY<NORM_THREADS, 1, Q8>(__VA_ARGS__);      \
                else if (np <= 2) BODY<NORM_THREADS, 2, Q8>(__VA_ARGS__); \
                else if (np <= 3) BODY<NORM_THREADS, 3, Q8>(__VA_ARGS__); \
                else BODY<NORM_THREADS, 4, Q8>(__VA_ARGS__);              \
            }                                                             \
            return;                                                       \
        }                                                                 \
    } while (0)

// The loop form (odd or very wide rows): one NORM_THREADS block per row, strided.
// Stores y[row + i] and, with Q8, its quantization block (the whole warp calls this together).
template <u32 Q8>
DEV void norm_out(float v, u64 at, float* __restrict__ y, i8* XQ, float* XD, float* XS, const Q8F& f) {
    y[at] = v;
    if constexpr (Q8 == 1) q8_store_block(v, at / 32, XQ, XD, XS);
    // Both layouts from one quantization: block at / 32 is block s of input row n of the matmul.
    if constexpr (Q8 == 2)
        q8_store_rows<true>(v, (u32)(at / 32 / f.nb), (u32)(at / 32 % f.nb), f.nb, ~0u, XQ, XD, XS, f.q, f.d, f.s);
}

template <u32 Q8>
DEV void rms_norm_impl(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, i8* XQ,
                       float* XD, float* XS, const Q8F& f, u32 D, float eps) {
    NORM_REGS(rms_norm_regs, Q8, x, w, y, XQ, XD, XS, f, D, eps);
    __shared__ float buf[NORM_THREADS / WARP];
    const u64 row = (u64)bid_x() * D;
    float ss = 0.0f;
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) ss += x[row + i] * x[row + i];
    ss = block_sum<NORM_THREADS>(ss, buf);
    const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) norm_out<Q8>((x[row + i] * r) * w[i], row + i, y, XQ, XD, XS, f);
}

template <u32 Q8>
DEV void add_rms_norm_impl(const float* __restrict__ x, const float* __restrict__ res, const float* __restrict__ w,
                           float* __restrict__ sum, float* __restrict__ y, i8* XQ, float* XD, float* XS,
                           const Q8F& f, u32 D, float eps) {
    NORM_REGS(add_rms_norm_regs, Q8, x, res, w, sum, y, XQ, XD, XS, f, D, eps);
    __shared__ float buf[NORM_THREADS / WARP];
    const u64 row = (u64)bid_x() * D;
    float ss = 0.0f;
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) {
        const float s = x[row + i] + res[row + i];
        sum[row + i] = s;
        ss += s * s;
    }
    ss = block_sum<NORM_THREADS>(ss, buf);
    const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
    // Each thread re-reads only the elements it wrote itself.
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) norm_out<Q8>((sum[row + i] * r) * w[i], row + i, y, XQ, XD, XS, f);
}

template <u32 Q8>
DEV void gated_rms_norm_impl(const float* __restrict__ x, const float* __restrict__ z, const float* __restrict__ w,
                             float* __restrict__ y, i8* XQ, float* XD, float* XS, const Q8F& f, u32 D,
                             float eps) {
    NORM_REGS(gated_rms_norm_regs, Q8, x, z, w, y, XQ, XD, XS, f, D, eps);
    __shared__ float buf[NORM_THREADS / WARP];
    const u64 row = (u64)bid_x() * D;
    float ss = 0.0f;
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) ss += x[row + i] * x[row + i];
    ss = block_sum<NORM_THREADS>(ss, buf);
    const float r = 1.0f / ds_sqrt(ss / (float)D + eps);
    for (u32 i = tid_x(); i < D; i += NORM_THREADS)
        norm_out<Q8>(((x[row + i] * r) * w[i]) * ds_silu(z[row + i]), row + i, y, XQ, XD, XS, f);
}

// The copy's parameters for kernels that write none.
DEV Q8F no_q8f() { return Q8F{nullptr, nullptr, nullptr, 1, 0}; }
// The `_q8f` kernels: blocks past `rows` (the norm rows that hold values) zero the copy's
// padding rows and stop there; the host launches the copy's rows (input rows rounded up to 8).
#define Q8F_PARAMS i8 *XQF, float *XDF, float *XSF, u32 nb, u32 rows
DEV bool q8f_padding(const Q8F& f, u32 D) {
    if (bid_x() < f.rows) return false;
    q8f_zero_row(f, D, norm_warp_form(D) ? WARP : NORM_THREADS);
    return true;
}

KERNEL(NORM_THREADS) rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, u32 D,
                              float eps) {
    grid_begin();
    rms_norm_impl<0>(x, w, y, nullptr, nullptr, nullptr, no_q8f(), D, eps);
}
KERNEL(NORM_THREADS)
rms_norm_q8(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, i8* XQ, float* XD,
            float* XS, u32 D, float eps) {
    grid_begin();
    rms_norm_impl<1>(x, w, y, XQ, XD, XS, no_q8f(), D, eps);
}
KERNEL(NORM_THREADS)
rms_norm_q8f(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, i8* XQ, float* XD,
             float* XS, Q8F_PARAMS, u32 D, float eps) {
    grid_begin();
    const Q8F f{XQF, XDF, XSF, nb, rows};
    if (q8f_padding(f, D)) return;
    rms_norm_impl<2>(x, w, y, XQ, XD, XS, f, D, eps);
}

KERNEL(NORM_THREADS) add_rms_norm(const float* __restrict__ x, const float* __restrict__ res,
                                  const float* __restrict__ w, float* __restrict__ sum, float* __restrict__ y, u32 D,
                                  float eps) {
    grid_begin();
    add_rms_norm_impl<0>(x, res, w, sum, y, nullptr, nullptr, nullptr, no_q8f(), D, eps);
}
KERNEL(NORM_THREADS)
add_rms_norm_q8(const float* __restrict__ x, const float* __restrict__ res, const float* __restrict__ w,
                float* __restrict__ sum, float* __restrict__ y, i8* XQ, float* XD, float* XS, u32 D, float eps) {
    grid_begin();
    add_rms_norm_impl<1>(x, res, w, sum, y, XQ, XD, XS, no_q8f(), D, eps);
}
KERNEL(NORM_THREADS)
add_rms_norm_q8f(const float* __restrict__ x, const float* __restrict__ res, const float* __restrict__ w,
                 float* __restrict__ sum, float* __restrict__ y, i8* XQ, float* XD, float* XS, Q8F_PARAMS, u32 D,
                 float eps) {
    grid_begin();
    const Q8F f{XQF, XDF, XSF, nb, rows};
    if (q8f_padding(f, D)) return;
    add_rms_norm_impl<2>(x, res, w, sum, y, XQ, XD, XS, f, D, eps);
}

// The sliced form above, on a grid (rows, slices); the host launches it for block-form rows
// (NORM_WARP_MAX < D <= NORM_BLOCK_MAX) with nc / slices a multiple of WARP chunks.
template <u32 Q8>
DEV void add_rms_norm_sliced(const float* __restrict__ x, const float* __restrict__ res, const float* __restrict__ w,
                             float* __restrict__ sum, float* __restrict__ y, i8* XQ, float* XD, float* XS,
                             const Q8F& f, u32 slices, u32 D, float eps) {
    const u32 np = (D / 4 + NORM_THREADS - 1) / NORM_THREADS;
    if (np <= 1) add_rms_norm_slice<1, Q8>(x, res, w, sum, y, XQ, XD, XS, f, slices, D, eps);
    else if (np <= 2) add_rms_norm_slice<2, Q8>(x, res, w, sum, y, XQ, XD, XS, f, slices, D, eps);
    else if (np <= 3) add_rms_norm_slice<3, Q8>(x, res, w, sum, y, XQ, XD, XS, f, slices, D, eps);
    else add_rms_norm_slice<4, Q8>(x, res, w, sum, y, XQ, XD, XS, f, slices, D, eps);
}
KERNEL(NORM_THREADS)
add_rms_norm_q8s(const float* __restrict__ x, const float* __restrict__ res, const float* __restrict__ w,
                 float* __restrict__ sum, float* __restrict__ y, i8* XQ, float* XD, float* XS, u32 slices, u32 D,
                 float eps) {
    grid_begin();
    add_rms_norm_sliced<1>(x, res, w, sum, y, XQ, XD, XS, no_q8f(), slices, D, eps);
}
// With the fragment-ordered copy (norm row = the matmul's input row, so nb = D / 32): the grid's
// rows past `rows` are the copy's padding rows, which slice 0 zeroes.
KERNEL(NORM_THREADS)
add_rms_norm_q8sf(const float* __restrict__ x, const float* __restrict__ res, const float* __restrict__ w,
                  float* __restrict__ sum, float* __restrict__ y, i8* XQ, float* XD, float* XS, Q8F_PARAMS,
                  u32 slices, u32 D, float eps) {
    grid_begin();
    const Q8F f{XQF, XDF, XSF, nb, rows};
    if (bid_x() >= f.rows) {
        if (bid_y() == 0) q8f_zero_row(f, D, NORM_THREADS);
        return;
    }
    add_rms_norm_sliced<2>(x, res, w, sum, y, XQ, XD, XS, f, slices, D, eps);
}

KERNEL(NORM_THREADS) gated_rms_norm(const float* __restrict__ x, const float* __restrict__ z,
                                    const float* __restrict__ w, float* __restrict__ y, u32 D, float eps) {
    grid_begin();
    gated_rms_norm_impl<0>(x, z, w, y, nullptr, nullptr, nullptr, no_q8f(), D, eps);
}
KERNEL(NORM_THREADS)
gated_rms_norm_q8(const float* __restrict__ x, const float* __restrict__ z, const float* __restrict__ w,
                  float* __restrict__ y, i8* XQ, float* XD, float* XS, u32 D, float eps) {
    grid_begin();
    gated_rms_norm_impl<1>(x, z, w, y, XQ, XD, XS, no_q8f(), D, eps);
}
KERNEL(NORM_THREADS)
gated_rms_norm_q8f(const float* __restrict__ x, const float* __restrict__ z, const float* __restrict__ w,
                   float* __restrict__ y, i8* XQ, float* XD, float* XS, Q8F_PARAMS, u32 D, float eps) {
    grid_begin();
    const Q8F f{XQF, XDF, XSF, nb, rows};
    if (q8f_padding(f, D)) return;
    gated_rms_norm_impl<2>(x, z, w, y, XQ, XD, XS, f, D, eps);
}

KERNEL(NORM_THREADS) l2_norm(const float* __restrict__ x, float* __restrict__ y, u32 D, float eps, float scale) {
    grid_begin();
    __shared__ float buf[NORM_THREADS / WARP];
    const u64 row = (u64)bid_x() * D;
    float ss = 0.0f;
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) ss += x[row + i] * x[row + i];
    ss = block_sum<NORM_THREADS>(ss, buf);
    const float r = 1.0f / ds_sqrt(ss + eps);
    for (u32 i = tid_x(); i < D; i += NORM_THREADS) y[row + i] = (x[row + i] * r) * scale;
}

// qk_prep: an attention layer's query/key preparation in one launch (the hip backend's fusion
// plan, `DELTASPEC_HIP_QK_PREP=1`): rms_norm of each q and k head row, partial RoPE, and the
// cache write of the new k and v rows (kv_write in hip/attention.hip). One warp per (head,
// token): grid (nh + nkv, T); warps h < nh take query head h, the others key head h - nh and its
// value row. The norm is the warp form's (rms_norm_row), the rotation rope_rotate (hip/rope.h)
// on the normed row held in shared memory, so q, k and the cache rows equal the unfused
// launches' bit for bit. Needs D % 4 == 0 and D <= NORM_WARP_MAX.
// pos: RoPE positions; rows: cache rows (the same for a chain; for a tree, committed length +
// row index); rows outside [0, cap) write no cache row, as kv_write.
template <u32 NP>
DEV void qk_norm_row(const float* __restrict__ x, const float* __restrict__ w, u64 row, u32 D, float eps,
                     float* __restrict__ sh) {
    const NormRow nr{lane_id(), WARP, D / 4, row * (D / 4)};
    f32x4 o[NP];
    rms_norm_row<WARP, NP>(nr, x, w, D, eps, o);
#pragma unroll
    for (u32 k = 0; k < NP; ++k)
        if (nr_has(nr, k)) st4(sh, nr_chunk(nr, k), o[k]);
}

KERNEL(WARP)
qk_prep(const float* __restrict__ q, const float* __restrict__ qw, const float* __restrict__ k,
        const float* __restrict__ kw, const float* __restrict__ v, const i32* __restrict__ pos,
        const float* __restrict__ qf, const float* __restrict__ kf, const i32* __restrict__ rows,
        float* __restrict__ qo, float* __restrict__ ko, float* __restrict__ kc, float* __restrict__ vc, u32 nh,
        u32 nkv, u32 D, u32 half, float m, float eps, u32 cap) {
    grid_begin();
    __shared__ __attribute__((aligned(16))) float sh[NORM_WARP_MAX];
    const u32 h = bid_x(), t = bid_y(), lane = lane_id();
    const bool isq = h < nh;
    const u32 hh = isq ? h : h - nh;
    const u64 row = (u64)t * (isq ? nh : nkv) + hh;  // the head row among [T, heads] rows of D
    const float* x = isq ? q : k;
    const float* w = isq ? qw : kw;
    const u32 np = (D / 4 + WARP - 1) / WARP;
    if (np <= 1) qk_norm_row<1>(x, w, row, D, eps, sh);
    else if (np <= 2) qk_norm_row<2>(x, w, row, D, eps, sh);
    else if (np <= 3) qk_norm_row<3>(x, w, row, D, eps, sh);
    else qk_norm_row<4>(x, w, row, D, eps, sh);
    sync_block();
    const float* f = isq ? qf : kf;
    float* out = isq ? qo : ko;
    const i32 p = pos[t], cr = isq ? -1 : rows[t];
    const bool cache = cr >= 0 && (u32)cr < cap;
    const u64 crow = ((u64)(cache ? cr : 0) * nkv + hh) * D;  // this head's row in the caches
    for (u32 d = lane; d < D; d += WARP) {
        const float y =
            d < 2 * half ? rope_rotate(sh[d], sh[d < half ? d + half : d - half], d, half, p, f, m) : sh[d];
        out[row * D + d] = y;
        if (cache) {
            kc[crow + d] = y;
            vc[crow + d] = v[row * D + d];
        }
    }
}
