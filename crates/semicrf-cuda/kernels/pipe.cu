// The static-transition forward of kernels/streaming.cu (log and max semirings) with one
// sequence pipelined over `nb` thread blocks: one block on the recurrence's critical path and
// nb - 1 helpers ahead of it, with no grid barrier on the path. For long windows of one long
// sequence (a genome), where kernels/spread.cu's grid barrier a step bounds the step's time.
//
// The window of label j at step t is split at the near depth D:
//   - the near part, durations 1..D, needs the newest D starts, u_{t-1} among them: the main
//     block (part 0) keeps them in a ring of D slots in its shared memory and sums them in the
//     step itself;
//   - the far part, durations D+1..n, needs only starts s <= t - D - 1, known D steps before t:
//     the helpers sum it ahead, in rounds of M steps.
// A step of the main block: join the near part with the far part of the helpers' round, add
// the end boundary (α_t), the transition (u_t), write the new ring entry and publish it in
// global memory (`pub`, a ring of D + M entries); every PIPE_PUB steps it publishes how many
// entries are out (the counter `prog`, after a fence).
//
// A round of the helpers, steps t0 .. t0 + M - 1: wait until the main block has published
// every start the round needs (s <= t0 + M - D - 2) and has taken the far sums of the round
// that last used this round's buffer (PIPE_Q rounds of far sums are kept); then every helper
// extends the entries of its ring slots (K slots split over the helpers, as in spread.cu) and
// writes one partial per step and label; a barrier among the helpers; each merges its share of
// the (step, label) pairs over all helpers' partials in helper order (a fixed order) and
// counts itself done (`ready`). The main block takes a round when all nb - 1 helpers are done
// with it. A start enters a helper's ring at duration D + 1, read from `pub` and extended by
// the scores since, the same additions in the same order as the main block's, so every
// window item is the value the one-block kernel computes.
//
// Ties of the max semiring go to the smallest duration: near durations are all smaller than
// far ones, so a tie between the parts goes to the near part.
//
// The helpers' partials are kept twice, by the parity of the round: those of round r + 2 are
// written after the helpers' barrier of round r + 1, which every helper passes after merging
// round r. The main block waits for round r only when every helper has merged round r, which
// each does after the barrier of round r, after every helper merged round r - 1: `ready`
// counts rounds in order. All the blocks of a sequence must be resident at once (a
// cooperative launch), as they wait for one another.
#ifndef KERNELS_PIPE_CU
#define KERNELS_PIPE_CU

#include "spread.cu"

// Rounds of far sums in flight (the host's `pipe::ROUNDS`).
#define PIPE_Q 8
// The main block publishes its progress every PIPE_PUB steps. A helper's round never waits
// for a step whose far sums it has still to give: it waits for the starts up to te - D - 1,
// published by step te - D + PIPE_PUB - 1 < t0 (D >= M + PIPE_PUB), and for the main block to
// be past step t0 - PIPE_Q·M + PIPE_PUB < t0 (PIPE_Q·M > PIPE_PUB).
#define PIPE_PUB 4

// One sequence's pipeline buffers, carved from its K·C words of `a.ring` (zero at launch;
// the host's `pipe::words` counts them): the helpers' partials (2, nh, M, C), the far sums
// (PIPE_Q, M, C), the published starts (D + M, C), then the args (i32) and three counters:
// `prog` (starts published), the helpers' barrier, `ready` (helpers done, all rounds).
struct PipeLay {
    double *pm, *ps, *fm, *fs, *pub;
    int *pa, *fa;
    unsigned long long* ctr;
};

__device__ __forceinline__ PipeLay pipe_lay(double* base, i64 nh, i64 M, i64 D, i64 C) {
    const i64 np = 2 * nh * M * C, nf = PIPE_Q * M * C;
    PipeLay p;
    p.pm = base;
    p.ps = p.pm + np;
    p.fm = p.ps + np;
    p.fs = p.fm + nf;
    p.pub = p.fs + nf;
    p.pa = reinterpret_cast<int*>(p.pub + (D + M) * C);
    p.fa = p.pa + np;
    p.ctr = reinterpret_cast<unsigned long long*>(p.pub + (D + M) * C + (np + nf + 1) / 2);
    return p;
}

