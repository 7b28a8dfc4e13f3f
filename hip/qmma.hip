// Int8-activation matmul on integer matrix cores, for verify widths (8 to 64 input rows).
//
// The dp4a kernel (hip/qmatmul.hip, qgemv) is ALU-bound at 8-16 rows on its 8 dp4a per (weight
// row, input row, 32-value item). Here one mma step computes the 16-value integer sums of 16
// weight rows by 8 input rows at once; only the float combine stays per (row, input, item).
//
// LOSSLESS: a result must equal the dp4a kernel's bit for bit (a verified row must equal the
// decoded row). Integer sums are exact, so the mma gives the same int32 sums per item (SAME
// types: one m16n8k32 step, both halves; Q6_K: one m16n8k16 step per half). The float combine
// then replays the dp4a kernel's order exactly. That kernel's lane L accumulates items s = L,
// L + 32, ... (increasing s) with q8c_same / q8c_split (hip/q8act.h) from acc = 0, then warp_sum
// adds the 32 lane partials by butterfly (xor 16, 8, 4, 2, 1). Here partial j (= the dp4a
// kernel's lane j) of an output collects the items s ≡ j (mod 32) in increasing s with the same
// helpers, and the partials are added by the same butterfly over j, so every float operation
// has the same operands in the same order. The mma accumulates onto Q8C_BIAS_BITS (the bits of
// 1.5 · 2^23), whose float minus 1.5 · 2^23 is the sum (one add, no conversion instruction).
// The SAME form's fused multiply-add is one rounding on both sides: also the same bits.
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
//
// Loads (an estimate, not measured per kernel: H200 27B IQ4_XS 16-row GEMVs took 24.8 ms against
// 9.7 at 1 row). A warp load costs the L1 one pass per distinct 128-byte line, and the rows of a
// tile are distinct lines: per 16-row IQ4_XS item at 16 inputs a warp made ~96 such passes
// (header 4 loads × 16 rows per 2 items, activations 2 loads × 8 rows per group, their scales
// 2 × 4 per group, weight words 2 × 8), about 18 ms for the model's weights at one pass per clock
// per SM: the L1, not DRAM, was the limit. Now ~43: the IQ4_XS header is one 8-byte load per
// chunk of R items, two items' activation scales one 8-byte load, and an item's activations
// (and, for IQ4_XS, two items' weight words) one 8-byte load per lane plus one exchange in the
// quad, in the k order of qm_pos. Loads are issued for U chunks per step (more bytes in flight).
//
// Fragment-ordered activations (XF, the kernels with suffix `f`; `DELTASPEC_HIP_QMMA_XLAYOUT`):
// in the plain layout a warp's activation load for one item still touches 8 input rows' lines
// (quad g holds input row g), and its XD/XS loads 4 rows' lines per pair of items. The `f`
// kernels read a copy of the same values (written by qmma_quantize, qmma_relayout, or the norm
// and conv kernels that quantize their own output: `*_rms_norm_q8f`, `dyn_conv_q8f`) laid out
// in the order the warp reads them: per group of 8 input rows and item, the 8 rows' 32 bytes
// back to back, each with lane t's 8 bytes (word qm_pos(t) of both halves) at byte 8·t, so the
// warp's load is one contiguous 256-byte run and needs no exchange; and the group's 8 XD (and
// 8 XS) of the item as 8 consecutive floats, of which lane t loads inputs 2t, 2t + 1 as one
// 8-byte load (32 bytes per warp). The values and the float order are unchanged, so the bits
// are. Per 16-row IQ4_XS item at 16 inputs that leaves ~21 line passes of the ~43 above.
//
// GLU (qmma_glu_*): the 16 A rows are 8 gate rows and the same 8 columns' up rows, so one lane
// holds gate and up sums of one column and writes silu(gate) · up itself.
#include "q8act.h"
#include "qfrag.h"

#if defined(DS_HAVE_MMA_S8)

constexpr u32 QM_ROWS = 16;  // weight rows per block (mirrored by kernels::QMMA_ROWS)


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
// The `w` kernels: half the warps, each with twice the residues (twice the items per walk and
// partials per lane), and twice the blocks per SM in the same 128 registers per thread. Why: a
// block of a K = 5120 matrix ran each warp over only 10-20 items, then the cross-warp butterfly
// and its barriers, while the SM's only (16-warp) block held every resident warp in one phase
// (ncu, session 13: 1.2 eligible warps of 3.9, issue 53 %). Two or four smaller blocks per SM
// overlap one's reduction and start with the others' loads. Same partials, same butterfly: the
// same bits.
constexpr u32 qmma_warps_w(u32 tg) { return qmma_warps(tg) / 2; }
constexpr u32 qmma_min_blocks_w(u32 tg) { return qmma_min_blocks(tg) * 2; }
#if defined(DS_EMULATE)
#define QM_KERNEL(NW, MINB) KERNEL(NW * WARP)
#else
#define QM_KERNEL(NW, MINB) extern "C" __global__ __attribute__((launch_bounds(NW * WARP, MINB))) void
#endif

// This lane's inputs of one group: its B column's quantized row (at byte 8·t, see qm_pair) and
// the XD/XS row offsets of its two output inputs (rows past N repeat row N - 1; their results
// are dropped). The offsets are u32: XD holds N · K / 32 floats, far below 2^32 at GEMV widths.
// Fragment order (XF): xq is this lane's 8 bytes of the group's item 0 (item s at + 256·s) and
// xa the float offset of its two inputs' XD/XS of item 0 (item s at + 8·s); xc is unused.
struct QmGroup {
    const i8* xq;
    u32 xa, xc;
};

// Block byte offset within the row (hip/quant.h, wl_block) and sub-block of item sb + jj, for sb
// a multiple of R: the R items lie in one weight block, or (IPB < R) fill R / IPB whole blocks
// (of one round: R divides 32).
// ST: the weights are one round in shared memory (hip/qmma_staged.h), so the offset is the
// block's within its round.
template <class P, u32 R, bool ST = false>
DEV void qmma_item(u32 sb, u32 jj, u64& boff, u32& ib) {
    constexpr u32 IPB = P::QK / 32, BPR = 1024 / P::QK;
    const u32 blk = IPB >= R ? sb / IPB : sb / IPB + jj / IPB;
    boff = ST ? (u64)(blk % BPR) * P::QB : wl_block<P>(blk);
    ib = IPB >= R ? sb % IPB + jj : jj % IPB;
}

