// The three phases of a block of steps of a sweep (see meet_common.cuh, "Blocks of steps"):
// the window sums, the sequential steps (general, `mt_step`, and unrolled for a label width,
// `mt_fast`) and what the block's steps leave to the outputs.
#ifndef KERNELS_MEET_PHASES_CUH
#define KERNELS_MEET_PHASES_CUH

#include "meet_sweep.cuh"

// Thread j's per-block state (the entries it made in this block are in `ebk`).
struct Blk {
    double hf;  // H's factor: the rebases since phase 1, 0 once a -inf score closed the window
    double w1;  // Wl[j, 1]
};

// A rebase of label j by its own thread in the middle of a block (rare: only where G moves
// more than 2^MT_SELF within a block). The duration marginals of this block's earlier steps
// are added first, in the present units (their G, and so G·Q0 for phase 3, are then 0);
// then the entries that later steps read (starts t-K .. t-2, in the ring and in the
// registers), H's factor and λ change with G.
template <int MODE>
__device__ __forceinline__ void mt_rebase_self(Sweep& w, Blk& bk, int t0, int k, int t, int r0,
                                               i64 EZ, double kz) {
    const int K = w.K, RK = w.RK, C = w.C, j = w.j;
    const double* rj = w.ring + (i64)j * RK;
    if (MODE == MT_MARG) {
        for (int kk = 0; kk < k; ++kk) {
            const double g = w.gq[kk * C + j];
            if (g == 0.0) continue;
            w.gq[kk * C + j] = 0.0;
            double q0e;
            const double gq = g * mt_q0(w, j, kk, r0 + kk, EZ, kz, q0e);
            if (!(gq <= mt_dmax())) continue;
            const int lo = mt_lo(w, t0 + kk, w.lo[kk * C + j]);
            for (int d = 2; d <= K && t0 + kk - d >= lo; ++d)
                w.pd[(d - 1) * C + j] +=
                    rj[mt_mod(t0 + kk - d, RK)] * gq * __ldg(&w.p.wl[j * K + d - 1]);
        }
    }
    int lo = t - K > w.floor ? t - K : w.floor;
    lo = lo > 0 ? lo : 0;
    int newest = -1;
    for (int s = lo; s <= t - 2; ++s) {
        double* e = &w.ring[(i64)j * RK + mt_mod(s, RK)];
        double v = mt_mulp2(*e * w.gm, w.gx);
        if (v > 0.0 && v < mt_etiny()) {
            v = 0.0;
            newest = s;
        } else if (v > mt_ehuge()) {
            atomicOr(w.flg, 2);
        }
        *e = v;
    }
    for (int kk = 0; kk < k; ++kk)
        w.ebk[kk * C + j] = t0 - 1 + kk >= lo ? w.ring[(i64)j * RK + mt_mod(t0 - 1 + kk, RK)] : 0.0;
    bk.hf = mt_mulp2(bk.hf * w.gm, w.gx);
    w.lam = mt_mulp2(w.lam * w.gm, w.gx);
    if (newest >= 0) {
        w.lam = w.lam > mt_etiny() ? w.lam : mt_etiny();
        w.last = w.last > newest ? w.last : newest;
    }
    w.gm = 1.0;
    w.gim = 1.0;
    w.gx = 0;
}

// The window's sum of step k over this block's entries t0-1 .. t-2 (thread j; entry kk has
// d = k - kk + 1 >= 2; wd holds 0 beyond K).
__device__ __forceinline__ double mt_inblock(const Sweep& w, int k) {
    const int C = w.C;
    const double* eb = w.ebk + w.j;
    const double* wd = w.wd + k * C + w.j;  // Wl[j, k+1] (kk = 0)
    double s0 = 0.0, s1 = 0.0;
    int kk = 0;
    for (; kk + 1 < k; kk += 2) {
        s0 += eb[kk * C] * wd[-kk * C];
        s1 += eb[(kk + 1) * C] * wd[-(kk + 1) * C];
    }
    if (kk < k) s0 += eb[kk * C] * wd[-kk * C];
    return s0 + s1;
}

