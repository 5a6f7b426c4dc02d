// A sweep of the meet kernels (see meet_common.cuh): its state, where its ring is, its staged
// rows, the rows it saves and the rebases.
#ifndef KERNELS_MEET_SWEEP_CUH
#define KERNELS_MEET_SWEEP_CUH

#include "meet_common.cuh"

// A sweep: one side of one sequence, in its own logical coordinates, on one thread block.
// Thread j < C keeps label j's state in registers (phase 2).
struct Sweep {
    const MArgs& a;
    Par p;
    // RK: ring slots per label; C4: the rows' stride, C rounded up to 4 (or to the kernel's
    // label width, `mt_fast`)
    int b, side, L, K, RK, C, C4, m, C2;
    int j;
    // Fixed for the whole sweep, so that the blocks of steps divide nothing (`mt_plan`): the
    // slot of the block's first step t0 (t0 mod RK); this thread's place in phase 1 (its
    // group g of gp lanes, lane l, the group count, its first item k·C + j and the step
    // (dk, dj) between its items) and in the loops over (label, duration) and (label, label)
    // pairs (its first pair and the step between its pairs) and over (step, label) pairs
    // (phase 3); whether a label's entries wait for a rebase (`mt_rebase`); which copy of
    // the running position marginals the block reads (`mt_outputs`).
    int tm;
    int p1g, p1l, p1gp, p1n, p1k, p1j, p1dk, p1dj;
    int kj, kd, kdj, kdd, ci, cc, cdi, cdc, qk, qj, qdk, qdj;
    bool rb;
    int par;
    bool act;  // thread j is a label's
    // label j's state (thread j): G = gm·2^gx, 1/G = gim·2^-gx, G before the last update
    // gmo·2^gxo (the mantissas stay within 2^±32: G itself may be far out of range in a block)
    double gm, gmo, gim, lam, u0;
    int gx, gxo, last, floor;
    i64 E, Eold;
    // shared memory
    double *A, *ER, *H, *gq, *cbs, *ebk, *tl, *wd, *rfm;
    i64* es;  // E before the block's steps, then after each
    int *anyer, *lo, *flo, *newest, *rfx, *gk, *flg;
    double *sF, *sFi, *sB, *sX;
    double *oA, *oU, *oEa, *oEu, *oRa, *oRu, *gsw, *tw, *mus, *eps;
    double* ring;
    double *pd, *pt;  // this sweep's duration and transition marginals (second halves)
    double *gpd, *gpt;  // their outputs

    __device__ __forceinline__ Sweep(const MArgs& args, int bb_, int side_, double* smem,
                                     bool marg, int ct)
        : a(args), p(args, side_) {
        b = bb_;
        side = side_;
        L = (int)a.len[b];
        K = (int)a.K;
        RK = K + MT_P;
        C = (int)a.C;
        C4 = ct > 0 ? ct : (C + 3) / 4 * 4;
        C2 = (C + 31) / 32 * 32;
        m = (L + 1) / 2 > 1 ? (L + 1) / 2 : 1;
        j = threadIdx.x;
        act = j < C;
        const int ch = a.ch, P = MT_P;
        double* q = smem;
        A = q;  // rows of C4: the labels, then zeros (the transition step reads four at a time)
        q += (P + 1) * C4;
        ER = q;
        q += (P + 1) * C4;
        // Four arrays [k·C + j] of the block's steps, by phase. H: phase 1's window sums
        // (phase 3: the begin marginals). gq: G before the step (second halves; phase 3:
        // G·Q0). cbs: the transition sum v (first and second halves; phase 3: cB). ebk: the
        // entries of the block's starts t0-1+k (phase 3: the end marginals).
        H = q;
        q += P * C;
        gq = q;
        q += P * C;
        cbs = q;
        q += P * C;
        ebk = q;
        q += P * C;
        tl = q;  // the side's Tl [i·C + j], then rows of zeros up to i = C4-1
        q += C4 * C;
        wd = q;  // Wl[j, d] for d = 1..P+1, [(d-1)·C + j]
        q += (P + 1) * C;
        rfm = q;
        q += C;
        es = (i64*)q;
        q += P + 1;
        // int words: anyer (P+1), lo (P·C: the window's start floor of each step, then
        // phase 3's lo), flo, newest, rfx (C each), gk (2P: a warp's general steps), flag (2)
        int* iq = (int*)q;
        anyer = iq;
        iq += P + 1;
        lo = iq;
        iq += P * C;
        flo = iq;
        iq += C;
        newest = iq;
        iq += C;
        rfx = iq;
        iq += C;
        gk = iq;
        iq += 2 * P;
        flg = iq;
        q += (3 * P + 4 + P * C + 3 * C) / 2;
        sF = q;
        q += ch * C;
        sFi = q;
        q += ch * C;
        sB = q;
        q += ch * C;
        sX = q;
        q += ch * C;
        if (marg) {
            oA = q;
            q += ch * C;
            oU = q;
            q += ch * C;
            oEa = q;
            q += ch;
            oEu = q;
            q += ch;
            oRa = q;
            q += ch;
            oRu = q;
            q += ch;
            gsw = q;  // G·(window sum) + twin·Wl[j, 1] of each step
            q += P * C;
            tw = q;  // twin·Wl[j, 1] (phase 3: duration 1's terms)
            q += P * C;
            mus = q;  // the running position marginal and the last end marginal, two copies
            q += 2 * C;
            eps = q;
            q += 2 * C;
        }
        gpd = a.pdur + ((i64)b * 2 + side) * K * C;
        gpt = a.ptr + ((i64)b * 2 + side) * C * C;
        pd = gpd;
        pt = gpt;
        if (marg && a.acc) {
            pd = q;
            q += K * C;
            pt = q;
            q += C * C;
        }
        ring = q;  // placed by `mt_place`
        u0 = act ? __ldg(&p.u0[j]) : 0.0;
    }

