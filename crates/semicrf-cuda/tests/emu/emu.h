// A CPU emulation of the CUDA features that kernels/meet.cu and kernels/io.cu use, so that
// their kernels run (and are tested) on machines without a GPU: each thread of a block is a std::thread, blocks run
// one after the other, __syncthreads is a block barrier, warp votes, shuffles and __syncwarp
// go through per-warp exchange slots guarded by barriers over the lanes of their mask, and
// dynamic shared memory is a per-block buffer (filled with NaN, so that a read of a word never
// written shows). The emulation checks semantics, not timing; built with
// -fsanitize=thread, ThreadSanitizer reports shared-memory accesses that no barrier orders.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>
#include <memory>

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
// A kernel's static shared arrays: one instance for every thread of the block (blocks run one
// after the other).
#define __shared__ static

struct emu_dim3 {
    unsigned x = 0, y = 1, z = 1;
};
inline thread_local emu_dim3 threadIdx;
inline thread_local emu_dim3 blockIdx;
inline emu_dim3 blockDim;
inline emu_dim3 gridDim;

namespace emu {
struct MaskBarrier {
    std::mutex mu;
    std::condition_variable cv;
    std::map<unsigned, std::pair<int, long>> state;  // mask -> (arrived, generation)
    void wait(unsigned mask) {
        std::unique_lock<std::mutex> lk(mu);
        auto& s = state[mask];
        const int n = __builtin_popcount(mask);
        const long gen = s.second;
        if (++s.first == n) {
            s.first = 0;
            s.second++;
            cv.notify_all();
        } else {
            cv.wait(lk, [&] { return state[mask].second != gen; });
        }
    }
};
struct Warp {
    MaskBarrier bar;
    uint64_t slot[32];
};
struct Block {
    std::unique_ptr<std::barrier<>> bar;
    std::mutex nmu;
    std::map<int, std::unique_ptr<std::barrier<>>> nbar;
    std::vector<std::unique_ptr<Warp>> warps;
    std::vector<double> smem;
    std::atomic<int> orv{0};
};
inline thread_local Block* cur = nullptr;
inline Warp& warp() { return *cur->warps[threadIdx.x / 32]; }
inline int lane() { return threadIdx.x % 32; }

template <class T>
T shfl(unsigned mask, T v, int src_of_lane_fn(int, int), int arg, int width) {
    Warp& w = warp();
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    w.slot[lane()] = bits;
    w.bar.wait(mask);
    const int ln = lane();
    const int base = ln / width * width;
    int src = src_of_lane_fn(ln - base, arg);
    if (src < 0 || src >= width) src = ln - base;
    uint64_t got = w.slot[base + src];
    w.bar.wait(mask);
    T r;
    std::memcpy(&r, &got, sizeof(T));
    return r;
}
inline int xor_src(int l, int a) { return l ^ a; }
inline int idx_src(int, int a) { return a; }

// Runs `kernel` on `grid` blocks of `block` threads with `smem` bytes of dynamic shared memory.
template <class A>
void launch(void (*kernel)(A), unsigned grid, unsigned block, size_t smem, A args) {
    blockDim.x = block;
    gridDim.x = grid;
    for (unsigned bx = 0; bx < grid; ++bx) {
        Block blk;
        blk.bar = std::make_unique<std::barrier<>>(block);
        for (unsigned w = 0; w < (block + 31) / 32; ++w) blk.warps.push_back(std::make_unique<Warp>());
        blk.smem.assign(smem / 8 + 1, std::nan(""));
        std::vector<std::thread> th;
        for (unsigned t = 0; t < block; ++t)
            th.emplace_back([&, t, bx] {
                threadIdx.x = t;
                blockIdx.x = bx;
                cur = &blk;
                kernel(args);
            });
        for (auto& x : th) x.join();
    }
}

// Runs `kernel` on `grid` blocks of `block` threads all at once (a cooperative launch: the
// blocks may wait for each other at a grid barrier), with `smem` bytes of dynamic shared
// memory each.
template <class... A>
void launch_coop(void (*kernel)(A...), unsigned grid, unsigned block, size_t smem, A... args) {
    blockDim.x = block;
    gridDim.x = grid;
    std::vector<std::unique_ptr<Block>> blocks;
    for (unsigned bx = 0; bx < grid; ++bx) {
        auto blk = std::make_unique<Block>();
        blk->bar = std::make_unique<std::barrier<>>(block);
        for (unsigned w = 0; w < (block + 31) / 32; ++w) blk->warps.push_back(std::make_unique<Warp>());
        blk->smem.assign(smem / 8 + 1, std::nan(""));
        blocks.push_back(std::move(blk));
    }
    std::vector<std::thread> th;
    for (unsigned bx = 0; bx < grid; ++bx)
        for (unsigned t = 0; t < block; ++t)
            th.emplace_back([&, t, bx] {
                threadIdx.x = t;
                blockIdx.x = bx;
                cur = blocks[bx].get();
                kernel(args...);
            });
    for (auto& x : th) x.join();
}
}  // namespace emu

