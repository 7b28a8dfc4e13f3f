// Prototype (session 38, docs/perf.md): an IQ4_XS GEMV on f16 matrix cores for every width, the
// question being whether one kernel family can decode at 1 row as fast as the dp4a kernels and
// verify 16 rows at <= 1.25 x that time (issue 4's target; the int8 tile runs ~2 x).
//
// Why it could: the int8 tile (hip/qmma.hip) spends ~28 of its ~108 warp instructions per
// 32-value item on the float combine, one per (weight row, input row, item), because the int8
// activations carry a float scale per 32 values. Here the activations are f16 and the sub-block
// scale (ls - 32) is folded into the f16 weight, so the tensor core accumulates a whole 256-value
// super-block in f32 and only the super-block scale d is applied after it: 4 FFMA per 256
// values per group of 8 inputs. Each output is one mma chain over its own row and column, in an
// order that depends on nothing but K, so the result of input row n is the same bits at any N
// (checked below): decode and verify may share it losslessly.
//
// Weights (re-laid at upload in a real build): per row and super-block an 8-byte header (d,
// scales_h, scales_l as in ggml) in H, and the 128 nibble bytes in Q ordered by lane: lane t of
// a quad owns the 64 values 64t .. 64t + 63 (sub-blocks 2t, 2t + 1) as 32 bytes, word q holding
// values 8q .. 8q + 7 in nibbles 0 .. 7. mma step m (16 per super-block) takes values 4m .. 4m + 3
// of each lane: A slots 2t, 2t + 1, 2t + 8, 2t + 9. The activations of input n are plain f16
// rows, so lane t of column g reads x[n][256 sb + 64t ..] as 8 16-byte loads.
//
// A nibble becomes an f16 weight with 3 byte permutes per 4 values (the grid lookup of
// hip/quant.h's iq4_words, on grid values + 128), one permute per 2 values to put 0x64 above
// each byte (f16 1024 + u) and one HFMA2: (1024 + kv + 128) s - 1152 s = kv s, rounded once.
//
// Build and run on the GPU machine: nvcc -O3 -arch=sm_90 -o h16 h16.cu && ./h16
//
// Result (H100, session 38; docs/perf.md has the tables): correct (error ~1e-6 of the terms'
// scale against an f64 reference) and the bits of every input row equal at N = 1 .. 32, but not
// faster. 34816 x 5120 (the 27B gate/up pair's bytes): N = 1 46.5 us (the dp4a pair: 40.1), 16
// rows 124 us plain (L1-bound on the activations every row tile re-reads: 97 % L1 throughput)
// and 74 us with the activations staged in shared memory (the int8 tile: 78), which costs the
// 1-row case (59 us). The decode of a nibble to an f16 weight is ALU-bound (61-63 % of the ALU
// pipe, math-pipe throttle the first stall): the f16 formation adds a permute per two values to
// the int8 lookup, and the dp4a kernel needs no formation at all.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

typedef uint32_t u32;
typedef uint64_t u64;

