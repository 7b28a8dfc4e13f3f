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
#include "../../../hip/qmma.hip"
#include "../../../hip/rope.hip"
#include "../../../hip/select.hip"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
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
    // Byte size of each parameter (a launch recorded into a graph copies the values).
    size_t nargs;
    const size_t* sizes;
};

template <class... A>
struct ArgSizes {
    static_assert(((sizeof(A) <= 8) && ...), "kernel parameters are recorded in 8-byte slots");
    static constexpr size_t v[sizeof...(A) + 1] = {sizeof(A)..., 0};
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
    return Entry{name, reinterpret_cast<void (*)()>(f), &invoke_impl<A...>, sizeof...(A), ArgSizes<A...>::v};
}

#define K(name) entry(#name, &name),
#define Q1(ty, R, U) K(qgemv_##ty##_1r##R##u##U) K(qgemv4_##ty##_1r##R##u##U)
#define Q1P(ty, R, U) K(qgemv_##ty##_1r##R##p##U) K(qgemv4_##ty##_1r##R##p##U)
#define Q1PIPE(ty) Q1P(ty, 1, 1) Q1P(ty, 1, 2) Q1P(ty, 2, 1) K(qgemv_glu_##ty##_1p1) K(qgemv_glu_##ty##_1p2) \
    K(qgemv_glu_##ty##_1t3) K(qgemv_glu_##ty##_1t5) \
    K(qgemv_##ty##_1t3) K(qgemv_##ty##_1t5) K(qgemv4_##ty##_1t3) K(qgemv4_##ty##_1t5)
#define QT(ty, NT) K(qgemv_##ty##_##NT) K(qgemv4_##ty##_##NT) K(qgemv_glu_##ty##_##NT)
#define QM(ty, Q) QT(ty, 1) QT(ty, 2) QT(ty, 4) QT(ty, 8) K(qgemv_##ty##_16) K(qgemv4_##ty##_16) \
    K(qgemv_##ty##_8x4) K(qgemv_##ty##_16x2) K(qgemv_##ty##_16x4) Q1(ty, 1, 1) Q1(ty, 1, 2) Q1(ty, 1, 4) \
    Q1(ty, 2, 1) Q1(ty, 2, 2) Q1(ty, 2, 4) Q1(ty, 4, 1) Q1(ty, 4, 2) K(qgemv_glu_##ty##_1u1)             \
    K(qgemv_glu_##ty##_1u2) K(qgemv_glu_##ty##_1u4) K(qgemv4_##ty##_8x4) K(qgemv_glu_##ty##_8x4)
#define QMMA_NT(ty, NT) K(qmma_##ty##_##NT) K(qmma4_##ty##_##NT) K(qmma_glu_##ty##_##NT) \
    K(qmma_##ty##_##NT##u1) K(qmma4_##ty##_##NT##u1) K(qmma_glu_##ty##_##NT##u1)          \
    K(qmma_##ty##_##NT##f) K(qmma4_##ty##_##NT##f) K(qmma_glu_##ty##_##NT##f)                \
    K(qmma_##ty##_##NT##p) K(qmma4_##ty##_##NT##p) K(qmma_glu_##ty##_##NT##p)  \
    K(qmma_##ty##_##NT##q) K(qmma4_##ty##_##NT##q) K(qmma_glu_##ty##_##NT##q)
#define QMMA_W(ty, NT) K(qmma_##ty##_##NT##w) K(qmma4_##ty##_##NT##w) K(qmma_glu_##ty##_##NT##w)
#define QMMA(ty, P) QMMA_NT(ty, 8) QMMA_NT(ty, 16) QMMA_NT(ty, 32) QMMA_W(ty, 8) QMMA_W(ty, 16) \
    K(qmmp_##ty) K(qmmp4_##ty) K(qmmp_glu_##ty)
// The staged verify tiles exist where a panel holds whole tiles (hip/qmma_staged.h).
#if DS_WL_G % 16 == 0
#define QMMA_T(ty) K(qmma_##ty##_8t) K(qmma4_##ty##_8t) K(qmma_glu_##ty##_8t) \
    K(qmma_##ty##_16t) K(qmma4_##ty##_16t) K(qmma_glu_##ty##_16t)
#else
#define QMMA_T(ty)
#endif
#define MM(ty, Q) K(gemv_##ty##_1) K(gemv_##ty##_2) K(gemv_##ty##_4) K(gemv_##ty##_8) K(mm_##ty) K(embed_##ty) K(dequant_##ty)

const std::vector<Entry>& table() {
    static const std::vector<Entry> t = {
        DS_FOR_EACH_WTYPE(MM)                                                      //
        DS_FOR_EACH_QTYPE(QM) Q1PIPE(iq4_xs) DS_FOR_EACH_FTYPE(QMMA) QMMA_T(iq4_xs) K(quantize_q8) K(quantize_q8_gate) K(qmma_quantize) K(qmma_quantize_gate) K(qmma_relayout)                                     //
        K(rms_norm) K(add_rms_norm) K(gated_rms_norm) K(l2_norm)                   //
        K(rms_norm_q8) K(add_rms_norm_q8) K(gated_rms_norm_q8) K(qk_prep)          //
        K(add_rms_norm_q8s) K(add_rms_norm_q8sf)                                    //
        K(rms_norm_q8f) K(add_rms_norm_q8f) K(gated_rms_norm_q8f)                  //
        K(add_f32) K(sigmoid_mul) K(swiglu) K(slice_last) K(fill_f32)              //
        K(rope) K(conv_step) K(conv_tree) K(gdn_dk64) K(gdn_dk128) K(gdn_any)      //
        K(gdn_dk64_tree) K(gdn_dk128_tree) K(gdn_any_tree) K(gdn_dk64_log) K(gdn_dk128_log) K(gdn_any_log) //
        K(kv_write) K(attn_hd1) K(attn_hd2) K(attn_hd4) K(attn_hd8) K(attn_combine) K(attn_combine_q8g) //
        K(attn_nc_hd1) K(attn_nc_hd2) K(attn_nc_hd4) K(attn_nc_hd8)                   //
        K(argmax_f32) K(top_k_f32) K(logsumexp_f32) K(dyn_conv) K(dyn_conv_q8) K(dyn_conv_q8f) K(selector_walk)};
    return t;
}

// Stream capture, per stream as on a real driver (tests open several backends on parallel
// threads): while a stream captures, launches, memsets and device copies queued on it are
// recorded instead of run; a graph replays them in order. Host copies and syncs on a capturing
// stream, and frees by its thread, fail (and spoil the capture).
struct Op {
    enum Kind { Launch, Memset, Copy } kind;
    const Entry* entry = nullptr;
    unsigned grid[3] = {0, 0, 0}, block = 0;
    std::vector<unsigned long long> args;  // one 8-byte slot per parameter
    unsigned long long dst = 0, src = 0;
    size_t bytes = 0;
    unsigned char value = 0;
};
struct Graph {
    std::vector<Op> ops;
};
struct Stream {
    bool capturing = false;
    bool spoiled = false;
    std::vector<Op> recording;
};
// The stream this thread is capturing, if any (for calls that name no stream).
thread_local Stream* thread_capture = nullptr;

Stream* capturing(void* stream) {
    Stream* s = (Stream*)stream;
    return s && s->capturing ? s : nullptr;
}

// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: an operation not allowed while capturing.
int refuse_in_capture(Stream* s) {
    s->spoiled = true;
    return 900;
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
CUresult cuMemFree_v2(unsigned long long p) {
    if (thread_capture) return refuse_in_capture(thread_capture);  // frees synchronize the device
    std::free((void*)p);
    return 0;
}
CUresult cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, Ptr stream) {
    if (Stream* s = capturing(stream)) {
        Op op{Op::Memset};
        op.dst = p, op.value = v, op.bytes = n;
        s->recording.push_back(std::move(op));
        return 0;
    }
    std::memset((void*)p, v, n);
    return 0;
}
CUresult cuMemcpyHtoDAsync_v2(unsigned long long d, const void* s, size_t n, Ptr stream) {
    if (Stream* c = capturing(stream)) return refuse_in_capture(c);  // pageable host memory
    std::memcpy((void*)d, s, n);
    return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void* d, unsigned long long s, size_t n, Ptr stream) {
    if (Stream* c = capturing(stream)) return refuse_in_capture(c);
    std::memcpy(d, (void*)s, n);
    return 0;
}
CUresult cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, Ptr stream) {
    if (Stream* c = capturing(stream)) {
        Op op{Op::Copy};
        op.dst = d, op.src = s, op.bytes = n;
        c->recording.push_back(std::move(op));
        return 0;
    }
    std::memmove((void*)d, (void*)s, n);
    return 0;
}
CUresult cuStreamCreate(Ptr* s, unsigned) { *s = new Stream; return 0; }
CUresult cuStreamSynchronize(Ptr stream) {
    Stream* c = capturing(stream);
    return c ? refuse_in_capture(c) : 0;
}
CUresult cuStreamDestroy_v2(Ptr stream) { delete (Stream*)stream; return 0; }
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
// The emulation compiles nothing for a device, so it has no registers, spills or static shared
// sizes to report: every attribute is CUDA_ERROR_NOT_SUPPORTED (the backend leaves it out).
CUresult cuFuncGetAttribute(int* v, int, Ptr) {
    *v = 0;
    return 801;
}
// `__shared__` is function-static storage in the emulation, so launches from different host
// threads (tests run in parallel, each with its own backend) must not overlap.
static std::mutex launch_lock;

static void run_kernel(const Entry* e, unsigned gx, unsigned gy, unsigned gz, unsigned n, void** params) {
    std::lock_guard<std::mutex> hold(launch_lock);
    // DSEMU_TRACE=1 lists every launch on stderr (name, grid, block): launch counts of a step.
    static const bool trace = std::getenv("DSEMU_TRACE") != nullptr;
    if (trace) std::fprintf(stderr, "launch %s %ux%ux%u %u\n", e->name, gx, gy, gz, n);
    for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < gy; ++y)
            for (unsigned x = 0; x < gx; ++x) {
                std::barrier<> block_bar(n);
                std::vector<std::barrier<>*> warp_bars;
                std::vector<i32> xchg(n / 32 * DS_EMU_XCHG);
                for (unsigned w = 0; w < n / 32; ++w) warp_bars.push_back(new std::barrier<>(32));
                std::vector<std::thread> threads;
                threads.reserve(n);
                for (unsigned t = 0; t < n; ++t) {
                    threads.emplace_back([&, t] {
                        ds_emu = DsEmuThread{t, x, y, z, gx, &block_bar, warp_bars[t / 32], &xchg[t / 32 * DS_EMU_XCHG]};
                        e->invoke(e->fn, params);
                        ds_emu.warp_bar->arrive_and_drop();
                        ds_emu.block_bar->arrive_and_drop();
                    });
                }
                for (auto& th : threads) th.join();
                for (auto* b : warp_bars) delete b;
            }
}
CUresult cuLaunchKernel(Ptr f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned,
                        Ptr stream, void** params, void**) {
    const Entry* e = (const Entry*)f;
    const unsigned n = bx * by * bz;
    if (n == 0 || n % 32 != 0 || by != 1 || bz != 1) return 1;  // CUDA_ERROR_INVALID_VALUE
    if (Stream* s = capturing(stream)) {
        Op op{Op::Launch};
        op.entry = e;
        op.grid[0] = gx, op.grid[1] = gy, op.grid[2] = gz;
        op.block = n;
        op.args.assign(e->nargs, 0);
        for (size_t i = 0; i < e->nargs; ++i) std::memcpy(&op.args[i], params[i], e->sizes[i]);
        s->recording.push_back(std::move(op));
        return 0;
    }
    run_kernel(e, gx, gy, gz, n, params);
    return 0;
}
static void replay(const Graph& g) {
    for (const Op& op : g.ops) {
        switch (op.kind) {
            case Op::Launch: {
                std::vector<unsigned long long> slots = op.args;
                std::vector<void*> params(slots.size());
                for (size_t i = 0; i < slots.size(); ++i) params[i] = &slots[i];
                run_kernel(op.entry, op.grid[0], op.grid[1], op.grid[2], op.block, params.data());
                break;
            }
            case Op::Memset: std::memset((void*)op.dst, op.value, op.bytes); break;
            case Op::Copy: std::memmove((void*)op.dst, (void*)op.src, op.bytes); break;
        }
    }
}
CUresult cuStreamBeginCapture_v2(Ptr stream, int) {
    Stream* s = (Stream*)stream;
    if (!s || s->capturing || thread_capture) return 900;
    s->capturing = true;
    s->spoiled = false;
    s->recording.clear();
    thread_capture = s;
    return 0;
}
CUresult cuStreamEndCapture(Ptr stream, Ptr* graph) {
    Stream* s = capturing(stream);
    if (!s) return 1;
    s->capturing = false;
    thread_capture = nullptr;
    *graph = nullptr;
    if (s->spoiled) {
        s->recording.clear();
        return 901;  // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    }
    *graph = new Graph{std::move(s->recording)};
    s->recording.clear();
    return 0;
}
CUresult cuGraphInstantiateWithFlags(Ptr* exec, Ptr graph, unsigned long long) {
    if (!graph) return 1;
    *exec = new Graph(*(Graph*)graph);
    return 0;
}
CUresult cuGraphLaunch(Ptr exec, Ptr stream) {
    if (!exec || capturing(stream)) return 1;
    replay(*(Graph*)exec);
    return 0;
}
CUresult cuGraphExecDestroy(Ptr exec) { delete (Graph*)exec; return 0; }
CUresult cuGraphDestroy(Ptr graph) { delete (Graph*)graph; return 0; }
CUresult cuEventCreate(Ptr* e, unsigned) { *e = new double(0); return 0; }
CUresult cuEventRecord(Ptr e, Ptr stream) {
    if (Stream* c = capturing(stream)) return refuse_in_capture(c);  // never done by the backend
    *(double*)e = now_ms();
    return 0;
}
CUresult cuEventSynchronize(Ptr) { return thread_capture ? refuse_in_capture(thread_capture) : 0; }
CUresult cuEventElapsedTime(float* ms, Ptr a, Ptr b) { *ms = (float)(*(double*)b - *(double*)a); return 0; }
CUresult cuEventDestroy_v2(Ptr e) { delete (double*)e; return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) {
    *s = r == 500   ? "emulator: no such kernel"
         : r == 900 ? "emulator: operation not permitted when stream is capturing"
         : r == 901 ? "emulator: capture was invalidated by an operation not permitted in it"
                    : "emulator: invalid launch or graph call";
    return 0;
}
}
