// deltaspec portability header: one kernel source for AMDGPU (HIP, wave32) and NVPTX (CUDA).
//
// Compiled by clang >= 19 without any ROCm or CUDA headers or device libraries
// (`-nogpulib -nogpuinc` / `-nocudainc -nocudalib`), so everything below is builtins only:
// thread ids, barriers, warp shuffles, and the math functions the kernels need (exp, log1p,
// sin/cos are written here because the device libraries that normally provide them are absent).
//
// Kernels are written for a 32-lane warp: wave32 on RDNA (gfx11/gfx12 default to wave32 for
// HIP), warp 32 on NVIDIA. The host checks the device's warp size when it loads the module.
#pragma once

#if !defined(__AMDGPU__) && !defined(__NVPTX__) && !defined(DS_EMULATE)
#error "deltaspec kernels are compiled for the device only (amdgcn or nvptx)"
#endif

#if defined(DS_EMULATE)
// Host emulation for CI (tools/device/emu): threads are std::threads, see emu.h.
#define __global__
#define __device__
#define __shared__ static
#define DEV static inline
#define KERNEL(threads) extern "C" void
#else
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))

// A device helper, always inlined (there is no linker step that could resolve calls).
#define DEV static __device__ inline __attribute__((always_inline))
// A kernel entry point with an unmangled name and a maximum block size.
#define KERNEL(threads) extern "C" __global__ __attribute__((launch_bounds(threads))) void
#endif

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

constexpr u32 WARP = 32;

struct alignas(16) u32x4 {
    u32 x, y, z, w;
};
struct alignas(8) u32x2 {
    u32 x, y;
};
struct alignas(16) f32x4 {
    float x, y, z, w;
};

// ---------------------------------------------------------------------------------------------
// Thread and block indices, barriers, warp shuffles.

#if defined(__AMDGPU__)

