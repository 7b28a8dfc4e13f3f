// The staged verify tile (`qmma_<type>_<nt>t`, `qmma4_*_<nt>t`, `qmma_glu_*_<nt>t`; 8 and 16
// input rows, IQ4_XS): the `w` tile's warps, residues, float order and butterfly (so the same
// bits as every other verify and 1-row kernel), with the weights streamed through a ring of S
// shared-memory stages by the TMA, and persistent blocks.
//
// Why (ncu, sessions 9-36): the register-loading tiles are latency-bound, not DRAM- or
// issue-bound. A block of a K = 5120 matrix walks 5 rounds, each warp waiting for its own loads
// of every round (a round or two in flight per warp), then runs its cross-warp butterfly behind
// barriers, and the next block on that SM starts cold: gate/up at 16 rows reads 1.2 TB/s
// (77.6 µs for 95 MB, H100) while issuing about half the cycles. Here a block owns tiles b,
// b + G, b + 2G, ... (G blocks, about two per SM), and one stream of rounds runs through the
// whole sequence: stage k holds round k % nr of the block's tile k / nr (16 weight rows of one
// round: one run of 16 · RB bytes, since a panel holds them; the pair's 8 gate rows then 8 up
// rows). The warp that releases a stage last (a shared counter) refills it with round k + S at
// once, and asks L2 for the round after that (a bulk prefetch), so the next tile's first rounds
// arrive while this one's butterfly runs. The warps read their items from the stage instead of
// global memory; the activations stay in global memory (L1/L2: every block reads them).
//
// Opt-in (`DELTASPEC_HIP_QMMA_V2=4`): measured slower. H100, session 37: 27B steps of 16 rows
// 14.94 ms against 14.68 for `w`, of 8 rows 10.92 against 10.79 for `q`; ncu gate/up 74.1 µs
// against 77.3 but single projections 34.3 against 32.2, with the same issue rate (0.55 per
// scheduler, 45 % of cycles with no eligible warp): with the weights in shared memory the
// warps still wait on their own chains (activations, shuffles, mma, the float combine), so
// the tile is not bound by how the weights arrive. NVIDIA sm_90 (the TMA); on the CPU
// emulator (and sm_80) the copy is synchronous and every wait a block barrier, with the same
// values.

constexpr u32 QMS_WARPS = 8;  // warps per block (R = 4 residues each), mirrored by kernels::QMMA_STAGED_THREADS
constexpr u32 QMS_MINB = 2;   // blocks per SM (128 registers), mirrored by kernels::QMMA_STAGED_BLOCKS_PER_SM
// Rounds ahead of a stage's refill that are also asked into L2 (0: none; an A/B knob).
#ifndef DS_QMS_PF
#define DS_QMS_PF 1
#endif

// Up to four matrices of one quantized input (qmma4's segments; one for qmma), or a gate/up pair
// (W[0], WU; one segment). Unused segments have M = 0.
struct QmsSegs {
    const u8 *W0, *W1, *W2, *W3, *WU;
    float *Y0, *Y1, *Y2, *Y3;
    u32 M0, M1, M2, M3;
};
// One tile: its matrix (and the pair's up matrix), output, rows and first row (column).
struct QmsTile {
    const u8 *W, *WU;
    float* Y;
    u32 M, m0;
};
template <u32 ROWS>
DEV u32 qms_tiles(const QmsSegs& s) {
    return (s.M0 + ROWS - 1) / ROWS + (s.M1 + ROWS - 1) / ROWS + (s.M2 + ROWS - 1) / ROWS +
           (s.M3 + ROWS - 1) / ROWS;
}
// Tiles are dealt to segments in order, as qmma_seg deals blocks.
template <u32 ROWS>
DEV QmsTile qms_tile(const QmsSegs& s, u32 i) {
    const u32 t0 = (s.M0 + ROWS - 1) / ROWS, t1 = (s.M1 + ROWS - 1) / ROWS, t2 = (s.M2 + ROWS - 1) / ROWS;
    if (i < t0) return QmsTile{s.W0, s.WU, s.Y0, s.M0, i * ROWS};
    i -= t0;
    if (i < t1) return QmsTile{s.W1, s.WU, s.Y1, s.M1, i * ROWS};
    i -= t1;
    if (i < t2) return QmsTile{s.W2, s.WU, s.Y2, s.M2, i * ROWS};
    return QmsTile{s.W3, s.WU, s.Y3, s.M3, (i - t2) * ROWS};
}