#define MEET_SMEM(name) double* name = emu::cur->smem.data()
// The end of what a kernel places in dynamic shared memory: beyond the launch's bytes (the
// layout of src/meet/plan.rs smaller than what the kernels take), the run fails.
#define MT_SMEM_END(end)                                                                  \
    do {                                                                                  \
        if ((const double*)(end) > emu::cur->smem.data() + emu::cur->smem.size() - 1) {   \
            std::fprintf(stderr, "shared memory: %td words placed, %zu launched\n",       \
                         (const double*)(end) - emu::cur->smem.data(),                    \
                         emu::cur->smem.size() - 1);                                      \
            std::abort();                                                                 \
        }                                                                                 \
    } while (0)

inline void __syncthreads() { emu::cur->bar->arrive_and_wait(); }
inline int __syncthreads_or(int p) {
    emu::cur->bar->arrive_and_wait();
    if (p) emu::cur->orv.fetch_or(1);
    emu::cur->bar->arrive_and_wait();
    const int r = emu::cur->orv.load();
    emu::cur->bar->arrive_and_wait();
    if (threadIdx.x == 0) emu::cur->orv.store(0);
    emu::cur->bar->arrive_and_wait();
    return r;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp().bar.wait(mask); }
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32) {
    return emu::shfl(mask, v, emu::xor_src, lm, width);
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return emu::shfl(mask, v, emu::idx_src, src, width);
}
template <class T>
T __ldg(const T* p) { return *p; }
inline long long __double_as_longlong(double x) { long long r; std::memcpy(&r, &x, 8); return r; }
inline double __longlong_as_double(long long x) { double r; std::memcpy(&r, &x, 8); return r; }
inline float __int_as_float(int x) { float r; std::memcpy(&r, &x, 4); return r; }
// CUDA's correctly rounded operations, which IEEE double arithmetic is (C++20 in ISO mode
// does not fuse them).
inline double __dadd_rn(double a, double b) { return a + b; }
// The host's float conversion rounds to nearest, as the intrinsic does.
inline float __double2float_rn(double x) { return (float)x; }
inline double __dmul_rn(double a, double b) { return a * b; }

namespace emu {
// `n` values of type T from `f` (the mains' inputs); exits with status 2 on a short file.
template <class T>
std::vector<T> read(FILE* f, size_t n) {
    std::vector<T> v(n);
    if (n && fread(v.data(), sizeof(T), n, f) != n) {
        fprintf(stderr, "short input\n");
        exit(2);
    }
    return v;
}
}  // namespace emu
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// A load of what another block wrote before a grid barrier (kernels/spread.cu), and the
// barrier's poll of its counter (yielding, as the emulation's threads outnumber the cores).
#define SPREAD_LOAD(p) (*(p))
inline unsigned long long emu_poll(const unsigned long long* p) {
    std::this_thread::yield();
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}
#define SPREAD_POLL(p) emu_poll(p)
inline int atomicOr(int* p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline int atomicMax(int* p, int v) {
    int cur = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return cur;
}
#define MT_BAR_N
inline void mt_bar_n(int n) {
    if (n == 32) { __syncwarp(); return; }
    std::barrier<>* b;
    {
        std::lock_guard<std::mutex> g(emu::cur->nmu);
        auto& p = emu::cur->nbar[n];
        if (!p) p = std::make_unique<std::barrier<>>(n);
        b = p.get();
    }
    b->arrive_and_wait();
}
inline int __all_sync(unsigned mask, int p) {
    emu::Warp& w = emu::warp();
    w.slot[emu::lane()] = p ? 1 : 0;
    w.bar.wait(mask);
    int r = 1;
    for (int i = 0; i < 32; ++i)
        if ((mask >> i) & 1u) r &= (int)w.slot[i];
    w.bar.wait(mask);
    return r;
}
inline int __any_sync(unsigned mask, int p) {
    emu::Warp& w = emu::warp();
    w.slot[emu::lane()] = p ? 1 : 0;
    w.bar.wait(mask);
    int r = 0;
    for (int i = 0; i < 32; ++i)
        if ((mask >> i) & 1u) r |= (int)w.slot[i];
    w.bar.wait(mask);
    return r;
}