// Grid values + 128 as bytes (u = kv + 128: 1 .. 241).
constexpr u32 T0 = 0x3F2D1801u, T1 = 0x766A5D4Fu, T2 = 0xA6998D81u, T3 = 0xF1D9C5B5u;
static const int KV[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 s) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
    return r;
}
__device__ __forceinline__ u32 hfma2(u32 a, u32 b, u32 c) {
    u32 r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
// d[4] += A(16x16 f16, rows g, g + 8) B(16x8 f16, column g), f32 accumulate.
__device__ __forceinline__ void mma16816(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// The 8 nibbles of q as u bytes: lo = nibbles 0-3, hi = nibbles 4-7 (as hip/quant.h iq4_words).
__device__ __forceinline__ void lookup(u32 q, u32 z, u32& lo, u32& hi) {
    const u32 q7 = q & 0x77777777u;
    u32 pick, q7h, pickh;
    asm("mad.hi.u32 %0, %1, 0x80000000, 0x32103210;" : "=r"(pick) : "r"(q & 0x88888888u));
    asm("mul.hi.u32 %0, %1, 0x10000;" : "=r"(q7h) : "r"(q7));
    asm("mul.hi.u32 %0, %1, 0x10000;" : "=r"(pickh) : "r"(pick));
    const u32 t0 = T0 ^ z, t2 = T2 ^ z;
    lo = prmt(prmt(t0, T1, q7), prmt(t2, T3, q7), pick);
    hi = prmt(prmt(t0, T1, q7h), prmt(t2, T3, q7h), pickh);
}
// f16x2 of (kv0 s, kv1 s) and (kv2 s, kv3 s) from 4 u bytes; s2 = s splat, n2 = -1152 s splat.
__device__ __forceinline__ void to_f16(u32 u, u32 c64, u32 s2, u32 n2, u32& w01, u32& w23) {
    w01 = hfma2(prmt(u, c64, 0x4140), s2, n2);
    w23 = hfma2(prmt(u, c64, 0x4342), s2, n2);
}
__device__ __forceinline__ void scale_pair(u32 hx, u32 hy, u32 ib, u32& s2, u32& n2) {
    const int ls = (int)(((hy >> (4 * ib)) & 0xf) | (((hx >> 16) >> (2 * ib)) & 3) << 4) - 32;
    const __half s = __int2half_rn(ls), n = __int2half_rn(-1152 * ls);
    const u32 sb = (u32)__half_as_ushort(s), nb = (u32)__half_as_ushort(n);
    s2 = sb | sb << 16;
    n2 = nb | nb << 16;
}

// One super-block of one row tile into acc: the weight words wa / wb and headers ca / cb of rows
// g and g + 8, the B fragments from xq(tg, q) (the 16 bytes of word q of group tg's column g).
template <int TG, class XQ>
__device__ __forceinline__ void superblock(uint2 ca, uint2 cb, const u32 (&wa)[8], const u32 (&wb)[8], u32 t,
                                           u32 z, u32 c64, XQ xq, float (&acc)[TG][4]) {
    u32 sa[2], na[2], sbb[2], nbb[2];
    scale_pair(ca.x, ca.y, 2 * t, sa[0], na[0]);
    scale_pair(ca.x, ca.y, 2 * t + 1, sa[1], na[1]);
    scale_pair(cb.x, cb.y, 2 * t, sbb[0], nbb[0]);
    scale_pair(cb.x, cb.y, 2 * t + 1, sbb[1], nbb[1]);
    float c[TG][4];
#pragma unroll
    for (int tg = 0; tg < TG; ++tg)
#pragma unroll
        for (int o = 0; o < 4; ++o) c[tg][o] = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        const int h = q / 4;  // sub-block 2t + h
        u32 la, ha, lb, hb;
        lookup(wa[q], z, la, ha);
        lookup(wb[q], z, lb, hb);
        uint4 v[TG];
#pragma unroll
        for (int tg = 0; tg < TG; ++tg) v[tg] = xq(tg, q);
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // step m = 2q + half
            u32 a0, a2, a1, a3;
            to_f16(half ? ha : la, c64, sa[h], na[h], a0, a2);
            to_f16(half ? hb : lb, c64, sbb[h], nbb[h], a1, a3);
#pragma unroll
            for (int tg = 0; tg < TG; ++tg)
                mma16816(c[tg], a0, a1, a2, a3, half ? v[tg].z : v[tg].x, half ? v[tg].w : v[tg].y);
        }
    }
    const float da = __half2float(__ushort_as_half((unsigned short)(ca.x & 0xffff)));
    const float db = __half2float(__ushort_as_half((unsigned short)(cb.x & 0xffff)));
#pragma unroll
    for (int tg = 0; tg < TG; ++tg) {
        acc[tg][0] = fmaf(da, c[tg][0], acc[tg][0]);
        acc[tg][1] = fmaf(da, c[tg][1], acc[tg][1]);
        acc[tg][2] = fmaf(db, c[tg][2], acc[tg][2]);
        acc[tg][3] = fmaf(db, c[tg][3], acc[tg][3]);
    }
}

