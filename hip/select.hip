// ArgMax and TopK over the last dimension. The order is the CPU reference's:
// larger first, NaN above every number, -0.0 == +0.0, equal values in index order. ArgMax is
// the first element of that order, TopK its k first elements.
#include "common.h"

constexpr u32 SEL_THREADS = 256;

// (va, ia) ranks before (vb, ib).
DEV bool ranks_before(float va, u32 ia, float vb, u32 ib) {
    const bool na = ds_isnan(va), nb = ds_isnan(vb);
    if (na != nb) return na;
    if (!na && va != vb) return va > vb;
    return ia < ib;
}

constexpr u32 NONE = 0xffffffffu;

// ArgMax in two launches of argmax_f32: pass 0 finds the best (value, index) of each
// ARGMAX_CHUNK elements of a row (grid: rows x parts, every thread holding ARGMAX_ITEMS
// independent loads); pass 1 then picks the best of a row's parts. The order is total, so the result is exact.
constexpr u32 ARGMAX_ITEMS = 8;
constexpr u32 ARGMAX_CHUNK = SEL_THREADS * ARGMAX_ITEMS;

// Folds (ov, oi) into (bv, bi) if it ranks first (index NONE = nothing).
DEV void take_best(float ov, u32 oi, float* bv, u32* bi) {
    if (oi != NONE && (*bi == NONE || ranks_before(ov, oi, *bv, *bi))) {
        *bv = ov;
        *bi = oi;
    }
}

// The best of the threads' (bv, bi); every thread gets it.
DEV void block_best(float* bv_io, u32* bi_io) {
    __shared__ float sv[SEL_THREADS / WARP];
    __shared__ u32 si[SEL_THREADS / WARP];
    float bv = *bv_io;
    u32 bi = *bi_io;
#pragma unroll
    for (u32 m = 16; m > 0; m >>= 1) {
        const float ov = shfl_xor(bv, m);
        const u32 oi = (u32)shfl_xor_i32((i32)bi, m);
        take_best(ov, oi, &bv, &bi);
    }
    const u32 w = tid_x() / WARP;
    if (lane_id() == 0) {
        sv[w] = bv;
        si[w] = bi;
    }
    sync_block();
    bv = sv[0];
    bi = si[0];
#pragma unroll
    for (u32 k = 1; k < SEL_THREADS / WARP; ++k) take_best(sv[k], si[k], &bv, &bi);
    sync_block();
    *bv_io = bv;
    *bi_io = bi;
}

// Pass 0 (grid rows x parts): the best of each ARGMAX_CHUNK elements into part_v/part_i.
DEV void argmax_part(const float* __restrict__ x, float* __restrict__ part_v, u32* __restrict__ part_i, u32 V,
                     u32 parts) {
    const float* row = x + (u64)bid_x() * V;
    const u32 base = bid_y() * ARGMAX_CHUNK + tid_x();
    float v[ARGMAX_ITEMS];
#pragma unroll
    for (u32 j = 0; j < ARGMAX_ITEMS; ++j) {
        const u32 i = base + j * SEL_THREADS;
        v[j] = i < V ? row[i] : 0.0f;
    }
    float bv = 0.0f;
    u32 bi = NONE;
#pragma unroll
    for (u32 j = 0; j < ARGMAX_ITEMS; ++j) {
        const u32 i = base + j * SEL_THREADS;
        if (i < V) take_best(v[j], i, &bv, &bi);
    }
    block_best(&bv, &bi);
    if (tid_x() == 0) {
        part_v[(u64)bid_x() * parts + bid_y()] = bv;
        part_i[(u64)bid_x() * parts + bid_y()] = bi;
    }
}

// Pass 1 (grid rows): the best of a row's parts into out.
DEV void argmax_final(const float* __restrict__ part_v, const u32* __restrict__ part_i, i32* __restrict__ out,
                      u32 parts) {
    const u64 row = (u64)bid_x() * parts;
    float bv = 0.0f;
    u32 bi = NONE;
    for (u32 p = tid_x(); p < parts; p += SEL_THREADS) take_best(part_v[row + p], part_i[row + p], &bv, &bi);
    block_best(&bv, &bi);
    if (tid_x() == 0) out[bid_x()] = bi == NONE ? 0 : (i32)bi;
}

