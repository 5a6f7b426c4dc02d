// The static-transition forward of kernels/streaming.cu (log and max semirings) with one
// sequence spread over `nb` thread blocks, for the long windows of one long sequence (a
// genome), where one block a sequence leaves most of the GPU idle.
//
// The ring of the last K starts is split by slot (s mod K) into nb contiguous ranges, one per
// block, each kept in its block's shared memory. A step t:
//   1. every block extends the entries of its slots that lie in a label's window by the
//      position's score (as fwd_static does) and reduces them: one partial per block and
//      label, written to global memory;
//   2. a grid barrier (all nb blocks of the sequence);
//   3. every block merges the nb partials of each label in block order, a fixed order, and
//      so holds α_t;
//   4. the block that owns slot t mod K computes u_t and writes the new ring entry, and block
//      0 does the same work where u, α or backpointers are saved (it writes the saved tables
//      and the result).
// The partials are kept twice, by the parity of t: those of step t + 1 are written after the
// barrier of step t, which every reader of step t - 1's has passed, so one grid barrier a step
// suffices. The blocks of a sequence must all be resident at once: the host launches the
// kernel cooperatively (cuLaunchCooperativeKernel refuses a grid that does not fit).
//
// The window of label j is the CPU engine's and fwd_static's (kernels/window.cuh): durations
// d = 1..min(km_j, t - z_j). Ties of the max semiring go to the smallest duration, as in
// fwd_static, whatever block holds it.
#ifndef KERNELS_SPREAD_CU
#define KERNELS_SPREAD_CU

#include "streaming.cu"

struct Spread {
    double* pm;               // (B, 2, C, nb) partials: maximum
    double* ps;               // (B, 2, C, nb)           sum relative to it
    int* pa;                  // (B, 2, C, nb)           arg (the duration)
    unsigned long long* bar;  // (B) the grid barriers' counters, zero at launch
    int nb;                   // blocks a sequence
    int pad;
};
#include "Spread_layout.cuh"

// Loads of what other blocks wrote since the last barrier, and the barrier's poll of its
// counter (the emulation of tests/emu gives its own). Volatile: each is a load from the
// memory system that the compiler neither removes nor moves across a barrier. (The cache-hint
// intrinsics `__ldcg` and `__ldcv` are not: the compiler may hoist them, and a poll through
// them is a loop without side effects that it may drop, so blocks passed the barrier early.)
#ifndef SPREAD_LOAD
template <typename T>
__device__ __forceinline__ T spread_volatile(const T* p) {
    return *reinterpret_cast<const volatile T*>(p);
}
#define SPREAD_LOAD(p) spread_volatile(p)
#define SPREAD_POLL(p) spread_volatile(p)
#endif

// The grid barrier of one sequence's nb blocks: the `gen`-th barrier of the launch waits for
// the counter to reach gen·nb. The fences order every thread's writes before the barrier
// against every read after it (each block's threads meet at __syncthreads first).
__device__ __forceinline__ void spread_sync(unsigned long long* ctr, unsigned long long target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(ctr, 1ULL);
        while (SPREAD_POLL(ctr) < target) {
        }
        __threadfence();
    }
    __syncthreads();
}

// Words (8 bytes) of a spread block's shared memory for C labels, `ch` staged positions and
// `P` slots (the host's `spread::smem_words`).
__device__ __forceinline__ i64 spread_words(i64 C, i64 ch, i64 P) {
    return C + 3 * ch * C + C + (C + 1) / 2 + C * P;
}