// What phase 2 leaves of step k of label j to phase 3, before G's update (`mt_marg`,
// `mt_rows`): the transition sum v, and in the second halves G, the window's start, G times
// the window's sum s (H and this block's entries) plus twin·Wl[j, 1], and twin·Wl[j, 1].
template <int MODE>
__device__ __forceinline__ void mt_keep(Sweep& w, int k, double v, double s, double tw1) {
    const int i = k * w.C + w.j;
    if (MODE != MT_FWD) w.cbs[i] = v;
    if (MODE == MT_MARG) {
        w.gq[i] = mt_mulp2(w.gm, w.gx);
        w.lo[i] = w.floor;
        w.gsw[i] = mt_mulp2(w.gm * s, w.gx) + tw1;
        w.tw[i] = tw1;
    }
}

// Whether label j can take the common step k (see `mt_step`), whose new entry is `entry`
// and score factor f (no branches). `first`: the first step since a general one (`mt_fast`:
// only a general step changes λ or flags a row's bound).
__device__ __forceinline__ bool mt_easy_ok(const Sweep& w, int k, double f, double entry,
                                           bool first = true) {
    const bool open = (f > 0.0) & (w.gx <= MT_SELF) & (w.gx >= -MT_SELF) &
                      (entry >= mt_etiny()) & (entry <= mt_ehuge());
    return first ? open & (w.lam == 0.0) & (w.anyer[k] == 0) : open;
}

// The common step's new G = gm·2^gx, 1/G = gim·2^-gx and α̃ of label j (see `mt_step`): its
// transition sum's twin, the scale step e and the window's sum s (H and this block's entries)
// are known. Nothing is changed, so that the step can be computed before the warp's vote.
struct Easy {
    double gm, gim, an;
    int gx;
};
__device__ __forceinline__ Easy mt_easy(const Sweep& w, const Blk& bk, int r, int e,
                                        double twin, double s) {
    const int C = w.C, j = w.act ? w.j : 0;
    const double f = w.sF[r * C + j], fi = w.sFi[r * C + j], xf = w.sX[r * C + j];
    // G ← G·f·2^-e, its mantissa kept within 2^±32 (and G within 2^±(MT_SELF+MT_STEP+64)).
    Easy q;
    q.gm = w.gm * f;
    q.gim = w.gim * fi;
    q.gx = w.gx - e;
    const int ke = mt_expo(q.gm);
    const int adj = ke > 32 || ke < -32 ? ke : 0;
    q.gm *= mt_pow2(-adj);
    q.gim *= mt_pow2(adj);
    q.gx += adj;
    const double term1 = twin * f * mt_pow2(-e) * bk.w1;
    q.an = xf * (q.gm * s * mt_pow2(q.gx) + term1);
    return q;
}

// Makes the common step k of label j: G, what phase 3 takes (`mt_keep`), the block's entry,
// α̃ and its bound (0), the ring's new entry and the step's exponent.
template <int MODE>
__device__ __forceinline__ void mt_commit(Sweep& w, const Easy& q, int k, int slot, double v,
                                          double s, double tw1, double entry) {
    const int C = w.C, j = w.j;
    mt_keep<MODE>(w, k, v, s, tw1);
    w.gmo = w.gm;
    w.gxo = w.gx;
    w.gm = q.gm;
    w.gim = q.gim;
    w.gx = q.gx;
    w.ebk[k * C + j] = entry;
    w.A[(k + 1) * w.C4 + j] = q.an;
    w.ER[(k + 1) * w.C4 + j] = 0.0;
    w.ring[j * w.RK + slot] = entry;
    if (MODE != MT_FWD && j == 0) w.es[k + 1] = w.E;
}

