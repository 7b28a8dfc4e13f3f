// Host emulation of the device primitives in hip/common.h (DS_EMULATE): every GPU thread is a
// std::thread, blocks run one after another (so `__shared__` = function-static storage is
// per block), barriers are std::barrier, and warp shuffles exchange through a per-warp array
// between two warp barriers. Slow, but it runs the real kernel code on a machine without a GPU.
#pragma once
#include <barrier>

struct DsEmuThread {
    u32 tid, bx, by, bz;
    std::barrier<>* block_bar;
    std::barrier<>* warp_bar;
    i32* xchg;  // 32 slots of this thread's warp
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