// The k order of a quad. An mma sums over its 16 k slots, so any order of the 16 values of a
// half item gives the same exact sum, as long as the weights (A) and the activations (B) use
// the same one; the two halves stay apart (each has its own scale in the combine). Lane t of a
// quad holds word qm_pos(t) of each half (values 4·qm_pos(t) .. + 3 and 16 + 4·qm_pos(t) .. + 3):
// 0, 2, 1, 3. That is the order in which one 8-byte load per lane at byte 8·t of an item, plus
// one exchange with lane t ^ 2, leaves the activations (qm_pair): lane t loads words 2t, 2t + 1
// (half 0 for t < 2, half 1 for t >= 2), keeps one and trades the other. Two 4-byte loads at
// 4t and 16 + 4t touch 8 rows' lines each per warp; the 8-byte load touches them once.
// (qm_pos: hip/q8act.h)
DEV void qm_pair(u32x2 v, bool low, u32& x0, u32& x1) {
    const u32 r = (u32)shfl_xor_i32((i32)(low ? v.y : v.x), 2);
    x0 = low ? v.x : r;
    x1 = low ? r : v.y;
}

// qm_frag_byte, qm_frag_index (the fragment order's addresses): hip/q8act.h.

// Whether the fragment decoder P has raw 16-byte items (RAW16 in hip/qfrag.h).
template <class P, class = void>
struct QmRaw16 {
    static constexpr bool v = false;
};
template <class P>
struct QmRaw16<P, decltype(void(P::RAW16))> {
    static constexpr bool v = P::RAW16;
};

// The constant the fragment decoder P leaves out of every weight value (OFF in hip/qfrag.h), 0
// where it has none.
template <class P, class = void>
struct QmOff {
    static constexpr u32 v = 0;
};
template <class P>
struct QmOff<P, decltype(void(P::OFF))> {
    static constexpr u32 v = P::OFF;
};

// d -= OFF · (the 16 activations of b) for every output of an mma tile, as an mma whose A holds
// -OFF everywhere: Σ (q - OFF) x = Σ q x - OFF Σ x exactly, so the decoder skips a per-byte
// subtraction on every word.
template <u32 OFF>
DEV void qm_off(i32 (&d)[4], u32 b) {
    if constexpr (OFF != 0) {
        static_assert(OFF <= 128, "-OFF must be an int8");
        constexpr u32 c = ((256u - OFF) & 0xffu) * 0x01010101u;
        mma_s8_16x8x16(d, c, c, b);
    }
}

// Two consecutive floats at an 8-byte aligned address.
DEV void qm_ld2(const float* p, float& a, float& b) {
    const u32x2 v = *(const u32x2*)p;
    a = __builtin_bit_cast(float, v.x), b = __builtin_bit_cast(float, v.y);
}

