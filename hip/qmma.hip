// Int8-activation matmul on integer matrix cores, for verify widths (8 to 64 input rows).
//
// The dp4a kernel (hip/qmatmul.hip, qgemv) is ALU-bound at 8-16 rows on its 8 dp4a per (weight
// row, input row, 32-value item). Here one mma step computes the 16-value integer sums of 16
// weight rows by 8 input rows at once; only the float combine stays per (row, input, item).
//
// LOSSLESS: a result must equal the dp4a kernel's bit for bit (a verified row must equal the
// decoded row). Integer sums are exact, so the mma gives the same int32 sums per half item. The
// float combine then replays the dp4a kernel's order exactly. That kernel's lane L accumulates
// items s = L, L + 32, ... (increasing s) as
//     acc += xd · (s0 · (float)sum0 + s1 · (float)sum1) + m · xs
// from acc = 0, then warp_sum adds the 32 lane partials by butterfly (xor 16, 8, 4, 2, 1). Here
// partial j (= the dp4a kernel's lane j) of an output collects the items s ≡ j (mod 32) in
// increasing s with the same float operations, and the partials are added by the same butterfly
// over j, so every float operation has the same operands in the same order. (float)sum is exact
// (|sum| < 2^18): the mma accumulates onto 0x4B400000, the bits of 1.5 · 2^23, whose float minus
// 1.5 · 2^23 is the sum (one add, no conversion instruction).
//
// Residues split across warps: a block owns 16 weight rows (mma A rows) by 8·TG input rows (TG
// groups of 8, the B columns; wider inputs loop over further groups). Its NW warps split the 32
// residues: warp w owns j in [R·w, R·w + R), R = 32 / NW, so it walks items s = 32c + R·w + jj
// (R consecutive items, i.e. part of one weight block, then a jump of 32 items) and keeps R
// partials × TG groups × 4 outputs per lane. At the end the butterfly's steps across warps (masks
// 16 .. R) go through shared memory and the steps within a warp (R / 2 .. 1) stay in registers;
// warp 0 then holds partial 0 = the dp4a kernel's warp_sum.
//
// The previous tile kept all 32 partials of 4 outputs in one warp's registers (128 floats per
// lane) and measured slower than the dp4a kernel; splitting the residues keeps R · TG · 4 = 16
// or 32 accumulators per lane (see qmma_warps), and a block of only 16 weight rows still has 8
// or 16 warps to hide memory latency with.
//
// Tile: lane 4g + t of a warp holds weight rows g, g + 8 by inputs 2t, 2t + 1 of each group (see
// mma_s8_16x8x16 in common.h). NVIDIA only for now (sm_80+: mma.sync); other targets keep the
// dp4a kernel, and this file defines no kernels there.
#include "qfrag.h"

#if defined(DS_HAVE_MMA_S8)

constexpr i32 QM_BIAS_BITS = 0x4B400000;  // 12582912.0f: integers near it are exact
constexpr float QM_BIAS = 12582912.0f;
constexpr u32 QM_ROWS = 16;  // weight rows per block (mirrored by kernels::QMMA_ROWS)

// The float of an mma sum accumulated onto QM_BIAS_BITS (exact for |sum| < 2^22).
DEV float qm_float(i32 biased) { return __builtin_bit_cast(float, biased) - QM_BIAS; }

// Warps per block for TG groups of 8 input rows (mirrored by kernels::qmma_threads), and the
// blocks per SM that ptxas must fit in registers (launch bounds). Measured with ptxas 12.9 for
// sm_90 (no H200 timing yet): a warp's registers go mostly to the mma results and loads of the
// items it keeps in flight, not to its R · TG · 4 partials. TG = 1: 8 warps of 4 residues, 117
// to 128 registers, so 2 blocks per SM. TG = 2: 16 warps of 2 residues, 110 to 128 registers
// (8 warps of 4 residues need more than 128 and spill Q5_K/Q6_K at 2 blocks per SM). TG = 4:
// 16 warps of 2 residues at 128 registers (spills 4 bytes for IQ4_XS, up to 60 for Q5_K).
// More warps rather than more partials per warp also suits the grid: it has only M / 16
// blocks (320 for M = 5120).
constexpr u32 qmma_warps(u32 tg) { return tg == 1 ? 8 : 16; }
constexpr u32 qmma_min_blocks(u32 tg) { return tg == 1 ? 2 : 1; }
#if defined(DS_EMULATE)
#define QM_KERNEL(TG) KERNEL(qmma_warps(TG) * WARP)
#else
#define QM_KERNEL(TG) \
    extern "C" __global__ __attribute__((launch_bounds(qmma_warps(TG) * WARP, qmma_min_blocks(TG)))) void
