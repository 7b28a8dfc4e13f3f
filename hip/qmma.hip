// Int8-activation matmul on integer matrix cores, for verify widths (8 to 64 input rows).
//
// The dp4a kernel (hip/qmatmul.hip, qgemv) is ALU-bound at 16 rows on its 8 dp4a per (weight
// row, input row, 32-value item). Here one mma step computes the 16-value integer sums of 16
// weight rows by 8 input rows at once; only the float combine stays per (row, input, item).
//
// LOSSLESS: a result must equal the dp4a kernel's bit for bit (a verified row must equal the
// decoded row). Integer sums are exact, so the mma gives the same int32 sums per half item. The
// float combine then replays the dp4a kernel's order exactly: that kernel's lane L accumulates
// items s = L, L + 32, ... (increasing s) as
//     acc += xd · (s0 · (float)sum0 + s1 · (float)sum1) + m · xs
// from acc = 0, then warp_sum adds the 32 lane partials by butterfly (xor 16, 8, 4, 2, 1). Here
// a lane keeps all 32 partials (indexed by s mod 32) of each of its 4 (row, input) outputs in
// registers, adds item s to partial s mod 32 in increasing s, and finishes with the same
// butterfly over the partial index, so every float operation has the same operands in the
// same order. (float)sum is exact (|sum| < 2^18): the mma accumulates onto 0x4B400000, the bits
// of 1.5 · 2^23, whose float minus 1.5 · 2^23 is the sum (no conversion instruction).
//
// Tile: a warp owns 16 weight rows (mma A rows) by 8 input rows (B columns); lane 4g + t holds
// rows g, g + 8 by inputs 2t, 2t + 1 (see mma_s8_16x8x16 in common.h). A block of 4 warps
// covers 64 / TG weight rows and TG groups of 8 input rows (TG = 1, 2, 4 for tiles of 8, 16,
// 32); wider inputs loop over further groups of 8. NVIDIA only for now (sm_80+: mma.sync);
// other targets keep the dp4a kernel, and this file defines no kernels there.
#include "qfrag.h"

#if defined(DS_HAVE_MMA_S8)

constexpr u32 QM_WARPS = 4;
constexpr u32 QM_THREADS = QM_WARPS * WARP;
constexpr i32 QM_BIAS_BITS = 0x4B400000;  // 12582912.0f: integers near it are exact
constexpr float QM_BIAS = 12582912.0f;

// The float of an mma sum accumulated onto QM_BIAS_BITS (exact for |sum| < 2^22).
DEV float qm_float(i32 biased) { return __builtin_bit_cast(float, biased) - QM_BIAS; }

// Keeps `v` computed where it is (an empty asm the compiler cannot move into a branch).
DEV void qm_opaque(float& v) {
#if defined(__NVPTX__)
    asm volatile("" : "+f"(v));
#else
    (void)v;
#endif
}