KERNEL(SEL_THREADS) argmax_f32(const float* __restrict__ x, float* __restrict__ part_v, u32* __restrict__ part_i,
                               i32* __restrict__ out, u32 V, u32 parts, u32 pass) {
    grid_begin();
    if (pass == 0) {
        argmax_part(x, part_v, part_i, V, parts);
    } else {
        argmax_final(part_v, part_i, out, parts);
    }
}

// TopK in one to three launches of top_k_f32. Pass 0 (grid rows x parts) takes the kc = min(k,
// ARGMAX_CHUNK) best of each ARGMAX_CHUNK elements of a row; pass 1 (grid rows, only when a row
// has more than one part) takes the k best of a row's parts * kc candidates. Both run the same
// merge: every thread keeps the best TOPK_LIST of its own elements in a sorted register list,
// and each of the rounds takes the block's best list head (block_best) and pops it from the
// thread that owns it (indices are unique, so exactly one thread does). The order is strict and
// total, so the k best of the union of the parts' kc best are the row's k best: exact.
// Where a row has at least k parts, pass 2 first takes each part's maximum, and pass 0 keeps only
// elements at or before the k-th best of those (row_threshold); a block with few elements left
// ranks them directly instead of running rounds (block_rank_select). The rounds were the cost:
// every thread runs each of them (H100, vocabulary 248,320, k = 16, 7 rows: pass 0 48 µs and
// the merge 23 µs before; now maxima 8.6, pass 0 25.5, merge 4.9).
constexpr u32 TOPK_LIST = ARGMAX_ITEMS;

// A thread's best not yet taken elements, sorted (index NONE = empty slot, empty slots last).
// `dropped`: some of the thread's remaining elements did not fit; every one of them ranks after
// every listed one (an element is only ever dropped in favour of better ones), so the head is
// the thread's best remaining element until the list runs empty, and then the list is refilled.
struct TopList {
    float v[TOPK_LIST];
    u32 i[TOPK_LIST];
    bool dropped;
};

DEV void list_clear(TopList& l) {
#pragma unroll
    for (u32 j = 0; j < TOPK_LIST; ++j) {
        l.v[j] = 0.0f;
        l.i[j] = NONE;
    }
    l.dropped = false;
}

// Inserts (ov, oi) (oi != NONE) if it ranks before the last slot, then bubbles it up. Static
// indices only, so the list stays in registers.
DEV void list_insert(TopList& l, float ov, u32 oi) {
    constexpr u32 L = TOPK_LIST - 1;
    if (l.i[L] != NONE) {
        l.dropped = true;
        if (!ranks_before(ov, oi, l.v[L], l.i[L])) return;
    }
    l.v[L] = ov;
    l.i[L] = oi;
#pragma unroll
    for (u32 j = L; j > 0; --j) {
        if (l.i[j] != NONE && (l.i[j - 1] == NONE || ranks_before(l.v[j], l.i[j], l.v[j - 1], l.i[j - 1]))) {
            const float tv = l.v[j];
            const u32 ti = l.i[j];
            l.v[j] = l.v[j - 1];
            l.i[j] = l.i[j - 1];
            l.v[j - 1] = tv;
            l.i[j - 1] = ti;
        }
    }
}

DEV void list_pop(TopList& l) {
#pragma unroll
    for (u32 j = 0; j + 1 < TOPK_LIST; ++j) {
        l.v[j] = l.v[j + 1];
        l.i[j] = l.i[j + 1];
    }
    l.i[TOPK_LIST - 1] = NONE;
}

// Pass 0's elements of a thread: (row[e], e) for e = base + tid + j * SEL_THREADS < end,
// j < ARGMAX_ITEMS (so they always fit the list and a refill never happens), except those that
// rank after the row's threshold (tv, ti) (none skipped where ti == NONE; see top_k_f32).
struct ChunkSrc {
    const float* row;
    u32 base, end;
    float tv;
    u32 ti;
};