#endif

// This lane's inputs of one group: its B column's quantized row, and the XD/XS row offsets of
// its two output inputs (rows past N repeat row N - 1; their results are dropped). The offsets
// are u32: XD holds N · K / 32 floats, far below 2^32 at GEMV widths.
struct QmGroup {
    const i8* xq;
    u32 xa, xc;
};

// Block byte offset and sub-block of item sb + jj, for sb a multiple of R: the R items lie in one
// weight block, or (IPB < R) fill R / IPB whole blocks.
template <class P, u32 R>
DEV void qmma_item(u32 sb, u32 jj, u64& boff, u32& ib) {
    constexpr u32 IPB = P::QK / 32;
    if constexpr (IPB >= R) {
        boff = (u64)(sb / IPB) * P::QB, ib = sb % IPB + jj;
    } else {
        boff = (u64)(sb / IPB + jj / IPB) * P::QB, ib = jj % IPB;
    }
}

// Items s = sb .. sb + R - 1 (TAIL: those below nb) of one warp into its partials acc[jj].
template <class P, u32 TG, u32 R, bool TAIL>
DEV void qmma_chunk(const u8* wa, const u8* wb, const QmGroup (&grp)[TG], const float* __restrict__ XD,
                    const float* __restrict__ XS, u32 nb, u32 sb, u32 t, float (&acc)[R][TG][4]) {
    const bool odd = t & 1;
    // Scales of all R items first, with no shuffle or mma in between, so the compiler loads a
    // block's header once for the items that share it. Even lanes decode row ra's, odd lanes
    // row rb's, and swap with the neighbour (the same floats as decoding both).
    float sc0[R], sc1[R], scm[R];
#pragma unroll
    for (u32 jj = 0; jj < R; ++jj) {
        if (TAIL && sb + jj >= nb) break;  // warp-uniform
        u64 boff;
        u32 ib;
        qmma_item<P, R>(sb, jj, boff, ib);
        P::scales((odd ? wb : wa) + boff, ib, sc0[jj], sc1[jj], scm[jj]);
    }
#pragma unroll
    for (u32 jj = 0; jj < R; ++jj) {
        const u32 s = sb + jj;
        if (TAIL && s >= nb) break;  // warp-uniform
        u64 boff;
        u32 ib;
        qmma_item<P, R>(sb, jj, boff, ib);
        u32 wa0, wa1, wb0, wb1;
        P::words(wa + boff, ib, t, wa0, wa1);
        P::words(wb + boff, ib, t, wb0, wb1);
        const float s0 = sc0[jj], s1 = sc1[jj];
        const float o0 = shfl_xor(s0, 1);
        const float o1 = P::SAME ? o0 : shfl_xor(s1, 1);
        const float sa0 = odd ? o0 : s0, sb0 = odd ? s0 : o0;
        const float sa1 = odd ? o1 : s1, sb1 = odd ? s1 : o1;
        float ma = 0.0f, mb = 0.0f;
        if constexpr (!P::NOMIN) {
            const float om = shfl_xor(scm[jj], 1);
            ma = odd ? om : scm[jj], mb = odd ? scm[jj] : om;
        }
#pragma unroll
        for (u32 tg = 0; tg < TG; ++tg) {
            const u32 x0 = *(const u32*)(grp[tg].xq + (u64)s * 32);
            const u32 x1 = *(const u32*)(grp[tg].xq + (u64)s * 32 + 16);
            i32 d0[4] = {QM_BIAS_BITS, QM_BIAS_BITS, QM_BIAS_BITS, QM_BIAS_BITS};
            i32 d1[4] = {QM_BIAS_BITS, QM_BIAS_BITS, QM_BIAS_BITS, QM_BIAS_BITS};
            mma_s8_16x8x16(d0, wa0, wb0, x0);  // values 0..15 of item s
            mma_s8_16x8x16(d1, wa1, wb1, x1);  // values 16..31
            const float xd0 = XD[grp[tg].xa + s], xd1 = XD[grp[tg].xc + s];
            float e[4] = {xd0 * (sa0 * qm_float(d0[0]) + sa1 * qm_float(d1[0])),
                          xd1 * (sa0 * qm_float(d0[1]) + sa1 * qm_float(d1[1])),
                          xd0 * (sb0 * qm_float(d0[2]) + sb1 * qm_float(d1[2])),
                          xd1 * (sb0 * qm_float(d0[3]) + sb1 * qm_float(d1[3]))};
            // `+ m · xs`. Without a minimum (m = 0) the dp4a kernel adds 0 · xs = ±0 (xs is
            // finite for finite activations), which changes e only where e = -0, to +0; and
            // acc + (-0) = acc + (+0) since acc, starting at +0, is never -0 (a sum is -0 only
            // when both terms are). So skipping the term leaves every partial's bits unchanged.
            if constexpr (!P::NOMIN) {
                const float xs0 = XS[grp[tg].xa + s], xs1 = XS[grp[tg].xc + s];
                e[0] = e[0] + ma * xs0, e[1] = e[1] + ma * xs1;
                e[2] = e[2] + mb * xs0, e[3] = e[3] + mb * xs1;
            }
#pragma unroll
            for (u32 o = 0; o < 4; ++o) acc[jj][tg][o] = acc[jj][tg][o] + e[o];
        }
    }
}

