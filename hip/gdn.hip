// Gated delta net, recurrent form, token by token (model notes §4.3-4.4; the CPU reference
// src/backend/cpu/kernels/gdn.rs):
//   qkv [T, 2·nk·dk + nv·dv] = [q | k | v], b, a [T, nv], ssm_a, dt_bias [nv] (f32),
//   state [nv, dk, dv] (f32, updated in place) -> o [T, nv, dv].
// Per token t and value head h with key head kh:
//   q, k L2-normalised (q then scaled by dk^-0.5), beta = sigmoid(b), g = ssm_a·softplus(a + dt_bias)
//   S = e^g · S;  kv = Sᵀk;  δ = β·(v − kv);  S += k ⊗ δ;  o = Sᵀq
//
// One warp per block; grid (nv, ceil(dv / COLS)): the block owns COLS state columns j of head h
// and keeps them for all T tokens. The register variants (DK = 64, 128; COLS = 16, 8) hold the
// columns in registers (one state read and one write per call); the generic variant (any dk up
// to 512, COLS = 32) works in global memory.
//
// The register variants issue every load of a chunk of tokens (q, k, v, b, a) at once and
// prepare the chunk before its recurrence (gdn_regs), so a token costs no memory round trip.
// (Loading q and k in a dk-strided loop, then v, b and a after the barrier, cost about five
// dependent round trips per token: 8.7 µs per decode call on the H200.) Their arithmetic is the
// tree kernels', in the same order.
//
// LOG (graph op GatedDeltaNetLog; other head sizes up to 128 in gdn_log_any): the step over a chain of verify rows
// that leaves the state alone and writes row t's inputs [q | k | v | b | a] to log[t] (row width
// conv_dim + 2·nv). REPLAY (GatedDeltaNetReplay) is the plain step reading those rows back: the
// step kernels take the row strides of qkv (qs) and of b, a (bs), so they read a log directly.
//
// TREE (graph op GatedDeltaNetTree): extra inputs parent [T] and tokens [R, nv, dk, dv]. Row t
// starts from its parent's state (kept in registers when the parent is row t - 1, else
// reloaded from tokens[parent], or from the state for parent < 0) and its updated state goes to
// tokens[t]; the state is only read. Every lane reads back only the state entries it wrote.
#include "common.h"

constexpr u32 GDN_THREADS = 32;
constexpr u32 GDN_MAX_DK = 512;

struct GdnArgs {
    u32 T, nk, nv, dk, dv, tiled;
    float l2_eps, q_scale;
    // Row strides (floats) of qkv and of b, a: conv_dim and nv, or a log's row width.
    u32 qs, bs;
};