// Calls f(v, e) for each of the thread's elements of s.
template <class F>
DEV void each(const ChunkSrc& s, F f) {
    float v[ARGMAX_ITEMS];
#pragma unroll
    for (u32 j = 0; j < ARGMAX_ITEMS; ++j) {
        const u32 e = s.base + tid_x() + j * SEL_THREADS;
        v[j] = e < s.end ? s.row[e] : 0.0f;
    }
#pragma unroll
    for (u32 j = 0; j < ARGMAX_ITEMS; ++j) {
        const u32 e = s.base + tid_x() + j * SEL_THREADS;
        if (e < s.end && (s.ti == NONE || !ranks_before(s.tv, s.ti, v[j], e))) f(v[j], e);
    }
}

// The list of the thread's elements that rank after (lv, li) (all if li == NONE).
DEV void fill(const ChunkSrc& s, TopList& l, float lv, u32 li) {
    list_clear(l);
    each(s, [&](float v, u32 e) {
        if (li == NONE || ranks_before(lv, li, v, e)) list_insert(l, v, e);
    });
}

// Pass 1's elements of a thread: candidates c = tid + m * SEL_THREADS < n of a row (value cv[c],
// row index ci[c]; NONE marks a part that had fewer than kc elements).
struct CandSrc {
    const float* cv;
    const u32* ci;
    u32 n;
};

// Calls f(v, i) for each of the thread's candidates of s (NONE slots skipped). ARGMAX_ITEMS
// index loads in flight per batch: after a thresholded pass 0 most slots are NONE, and one load
// at a time made the merge pass a chain of dependent round trips (H100, 7 rows of 248,320,
// k = 16: 6.0-6.3 µs one at a time, 4.7-5.1 batched).
template <class F>
DEV void each(const CandSrc& s, F f) {
    for (u32 c0 = tid_x(); c0 < s.n; c0 += ARGMAX_ITEMS * SEL_THREADS) {
        u32 i[ARGMAX_ITEMS];
#pragma unroll
        for (u32 j = 0; j < ARGMAX_ITEMS; ++j) {
            const u32 c = c0 + j * SEL_THREADS;
            i[j] = c < s.n ? s.ci[c] : NONE;
        }
#pragma unroll
        for (u32 j = 0; j < ARGMAX_ITEMS; ++j) {
            if (i[j] != NONE) f(s.cv[c0 + j * SEL_THREADS], i[j]);
        }
    }
}

DEV void fill(const CandSrc& s, TopList& l, float lv, u32 li) {
    list_clear(l);
    // ARGMAX_ITEMS independent loads in flight per batch (the inserts depend on each other).
    for (u32 c0 = tid_x(); c0 < s.n; c0 += ARGMAX_ITEMS * SEL_THREADS) {
        float v[ARGMAX_ITEMS];
        u32 i[ARGMAX_ITEMS];
#pragma unroll
        for (u32 j = 0; j < ARGMAX_ITEMS; ++j) {
            const u32 c = c0 + j * SEL_THREADS;
            v[j] = c < s.n ? s.cv[c] : 0.0f;
            i[j] = c < s.n ? s.ci[c] : NONE;
        }
#pragma unroll
        for (u32 j = 0; j < ARGMAX_ITEMS; ++j) {
            if (i[j] != NONE && (li == NONE || ranks_before(lv, li, v[j], i[j]))) list_insert(l, v[j], i[j]);
        }
    }
}

// The exclusive prefix sum of c over the block's threads; *total gets the sum of all.
DEV u32 block_scan(u32 c, u32* total) {
    __shared__ u32 ws[SEL_THREADS / WARP];
    const u32 lane = lane_id(), w = tid_x() / WARP;
    u32 x = c;  // inclusive within the warp (Hillis-Steele)
#pragma unroll
    for (u32 d = 1; d < WARP; d <<= 1) {
        const u32 y = (u32)shfl_idx_i32((i32)x, lane >= d ? lane - d : lane);
        if (lane >= d) x += y;
    }
    if (lane == WARP - 1) ws[w] = x;
    sync_block();
    u32 off = 0, tot = 0;
#pragma unroll
    for (u32 q = 0; q < SEL_THREADS / WARP; ++q) {
        const u32 s = ws[q];
        off += q < w ? s : 0u;
        tot += s;
    }
    sync_block();
    *total = tot;
    return off + x - c;
}