// Weight rows [16·rg, 16·rg + 16) of W by all N input rows into Y[N, M].
template <class P, u32 TG>
DEV void qmma(const u8* __restrict__ W, const i8* __restrict__ XQ, const float* __restrict__ XD,
              const float* __restrict__ XS, float* __restrict__ Y, u32 N, u32 K, u32 M, u64 row_bytes, u32 rg) {
    constexpr u32 NW = qmma_warps(TG), R = WARP / NW;
    static_assert(R * NW == WARP && R >= 1, "the warps split the 32 residues evenly");
    const u32 lane = lane_id(), w = tid_x() / WARP;
    const u32 g = lane / 4, t = lane % 4;
    const u32 m0 = rg * QM_ROWS;
    if (m0 >= M) return;  // the whole block: no thread reaches the barriers below
    const u32 nb = K / 32;
    const u32 ra = m0 + g, rb = m0 + g + 8;  // this lane's weight rows (A rows g, g + 8)
    const u8* wa = W + (u64)(ra < M ? ra : M - 1) * row_bytes;
    const u8* wb = W + (u64)(rb < M ? rb : M - 1) * row_bytes;
    // The butterfly's steps across warps: the upper half of the active warps (residues m ..
    // 2m - 1 at mask m) leave their partials here, 16 residues × 4·TG outputs × 32 lanes.
    __shared__ float red[16 * 4 * TG * WARP];
    for (u32 n0 = 0; n0 < N; n0 += 8 * TG) {
        QmGroup grp[TG];
#pragma unroll
        for (u32 tg = 0; tg < TG; ++tg) {
            const u32 nq = n0 + 8 * tg + g, na = n0 + 8 * tg + 2 * t, nc = na + 1;
            grp[tg].xq = XQ + (u64)(nq < N ? nq : N - 1) * K + 4 * t;
            grp[tg].xa = (na < N ? na : N - 1) * nb;
            grp[tg].xc = (nc < N ? nc : N - 1) * nb;
        }
        // acc[jj][tg][o]: partial R·w + jj of output o (0: ra × na, 1: ra × nc, 2: rb × na,
        // 3: rb × nc) of group tg.
        float acc[R][TG][4];
#pragma unroll
        for (u32 jj = 0; jj < R; ++jj)
#pragma unroll
            for (u32 tg = 0; tg < TG; ++tg)
#pragma unroll
                for (u32 o = 0; o < 4; ++o) acc[jj][tg][o] = 0.0f;
        for (u32 sb = R * w; sb < nb; sb += WARP) {
            if (sb + R <= nb) {
                qmma_chunk<P, TG, R, false>(wa, wb, grp, XD, XS, nb, sb, t, acc);
            } else {
                qmma_chunk<P, TG, R, true>(wa, wb, grp, XD, XS, nb, sb, t, acc);
            }
        }
        // warp_sum's butterfly over the partial index j: after the step with mask m, partial
        // j < m holds p_j + p_{j+m}. Masks m >= R pair warp w with warp w + m / R. One base
        // address per step and constant offsets: per-slot addresses would be hoisted out of
        // the loops as invariants and held in registers through the whole K loop.
#pragma unroll
        for (u32 m = WARP / 2; m >= R; m /= 2) {
            constexpr u32 SLOTS = R * 4 * TG;  // one warp's partials, per lane
            const u32 h = m / R;
            sync_block();  // the previous step's (or group's) reads are done
            if (w >= h && w < 2 * h) {
                float* dst = red + (w - h) * SLOTS * WARP + lane;
#pragma unroll
                for (u32 i = 0; i < SLOTS; ++i) dst[i * WARP] = acc[i / (4 * TG)][i / 4 % TG][i % 4];
            }
            sync_block();
            if (w < h) {
                const float* src = red + w * SLOTS * WARP + lane;
#pragma unroll
                for (u32 i = 0; i < SLOTS; ++i) {
                    float& a = acc[i / (4 * TG)][i / 4 % TG][i % 4];
                    a = a + src[i * WARP];
                }
            }
        }
        if (w != 0) continue;
#pragma unroll
        for (u32 m = R / 2; m > 0; m /= 2)
#pragma unroll
            for (u32 jj = 0; jj < m; ++jj)
#pragma unroll
                for (u32 tg = 0; tg < TG; ++tg)
#pragma unroll
                    for (u32 o = 0; o < 4; ++o) acc[jj][tg][o] = acc[jj][tg][o] + acc[jj + m][tg][o];
#pragma unroll
        for (u32 tg = 0; tg < TG; ++tg) {
            const u32 na = n0 + 8 * tg + 2 * t, nc = na + 1;
            if (ra < M && na < N) Y[(u64)na * M + ra] = acc[0][tg][0];
            if (ra < M && nc < N) Y[(u64)nc * M + ra] = acc[0][tg][1];
            if (rb < M && na < N) Y[(u64)na * M + rb] = acc[0][tg][2];
            if (rb < M && nc < N) Y[(u64)nc * M + rb] = acc[0][tg][3];
        }
    }
}