// The tile's outputs: with KW K-splits, each warp's partials go through red (RW KW x 4 TG x 32
// floats; every thread of the block calls this) and warp kw of the tile adds slots kw, kw + KW,
// ... over its KW warps in order.
template <int TG, int KW>
__device__ __forceinline__ void finish(const float (&acc)[TG][4], float* red, u32 w, u32 kw, u32 lane, u32 t, u32 g,
                                       u32 m0, int N, int M, float* __restrict__ Y) {
    auto put = [&](u32 s, float r) {
        const u32 tg = s / 4, o = s % 4, n = 8 * tg + 2 * t + (o & 1), row = m0 + g + 8 * (o >> 1);
        if (n < (u32)N && row < (u32)M) Y[(u64)n * M + row] = r;
    };
    if constexpr (KW == 1) {
#pragma unroll
        for (int tg = 0; tg < TG; ++tg)
#pragma unroll
            for (int o = 0; o < 4; ++o) put(tg * 4 + o, acc[tg][o]);
    } else {
#pragma unroll
        for (int tg = 0; tg < TG; ++tg)
#pragma unroll
            for (int o = 0; o < 4; ++o) red[(w * TG * 4 + tg * 4 + o) * 32 + lane] = acc[tg][o];
        __syncthreads();
        const u32 w0 = w - kw;
        for (u32 s = kw; s < TG * 4; s += KW) {
            float r = red[(w0 * TG * 4 + s) * 32 + lane];
#pragma unroll
            for (int v = 1; v < KW; ++v) r += red[((w0 + v) * TG * 4 + s) * 32 + lane];
            put(s, r);
        }
    }
}

// Y[n, m] = sum_k x[n, k] w[m, k] for n < N; TG groups of 8 inputs. A block has RW x KW warps:
// warp w owns row tile blockIdx.x * RW + w / KW (16 rows) and super-blocks sb = w % KW, + KW, ...;
// the KW partials of a tile are added in warp order. The RW warps of a block that walk the same
// super-blocks read the same activations at about the same time, so L1 serves all but one (the
// activations are re-read by every row tile: at 16 inputs they outweigh the weights 3.8 : 1).
// PF: the next super-block's weight words are loaded before this one is decoded.
template <int TG, int RW, int KW, int MINB, bool PF>
__global__ void __launch_bounds__(RW * KW * 32, MINB)
    h16(const uint2* __restrict__ H, const uint4* __restrict__ Q, const uint4* __restrict__ X, float* __restrict__ Y,
        int N, int K, int M) {
    const u32 lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const u32 kw = w % KW, m0 = (blockIdx.x * RW + w / KW) * 16, nsb = K / 256;
    const u32 ra = min(m0 + g, (u32)M - 1), rb = min(m0 + g + 8, (u32)M - 1);
    const u32 z = (threadIdx.x * 0x9E3779B9u == 0xDEADBEEFu) ? 0x80000000u : 0u;  // opaque zero
    const u32 c64 = 0x64u | z;
    float acc[TG][4];
#pragma unroll
    for (int tg = 0; tg < TG; ++tg)
#pragma unroll
        for (int o = 0; o < 4; ++o) acc[tg][o] = 0.0f;
    const uint4* xr[TG];
#pragma unroll
    for (int tg = 0; tg < TG; ++tg) {
        const u32 n = min(8 * tg + g, (u32)N - 1);
        xr[tg] = X + ((u64)n * K + 64 * t) / 8;
    }
    const uint2* hpa = H + (u64)ra * nsb;
    const uint2* hpb = H + (u64)rb * nsb;
    const uint4* qpa = Q + (u64)ra * nsb * 8 + 2 * t;
    const uint4* qpb = Q + (u64)rb * nsb * 8 + 2 * t;
    uint2 ha, hb;
    uint4 qa0, qa1, qb0, qb1;
    auto load = [&](u32 sb) {
        ha = hpa[sb], hb = hpb[sb];
        qa0 = qpa[sb * 8], qa1 = qpa[sb * 8 + 1], qb0 = qpb[sb * 8], qb1 = qpb[sb * 8 + 1];
    };
    if (PF && kw < nsb) load(kw);
    for (u32 sb = kw; sb < nsb; sb += KW) {
        if (!PF) load(sb);
        const uint2 ca = ha, cb = hb;
        const u32 wa[8] = {qa0.x, qa0.y, qa0.z, qa0.w, qa1.x, qa1.y, qa1.z, qa1.w};
        const u32 wb[8] = {qb0.x, qb0.y, qb0.z, qb0.w, qb1.x, qb1.y, qb1.z, qb1.w};
        if (PF && sb + KW < nsb) load(sb + KW);
        uint4 xv[TG][8];
#pragma unroll
        for (int tg = 0; tg < TG; ++tg)
#pragma unroll
            for (int j = 0; j < 8; ++j) xv[tg][j] = xr[tg][sb * 32 + j];
        superblock<TG>(ca, cb, wa, wb, t, z, c64, [&](int tg, int q) { return xv[tg][q]; }, acc);
    }
    __shared__ float red[KW > 1 ? RW * KW * TG * 4 * 32 : 1];
    finish<TG, KW>(acc, red, w, kw, lane, t, g, m0, N, M, Y);
}

