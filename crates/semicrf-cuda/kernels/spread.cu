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
    double* pd;               // (grid, C, K) each block's own duration marginals (backward),
                              // zero at launch; null in the forward
    int nb;                   // blocks a sequence
    int near;                 // kernels/pipe.cu: the near depth D and the steps of a round M
    int round;
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

// The most partials a lane merges: nb <= SPREAD_LANE · team (the host's `MAX_NB`).
#define SPREAD_LANE 8

// Words (8 bytes) of a spread block's shared memory for C labels, `ch` staged positions and
// `P` slots, `rows` staged row blocks (3 forward, 5 backward; the host's `spread::smem_words`).
__device__ __forceinline__ i64 spread_words(i64 C, i64 ch, i64 P, i64 rows) {
    return C + rows * ch * C + C + (C + 1) / 2 + C * P;
}

// The two-pass merge of `n` partials (maximum, sum relative to it, and for max the arg) at
// at, at + stride, ..., in that order's fixed reduction: lane l takes partials l, l + team, ...
// (at most SPREAD_LANE of them, in registers), then the team reduces. Every lane of the warp
// calls it; `act`: the team has a pair to merge.
template <int SR>
__device__ __forceinline__ Two<SR> merge_parts(const double* pm, const double* ps, const int* pa,
                                               i64 at, i64 stride, int n, bool act, int l,
                                               int team) {
    Two<SR> acc;
    acc.init();
    double lm[SPREAD_LANE], ls[SPREAD_LANE];
#pragma unroll
    for (int k = 0; k < SPREAD_LANE; ++k) {
        const int m = l + k * team;
        lm[k] = neg_inf();
        ls[k] = 0.0;
        if (act && m < n) {
            const i64 i = at + m * stride;
            lm[k] = SPREAD_LOAD(pm + i);
            if (SR != SR_MAX) ls[k] = SPREAD_LOAD(ps + i);
            acc.max(lm[k], SR == SR_MAX ? SPREAD_LOAD(pa + i) : 0);
        }
    }
    acc.max_reduce(team);
    if (SR != SR_MAX) {
#pragma unroll
        for (int k = 0; k < SPREAD_LANE; ++k)
            if (lm[k] != neg_inf()) acc.s += ls[k] * exp(lm[k] - acc.m);
    }
    acc.sum_reduce(team);
    return acc;
}

// The nb partials of label j at `par`, in block order.
template <int SR>
__device__ __forceinline__ Two<SR> spread_merge(const Spread& w, i64 par, i64 j, i64 C, int l,
                                                int team) {
    return merge_parts<SR>(w.pm, w.ps, w.pa, par + j * w.nb, 1, w.nb, j < C, l, team);
}

// Every block's share of the transposed durations (durT[j*K + d-1]) and each label's longest
// finite duration; the caller's grid barrier follows.
__device__ void spread_init(const Args& a, double* durT, int* km, int part, int nb) {
    const i64 K = a.K, C = a.C;
    for (i64 x = part * (i64)blockDim.x + threadIdx.x; x < K * C; x += (i64)nb * blockDim.x)
        durT[x] = a.dur[(x % K) * C + x / K];
    for (i64 j = threadIdx.x; j < C; j += blockDim.x) {
        km[j] = longest_finite(a.dur, K, C, j);
    }
}