// Empty slots [from, to) of a block's output list (every thread calls it).
DEV void pad_none(float* __restrict__ out_v, u32* __restrict__ out_i, u32 from, u32 to) {
    for (u32 q = from + tid_x(); q < to; q += SEL_THREADS) out_v[q] = 0.0f, out_i[q] = NONE;
}

// Most elements a block ranks directly (block_rank_select).
constexpr u32 SEL_CAP = 2 * SEL_THREADS;

// block_top_k without rounds, where the block's elements are few (at most SEL_CAP; false, with
// nothing written, otherwise): they are gathered in workgroup memory, and each one's rank among
// them, counted directly, is its output slot. With a threshold most blocks hold none or a few.
template <class Src>
DEV bool block_rank_select(const Src& src, u32 rounds, float* __restrict__ out_v, u32* __restrict__ out_i) {
    __shared__ float cv[SEL_CAP];
    __shared__ u32 ci[SEL_CAP];
    u32 cnt = 0;
    each(src, [&](float, u32) { ++cnt; });
    u32 total;
    u32 o = block_scan(cnt, &total);
    if (total > SEL_CAP) return false;  // the same in every thread
    each(src, [&](float v, u32 i) {
        cv[o] = v;
        ci[o] = i;
        ++o;
    });
    sync_block();
    for (u32 a = tid_x(); a < total; a += SEL_THREADS) {
        const float v = cv[a];
        const u32 i = ci[a];
        u32 r = 0;
        for (u32 b = 0; b < total; ++b) r += ranks_before(cv[b], ci[b], v, i) ? 1u : 0u;
        if (r < rounds) out_v[r] = v, out_i[r] = i;
    }
    pad_none(out_v, out_i, total, rounds);
    return true;
}

// The `rounds` best elements of the block's threads (from `src`), best first, into out_v/out_i
// (index NONE where there are fewer elements). Every thread must call it.
template <class Src>
DEV void block_top_k(const Src& src, u32 rounds, float* __restrict__ out_v, u32* __restrict__ out_i) {
    if (block_rank_select(src, rounds, out_v, out_i)) return;
    TopList l;
    fill(src, l, 0.0f, NONE);
    for (u32 r = 0; r < rounds; ++r) {
        float bv = l.v[0];
        u32 bi = l.i[0];
        block_best(&bv, &bi);
        if (bi == NONE) {
            // Every thread is out of elements (bi is the same in all of them): pad with NONE.
            pad_none(out_v, out_i, r, rounds);
            return;
        }
        if (tid_x() == 0) {
            out_v[r] = bv;
            out_i[r] = bi;
        }
        if (bi == l.i[0]) {
            list_pop(l);
            if (l.i[0] == NONE && l.dropped) fill(src, l, bv, bi);
        }
    }
}

// The row's threshold for pass 0: the k-th best of its parts' maxima (mx_v/mx_i, from pass 2).
// The k maxima at or before it are k distinct elements, so the row's k best all rank at or
// before it too: pass 0 may skip every element that ranks after it. A part whose own maximum
// ranks k-th or later has no such element: false (every thread gets the same), and the
// threshold is not computed (most parts). Otherwise (tv, ti) gets it. Needs k <= parts <=
// TOPK_MAX_PARTS.
constexpr u32 TOPK_MAX_PARTS = 1024;  // mirrored by kernels::TOPK_MAX_PARTS
DEV bool row_threshold(const float* __restrict__ mx_v, const u32* __restrict__ mx_i, u32 parts, u32 k, float* tv,
                       u32* ti) {
    __shared__ float sv[TOPK_MAX_PARTS];
    __shared__ u32 si[TOPK_MAX_PARTS];
    __shared__ float rv;
    __shared__ u32 ri;
    const u64 row = (u64)bid_x() * parts;
    for (u32 p = tid_x(); p < parts; p += SEL_THREADS) sv[p] = mx_v[row + p], si[p] = mx_i[row + p];
    sync_block();
    const u32 me = bid_y();
    u32 before = 0, rank;
    for (u32 p = tid_x(); p < parts; p += SEL_THREADS) {
        before += ranks_before(sv[p], si[p], sv[me], si[me]) ? 1u : 0u;
    }
    block_scan(before, &rank);
    if (rank >= k) return false;
    for (u32 p = tid_x(); p < parts; p += SEL_THREADS) {
        u32 r = 0;
        for (u32 q = 0; q < parts; ++q) r += ranks_before(sv[q], si[q], sv[p], si[p]) ? 1u : 0u;
        if (r == k - 1) rv = sv[p], ri = si[p];  // exactly one part: the order is total
    }
    sync_block();
    *tv = rv;
    *ti = ri;
    return true;
}