// The same with the activations staged in shared memory (call 4): per step (KW super-blocks, one
// per K-split) the block copies the 8 TG columns' 512 bytes of each into a buffer once, and its
// RW row tiles read their B fragments from there, so L2 serves each activation byte once per
// block instead of once per row tile. Double-buffered: the next step's copy is loaded into
// registers before this step's mmas and stored after them; one barrier per step. The buffer is
// laid out so that a warp's 16-byte reads of one (group, word) are 512 contiguous bytes.
template <int TG, int RW, int KW, int MINB>
__global__ void __launch_bounds__(RW * KW * 32, MINB)
    h16s(const uint2* __restrict__ H, const uint4* __restrict__ Q, const uint4* __restrict__ X, float* __restrict__ Y,
         int N, int K, int M) {
    constexpr int NT = RW * KW * 32, UNITS = KW * TG * 8 * 32, PER = (UNITS + NT - 1) / NT;
    __shared__ uint4 xs[2][KW][TG * 8 * 8 * 4];
    const u32 lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const u32 kw = w % KW, m0 = (blockIdx.x * RW + w / KW) * 16, nsb = K / 256;
    const u32 ra = min(m0 + g, (u32)M - 1), rb = min(m0 + g + 8, (u32)M - 1);
    const u32 z = (threadIdx.x * 0x9E3779B9u == 0xDEADBEEFu) ? 0x80000000u : 0u;
    const u32 c64 = 0x64u | z;
    const u32 steps = (nsb + KW - 1) / KW;
    // Calls f(p, k, n, c) for this thread's units of a step (unit e = threadIdx.x + p NT): K-split
    // k, column n, 16-byte chunk c = 8 t' + j of the column (values 64 t' + 8 j ..).
    uint4 st[PER];
    auto each_unit = [&](auto f) {
#pragma unroll
        for (int p = 0; p < PER; ++p) {
            const u32 e = threadIdx.x + p * NT;
            if (e < (u32)UNITS) f(p, e / (TG * 256), e / 32 % (TG * 8), e % 32);
        }
    };
    auto fetch = [&](u32 i) {
        each_unit([&](int p, u32 k, u32 n, u32 c) {
            const u32 sb = i * KW + k;
            st[p] = sb < nsb ? X[((u64)min(n, (u32)N - 1) * K + sb * 256) / 8 + c] : make_uint4(0, 0, 0, 0);
        });
    };
    // Chunk (n, t', j) at ((8 tg + j) 8 + g') 4 + t' for column n = 8 tg + g'.
    auto store = [&](u32 buf) {
        each_unit([&](int p, u32 k, u32 n, u32 c) { xs[buf][k][((n / 8 * 8 + c % 8) * 8 + n % 8) * 4 + c / 8] = st[p]; });
    };
    float acc[TG][4];
#pragma unroll
    for (int tg = 0; tg < TG; ++tg)
#pragma unroll
        for (int o = 0; o < 4; ++o) acc[tg][o] = 0.0f;
    const uint2* hpa = H + (u64)ra * nsb;
    const uint2* hpb = H + (u64)rb * nsb;
    const uint4* qpa = Q + (u64)ra * nsb * 8 + 2 * t;
    const uint4* qpb = Q + (u64)rb * nsb * 8 + 2 * t;
    uint2 ha = {0, 0}, hb = {0, 0};
    uint4 qa0 = {}, qa1 = {}, qb0 = {}, qb1 = {};
    auto load = [&](u32 sb) {
        if (sb < nsb) {
            ha = hpa[sb], hb = hpb[sb];
            qa0 = qpa[sb * 8], qa1 = qpa[sb * 8 + 1], qb0 = qpb[sb * 8], qb1 = qpb[sb * 8 + 1];
        }
    };
    fetch(0);
    store(0);
    load(kw);
    __syncthreads();
    for (u32 i = 0; i < steps; ++i) {
        const u32 sb = i * KW + kw, buf = i % 2;
        const uint2 ca = ha, cb = hb;
        const u32 wa[8] = {qa0.x, qa0.y, qa0.z, qa0.w, qa1.x, qa1.y, qa1.z, qa1.w};
        const u32 wb[8] = {qb0.x, qb0.y, qb0.z, qb0.w, qb1.x, qb1.y, qb1.z, qb1.w};
        if (i + 1 < steps) {
            load(sb + KW);
            fetch(i + 1);
        }
        if (sb < nsb) {
            const uint4* xb = xs[buf][kw] + lane;
            superblock<TG>(ca, cb, wa, wb, t, z, c64, [&](int tg, int q) { return xb[(tg * 8 + q) * 32]; }, acc);
        }
        if (i + 1 < steps) store(buf ^ 1);
        __syncthreads();
    }
    finish<TG, KW>(acc, (float*)&xs[0][0][0], w, kw, lane, t, g, m0, N, M, Y);  // xs is free after the last barrier
}