// The near part `acc` (reduced over the team) joined with the far part (m2, s2, a2).
template <int SR>
__device__ __forceinline__ void pipe_join(Two<SR>& acc, double m2, double s2, int a2) {
    if (SR == SR_MAX) {
        acc.max(m2, a2);
        return;
    }
    if (m2 == neg_inf()) return;
    if (acc.m == neg_inf()) {
        acc.m = m2;
        acc.s = s2;
        return;
    }
    const double m = fmax(acc.m, m2);
    acc.s = acc.s * exp(acc.m - m) + s2 * exp(m2 - m);
    acc.m = m;
}

// The block on the critical path: the near windows, the transition, the ring of D starts.
// A step t has one barrier: before it, each label's team completes α_t (its own near sum of
// durations 2..D, computed in the previous step, the duration-1 term, the far sum); after it,
// half of each team computes u_t from every label's α_t (kept by the parity of t) and the new
// start, while the other half computes the near sum of step t + 1 over durations 2..D, which
// needs no start newer than t - 1: the two chains run side by side, each half reducing over
// itself. u_t runs over the labels with a finite transition to j (as trans_into of
// kernels/streaming.cu over every label: a -inf term never wins the maximum nor adds to the
// sum, and where every term is -inf the best label is the scan's first, 0). A label's near
// ring, sums and bounds are only ever touched by its own team.
template <int SR>
__device__ void pipe_main(const Args& a, const Spread& w, int b, const PipeLay& p) {
    const i64 L = a.len[b], K = a.K, C = a.C, ch = a.ch;
    const int D = w.near, M = w.round;
    const unsigned long long nh = (unsigned long long)(w.nb - 1);
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    const int half = team / 2;  // lanes l < half: the transition; the others: the near sum
    STREAM_SMEM(smem);
    double* ax = smem;  // α_t by the parity of t: [(t & 1)*C + j]
    double* scs = ax + 2 * C;
    double* ebs = scs + ch * C;
    double* bbs = ebs + ch * C;
    double* qm = bbs + ch * C;  // the next step's near sum over durations 2..D: maximum,
    double* qs = qm + C;        // sum relative to it (and `qa`, the arg)
    double* rn = qs + C;        // [j*D + s mod D]
    double* dn = rn + D * C;    // [j*D + d-1]
    double* fm = dn + D * C;    // the round's far sums [m*C + j]
    double* fs = fm + M * C;
    double* trs = fs + M * C;  // the transition [i*C + j]
    i64* z = reinterpret_cast<i64*>(trs + C * C);
    int* km = reinterpret_cast<int*>(z + C);
    int* qa = km + C;
    int* nn = qa + C;  // the next step's window, at most D
    int* fa = nn + C;
    int* cnt = fa + M * C;  // the labels with a finite transition to j: lst[j*C + ..cnt[j]]
    int* lst = cnt + C;
    STREAM_SMEM_END(reinterpret_cast<double*>(z + C) + (4 * C + M * C + C * C + 1) / 2);
    const int R = D + M;

    for (i64 x = threadIdx.x; x < D * C; x += blockDim.x) {
        const i64 j = x / D, d = x % D + 1;
        dn[x] = a.dur[(d - 1) * C + j];
    }
    for (i64 x = threadIdx.x; x < C * C; x += blockDim.x) trs[x] = a.tr[x];
    i64 c0 = 1;  // the staged chunk's first step
    stage_fwd(scs, ebs, bbs, a, b, c0, L);
    for (i64 j = threadIdx.x; j < C; j += blockDim.x) {
        int n = 0;
        for (i64 i = 0; i < C; ++i)
            if (a.tr[i * C + j] != neg_inf()) lst[j * C + n++] = (int)i;
        cnt[j] = n;
        z[j] = 0;
        km[j] = longest_finite(a.dur, K, C, j);
        const double e = a.st[j] + opt_at(a.bb, a, b, 0, j);
        rn[j * D] = e;
        p.pub[j] = e;
        if (a.u) SAVED(a.u, b, 0, j) = a.st[j];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(p.ctr, 1ULL);
    }
    unsigned long long published = 1;

    int tD = 0, tR = 0, m = M - 1;  // t mod D; t mod R; t - 1 mod M
    // After the barrier of step t (rows of the chunk from c0; tR = t mod R): where `trans`,
    // u_t and the new start (lanes l < half); the near sum of step t + 1 over durations 2..D
    // with the window's bound (the other lanes), what the team of label j needs to complete
    // α_{t+1}(j) after the next barrier.
    auto phase = [&](i64 t, bool trans) {
        const i64 t1 = t + 1, r = t - c0;
        const int tD1 = tD + 1 == D ? 0 : tD + 1;
        const double* al = ax + (t & 1) * C;
        const bool near = l >= half;
        const int ln = near ? l - half : l;
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            const bool act = j < C;
            Two<SR> acc;
            acc.init();
            i64 zj = 0;
            int n = 0, nl = 0;
            double* rj = rn + j * D;
            const double* dj = dn + j * D;
            const int* lj = lst + (act ? j : 0) * C;
            if (act && near && t1 <= L) {
                const double sv = scs[(t1 - c0) * C + j];
                zj = sv == neg_inf() ? t1 : z[j];
                const i64 open = t1 - zj < km[j] ? t1 - zj : (i64)km[j];
                n = open < D ? (int)open : D;
                for (int d = 2 + ln; d <= n; d += half) {
                    const int q = slot_back<int>(tD1, d, D);
                    const double x = rj[q] + sv;
                    rj[q] = x;
                    acc.max(x + dj[d - 1], d);
                }
            }
            if (act && !near && trans) {
                nl = cnt[j];
                for (int q = ln; q < nl; q += half) {
                    const int i = lj[q];
                    acc.max(al[i] + trs[i * C + j], i);
                }
            }
            acc.max_reduce(half);
            if (SR != SR_MAX && act) {
                for (int d = 2 + ln; near && d <= n; d += half)
                    acc.sum(rj[slot_back<int>(tD1, d, D)] + dj[d - 1], 0.0);
                for (int q = ln; q < nl; q += half) acc.sum(al[lj[q]] + trs[lj[q] * C + j], 0.0);
            }
            acc.sum_reduce(half);
            if (act && l == half) {
                z[j] = zj;
                nn[j] = n;
                qm[j] = acc.m;
                qs[j] = acc.s;
                qa[j] = acc.arg;
            }
            if (act && l == 0 && trans) {
                if (acc.m == neg_inf()) acc.arg = 0;
                const double x = acc.x();
                const double e = x + bbs[r * C + j];
                rn[j * D + tD] = e;
                p.pub[tR * C + j] = e;
                if (a.u) SAVED(a.u, b, t, j) = x;
                if (a.bpi) SAVED(a.bpi, b, t, j) = acc.arg;
            }
            __syncwarp();  // the near sum (lane `half`) before lane 0 completes α_{t+1}(j)
        }
    };
    phase(0, false);

    for (i64 t = 1; t <= L; ++t) {
        tD = tD + 1 == D ? 0 : tD + 1;
        tR = tR + 1 == R ? 0 : tR + 1;
        if (t + 1 - c0 >= ch) {
            // The chunk from t on (every thread is done with the rows before t).
            __syncthreads();
            c0 = t;
            stage_fwd(scs, ebs, bbs, a, b, c0, L);
            __syncthreads();
        }
        if (++m == M) {
            // A new round: wait for its far sums and copy them in.
            m = 0;
            const i64 round = (t - 1) / M;
            if (threadIdx.x == 0) {
                while (SPREAD_POLL(p.ctr + 2) < (unsigned long long)(round + 1) * nh) {
                }
                __threadfence();
            }
            __syncthreads();
            const i64 at = (round % PIPE_Q) * M * C;
            for (i64 x = threadIdx.x; x < M * C; x += blockDim.x) {
                fm[x] = SPREAD_LOAD(p.fm + at + x);
                fs[x] = SPREAD_LOAD(p.fs + at + x);
                fa[x] = SPREAD_LOAD(p.fa + at + x);
            }
            __syncthreads();
        }
        // α_t: the near sum, the start t - 1 extended by the score (duration 1), the far sum.
        const i64 r = t - c0;
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            if (j < C && l == 0) {
                Two<SR> acc;
                acc.init();
                acc.m = qm[j];
                acc.s = qs[j];
                acc.arg = qa[j];
                if (nn[j] >= 1) {
                    double* e = rn + j * D + (tD == 0 ? D - 1 : tD - 1);
                    *e += scs[r * C + j];
                    pipe_join<SR>(acc, *e + dn[j * D], 1.0, 1);
                }
                pipe_join<SR>(acc, fm[m * C + j], fs[m * C + j], fa[m * C + j]);
                const double x = acc.x() + ebs[r * C + j];
                ax[(t & 1) * C + j] = x;
                if (a.alpha) SAVED(a.alpha, b, t, j) = x;
                if (a.bpd) SAVED(a.bpd, b, t, j) = acc.arg;
            }
        }
        __syncthreads();
        if (t % PIPE_PUB == 0) {
            // The starts 0 .. t - 1 are out.
            if (threadIdx.x == 0) {
                __threadfence();
                atomicAdd(p.ctr, (unsigned long long)t - published);
            }
            published = (unsigned long long)t;
        }
        if (t == L) break;
        // u_t and the new start, in the ring and published; the next near sum.
        phase(t, true);
    }
    fwd_result<SR>(a, b, ax + (L & 1) * C);
}