// A forward's result for sequence b from α_L (`al`): ⊕_j α_L(j) ⊗ end(j), and α_L itself where
// `a.last` asks for it. All threads of the block call it.
template <int SR>
__device__ void fwd_result(const Args& a, int b, const double* al) {
    const i64 C = a.C;
    if (threadIdx.x == 0) {
        Acc<SR> acc;
        acc.init();
        for (i64 j = 0; j < C; ++j) acc.add(al[j] + a.en[j], 0.0, (int)j);
        a.out[2 * b] = acc.x();
        a.out[2 * b + 1] = 0.0;
    }
    if (a.last)
        for (i64 j = threadIdx.x; j < C; j += blockDim.x) a.last[b * C + j] = al[j];
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
    STREAM_SMEM_END(smem + spread_words(C, ch, P, 3));
    double* durT = a.ring2 + (i64)b * K * C;  // [j*K + d-1], written by every block in part
    unsigned long long* bar = w.bar + b;
    unsigned long long gen = 0;
    const i64 part0 = (i64)b * 2 * C * nb;  // this sequence's partials

    spread_init(a, durT, km, part, nb);
    for (i64 j = threadIdx.x; j < C; j += blockDim.x) {
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
            stage_fwd(scs, ebs, bbs, a, b, t, L);
            __syncthreads();
        }
        const i64 par = part0 + (t & 1) * C * nb;
        // 1. The block's share of each label's window; a label's window and z belong to one
        // team (the same every step). Two passes (`Two`): the maximum, then the sum of
        // exponentials relative to it, independent of each other.
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            Two<SR> acc;
            acc.init();
            i64 zj = 0, n = 0;
            double* rj = rx + j * P;
            const double* dj = durT + j * K;
            if (j < C) {
                const double sv = scs[r * C + j];
                zj = sv == neg_inf() ? t : z[j];
                n = t - zj < km[j] ? t - zj : (i64)km[j];
                for (i64 q = l; q < P; q += team) {
                    i64 d = tk - (s0 + q);  // the duration of the start in slot s0 + q
                    if (d <= 0) d += K;
                    if (d <= n) {
                        const double x = rj[q] + sv;
                        rj[q] = x;
                        acc.max(x + dj[d - 1], (int)d);
                    }
                }
            }
            acc.max_reduce(team);
            if (SR != SR_MAX && j < C) {
                for (i64 q = l; q < P; q += team) {
                    i64 d = tk - (s0 + q);
                    if (d <= 0) d += K;
                    if (d <= n) acc.sum(rj[q] + dj[d - 1], 0.0);
                }
            }
            acc.sum_reduce(team);
            if (j < C && l == 0) {
                z[j] = zj;
                w.pm[par + j * nb + part] = acc.m;
                w.ps[par + j * nb + part] = acc.s;
                w.pa[par + j * nb + part] = acc.arg;
            }
        }
        spread_sync(bar, ++gen * nb);
        // 2. α_t: the partials merged.
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            const Two<SR> acc = spread_merge<SR>(w, par, j, C, l, team);
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
                const Two<SR> acc = trans_into<SR>(ax, nullptr, a.tr, j, C, l, wb, act);
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
    if (part == 0) fwd_result<SR>(a, b, ax);
}