// The same bytes read and xored, with the same grid (the read ceiling of this layout).
template <int NW>
__global__ void __launch_bounds__(NW * 32) rd(const uint2* __restrict__ H, const uint4* __restrict__ Q, u32* out,
                                              int K, int M) {
    const u32 lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const u32 m0 = blockIdx.x * 16, nsb = K / 256;
    const u32 ra = min(m0 + g, (u32)M - 1), rb = min(m0 + g + 8, (u32)M - 1);
    u32 a = 0;
    for (u32 sb = w; sb < nsb; sb += NW) {
        const uint2 ha = H[(u64)ra * nsb + sb], hb = H[(u64)rb * nsb + sb];
        const uint4* qpa = Q + ((u64)ra * nsb + sb) * 8 + 2 * t;
        const uint4* qpb = Q + ((u64)rb * nsb + sb) * 8 + 2 * t;
        const uint4 x0 = qpa[0], x1 = qpa[1], y0 = qpb[0], y1 = qpb[1];
        a ^= ha.x ^ hb.y ^ x0.x ^ x0.w ^ x1.y ^ y0.z ^ y1.x ^ y1.w;
    }
    if (a == 0x12345678u) out[0] = a;
}

// Host f16 conversions (IEEE binary16, round to nearest even), not relying on cuda_fp16's host side.
static float h2f(uint16_t h) {
    const u32 s = (h >> 15) & 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 0x400), (int)e - 25);
    return s ? -v : v;
}
static uint16_t f2h(float f) {
    // Exact for the values used here (|f| < 65504, normal or subnormal): round via double.
    const uint16_t sgn = f < 0 ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a == 0) return sgn;
    int e;
    frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
    int E = e - 1;  // a in [2^E, 2^(E+1))
    if (E < -14) E = -14;  // subnormal spacing 2^-24
    const double ulp = ldexp(1.0, E - 10);
    double q = nearbyint(a / ulp);  // round half to even (default rounding mode)
    double r = q * ulp;
    if (r == 0) return sgn;
    // Re-encode r.
    int e2;
    frexp(r, &e2);
    int E2 = e2 - 1;
    if (E2 < -14) return sgn | (uint16_t)(r / ldexp(1.0, -24));
    const u32 mant = (u32)(r / ldexp(1.0, E2 - 10)) - 1024;
    return sgn | (uint16_t)((E2 + 15) << 10 | mant);
}

#define CK(x)                                                                        \
    do {                                                                             \
        cudaError_t e = (x);                                                         \
        if (e != cudaSuccess) {                                                      \
            printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));         \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