// Items s = sb .. sb + R - 1 (TAIL: those below nb) of one warp into its partials acc[jj].
// XD2: XD/XS rows start at even offsets (nb even), so two consecutive items' scales are one
// 8-byte load.
// FOLD (the prefill tile qmmp below): every item goes to one accumulator per output, acc[0].
// ST: wa/wb point at the rows' bytes of the items' round in a shared-memory stage (qmma_item).
template <class P, u32 TG, u32 R, bool TAIL, bool XD2, bool XF, bool H, bool FOLD = false, bool ST = false>
DEV void qmma_chunk(const u8* wa, const u8* wb, const QmGroup (&grp)[TG], const float* __restrict__ XD,
                    const float* __restrict__ XS, u32 nb, u32 sb, u32 t, float (&acc)[FOLD ? 1 : R][TG][4]) {
    static_assert(R % 2 == 0, "items are taken in pairs for the XD loads");
    const bool odd = t & 1, low = t < 2;
    const u32 pos = qm_pos(t);
    // Scales of all R items first, with no shuffle or mma in between, so the compiler loads a
    // block's header once for the items that share it. Even lanes decode row ra's, odd lanes
    // row rb's, and swap with the neighbour (the same floats as decoding both).
    float sc0[R], sc1[R], scm[R];
#pragma unroll
    for (u32 jj = 0; jj < R; ++jj) {
        if (TAIL && sb + jj >= nb) break;  // warp-uniform
        u64 boff;
        u32 ib;
        qmma_item<P, R, ST>(sb, jj, boff, ib);
        P::scales((odd ? wb : wa) + boff, ib, sc0[jj], sc1[jj], scm[jj]);
    }
    float xda[2][TG], xdc[2][TG], xsa[2][TG], xsc[2][TG];
    u32 qa[2], qb[2];  // RAW16: rows ra's and rb's raw words of items jj, jj + 1 (jj even)
    // HOIST (H, the `q` kernels; fragment order and RAW16 weights only): every load of the
    // chunk is issued here, before the first mma, so a warp waits for memory once per chunk
    // rather than once per item. The same values reach the same operations.
    constexpr bool HOIST = H && XF && QmRaw16<P>::v && !TAIL;
    u32x2 hw[HOIST ? R / 2 : 1][2], hx[HOIST ? R : 1][TG], hd[HOIST ? R : 1][TG], hs[HOIST ? R : 1][TG];
    if constexpr (HOIST) {
#pragma unroll
        for (u32 jj = 0; jj < R; jj += 2) {
            u64 boff;
            u32 ib;
            qmma_item<P, R, ST>(sb, jj, boff, ib);
            hw[jj / 2][0] = *(const u32x2*)(P::raw(wa + boff, ib) + 8 * t);
            hw[jj / 2][1] = *(const u32x2*)(P::raw(wb + boff, ib) + 8 * t);
        }
#pragma unroll
        for (u32 jj = 0; jj < R; ++jj)
#pragma unroll
            for (u32 tg = 0; tg < TG; ++tg) {
                hx[jj][tg] = *(const u32x2*)(grp[tg].xq + (u64)(sb + jj) * 256);
                hd[jj][tg] = *(const u32x2*)(XD + grp[tg].xa + 8 * (sb + jj));
                if constexpr (!P::NOMIN) hs[jj][tg] = *(const u32x2*)(XS + grp[tg].xa + 8 * (sb + jj));
            }
    }
#pragma unroll
    for (u32 jj = 0; jj < R; ++jj) {
        const u32 s = sb + jj;
        if (TAIL && s >= nb) break;  // warp-uniform
        u64 boff;
        u32 ib;
        qmma_item<P, R, ST>(sb, jj, boff, ib);
        u32 wa0, wa1, wb0, wb1;
        if constexpr (QmRaw16<P>::v && !TAIL) {
            // Items jj, jj + 1 (one block, ib even): 32 bytes per row, 8 per lane, paired as
            // the activations (qm_pair), so lane t gets word qm_pos(t) of both items.
            if (jj % 2 == 0) {
                if constexpr (HOIST) {
                    qm_pair(hw[jj / 2][0], low, qa[0], qa[1]);
                    qm_pair(hw[jj / 2][1], low, qb[0], qb[1]);
                } else {
                    qm_pair(*(const u32x2*)(P::raw(wa + boff, ib) + 8 * t), low, qa[0], qa[1]);
                    qm_pair(*(const u32x2*)(P::raw(wb + boff, ib) + 8 * t), low, qb[0], qb[1]);
                }
            }
            P::decode(qa[jj % 2], wa0, wa1);
            P::decode(qb[jj % 2], wb0, wb1);
        } else {
            P::words(wa + boff, ib, pos, wa0, wa1);
            P::words(wb + boff, ib, pos, wb0, wb1);
        }
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
        // The activation scales of this lane's two inputs (and sums, with a minimum): at even
        // jj those of items jj and jj + 1, as one 8-byte load each where XD2; in fragment order
        // (XF) those of item jj, both inputs as one 8-byte load.
        if constexpr (HOIST) {
#pragma unroll
            for (u32 tg = 0; tg < TG; ++tg) {
                xda[jj % 2][tg] = __builtin_bit_cast(float, hd[jj][tg].x);
                xdc[jj % 2][tg] = __builtin_bit_cast(float, hd[jj][tg].y);
                if constexpr (!P::NOMIN) {
                    xsa[jj % 2][tg] = __builtin_bit_cast(float, hs[jj][tg].x);
                    xsc[jj % 2][tg] = __builtin_bit_cast(float, hs[jj][tg].y);
                }
            }
        } else if constexpr (XF) {
#pragma unroll
            for (u32 tg = 0; tg < TG; ++tg) {
                qm_ld2(XD + grp[tg].xa + 8 * s, xda[jj % 2][tg], xdc[jj % 2][tg]);
                if constexpr (!P::NOMIN) qm_ld2(XS + grp[tg].xa + 8 * s, xsa[jj % 2][tg], xsc[jj % 2][tg]);
            }
        } else if (jj % 2 == 0) {
#pragma unroll
            for (u32 tg = 0; tg < TG; ++tg) {
                if constexpr (XD2 && !TAIL) {
                    qm_ld2(XD + grp[tg].xa + s, xda[0][tg], xda[1][tg]);
                    qm_ld2(XD + grp[tg].xc + s, xdc[0][tg], xdc[1][tg]);
                    if constexpr (!P::NOMIN) {
                        qm_ld2(XS + grp[tg].xa + s, xsa[0][tg], xsa[1][tg]);
                        qm_ld2(XS + grp[tg].xc + s, xsc[0][tg], xsc[1][tg]);
                    }
                } else {
                    xda[0][tg] = XD[grp[tg].xa + s], xdc[0][tg] = XD[grp[tg].xc + s];
                    if constexpr (!P::NOMIN) xsa[0][tg] = XS[grp[tg].xa + s], xsc[0][tg] = XS[grp[tg].xc + s];
                    if (!TAIL || s + 1 < nb) {  // warp-uniform
                        xda[1][tg] = XD[grp[tg].xa + s + 1], xdc[1][tg] = XD[grp[tg].xc + s + 1];
                        if constexpr (!P::NOMIN) {
                            xsa[1][tg] = XS[grp[tg].xa + s + 1], xsc[1][tg] = XS[grp[tg].xc + s + 1];
                        }
                    }
                }
            }
        }
#pragma unroll
        for (u32 tg = 0; tg < TG; ++tg) {
            u32 x0, x1;
            if constexpr (HOIST) {
                x0 = hx[jj][tg].x, x1 = hx[jj][tg].y;
            } else if constexpr (XF) {
                const u32x2 v = *(const u32x2*)(grp[tg].xq + (u64)s * 256);
                x0 = v.x, x1 = v.y;
            } else {
                qm_pair(*(const u32x2*)(grp[tg].xq + (u64)s * 32), low, x0, x1);
            }
            const float xd0 = xda[jj % 2][tg], xd1 = xdc[jj % 2][tg];
            // Output o: 0 ra × na, 1 ra × nc, 2 rb × na, 3 rb × nc; the combine is q8c_* of
            // hip/q8act.h, as in the dp4a kernel (m = 0 and xs unused without a minimum).
            const float xdo[4] = {xd0, xd1, xd0, xd1};
            float xso[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if constexpr (!P::NOMIN) {
                xso[0] = xso[2] = xsa[jj % 2][tg];
                xso[1] = xso[3] = xsc[jj % 2][tg];
            }
            const float mo[4] = {ma, ma, mb, mb};
            if constexpr (P::SAME) {
                // One k32 step gives the item's whole sum (both halves, exactly).
                i32 d[4] = {Q8C_BIAS_BITS, Q8C_BIAS_BITS, Q8C_BIAS_BITS, Q8C_BIAS_BITS};
                qm_off<QmOff<P>::v>(d, x0);
                qm_off<QmOff<P>::v>(d, x1);
                mma_s8_16x8x32(d, wa0, wb0, wa1, wb1, x0, x1);
                const float so[4] = {sa0, sa0, sb0, sb0};
#pragma unroll
                for (u32 o = 0; o < 4; ++o) {
                    float& a = acc[FOLD ? 0 : jj][tg][o];
                    a = q8c_same<P::NOMIN>(a, xdo[o], so[o], q8c_float(d[o]), mo[o], xso[o]);
                }
            } else {
                i32 d0[4] = {Q8C_BIAS_BITS, Q8C_BIAS_BITS, Q8C_BIAS_BITS, Q8C_BIAS_BITS};
                i32 d1[4] = {Q8C_BIAS_BITS, Q8C_BIAS_BITS, Q8C_BIAS_BITS, Q8C_BIAS_BITS};
                qm_off<QmOff<P>::v>(d0, x0);
                qm_off<QmOff<P>::v>(d1, x1);
                mma_s8_16x8x16(d0, wa0, wb0, x0);  // values 0..15 of item s
                mma_s8_16x8x16(d1, wa1, wb1, x1);  // values 16..31
                const float s0o[4] = {sa0, sa0, sb0, sb0}, s1o[4] = {sa1, sa1, sb1, sb1};
#pragma unroll
                for (u32 o = 0; o < 4; ++o) {
                    float& a = acc[FOLD ? 0 : jj][tg][o];
                    a = q8c_split<P::NOMIN>(a, xdo[o], s0o[o], q8c_float(d0[o]), s1o[o],
                                                         q8c_float(d1[o]), mo[o], xso[o]);
                }
            }
        }
    }
}

// Chunks of its tile a block hints before grid_begin in every qmma kernel (experiment knob;
// default 0: only the `p` kernels hint, their PF chunks).
#ifndef DS_QPF0
#define DS_QPF0 0
#endif

// L2 prefetch of the weights PF chunks ahead (PF > 0: the `p` kernels, `DELTASPEC_HIP_QMMA_V2=1`).
// A block's warps together walk chunk c (items 32c .. 32c + 31 of all 16 rows) at about the same
// time, each loading its few items just before their mma, so every step waits for DRAM (several
// round trips per step, and a block of a K = 5120 matrix walks only 5 chunks). Here lane i of the
// block (i = 32·w + lane) hints line i / 16 of row i % 16's bytes of chunk c + PF: lines 128
// bytes apart from the chunk's first byte, so every 128-byte line of the chunk holds one hint
// (the line that also holds the next chunk's first byte is hinted with that chunk). The first
// PF chunks are hinted at the start. Hints write no register and change no value, so the bits
// are those of the `f` kernels.
struct QmPrefetch {
    const u8* row;  // this lane's weight row, or null where it hints nothing
    u32 off;        // its line's byte offset within a chunk
};
template <class P, u32 PF>
DEV void qmma_prefetch(const QmPrefetch& pf, u32 nb, u32 c) {
    if constexpr (PF > 0) {
        constexpr u32 IPB = P::QK / 32;
        // The bound in the row's own bytes, the address in the weight's layout (hip/quant.h).
        if (pf.row && (u64)(c * (WARP / IPB)) * P::QB + pf.off < (u64)(nb / IPB) * P::QB)
            prefetch_l2(pf.row + (u64)c * wl_round_stride<P>() + pf.off);
    }
}
template <class P, u32 PF>
DEV QmPrefetch qmma_prefetch_lane(const u8* W, const u8* WU, bool glu, u32 m0, u32 M, u32 K, u64 row_bytes,
                                   u32 i) {
    constexpr u32 IPB = P::QK / 32, CB = WARP / IPB * P::QB;  // a chunk's bytes per row
    QmPrefetch pf{nullptr, 0};
    if constexpr (PF > 0) {
        const u32 pr = i % QM_ROWS, line = i / QM_ROWS;
        if (line * 128 < CB) {
            // GLU: A rows 0-7 are gate rows m0 .. m0 + 7 of W, rows 8-15 the same up rows of WU.
            const u32 r = glu ? m0 + pr % 8 : m0 + pr;
            pf.row = (glu && pr >= 8 ? WU : W) + wl_row<P>(r < M ? r : M - 1, K, row_bytes);
            pf.off = line * 128;
        }
    }
    return pf;
}

// A warp's items: chunks sb, sb + 32, ... below nb, U whole chunks per step (their loads can be
// issued together; the chunks still accumulate in order, so every U gives the same bits), then
// the rest one by one. U = 2 doubles the weight bytes in flight per warp (16 warps × 2 chunks ×
// 16 rows × 32 bytes per SM) at the cost of a few spilled registers at 16 input rows.
template <class P, u32 TG, u32 R, bool XD2, u32 U, bool XF, u32 PF, bool H>
DEV void qmma_walk(const u8* wa, const u8* wb, const QmGroup (&grp)[TG], const float* __restrict__ XD,
                   const float* __restrict__ XS, u32 nb, u32 sb, u32 t, float (&acc)[R][TG][4],
                   const QmPrefetch& pf) {
    for (; sb + (U - 1) * WARP + R <= nb; sb += U * WARP) {
#pragma unroll
        for (u32 u = 0; u < U; ++u) qmma_prefetch<P, PF>(pf, nb, sb / WARP + PF + u);
#pragma unroll
        for (u32 u = 0; u < U; ++u) qmma_chunk<P, TG, R, false, XD2, XF, H>(wa, wb, grp, XD, XS, nb, sb + u * WARP, t, acc);
    }
    for (; sb < nb; sb += WARP) {
        qmma_prefetch<P, PF>(pf, nb, sb / WARP + PF);
        if (sb + R <= nb) {
            qmma_chunk<P, TG, R, false, XD2, XF, H>(wa, wb, grp, XD, XS, nb, sb, t, acc);
        } else {
            qmma_chunk<P, TG, R, true, XD2, XF, H>(wa, wb, grp, XD, XS, nb, sb, t, acc);
        }
    }
}

// This lane's QmGroup of each of the TG groups of 8 input rows from n0 (XF: fragment order).
template <u32 TG, bool XF>
DEV void qmma_groups(QmGroup (&grp)[TG], const i8* XQ, u32 n0, u32 N, u32 K, u32 lane) {
    const u32 nb = K / 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (u32 tg = 0; tg < TG; ++tg) {
        if constexpr (XF) {
            // Groups past the last one (at 32-row tiles) repeat it; their results are dropped.
            const u32 gl = (N - 1) / 8, gi = n0 / 8 + tg < gl ? n0 / 8 + tg : gl;
            grp[tg].xq = XQ + qm_frag_index(8 * gi, 0, nb) * 32 + 8 * lane;
            grp[tg].xa = (u32)qm_frag_index(8 * gi, 0, nb) + 2 * t;
            grp[tg].xc = 0;
        } else {
            const u32 nq = n0 + 8 * tg + g, na = n0 + 8 * tg + 2 * t, nc = na + 1;
            grp[tg].xq = XQ + (u64)(nq < N ? nq : N - 1) * K + 8 * t;
            grp[tg].xa = (na < N ? na : N - 1) * nb;
            grp[tg].xc = (nc < N ? nc : N - 1) * nb;
        }
    }
}

// The end of a verify tile: warp_sum's butterfly over the partial index j of acc (partial R·w +
// jj of warp w in acc[jj]), then the outputs (ra, rb) × (inputs n0 + 8·tg + 2t, + 1), or
// silu(gate) · up of column ra (GLU). Every thread of the block calls it (barriers).
//
// ONE (TG <= 2, the 8- and 16-row tiles): every warp leaves its partials in `red` (all 32
// residues, 16 · TG KB), one barrier, then warp 2·tg + c adds the 32 partials of outputs c and
// c + 2 of group tg by the butterfly's tree (level m: p_j + p_{j+m} for j < m, m = 16 .. 1) and
// writes them. Why: the stepwise form below passes the cross-warp steps through red one mask at
// a time, two barriers each, with half the remaining warps idle per step and warp 0 finishing
// alone; ncu put 10 % of the 16-row gate/up tile's stall samples on those barriers (session 38).
// The same additions in the same order: the same bits.
// Otherwise (stepwise; red holds the upper half's 16 residues): the steps across warps through
// red, then warp 0 adds the steps within a warp in registers and writes every output.
template <u32 TG>
constexpr u32 qmma_red_floats(bool one) {
    return (one ? 32 : 16) * 4 * TG * WARP;
}
template <u32 TG, u32 R, bool GLU, bool ONE = false>
DEV void qmma_finish(float (&acc)[R][TG][4], float* red, u32 w, u32 lane, u32 t, u32 ra, u32 rb, u32 n0, u32 N,
                     u32 M, float* __restrict__ Y) {
    if constexpr (ONE) {
        static_assert(WARP / R >= 2 * TG, "a warp for each pair of outputs (c, c + 2) of each group");
        constexpr u32 SLOTS = R * 4 * TG;  // one warp's partials, per lane
        sync_block();                      // the previous group's reads are done
        // Partial j = R·w + jj of slot 4·tg + o at red[(j · 4·TG + 4·tg + o) · WARP + lane].
        float* dst = red + w * SLOTS * WARP + lane;
#pragma unroll
        for (u32 i = 0; i < SLOTS; ++i) dst[i * WARP] = acc[i / (4 * TG)][i / 4 % TG][i % 4];
        sync_block();
        if (w >= 2 * TG) return;
        const u32 tg = w / 2, c = w % 2;
        float v[2];
#pragma unroll
        for (u32 h = 0; h < 2; ++h) {
            const float* src = red + (4 * tg + c + 2 * h) * WARP + lane;
            float p[WARP];
#pragma unroll
            for (u32 j = 0; j < WARP; ++j) p[j] = src[j * 4 * TG * WARP];
#pragma unroll
            for (u32 m = WARP / 2; m > 0; m /= 2)
#pragma unroll
                for (u32 j = 0; j < m; ++j) p[j] = p[j] + p[j + m];
            v[h] = p[0];
        }
        const u32 n = n0 + 8 * tg + 2 * t + c;
        if constexpr (GLU) {
            if (ra < M && n < N) Y[(u64)n * M + ra] = ds_silu(v[0]) * v[1];
        } else {
            if (ra < M && n < N) Y[(u64)n * M + ra] = v[0];
            if (rb < M && n < N) Y[(u64)n * M + rb] = v[1];
        }
        return;
    }
    // After the step with mask m, partial j < m holds p_j + p_{j+m}. Masks m >= R pair warp w
    // with warp w + m / R. One base address per step and constant offsets: per-slot addresses
    // would be hoisted out of the loops as invariants and held in registers through the whole
    // K loop.
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
    if (w != 0) return;
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
        if constexpr (GLU) {
            if (ra < M && na < N) Y[(u64)na * M + ra] = ds_silu(acc[0][tg][0]) * acc[0][tg][2];
            if (ra < M && nc < N) Y[(u64)nc * M + ra] = ds_silu(acc[0][tg][1]) * acc[0][tg][3];
        } else {
            if (ra < M && na < N) Y[(u64)na * M + ra] = acc[0][tg][0];
            if (ra < M && nc < N) Y[(u64)nc * M + ra] = acc[0][tg][1];
            if (rb < M && na < N) Y[(u64)na * M + rb] = acc[0][tg][2];
            if (rb < M && nc < N) Y[(u64)nc * M + rb] = acc[0][tg][3];
        }
    }
}

