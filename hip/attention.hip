// GQA attention over a KV cache with a causal mask (graph op Attention):
//   q [T, nh, hd], k, v [T, nkv, hd], pos [T], k_cache, v_cache [cap, nkv, hd].
// 1. kv_write: rows pos[t] of the caches get the new k/v (all rows before any query runs).
// 2. attn_hdN: query t, head h attends to cache rows of kv head h / (nh / nkv) with
//    softmax(q·k · scale) in f32 (online softmax). Causal (graph op Attention): rows
//    0 ..= pos[t]. Non-causal (AttentionNonCausal): rows 0 .. n_all (= max(pos) + 1, read from
//    the device positions), limited to |pos[t] - j| <= window when window > 0. Tree (AttentionTree; mask != null,
//    causal range): the new rows are consecutive from pos[0] and query t skips the new rows
//    pos[0] + j with mask[t·T + j] == 0. Grid (splits, nh, T), 4 warps per block, each
//    warp a strided subset of the keys; lane l holds dims l, l + 32, ... (HDL = ceil(hd / 32)).
//    With one split the block writes the normalised output; otherwise it writes its partial
//    (max, sum, unnormalised output) and 3. attn_combine merges the splits. Split s covers keys
//    [lo + s·chunk, lo + (s+1)·chunk), chunk = ceil(longest key range / nsplit), both derived
//    on the device from pos (decode and verify steps, causal = 2: chunk = ceil(cap / nsplit)):
//    the host fixes only nsplit (a launch shape), so a captured graph replays correctly for
//    every position of a later run.
#include "common.h"
#include "q8act.h"

constexpr u32 ATTN_WARPS = 4;
constexpr u32 ATTN_THREADS = ATTN_WARPS * WARP;
constexpr u32 KV_THREADS = 256;

KERNEL(KV_THREADS) kv_write(const float* __restrict__ k, const float* __restrict__ v, const i32* __restrict__ pos,
                            float* __restrict__ kc, float* __restrict__ vc, u32 T, u32 row, u32 cap) {
    grid_begin();
    const u64 i = (u64)bid_x() * KV_THREADS + tid_x();
    if (i >= (u64)T * row) return;
    const u32 t = (u32)(i / row), e = (u32)(i % row);
    const i32 p = pos[t];
    if (p < 0 || (u32)p >= cap) return;  // the host rejects such positions before launching
    kc[(u64)p * row + e] = k[i];
    vc[(u64)p * row + e] = v[i];
}

// One past the largest in-cache position of the T rows (0 if none), for every lane of the warp.
DEV u32 attn_extent(const i32* __restrict__ pos, u32 T, u32 cap) {
    i32 mx = -1;
    for (u32 i = lane_id(); i < T; i += WARP) {
        const i32 p = pos[i];
        if (p >= 0 && (u32)p < cap && p > mx) mx = p;
    }
#pragma unroll
    for (u32 m = 16; m > 0; m >>= 1) {
        const i32 o = shfl_xor_i32(mx, m);
        mx = o > mx ? o : mx;
    }
    return (u32)(mx + 1);
}

// One key of the online softmax: score s, value row x (this lane's dims).
template <u32 HDL>
DEV void attn_take(float s, const float (&x)[HDL], float& m, float& l, float (&acc)[HDL], u32 lane, u32 hd) {
    const float m_new = __builtin_fmaxf(m, s);
    const float corr = ds_expf(m - m_new);
    const float e = ds_expf(s - m_new);
    l = l * corr + e;
#pragma unroll
    for (u32 r = 0; r < HDL; ++r) {
        const u32 d = lane + WARP * r;
        acc[r] = acc[r] * corr + (d < hd ? e * x[r] : 0.0f);
    }
    m = m_new;
}