struct Mat {
    int M, K;
    std::vector<uint2> h;
    std::vector<uint8_t> q;  // lane-ordered nibbles
    // Copies of the same weights, cycled by the timings so that L2 (50 MB) never holds the
    // matrix a launch reads from the launch before.
    std::vector<uint2*> dH;
    std::vector<uint4*> dQ;
    int cur = 0;
    void next() { cur = (cur + 1) % (int)dH.size(); }
};

static u32 rng = 12345;
static u32 nxt() {
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return rng;
}

// Value v (0 .. 255) of a super-block: its lane t = v / 64, word q = (v % 64) / 8, nibble v % 8.
static int nib(const Mat& A, u64 r, u32 sb, u32 v) {
    const u32 t = v / 64, l = v % 64, q = l / 8, k = l % 8;
    const uint8_t* p = &A.q[((r * (A.K / 256) + sb) * 128) + 32 * t + 4 * q];
    const u32 word = p[0] | p[1] << 8 | p[2] << 16 | (u32)p[3] << 24;
    return (word >> (4 * k)) & 0xf;
}
static float weight(const Mat& A, u64 r, u32 sb, u32 v) {
    const uint2 h = A.h[r * (A.K / 256) + sb];
    const u32 ib = v / 32;
    const int ls = (int)(((h.y >> (4 * ib)) & 0xf) | (((h.x >> 16) >> (2 * ib)) & 3) << 4) - 32;
    // The kernel's weight: f16(kv * ls) (rounded), times d.
    const float wf = h2f(f2h((float)(KV[nib(A, r, sb, v)] * ls)));
    return h2f(h.x & 0xffff) * wf;
}

static Mat make(int M, int K) {
    Mat A{M, K, {}, {}, {}, {}};
    const u64 nsb = K / 256;
    A.h.resize((u64)M * nsb);
    A.q.resize((u64)M * nsb * 128);
    for (auto& h : A.h) {
        const float d = 0.002f + 0.001f * (nxt() % 1000) / 1000.0f;
        const uint16_t dh = f2h(d);
        h.x = dh | (nxt() & 0xffff0000u);
        h.y = nxt();
    }
    for (auto& b : A.q) b = nxt() & 0xff;
    const int copies = (int)(200e6 / (double)(A.q.size() + A.h.size() * 8)) + 1;
    for (int c = 0; c < copies; ++c) {
        uint2* h;
        uint4* q;
        CK(cudaMalloc(&h, A.h.size() * 8));
        CK(cudaMalloc(&q, A.q.size()));
        CK(cudaMemcpy(h, A.h.data(), A.h.size() * 8, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(q, A.q.data(), A.q.size(), cudaMemcpyHostToDevice));
        A.dH.push_back(h);
        A.dQ.push_back(q);
    }
    return A;
}

template <int TG, int RW, int KW, int MINB, bool PF>
static void launch(Mat& A, const uint4* X, float* Y, int N) {
    const int tiles = (A.M + 15) / 16;
    h16<TG, RW, KW, MINB, PF><<<(tiles + RW - 1) / RW, RW * KW * 32>>>(A.dH[A.cur], A.dQ[A.cur], X, Y, N, A.K, A.M);
}

// One configuration at every width: TG 1 (N <= 8), 2 (<= 16), 4 (<= 32).
template <int RW, int KW, int MINB, bool PF>
static void run(Mat& A, const uint4* X, float* Y, int N) {
    A.next();
    if (N <= 8)
        launch<1, RW, KW, MINB, PF>(A, X, Y, N);
    else if (N <= 16)
        launch<2, RW, KW, MINB, PF>(A, X, Y, N);
    else
        launch<4, RW, KW, 1, PF>(A, X, Y, N);
}

template <int TG, int RW, int KW, int MINB>
static void launch_s(Mat& A, const uint4* X, float* Y, int N) {
    const int tiles = (A.M + 15) / 16;
    h16s<TG, RW, KW, MINB><<<(tiles + RW - 1) / RW, RW * KW * 32>>>(A.dH[A.cur], A.dQ[A.cur], X, Y, N, A.K, A.M);
}
// Widths whose buffers (2 KW TG 4 KB) pass the static 48 KB are run; the others are skipped (0 us).
template <int RW, int KW, int MINB>
static void run_s(Mat& A, const uint4* X, float* Y, int N) {
    A.next();
    if (N <= 8) {
        launch_s<1, RW, KW, MINB>(A, X, Y, N);
    } else if (N <= 16) {
        if constexpr (KW * 2 * 8 <= 48) launch_s<2, RW, KW, MINB>(A, X, Y, N);
    } else {
        if constexpr (KW * 4 * 8 <= 48) launch_s<4, RW, KW, 1>(A, X, Y, N);
    }
}

template <class F>
static float time_us(F f, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i) f();
    CK(cudaEventRecord(a));
    for (int i = 0; i < reps; ++i) f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaGetLastError());
    return ms * 1000.0f / reps;
}