// Phase 2, step t = t0 + k of thread j (staged row r, the block's first r0 = r - k; EZ and
// kz: Z's exponent and 1/Z, second halves).
template <int MODE>
__device__ __forceinline__ void mt_step(Sweep& w, Blk& bk, int t0, int k, int r, int slot,
                                        i64 EZ, double kz) {
    const int K = w.K, C = w.C, j = w.j, t = t0 + k;
    const int nd = t < K ? t : K;
    const double* Ap = w.A + k * w.C4;
    double v = 0.0, ev = 0.0, mx = 0.0, em = 0.0;
    if (t == 1) {
        v = w.u0;
    } else {
        // The transition step: every thread reads the whole row (the same maxima everywhere),
        // four labels at a time (the row is padded with zeros to a multiple of four).
        double v0 = 0.0, v1 = 0.0, v2 = 0.0, v3 = 0.0, m0 = 0.0, m1 = 0.0;
        const double* tl = w.tl + (w.act ? j : 0);
        for (int i = 0; i < C; i += 4) {
            const double x0 = Ap[i], x1 = Ap[i + 1], x2 = Ap[i + 2], x3 = Ap[i + 3];
            v0 += x0 * tl[i * C];
            v1 += x1 * tl[(i + 1) * C];
            v2 += x2 * tl[(i + 2) * C];
            v3 += x3 * tl[(i + 3) * C];
            m0 = m0 > x0 ? m0 : x0;
            m1 = m1 > x1 ? m1 : x1;
            m0 = m0 > x2 ? m0 : x2;
            m1 = m1 > x3 ? m1 : x3;
        }
        v = (v0 + v1) + (v2 + v3);
        mx = m0 > m1 ? m0 : m1;
        if (w.anyer[k]) {
            const double* ERp = w.ER + k * w.C4;
            for (int i2 = 0; i2 < C; ++i2) {
                const double e = ERp[i2];
                ev += e * tl[i2 * C];
                em = em > e ? em : e;
            }
            if (em > mt_err() * mx && j == 0) atomicOr(w.flg, 4);
        }
    }
    const int e = t >= 2 ? mt_step_e(mt_hi(mx), Ap, C) : 0;
    w.Eold = w.E;
    w.E += e;
    // The common step, on the whole warp (a vote): the label's window open, nothing of it lost
    // to underflow, no bound in the last row, G within 2^±MT_SELF and the new entry within
    // range. Then the step is arithmetic only; otherwise the general step below.
    {
        const int jj = w.act ? j : 0;
        const double f = w.sF[r * C + jj], bbf = w.sB[r * C + jj];
        const double twin = v * bbf;
        const double entry = twin * w.gim * mt_pow2(-w.gx);
        const bool easy = !w.act | mt_easy_ok(w, k, f, entry);
        if (__all_sync(0xffffffffu, easy)) {
            if (w.act) {
                const double s = bk.hf * w.H[k * C + j] + mt_inblock(w, k);
                const Easy q = mt_easy(w, bk, r, e, twin, s);
                mt_commit<MODE>(w, q, k, slot, v, s, twin * bk.w1, entry);
            }
            mt_bar_n(w.C2);
            return;
        }
    }
    if (w.act) {
        const double f = w.sF[r * C + j], fi = w.sFi[r * C + j];
        const double bbf = w.sB[r * C + j], xf = w.sX[r * C + j];
        if (w.gx > MT_SELF || w.gx < -MT_SELF)
            mt_rebase_self<MODE>(w, bk, t0, k, t, r - k, EZ, kz);
        // The window: H (entries before t0-1) and this block's entries t0-1 .. t-2.
        double s = (bk.hf == 0.0 ? 0.0 : bk.hf * w.H[k * C + j]) + mt_inblock(w, k);
        mt_keep<MODE>(w, k, v, s, v * bbf * bk.w1);
        w.gmo = w.gm;
        w.gxo = w.gx;
        const int ndj = nd < t - w.floor ? nd : t - w.floor;
        const double sc = mt_pow2(-e);
        const double twin = v * bbf, tb = ev * bbf;
        double entry = 0.0, term1 = 0.0, tot = 0.0;
        if (f == 0.0) {
            // A -inf score at t-1: no segment of j covers it, the window closes.
            w.floor = t;
            w.gm = 1.0;
            w.gim = 1.0;
            w.gx = 0;
            w.lam = 0.0;
            w.last = -1;
            bk.hf = 0.0;
            for (int kk = 0; kk < k; ++kk) w.ebk[kk * C + j] = 0.0;
        } else {
            // 1/G before the update is gim·2^-gx: the new entry is twin / G.
            entry = mt_mulp2(twin * w.gim, -w.gx);
            const double eb = mt_mulp2(tb * w.gim, -w.gx);
            w.gm *= f;
            w.gim *= fi;
            w.gx -= e;
            const int ke = mt_expo(w.gm);
            if (ke > 32 || ke < -32) {
                w.gm *= mt_pow2(-ke);
                w.gim *= mt_pow2(ke);
                w.gx += ke;
            }
            if (entry < mt_etiny()) {
                if (entry > 0.0 || eb > 0.0) {
                    w.lam = w.lam > eb ? w.lam : eb;
                    w.lam = w.lam > mt_etiny() ? w.lam : mt_etiny();
                    w.last = t - 1;
                }
                entry = 0.0;
            } else if (entry > mt_ehuge()) {
                atomicOr(w.flg, 2);
            }
            term1 = twin * f * sc * bk.w1;
            tot = w.gm * s * mt_pow2(w.gx) + term1;
        }
        w.ebk[k * C + j] = entry;
        if (w.last < t - K) w.lam = 0.0;
        const int ndn = nd < t - w.floor ? nd : t - w.floor;
        const double an = xf * tot;
        const double ern = (w.lam > 0.0 && w.last >= t - ndn)
                               ? mt_mulp2(w.lam * w.gm * (double)ndn * xf, w.gx)
                               : 0.0;
        if (MODE == MT_MARG) {
            // For `mt_marg`: the bound of the transition sum, and that of the entries lost
            // to underflow in the window (to be multiplied by Q0), where the staged rows of
            // 1/f and of the begin boundary were.
            w.sB[r * C + j] = ev;
            w.sFi[r * C + j] =
                w.lam > 0.0 ? mt_mulp2(w.lam * w.gmo * (double)ndj, w.gxo) : 0.0;
            if ((j & 31) == 0) w.gk[2 * k + (j >> 5)] = 1;
        }
        w.A[(k + 1) * w.C4 + j] = an;
        w.ER[(k + 1) * w.C4 + j] = ern;
        if (ern > 0.0) atomicOr(&w.anyer[k + 1], 1);
        w.ring[j * w.RK + slot] = entry;
        if (MODE != MT_FWD && j == 0) w.es[k + 1] = w.E;
    }
    mt_bar_n(w.C2);
}