// ---------------------------------------------------------------------------------------
// Backward (log semiring), static transition, spread as the forward: bwd_static's recurrences
// (kernels/streaming.cu), the w ring of the next K ends split by slot (e mod K) over the nb
// blocks. A step s:
//   1. every block extends its slots' entries in each label's window by the score, adds its
//      duration marginals (each block into its own copy, `w.pd`: the item of label j and
//      duration d falls to whichever block holds slot s + d) and writes its partial of γ_s;
//   2. a grid barrier; every block merges the partials into γ_s;
//   3. block 0 writes the begin marginals and accumulates the transition marginals, and it and
//      the owner of slot s mod K compute β_s (block 0 the end marginals of s - 1, the owner the
//      new ring entry).
// At the end, after a last barrier, the blocks sum the nb copies of the duration marginals in
// block order, and block 0 turns begin and end marginals into position marginals (bwd_tail).
__device__ void bwd_spread(const Args& a, const Spread& w) {
    const int nb = w.nb, part = (int)(blockIdx.x % (unsigned)nb);
    const int b = a.seq ? a.seq[blockIdx.x / nb] : (int)(blockIdx.x / nb);
    if (b < 0) return;  // the whole group of an entry beyond a list made on the device
    const i64 L = a.len[b], K = a.K, C = a.C, ch = a.ch;
    const double z = a.lz[b];
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    int wb = 1;  // lanes of the team that reduce over the C labels of the transition step
    while (wb < C && wb < team) wb <<= 1;
    const i64 s0 = part * K / nb, P = (part + 1) * K / nb - s0;
    STREAM_SMEM(smem);
    double* gam = smem;  // γ_s(j)
    double* scs = gam + C;
    double* bbs = scs + ch * C;
    double* us = bbs + ch * C;
    double* als = us + ch * C;
    double* ebs = als + ch * C;
    i64* y = reinterpret_cast<i64*>(ebs + ch * C);  // first -inf score at or after s
    int* km = reinterpret_cast<int*>(y + C);
    double* wx = ebs + ch * C + C + (C + 1) / 2;  // [j*P + slot - s0]
    STREAM_SMEM_END(smem + spread_words(C, ch, P, 5));
    double* durT = a.ring2 + (i64)b * K * C;
    double* pd = w.pd + (i64)blockIdx.x * K * C;  // [j*K + d-1]
    double* pt = a.ptr + (i64)b * C * C;                // block 0's
    unsigned long long* bar = w.bar + b;
    unsigned long long gen = 0;
    const i64 part0 = (i64)b * 2 * C * nb;

    spread_init(a, durT, km, part, nb);
    const i64 lk = L % K;
    const bool owns_last = lk >= s0 && lk < s0 + P;
    for (i64 j = threadIdx.x; j < C; j += blockDim.x) {
        y[j] = L;
        if (owns_last) wx[j * P + lk - s0] = a.en[j] + opt_at(a.eb, a, b, L - 1, j);
        if (part == 0) {
            const double em = exp(SAVED(a.alpha, b, L, j) + a.en[j] - z);
            a.pen[(i64)b * C + j] = em;
            AT(a.geb, b, L - 1, j) = em;
        }
    }
    if (part == 0)
        for (i64 x = threadIdx.x; x < C * C; x += blockDim.x) pt[x] = 0.0;
    spread_sync(bar, ++gen * nb);

    i64 lo = L, sk = lk;  // the staged chunk starts at lo; s mod K
    for (i64 s = L - 1; s >= 0; --s) {
        sk = sk == 0 ? K - 1 : sk - 1;
        if (s < lo) {
            lo = s + 1 > ch ? s + 1 - ch : 0;
            const i64 n = s - lo + 1;
            stage_bwd(scs, bbs, us, als, ebs, a, b, lo, n, L);
            __syncthreads();
        }
        const i64 r = s - lo;
        const i64 par = part0 + (s & 1) * C * nb;
        // 1. The block's share of each label's window (ends s + d in its slots).
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            Two<SR_LOG> acc;
            acc.init();
            i64 yj = 0, n = 0;
            double* wj = wx + j * P;
            const double* dj = durT + j * K;
            if (j < C) {
                const double sv = scs[r * C + j];
                const double ub = us[r * C + j] + bbs[r * C + j];
                double* pj = pd + j * K;
                yj = sv == neg_inf() ? s : y[j];
                n = yj - s < km[j] ? yj - s : (i64)km[j];
                for (i64 q = l; q < P; q += team) {
                    i64 d = s0 + q - sk;  // the duration of the end in slot s0 + q
                    if (d <= 0) d += K;
                    if (d <= n) {
                        const double wv = wj[q] + sv;
                        wj[q] = wv;
                        const double x = wv + dj[d - 1];
                        acc.max(x, 0);
                        pj[d - 1] += exp(ub + x - z);
                    }
                }
            }
            acc.max_reduce(team);
            if (j < C) {
                for (i64 q = l; q < P; q += team) {
                    i64 d = s0 + q - sk;
                    if (d <= 0) d += K;
                    if (d <= n) acc.sum(wj[q] + dj[d - 1], 0.0);
                }
            }
            acc.sum_reduce(team);
            if (j < C && l == 0) {
                y[j] = yj;
                w.pm[par + j * nb + part] = acc.m;
                w.ps[par + j * nb + part] = acc.s;
            }
        }
        spread_sync(bar, ++gen * nb);
        // 2. γ_s, and block 0 the begin marginals.
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            const Two<SR_LOG> acc = spread_merge<SR_LOG>(w, par, j, C, l, team);
            if (j < C && l == 0) {
                const double gs = acc.x() + bbs[r * C + j];
                gam[j] = gs;
                if (part == 0) {
                    const double bm = exp(us[r * C + j] + gs - z);
                    AT(a.gbb, b, s, j) = bm;
                    if (s == 0) a.pst[(i64)b * C + j] = bm;
                }
            }
        }
        __syncthreads();
        if (s == 0) break;
        // 3. β_s where this block needs it.
        const bool owner = sk >= s0 && sk < s0 + P;
        if (owner || part == 0) {
            for (i64 ib = 0; ib < C; ib += nteams) {
                const i64 i = ib + g;
                const bool act = i < C;
                const double al = act ? als[r * C + i] : 0.0;
                double* row = part == 0 ? pt + i * C : nullptr;  // block 0's marginals
                const Two<SR_LOG> acc = trans_from(gam, a.tr, i, C, l, wb, act, row, al, z);
                if (act && l == 0) {
                    const double be = acc.x();
                    if (part == 0) AT(a.geb, b, s - 1, i) = exp(al + be - z);
                    if (owner) wx[i * P + sk - s0] = be + ebs[r * C + i];
                }
            }
        }
        __syncthreads();
    }
    spread_sync(bar, ++gen * nb);  // every block's duration marginals are whole
    const double* all = w.pd + (i64)(blockIdx.x / nb) * nb * K * C;
    for (i64 x = part * (i64)blockDim.x + threadIdx.x; x < K * C; x += (i64)nb * blockDim.x) {
        double v = 0.0;
        for (int m = 0; m < nb; ++m) v += SPREAD_LOAD(all + (i64)m * K * C + x);
        a.pdur[(i64)b * K * C + (x % K) * C + x / K] = v;
    }
    if (part == 0) bwd_tail(a, b, L);
}

extern "C" __global__ void __launch_bounds__(1024) fwd_spread_log(Args a, Spread w) {
    fwd_spread<SR_LOG>(a, w);
}
extern "C" __global__ void __launch_bounds__(1024) fwd_spread_max(Args a, Spread w) {
    fwd_spread<SR_MAX>(a, w);
}

extern "C" __global__ void __launch_bounds__(1024) bwd_spread_log(Args a, Spread w) {
    bwd_spread(a, w);
}

#endif  // KERNELS_SPREAD_CU