    // The logical position's element of an input, or of its reverse.
    __device__ __forceinline__ i64 at(int pos, int lab) const {
        const int o = side ? L - 1 - pos : pos;
        return ((i64)b * a.T + o) * C + lab;
    }

    // Stages steps t0 .. t0+ch-1: f = exp(score), 1/f, exp(bb + Mt), exp(eb + Md) of logical
    // position t-1, and (marg) the other side's rows L-t and L-t+1. All threads take part.
    __device__ void stage(int t0, bool marg, const double* oal, const double* ou,
                          const i64* oex, const double* oerm) {
        const int ch = a.ch;
        const void* lbb = side ? a.eb : a.bb;
        const void* leb = side ? a.bb : a.eb;
        for (int x = threadIdx.x; x < ch * C; x += blockDim.x) {
            const int r = x / C, c = x % C;
            const int pos = t0 - 1 + r;
            double f = 1.0, fi = 1.0, bv = 1.0, xv = 1.0;
            if (pos >= 0 && pos < L) {
                const i64 i = at(pos, c);
                f = mt_exp(mt_in(a, a.sc, i), 0.0, flg);
                fi = f > 0.0 ? 1.0 / f : 0.0;
                bv = mt_exp(lbb ? mt_in(a, lbb, i) : 0.0, __ldg(&p.mt[c]), flg);
                xv = mt_exp(leb ? mt_in(a, leb, i) : 0.0, __ldg(&p.md[c]), flg);
            }
            sF[x] = f;
            sFi[x] = fi;
            sB[x] = bv;
            sX[x] = xv;
            if (marg) {
                const int t = t0 + r;
                const int ru = L - t, ra = L - t + 1;
                double ua = 0.0, aa = 0.0;
                if (t <= L) {
                    ua = ou[(i64)ru * C + c];
                    aa = ra >= 1 ? oal[(i64)ra * C + c] : 0.0;
                }
                oU[x] = ua;
                oA[x] = aa;
                if (c == 0) {
                    oEu[r] = t <= L ? __longlong_as_double(oex[ru]) : 0.0;
                    oEa[r] = t <= L ? __longlong_as_double(oex[ra]) : 0.0;
                    oRu[r] = t <= L ? (double)C * oerm[ru] : 0.0;
                    oRa[r] = t <= L && ra >= 1 ? oerm[ra] : 0.0;
                }
            }
        }
    }
};

// Where the ring is: after the staged rows in shared memory (RS), or in this sweep's part of
// the global buffer.
template <bool RS>
__device__ __forceinline__ void mt_place(Sweep& w) {
    MT_SMEM_END(RS ? w.ring + (i64)w.RK * w.C : w.ring);
    if (!RS) w.ring = w.a.ring + ((i64)w.b * 2 + w.side) * w.RK * w.C;
}