// Up to four matmuls of one quantized input in one launch, as qgemv_seg in hip/qmatmul.hip:
// each segment's blocks map to rows exactly as in its own launch.
template <class P, u32 TG>
DEV void qmma_seg(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1, const u8* W2, float* Y2,
                  u32 M2, const u8* W3, float* Y3, u32 M3, const i8* XQ, const float* XD, const float* XS, u32 N,
                  u32 K, u64 row_bytes) {
    u32 b = bid_x();
    const u8* W = W0;
    float* Y = Y0;
    u32 M = M0;
    const u32 b0 = (M0 + QM_ROWS - 1) / QM_ROWS, b1 = (M1 + QM_ROWS - 1) / QM_ROWS,
              b2 = (M2 + QM_ROWS - 1) / QM_ROWS;
    if (b >= b0) {
        b -= b0, W = W1, Y = Y1, M = M1;
        if (b >= b1) {
            b -= b1, W = W2, Y = Y2, M = M2;
            if (b >= b2) b -= b2, W = W3, Y = Y3, M = M3;
        }
    }
    qmma<P, TG>(W, XQ, XD, XS, Y, N, K, M, row_bytes, b);
}

// qmma_<type>_<nt> and qmma4_<type>_<nt> (segments) for tiles of nt = 8·TG input rows.
#define DS_QMMA(name, P, TG, NT)                                                                          \
    QM_KERNEL(TG)                                                                                         \
    qmma_##name##_##NT(const u8* W, const i8* XQ, const float* XD, const float* XS, float* Y, u32 N,    \
                       u32 K, u32 M, u64 row_bytes) {                                                 \
        qmma<P, TG>(W, XQ, XD, XS, Y, N, K, M, row_bytes, bid_x());                                       \
    }                                                                                                     \
    QM_KERNEL(TG)                                                                                         \
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