template <u32 HDL>
DEV void attn(const float* __restrict__ q, const float* __restrict__ kc, const float* __restrict__ vc,
              const i32* __restrict__ pos, float* __restrict__ out, float* __restrict__ part_o,
              float* __restrict__ part_ml, u32 nh, u32 nkv, u32 hd, float scale, u32 nsplit, u32 cap,
              u32 causal, u32 window, const i32* __restrict__ mask, u32 T) {
    __shared__ float sm[ATTN_WARPS], sl[ATTN_WARPS];
    __shared__ float so[ATTN_WARPS][HDL * WARP];
    const u32 sp = bid_x(), h = bid_y(), t = bid_z();
    const u32 lane = lane_id(), w = tid_x() / WARP;
    const u32 kvh = h / (nh / nkv);
    const u32 row = nkv * hd;
    const i32 p = pos[t];
    // Causal attention with one split needs no extent (each query ends at its own position).
    const u32 n_all = (!causal || (nsplit > 1 && causal != 2)) ? attn_extent(pos, T, cap) : cap;
    const u32 max_n = !causal && window > 0 && 2 * window + 1 < n_all ? 2 * window + 1 : n_all;
    // causal == 2 (decode and verify steps): splits on a grid fixed by the cache size, so a
    // query's keys, their order per warp and its partials do not depend on the other rows of
    // the run: a verify row keeps the decode step's bits (lossless greedy speculation). Else the
    // longest range of the run is split evenly.
    const u32 chunk = nsplit == 1  ? cap
                      : causal == 2 ? (cap + nsplit - 1) / nsplit
                                    : ((max_n + nsplit - 1) / nsplit > 0 ? (max_n + nsplit - 1) / nsplit : 1u);
    // Key rows [lo, hi) of this query; empty for a position outside the cache (rejected by the
    // host when positions are an input).
    u32 lo = 0, hi = 0;
    if (p >= 0 && (u32)p < cap) {
        if (causal) {
            hi = (u32)p + 1;
        } else {
            hi = n_all < cap ? n_all : cap;
            if (window > 0) {
                lo = (u32)p > window ? (u32)p - window : 0u;
                const u32 w_hi = (u32)p + window + 1;
                hi = w_hi < hi ? w_hi : hi;
            }
        }
    }
    const u32 j0 = lo + sp * chunk;
    const u32 j1 = j0 + chunk < hi ? j0 + chunk : hi;

    float qr[HDL], acc[HDL];
    const float* qh = q + ((u64)t * nh + h) * hd;
#pragma unroll
    for (u32 r = 0; r < HDL; ++r) {
        const u32 d = lane + WARP * r;
        qr[r] = d < hd ? qh[d] : 0.0f;
        acc[r] = 0.0f;
    }
    float m = -__builtin_inff(), l = 0.0f;
    const u32 base = mask ? (u32)pos[0] : 0u;
    // Two keys a round (j and j + ATTN_WARPS): both rows' loads and warp sums are independent,
    // so they overlap; one key a round left each warp's walk one dependent chain of DRAM loads,
    // shuffles and exps per key (decode after 4096 context rows: ~75 µs a layer, session 27).
    // The online softmax still takes the keys in the same order, so the bits are unchanged.
    for (u32 j = j0 + w; j < j1; j += 2 * ATTN_WARPS) {
        const u32 jb = j + ATTN_WARPS;
        const bool use_a = !(mask && j >= base && mask[(u64)t * T + (j - base)] == 0);  // uniform per warp
        const bool use_b = jb < j1 && !(mask && jb >= base && mask[(u64)t * T + (jb - base)] == 0);
        const float* ka = kc + (u64)j * row + (u64)kvh * hd;
        const float* kb = kc + (u64)(use_b ? jb : j) * row + (u64)kvh * hd;
        float da = 0.0f, db = 0.0f;
#pragma unroll
        for (u32 r = 0; r < HDL; ++r) {
            const u32 d = lane + WARP * r;
            if (d < hd) {
                da += qr[r] * ka[d];
                db += qr[r] * kb[d];
            }
        }
        const float* va = vc + (u64)j * row + (u64)kvh * hd;
        const float* vb = vc + (u64)(use_b ? jb : j) * row + (u64)kvh * hd;
        float xa[HDL], xb[HDL];
#pragma unroll
        for (u32 r = 0; r < HDL; ++r) {
            const u32 d = lane + WARP * r;
            xa[r] = d < hd ? va[d] : 0.0f;
            xb[r] = d < hd ? vb[d] : 0.0f;
        }
        const float sa = warp_sum(da) * scale;
        const float sb = warp_sum(db) * scale;
        if (use_a) attn_take<HDL>(sa, xa, m, l, acc, lane, hd);
        if (use_b) attn_take<HDL>(sb, xb, m, l, acc, lane, hd);
    }
    if (lane == 0) {
        sm[w] = m;
        sl[w] = l;
    }
#pragma unroll
    for (u32 r = 0; r < HDL; ++r) so[w][lane + WARP * r] = acc[r];
    sync_block();
    if (w != 0) return;  // no barriers follow
    float M = sm[0];
#pragma unroll
    for (u32 i = 1; i < ATTN_WARPS; ++i) M = __builtin_fmaxf(M, sm[i]);
    float L = 0.0f, f[ATTN_WARPS];
#pragma unroll
    for (u32 i = 0; i < ATTN_WARPS; ++i) {
        f[i] = sl[i] > 0.0f ? ds_expf(sm[i] - M) : 0.0f;
        L += sl[i] * f[i];
    }
    const u64 head = (u64)t * nh + h;
#pragma unroll
    for (u32 r = 0; r < HDL; ++r) {
        const u32 d = lane + WARP * r;
        if (d >= hd) continue;
        float o = 0.0f;
#pragma unroll
        for (u32 i = 0; i < ATTN_WARPS; ++i) o += so[i][d] * f[i];
        if (nsplit == 1) {
            out[head * hd + d] = o / L;
        } else {
            part_o[(head * nsplit + sp) * hd + d] = o;
        }
    }
    if (nsplit != 1 && lane == 0) {
        part_ml[(head * nsplit + sp) * 2] = M;
        part_ml[(head * nsplit + sp) * 2 + 1] = L;
    }
}

