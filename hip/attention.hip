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
//    on the device from pos: the host fixes only nsplit (a launch shape), so a captured graph
//    replays correctly for every position of a later run.
#include "common.h"

constexpr u32 ATTN_WARPS = 4;
constexpr u32 ATTN_THREADS = ATTN_WARPS * WARP;
constexpr u32 KV_THREADS = 256;

KERNEL(KV_THREADS) kv_write(const float* __restrict__ k, const float* __restrict__ v, const i32* __restrict__ pos,
                            float* __restrict__ kc, float* __restrict__ vc, u32 T, u32 row, u32 cap) {
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
    const u32 n_all = (!causal || nsplit > 1) ? attn_extent(pos, T, cap) : cap;
    const u32 max_n = !causal && window > 0 && 2 * window + 1 < n_all ? 2 * window + 1 : n_all;
    const u32 chunk = nsplit == 1 ? cap : ((max_n + nsplit - 1) / nsplit > 0 ? (max_n + nsplit - 1) / nsplit : 1u);
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
    for (u32 j = j0 + w; j < j1; j += ATTN_WARPS) {
        if (mask && j >= base && mask[(u64)t * T + (j - base)] == 0) continue;  // uniform per warp
        const float* kr = kc + (u64)j * row + (u64)kvh * hd;
        float dot = 0.0f;
#pragma unroll
        for (u32 r = 0; r < HDL; ++r) {
            const u32 d = lane + WARP * r;
            if (d < hd) dot += qr[r] * kr[d];
        }
        const float s = warp_sum(dot) * scale;
        const float m_new = __builtin_fmaxf(m, s);
        const float corr = ds_expf(m - m_new);
        const float e = ds_expf(s - m_new);
        l = l * corr + e;
        const float* vr = vc + (u64)j * row + (u64)kvh * hd;
#pragma unroll
        for (u32 r = 0; r < HDL; ++r) {
            const u32 d = lane + WARP * r;
            acc[r] = acc[r] * corr + (d < hd ? e * vr[d] : 0.0f);
        }
        m = m_new;
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
        attn<HDL>(q, kc, vc, pos, out, part_o, part_ml, nh, nkv, hd, scale, nsplit, cap, causal,     \
                  window, mask, T);                                                                  \
    }

DS_ATTN(1)
DS_ATTN(2)
DS_ATTN(4)
DS_ATTN(8)

constexpr u32 COMBINE_THREADS = 128;

// Grid (nh, T): merges the nsplit partials of one (token, head).
KERNEL(COMBINE_THREADS) attn_combine(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                     float* __restrict__ out, u32 nh, u32 hd, u32 nsplit) {
    const u64 head = (u64)bid_y() * nh + bid_x();
    const float* ml = part_ml + head * nsplit * 2;
    float M = -__builtin_inff();
    for (u32 s = 0; s < nsplit; ++s)
        if (ml[2 * s + 1] > 0.0f) M = __builtin_fmaxf(M, ml[2 * s]);
    float L = 0.0f;
    for (u32 s = 0; s < nsplit; ++s)
        if (ml[2 * s + 1] > 0.0f) L += ml[2 * s + 1] * ds_expf(ml[2 * s] - M);
    for (u32 d = tid_x(); d < hd; d += COMBINE_THREADS) {
        float o = 0.0f;
        for (u32 s = 0; s < nsplit; ++s) {
            if (ml[2 * s + 1] > 0.0f) o += part_o[(head * nsplit + s) * hd + d] * ds_expf(ml[2 * s] - M);
        }
        out[head * hd + d] = o / L;
    }
}