// The window's sum of step k over this block's entries (`mt_inblock`, in the same order) from
// registers: er[kk] the entry of start t0-1+kk, wr[d-1] = Wl[j, d].
__device__ __forceinline__ double mt_inreg(const double* er, const double* wr, int k) {
    double s0 = 0.0, s1 = 0.0;
    int kk = 0;
    for (; kk + 1 < k; kk += 2) {
        s0 += er[kk] * wr[k - kk];
        s1 += er[kk + 1] * wr[k - kk - 1];
    }
    if (kk < k) s0 += er[kk] * wr[k - kk];
    return s0 + s1;
}

// Phase 2 for at most CT <= 32 labels (one warp), compiled for that width: the block's steps
// unrolled, with label j's column of Tl, its first P+1 duration weights and the entries it
// made in this block in registers, so that a common step is arithmetic on registers and one
// row of shared memory. Each step is the common step of `mt_step` (`mt_easy`), computed in
// the same order, so results are those of the general loop; the first step that any label
// cannot take that way is left undone and the number of steps done returned, for `mt_step`
// to go on from there.
template <int MODE, int CT>
__device__ __forceinline__ int mt_fast(Sweep& w, Blk& bk, int t0, int n, int r0) {
    constexpr int P = MT_P;
    const int C = w.C, jj = w.act ? w.j : 0;
#ifndef MT_TCR
#define MT_TCR 8
#endif
    constexpr bool TR = CT <= MT_TCR;  // Tl's column in registers, else read from shared memory
    double tc[TR ? CT : 1], wr[P + 1], er[P];
    const double* tcs = w.tl + jj;
    if constexpr (TR) {
#pragma unroll
        for (int i = 0; i < CT; ++i) tc[i] = tcs[i * C];  // rows C .. CT-1 are zeros
    }
#pragma unroll
    for (int d = 0; d <= P; ++d) wr[d] = w.wd[d * C + jj];
    int slot = w.tm >= 1 ? w.tm - 1 : w.RK - 1;  // the slot of start t0 - 1
#pragma unroll
    for (int k = 0; k < P; ++k) {
        if (k >= n) return n;
        const int t = t0 + k, r = r0 + k;
        // The transition step over the padded row (its zeros add exact zeros).
        double v;
        int e = 0;
        if (t == 1) {
            v = w.u0;
        } else {
            const double* Ap = w.A + k * CT;
            double v0 = 0.0, v1 = 0.0, v2 = 0.0, v3 = 0.0, m0 = 0.0, m1 = 0.0;
            int h0 = 0, h1 = 0;
            // The largest exponent from high words (fewer instructions) up to 16 labels; wider,
            // the registers that takes spill (32 labels at 512 threads).
            constexpr bool HI = CT <= 16;
#pragma unroll
            for (int i = 0; i < CT; i += 4) {
                const double x0 = Ap[i], x1 = Ap[i + 1], x2 = Ap[i + 2], x3 = Ap[i + 3];
                v0 += x0 * (TR ? tc[TR ? i : 0] : tcs[i * C]);
                v1 += x1 * (TR ? tc[TR ? i + 1 : 0] : tcs[(i + 1) * C]);
                v2 += x2 * (TR ? tc[TR ? i + 2 : 0] : tcs[(i + 2) * C]);
                v3 += x3 * (TR ? tc[TR ? i + 3 : 0] : tcs[(i + 3) * C]);
                if constexpr (HI) {
                    h0 = mt_imax(h0, mt_imax(mt_hi(x0), mt_hi(x2)));
                    h1 = mt_imax(h1, mt_imax(mt_hi(x1), mt_hi(x3)));
                } else {
                    m0 = m0 > x0 ? m0 : x0;
                    m1 = m1 > x1 ? m1 : x1;
                    m0 = m0 > x2 ? m0 : x2;
                    m1 = m1 > x3 ? m1 : x3;
                }
            }
            v = (v0 + v1) + (v2 + v3);
            if constexpr (HI) {
                e = mt_step_e(mt_imax(h0, h1), Ap, CT);
            } else {
                const double mx = m0 > m1 ? m0 : m1;
                if (mx > 0.0) {
                    e = mt_expo(mx);
                    e = e < -MT_STEP ? -MT_STEP : e > MT_STEP ? MT_STEP : e;
                }
            }
        }
        // The step is computed before the warp's vote and made after it.
        const double f = w.sF[r * C + jj], bbf = w.sB[r * C + jj];
        const double twin = v * bbf;
        const double entry = twin * w.gim * mt_pow2(-w.gx);
        const bool easy = !w.act | mt_easy_ok(w, k, f, entry, k == 0);
        const double s = bk.hf * w.H[k * C + jj] + mt_inreg(er, wr, k);
        const Easy q = mt_easy(w, bk, r, e, twin, s);
        if (!__all_sync(0xffffffffu, easy)) return k;
        w.Eold = w.E;
        w.E += e;
        if (w.act) {
            mt_commit<MODE>(w, q, k, slot, v, s, twin * bk.w1, entry);
            er[k] = entry;
        }
        __syncwarp();
        slot = slot + 1 == w.RK ? 0 : slot + 1;
    }
    return n;
}