// Weight rows [16·rg, 16·rg + 16) of W by all N input rows into Y[N, M]. GLU: the block owns
// output columns [8·rg, 8·rg + 8) of a gate/up pair instead: A row g is gate row j = 8·rg + g
// (of W) and A row g + 8 is up row j (of WU), so a lane's outputs 0/1 are gate sums and 2/3 the
// up sums of the same column and inputs, each accumulated exactly as in its own matmul; the
// lane writes silu(gate) · up (the swiglu kernel's float operations on the same values, so the
// result equals matmul → matmul → swiglu bit for bit). XF: XQ/XD/XS are the fragment-ordered
// copies (see the header), over N rounded up to a multiple of 8 rows.
template <class P, u32 TG, bool GLU, u32 U, bool XF, u32 PF, bool H, u32 NW>
DEV void qmma(const u8* __restrict__ W, const u8* __restrict__ WU, const i8* __restrict__ XQ,
              const float* __restrict__ XD, const float* __restrict__ XS, float* __restrict__ Y, u32 N, u32 K,
              u32 M, u64 row_bytes, u32 rg) {
    constexpr u32 R = WARP / NW;
    static_assert(R * NW == WARP && R >= 1, "the warps split the 32 residues evenly");
    const u32 lane = lane_id(), w = tid_x() / WARP;
    const u32 g = lane / 4, t = lane % 4;
    const u32 m0 = rg * (GLU ? QM_ROWS / 2 : QM_ROWS);
    if (m0 >= M) {
        grid_begin();
        return;  // the whole block: no thread reaches the barriers below
    }
    const u32 nb = K / 32;
    // This lane's weight rows (A rows g, g + 8): rows ra, rb of W, or gate and up row ra.
    const u32 ra = m0 + g, rb = GLU ? ra : m0 + g + 8;
    const u8* wa = W + wl_row<P>(ra < M ? ra : M - 1, K, row_bytes);
    const u8* wb = (GLU ? WU : W) + wl_row<P>(rb < M ? rb : M - 1, K, row_bytes);
    // The butterfly's partials across warps (qmma_finish): at 8 and 16 rows (ONE) every warp's,
    // 32 residues × 4·TG outputs × 32 lanes; at 32 rows (64 KB that way, over the static limit)
    // the stepwise form's upper half, 16 residues.
    constexpr bool ONE = TG <= 2;
    __shared__ float red[qmma_red_floats<TG>(ONE)];
    // Chunks hinted before the wait: the `p` kernels' PF, or DS_QPF0 where that is more.
    constexpr u32 PH = PF > DS_QPF0 ? PF : DS_QPF0;
    const QmPrefetch pf = qmma_prefetch_lane<P, PH>(W, WU, GLU, m0, M, K, row_bytes, w * WARP + lane);
#pragma unroll
    for (u32 c = 0; c < PH; ++c) qmma_prefetch<P, PH>(pf, nb, c);
    grid_begin();  // weights hinted above, before the wait: see hip/common.h
    for (u32 n0 = 0; n0 < N; n0 += 8 * TG) {
        QmGroup grp[TG];
        qmma_groups<TG, XF>(grp, XQ, n0, N, K, lane);
        // acc[jj][tg][o]: partial R·w + jj of output o (0: ra × na, 1: ra × nc, 2: rb × na,
        // 3: rb × nc) of group tg.
        float acc[R][TG][4];
#pragma unroll
        for (u32 jj = 0; jj < R; ++jj)
#pragma unroll
            for (u32 tg = 0; tg < TG; ++tg)
#pragma unroll
                for (u32 o = 0; o < 4; ++o) acc[jj][tg][o] = 0.0f;
        // Paired XD/XS loads hold two items' scales per input (XS too, with a minimum): where
        // that is more than 4 · 2 floats per lane, the registers go to spills instead.
        constexpr bool PAIRS = TG * (P::NOMIN ? 1 : 2) <= 2;
        // Two chunks per step spill over 100 bytes at TG = 4 (ptxas 12.9, sm_90): one there.
        constexpr u32 UT = TG >= 4 ? 1 : U;
        if (!XF && PAIRS && nb % 2 == 0) {
            qmma_walk<P, TG, R, PAIRS, UT, XF, PF, H>(wa, wb, grp, XD, XS, nb, R * w, t, acc, pf);
        } else {
            qmma_walk<P, TG, R, false, UT, XF, PF, H>(wa, wb, grp, XD, XS, nb, R * w, t, acc, pf);
        }
        qmma_finish<TG, R, GLU, ONE>(acc, red, w, lane, t, ra, rb, n0, N, M, Y);
    }
}