// Loads and L2-normalises q and k of key head kh at token t into shared qn/kn.
DEV void gdn_load_qk(const float* __restrict__ qkv, u32 t, u32 kh, const GdnArgs& p, float* qn, float* kn) {
    const u32 key_dim = p.nk * p.dk;
    const float* q = qkv + (u64)t * p.qs + (u64)kh * p.dk;
    const float* k = q + key_dim;
    float sq = 0.0f, sk = 0.0f;
    for (u32 i = lane_id(); i < p.dk; i += WARP) {
        const float a = q[i], b = k[i];
        qn[i] = a;
        kn[i] = b;
        sq += a * a;
        sk += b * b;
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    const float rq = 1.0f / ds_sqrt(sq + p.l2_eps), rk = 1.0f / ds_sqrt(sk + p.l2_eps);
    for (u32 i = lane_id(); i < p.dk; i += WARP) {
        qn[i] = (qn[i] * rq) * p.q_scale;
        kn[i] = kn[i] * rk;
    }
    sync_block();
}

// Tokens whose inputs the register variants prepare together (see gdn_regs), how many of them
// gdn_prep_qk takes at once, and whether the recurrence takes two tokens an iteration. AMD: two
// at once and one token an iteration, since four at once spilled gdn_dk128_log (87 registers
// past the 192 that clang 19 gives it for gfx1100/gfx1151/gfx1201) and two with the pairs left
// no margin (hip_build checks that no kernel spills).
constexpr u32 GDN_CHUNK = 16;
#if defined(__AMDGPU__)
constexpr u32 GDN_PREP_U = 2;
constexpr bool GDN_PAIR = false;
#else
constexpr u32 GDN_PREP_U = 4;
constexpr bool GDN_PAIR = true;
#endif

// The register variants' preparation of tokens t .. t + U - 1 (rows c .. c + U - 1 of the
// chunk): q and k L2-normalised (per lane in increasing i, then over the warp: the generic
// order), q scaled by dk^-0.5, into the padded shared rows qn[c], kn[c] (see gdn_regs).
// LOG: the raw q and k go to the log rows too, from one block per key head.
template <u32 DK, u32 R, u32 RP, u32 U, bool LOG>
DEV void gdn_prep_qk(const float* __restrict__ qkv, u32 t, u32 c, u32 kh, bool logs_qk, float* __restrict__ log,
                     const GdnArgs& p, float (*qn)[DK / R * RP], float (*kn)[DK / R * RP]) {
    constexpr u32 M = DK / WARP;
    const u32 lane = lane_id(), key_dim = p.nk * DK;
    float xq[U][M], xk[U][M];
#pragma unroll
    for (u32 u = 0; u < U; ++u) {
        const float* q = qkv + (u64)(t + u) * p.qs + (u64)kh * DK;
#pragma unroll
        for (u32 m = 0; m < M; ++m) {
            xq[u][m] = q[lane + m * WARP];
            xk[u][m] = q[key_dim + lane + m * WARP];
        }
    }
#pragma unroll
    for (u32 u = 0; u < U; ++u) {
        if constexpr (LOG) {
            if (logs_qk) {
                float* row = log + (u64)(t + u) * (2 * key_dim + p.nv * p.dv + 2 * p.nv);
#pragma unroll
                for (u32 m = 0; m < M; ++m) {
                    row[kh * DK + lane + m * WARP] = xq[u][m];
                    row[key_dim + kh * DK + lane + m * WARP] = xk[u][m];
                }
            }
        }
        float sq = 0.0f, sk = 0.0f;
#pragma unroll
        for (u32 m = 0; m < M; ++m) {
            sq += xq[u][m] * xq[u][m];
            sk += xk[u][m] * xk[u][m];
        }
#pragma unroll
        for (u32 m = 16; m > 0; m >>= 1) {
            sq += shfl_xor(sq, m);
            sk += shfl_xor(sk, m);
        }
        const float rq = 1.0f / ds_sqrt(sq + p.l2_eps), rk = 1.0f / ds_sqrt(sk + p.l2_eps);
#pragma unroll
        for (u32 m = 0; m < M; ++m) {
            const u32 i = lane + m * WARP, ip = i + (i / R) * (RP - R);
            qn[c + u][ip] = (xq[u][m] * rq) * p.q_scale;
            kn[c + u][ip] = xk[u][m] * rk;
        }
    }
}

// The register variants' step (the tree kernels run gdn below, whose per-row state stores
// leave no registers for a prefetch on AMD): the state rows of a column are split over SPLIT lanes (R = DK / SPLIT
// rows each, in registers); lane = part * COLS + column, so the parts of a column are COLS lanes
// apart and their partial sums combine with xor shuffles.
//
// Tokens go in chunks of GDN_CHUNK. A chunk's prologue does everything that does not depend on
// the state, for all its tokens at once: the loads, the q and k L2 norms (one token after
// another, but with no dependence between tokens, so their loads and shuffles overlap), the gates
// (lane t takes token t) and v, into shared memory. The recurrence then runs token by token with
// no barrier, load or gate in its path: per token the two R-long dot products and their
// shuffles. (Preparing each token inside the recurrence cost ~1.2 µs a token at 16 rows on the
// H100: ~660 instructions, the f64 softplus among them, issued by ~1.5 warps a scheduler.)
// Every value is computed as before, in the same order as the tree kernels (gdn below), so a
// call over T rows gives the bits of T one-row calls (hip_ops: rows at once equal one-row calls).
// Shared rows are padded by 4 floats after each part's R rows, so the SPLIT parts' 16-byte
// reads of one row index fall in distinct banks.
// LOG: the state is only read, and every token's inputs go to `log` (see the top).
template <u32 DK, u32 SPLIT, bool LOG>
DEV void gdn_regs(const float* __restrict__ qkv, const float* __restrict__ b, const float* __restrict__ a,
                  const float* __restrict__ ssm_a, const float* __restrict__ dt_bias, float* __restrict__ state,
                  float* __restrict__ out, float* __restrict__ log, const GdnArgs& p) {
    constexpr u32 COLS = WARP / SPLIT;
    constexpr u32 R = DK / SPLIT;
    constexpr u32 RP = R + 4;       // one part's padded rows
    constexpr u32 DKP = SPLIT * RP; // one token's padded q or k
    constexpr u32 VE = GDN_CHUNK * COLS / WARP;  // v values a lane stages per chunk
    static_assert(GDN_CHUNK <= WARP, "one lane per token computes the gates");
    __shared__ float qn[GDN_CHUNK][DKP];
    __shared__ float kn[GDN_CHUNK][DKP];
    __shared__ float vs[GDN_CHUNK][COLS];
    __shared__ float betas[GDN_CHUNK], decays[GDN_CHUNK];
    const u32 h = bid_x();
    const u32 lane = lane_id();
    const u32 part = lane / COLS;
    const u32 j = bid_y() * COLS + lane % COLS;
    const bool active = j < p.dv;
    const u32 kh = p.tiled ? h % p.nk : h / (p.nv / p.nk);
    const u64 col = (u64)h * DK * p.dv + j;
    float* S = state + col;                  // column j: S[i * dv]
    const u32 i0 = part * R;                 // first state row of this lane
    const u32 key_dim = p.nk * DK;
    const float sa = ssm_a[h], dtb = dt_bias[h];
    [[maybe_unused]] const u32 conv_dim = 2 * key_dim + p.nv * p.dv;
    // LOG: q and k of key head kh are written by one block, its first value head's column 0.
    [[maybe_unused]] const bool logs_qk = bid_y() == 0 && h == (p.tiled ? kh : kh * (p.nv / p.nk));
    float s[R];
#pragma unroll
    for (u32 i = 0; i < R; ++i) s[i] = active ? S[(u64)(i0 + i) * p.dv] : 0.0f;
    for (u32 t0 = 0; t0 < p.T; t0 += GDN_CHUNK) {
        const u32 n = p.T - t0 < GDN_CHUNK ? p.T - t0 : GDN_CHUNK;
        // Every load of the chunk goes out before any is used, so the chunk costs one memory
        // round trip: v and the gates' inputs into registers, then q and k of U tokens at a time
        // (gdn_prep_qk), so their loads and shuffles overlap too.
        float vr[VE];
#pragma unroll
        for (u32 u = 0; u < VE; ++u) {
            const u32 e = lane + u * WARP, r = e / COLS, jj = bid_y() * COLS + e % COLS;
            vr[u] = r < n && jj < p.dv ? qkv[(u64)(t0 + r) * p.qs + 2 * key_dim + (u64)h * p.dv + jj] : 0.0f;
        }
        float braw = 0.0f, araw = 0.0f;
        if (lane < n) {
            braw = b[(u64)(t0 + lane) * p.bs + h];
            araw = a[(u64)(t0 + lane) * p.bs + h];
        }
        u32 c = 0;
#pragma unroll 1
        for (; c + GDN_PREP_U <= n; c += GDN_PREP_U)
            gdn_prep_qk<DK, R, RP, GDN_PREP_U, LOG>(qkv, t0 + c, c, kh, logs_qk, log, p, qn, kn);
#pragma unroll 1
        for (; c < n; ++c) gdn_prep_qk<DK, R, RP, 1, LOG>(qkv, t0 + c, c, kh, logs_qk, log, p, qn, kn);
#pragma unroll
        for (u32 u = 0; u < VE; ++u) {
            const u32 e = lane + u * WARP, r = e / COLS, jj = bid_y() * COLS + e % COLS;
            if (r < n) {
                vs[r][e % COLS] = vr[u];
                if constexpr (LOG) {
                    if (jj < p.dv) log[(u64)(t0 + r) * (conv_dim + 2 * p.nv) + 2 * key_dim + h * p.dv + jj] = vr[u];
                }
            }
        }
        // The gates: lane c takes token c.
        if (lane < n) {
            betas[lane] = ds_sigmoid(braw);
            decays[lane] = ds_expf(sa * ds_softplus(araw + dtb));
            if constexpr (LOG) {
                if (bid_y() == 0) {
                    float* row = log + (u64)(t0 + lane) * (conv_dim + 2 * p.nv);
                    row[conv_dim + h] = braw;
                    row[conv_dim + p.nv + h] = araw;
                }
            }
        }
        sync_block();
        // One token of the recurrence; its output o.
        auto token = [&](u32 r) {
            const float* kb = &kn[r][part * RP];
            const float* qb = &qn[r][part * RP];
            const float decay = decays[r];
            // All lanes run the shuffles; inactive columns hold zeros.
            float kv = 0.0f;
#pragma unroll
            for (u32 i = 0; i < R; ++i) {
                s[i] *= decay;
                kv += s[i] * kb[i];
            }
#pragma unroll
            for (u32 m = COLS; m < WARP; m <<= 1) kv += shfl_xor(kv, m);
            const float d = (vs[r][lane % COLS] - kv) * betas[r];
            float o = 0.0f;
#pragma unroll
            for (u32 i = 0; i < R; ++i) {
                s[i] += kb[i] * d;
                o += s[i] * qb[i];
            }
#pragma unroll
            for (u32 m = COLS; m < WARP; m <<= 1) o += shfl_xor(o, m);
            return o;
        };
        float* o_at = out + ((u64)t0 * p.nv + h) * p.dv + j;  // row r: o_at[r * nv * dv]
        const bool writes = active && part == 0;
        auto one = [&](u32 r) {
            const float o = token(r);
            if (writes) o_at[(u64)r * p.nv * p.dv] = o;
        };
        if constexpr (GDN_PAIR) {
            // Two tokens an iteration: token r's o sum and token r + 1's kv sum are independent
            // chains of adds, which the compiler interleaves only within one iteration.
#pragma unroll 1
            for (c = 0; c + 2 <= n; c += 2) {
                const float o0 = token(c), o1 = token(c + 1);
                if (writes) {
                    o_at[(u64)c * p.nv * p.dv] = o0;
                    o_at[(u64)(c + 1) * p.nv * p.dv] = o1;
                }
            }
            if (c < n) one(c);
        } else {
#pragma unroll 1
            for (c = 0; c < n; ++c) one(c);
        }
        sync_block();  // the next chunk's prologue rewrites the shared rows
    }
    if (active && !LOG) {
#pragma unroll
        for (u32 i = 0; i < R; ++i) S[(u64)(i0 + i) * p.dv] = s[i];
    }
}

// The tree kernels and the generic step. DK != 0: the state rows of a column are split over SPLIT lanes (R = DK / SPLIT rows each,
// in registers); lane = part * COLS + column, so the parts of a column are COLS lanes apart and
// their partial sums combine with xor shuffles. DK == 0: one lane per column, state in memory.
template <u32 DK, u32 SPLIT, bool TREE>
DEV void gdn(const float* __restrict__ qkv, const float* __restrict__ b, const float* __restrict__ a,
             const float* __restrict__ ssm_a, const float* __restrict__ dt_bias, float* __restrict__ state,
             float* __restrict__ out, const i32* __restrict__ parent, float* __restrict__ tokens,
             const GdnArgs& p) {
    constexpr u32 COLS = WARP / SPLIT;
    constexpr u32 R = DK ? DK / SPLIT : 1;
    __shared__ float qn[DK ? DK : GDN_MAX_DK];
    __shared__ float kn[DK ? DK : GDN_MAX_DK];
    const u32 h = bid_x();
    const u32 lane = lane_id();
    const u32 part = lane / COLS;
    const u32 j = bid_y() * COLS + lane % COLS;
    const bool active = j < p.dv;
    const u32 kh = p.tiled ? h % p.nk : h / (p.nv / p.nk);
    const u32 key_dim = p.nk * p.dk;
    const u64 col = (u64)h * p.dk * p.dv + j;
    const u64 hs = (u64)p.nv * p.dk * p.dv;  // one row of tokens
    float* S = state + col;                    // column j: S[i * dv]
    const u32 i0 = part * R;                     // first state row of this lane (register path)
    float s[R];
    if constexpr (DK != 0) {
#pragma unroll
        for (u32 i = 0; i < R; ++i) s[i] = active ? S[(u64)(i0 + i) * p.dv] : 0.0f;
    }
    for (u32 t = 0; t < p.T; ++t) {
        if constexpr (TREE) {
            const i32 par = parent[t];
            const float* src = par < 0 ? state + col : tokens + (u64)par * hs + col;
            if constexpr (DK != 0) {
                if (par != (i32)t - 1) {
#pragma unroll
                    for (u32 i = 0; i < R; ++i) s[i] = active ? src[(u64)(i0 + i) * p.dv] : 0.0f;
                }
            } else {
                // The memory path works on row t's own column, copied from the parent's.
                S = tokens + (u64)t * hs + col;
                if (active)
                    for (u32 i = 0; i < p.dk; ++i) S[(u64)i * p.dv] = src[(u64)i * p.dv];
            }
        }
        gdn_load_qk(qkv, t, kh, p, qn, kn);
        const float beta = ds_sigmoid(b[(u64)t * p.bs + h]);
        const float g = ssm_a[h] * ds_softplus(a[(u64)t * p.bs + h] + dt_bias[h]);
        const float decay = ds_expf(g);
        const float v = active ? qkv[(u64)t * p.qs + 2 * key_dim + (u64)h * p.dv + j] : 0.0f;
        if constexpr (DK != 0) {
            // All lanes run the shuffles; inactive columns hold zeros.
            float kv = 0.0f;
#pragma unroll
            for (u32 i = 0; i < R; ++i) {
                s[i] *= decay;
                kv += s[i] * kn[i0 + i];
            }
#pragma unroll
            for (u32 m = COLS; m < WARP; m <<= 1) kv += shfl_xor(kv, m);
            const float d = (v - kv) * beta;
            float o = 0.0f;
#pragma unroll
            for (u32 i = 0; i < R; ++i) {
                s[i] += kn[i0 + i] * d;
                o += s[i] * qn[i0 + i];
            }
#pragma unroll
            for (u32 m = COLS; m < WARP; m <<= 1) o += shfl_xor(o, m);
            if (active && part == 0) out[((u64)t * p.nv + h) * p.dv + j] = o;
            if constexpr (TREE) {
                if (active) {
                    float* dst = tokens + (u64)t * hs + col;
#pragma unroll
                    for (u32 i = 0; i < R; ++i) dst[(u64)(i0 + i) * p.dv] = s[i];
                }
            }
        } else if (active) {
            float kv = 0.0f;
            for (u32 i = 0; i < p.dk; ++i) {
                const float x = S[(u64)i * p.dv] * decay;
                S[(u64)i * p.dv] = x;
                kv += x * kn[i];
            }
            const float d = (v - kv) * beta;
            float o = 0.0f;
            for (u32 i = 0; i < p.dk; ++i) {
                const float x = S[(u64)i * p.dv] + kn[i] * d;
                S[(u64)i * p.dv] = x;
                o += x * qn[i];
            }
            out[((u64)t * p.nv + h) * p.dv + j] = o;
        }
        sync_block();  // qn/kn are rewritten for the next token
    }
    if constexpr (DK != 0 && !TREE) {
        if (active) {
#pragma unroll
            for (u32 i = 0; i < R; ++i) S[(u64)(i0 + i) * p.dv] = s[i];
        }
    }
}

// The logging step for other head sizes (dk ≤ GDN_LOG_MAX_DK): the generic step's arithmetic,
// one lane per column, the block's columns kept in shared memory instead of updated in place.
constexpr u32 GDN_LOG_MAX_DK = 128;

DEV void gdn_log_any(const float* __restrict__ qkv, const float* __restrict__ b, const float* __restrict__ a,
                     const float* __restrict__ ssm_a, const float* __restrict__ dt_bias,
                     const float* __restrict__ state, float* __restrict__ out, float* __restrict__ log,
                     const GdnArgs& p) {
    __shared__ float qn[GDN_LOG_MAX_DK];
    __shared__ float kn[GDN_LOG_MAX_DK];
    __shared__ float cols[GDN_LOG_MAX_DK * WARP];
    const u32 h = bid_x();
    const u32 lane = lane_id();
    const u32 j = bid_y() * WARP + lane;
    const bool active = j < p.dv;
    const u32 kh = p.tiled ? h % p.nk : h / (p.nv / p.nk);
    const u32 key_dim = p.nk * p.dk, conv_dim = 2 * key_dim + p.nv * p.dv;
    const bool logs_qk = bid_y() == 0 && h == (p.tiled ? kh : kh * (p.nv / p.nk));
    float* S = cols + lane;  // column j: S[i * WARP]
    if (active)
        for (u32 i = 0; i < p.dk; ++i) S[i * WARP] = state[(u64)h * p.dk * p.dv + (u64)i * p.dv + j];
    for (u32 t = 0; t < p.T; ++t) {
        float* row = log + (u64)t * (conv_dim + 2 * p.nv);
        if (logs_qk) {
            const float* q = qkv + (u64)t * p.qs + (u64)kh * p.dk;
            for (u32 i = lane; i < p.dk; i += WARP) {
                row[kh * p.dk + i] = q[i];
                row[key_dim + kh * p.dk + i] = q[key_dim + i];
            }
        }
        gdn_load_qk(qkv, t, kh, p, qn, kn);
        const float braw = b[(u64)t * p.bs + h], araw = a[(u64)t * p.bs + h];
        const float beta = ds_sigmoid(braw);
        const float decay = ds_expf(ssm_a[h] * ds_softplus(araw + dt_bias[h]));
        const float v = active ? qkv[(u64)t * p.qs + 2 * key_dim + (u64)h * p.dv + j] : 0.0f;
        if (active) row[2 * key_dim + h * p.dv + j] = v;
        if (bid_y() == 0 && lane == 0) {
            row[conv_dim + h] = braw;
            row[conv_dim + p.nv + h] = araw;
        }
        if (active) {
            float kv = 0.0f;
            for (u32 i = 0; i < p.dk; ++i) {
                const float x = S[i * WARP] * decay;
                S[i * WARP] = x;
                kv += x * kn[i];
            }
            const float d = (v - kv) * beta;
            float o = 0.0f;
            for (u32 i = 0; i < p.dk; ++i) {
                const float x = S[i * WARP] + kn[i] * d;
                S[i * WARP] = x;
                o += x * qn[i];
            }
            out[((u64)t * p.nv + h) * p.dv + j] = o;
        }
        sync_block();  // qn/kn are rewritten for the next token
    }
}

// The state columns of this block (the register variants' layout, see gdn_regs) hinted into L2
// before grid_begin. The state was last written by this layer's call of the previous step, so it
// comes from DRAM, and under PDL the block is often resident during the previous kernel's tail,
// which then covers that fetch instead of the block's first loads waiting for it. A hint only:
// the L2 is where every SM's writes meet, so a hinted line can never be stale and no value
// depends on it. One lane per state row and block: a row's COLS columns share a line.
// `DS_GDN_HINT=0` builds without it, for a device A/B.
#ifndef DS_GDN_HINT
#define DS_GDN_HINT 1
#endif
template <u32 DK, u32 SPLIT>
DEV void gdn_state_hint(const float* state, u32 dv) {
    constexpr u32 COLS = WARP / SPLIT, R = DK / SPLIT;
    const u32 lane = lane_id(), j = bid_y() * COLS;
    if (lane % COLS != 0 || j >= dv) return;
    const float* S = state + (u64)bid_x() * DK * dv + j + (u64)(lane / COLS) * R * dv;
    // Rolled because unrolled, ptxas kept the 32 addresses live (gdn_dk128 168 -> 189 registers).
#pragma unroll 1
    for (u32 i = 0; i < R; ++i) prefetch_l2(S + (u64)i * dv);
}

// The step kernels: gdn_regs for DK != 0, else the generic gdn.
template <u32 DK, u32 SPLIT>
DEV void gdn_step(const float* qkv, const float* b, const float* a, const float* ssm_a, const float* dt_bias,
                  float* state, float* out, const GdnArgs& p) {
    if constexpr (DK != 0)
        gdn_regs<DK, SPLIT, false>(qkv, b, a, ssm_a, dt_bias, state, out, nullptr, p);
    else
        gdn<DK, SPLIT, false>(qkv, b, a, ssm_a, dt_bias, state, out, nullptr, nullptr, p);
}

// The step (also the replay of a log: strides qs, bs), the tree step and, for the register
// variants, the logging step.
#define DS_GDN(name, DK, SPLIT)                                                                      \
    KERNEL(GDN_THREADS)                                                                              \
    name(const float* qkv, const float* b, const float* a, const float* ssm_a, const float* dt_bias, \
         float* state, float* out, u32 T, u32 nk, u32 nv, u32 dk, u32 dv, u32 tiled, float l2_eps,   \
         float q_scale, u32 qs, u32 bs) {                                                            \
        if constexpr (DK != 0 && DS_GDN_HINT) gdn_state_hint<DK, SPLIT>(state, dv);                  \
        grid_begin();                                                                                \
        const GdnArgs p{T, nk, nv, dk, dv, tiled, l2_eps, q_scale, qs, bs};                          \
        gdn_step<DK, SPLIT>(qkv, b, a, ssm_a, dt_bias, state, out, p);                               \
    }                                                                                                \
    KERNEL(GDN_THREADS)                                                                              \
    name##_tree(const float* qkv, const float* b, const float* a, const float* ssm_a,                \
                const float* dt_bias, const i32* parent, float* state, float* tokens, float* out,    \
                u32 T, u32 nk, u32 nv, u32 dk, u32 dv, u32 tiled, float l2_eps, float q_scale) {     \
        grid_begin();                                                                                \
        const GdnArgs p{T, nk, nv, dk, dv, tiled, l2_eps, q_scale, 2 * nk * dk + nv * dv, nv};       \
        gdn<DK, SPLIT, true>(qkv, b, a, ssm_a, dt_bias, state, out, parent, tokens, p);              \
    }