// Phase 2 of a block: steps k < n, one after the other (the first ones by `mt_fast` where
// the kernel is compiled for a label width CT).
template <int MODE, int CT>
__device__ __forceinline__ bool mt_phase2(Sweep& w, int t0, int n, int r0, i64 EZ,
                                          double kz) {
    Blk bk;
    bk.hf = 1.0;
    bk.w1 = w.act ? w.wd[w.j] : 0.0;
    if (w.act && w.rfm[w.j] != 0.0) {
        // The rebase of the entries is done: scale λ, note what it lost.
        w.lam = mt_mulp2(w.lam * w.gm, w.gx);
        const int nw = w.newest[w.j];
        if (nw >= 0) {
            w.lam = w.lam > mt_etiny() ? w.lam : mt_etiny();
            w.last = w.last > nw ? w.last : nw;
        }
        w.gm = 1.0;
        w.gim = 1.0;
        w.gx = 0;
        w.rfm[w.j] = 0.0;
        w.newest[w.j] = -1;
    }
    if (MODE != MT_FWD && threadIdx.x == 0) w.es[0] = w.E;
    int k0 = 0;
    if constexpr (CT > 0) k0 = mt_fast<MODE, CT>(w, bk, t0, n, r0);
    int slot = w.tm - 1 + k0;  // the ring slot of start t-1 (k0 <= P < RK)
    slot = slot < 0 ? slot + w.RK : slot >= w.RK ? slot - w.RK : slot;
    for (int k = k0; k < n; ++k) {
        mt_step<MODE>(w, bk, t0, k, r0 + k, slot, EZ, kz);
        slot = slot + 1 == w.RK ? 0 : slot + 1;
    }
    bool rb = false;
    if (w.act) {
        if (w.gx > MT_RB || w.gx < -MT_RB) {
            w.rfm[w.j] = w.gm;
            w.rfx[w.j] = w.gx;
            rb = true;
        }
        w.flo[w.j] = w.floor;
    }
    return rb;
}