int main(int argc, char** argv) {
    const bool prof = argc > 1 && !strcmp(argv[1], "prof");
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("%s\n", p.name);
    const int NMAX = 32;
    // Shapes of the 27B: the gate+up pair (34816 x 5120), down (5120 x 17408), out_proj (5120 x 6144).
    const int shapes[3][2] = {{34816, 5120}, {5120, 17408}, {5120, 6144}};
    for (auto& sh : shapes) {
        const int M = sh[0], K = sh[1];
        Mat A = make(M, K);
        if (prof) {  // one launch of each kind for ncu, on the first shape only
            uint4* X;
            float* Y;
            CK(cudaMalloc(&X, (u64)NMAX * K * 2));
            CK(cudaMemset(X, 0, (u64)NMAX * K * 2));
            CK(cudaMalloc(&Y, (u64)NMAX * M * 4));
            for (int N : {1, 16}) {
                run<1, 4, 4, false>(A, X, Y, N);
                run_s<8, 1, 2>(A, X, Y, N);
            }
            CK(cudaDeviceSynchronize());
            return 0;
        }
        std::vector<uint16_t> xh((u64)NMAX * K);
        std::vector<float> xf(xh.size());
        for (u64 i = 0; i < xh.size(); ++i) {
            const float v = ((int)(nxt() % 20001) - 10000) / 5000.0f;
            xh[i] = f2h(v);
            xf[i] = h2f(xh[i]);
        }
        uint4* X;
        float *Y, *Y1;
        u32* out;
        CK(cudaMalloc(&X, xh.size() * 2));
        CK(cudaMalloc(&Y, (u64)NMAX * M * 4));
        CK(cudaMalloc(&Y1, (u64)NMAX * M * 4));
        CK(cudaMalloc(&out, 4));
        CK(cudaMemcpy(X, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
        const double bytes = (double)M * (K / 256) * 136;
        printf("\n== %d x %d, %.1f MB of weights\n", M, K, bytes / 1e6);
        // Correctness against a CPU reference (f64 sums of the kernel's f16 weights and inputs) on
        // sampled rows, and the N-independence of the bits: row n at N = 16 and 32 against N = 1 .. 8.
        for (int N : {1, 3, 8, 16, 32}) {
            CK(cudaMemset(Y, 0xff, (u64)NMAX * M * 4));
            run<4, 1, 4, false>(A, X, Y, N);
            CK(cudaDeviceSynchronize());
            std::vector<float> y((u64)N * M);
            CK(cudaMemcpy(y.data(), Y, y.size() * 4, cudaMemcpyDeviceToHost));
            double worst = 0;
            for (int s = 0; s < 64; ++s) {
                const u64 r = nxt() % M;
                const int n = nxt() % N;
                double ref = 0, mag = 0;
                for (int sb = 0; sb < K / 256; ++sb)
                    for (int v = 0; v < 256; ++v) {
                        const double term = (double)weight(A, r, sb, v) * xf[(u64)n * K + sb * 256 + v];
                        ref += term;
                        mag += fabs(term);
                    }
                worst = fmax(worst, fabs(y[(u64)n * M + r] - ref) / (mag / sqrt((double)K) + 1e-30));
            }
            // Bits: the first min(N, 8) rows against a run of exactly that one row... of N = 1 for row 0,
            // and the 8-row run for rows < 8.
            u64 diff = 0;
            if (N > 1) {
                run<4, 1, 4, true>(A, X, Y1, N > 8 ? 8 : 1);
                CK(cudaDeviceSynchronize());
                std::vector<float> y1((u64)(N > 8 ? 8 : 1) * M);
                CK(cudaMemcpy(y1.data(), Y1, y1.size() * 4, cudaMemcpyDeviceToHost));
                for (u64 i = 0; i < y1.size(); ++i) diff += memcmp(&y1[i], &y[i], 4) != 0;
            }
            // The staged kernel (KW 1 and 2) against h16 with the same K split: the same bits.
            u64 sdiff = 0;
            // (KW 2 at 32 inputs does not fit the static buffers: KW 1 only there.)
            for (int v = 0; v < (N > 16 ? 1 : 2); ++v) {
                if (v == 0) run_s<8, 1, 2>(A, X, Y1, N), run<4, 1, 4, false>(A, X, Y, N);
                else run_s<4, 2, 2>(A, X, Y1, N), run<2, 2, 4, true>(A, X, Y, N);
                CK(cudaDeviceSynchronize());
                std::vector<float> a((u64)N * M), b2((u64)N * M);
                CK(cudaMemcpy(a.data(), Y1, a.size() * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(b2.data(), Y, b2.size() * 4, cudaMemcpyDeviceToHost));
                for (u64 i = 0; i < a.size(); ++i) sdiff += memcmp(&a[i], &b2[i], 4) != 0;
            }
            printf("N %2d: max error / (sum|term| / sqrt K) %.2e; outputs differing from the narrower run: %llu, "
                   "staged against plain: %llu\n", N, worst, (unsigned long long)diff, (unsigned long long)sdiff);
        }
        const int reps = 40;
        const float tr = time_us([&] { A.next();
            rd<4><<<(M + 15) / 16, 128>>>(A.dH[A.cur], A.dQ[A.cur], out, K, M); }, reps);
        printf("read only (4 warps):           %8.2f us  %.3f TB/s\n", tr, bytes / tr / 1e6);
        // Plain kernels (call 3): row tiles per block RW, K-splits KW, weight prefetch PF.
        printf("plain  N | RW1 KW4 | RW4 KW1 | RW4 KW1 PF | RW2 KW2 PF | RW8 KW1 PF | RW1 KW4 PF   (us)\n");
        for (int N : {1, 8, 16, 32}) {
            const float t0 = time_us([&] { run<1, 4, 4, false>(A, X, Y, N); }, reps);
            const float t1 = time_us([&] { run<4, 1, 4, false>(A, X, Y, N); }, reps);
            const float t2 = time_us([&] { run<4, 1, 4, true>(A, X, Y, N); }, reps);
            const float t3 = time_us([&] { run<2, 2, 4, true>(A, X, Y, N); }, reps);
            const float t4 = time_us([&] { run<8, 1, 2, true>(A, X, Y, N); }, reps);
            const float t5 = time_us([&] { run<1, 4, 4, true>(A, X, Y, N); }, reps);
            printf("     %3d | %7.2f | %7.2f | %10.2f | %10.2f | %10.2f | %10.2f\n", N, t0, t1, t2, t3, t4, t5);
        }
        // Staged activations (call 4); 0.0x: a width whose buffers do not fit (skipped).
        printf("staged N | RW8 KW1 | RW4 KW2 | RW2 KW4 | RW16 KW1 | RW8 KW2  (us)\n");
        for (int N : {1, 8, 16, 32}) {
            const float t1 = time_us([&] { run_s<8, 1, 2>(A, X, Y, N); }, reps);
            const float t2 = time_us([&] { run_s<4, 2, 2>(A, X, Y, N); }, reps);
            const float t3 = time_us([&] { run_s<2, 4, 2>(A, X, Y, N); }, reps);
            const float t4 = time_us([&] { run_s<16, 1, 1>(A, X, Y, N); }, reps);
            const float t5 = time_us([&] { run_s<8, 2, 1>(A, X, Y, N); }, reps);
            printf("     %3d | %7.2f | %7.2f | %7.2f | %8.2f | %7.2f\n", N, t1, t2, t3, t4, t5);
        }
        cudaFree(X), cudaFree(Y), cudaFree(Y1), cudaFree(out);
        for (size_t c = 0; c < A.dH.size(); ++c) cudaFree(A.dH[c]), cudaFree(A.dQ[c]);
    }
    return 0;
}
