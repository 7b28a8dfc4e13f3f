// TMA bulk-copy read probe (session 35): a persistent grid, each block streaming contiguous
// CH-byte chunks of the matrix through S shared-memory stages filled by
// cp.async.bulk (one elected thread issues, an mbarrier per stage counts the bytes), and every
// thread reading the stage back from shared memory, as a GEMV that decodes from shared memory
// would. Chunks are dealt round-robin (chunk c to block c % grid), so concurrent blocks read
// neighbouring chunks. The primitives mirror hip/common.h's bulk_copy / mbar_* (that header is
// written for clang, this probe is built with the machine's nvcc).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_u32(dst)),
        "l"(src), "r"(bytes), "r"(smem_u32(bar))
        : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n .reg .pred p;\n"
        "W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra W;\n}" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}
// WORK: each 16 bytes read back also pay an IQ4_XS item's arithmetic (nibbles split and looked
// up, 8 dp4a), so the stream is measured with a GEMV's consumer, not only a reader.
__device__ __forceinline__ uint32_t work16(uint4 x, uint32_t a, uint32_t acc) {
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        uint32_t lo, hi;
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(lo) : "r"(0x5a3f1c07u), "r"(0x9e2b4d61u), "r"(w[i] & 0x07070707u));
        asm("prmt.b32 %0, %1, %2, %3;" : "=r"(hi) : "r"(0x5a3f1c07u), "r"(0x9e2b4d61u), "r"((w[i] >> 4) & 0x07070707u));
        asm("dp4a.s32.s32 %0, %1, %2, %0;" : "+r"(acc) : "r"(lo), "r"(a));
        asm("dp4a.s32.s32 %0, %1, %2, %0;" : "+r"(acc) : "r"(hi), "r"(a ^ 0x01010101u));
    }
    return acc;
}
template <int S, int CH, bool WORK = false>
__global__ void __launch_bounds__(128) rd_bulk(const uint8_t* __restrict__ W, uint32_t* out, unsigned long long nch) {
    extern __shared__ __align__(128) uint8_t sm[];
    uint64_t* bar = (uint64_t*)sm;
    uint8_t* buf = sm + 128;
    const int tid = threadIdx.x;
    const unsigned long long first = blockIdx.x, step = gridDim.x;
    const unsigned long long mine = first < nch ? (nch - first + step - 1) / step : 0;
    if (tid == 0) {
        for (int s = 0; s < S; ++s) mbar_init(&bar[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (tid == 0)
        for (int s = 0; s < S && s < (int)mine; ++s) bulk_load(buf + s * CH, W + (first + s * step) * CH, CH, &bar[s]);
    uint32_t acc = 0;
    for (unsigned long long k = 0; k < mine; ++k) {
        const int s = (int)(k % S);
        mbar_wait(&bar[s], (uint32_t)((k / S) & 1));
        const uint4* v = (const uint4*)(buf + s * CH);
#pragma unroll 4
        for (int i = tid; i < CH / 16; i += 128) {
            const uint4 x = v[i];
            if (WORK)
                acc = work16(x, (uint32_t)i * 0x01030507u, acc);
            else
                acc ^= x.x ^ x.y ^ x.z ^ x.w;
        }
        __syncthreads();  // every thread is done with stage s before it is refilled
        if (tid == 0 && k + S < mine) bulk_load(buf + s * CH, W + (first + (k + S) * step) * CH, CH, &bar[s]);
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;
}