// Up to four matmuls of one quantized input in one launch, as qgemv_seg in hip/qmatmul.hip:
// each segment's blocks map to rows exactly as in its own launch.
template <class P, u32 TG, u32 U, bool XF, u32 PF, bool H, u32 NW>
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
    qmma<P, TG, false, U, XF, PF, H, NW>(W, nullptr, XQ, XD, XS, Y, N, K, M, row_bytes, b);
}

// The prefill tile (`qmmp*`; on by default, `DELTASPEC_HIP_QMMP=0` turns it off): for graphs
// whose rows are not compared with 1-row decode (Graph::rows_match_decode off: prompts), so the
// items may be summed in any fixed order. The verify tile above pays for the dp4a kernel's
// order at every width: 32 residue partials per output split over a block's warps, a cross-warp
// butterfly per group of 8·TG input rows, and at 32 rows and more a loop over such groups. Here
// each warp owns its own 16 weight rows (NW warps: 16·NW rows per block, which share the activations through L1) and
// walks every item of its rows into one accumulator per output (qmma_chunk's FOLD), 64 input
// rows (TG = 8) per pass: no shared memory, no barrier, 32 accumulators per lane, and each
// weight fragment decoded once per 64 inputs instead of once per 8-32. S items are loaded
// per step (HOIST). Fragment-ordered activations only (qmma_quantize's copy). GLU as in qmma:
// a warp's A rows are 8 gate rows and the same columns' up rows.
constexpr u32 QMP_TG = 8;  // groups of 8 input rows per pass (64 rows; the host only needs N)
constexpr u32 QMP_NW = 4;  // warps per block (mirrored by kernels::QMMP_WARPS)
constexpr u32 QMP_S = 2;   // items per step