// (q / n, q % n) and (step / n, step % n), once.
__device__ __forceinline__ void mt_split(int q, int step, int n, int& a, int& b, int& da,
                                         int& db) {
    a = q / n;
    b = q % n;
    da = step / n;
    db = step % n;
}

// Advances (a, b) = (q / n, q % n) by a step (da, db) = (step / n, step % n).
__device__ __forceinline__ void mt_next(int& a, int& b, int da, int db, int n) {
    a += da;
    b += db;
    if (b >= n) {
        b -= n;
        ++a;
    }
}

// The sweep's fixed places of this thread (`Sweep::tm` ...) for steps from `tfirst` on.
__device__ void mt_plan(Sweep& w, int tfirst) {
    const int K = w.K, C = w.C, nt = blockDim.x;
    w.tm = mt_mod(tfirst, w.RK);
    int gp = 1;
    while (gp * 2 <= 32 && gp * 2 <= K && gp * 2 * MT_P * C <= nt) gp *= 2;
    w.p1gp = gp;
    w.p1g = threadIdx.x / gp;
    w.p1l = threadIdx.x % gp;
    w.p1n = nt / gp;
    mt_split(w.p1g, w.p1n, C, w.p1k, w.p1j, w.p1dk, w.p1dj);
    mt_split(threadIdx.x, nt, K, w.kj, w.kd, w.kdj, w.kdd);
    mt_split(threadIdx.x, nt, C, w.ci, w.cc, w.cdi, w.cdc);
    mt_split(threadIdx.x, nt, C, w.qk, w.qj, w.qdk, w.qdj);
    w.rb = true;
    w.par = 0;
}

// The side's Tl and the first P+1 duration weights into shared memory (all threads; the
// caller synchronises).
__device__ void mt_params(Sweep& w) {
    const int C = w.C, K = w.K;
    for (int x = threadIdx.x; x < w.C4 * C; x += blockDim.x)
        w.tl[x] = x < C * C ? __ldg(&w.p.tl[x]) : 0.0;
    for (int x = threadIdx.x; x < (MT_P + 1) * C; x += blockDim.x) {
        const int d = x / C + 1, j = x % C;
        w.wd[x] = d <= K ? __ldg(&w.p.wl[j * K + d - 1]) : 0.0;
    }
}

// The rebase of every label whose thread set rfm[j], rfx[j] (its G) at the end of the last
// block: the entries of starts lo .. t0-2 that later steps may read are multiplied by G (all
// threads); the newest start whose entry fell below 2^-800 goes to newest[j].
__device__ void mt_rebase(Sweep& w, int t0) {
    if (!w.rb) return;
    const int K = w.K, RK = w.RK, C = w.C;
    int j = w.kj, k = w.kd;
    for (int x = threadIdx.x; x < K * C; x += blockDim.x, mt_next(j, k, w.kdj, w.kdd, K)) {
        const double g = w.rfm[j];
        if (g == 0.0) continue;
        const int lo = t0 - 1 - K > w.flo[j] ? t0 - 1 - K : w.flo[j];
        const int s = t0 - 2 - k;  // every start of the window once
        if (s < lo || s < 0) continue;
        const int slot = w.tm - 2 - k;  // s mod RK (k < K, RK >= K + 2)
        double* e = &w.ring[(i64)j * RK + (slot < 0 ? slot + RK : slot)];
        double v = mt_mulp2(*e * g, w.rfx[j]);
        if (v > 0.0 && v < mt_etiny()) {
            v = 0.0;
            atomicMax(&w.newest[j], s);
        } else if (v > mt_ehuge()) {
            atomicOr(w.flg, 2);
        }
        *e = v;
    }
}