// Steps tfirst .. tlast of a sweep, in blocks of MT_P. Before it: A[0] and ER[0] hold the
// row of step tfirst-1, and the label state is in the registers of threads j < C.
template <int MODE, int CT>
__device__ void mt_run(Sweep& w, int tfirst, int tlast, i64 EZ, double kz, const double* oal,
                       const double* ou, const i64* oex, const double* oerm) {
    const int C = w.C, P = MT_P;
    mt_plan(w, tfirst);
    for (int t0 = tfirst, r0 = 0; t0 <= tlast; t0 += P, r0 = r0 + P == w.a.ch ? 0 : r0 + P) {
        const int n = tlast - t0 + 1 < P ? tlast - t0 + 1 : P;
        __syncthreads();
        if (r0 == 0) w.stage(t0, MODE == MT_MARG, oal, ou, oex, oerm);
        if (t0 > tfirst) {
            // The last block's final row becomes row 0.
            for (int x = threadIdx.x; x < C; x += blockDim.x) {
                w.A[x] = w.A[P * w.C4 + x];
                w.ER[x] = w.ER[P * w.C4 + x];
            }
            if (threadIdx.x == 0) w.anyer[0] = w.anyer[P];
        }
        mt_rebase(w, t0);
        __syncthreads();
        for (int x = threadIdx.x; x < P; x += blockDim.x) w.anyer[x + 1] = 0;
        for (int x = threadIdx.x; x < 2 * P; x += blockDim.x) w.gk[x] = 0;
        mt_phase1(w, t0, n);
        __syncthreads();
        bool rb = false;
        if (threadIdx.x < w.C2) rb = mt_phase2<MODE, CT>(w, t0, n, r0, EZ, kz);
        w.rb = __syncthreads_or(rb);
        mt_huge_rows(w, n);
        if (MODE == MT_SAVE) mt_rows(w, t0, n);
        if (MODE == MT_MARG) {
            mt_marg(w, t0, n, r0, EZ, kz);
            __syncthreads();
            mt_phase3(w, t0, n);
            mt_outputs(w, t0, n);
            w.par ^= 1;
        }
        if (n < P) {
            // A short last block: its final row where a full block's would be.
            __syncthreads();
            for (int x = threadIdx.x; x < C; x += blockDim.x) {
                w.A[P * w.C4 + x] = w.A[n * w.C4 + x];
                w.ER[P * w.C4 + x] = w.ER[n * w.C4 + x];
            }
        }
        w.tm = w.tm + P >= w.RK ? w.tm + P - w.RK : w.tm + P;
    }
    __syncthreads();
}