template <class P, bool GLU>
DEV void qmmp(const u8* __restrict__ W, const u8* __restrict__ WU, const i8* __restrict__ XQ,
              const float* __restrict__ XD, const float* __restrict__ XS, float* __restrict__ Y, u32 N, u32 K,
              u32 M, u64 row_bytes, u32 rb_block) {
    constexpr u32 TG = QMP_TG, S = QMP_S;
    const u32 lane = lane_id(), w = tid_x() / WARP;
    const u32 g = lane / 4, t = lane % 4;
    const u32 m0 = (rb_block * QMP_NW + w) * (GLU ? QM_ROWS / 2 : QM_ROWS);
    grid_begin();
    if (m0 >= M) return;  // the whole warp: no barrier in this kernel
    const u32 nb = K / 32;
    const u32 ra = m0 + g, rb = GLU ? ra : m0 + g + 8;
    const u8* wa = W + wl_row<P>(ra < M ? ra : M - 1, K, row_bytes);
    const u8* wb = (GLU ? WU : W) + wl_row<P>(rb < M ? rb : M - 1, K, row_bytes);
    const u32 gl = (N - 1) / 8;  // the last group of 8 input rows
    // One pass of 64 input rows per block row of the grid (bid_y; the host launches
    // ceil(N / 64) of them): with every pass in one block, a K = 17408 projection of 5120 rows
    // had only 80 blocks for 132 SMs (H100, pp512: that down projection took 121 ms, gate/up
    // with twice its bytes 109 ms).
    const u32 n0 = 8 * TG * bid_y();
    if (n0 >= N) return;
    QmGroup grp[TG];
#pragma unroll
    for (u32 tg = 0; tg < TG; ++tg) {
        // Groups past the last one repeat it; their results are dropped.
        const u32 gi = n0 / 8 + tg < gl ? n0 / 8 + tg : gl;
        grp[tg].xq = XQ + qm_frag_index(8 * gi, 0, nb) * 32 + 8 * lane;
        grp[tg].xa = (u32)qm_frag_index(8 * gi, 0, nb) + 2 * t;
        grp[tg].xc = 0;
    }
    float acc[1][TG][4];
#pragma unroll
    for (u32 tg = 0; tg < TG; ++tg)
#pragma unroll
        for (u32 o = 0; o < 4; ++o) acc[0][tg][o] = 0.0f;
    u32 sb = 0;
    for (; sb + S <= nb; sb += S) {
        qmma_chunk<P, TG, S, false, false, true, true, true>(wa, wb, grp, XD, XS, nb, sb, t, acc);
    }
    if (sb < nb) qmma_chunk<P, TG, S, true, false, true, true, true>(wa, wb, grp, XD, XS, nb, sb, t, acc);
#pragma unroll
    for (u32 tg = 0; tg < TG; ++tg) {
        const u32 na = n0 + 8 * tg + 2 * t, nc = na + 1;
        if constexpr (GLU) {
            if (ra < M && na < N) Y[(u64)na * M + ra] = ds_silu(acc[0][tg][0]) * acc[0][tg][2];
            if (ra < M && nc < N) Y[(u64)nc * M + ra] = ds_silu(acc[0][tg][1]) * acc[0][tg][3];
        } else {
            if (ra < M && na < N) Y[(u64)na * M + ra] = acc[0][tg][0];
            if (ra < M && nc < N) Y[(u64)nc * M + ra] = acc[0][tg][1];
            if (rb < M && na < N) Y[(u64)na * M + rb] = acc[0][tg][2];
            if (rb < M && nc < N) Y[(u64)nc * M + rb] = acc[0][tg][3];
        }
    }
}