// Phase 1: H[k][j] = Σ entry_s(j)·Wl[j, t-s] over starts max(t-K, window start, 0) <= s <=
// t0-2, for the steps t = t0 + k < t0 + n. Groups of gp lanes (a power of two, at most K and
// 32) split each sum, lane l taking starts t0-2-l, t0-2-l-gp, ...; every warp runs the same
// number of rounds. The ring wraps at most once over a window: two runs of slots.
__device__ void mt_phase1(Sweep& w, int t0, int n) {
    const int K = w.K, RK = w.RK, C = w.C, P = MT_P;
    const int gp = w.p1gp, g = w.p1g, l = w.p1l, groups = w.p1n;
    const int hi = t0 - 2, sh = w.tm >= 2 ? w.tm - 2 : w.tm - 2 + RK;  // the newest start, its slot
    int k = w.p1k, j = w.p1j;
    for (int q0 = 0; q0 < P * C; q0 += groups, mt_next(k, j, w.p1dk, w.p1dj, C)) {
        const int q = q0 + g;
        double s0 = 0.0, s1 = 0.0;
        if (q < P * C && k < n) {
            const int t = t0 + k;
            int lo = t - K > w.flo[j] ? t - K : w.flo[j];
            lo = lo > 0 ? lo : 0;
            int s = hi - l;
            const double* wp = w.p.wl + j * K + (t - s - 1);  // Wl[j, t-s]
            const double* rp = w.ring + j * RK + (sh - l);    // the slot of s before the wrap
            for (int seg = 0; seg < 2; ++seg) {
                // Starts down to `stop` have slots rp - (s - start) >= the run's first.
                const int stop = seg == 0 ? (lo > hi - sh ? lo : hi - sh) : lo;
                for (; s - gp >= stop; s -= 2 * gp, rp -= 2 * gp, wp += 2 * gp) {
                    s0 += rp[0] * __ldg(wp);
                    s1 += rp[-gp] * __ldg(wp + gp);
                }
                if (s >= stop) {
                    s0 += rp[0] * __ldg(wp);
                    s -= gp;
                    rp -= gp;
                    wp += gp;
                }
                rp += RK;
            }
        }
        double h = s0 + s1;
        for (int off = gp >> 1; off > 0; off >>= 1) h += __shfl_xor_sync(0xffffffffu, h, off, gp);
        if (q < P * C && k < n && l == 0) w.H[k * C + j] = h;
    }
}

// The window's start of step t of a label whose window opened at `floor` (the reverse
// sweep's second half reads no start before L-m: segments starting there are the forward
// sweep's).
__device__ __forceinline__ int mt_lo(const Sweep& w, int t, int floor) {
    int lo = t - w.K > floor ? t - w.K : floor;
    if (w.side) lo = lo > w.L - w.m ? lo : w.L - w.m;
    return lo;
}

// Q0 of label j at step k (staged row r) of the second halves, the end marginals' factor,
// and its bound q0e, from the other sweep's staged row.
__device__ __forceinline__ double mt_q0(const Sweep& w, int j, int k, int r, i64 EZ, double kz,
                                        double& q0e) {
    const int C = w.C;
    const i64 eu = (i64)__double_as_longlong(w.oEu[r]);
    const double base = mt_scale(kz, w.es[k] + eu - EZ) * w.sF[r * C + j] * w.sX[r * C + j] *
                        __ldg(&w.p.etmo[j]);
    q0e = base * w.oRu[r];
    return base * w.oU[r * C + j];
}

// Phase 3 of the second halves, first part (all threads, a (step, label) pair each): the
// marginal factors of each step from the other sweep's staged rows, Q0 (its bound q0e) for
// the end marginals and cB (cbe) for the begin marginals; then the begin marginal of t-1
// (v·cB, into H), the end marginal of t (Q0·(G·window + twin·Wl[j, 1]), into ebk), duration
// 1's term (into tw) and the checks; and for `mt_phase3` G·Q0 (gq), cB (cbs) and the
// window's start (lo). Beyond the range, a factor meets only entries or rows of 0 (else a
// marginal would be beyond 1, which the checks catch): it is kept as 0, not ∞.
__device__ void mt_marg(Sweep& w, int t0, int n, int r0, i64 EZ, double kz) {
    const int C = w.C;
    int k = w.qk, j = w.qj;
    for (int x = threadIdx.x; x < n * C; x += blockDim.x, mt_next(k, j, w.qdk, w.qdj, C)) {
        const int r = r0 + k, i = k * C + j;
        double q0e;
        const double q0 = mt_q0(w, j, k, r, EZ, kz, q0e);
        const i64 ea = (i64)__double_as_longlong(w.oEa[r]);
        const double cbase = mt_scale(kz, w.es[k] + ea - EZ) * __ldg(&w.p.emt[j]);
        const double cb = cbase * w.oA[r * C + j], cbe = cbase * w.oRa[r];
        const double v = w.cbs[i], gs = w.gsw[i];
        const double gq = w.gq[i] * q0;
        w.gq[i] = gq <= mt_dmax() ? gq : 0.0;
        w.cbs[i] = cb <= mt_dmax() ? cb : 0.0;
        w.lo[i] = mt_lo(w, t0 + k, w.lo[i]);
        const double bm = v * cb, em2 = q0 * gs;
        // A general step also left the bound of the row before (in sB) and of the entries
        // lost to underflow (in sFi, times Q0).
        const double err = w.gk[2 * k + (j >> 5)]
                               ? w.sB[r * C + j] * cb + v * cbe + w.sFi[r * C + j] * q0 + gs * q0e
                               : v * cbe + gs * q0e;
        if (!(err <= mt_err())) atomicOr(w.flg, 4);
        if (!(bm <= 2.0) || !(em2 <= 2.0)) atomicOr(w.flg, 2);
        w.tw[i] *= q0;
        w.H[i] = bm;
        w.ebk[i] = em2;
    }
}