// Weight rows [16·rg, 16·rg + 16) by input rows 8·tg + 8·TG·i .. (+8) of W into Y[N, M].
template <class P, u32 TG>
DEV void qmma(const u8* __restrict__ W, const i8* __restrict__ XQ, const float* __restrict__ XD,
              const float* __restrict__ XS, float* __restrict__ Y, u32 N, u32 K, u32 M, u64 row_bytes, u32 rg,
              u32 tg) {
    constexpr u32 IPB = P::QK / 32;
    const u32 lane = lane_id();
    const u32 g = lane / 4, t = lane % 4;
    const bool odd = t & 1;
    const u32 m0 = rg * 16;
    if (m0 >= M) return;  // the whole warp: no block-wide barrier below
    const u32 nb = K / 32;
    const u32 ra = m0 + g, rb = m0 + g + 8;  // this lane's weight rows (A rows g, g + 8)
    const u8* wa = W + (u64)(ra < M ? ra : M - 1) * row_bytes;
    const u8* wb = W + (u64)(rb < M ? rb : M - 1) * row_bytes;
    for (u32 n0 = 8 * tg; n0 < N; n0 += 8 * TG) {
        // B column g is input row n0 + g; this lane's outputs are input rows n0 + 2t, n0 + 2t + 1.
        const u32 nbq = n0 + g < N ? n0 + g : N - 1;
        const u32 na = n0 + 2 * t < N ? n0 + 2 * t : N - 1;
        const u32 nc = n0 + 2 * t + 1 < N ? n0 + 2 * t + 1 : N - 1;
        const i8* xq = XQ + (u64)nbq * nb * 32 + 4 * t;
        const float* xda = XD + (u64)na * nb;
        const float* xsa = XS + (u64)na * nb;
        const float* xdc = XD + (u64)nc * nb;
        const float* xsc = XS + (u64)nc * nb;
        // acc[o][L]: output o (0: ra × na, 1: ra × nc, 2: rb × na, 3: rb × nc), partial of the
        // dp4a kernel's lane L.
        float acc[4][WARP];
#pragma unroll
        for (u32 o = 0; o < 4; ++o)
#pragma unroll
            for (u32 l = 0; l < WARP; ++l) acc[o][l] = 0.0f;
        for (u32 c0 = 0; c0 < nb; c0 += WARP) {
#pragma unroll
            for (u32 l = 0; l < WARP; ++l) {
                // Past the last item (only in the final round) the loads repeat item nb - 1 and
                // the sums are dropped, so the loads need no branch and can be issued early.
                const u32 s = c0 + l;
                const u32 si = s < nb ? s : nb - 1;
                const u64 boff = (u64)(si / IPB) * P::QB;
                const u32 ib = si % IPB;
                u32 wa0, wa1, wb0, wb1;
                P::words(wa + boff, ib, t, wa0, wa1);
                P::words(wb + boff, ib, t, wb0, wb1);
                const u32 x0 = *(const u32*)(xq + (u64)si * 32);
                const u32 x1 = *(const u32*)(xq + (u64)si * 32 + 16);
                i32 d0[4] = {QM_BIAS_BITS, QM_BIAS_BITS, QM_BIAS_BITS, QM_BIAS_BITS};
                i32 d1[4] = {QM_BIAS_BITS, QM_BIAS_BITS, QM_BIAS_BITS, QM_BIAS_BITS};
                mma_s8_16x8x16(d0, wa0, wb0, x0);  // values 0..15 of item si
                mma_s8_16x8x16(d1, wa1, wb1, x1);  // values 16..31
                // Scales: even lanes decode row ra's, odd lanes row rb's, and swap with the
                // neighbour (the same floats as decoding both).
                float s0, s1, mm;
                P::scales((odd ? wb : wa) + boff, ib, s0, s1, mm);
                const float o0 = shfl_xor(s0, 1);
                const float o1 = P::SAME ? o0 : shfl_xor(s1, 1);
                const float om = P::NOMIN ? 0.0f : shfl_xor(mm, 1);
                const float sa0 = odd ? o0 : s0, sb0 = odd ? s0 : o0;
                const float sa1 = odd ? o1 : s1, sb1 = odd ? s1 : o1;
                const float ma = odd ? om : mm, mb = odd ? mm : om;
                const float xd0 = xda[si], xs0 = xsa[si], xd1 = xdc[si], xs1 = xsc[si];
                float e0 = xd0 * (sa0 * qm_float(d0[0]) + sa1 * qm_float(d1[0])) + ma * xs0;
                float e1 = xd1 * (sa0 * qm_float(d0[1]) + sa1 * qm_float(d1[1])) + ma * xs1;
                float e2 = xd0 * (sb0 * qm_float(d0[2]) + sb1 * qm_float(d1[2])) + mb * xs0;
                float e3 = xd1 * (sb0 * qm_float(d0[3]) + sb1 * qm_float(d1[3])) + mb * xs1;
                // Selects, not a branch: the compiler would sink the combine into one, which
                // splits the unrolled round into blocks the loads cannot be scheduled across.
                qm_opaque(e0), qm_opaque(e1), qm_opaque(e2), qm_opaque(e3);
                const bool in = s < nb;
                acc[0][l] = in ? acc[0][l] + e0 : acc[0][l];
                acc[1][l] = in ? acc[1][l] + e1 : acc[1][l];
                acc[2][l] = in ? acc[2][l] + e2 : acc[2][l];
                acc[3][l] = in ? acc[3][l] + e3 : acc[3][l];
            }
        }
        // warp_sum's butterfly over the partial index: after the step with mask m, partial
        // L < m holds what lane L holds there (v_L + v_{L^m}, own value first).
#pragma unroll
        for (u32 o = 0; o < 4; ++o)
#pragma unroll
            for (u32 m = WARP / 2; m > 0; m >>= 1)
#pragma unroll
                for (u32 l = 0; l < m; ++l) acc[o][l] = acc[o][l] + acc[o][l + m];
        const bool va = n0 + 2 * t < N, vc = n0 + 2 * t + 1 < N;
        if (ra < M && va) Y[(u64)(n0 + 2 * t) * M + ra] = acc[0][0];
        if (ra < M && vc) Y[(u64)(n0 + 2 * t + 1) * M + ra] = acc[1][0];
        if (rb < M && va) Y[(u64)(n0 + 2 * t) * M + rb] = acc[2][0];
        if (rb < M && vc) Y[(u64)(n0 + 2 * t + 1) * M + rb] = acc[3][0];
    }
}