// Up to four matmuls of one quantized input in one launch, blocks dealt as in qmma_seg (each
// block 16·QMP_NW weight rows of one segment).
template <class P>
DEV void qmmp_seg(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1, const u8* W2, float* Y2,
                  u32 M2, const u8* W3, float* Y3, u32 M3, const i8* XQ, const float* XD, const float* XS, u32 N,
                  u32 K, u64 row_bytes) {
    constexpr u32 RPB = QM_ROWS * QMP_NW;
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
    qmmp<P, false>(W, nullptr, XQ, XD, XS, Y, N, K, M, row_bytes, b);
}

// qmmp_<type>, qmmp4_<type> and qmmp_glu_<type>: the arguments of the qmma kernels.
#define DS_QMMP_TYPE(name, P)                                                                             \
    QM_KERNEL(QMP_NW, 1)                                                                                  \
    qmmp_##name(const u8* W, const i8* XQ, const float* XD, const float* XS, float* Y, u32 N, u32 K, u32 M, \
                u64 row_bytes) {                                                                          \
        qmmp<P, false>(W, nullptr, XQ, XD, XS, Y, N, K, M, row_bytes, bid_x());                           \
    }                                                                                                     \
    QM_KERNEL(QMP_NW, 1)                                                                                  \
    qmmp4_##name(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1, const u8* W2, float* Y2,  \
                 u32 M2, const u8* W3, float* Y3, u32 M3, const i8* XQ, const float* XD, const float* XS,  \
                 u32 N, u32 K, u64 row_bytes) {                                                           \
        qmmp_seg<P>(W0, Y0, M0, W1, Y1, M1, W2, Y2, M2, W3, Y3, M3, XQ, XD, XS, N, K, row_bytes);           \
    }                                                                                                     \
    QM_KERNEL(QMP_NW, 1)                                                                                  \
    qmmp_glu_##name(const u8* WG, const u8* WU, const i8* XQ, const float* XD, const float* XS, float* Y,   \
                    u32 N, u32 K, u32 M, u64 row_bytes) {                                                 \
        qmmp<P, true>(WG, WU, XQ, XD, XS, Y, N, K, M, row_bytes, bid_x());                                \
    }
DS_FOR_EACH_FTYPE(DS_QMMP_TYPE)

// Chunks of L2 prefetch distance in the `p` kernels (16 rows × 544 bytes per IQ4_XS chunk: 8 chunks
// are ~70 KB ahead per block, about the bytes one SM must have in flight for its share of 4.3 TB/s
// at ~2 µs loaded latency; a K = 5120 matrix has 5 chunks, all hinted at the start).
constexpr u32 QM_PF = 8;

// qmma_<type>_<nt>, qmma4_<type>_<nt> (segments) and qmma_glu_<type>_<nt> (gate/up pair, 8 output
// columns per block) for tiles of nt = 8·TG input rows, with U = 2 chunks per step; the same
// with suffix u1 for U = 1 (A/B runs, `DELTASPEC_HIP_QMMA_UNROLL=1`; at 32 rows both are U = 1),
// with suffix f for U = 2 on fragment-ordered activations (XF, see the header), with suffix p
// for the f kernels plus L2 prefetch of the weights (QM_PF, see qmma_prefetch), and with suffix q
// for the p kernels with every load of a chunk issued before its first mma (HOIST in
// qmma_chunk; RAW16 weights, i.e. IQ4_XS, only: for the other types q is p).
#define DS_QMMA_NW(name, P, TG, NT, U, XF, PF, H, SFX, NW, MINB)                                         \
    QM_KERNEL(NW, MINB)                                                                                    \
    qmma_##name##_##NT##SFX(const u8* W, const i8* XQ, const float* XD, const float* XS, float* Y, u32 N, \
                            u32 K, u32 M, u64 row_bytes) {                                                 \
        qmma<P, TG, false, U, XF, PF, H, NW>(W, nullptr, XQ, XD, XS, Y, N, K, M, row_bytes, bid_x());      \
    }                                                                                                      \
    QM_KERNEL(NW, MINB)                                                                                    \
    qmma4_##name##_##NT##SFX(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1,             \
                             const u8* W2, float* Y2, u32 M2, const u8* W3, float* Y3, u32 M3,             \
                             const i8* XQ, const float* XD, const float* XS, u32 N, u32 K, u64 row_bytes) { \
        qmma_seg<P, TG, U, XF, PF, H, NW>(W0, Y0, M0, W1, Y1, M1, W2, Y2, M2, W3, Y3, M3, XQ, XD, XS, N, K,  \
                                          row_bytes);                                                     \
    }                                                                                                      \
    QM_KERNEL(NW, MINB)                                                                                    \
    qmma_glu_##name##_##NT##SFX(const u8* WG, const u8* WU, const i8* XQ, const float* XD,                \
                                const float* XS, float* Y, u32 N, u32 K, u32 M, u64 row_bytes) {           \
        qmma<P, TG, true, U, XF, PF, H, NW>(WG, WU, XQ, XD, XS, Y, N, K, M, row_bytes, bid_x());           \
    }