template <class P, u32 TG, bool GLU, u32 S>
DEV void qmma_staged(const QmsSegs& sg, const i8* __restrict__ XQ, const float* __restrict__ XD,
                     const float* __restrict__ XS, u32 N, u32 K) {
    constexpr u32 NW = QMS_WARPS, R = WARP / NW, RB = wl_round_bytes<P>(), RS = wl_round_stride<P>();
    constexpr u32 ROWS = GLU ? QM_ROWS / 2 : QM_ROWS;  // a tile's output rows (columns of the pair)
    constexpr u32 PIECE = ROWS * RB, STAGE = QM_ROWS * RB;
    static_assert(WlPanel<P>::v && DS_WL_G % QM_ROWS == 0, "a tile's rows of a round are one run");
    static_assert(PIECE % 16 == 0, "bulk copies move multiples of 16 bytes");
    alignas(128) __shared__ u8 stage[S][STAGE];
    __shared__ u64 full[S];  // stage k % S holds round k
    __shared__ u32 done[S];  // warps done with a stage, NW per round it held
    __shared__ float red[qmma_red_floats<TG>(false)];  // the stepwise butterfly (static shared memory)
    const u32 tid = tid_x(), lane = lane_id(), w = tid / WARP, g = lane / 4, t = lane % 4;
    const u32 nb = K / 32, nr = (nb + WARP - 1) / WARP;
    const u32 G = gdim_x(), b = bid_x(), tiles = qms_tiles<ROWS>(sg);
    const u32 mine = b < tiles ? (tiles - b + G - 1) / G : 0;
    const u32 total = mine * nr;  // rounds this block streams
    // Round k's bytes: one run per matrix (panels are padded to whole panels and packed
    // matrices to 32 rows, so a tile's run stays inside the allocation).
    auto round_at = [&](u32 k, bool up) {
        const QmsTile tl = qms_tile<ROWS>(sg, b + (k / nr) * G);
        return (up ? tl.WU : tl.W) + wl_row<P>(tl.m0, K, 0) + (u64)(k % nr) * RS;
    };
    auto issue = [&](u32 k) {  // round k into stage k % S, and round k + S into L2
        u64* bar = &full[k % S];
        mbar_expect(bar, STAGE);
#pragma unroll
        for (u32 m = 0; m < (GLU ? 2 : 1); ++m) bulk_copy(stage[k % S] + m * PIECE, round_at(k, m), PIECE, bar);
        if (DS_QMS_PF && k + S < total) {
#pragma unroll
            for (u32 m = 0; m < (GLU ? 2 : 1); ++m) bulk_prefetch_l2(round_at(k + S, m), PIECE);
        }
    };
    if (tid == 0) {
        for (u32 i = 0; i < S; ++i) mbar_init(&full[i]), done[i] = 0;
        for (u32 k = 0; k < S && k < total; ++k) issue(k);  // weights: never written, so before the wait
    }
    sync_block();  // the barriers and counters are initialised before anyone uses them
    grid_begin();
    QmGroup grp[TG];
    qmma_groups<TG, true>(grp, XQ, 0, N, K, lane);
    u32 k = 0;
    for (u32 i = 0; i < mine; ++i) {
        const QmsTile tl = qms_tile<ROWS>(sg, b + i * G);
        float acc[R][TG][4];
#pragma unroll
        for (u32 jj = 0; jj < R; ++jj)
#pragma unroll
            for (u32 tg = 0; tg < TG; ++tg)
#pragma unroll
                for (u32 o = 0; o < 4; ++o) acc[jj][tg][o] = 0.0f;
        for (u32 c = 0; c < nr; ++c, ++k) {
            const u32 sl = k % S;
            mbar_wait(&full[sl], (k / S) & 1);
            // A rows g and g + 8 of the stage: rows m0 + g, m0 + g + 8, or gate and up column m0 + g.
            const u8* wa = stage[sl] + g * RB;
            const u8* wb = wa + 8 * RB;
            const u32 sb = c * WARP + R * w;
            if (sb + R <= nb) {
                qmma_chunk<P, TG, R, false, false, true, true, false, true>(wa, wb, grp, XD, XS, nb, sb, t, acc);
            } else if (sb < nb) {
                qmma_chunk<P, TG, R, true, false, true, true, false, true>(wa, wb, grp, XD, XS, nb, sb, t, acc);
            }
            sync_warp();  // every lane's reads of the stage are done
            if (lane == 0 && atom_add_cta(&done[sl], 1) % NW == NW - 1 && k + S < total) issue(k + S);
        }
        const u32 ra = tl.m0 + g;
        qmma_finish<TG, R, GLU>(acc, red, w, lane, t, ra, GLU ? ra : ra + 8, 0, N, tl.M, tl.Y);
    }
}