// Weight rows per block for TG groups of 8 input rows (mirrored by kernels::qmma_rows).
constexpr u32 qmma_rows(u32 tg) { return 16 * (QM_WARPS / tg); }

// Up to four matmuls of one quantized input in one launch, as qgemv_seg in hip/qmatmul.hip:
// each segment's blocks map to rows exactly as in its own launch.
template <class P, u32 TG>
DEV void qmma_seg(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1, const u8* W2, float* Y2,
                  u32 M2, const u8* W3, float* Y3, u32 M3, const i8* XQ, const float* XD, const float* XS, u32 N,
                  u32 K, u64 row_bytes) {
    constexpr u32 RPB = qmma_rows(TG);
    u32 b = bid_x();
    const u8* W = W0;
    float* Y = Y0;
    u32 M = M0;
    const u32 b0 = (M0 + RPB - 1) / RPB, b1 = (M1 + RPB - 1) / RPB, b2 = (M2 + RPB - 1) / RPB;
    if (b >= b0) {
        b -= b0, W = W1, Y = Y1, M = M1;
        if (b >= b1) {
            b -= b1, W = W2, Y = Y2, M = M2;
            if (b >= b2) b -= b2, W = W3, Y = Y3, M = M3;
        }
    }
    const u32 w = tid_x() / WARP;
    qmma<P, TG>(W, XQ, XD, XS, Y, N, K, M, row_bytes, b * (QM_WARPS / TG) + w / TG, w % TG);
}

// qmma_<type>_<nt> and qmma4_<type>_<nt> (segments) for tiles of nt = 8·TG input rows.
#define DS_QMMA(name, P, TG, NT)                                                                          \
    KERNEL(QM_THREADS)                                                                                \
    qmma_##name##_##NT(const u8* W, const i8* XQ, const float* XD, const float* XS, float* Y, u32 N,    \
                       u32 K, u32 M, u64 row_bytes) {                                                 \
        const u32 w = tid_x() / WARP;                                                                 \
        qmma<P, TG>(W, XQ, XD, XS, Y, N, K, M, row_bytes, bid_x() * (QM_WARPS / TG) + w / TG, w % TG); \
    }                                                                                                 \
    KERNEL(QM_THREADS)                                                                                \
    qmma4_##name##_##NT(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1, const u8* W2, \
                        float* Y2, u32 M2, const u8* W3, float* Y3, u32 M3, const i8* XQ, const float* XD, \
                        const float* XS, u32 N, u32 K, u64 row_bytes) {                               \
        qmma_seg<P, TG>(W0, Y0, M0, W1, Y1, M1, W2, Y2, M2, W3, Y3, M3, XQ, XD, XS, N, K, row_bytes);   \
    }
#define DS_QMMA_TYPE(name, P) \
    DS_QMMA(name, P, 1, 8)    \
    DS_QMMA(name, P, 2, 16)   \
    DS_QMMA(name, P, 4, 32)
DS_FOR_EACH_FTYPE(DS_QMMA_TYPE)

#endif
