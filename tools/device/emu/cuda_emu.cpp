// A CPU stand-in for libcuda.so.1, for CI without a GPU: it exports the CUDA driver API
// functions deltaspec's driver layer (src/backend/hip/driver/cuda.rs) loads, "loads" any module,
// and runs launches of the real kernels from hip/*.hip compiled for the host (DS_EMULATE).
// Point the backend at it with DELTASPEC_CUDA_LIB=/path/libdsemu.so (tools/device/build_emu.sh).
#define DS_EMULATE
#include "../../../hip/attention.hip"
#include "../../../hip/conv.hip"
#include "../../../hip/dflash2.hip"
#include "../../../hip/elementwise.hip"
#include "../../../hip/gdn.hip"
#include "../../../hip/matmul.hip"
#include "../../../hip/norm.hip"
#include "../../../hip/qmatmul.hip"
#include "../../../hip/rope.hip"
#include "../../../hip/select.hip"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

thread_local DsEmuThread ds_emu;

namespace {

struct Entry {
    const char* name;
    void (*fn)();
    void (*invoke)(void (*)(), void**);
};

template <class... A, std::size_t... I>
void call(void (*f)(A...), void** args, std::index_sequence<I...>) {
    f(*static_cast<A*>(args[I])...);
}
template <class... A>
void invoke_impl(void (*raw)(), void** args) {
    call(reinterpret_cast<void (*)(A...)>(raw), args, std::index_sequence_for<A...>{});
}
template <class... A>
Entry entry(const char* name, void (*f)(A...)) {
    return Entry{name, reinterpret_cast<void (*)()>(f), &invoke_impl<A...>};
}

#define K(name) entry(#name, &name),
#define QM(ty, Q) K(qgemv_##ty##_1) K(qgemv_##ty##_2) K(qgemv_##ty##_4) K(qgemv_##ty##_8) K(qgemv_##ty##_16)
#define MM(ty, Q) K(gemv_##ty##_1) K(gemv_##ty##_2) K(gemv_##ty##_4) K(gemv_##ty##_8) K(mm_##ty) K(embed_##ty) K(dequant_##ty)

const std::vector<Entry>& table() {
    static const std::vector<Entry> t = {
        DS_FOR_EACH_WTYPE(MM)                                                      //
        DS_FOR_EACH_QTYPE(QM) K(quantize_q8)                                       //
        K(rms_norm) K(add_rms_norm) K(gated_rms_norm) K(l2_norm)                   //
        K(add_f32) K(sigmoid_mul) K(swiglu) K(slice_last) K(fill_f32)              //
        K(rope) K(conv_step) K(conv_tree) K(gdn_dk64) K(gdn_dk128) K(gdn_any)      //
        K(gdn_dk64_tree) K(gdn_dk128_tree) K(gdn_any_tree)                         //
        K(kv_write) K(attn_hd1) K(attn_hd2) K(attn_hd4) K(attn_hd8) K(attn_combine) //
        K(argmax_f32) K(top_k_f32) K(dyn_conv) K(selector_walk)};
    return t;
}

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

typedef int CUresult;
typedef void* Ptr;

extern "C" {
CUresult cuInit(unsigned) { return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int) { *d = 0; return 0; }
CUresult cuDeviceGetName(char* buf, int len, int) {
    std::strncpy(buf, "deltaspec CPU emulator", (size_t)len);
    buf[len - 1] = 0;
    return 0;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int) {
    switch (attr) {
        case 10: *v = 32; break;  // warp size
        case 16: *v = 4; break;   // multiprocessors
        case 75: *v = 9; break;   // compute capability
        case 76: *v = 0; break;
        default: *v = 0;
    }
    return 0;
}
CUresult cuDevicePrimaryCtxRetain(Ptr* c, int) { *c = (Ptr)1; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int) { return 0; }
CUresult cuCtxSetCurrent(Ptr) { return 0; }
CUresult cuMemAlloc_v2(unsigned long long* p, size_t n) {
    void* m = std::aligned_alloc(256, (n + 255) / 256 * 256);
    if (!m) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
    *p = (unsigned long long)m;
    return 0;
}
CUresult cuMemFree_v2(unsigned long long p) { std::free((void*)p); return 0; }
CUresult cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, Ptr) { std::memset((void*)p, v, n); return 0; }
CUresult cuMemcpyHtoDAsync_v2(unsigned long long d, const void* s, size_t n, Ptr) { std::memcpy((void*)d, s, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void* d, unsigned long long s, size_t n, Ptr) { std::memcpy(d, (void*)s, n); return 0; }
CUresult cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, Ptr) { std::memmove((void*)d, (void*)s, n); return 0; }
CUresult cuStreamCreate(Ptr* s, unsigned) { *s = (Ptr)1; return 0; }
CUresult cuStreamSynchronize(Ptr) { return 0; }
CUresult cuStreamDestroy_v2(Ptr) { return 0; }
CUresult cuModuleLoadDataEx(Ptr* m, const void*, unsigned, int*, void**) { *m = (Ptr)1; return 0; }
CUresult cuModuleUnload(Ptr) { return 0; }
CUresult cuModuleGetFunction(Ptr* f, Ptr, const char* name) {
    for (const Entry& e : table()) {
        if (std::strcmp(e.name, name) == 0) {
            *f = (Ptr)&e;
            return 0;
        }
    }
    return 500;  // CUDA_ERROR_NOT_FOUND
}
CUresult cuLaunchKernel(Ptr f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned,
                        Ptr, void** params, void**) {
    const Entry* e = (const Entry*)f;
    const unsigned n = bx * by * bz;
    if (n == 0 || n % 32 != 0 || by != 1 || bz != 1) return 1;  // CUDA_ERROR_INVALID_VALUE
    for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < gy; ++y)
            for (unsigned x = 0; x < gx; ++x) {
                std::barrier<> block_bar(n);
                std::vector<std::barrier<>*> warp_bars;
                std::vector<i32> xchg(n);
                for (unsigned w = 0; w < n / 32; ++w) warp_bars.push_back(new std::barrier<>(32));
                std::vector<std::thread> threads;
                threads.reserve(n);
                for (unsigned t = 0; t < n; ++t) {
                    threads.emplace_back([&, t] {
                        ds_emu = DsEmuThread{t, x, y, z, &block_bar, warp_bars[t / 32], &xchg[t / 32 * 32]};
                        e->invoke(e->fn, params);
                        ds_emu.warp_bar->arrive_and_drop();
                        ds_emu.block_bar->arrive_and_drop();
                    });
                }
                for (auto& th : threads) th.join();
                for (auto* b : warp_bars) delete b;
            }
    return 0;
}
CUresult cuEventCreate(Ptr* e, unsigned) { *e = new double(0); return 0; }
CUresult cuEventRecord(Ptr e, Ptr) { *(double*)e = now_ms(); return 0; }
CUresult cuEventSynchronize(Ptr) { return 0; }
CUresult cuEventElapsedTime(float* ms, Ptr a, Ptr b) { *ms = (float)(*(double*)b - *(double*)a); return 0; }
CUresult cuEventDestroy_v2(Ptr e) { delete (double*)e; return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) {
    *s = r == 500 ? "emulator: no such kernel" : "emulator: invalid launch";
    return 0;
}
}