#define DS_QMMA(name, P, TG, NT, U, XF, PF, H, SFX) \
    DS_QMMA_NW(name, P, TG, NT, U, XF, PF, H, SFX, qmma_warps(TG), qmma_min_blocks(TG))
// The `w` kernels: the `q` kernels with qmma_warps_w warps per block and one chunk per step (a
// chunk is twice the items: the same loads in flight per warp as two chunks of the `q` ones,
// which spill at 128 registers with chunks this long; ptxas 12.8, sm_90, IQ4_XS: 68-112 bytes).
// 8 and 16 rows only: at 32 half the warps spill over a kilobyte, so the host runs `q` there
// (HipBackend::qmma_variant). H200, 27B IQ4_XS steps: 16 rows 15.5-15.7 ms against `q`'s
// 17.2-17.3, 8 rows 11.2-11.4 against 10.9, so the default takes `w` at 16 rows only. Without
// the hoisted loads (0-16 bytes spilled) it was slower at both: 13.1 and 18.3 ms.
#define DS_QMMA_W(name, P)                                                                          \
    DS_QMMA_NW(name, P, 1, 8, 1, true, QM_PF, true, w, qmma_warps_w(1), qmma_min_blocks_w(1))        \
    DS_QMMA_NW(name, P, 2, 16, 1, true, QM_PF, true, w, qmma_warps_w(2), qmma_min_blocks_w(2))
#define DS_QMMA_TYPE(name, P)                       \
    DS_QMMA(name, P, 1, 8, 2, false, 0, false, )    \
    DS_QMMA(name, P, 2, 16, 2, false, 0, false, )   \
    DS_QMMA(name, P, 4, 32, 2, false, 0, false, )   \
    DS_QMMA(name, P, 1, 8, 1, false, 0, false, u1)  \
    DS_QMMA(name, P, 2, 16, 1, false, 0, false, u1) \
    DS_QMMA(name, P, 4, 32, 1, false, 0, false, u1) \
    DS_QMMA(name, P, 1, 8, 2, true, 0, false, f)    \
    DS_QMMA(name, P, 2, 16, 2, true, 0, false, f)   \
    DS_QMMA(name, P, 4, 32, 2, true, 0, false, f)   \
    DS_QMMA(name, P, 1, 8, 2, true, QM_PF, false, p) \
    DS_QMMA(name, P, 2, 16, 2, true, QM_PF, false, p) \
    DS_QMMA(name, P, 4, 32, 2, true, QM_PF, false, p) \
    DS_QMMA(name, P, 1, 8, 2, true, QM_PF, true, q)  \
    DS_QMMA(name, P, 2, 16, 2, true, QM_PF, true, q) \
    DS_QMMA(name, P, 4, 32, 2, true, QM_PF, true, q) \
    DS_QMMA_W(name, P)
DS_FOR_EACH_FTYPE(DS_QMMA_TYPE)

// The fragment-ordered activations for the `f` kernels (see the header), one warp per 32-value
// block over N rounded up to 8 rows (blocks of rows past N hold zeros), QM_Q_WARPS per CTA.
constexpr u32 QM_Q_WARPS = 4;  // mirrored by kernels::QMMA_QUANT_THREADS

// qmma_quantize[_gate]: quantize_q8[_gate] (the same float operations, so the same values),
// writing the plain rows XQ/XD/XS and the fragment-ordered copy XQF/XDF/XSF.
template <bool GATE>
DEV void qmma_quantize_impl(const float* __restrict__ X, const float* __restrict__ G, i8* __restrict__ XQ,
                            float* __restrict__ XD, float* __restrict__ XS, i8* __restrict__ XQF,
                            float* __restrict__ XDF, float* __restrict__ XSF, u32 N, u32 K) {
    const u32 nb = K / 32, lane = lane_id();
    const u64 b = (u64)bid_x() * QM_Q_WARPS + tid_x() / WARP;  // block index over [N rounded up, nb]
    if (b >= (u64)(N + 7) / 8 * 8 * nb) return;               // the whole warp
    const u32 n = (u32)(b / nb), s = (u32)(b % nb);
    float x = 0.0f;
    if (n < N) {
        x = X[b * 32 + lane];
        if (GATE) x = x * ds_sigmoid(G[b * 32 + lane]);
    }
    q8_store_rows<true>(x, n, s, nb, N, XQ, XD, XS, XQF, XDF, XSF);
}

KERNEL(QM_Q_WARPS * WARP)
qmma_quantize(const float* __restrict__ X, i8* __restrict__ XQ, float* __restrict__ XD, float* __restrict__ XS,
              i8* __restrict__ XQF, float* __restrict__ XDF, float* __restrict__ XSF, u32 N, u32 K) {
    grid_begin();
    qmma_quantize_impl<false>(X, nullptr, XQ, XD, XS, XQF, XDF, XSF, N, K);
}

KERNEL(QM_Q_WARPS * WARP)
qmma_quantize_gate(const float* __restrict__ X, const float* __restrict__ G, i8* __restrict__ XQ,
                   float* __restrict__ XD, float* __restrict__ XS, i8* __restrict__ XQF, float* __restrict__ XDF,
                   float* __restrict__ XSF, u32 N, u32 K) {
    grid_begin();
    qmma_quantize_impl<true>(X, G, XQ, XD, XS, XQF, XDF, XSF, N, K);
}

// The fragment-ordered copy of rows already quantized in the plain layout (by a norm's `_q8`
// kernel): the same values at their fragment addresses.
KERNEL(QM_Q_WARPS * WARP)
qmma_relayout(const i8* __restrict__ XQ, const float* __restrict__ XD, const float* __restrict__ XS,
              i8* __restrict__ XQF, float* __restrict__ XDF, float* __restrict__ XSF, u32 N, u32 K) {
    grid_begin();
    const u32 nb = K / 32, lane = lane_id();
    const u64 b = (u64)bid_x() * QM_Q_WARPS + tid_x() / WARP;
    if (b >= (u64)(N + 7) / 8 * 8 * nb) return;
    const u32 n = (u32)(b / nb), s = (u32)(b % nb);
    const bool in = n < N;
    const u64 f = qm_frag_index(n, s, nb);
    XQF[f * 32 + qm_frag_byte(lane)] = in ? XQ[b * 32 + lane] : (i8)0;
    if (lane == 0) XDF[f] = in ? XD[b] : 0.0f, XSF[f] = in ? XS[b] : 0.0f;
}

#include "qmma_staged.h"

#endif