#define DS_ATTN(HDL)                                                                                 \
    KERNEL(ATTN_THREADS)                                                                             \
    attn_hd##HDL(const float* q, const float* kc, const float* vc, const i32* pos, float* out,        \
                 float* part_o, float* part_ml, u32 nh, u32 nkv, u32 hd, float scale, u32 nsplit,     \
                 u32 cap, u32 causal, u32 window, const i32* mask, u32 T) {                          \
        grid_begin();                                                                                \
        attn<HDL>(q, kc, vc, pos, out, part_o, part_ml, nh, nkv, hd, scale, nsplit, cap, causal,     \
                  window, mask, T);                                                                  \
    }

DS_ATTN(1)
DS_ATTN(2)
DS_ATTN(4)
DS_ATTN(8)

// Non-causal attention of a block of queries (graph op AttentionNonCausal: drafter blocks of B
// rows over the context and the block). attn_hdN above re-reads every K/V row once per (query,
// head); here a block owns one kv head, the (up to) NC_Q query vectors that share it and one
// split of the keys, and stages NC_KC key rows of K and V in shared memory once for all of them.
// Query vectors are numbered qi = t·G + g over the T·G (token, head) pairs of the kv head
// (G = nh / nkv, head kvh·G + g). Grid (nsplit, nkv, ceil(T·G / NC_Q)), NC_THREADS threads;
// warp w owns queries NC_QW·w .. NC_QW·w + NC_QW − 1 of the block.
// Scores: lane l holds dims l, l + 32, ... of its warp's NC_QW queries in registers; per chunk
// of NC_CH keys it forms the NC_QW·NC_CH = 32 partial dots (query, key) and one transposing
// butterfly (16 + 8 + 4 + 2 + 1 shuffles, nc_fold) leaves the full dot of (query l / NC_CH, key
// l % NC_CH) in lane l. Softmax: online per query and tile (the max over the NC_CH lanes of a
// query); the weights go through shared memory to the value pass, where lanes hold dims again.
// Keys: split s covers its share of the union [lo, n_all) of the queries' ranges (both derived on
// the device from pos, as in attn); each query masks the keys outside its own range. Output as
// attn: normalised with one split, else partials for attn_combine.
constexpr u32 NC_WARPS = 8;
constexpr u32 NC_THREADS = NC_WARPS * WARP;
constexpr u32 NC_QW = 4;                // query vectors per warp
constexpr u32 NC_Q = NC_WARPS * NC_QW;  // per block (mirrored by lower.rs NC_QUERIES)
constexpr u32 NC_CH = WARP / NC_QW;     // keys per transposed chunk
// Keys per shared-memory tile: K and V tiles of NC_KC · 32·HDL floats each stay within 32 KiB.
constexpr u32 nc_kc(u32 hdl) { return hdl <= 4 ? 32 : 16; }
static_assert(NC_QW == 4, "the value pass reads a warp's weights of one key as one f32x4");

// The smallest in-cache position of the T rows (cap if none), for every lane of the warp.
DEV u32 attn_first(const i32* __restrict__ pos, u32 T, u32 cap) {
    u32 mn = cap;
    for (u32 i = lane_id(); i < T; i += WARP) {
        const i32 p = pos[i];
        if (p >= 0 && (u32)p < cap && (u32)p < mn) mn = (u32)p;
    }
#pragma unroll
    for (u32 m = 16; m > 0; m >>= 1) {
        const u32 o = (u32)shfl_xor_i32((i32)mn, m);
        mn = o < mn ? o : mn;
    }
    return mn;
}

