// The windows of the log-domain kernels (kernels/streaming.cu): which durations of each label a
// position sums, and how those are split between the teams of a block.
#ifndef KERNELS_WINDOW_CUH
#define KERNELS_WINDOW_CUH

#include "semiring.cuh"

// Windows (the CPU streaming engine's rule, model page §8). Label j's window of durations at
// position t is d = 1..n_j with n_j = min(km_j, t - z_j): km_j its longest finite duration and
// z_j the first start after its last -inf score. The starts before z_j hold -inf (their
// segments contain that score) and those beyond km_j have -inf duration weights: skipping them
// changes no result, and a label closed by a -inf score costs nothing until it reopens.
//
// The window items of a position, Σ_j n_j, are split into tasks of at most S consecutive
// durations of one label, S = max(LD_SPAN, ⌈Σ_j n_j / LD_TASKS⌉), so that there are at most
// C + LD_TASKS tasks; the teams take them in turn and each writes its partial reduction, which
// one thread per label then merges in task order. A long window is thus spread over every
// team, and every reduction still has a fixed order.
// LD_TASKS and LD_SPAN are the host's (src/kernel/mod.rs, `TASKS` and `SPAN`).
#if !defined(LD_TASKS) || !defined(LD_SPAN)
#error "LD_TASKS and LD_SPAN come from the host"
#endif

// The window bookkeeping in shared memory (see `win_words`, mirrored on the host by
// `logdomain::window_words`).
struct Win {
    i64* z;      // (C) first admissible start (forward) or first -inf score at or after s
    int* km;     // (C) longest finite duration
    int* n;      // (C) window length at this position
    int* off;    // (C + 1) first task of each label; off[C] = the tasks of the position
    int* span;   // (1) S
    double* pm;  // (C + LD_TASKS) partials: maximum
    double* ps;  //                          sum
    double* pt;  //                          entropy sum
    int* pa;     //                          arg
};

// Words (8 bytes) of a Win for C labels.
__device__ __forceinline__ i64 win_words(i64 C) {
    const i64 P = C + LD_TASKS;
    return C + (3 * C + 2 + 1) / 2 + 3 * P + (P + 1) / 2;
}

__device__ __forceinline__ Win win_at(double* at, i64 C) {
    Win w;
    const i64 P = C + LD_TASKS;
    w.z = reinterpret_cast<i64*>(at);
    w.km = reinterpret_cast<int*>(at + C);
    w.n = w.km + C;
    w.off = w.n + C;
    w.span = w.off + C + 1;
    w.pm = at + C + (3 * C + 2 + 1) / 2;
    w.ps = w.pm + P;
    w.pt = w.ps + P;
    w.pa = reinterpret_cast<int*>(w.pt + P);
    return w;
}

// Label j's longest finite duration in the (K, C) durations `dur` ([(d-1)*C + j]).
__device__ __forceinline__ int longest_finite(const double* dur, i64 K, i64 C, i64 j) {
    i64 d = K;
    while (d > 0 && dur[(d - 1) * C + j] == neg_inf()) --d;
    return (int)d;
}

// Sets up the windows: z (to `z0`) and km per label, and the (K, C) durations `dur`
// ([(d-1)*C + j]) transposed into `durT` ([j*K + d-1], so that consecutive durations of a label
// are consecutive words). The caller synchronises before use.
__device__ void win_init(const double* dur, i64 K, i64 C, Win w, double* durT, i64 z0) {
    for (i64 x = threadIdx.x; x < K * C; x += blockDim.x) durT[x] = dur[(x % K) * C + x / K];
    for (i64 j = threadIdx.x; j < C; j += blockDim.x) {
        w.km[j] = longest_finite(dur, K, C, j);
        w.z[j] = z0;
    }
}

// Warp 0: the window lengths `n` of every label (from `len(j)`), the span S and the first task
// of each label. The caller synchronises after it.
template <typename F>
__device__ void win_plan(Win w, i64 C, int team, F len) {
    if (threadIdx.x >= 32) return;
    const int ln = threadIdx.x;
    const i64 q = (C + 31) / 32;
    const i64 j0 = ln * q < C ? ln * q : C, j1 = j0 + q < C ? j0 + q : C;
    i64 items = 0;
    for (i64 j = j0; j < j1; ++j) {
        const i64 n = len(j);
        w.n[j] = (int)n;
        items += n;
    }
    for (int o = 16; o > 0; o >>= 1) items += __shfl_xor_sync(0xffffffffu, items, o);
    i64 span = (items + LD_TASKS - 1) / LD_TASKS;
    if (span < LD_SPAN) span = LD_SPAN;
    if (span < team) span = team;
    int tasks = 0;
    for (i64 j = j0; j < j1; ++j) tasks += (int)((w.n[j] + span - 1) / span);
    int incl = tasks;
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_sync(0xffffffffu, incl, ln >= o ? ln - o : ln);
        if (ln >= o) incl += v;
    }
    int run = incl - tasks;
    for (i64 j = j0; j < j1; ++j) {
        w.off[j] = run;
        run += (int)((w.n[j] + span - 1) / span);
    }
    if (ln == 31) {
        w.off[C] = incl;
        *w.span = (int)span;
    }
}

// The label of task k: the j with off[j] <= k < off[j + 1].
__device__ __forceinline__ i64 win_label(const Win& w, i64 C, int k) {
    i64 lo = 0, hi = C;
    while (hi - lo > 1) {
        const i64 mid = (lo + hi) >> 1;
        if (w.off[mid] <= k) lo = mid;
        else hi = mid;
    }
    return lo;
}

// Merges label j's partials in task order.
template <int SR>
__device__ __forceinline__ Acc<SR> win_merge(const Win& w, i64 j) {
    Acc<SR> acc;
    acc.init();
    for (int k = w.off[j]; k < w.off[j + 1]; ++k) acc.merge(w.pm[k], w.ps[k], w.pt[k], w.pa[k]);
    return acc;
}

#endif  // KERNELS_WINDOW_CUH