// Stages: 4 at 8 input rows, 3 at 16 (the butterfly's buffer doubles; static shared memory
// stays under 48 KiB: 43.0 and 42.5 KiB for IQ4_XS).
constexpr u32 qms_stages(u32 tg) { return tg == 1 ? 4 : 3; }
#define DS_QMMA_T(name, P, TG, NT)                                                                           \
    QM_KERNEL(QMS_WARPS, QMS_MINB)                                                                           \
    qmma_##name##_##NT##t(const u8* W, const i8* XQ, const float* XD, const float* XS, float* Y, u32 N, u32 K, \
                          u32 M, u64 row_bytes) {                                                            \
        (void)row_bytes;                                                                                     \
        const QmsSegs s{W, nullptr, nullptr, nullptr, nullptr, Y, nullptr, nullptr, nullptr, M, 0, 0, 0};    \
        qmma_staged<P, TG, false, qms_stages(TG)>(s, XQ, XD, XS, N, K);                                      \
    }                                                                                                        \
    QM_KERNEL(QMS_WARPS, QMS_MINB)                                                                           \
    qmma4_##name##_##NT##t(const u8* W0, float* Y0, u32 M0, const u8* W1, float* Y1, u32 M1, const u8* W2,    \
                           float* Y2, u32 M2, const u8* W3, float* Y3, u32 M3, const i8* XQ, const float* XD,  \
                           const float* XS, u32 N, u32 K, u64 row_bytes) {                                   \
        (void)row_bytes;                                                                                     \
        const QmsSegs s{W0, W1, W2, W3, nullptr, Y0, Y1, Y2, Y3, M0, M1, M2, M3};                            \
        qmma_staged<P, TG, false, qms_stages(TG)>(s, XQ, XD, XS, N, K);                                      \
    }                                                                                                        \
    QM_KERNEL(QMS_WARPS, QMS_MINB)                                                                           \
    qmma_glu_##name##_##NT##t(const u8* WG, const u8* WU, const i8* XQ, const float* XD, const float* XS,     \
                              float* Y, u32 N, u32 K, u32 M, u64 row_bytes) {                                \
        (void)row_bytes;                                                                                     \
        const QmsSegs s{WG, nullptr, nullptr, nullptr, WU, Y, nullptr, nullptr, nullptr, M, 0, 0, 0};        \
        qmma_staged<P, TG, true, qms_stages(TG)>(s, XQ, XD, XS, N, K);                                       \
    }
// Only where a panel holds whole tiles (kernels::QMMA_STAGED_TYPES is empty otherwise).
#if DS_WL_G % 16 == 0
DS_QMMA_T(iq4_xs, FIQ4_XS, 1, 8)
DS_QMMA_T(iq4_xs, FIQ4_XS, 2, 16)
#endif