// Phase 3 of the second halves, after `mt_marg`: the block's duration marginals (d = 1: the
// terms in tw; d >= 2: the window terms times G·Q0 of their step, starts at or after
// lo[k][j], which every start is where the label's window opened K steps before the block)
// and transition marginals (α̃_{t-1}(i)·Tl[i, j]·cB_t(j)); accumulator (j, d) and (i, j) each
// owned by one thread.
__device__ void mt_phase3(Sweep& w, int t0, int n) {
    const int K = w.K, RK = w.RK, C = w.C;
    const int whole = t0 - K;  // windows whole from here
    const bool side_whole = w.side == 0 || w.L - w.m <= whole;
    int j = w.kj, d1 = w.kd;
    for (int x = threadIdx.x; x < K * C; x += blockDim.x, mt_next(j, d1, w.kdj, w.kdd, K)) {
        const int d = d1 + 1;
        double s0 = 0.0, s1 = 0.0;
        if (d == 1) {
            for (int k = 0; k < n; k += 2) {
                s0 += w.tw[k * C + j];
                if (k + 1 < n) s1 += w.tw[(k + 1) * C + j];
            }
            w.pd[j] += s0 + s1;
            continue;
        }
        const double* rj = w.ring + (i64)j * RK;
        const double* gq = w.gq + j;
        int idx = w.tm - d;  // the slot of start t0 - d (step k: + k); d <= K < RK
        idx = idx < 0 ? idx + RK : idx;
        if (side_whole && w.flo[j] <= whole) {
            // Slots idx .. RK-1, then from 0.
            const int n1 = n < RK - idx ? n : RK - idx;
            const double* r = rj + idx;
            int k = 0;
            for (; k + 1 < n1; k += 2) {
                s0 += r[k] * gq[k * C];
                s1 += r[k + 1] * gq[(k + 1) * C];
            }
            if (k < n1) {
                s0 += r[k] * gq[k * C];
                ++k;
                r -= RK;
                if (k < n) s1 += r[k] * gq[k * C];
                ++k;
            } else {
                r -= RK;
            }
            for (; k + 1 < n; k += 2) {
                s0 += r[k] * gq[k * C];
                s1 += r[k + 1] * gq[(k + 1) * C];
            }
            if (k < n) s0 += r[k] * gq[k * C];
        } else {
            for (int k = 0; k < n; ++k) {
                const int sl = idx + k < RK ? idx + k : idx + k - RK;
                if (t0 + k - d >= w.lo[k * C + j]) (k & 1 ? s1 : s0) += rj[sl] * gq[k * C];
            }
        }
        w.pd[(d - 1) * C + j] += (s0 + s1) * __ldg(&w.p.wl[j * K + d - 1]);
    }
    int i = w.ci;
    j = w.cc;
    const int k0 = t0 >= 2 ? 0 : 2 - t0;
    for (int x = threadIdx.x; x < C * C; x += blockDim.x, mt_next(i, j, w.cdi, w.cdc, C)) {
        double s0 = 0.0, s1 = 0.0;
        int k = k0;
        for (; k + 1 < n; k += 2) {
            s0 += w.A[k * w.C4 + i] * w.cbs[k * C + j];
            s1 += w.A[(k + 1) * w.C4 + i] * w.cbs[(k + 1) * C + j];
        }
        if (k < n) s0 += w.A[k * w.C4 + i] * w.cbs[k * C + j];
        // The reverse sweep's transition (i, j) is the original's (j, i).
        w.pt[w.side ? j * C + i : x] += (s0 + s1) * w.tl[x];
    }
}