// One step of the transposing butterfly: lanes with bit O set keep the upper O of the 2·O values
// and send the lower O to their partner, which does the opposite; both add what they receive.
// After O = 16 .. 1, lane l holds the sum over all lanes of value l.
// The halves are exchanged by an integer blend, not a select: clang turns a select of two array
// elements into a load through a selected address, which keeps the array in local memory.
template <u32 O>
DEV void nc_fold(float (&v)[WARP], u32 lane) {
    const i32 up = -(i32)((lane / O) & 1u);  // all ones where bit O of the lane is set
#pragma unroll
    for (u32 i = 0; i < O; ++i) {
        const i32 lo = __builtin_bit_cast(i32, v[i]), hi = __builtin_bit_cast(i32, v[i + O]);
        const i32 swap = (lo ^ hi) & up;
        const float send = __builtin_bit_cast(float, hi ^ swap);  // lo where up, else hi
        const float keep = __builtin_bit_cast(float, lo ^ swap);  // hi where up, else lo
        v[i] = keep + shfl_xor(send, O);
    }
    if constexpr (O > 1) nc_fold<O / 2>(v, lane);
}

template <u32 HDL>
DEV void attn_nc(const float* __restrict__ q, const float* __restrict__ kc, const float* __restrict__ vc,
                 const i32* __restrict__ pos, float* __restrict__ out, float* __restrict__ part_o,
                 float* __restrict__ part_ml, u32 nh, u32 nkv, u32 hd, float scale, u32 nsplit, u32 cap,
                 u32 window, u32 T) {
    constexpr u32 KC = nc_kc(HDL), HDP = HDL * WARP;
    __shared__ float ks[KC][HDP], vs[KC][HDP];
    __shared__ f32x4 pw[NC_WARPS][KC];  // softmax weights of a warp's NC_QW queries per key
    const u32 sp = bid_x(), kvh = bid_y();
    const u32 lane = lane_id(), w = tid_x() / WARP;
    const u32 G = nh / nkv, nq = T * G, row = nkv * hd;
    const u32 q0 = bid_z() * NC_Q + w * NC_QW;  // this warp's first query vector

    // The union of the queries' key ranges, and this split's part of it.
    const u32 n_all = attn_extent(pos, T, cap);
    u32 lo_all = 0;
    if (window > 0) {
        const u32 first = attn_first(pos, T, cap);
        lo_all = first < n_all && first > window ? first - window : 0u;
    }
    const u32 span = n_all > lo_all ? n_all - lo_all : 0u;
    const u32 chunk = (span + nsplit - 1) / nsplit;
    const u32 j0 = lo_all + sp * chunk;
    const u32 j1 = j0 + chunk < n_all ? j0 + chunk : n_all;

    // The key range [qlo, qhi) of this lane's scoring query (q0 + lane / NC_CH).
    u32 qlo = 0, qhi = 0;
    {
        const u32 qi = q0 + lane / NC_CH;
        const i32 p = qi < nq ? pos[qi / G] : -1;
        if (p >= 0 && (u32)p < cap) {
            qhi = n_all;
            if (window > 0) {
                qlo = (u32)p > window ? (u32)p - window : 0u;
                const u32 w_hi = (u32)p + window + 1;
                qhi = w_hi < qhi ? w_hi : qhi;
            }
        }
    }

    float qr[NC_QW][HDL], acc[NC_QW][HDL];
#pragma unroll
    for (u32 i = 0; i < NC_QW; ++i) {
        const u32 qi = q0 + i;
        const float* qh = q + ((u64)(qi / G) * nh + kvh * G + qi % G) * hd;
#pragma unroll
        for (u32 r = 0; r < HDL; ++r) {
            const u32 d = lane + WARP * r;
            qr[i][r] = qi < nq && d < hd ? qh[d] : 0.0f;
            acc[i][r] = 0.0f;
        }
    }
    // Running max (equal on the NC_CH lanes of a query) and this lane's part of the sum.
    float m = -__builtin_inff(), l = 0.0f;
    for (u32 jt = j0; jt < j1; jt += KC) {
        sync_block();  // the previous tile's readers are done
        for (u32 e = tid_x(); e < KC * HDP; e += NC_THREADS) {
            const u32 kk = e / HDP, d = e % HDP, j = jt + kk;
            const bool ok = j < j1 && d < hd;
            const u64 off = (u64)j * row + (u64)kvh * hd + d;
            ks[kk][d] = ok ? kc[off] : 0.0f;
            vs[kk][d] = ok ? vc[off] : 0.0f;
        }
        sync_block();
        // Scores of (query lane / NC_CH, key c·NC_CH + lane % NC_CH), masked and scaled.
        float s[KC / NC_CH];
        float tmax = -__builtin_inff();
        // Keys of this tile in the split: the last tile of a split is often short (a split of 33
        // keys is one full tile and one key), and chunks past the end are skipped, not scored.
        const u32 kn = j1 - jt < KC ? j1 - jt : KC;
#pragma unroll
        for (u32 c = 0; c < KC / NC_CH; ++c) {
            if (c * NC_CH >= kn) {  // uniform over the block
                s[c] = -__builtin_inff();
                continue;
            }
            float v[WARP];
#pragma unroll
            for (u32 kk = 0; kk < NC_CH; ++kk) {
                float kv[HDL];
#pragma unroll
                for (u32 r = 0; r < HDL; ++r) kv[r] = ks[c * NC_CH + kk][lane + WARP * r];
#pragma unroll
                for (u32 i = 0; i < NC_QW; ++i) {
                    float dot = 0.0f;
#pragma unroll
                    for (u32 r = 0; r < HDL; ++r) dot += qr[i][r] * kv[r];
                    v[i * NC_CH + kk] = dot;
                }
            }
            nc_fold<WARP / 2>(v, lane);
            const u32 j = jt + c * NC_CH + lane % NC_CH;
            s[c] = j >= qlo && j < qhi && j < j1 ? v[0] * scale : -__builtin_inff();
            tmax = __builtin_fmaxf(tmax, s[c]);
        }
#pragma unroll
        for (u32 o = NC_CH / 2; o > 0; o >>= 1) tmax = __builtin_fmaxf(tmax, shfl_xor(tmax, o));
        const float m_new = __builtin_fmaxf(m, tmax);
        // No key of this query so far: nothing to rescale, every weight 0.
        const bool none = m_new == -__builtin_inff();
        const float corr = none ? 1.0f : ds_expf(m - m_new);
        l *= corr;
        m = m_new;
#pragma unroll
        for (u32 c = 0; c < KC / NC_CH; ++c) {
            const float e = s[c] == -__builtin_inff() ? 0.0f : ds_expf(s[c] - m_new);
            l += e;
            float* slot = &pw[w][c * NC_CH + lane % NC_CH].x;
            slot[lane / NC_CH] = e;
        }
        float cr[NC_QW];
#pragma unroll
        for (u32 i = 0; i < NC_QW; ++i) cr[i] = shfl_idx(corr, i * NC_CH);
        sync_block();  // the weights are visible to the whole warp (block-uniform loop)
#pragma unroll
        for (u32 i = 0; i < NC_QW; ++i)
#pragma unroll
            for (u32 r = 0; r < HDL; ++r) acc[i][r] *= cr[i];
#pragma unroll 4
        for (u32 kk = 0; kk < kn; ++kk) {
            const f32x4 p4 = pw[w][kk];
            const float pk[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
            for (u32 r = 0; r < HDL; ++r) {
                const float vv = vs[kk][lane + WARP * r];
#pragma unroll
                for (u32 i = 0; i < NC_QW; ++i) acc[i][r] += pk[i] * vv;
            }
        }
    }
    // The sum of each query over its NC_CH lanes.
#pragma unroll
    for (u32 o = NC_CH / 2; o > 0; o >>= 1) l += shfl_xor(l, o);
    float L[NC_QW], M[NC_QW];
#pragma unroll
    for (u32 i = 0; i < NC_QW; ++i) {
        L[i] = shfl_idx(l, i * NC_CH);
        M[i] = shfl_idx(m, i * NC_CH);
    }
#pragma unroll
    for (u32 i = 0; i < NC_QW; ++i) {
        const u32 qi = q0 + i;
        if (qi >= nq) continue;
        const u64 head = (u64)(qi / G) * nh + kvh * G + qi % G;
#pragma unroll
        for (u32 r = 0; r < HDL; ++r) {
            const u32 d = lane + WARP * r;
            if (d >= hd) continue;
            if (nsplit == 1) {
                out[head * hd + d] = acc[i][r] / L[i];
            } else {
                part_o[(head * nsplit + sp) * hd + d] = acc[i][r];
            }
        }
        if (nsplit != 1 && lane == 0) {
            part_ml[(head * nsplit + sp) * 2] = M[i];
            part_ml[(head * nsplit + sp) * 2 + 1] = L[i];
        }
    }
}

#define DS_ATTN_NC(HDL)                                                                                  \
    KERNEL(NC_THREADS)                                                                                   \
    attn_nc_hd##HDL(const float* q, const float* kc, const float* vc, const i32* pos, float* out,         \
                    float* part_o, float* part_ml, u32 nh, u32 nkv, u32 hd, float scale, u32 nsplit,      \
                    u32 cap, u32 window, u32 T) {                                                         \
        grid_begin();                                                                                     \
        attn_nc<HDL>(q, kc, vc, pos, out, part_o, part_ml, nh, nkv, hd, scale, nsplit, cap, window, T); \
    }