// pass 2 (grid rows x parts, first, where the host uses the threshold): each part's maximum
// into mx_v/mx_i (argmax's pass 0). pass 0 (rows x parts): each part's kc best, at or before
// the row's threshold where mx_v is given. pass 1 (rows): the k best of a row's parts' lists.
KERNEL(SEL_THREADS) top_k_f32(const float* __restrict__ x, float* __restrict__ part_v, u32* __restrict__ part_i,
                              float* __restrict__ mx_v, u32* __restrict__ mx_i, float* __restrict__ values,
                              i32* __restrict__ indices, u32 V, u32 k, u32 kc, u32 parts, u32 pass) {
    grid_begin();
    // i32 and u32 may alias (same type up to signedness); NONE is never written there (k <= V).
    u32* out_i = (u32*)indices;
    if (pass == 2) {
        argmax_part(x, mx_v, mx_i, V, parts);
    } else if (pass == 0) {
        const u32 base = bid_y() * ARGMAX_CHUNK;
        ChunkSrc src{x + (u64)bid_x() * V, base, V - base < ARGMAX_CHUNK ? V : base + ARGMAX_CHUNK, 0.0f, NONE};
        if (mx_v && !row_threshold(mx_v, mx_i, parts, k, &src.tv, &src.ti)) {
            const u64 o = ((u64)bid_x() * parts + bid_y()) * kc;  // parts > 1 where mx_v is given
            pad_none(part_v + o, part_i + o, 0, kc);
            return;
        }
        if (parts == 1) {
            block_top_k(src, k, values + (u64)bid_x() * k, out_i + (u64)bid_x() * k);
        } else {
            const u64 o = ((u64)bid_x() * parts + bid_y()) * kc;
            block_top_k(src, kc, part_v + o, part_i + o);
        }
    } else {
        const u64 o = (u64)bid_x() * parts * kc;
        const CandSrc src{part_v + o, part_i + o, parts * kc};
        block_top_k(src, k, values + (u64)bid_x() * k, out_i + (u64)bid_x() * k);
    }
}

// LogSumExp of each row (grid: rows): the row's maximum m, then m + ln Σ exp(x − m), the sum in
// f32 and the log in f64 (rounded once). NaN and all −inf rows give NaN, as on the CPU.
KERNEL(SEL_THREADS) logsumexp_f32(const float* __restrict__ x, float* __restrict__ out, u32 V) {
    grid_begin();
    __shared__ float buf[SEL_THREADS / WARP];
    const float* row = x + (u64)bid_x() * V;
    float m = -__builtin_inff();
    for (u32 i = tid_x(); i < V; i += SEL_THREADS) m = __builtin_fmaxf(m, row[i]);
    m = warp_max(m);
    if (lane_id() == 0) buf[tid_x() / WARP] = m;
    sync_block();
    m = buf[0];
#pragma unroll
    for (u32 w = 1; w < SEL_THREADS / WARP; ++w) m = __builtin_fmaxf(m, buf[w]);
    sync_block();
    float s = 0.0f;
    for (u32 i = tid_x(); i < V; i += SEL_THREADS) s += ds_expf(row[i] - m);
    s = block_sum<SEL_THREADS>(s, buf);
    if (tid_x() == 0) out[bid_x()] = m + (float)ds_log1p_f64((double)s - 1.0);
}