#define DS_GDN_LOG(name, DK, SPLIT)                                                                  \
    KERNEL(GDN_THREADS)                                                                              \
    name##_log(const float* qkv, const float* b, const float* a, const float* ssm_a,                 \
               const float* dt_bias, float* state, float* log, float* out, u32 T, u32 nk, u32 nv,    \
               u32 dk, u32 dv, u32 tiled, float l2_eps, float q_scale) {                             \
        if constexpr (DK != 0 && DS_GDN_HINT) gdn_state_hint<DK, SPLIT>(state, dv);                  \
        grid_begin();                                                                                \
        const GdnArgs p{T, nk, nv, dk, dv, tiled, l2_eps, q_scale, 2 * nk * dk + nv * dv, nv};       \
        if constexpr (DK != 0)                                                                       \
            gdn_regs<DK, SPLIT, true>(qkv, b, a, ssm_a, dt_bias, state, out, log, p);                \
        else                                                                                         \
            gdn_log_any(qkv, b, a, ssm_a, dt_bias, state, out, log, p);                              \
    }

DS_GDN(gdn_dk64, 64, 2)
DS_GDN(gdn_dk128, 128, 4)
DS_GDN(gdn_any, 0, 1)
DS_GDN_LOG(gdn_dk64, 64, 2)
DS_GDN_LOG(gdn_dk128, 128, 4)
DS_GDN_LOG(gdn_any, 0, 1)