// Loads a sweep's state saved by the first kernel (the ring into `w.ring`).
__device__ void mt_load(Sweep& w, const double* s) {
    const int C = w.C, K = w.K, RK = w.RK;
    const double* q = s + (i64)K * C;
    // Slot r of the running ring holds the window's start tl-K+i with i = (r - (tl-K)) mod RK
    // where i < K; the other slots are read by no later step.
    const int tl = (int)q[10 * C + 2];
    for (i64 x = threadIdx.x; x < (i64)RK * C; x += blockDim.x) {
        const int j = (int)(x / RK), r = (int)(x % RK);
        const int st = tl - K + mt_mod(r - (tl - K), RK);
        w.ring[x] = st < tl && st >= 0 ? s[(i64)j * K + mt_mod(st, K)] : 0.0;
    }
    for (int x = threadIdx.x; x < (MT_P + 1) * w.C4; x += blockDim.x) {
        const int c = x % w.C4;
        w.A[x] = x < C ? q[6 * C + c] : 0.0;
        w.ER[x] = x < C ? q[7 * C + c] : 0.0;
    }
    for (int x = threadIdx.x; x < C; x += blockDim.x) {
        w.rfm[x] = 0.0;
        w.newest[x] = -1;
        w.flo[x] = (int)q[5 * C + x];
    }
    if (threadIdx.x == 0) {
        int any = 0;
        for (int x = 0; x < C; ++x) any |= q[7 * C + x] > 0.0;
        w.anyer[0] = any;
    }
    if (w.act) {
        w.gm = q[w.j];
        w.gmo = q[C + w.j];
        w.gim = q[2 * C + w.j];
        w.lam = q[3 * C + w.j];
        w.last = (int)q[4 * C + w.j];
        w.floor = (int)q[5 * C + w.j];
        w.gx = (int)q[8 * C + w.j];
        w.gxo = (int)q[9 * C + w.j];
        if (w.gx > MT_RB || w.gx < -MT_RB) {
            w.rfm[w.j] = w.gm;
            w.rfx[w.j] = w.gx;
        }
    }
    const double* z = q + 10 * C;
    w.E = (i64)__double_as_longlong(z[0]);
    w.Eold = (i64)__double_as_longlong(z[1]);
}

// Saves a sweep's state after its last step (the ring from `w.ring`, the last row from
// A[P]). Label j's thread writes its registers.
__device__ void mt_save(Sweep& w, double* s, int steps) {
    const int C = w.C, P = MT_P, K = w.K, RK = w.RK;
    const i64 kc = (i64)K * C;
    for (i64 x = threadIdx.x; x < kc; x += blockDim.x) {
        const int j = (int)(x / K), st = steps - K + (int)(x % K);  // the window's starts
        s[(i64)j * K + mt_mod(st, K)] = st >= 0 ? w.ring[(i64)j * RK + mt_mod(st, RK)] : 0.0;
    }
    double* q = s + kc;
    if (w.act) {
        q[w.j] = w.gm;
        q[C + w.j] = w.gmo;
        q[2 * C + w.j] = w.gim;
        q[3 * C + w.j] = w.lam;
        q[4 * C + w.j] = (double)w.last;
        q[5 * C + w.j] = (double)w.floor;
        q[6 * C + w.j] = w.A[P * w.C4 + w.j];
        q[7 * C + w.j] = w.ER[P * w.C4 + w.j];
        q[8 * C + w.j] = (double)w.gx;
        q[9 * C + w.j] = (double)w.gxo;
    }
    if (threadIdx.x == 0) {
        double* z = q + 10 * C;
        z[0] = __longlong_as_double(w.E);
        z[1] = __longlong_as_double(w.Eold);
        z[2] = (double)steps;
    }
}