// A helper's slots q (of P, from s0) whose start has a duration d in D + 1 .. n at a step,
// where `top` is t mod K less s0: d = top - q for q < top, else top + K - q. Part 0 is the
// first case, part 1 the second; in each, the slots [lo, hi) and d = off - q. Iterating
// these alone (not every slot, skipping the others) is what keeps a helper's step short
// where windows are closed by -inf scores or short longest durations.
struct FarSlots {
    int lo, hi, off;
};

__device__ __forceinline__ FarSlots far_slots(int part, int top, int n, int D, int K, int P) {
    FarSlots f;
    f.off = part == 0 ? top : top + K;
    const int first = part == 0 ? 0 : (top > 0 ? top : 0);
    const int last = part == 0 ? (top < P ? top : P) : P;  // exclusive
    f.lo = f.off - n > first ? f.off - n : first;
    f.hi = f.off - D < last ? f.off - D : last;
    return f;
}

// Helper h of nh: the far windows of its ring slots, a round at a time.
template <int SR>
__device__ void pipe_helper(const Args& a, const Spread& w, int b, const PipeLay& p, int h) {
    const i64 L = a.len[b], K = a.K, C = a.C;
    const i64 D = w.near, M = w.round, nh = w.nb - 1;
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    const i64 s0 = h * K / nh, P = (h + 1) * K / nh - s0;  // this helper's slots [s0, s0 + P)
    STREAM_SMEM(smem);
    double* hsc = smem;  // the scores of steps t0 - D .. t0 + M - 1: [(t - t0 + D)*C + j]
    i64* z = reinterpret_cast<i64*>(hsc + (D + M) * C);
    int* km = reinterpret_cast<int*>(z + C);
    double* rx = hsc + (D + M) * C + C + (C + 1) / 2;  // [j*P + slot - s0]
    STREAM_SMEM_END(rx + C * P);
    double* durT = a.ring2 + (i64)b * K * C;  // [j*K + d-1], written by the helpers in part
    const i64 R = D + M;
    unsigned long long gen = 0;

    spread_init(a, durT, km, h, (int)nh);
    for (i64 j = threadIdx.x; j < C; j += blockDim.x) z[j] = 0;
    spread_sync(p.ctr + 1, ++gen * nh);  // the transposed durations are whole

    i64 tk = 0;  // t mod K
    for (i64 t0 = 1; t0 <= L; t0 += M) {
        const i64 round = (t0 - 1) / M, te = t0 + M - 1 < L ? t0 + M - 1 : L;
        // Starts published (`prog`): up to the newest the round needs, and far enough that
        // the main block has copied in the round that last used this round's buffer of far
        // sums (it does at step t0 - PIPE_Q·M, and publishes at step t the starts before t).
        const i64 newest = te - D, freed = t0 - PIPE_Q * M + 1;
        const i64 need = newest > freed ? newest : freed;
        if (threadIdx.x == 0) {
            while ((i64)SPREAD_POLL(p.ctr) < need) {
            }
            __threadfence();
        }
        __syncthreads();
        stage(hsc, a.sc, a, b, a.T, t0 - D - 1, 0, te - t0 + D + 1, L, true);
        __syncthreads();
        // The starts that enter the far window in this round (duration D + 1 at step t), in
        // this helper's slots: as published, extended by the scores of s + 1 .. t, a thread a
        // start and label. Their slots' previous starts are beyond every window by now.
        for (i64 x = threadIdx.x; x < (te - t0 + 1) * C; x += blockDim.x) {
            const i64 t = t0 + x / C, j = x % C, s = t - D - 1;
            i64 slot = (tk + 1 + x / C - D - 1) % K;  // s mod K
            if (slot < 0) slot += K;
            if (s < 0 || slot < s0 || slot >= s0 + P) continue;
            double e = SPREAD_LOAD(p.pub + (s % R) * C + j);
            for (i64 u = s + 1; u <= t; ++u) e += hsc[(u - t0 + D) * C + j];
            rx[j * P + slot - s0] = e;
        }
        __syncthreads();
        const i64 par = (round & 1) * nh * M * C;
        // The steps of the round. A label's z, ring slots and partials belong to one team (a
        // half or whole warp): the steps need no block barrier.
        const int k32 = (int)K, p32 = (int)P, base = (int)s0;
        for (i64 t = t0; t <= te; ++t) {
            tk = tk + 1 == K ? 0 : tk + 1;
            const int top = (int)tk - base;  // the duration of the start in slot s0, less K
            for (i64 jb = 0; jb < C; jb += nteams) {
                const i64 j = jb + g;
                Two<SR> acc;
                acc.init();
                int n = 0;
                i64 zt = 0;
                double* rj = rx + j * P;
                const double* dj = durT + j * K;
                if (j < C) {
                    const double sv = hsc[(t - t0 + D) * C + j];
                    const i64 zj = sv == neg_inf() ? t : z[j];
                    n = t - zj < km[j] ? (int)(t - zj) : km[j];
                    // Only the slots of durations D + 1 .. n: a window no longer than the
                    // near depth never reaches the helpers.
                    for (int part = 0; part < 2; ++part) {
                        const FarSlots f = far_slots(part, top, n, (int)D, k32, p32);
                        for (int q = f.lo + l; q < f.hi; q += team) {
                            const int d = f.off - q;
                            // A start entering the far window is extended already.
                            const double x = d == D + 1 ? rj[q] : rj[q] + sv;
                            rj[q] = x;
                            acc.max(x + dj[d - 1], d);
                        }
                    }
                    zt = zj;
                }
                acc.max_reduce(team);
                if (SR != SR_MAX && j < C) {
                    for (int part = 0; part < 2; ++part) {
                        const FarSlots f = far_slots(part, top, n, (int)D, k32, p32);
                        for (int q = f.lo + l; q < f.hi; q += team)
                            acc.sum(rj[q] + dj[f.off - q - 1], 0.0);
                    }
                }
                acc.sum_reduce(team);
                if (j < C && l == 0) {
                    z[j] = zt;
                    const i64 at = par + (h * M + (t - t0)) * C + j;
                    p.pm[at] = acc.m;
                    p.ps[at] = acc.s;
                    p.pa[at] = acc.arg;
                }
                __syncwarp();  // z[j] before the team's next step reads it
            }
        }
        spread_sync(p.ctr + 1, ++gen * nh);  // every helper's partials of the round are out
        // This helper's share of the round's (step, label) pairs, merged over the helpers.
        const i64 pairs = (te - t0 + 1) * C, at = (round % PIPE_Q) * M * C;
        for (i64 x0 = 0; x0 < pairs; x0 += nh * nteams) {
            const i64 x = x0 + h + nh * g;  // m * C + j: the helpers take turns
            const bool act = x < pairs;
            const Two<SR> acc =
                merge_parts<SR>(p.pm, p.ps, p.pa, par + x, M * C, (int)nh, act, l, team);
            if (act && l == 0) {
                p.fm[at + x] = acc.m;
                p.fs[at + x] = acc.s;
                p.fa[at + x] = acc.arg;
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(p.ctr + 2, 1ULL);
        }
    }
}

template <int SR>
__device__ void fwd_pipe(const Args& a, const Spread& w) {
    const int nb = w.nb, part = (int)(blockIdx.x % (unsigned)nb);
    const int b = a.seq ? a.seq[blockIdx.x / nb] : (int)(blockIdx.x / nb);
    if (b < 0) return;  // the whole group of an entry beyond a list made on the device
    const PipeLay p = pipe_lay(a.ring + (i64)b * a.K * a.C, nb - 1, w.round, w.near, a.C);
    if (part == 0)
        pipe_main<SR>(a, w, b, p);
    else
        pipe_helper<SR>(a, w, b, p, part - 1);
}

extern "C" __global__ void __launch_bounds__(1024) fwd_pipe_log(Args a, Spread w) {
    fwd_pipe<SR_LOG>(a, w);
}
extern "C" __global__ void __launch_bounds__(1024) fwd_pipe_max(Args a, Spread w) {
    fwd_pipe<SR_MAX>(a, w);
}

#endif  // KERNELS_PIPE_CU