DEV u32 tid_x() { return __builtin_amdgcn_workitem_id_x(); }
DEV u32 bid_x() { return __builtin_amdgcn_workgroup_id_x(); }
DEV u32 bid_y() { return __builtin_amdgcn_workgroup_id_y(); }
DEV u32 bid_z() { return __builtin_amdgcn_workgroup_id_z(); }
// Lane within the wave (wave32: mbcnt over the low 32 bits of the exec mask).
DEV u32 lane_id() { return __builtin_amdgcn_mbcnt_lo(~0u, 0u); }
// What HIP's __syncthreads does: s_barrier alone does not order LDS accesses.
DEV void sync_block() {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
DEV i32 shfl_xor_i32(i32 v, u32 mask) {
    return __builtin_amdgcn_ds_bpermute((i32)((lane_id() ^ mask) << 2), v);
}
DEV i32 shfl_idx_i32(i32 v, u32 src) { return __builtin_amdgcn_ds_bpermute((i32)(src << 2), v); }

#elif defined(__NVPTX__)

DEV u32 tid_x() { return __nvvm_read_ptx_sreg_tid_x(); }
DEV u32 bid_x() { return __nvvm_read_ptx_sreg_ctaid_x(); }
DEV u32 bid_y() { return __nvvm_read_ptx_sreg_ctaid_y(); }
DEV u32 bid_z() { return __nvvm_read_ptx_sreg_ctaid_z(); }
DEV u32 lane_id() { return __nvvm_read_ptx_sreg_laneid(); }
DEV void sync_block() { __nvvm_bar_sync(0); }
DEV i32 shfl_xor_i32(i32 v, u32 mask) { return __nvvm_shfl_sync_bfly_i32(0xffffffffu, v, (i32)mask, 0x1f); }
DEV i32 shfl_idx_i32(i32 v, u32 src) { return __nvvm_shfl_sync_idx_i32(0xffffffffu, v, (i32)src, 0x1f); }

#else
#include "emu.h"  // tid_x, bid_*, lane_id, sync_block, shfl_*_i32 on host threads
#endif

DEV float shfl_xor(float v, u32 mask) {
    return __builtin_bit_cast(float, shfl_xor_i32(__builtin_bit_cast(i32, v), mask));
}
DEV float shfl_idx(float v, u32 src) {
    return __builtin_bit_cast(float, shfl_idx_i32(__builtin_bit_cast(i32, v), src));
}

// Sum over the 32 lanes; every lane gets the result.
DEV float warp_sum(float v) {
#pragma unroll
    for (u32 m = 16; m > 0; m >>= 1) v += shfl_xor(v, m);
    return v;
}
DEV float warp_max(float v) {
#pragma unroll
    for (u32 m = 16; m > 0; m >>= 1) v = __builtin_fmaxf(v, shfl_xor(v, m));
    return v;
}

// Sum over a block of THREADS threads (a multiple of 32); every thread gets the result.
// `buf` is shared scratch of at least THREADS/32 floats; the call contains two barriers.
template <u32 THREADS>
DEV float block_sum(float v, float* buf) {
    v = warp_sum(v);
    if constexpr (THREADS == WARP) {
        return v;
    } else {
        const u32 w = tid_x() / WARP;
        if (lane_id() == 0) buf[w] = v;
        sync_block();
        float s = 0.0f;
#pragma unroll
        for (u32 i = 0; i < THREADS / WARP; ++i) s += buf[i];
        sync_block();
        return s;
    }
}

// ---------------------------------------------------------------------------------------------
// Half-precision conversions (storage only).

DEV float f16_to_f32(u16 h) { return (float)__builtin_bit_cast(_Float16, h); }
DEV float bf16_to_f32(u16 h) { return __builtin_bit_cast(float, ((u32)h) << 16); }
// An f16 stored at a 2-byte aligned address.
DEV float load_f16(const u8* p) { return f16_to_f32(*(const u16*)p); }

// ---------------------------------------------------------------------------------------------
// Math. No device libraries are linked, so these are written out. Accuracy targets: a few ulp in
// f32, which keeps the kernels within 1e-6 relative of the CPU reference (Rust's libm).

DEV float ds_sqrt(float x) { return __builtin_sqrtf(x); }
DEV bool ds_isnan(float x) { return x != x; }

// e^x in f32: Cody-Waite reduction by ln 2, a degree-7 polynomial on |r| <= 0.35
// (truncation error 5e-9), and an exact power-of-two scale in two steps.
DEV float ds_expf(float x) {
    if (ds_isnan(x)) return x;
    if (x > 88.72284f) return __builtin_inff();
    if (x < -103.97282f) return 0.0f;
    const float k = __builtin_rintf(x * 1.44269504088896341f);
    float r = __builtin_fmaf(-k, 0.693359375f, x);
    r = __builtin_fmaf(-k, -2.12194440e-4f, r);
    float p = 1.98412698e-4f;  // 1/7!
    p = __builtin_fmaf(p, r, 1.38888889e-3f);
    p = __builtin_fmaf(p, r, 8.33333333e-3f);
    p = __builtin_fmaf(p, r, 4.16666667e-2f);
    p = __builtin_fmaf(p, r, 1.66666667e-1f);
    p = __builtin_fmaf(p, r, 0.5f);
    p = __builtin_fmaf(p, r, 1.0f);
    p = __builtin_fmaf(p, r, 1.0f);
    const i32 ki = (i32)k;
    const i32 k1 = ki / 2, k2 = ki - ki / 2;
    const float s1 = __builtin_bit_cast(float, (u32)(k1 + 127) << 23);
    const float s2 = __builtin_bit_cast(float, (u32)(k2 + 127) << 23);
    return (p * s1) * s2;
}

// log(1 + y) in f64 for y > -1 (used by softplus; the f32 result is correctly rounded in
// practice). Series for small y; otherwise frexp-style reduction and the atanh series.
DEV double ds_log1p_f64(double y) {
    if (y != y) return y;
    const double ay = y < 0.0 ? -y : y;
    if (ay < 1e-4) {
        return y * (1.0 + y * (-0.5 + y * (1.0 / 3.0 + y * (-0.25 + y * 0.2))));
    }
    const double u = 1.0 + y;
    if (u > 1.7976931348623157e308) return u;  // +inf
    const u64 bits = __builtin_bit_cast(u64, u);
    i32 e = (i32)((bits >> 52) & 0x7ff) - 1023;
    double m = __builtin_bit_cast(double, (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e += 1;
    }
    const double s = (m - 1.0) / (m + 1.0);
    const double s2 = s * s;
    double t = 1.0 / 17.0;
    t = t * s2 + 1.0 / 15.0;
    t = t * s2 + 1.0 / 13.0;
    t = t * s2 + 1.0 / 11.0;
    t = t * s2 + 1.0 / 9.0;
    t = t * s2 + 1.0 / 7.0;
    t = t * s2 + 1.0 / 5.0;
    t = t * s2 + 1.0 / 3.0;
    t = t * s2 + 1.0;
    return (double)e * 0.69314718055994530942 + 2.0 * s * t;
}

// torch's softplus (beta 1, threshold 20), as the CPU reference: `x` above 20, else
// log1p(exp(x)) with exp in f32.
DEV float ds_softplus(float x) {
    if (x > 20.0f) return x;
    return (float)ds_log1p_f64((double)ds_expf(x));
}

DEV float ds_sigmoid(float x) { return 1.0f / (1.0f + ds_expf(-x)); }
DEV float ds_silu(float x) { return x / (1.0f + ds_expf(-x)); }

// sin and cos of an f32 angle, evaluated in f64 (reduction by pi/2 in two parts, exact for
// |x| < 2^20 * pi/2, then Taylor series on |r| <= pi/4), rounded to f32.
DEV void ds_sincosf(float a, float* s_out, float* c_out) {
    const double x = (double)a;
    const double k = __builtin_rint(x * 0.63661977236758134308);
    double r = __builtin_fma(-k, 1.57079632673412561417e+00, x);
    r = __builtin_fma(-k, 6.07710050650619224932e-11, r);
    const double r2 = r * r;
    // sin r = r (1 - r2/3! + r2^2/5! - ...), cos r = 1 - r2/2! + ...
    double sp = -1.0 / 1307674368000.0;  // -1/15!
    sp = sp * r2 + 1.0 / 6227020800.0;
    sp = sp * r2 - 1.0 / 39916800.0;
    sp = sp * r2 + 1.0 / 362880.0;
    sp = sp * r2 - 1.0 / 5040.0;
    sp = sp * r2 + 1.0 / 120.0;
    sp = sp * r2 - 1.0 / 6.0;
    const double sr = r + r * r2 * sp;
    double cp = 1.0 / 20922789888000.0;  // 1/16!
    cp = cp * r2 - 1.0 / 87178291200.0;
    cp = cp * r2 + 1.0 / 479001600.0;
    cp = cp * r2 - 1.0 / 3628800.0;
    cp = cp * r2 + 1.0 / 40320.0;
    cp = cp * r2 - 1.0 / 720.0;
    cp = cp * r2 + 1.0 / 24.0;
    cp = cp * r2 - 0.5;
    const double cr = 1.0 + r2 * cp;
    const i64 q = (i64)k & 3;
    double s, c;
    if (q == 0) {
        s = sr;
        c = cr;
    } else if (q == 1) {
        s = cr;
        c = -sr;
    } else if (q == 2) {
        s = -sr;
        c = -cr;
    } else {
        s = -cr;
        c = sr;
    }
    *s_out = (float)s;
    *c_out = (float)c;
}

DEV float nan_f32() { return __builtin_bit_cast(float, 0x7fc00000u); }

// ---------------------------------------------------------------------------------------------
// Packed 8-bit integer arithmetic for the int8-activation matmul (hip/qmatmul.hip).

// c + Σ a.byte[i] * b.byte[i] over the four signed bytes of a and b (dp4a / v_dot4).
DEV i32 dot4_i8(u32 a, u32 b, i32 c) {
#if defined(__AMDGPU__)
    // RDNA3/3.5/4 (gfx11/gfx12) have the mixed-sign form; both operands signed here.
    return __builtin_amdgcn_sudot4(true, (i32)a, true, (i32)b, c, false);
#elif defined(__NVPTX__)
    i32 r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#else
    for (u32 i = 0; i < 4; ++i) c += (i32)(i8)(u8)(a >> (8 * i)) * (i32)(i8)(u8)(b >> (8 * i));
    return c;
#endif
}

// One warp-wide integer matrix-core step, D += A · B for a 16×8 int32 tile over k = 16 signed
// bytes (NVIDIA mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32, sm_80+). Integer sums are
// exact, so each D element equals the dp4a chain over the same 16 bytes. Fragments, for lane
// l = 4g + t (g = l / 4, t = l % 4), byte i of a word = k offset i:
//   a0 = A[g][4t .. 4t+3]     a1 = A[g+8][4t .. 4t+3]     b = B[4t .. 4t+3][g]
//   d[0] = D[g][2t]   d[1] = D[g][2t+1]   d[2] = D[g+8][2t]   d[3] = D[g+8][2t+1]
// AMD (not implemented yet; the int8 GEMV keeps its dp4a kernel there): gfx11 wave32
// v_wmma_i32_16x16x16_iu8 takes a whole 16-byte row of A and column of B per lane (lanes 16-31
// repeat lanes 0-15) and returns D[2i + l/16][l%16], i < 8; gfx12's
// v_wmma_i32_16x16x16_iu8_w32_gfx12 takes 8 bytes per lane (lanes 16-31: k 8..15) and returns
// D[i + 8(l/16)][l%16]. Both would need a 16-wide tile, not this 16×8 one.
// Makes v opaque to the compiler (an empty asm that "changes" it): values computed from it are
// then computed where they are used, not hoisted out of a loop as invariants held in registers.
// No instruction is emitted; a no-op off the GPU.
DEV void opaque_u32(u32& v) {
#if defined(__NVPTX__)
    asm volatile("" : "+r"(v));
#elif defined(__AMDGPU__)
    asm volatile("" : "+v"(v));
#else
    (void)v;
#endif
}

// A hint that the 128-byte line holding p will be read soon: NVIDIA `prefetch.global.L2`
// (no register is written and no load waits on it; an address past the data is not touched).
// A no-op elsewhere (the emulator included): values never depend on it.
DEV void prefetch_l2(const void* p) {
#if defined(__NVPTX__)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

#if defined(__NVPTX__)
#define DS_HAVE_MMA_S8 1
// Not volatile: the step reads and writes only its registers, so the compiler may keep loads
// of the same address across it (clang marks inline asm convergent in CUDA, so it is never
// moved into divergent control flow).
DEV void mma_s8_16x8x16(i32 (&d)[4], u32 a0, u32 a1, u32 b) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b));
}
// m16n8k32: k 0..15 in a0 (rows g) / a1 (rows g + 8) / b0 and k 16..31 in a2 / a3 / b1, i.e.
// the two m16n8k16 steps (a0, a1, b0) and (a2, a3, b1) summed in one instruction (integer
// sums, so exactly their sum).
DEV void mma_s8_16x8x32(i32 (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
#elif defined(DS_EMULATE)
#define DS_HAVE_MMA_S8 1
// The same fragment semantics on host threads (emu.h: every lane posts its fragments).
DEV void mma_s8_16x8x16(i32 (&d)[4], u32 a0, u32 a1, u32 b) { ds_emu_mma_s8_16x8x16(d, a0, a1, b); }
DEV void mma_s8_16x8x32(i32 (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    ds_emu_mma_s8_16x8x16(d, a0, a1, b0);
    ds_emu_mma_s8_16x8x16(d, a2, a3, b1);
}
#endif

// Byte-wise table lookup: out.byte[i] = table.byte[idx.byte[i]] for idx bytes in 0..15, where
// the 16-byte table is the words t0 (bytes 0-3) .. t3 (bytes 12-15). One selector byte per
// output byte, so the same call serves every nibble position (the caller masks).
DEV u32 lut16(u32 idx, u32 t0, u32 t1, u32 t2, u32 t3) {
#if defined(__AMDGPU__)
    // v_perm_b32 selects bytes 0-7 of {hi:lo}; bit 3 of each index then picks the upper half.
    const u32 s = idx & 0x07070707u;
    const u32 lo = __builtin_amdgcn_perm(t1, t0, s);
    const u32 hi = __builtin_amdgcn_perm(t3, t2, s);
    return __builtin_amdgcn_perm(hi, lo, 0x03020100u | ((idx & 0x08080808u) >> 1));
#elif defined(__NVPTX__)
    // prmt takes 4-bit selectors (bit 3 = sign replicate, so only 0-7 are used): pack the four
    // index bytes into the low 16 bits, look up in both halves, then pick per byte.
    const u32 n = idx | (idx >> 4);
    const u32 sel = (n & 0xffu) | ((n >> 8) & 0xff00u);
    u32 lo, hi, r;
    const u32 s7 = sel & 0x7777u;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(lo) : "r"(t0), "r"(t1), "r"(s7));
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(hi) : "r"(t2), "r"(t3), "r"(s7));
    const u32 pick = 0x3210u | ((sel & 0x8888u) >> 1);
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"(pick));
    return r;
#else
    const u32 t[4] = {t0, t1, t2, t3};
    u32 r = 0;
    for (u32 i = 0; i < 4; ++i) {
        const u32 k = (idx >> (8 * i)) & 0xf;
        r |= ((t[k / 4] >> (8 * (k % 4))) & 0xff) << (8 * i);
    }
    return r;
#endif
}

// The 32-bit word at byte offset `sh` (0-3) into the 64-bit little-endian pair {hi:lo}.
DEV u32 funnel(u32 lo, u32 hi, u32 sh) { return (u32)((((u64)hi << 32) | lo) >> (8 * sh)); }

// Programmatic dependent launch (NVIDIA sm_90 and later; the host sets the launch attribute,
// src/backend/hip/driver/cuda.rs): the next kernel in the stream may start while this one still
// runs, so its blocks' start-up and weight loads overlap our tail instead of following a drain.
// Every kernel calls grid_begin() before it reads anything an earlier kernel wrote and before any
// return: it lets the next grid launch (launch_dependents), then waits until the previous grid
// has completed with its writes visible. That every grid waits is what keeps the order
// transitive: a kernel reading what the kernel two back wrote still sees it, because the one
// between cannot complete before its own wait returned. What may precede it: index arithmetic
// and hints for data no kernel writes (weights: prefetch_l2). Without the attribute (AMD, the
// emulator, older GPUs, DELTASPEC_HIP_PDL=0) the wait returns at once.
DEV void grid_begin() {
#if defined(__NVPTX__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Bulk copies from global to shared memory that complete on a shared-memory barrier: on sm_90,
// the TMA's `cp.async.bulk` (one thread issues a copy of up to a few KiB, the copy engine moves
// it without registers, and the barrier's phase flips once the bytes it expects have landed),
// so a block can keep tens of KiB of weights in flight per stage ring. Elsewhere (sm_80, the
// emulator) the issuing thread copies synchronously and mbar_wait is a block barrier, which
// orders that copy before every read of the stage: so every thread of the block must call
// mbar_wait at the same points. Sizes and addresses are multiples of 16 bytes.
#if defined(__NVPTX__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
DEV u32 smem_addr(const void* p) {
    u64 a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (u32)a;
}
// Thread 0 of the block, before any other thread waits on the barrier (then a sync_block).
DEV void mbar_init(u64* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// The barrier's current phase completes once `bytes` have landed (one arrival: the issuer's).
DEV void mbar_expect(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}
DEV void bulk_copy(void* dst, const void* src, u32 bytes, u64* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}
// Waits until the barrier's phase of parity `parity` has completed.
DEV void mbar_wait(u64* bar, u32 parity) {
    asm volatile(
        "{\n.reg .pred p;\nDS_MBAR_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra DS_MBAR_WAIT;\n}" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}
#else
DEV void mbar_init(u64* bar) { *bar = 0; }
DEV void mbar_expect(u64*, u32) {}
DEV void bulk_copy(void* dst, const void* src, u32 bytes, u64*) {
    u32x4* d = (u32x4*)dst;
    const u32x4* s = (const u32x4*)src;
    for (u32 i = 0; i < bytes / 16; ++i) d[i] = s[i];
}
DEV void mbar_wait(u64*, u32) { sync_block(); }
#endif

// For stage rings refilled by whichever warp releases a stage last (hip/qmma_staged.h).
// atom_add_cta: an atomic add on a shared counter, returning the old value; everything the
// warp read before (its reads of the stage) is ordered before it. bulk_prefetch_l2: the TMA
// pulls `bytes` at p into L2 with no destination (sm_90; a no-op elsewhere, values never
// depend on it). gdim_x: blocks in the grid's x dimension (NVIDIA and the emulator only).
#if defined(__NVPTX__)
DEV u32 atom_add_cta(u32* p, u32 v) {
    asm volatile("" ::: "memory");
    return (u32)__nvvm_atom_cta_add_gen_i((int*)p, (int)v);
}
DEV u32 gdim_x() { return __nvvm_read_ptx_sreg_nctaid_x(); }
DEV void sync_warp() { __nvvm_bar_warp_sync(0xffffffffu); }
#elif defined(DS_EMULATE)
DEV u32 atom_add_cta(u32* p, u32 v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
DEV u32 gdim_x() { return ds_emu.gx; }
DEV void sync_warp() { ds_emu.warp_bar->arrive_and_wait(); }
#endif
DEV void bulk_prefetch_l2(const void* p, u32 bytes) {
#if defined(__NVPTX__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
    (void)p, (void)bytes;
#endif
}