template <int SR>
__device__ void fwd_spread(const Args& a, const Spread& w) {
    const int nb = w.nb, part = (int)(blockIdx.x % (unsigned)nb);
    const int b = a.seq ? a.seq[blockIdx.x / nb] : (int)(blockIdx.x / nb);
    if (b < 0) return;  // the whole group of an entry beyond a list made on the device
    const i64 L = a.len[b], K = a.K, C = a.C, ch = a.ch;
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    int wb = 1;  // lanes of the team that reduce over the C previous labels
    while (wb < C && wb < team) wb <<= 1;
    // This block's slots: [s0, s0 + P).
    const i64 s0 = part * K / nb, P = (part + 1) * K / nb - s0;
    STREAM_SMEM(smem);
    double* ax = smem;
    double* scs = ax + C;
    double* ebs = scs + ch * C;
    double* bbs = ebs + ch * C;
    i64* z = reinterpret_cast<i64*>(bbs + ch * C);
    int* km = reinterpret_cast<int*>(z + C);
    double* rx = bbs + ch * C + C + (C + 1) / 2;  // [j*P + slot - s0]
    STREAM_SMEM_END(smem + spread_words(C, ch, P));
    double* durT = a.ring2 + (i64)b * K * C;  // [j*K + d-1], written by every block in part
    unsigned long long* bar = w.bar + b;
    unsigned long long gen = 0;
    const i64 part0 = (i64)b * 2 * C * nb;  // this sequence's partials

    for (i64 x = part * (i64)blockDim.x + threadIdx.x; x < K * C; x += (i64)nb * blockDim.x)
        durT[x] = a.dur[(x % K) * C + x / K];
    for (i64 j = threadIdx.x; j < C; j += blockDim.x) {
        i64 d = K;
        while (d > 0 && a.dur[(d - 1) * C + j] == neg_inf()) --d;
        km[j] = (int)d;
        z[j] = 0;
        if (part == 0) {
            rx[j * P] = a.st[j] + opt_at(a.bb, a, b, 0, j);
            if (a.u) SAVED(a.u, b, 0, j) = a.st[j];
        }
    }
    spread_sync(bar, ++gen * nb);  // the transposed durations are whole

    i64 tk = 0, r = ch - 1;  // t mod K; the row of t - 1 in the staged chunk
    for (i64 t = 1; t <= L; ++t) {
        tk = tk + 1 == K ? 0 : tk + 1;
        if (++r == ch) {
            // The previous step ended with a barrier: nobody reads the old chunk any more.
            r = 0;
            stage(scs, a.sc, a, b, a.T, t - 1, 0, ch, L, true);
            stage(ebs, a.eb, a, b, a.T, t - 1, 0, ch, L, true);
            stage(bbs, a.bb, a, b, a.T, t - 1, 1, ch, L, true);
            __syncthreads();
        }
        const i64 par = part0 + (t & 1) * C * nb;
        // 1. The block's share of each label's window; a label's window and z belong to one
        // team (the same every step).
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            Acc<SR> acc;
            acc.init();
            i64 zj = 0;
            if (j < C) {
                const double sv = scs[r * C + j];
                zj = sv == neg_inf() ? t : z[j];
                const i64 n = t - zj < km[j] ? t - zj : (i64)km[j];
                double* rj = rx + j * P;
                const double* dj = durT + j * K;
                for (i64 q = l; q < P; q += team) {
                    i64 d = tk - (s0 + q);  // the duration of the start in slot s0 + q
                    if (d <= 0) d += K;
                    if (d <= n) {
                        const double x = rj[q] + sv;
                        rj[q] = x;
                        acc.add(x + dj[d - 1], 0.0, (int)d);
                    }
                }
            }
            acc.team_reduce(team);
            if (j < C && l == 0) {
                z[j] = zj;
                w.pm[par + j * nb + part] = acc.m;
                w.ps[par + j * nb + part] = acc.s;
                w.pa[par + j * nb + part] = acc.arg;
            }
        }
        spread_sync(bar, ++gen * nb);
        // 2. α_t: the partials merged in block order (lane l takes blocks l, l + team, ...,
        // then the butterfly).
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            Acc<SR> acc;
            acc.init();
            if (j < C) {
                for (int m = l; m < nb; m += team) {
                    const i64 at = par + j * nb + m;
                    acc.merge(SPREAD_LOAD(w.pm + at), SPREAD_LOAD(w.ps + at), 0.0,
                              SPREAD_LOAD(w.pa + at));
                }
            }
            acc.team_reduce(team);
            if (j < C && l == 0) {
                const double x = acc.x() + ebs[r * C + j];
                ax[j] = x;
                if (part == 0) {
                    if (a.alpha) SAVED(a.alpha, b, t, j) = x;
                    if (a.bpd) SAVED(a.bpd, b, t, j) = acc.arg;
                }
            }
        }
        __syncthreads();
        if (t == L) break;
        // 3. u_t and the new ring entry, where this block needs them.
        const bool owner = tk >= s0 && tk < s0 + P;
        const bool saves = part == 0 && (a.u || a.bpi);
        if (owner || saves) {
            for (i64 jb = 0; jb < C; jb += nteams) {
                const i64 j = jb + g;
                const bool act = j < C;
                Two<SR> acc;
                acc.init();
                if (act && l < wb) {
                    for (i64 i = l; i < C; i += wb) acc.max(ax[i] + a.tr[i * C + j], (int)i);
                }
                acc.max_reduce(wb);
                if (act && l < wb && SR != SR_MAX) {
                    for (i64 i = l; i < C; i += wb) acc.sum(ax[i] + a.tr[i * C + j], 0.0);
                }
                acc.sum_reduce(wb);
                if (act && l == 0) {
                    const double x = acc.x();
                    if (owner) rx[j * P + tk - s0] = x + bbs[r * C + j];
                    if (part == 0) {
                        if (a.u) SAVED(a.u, b, t, j) = x;
                        if (a.bpi) SAVED(a.bpi, b, t, j) = acc.arg;
                    }
                }
            }
        }
        __syncthreads();
    }
    if (part != 0) return;
    if (threadIdx.x == 0) {
        Acc<SR> acc;
        acc.init();
        for (i64 j = 0; j < C; ++j) acc.add(ax[j] + a.en[j], 0.0, (int)j);
        a.out[2 * b] = acc.x();
        a.out[2 * b + 1] = 0.0;
    }
    if (a.last)
        for (i64 j = threadIdx.x; j < C; j += blockDim.x) a.last[b * C + j] = ax[j];
}

extern "C" __global__ void __launch_bounds__(1024) fwd_spread_log(Args a, Spread w) {
    fwd_spread<SR_LOG>(a, w);
}
extern "C" __global__ void __launch_bounds__(1024) fwd_spread_max(Args a, Spread w) {
    fwd_spread<SR_MAX>(a, w);
}

#endif  // KERNELS_SPREAD_CU