// The block's sequence and side: blocks 2q and 2q+1 are the forward and reverse sweeps of
// sequence seq[q].
__device__ __forceinline__ int mt_seq(const MArgs& a, int q) { return a.seq ? a.seq[q] : q; }

// First halves: the forward sweep through steps 1..m, the reverse one through 1..L-m+1.
template <int MODE, bool RS, int CT>
__device__ void meet_a(const MArgs& a) {
    const int b = mt_seq(a, blockIdx.x >> 1), side = blockIdx.x & 1;
    MEET_SMEM(smem);
    Sweep w(a, b, side, smem, false, CT);
    mt_place<RS>(w);
    mt_params(w);
    const int C = w.C, K = w.K;
    if (threadIdx.x == 0) {
        *w.flg = 0;
        w.anyer[0] = 0;
    }
    for (i64 x = threadIdx.x; x < (i64)w.RK * C; x += blockDim.x) w.ring[x] = 0.0;
    for (int x = threadIdx.x; x < (MT_P + 1) * w.C4; x += blockDim.x) {
        w.A[x] = 0.0;
        w.ER[x] = 0.0;
    }
    for (int x = threadIdx.x; x < C; x += blockDim.x) {
        w.rfm[x] = 0.0;
        w.newest[x] = -1;
        w.flo[x] = 0;
    }
    w.gm = 1.0;
    w.gmo = 1.0;
    w.gim = 1.0;
    w.gx = 0;
    w.gxo = 0;
    w.lam = 0.0;
    w.last = -1;
    w.floor = 0;
    w.E = 0;
    w.Eold = 0;
    const i64 row = ((i64)b * 2 + side) * a.H;
    if (MODE == MT_SAVE && threadIdx.x == 0) {
        a.ex[row] = 0;
        a.erm[row] = 0.0;
    }
    const int steps = side ? w.L - w.m + 1 : w.m;
    mt_run<MODE, CT>(w, 1, steps, 0, 0.0, nullptr, nullptr, nullptr, nullptr);
    if (MODE == MT_SAVE && threadIdx.x == 0) {
        // The last row's bound (the others were written at the next step).
        double em = 0.0;
        for (int c = 0; c < C; ++c) {
            const double e = w.ER[MT_P * w.C4 + c];
            em = em > e ? em : e;
        }
        a.erm[row + steps] = em;
    }
    mt_save(w, a.st + ((i64)b * 2 + side) * state_len(K, C), steps);
    __syncthreads();
    if (threadIdx.x == 0) atomicOr(&a.flag[b], *w.flg);
}

// Σ_{c=0..nc} wl[c]·ring[(r0 - c) mod n] (0 <= r0 < n, nc < n): two contiguous runs,
// four partial sums each.
__device__ __forceinline__ double mt_dot(const double* __restrict__ wl, const double* ring,
                                         int nc, int r0, int n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int c = 0;
    for (int seg = 0; seg < 2; ++seg) {
        const int hi = seg == 0 ? (nc < r0 ? nc : r0) : nc;
        const double* base = ring + r0 + (seg == 0 ? 0 : n);
        for (; c + 3 <= hi; c += 4) {
            s0 += __ldg(&wl[c]) * base[-c];
            s1 += __ldg(&wl[c + 1]) * base[-(c + 1)];
            s2 += __ldg(&wl[c + 2]) * base[-(c + 2)];
            s3 += __ldg(&wl[c + 3]) * base[-(c + 3)];
        }
        for (; c <= hi; ++c) s0 += __ldg(&wl[c]) * base[-c];
    }
    return (s0 + s1) + (s2 + s3);
}

#endif  // KERNELS_MEET_PHASES_CUH