// Phase 3 of the second halves, after `mt_marg` (all threads, a (step, label) pair each):
// the running position marginal μ_t = μ_{t-1} + begin_{t-1} - end_{t-1} (from the block's
// first, in the copy `par` of mus and eps, where the pair of the last step leaves the next
// block's), and the gradients at their positions in the original coordinates, where the
// forward sweep's begin/end are the reverse's end/begin.
__device__ void mt_outputs(Sweep& w, int t0, int n) {
    const MArgs& a = w.a;
    const int C = w.C;
    const double g = a.up[w.b];
    const double *mu0 = w.mus + w.par * C, *ep0 = w.eps + w.par * C;
    int k = w.qk, j = w.qj;
    for (int x = threadIdx.x; x < n * C; x += blockDim.x, mt_next(k, j, w.qdk, w.qdj, C)) {
        double mu = mu0[j], ep = ep0[j];
        for (int kk = 0; kk <= k; ++kk) {
            mu = mu + w.H[kk * C + j] - ep;
            ep = w.ebk[kk * C + j];
        }
        const double bm = w.H[k * C + j];
        const int t = t0 + k;
        const int ps = w.side ? w.L - t : t - 1;  // position of this μ and of bm/ep's row
        const i64 o = ((i64)w.b * a.T + ps) * C + j;
        a.gsc[o] = g * mu;
        if (w.side == 0) {
            a.gbb[o] = bm;                 // begin at t-1 (scaled by the tail)
            if (a.geb) a.geb[o] = g * ep;  // end at t: end_boundary[t-1]
            if (t == w.L) a.pen[(i64)w.b * C + j] = ep;
        } else {
            a.gbb[o] = ep;                 // begin at L-t
            if (a.geb) a.geb[o] = g * bm;  // end at L-t+1: end_boundary[L-t]
            if (t == w.L) a.pst[(i64)w.b * C + j] = ep;
        }
        if (k == n - 1) {
            w.mus[(w.par ^ 1) * C + j] = mu;
            w.eps[(w.par ^ 1) * C + j] = ep;
        }
    }
}

// Phase 3: the overflow check of the block's α̃ rows (all threads, a (step, label) pair each).
__device__ __forceinline__ void mt_huge_rows(Sweep& w, int n) {
    int k = w.qk, j = w.qj;
    for (int x = threadIdx.x; x < n * w.C; x += blockDim.x, mt_next(k, j, w.qdk, w.qdj, w.C))
        if (!(w.A[(k + 1) * w.C4 + j] <= mt_huge())) atomicOr(w.flg, 2);
}

// Phase 3 of the first halves of a backward (all threads, a (step, label) pair each): the
// block's saved rows, α̃_t and ũ_{t-1} (the transition sum v, in cbs), and by label 0 the
// step's exponent and the bound `erm` of row t-1 (its α̃ rows' largest bound, where any).
__device__ void mt_rows(Sweep& w, int t0, int n) {
    const MArgs& a = w.a;
    const int C = w.C;
    const i64 row = ((i64)w.b * 2 + w.side) * a.H;
    int k = w.qk, j = w.qj;
    for (int x = threadIdx.x; x < n * C; x += blockDim.x, mt_next(k, j, w.qdk, w.qdj, C)) {
        const int t = t0 + k;
        a.alpha[(row + t) * C + j] = w.A[(k + 1) * w.C4 + j];
        a.u[(row + t - 1) * C + j] = w.cbs[k * C + j];
        if (j == 0) {
            a.ex[row + t] = w.es[k + 1];
            if (t >= 2) {
                double em = 0.0;
                if (w.anyer[k])
                    for (int i = 0; i < C; ++i) {
                        const double e = w.ER[k * w.C4 + i];
                        em = em > e ? em : e;
                    }
                a.erm[row + t - 1] = em;
            }
        }
    }
}

#endif  // KERNELS_MEET_SWEEP_CUH
