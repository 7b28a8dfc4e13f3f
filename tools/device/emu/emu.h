// Host emulation of the device primitives in hip/common.h (DS_EMULATE): every GPU thread is a
// std::thread, blocks run one after another (so `__shared__` = function-static storage is
// per block), barriers are std::barrier, and warp shuffles exchange through a per-warp array
// between two warp barriers. Slow, but it runs the real kernel code on a machine without a GPU.
#pragma once
#include <barrier>

// Exchange slots per warp: 32 for a shuffle, 3 × 32 for an mma step's fragments.
constexpr unsigned DS_EMU_XCHG = 96;

struct DsEmuThread {
    u32 tid, bx, by, bz;
    u32 gx;  // blocks in the grid's x dimension (gdim_x)
    std::barrier<>* block_bar;
    std::barrier<>* warp_bar;
    i32* xchg;  // DS_EMU_XCHG slots of this thread's warp (shuffles use the first 32)
};
extern thread_local DsEmuThread ds_emu;

static inline u32 tid_x() { return ds_emu.tid; }
static inline u32 bid_x() { return ds_emu.bx; }
static inline u32 bid_y() { return ds_emu.by; }
static inline u32 bid_z() { return ds_emu.bz; }
static inline u32 lane_id() { return ds_emu.tid % 32; }
static inline void sync_block() { ds_emu.block_bar->arrive_and_wait(); }
static inline i32 shfl_idx_i32(i32 v, u32 src) {
    ds_emu.xchg[lane_id()] = v;
    ds_emu.warp_bar->arrive_and_wait();
    const i32 r = ds_emu.xchg[src % 32];
    ds_emu.warp_bar->arrive_and_wait();
    return r;
}
static inline i32 shfl_xor_i32(i32 v, u32 mask) { return shfl_idx_i32(v, lane_id() ^ mask); }
// mma.sync m16n8k16 s8 (see mma_s8_16x8x16 in common.h): every lane posts a0, a1, b; then each
// computes its four D elements from the posted fragments, in the hardware's fragment layout.
static inline void ds_emu_mma_s8_16x8x16(i32 (&d)[4], u32 a0, u32 a1, u32 b) {
    i32* x = ds_emu.xchg;
    const u32 l = lane_id();
    x[l] = (i32)a0;
    x[32 + l] = (i32)a1;
    x[64 + l] = (i32)b;
    ds_emu.warp_bar->arrive_and_wait();
    const u32 g = l / 4, t = l % 4;
    for (u32 i = 0; i < 4; ++i) {
        const u32 row = g + 8 * (i / 2), col = 2 * t + i % 2;
        i32 s = 0;
        for (u32 k = 0; k < 16; ++k) {
            // A[row][k]: lane 4 (row % 8) + k / 4, word a0 (row < 8) or a1; B[k][col]: lane 4 col + k / 4.
            const u32 aw = (u32)x[(row < 8 ? 0 : 32) + 4 * (row % 8) + k / 4];
            const u32 bw = (u32)x[64 + 4 * col + k / 4];
            s += (i32)(i8)(u8)(aw >> (8 * (k % 4))) * (i32)(i8)(u8)(bw >> (8 * (k % 4)));
        }
        d[i] += s;
    }
    ds_emu.warp_bar->arrive_and_wait();
}