DS_ATTN_NC(1)
DS_ATTN_NC(2)
DS_ATTN_NC(4)
DS_ATTN_NC(8)

constexpr u32 COMBINE_THREADS = 128;
constexpr u32 COMBINE_MAX_SPLITS = 64;  // ATTN_MAX_SPLITS in src/backend/hip/attention.rs

// Grid (nh, T): merges the nsplit partials of one (token, head). Each split's weight
// exp(m_s − M) is computed once, by thread s, into shared memory, not once per output value
// (the drafter's 32-split merge took 16 µs on the H100 recomputing them behind serial loads); the
// float operations and their order are the same, so the bits are too.
// Q8G: the output also goes out as the int8 activations of the o_proj matmul behind the folded
// output gate, x · sigmoid(g) per 32 values (quantize_q8_gate's operations on the same values,
// so the same bits). The host asks for it only where hd is a multiple of 32: every pass of the
// d loop then gives each warp one whole 32-value block of its head.
template <bool Q8G>
DEV void attn_combine_impl(const float* __restrict__ part_o, const float* __restrict__ part_ml, float* __restrict__ out,
                           u32 nh, u32 hd, u32 nsplit, const float* __restrict__ G, i8* __restrict__ XQ,
                           float* __restrict__ XD, float* __restrict__ XS) {
    __shared__ float sf[COMBINE_MAX_SPLITS];
    grid_begin();
    const u64 head = (u64)bid_y() * nh + bid_x();
    const float* ml = part_ml + head * nsplit * 2;
    float M = -__builtin_inff();
    for (u32 s = 0; s < nsplit; ++s)
        if (ml[2 * s + 1] > 0.0f) M = __builtin_fmaxf(M, ml[2 * s]);
    for (u32 s = tid_x(); s < nsplit && s < COMBINE_MAX_SPLITS; s += COMBINE_THREADS)
        sf[s] = ml[2 * s + 1] > 0.0f ? ds_expf(ml[2 * s] - M) : 0.0f;
    sync_block();
    // Split s's weight: from shared memory, or computed here past COMBINE_MAX_SPLITS.
    auto f = [&](u32 s) { return s < COMBINE_MAX_SPLITS ? sf[s] : ds_expf(ml[2 * s] - M); };
    float L = 0.0f;
    for (u32 s = 0; s < nsplit; ++s)
        if (ml[2 * s + 1] > 0.0f) L += ml[2 * s + 1] * f(s);
    for (u32 d = tid_x(); d < hd; d += COMBINE_THREADS) {
        float o = 0.0f;
#pragma unroll 8
        for (u32 s = 0; s < nsplit; ++s) {
            if (ml[2 * s + 1] > 0.0f) o += part_o[(head * nsplit + s) * hd + d] * f(s);
        }
        const float v = o / L;
        out[head * hd + d] = v;
        if constexpr (Q8G) q8_store_block(v * ds_sigmoid(G[head * hd + d]), (head * hd + d) / 32, XQ, XD, XS);
    }
}

KERNEL(COMBINE_THREADS) attn_combine(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                     float* __restrict__ out, u32 nh, u32 hd, u32 nsplit) {
    attn_combine_impl<false>(part_o, part_ml, out, nh, hd, nsplit, nullptr, nullptr, nullptr, nullptr);
}

KERNEL(COMBINE_THREADS)
attn_combine_q8g(const float* __restrict__ part_o, const float* __restrict__ part_ml, float* __restrict__ out, u32 nh,
                 u32 hd, u32 nsplit, const float* __restrict__ G, i8* __restrict__ XQ, float* __restrict__ XD,
                 float* __restrict__ XS) {
    attn_combine_impl<true>(part_o, part_ml, out, nh, hd, nsplit, G, XQ, XD, XS);
}
