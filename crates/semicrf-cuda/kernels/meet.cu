// The log semiring's streaming forward and backward with a static transition, in the linear
// domain, from both ends of each sequence at once.
//
// # Two sweeps that meet in the middle
//
// A sequence of length L is swept by two thread blocks at the same time: the forward sweep
// (side 0) runs the model's recurrence from position 0, the reverse sweep (side 1) runs the
// same recurrence on the reversed sequence (scores read backwards, begin and end boundaries
// swapped, the transition transposed, start and end swapped), whose α is the original's β.
// Each sweep is written once, in its own "logical" coordinates.
//
// The first kernel (`meet_a`) takes the forward sweep through steps 1..m and the reverse one
// through steps 1..L-m+1 (m = max(1, (L+1)/2)) and saves both states. Every segmentation has
// one segment covering position m-1: it starts at s <= m-1 and ends at e >= m, and its weight
// splits into the forward sweep's ring entry of start s at time m and the reverse sweep's ring
// entry of start L-e at time L-m. So
//
//     Z = Σ_j exp(Md_j) Σ_{a>=1, c>=0, a+c<=K} x_a(j) · Wl[j, a+c] · y_c(j)
//
// with x_a the forward twin of start m-a and y_c the reverse twin of end m+c (`meet`). The
// same sum per label, divided by Z, is the position marginal at m-1. The forward pass is thus
// two half-length sweeps and a K²·C/2 sum.
//
// For gradients, the first kernel also saves each sweep's α̃ and ũ rows, and the second
// kernel (`meet_b`) takes each sweep through the rest of the sequence, where the other sweep's
// saved rows complete every marginal: at its step t a sweep finds the begin marginals of start
// t-1 (ũ_{t-1}·α^other), the transition marginals there (α̃_{t-1}(i)·Tl[i, j]·α^other(j)),
// the end marginals at t (α̃_t·ũ^other) and the duration marginals of every segment ending at
// t (its window terms times ũ^other). Position marginals run from the meet's: μ_t = μ_{t-1} +
// begin_t - end_t forwards, the same backwards. So forward+backward costs about as much as
// one whole-length sweep plus the extra work of the marginals, not a forward and a backward
// one after the other.
//
// # The linear domain
//
// Everything is a plain f64 relative to one power of two per step, 2^E_t (chosen from the
// previous step's largest α̃: `step`), and parameters are exponentiated once (host, `Par`):
//
//     Tl[i, j] = exp(transition[i, j] - Mt_j)    Wl[j, d] = exp(duration[d-1, j] - Md_j)
//     α̃_t(j) = α_t(j)·2^-E_t                     ũ_t(j) = u_t(j)·exp(-Mt_j)·2^-E_t
//     twin_s(j) = ũ_s(j)·exp(bb[s, j] + Mt_j)     (the weight of an open segment at its start)
//
// Ring entries do not move: the entry of start s is twin_s / G_s(j), where G_t(j) is the
// product of exp(scores[t', j])·2^-e over the steps since the label was last rebased, so that
// the twin of start s at time t (scores s..t-1 added) is entry·G_t and
//
//     α̃_t(j) = exp(eb[t-1, j] + Md_j) · (G_t(j)·Σ_{d>=2} entry_{t-d}(j)·Wl[j, d] + twin_{t-1}(j)·f·Wl[j, 1]).
//
// When G leaves [2^-128, 2^128] the label's entries are multiplied by it and G is reset
// (rebase). A -inf score closes the label's window (`floor`): no entry before it is read again.
//
// # When a sequence is given up
//
// `flag[b]` says why a sequence is left to the log-domain kernels:
// 1 a finite score or boundary beyond ±50 nats, 2 an overflow, 4 values lost to underflow
// that could matter. An entry below 2^-500 is replaced by 0 and counted as lost: λ_j bounds
// every lost entry of label j in the window (`last` is the newest one's start). A step whose
// lost values could exceed 2^-60 of its largest α̃, or 2^-60 of a marginal in absolute terms,
// or a meet whose could exceed 2^-60 of Z, gives the sequence up. A value 0 with no bound is
// -inf: nothing is lost by underflow without raising a bound.
//
// # Threads
//
// A block has `tw`-lane teams, one label each (blockDim / tw >= C). Lane l of team j takes
// durations l+1, l+1+tw, ... of the window and previous labels l, l+wb, ... of the transition
// step, and the team sums them with a butterfly of shuffles, every quantity in one pass. The
// state of label j (G, λ, the window's start) is kept, identically, by every lane of its
// team; only the team touches the label's ring entries and accumulators. Teams share α̃ and
// its bounds through shared memory, double-buffered by the step's parity: one barrier a step.

#ifndef MEET_SMEM
#define MEET_SMEM(name) extern __shared__ double name[]
#endif

#define MT_RANGE 50.0
#define MT_RB 128
#define MT_STEP 256

#define MT_FWD 0   // forward only: no rows saved
#define MT_SAVE 1  // first halves of a backward: rows saved
#define MT_MARG 2  // second halves: marginals

__device__ __forceinline__ double mt_etiny() { return 0x1p-500; }
__device__ __forceinline__ double mt_ehuge() { return 0x1p+500; }
__device__ __forceinline__ double mt_huge() { return 0x1p+900; }
__device__ __forceinline__ double mt_err() { return 0x1p-60; }

// 2^e for -1022 <= e <= 1023.
__device__ __forceinline__ double mt_pow2(int e) {
    return __longlong_as_double((long long)(1023 + e) << 52);
}

// x · 2^n for any n (0 below the subnormals, inf above the range).
__device__ __forceinline__ double mt_scale(double x, i64 n) {
    return ldexp(x, (int)(n < -4000 ? -4000 : n > 4000 ? 4000 : n));
}

// exp(x + add), 0 for x = -inf; flags a finite x beyond the range.
__device__ __forceinline__ double mt_exp(double x, double add, int* flg) {
    if (x == neg_inf()) return 0.0;
    if (fabs(x) > MT_RANGE) atomicOr(flg, 1);
    return exp(x + add);
}

struct MArgs {
    const void* sc;     // (B, T, C) scores: f32 when `f32in`, else f64
    const void* bb;     // (B, T, C) begin boundary, or null
    const void* eb;     // (B, T, C) end boundary, or null
    const double* par;  // prepared parameters (`Par`)
    const i64* len;     // (B)
    const int* seq;     // (grid / 2) the sequence of each pair of blocks, or null
    double* st;         // (B, 2, S) the sweeps' states between the two kernels (`State`)
    double* alpha;      // (B, 2, H, C) saved α̃ rows (backward)
    double* u;          // (B, 2, H, C) saved ũ rows
    i64* ex;            // (B, 2, H) their exponents E
    double* erm;        // (B, 2, H) bounds on the α̃ rows' values lost to underflow
    double* ring;       // (B, 2, K, C) rings, where they are not in shared memory
    double* acc;        // (B, 2, K·C + C·C) accumulators, where they are not in shared memory
    double* out;        // (B, 2): log Z, 0
    int* flag;          // (B) why a sequence was given up (0: it was not)
    const double* up;   // (B) upstream gradients
    double* gsc;        // (B, T, C) position marginals × g
    double* gbb;        // (B, T, C) begin marginals (× g after the tail)
    double* geb;        // (B, T, C) end marginals × g, or null
    double* bmarg;      // (B, T) boundary marginals
    double* pdur;       // (B, 2, K, C) duration marginals per sweep [(d-1)·C + j]
    double* ptr;        // (B, 2, C, C) transition marginals per sweep [i·C + j]
    double* pst;        // (B, C) start marginals
    double* pen;        // (B, C) end marginals
    i64 T, K, C, H;
    int tw;         // lanes per team
    int ch;         // steps staged at a time
    int f32in;      // whether sc, bb and eb hold f32
};

// The prepared parameters: Wl (C, K) label-major; per side (0 forward, 1 reverse) Tl (C, C)
// [i·C + j] in the side's own orientation, Mt, exp(Mt) and ũ_0 = exp(start - Mt) (C each);
// then Md and exp(Md) (C each).
struct Par {
    const double *wl, *tl, *mt, *emt, *u0, *etmo, *md, *emd;
    __device__ Par(const MArgs& a, int side) {
        const i64 C = a.C, side_len = C * C + 3 * C;
        wl = a.par;
        const double* s0 = a.par + C * a.K;
        const double* s = s0 + side * side_len;
        tl = s;
        mt = s + C * C;
        emt = mt + C;
        u0 = emt + C;
        etmo = s0 + (1 - side) * side_len + C * C + C;  // the other side's exp(Mt)
        md = s0 + 2 * side_len;
        emd = md + C;
    }
};

// A sweep's state saved between the kernels: the ring (K·C, label-major), then per label G,
// G before the last step's update, 1/G, λ, the newest lost entry's start, the window's start,
// α̃ and its bound of the last step; then E, E before the last step and the steps done.
__device__ __forceinline__ i64 state_len(i64 K, i64 C) { return K * C + 8 * C + 4; }

// An input element, stored as f32 or f64.
__device__ __forceinline__ double mt_in(const MArgs& a, const void* p, i64 i) {
    return a.f32in ? (double)((const float*)p)[i] : ((const double*)p)[i];
}

// The lanes of the calling thread's team.
__device__ __forceinline__ unsigned team_mask(int tw) {
    if (tw >= 32) return 0xffffffffu;
    const int base = (threadIdx.x & 31) / tw * tw;
    return ((1u << tw) - 1u) << base;
}

// One step's quantities, reduced across a team in one butterfly.
struct MStep {
    double v;   // Σ α̃_{t-1}(i)·Tl[i, j]
    double ev;  // Σ er_{t-1}(i)·Tl[i, j]
    double m;   // max α̃_{t-1}(i)
    double em;  // max er_{t-1}(i)
    double s;   // Σ_{d>=2} entry·Wl
};

// The bounds (ev, em) are reduced only when a lane of the warp has one (the vote is the
// whole warp's, so every lane takes the same branch); they are 0 everywhere else.
__device__ __forceinline__ void mstep_reduce(MStep& x, int tw) {
    for (int off = tw >> 1; off > 0; off >>= 1) {
        const double v = __shfl_xor_sync(0xffffffffu, x.v, off, tw);
        const double m = __shfl_xor_sync(0xffffffffu, x.m, off, tw);
        const double s = __shfl_xor_sync(0xffffffffu, x.s, off, tw);
        x.v += v;
        x.m = x.m > m ? x.m : m;
        x.s += s;
    }
    if (__any_sync(0xffffffffu, x.ev > 0.0 || x.em > 0.0)) {
        for (int off = tw >> 1; off > 0; off >>= 1) {
            const double ev = __shfl_xor_sync(0xffffffffu, x.ev, off, tw);
            const double em = __shfl_xor_sync(0xffffffffu, x.em, off, tw);
            x.ev += ev;
            x.em = x.em > em ? x.em : em;
        }
    }
}

// Reductions across the calling team only (`mask`: its lanes), for team-uniform branches.
__device__ __forceinline__ double team_max(double x, int tw, unsigned mask) {
    for (int off = tw >> 1; off > 0; off >>= 1) {
        const double o = __shfl_xor_sync(mask, x, off, tw);
        x = x > o ? x : o;
    }
    return x;
}

__device__ __forceinline__ double team_add(double x, int tw, unsigned mask) {
    for (int off = tw >> 1; off > 0; off >>= 1) x += __shfl_xor_sync(mask, x, off, tw);
    return x;
}

__device__ __forceinline__ int team_maxi(int x, int tw, unsigned mask) {
    for (int off = tw >> 1; off > 0; off >>= 1) {
        const int o = __shfl_xor_sync(mask, x, off, tw);
        x = x > o ? x : o;
    }
    return x;
}

// The block's barrier: a warp's when the block is one warp.
__device__ __forceinline__ void mt_sync() {
    if (blockDim.x == 32) __syncwarp();
    else __syncthreads();
}

// A sweep: one side of one sequence, in its own logical coordinates.
struct Sweep {
    const MArgs& a;
    Par p;
    int b, side, L, K, C, m;
    int tw, l, j, wb;
    bool act;
    unsigned tmask;
    // the label's state (every lane of the team keeps the same copy)
    double G, Gold, Gi, lam, w1, u0, emt, etmo;
    int last, floor;
    int tm;  // the step's t mod K
    i64 E, Eold;
    // shared memory
    double *A, *ER, *ring, *accd, *acct, *sF, *sFi, *sB, *sX;
    double *oA, *oU, *oEa, *oEu, *oRa, *oRu;
    int* flg;
    double* zl;  // per-label meet sums (2C)

    __device__ __forceinline__ Sweep(const MArgs& args, int bb_, int side_, double* smem,
                                     bool marg)
        : a(args), p(args, side_) {
        b = bb_;
        side = side_;
        L = (int)a.len[b];
        K = (int)a.K;
        C = (int)a.C;
        m = (L + 1) / 2 > 1 ? (L + 1) / 2 : 1;
        tw = a.tw;
        l = threadIdx.x % tw;
        j = threadIdx.x / tw;
        act = j < C;
        wb = 1;
        while (wb < C && wb < tw) wb <<= 1;
        tmask = team_mask(tw);
        const int ch = a.ch;
        double* q = smem;
        A = q;
        q += 2 * C;
        ER = q;
        q += 2 * C;
        zl = q;
        q += 2 * C;
        flg = (int*)q;
        q += 2;
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
        }
        // The ring and accumulators follow, in shared memory or in global buffers: the
        // kernels choose (`mt_place`), as template parameters, so that the compiler
        // addresses shared memory directly.
        ring = q;
        accd = nullptr;
        acct = nullptr;
        w1 = act ? __ldg(&p.wl[(i64)j * K]) : 0.0;
        u0 = act ? __ldg(&p.u0[j]) : 0.0;
        emt = act ? __ldg(&p.emt[j]) : 0.0;
        etmo = act ? __ldg(&p.etmo[j]) : 0.0;
        tm = 0;
    }

    // The logical position p's element of an input, or of its reverse.
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

    __device__ __forceinline__ int slot(int s) const {
        int r = s % K;
        return r < 0 ? r + K : r;
    }

    // Multiplies the label's live entries by G and resets G (team-uniform branch).
    __device__ void rebase(int t) {
        __syncwarp(tmask);
        const int lo = (t - K > floor ? t - K : floor);
        int newest = -1;
        for (int s = t - 2 - l; s >= lo; s -= tw) {
            double* e = &ring[(i64)j * K + slot(s)];
            double x = *e * G;
            if (x > 0.0 && x < mt_etiny()) {
                x = 0.0;
                if (s > newest) newest = s;
            } else if (x > mt_ehuge()) {
                atomicOr(flg, 2);
            }
            *e = x;
        }
        newest = team_maxi(newest, tw, tmask);
        lam *= G;
        if (newest >= 0) {
            lam = lam > mt_etiny() ? lam : mt_etiny();
            last = last > newest ? last : newest;
        }
        G = 1.0;
        Gi = 1.0;
        __syncwarp(tmask);
    }
};

// The marginal factors of one step (second halves).
struct MQ {
    double q0;   // duration and end marginals per unit of (G·Σ entry·Wl + twin·Wl1)
    double cb;   // begin and transition marginals per unit of ũ_{t-1}(j)
    double q0e;  // q0 with the other side's bound in place of its value
    double cbe;  // cb likewise
    int lim;     // durations above it are counted by the other side (reverse sweep only)
};

// Where the ring and the accumulators are: after the staged rows in shared memory (RS, AS),
// or in this sweep's part of the global buffers.
template <bool RS, bool AS>
__device__ __forceinline__ void mt_place(Sweep& w, bool marg) {
    const i64 pair = (i64)w.b * 2 + w.side;
    const i64 kc = (i64)w.K * w.C;
    double* q = w.ring;  // the first word after the staged rows
    if (RS) {
        w.ring = q;
        q += kc;
    } else {
        w.ring = w.a.ring + pair * kc;
    }
    if (marg) {
        w.accd = AS ? q : w.a.acc + pair * (kc + (i64)w.C * w.C);
        w.acct = w.accd + kc;
    }
}

// Σ entry·Wl over the lane's durations d = d0, d0 + tw, ... <= nd of label j's ring `rj`
// (entries of starts t - d, t mod K = tm), four at a time with separate sums; with MARG,
// adds the term times gq to the accumulator aj[d - 1] of every d <= lim. The ring wraps
// once: starts t - d at slots tm - d for d <= tm, tm - d + K beyond.
template <bool MARG>
__device__ __forceinline__ double mt_window(const double* rj, const double* __restrict__ wl,
                                            double* aj, int d0, int nd, int tw, int tm, int K,
                                            double gq, int lim) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int d = d0;
    for (int seg = 0; seg < 2; ++seg) {
        const int hi = seg == 0 ? (nd < tm ? nd : tm) : nd;
        const double* base = rj + tm + (seg == 0 ? 0 : K);
        for (; d + 3 * tw <= hi; d += 4 * tw) {
            const double r0 = base[-d], r1 = base[-(d + tw)];
            const double r2 = base[-(d + 2 * tw)], r3 = base[-(d + 3 * tw)];
            const double x0 = r0 * __ldg(&wl[d - 1]), x1 = r1 * __ldg(&wl[d - 1 + tw]);
            const double x2 = r2 * __ldg(&wl[d - 1 + 2 * tw]);
            const double x3 = r3 * __ldg(&wl[d - 1 + 3 * tw]);
            s0 += x0;
            s1 += x1;
            s2 += x2;
            s3 += x3;
            if (MARG) {
                aj[d - 1] += x0 * (d <= lim ? gq : 0.0);
                aj[d - 1 + tw] += x1 * (d + tw <= lim ? gq : 0.0);
                aj[d - 1 + 2 * tw] += x2 * (d + 2 * tw <= lim ? gq : 0.0);
                aj[d - 1 + 3 * tw] += x3 * (d + 3 * tw <= lim ? gq : 0.0);
            }
        }
        for (; d <= hi; d += tw) {
            const double x = base[-d] * __ldg(&wl[d - 1]);
            s0 += x;
            if (MARG) aj[d - 1] += x * (d <= lim ? gq : 0.0);
        }
    }
    return (s0 + s1) + (s2 + s3);
}

// One step of a sweep (`MODE`: MT_FWD, MT_SAVE, MT_MARG); `r` is the step's staged row.
// Ends with the block's barrier.
template <int MODE>
__device__ __forceinline__ void mt_step(Sweep& w, int t, int r, i64 EZ, double kz, double* mu,
                                        double* eprev) {
    const MArgs& a = w.a;
    const int K = w.K, C = w.C, j = w.j, l = w.l, tw = w.tw;
    const int nd = t < K ? t : K;
    w.tm = w.tm + 1 == K ? 0 : w.tm + 1;
    const double* Ap = w.A + ((t - 1) & 1) * C;
    const double* ERp = w.ER + ((t - 1) & 1) * C;
    double f = 1.0, fi = 1.0, bbf = 1.0, xf = 1.0;
    if (w.act) {
        f = w.sF[r * C + j];
        fi = w.sFi[r * C + j];
        bbf = w.sB[r * C + j];
        xf = w.sX[r * C + j];
        if (!(w.G >= mt_pow2(-MT_RB) && w.G <= mt_pow2(MT_RB))) w.rebase(t);
    }
    const int ndj = nd < t - w.floor ? nd : t - w.floor;
    // The marginal factors: everything but the reductions is known at the step's start.
    MQ mq = {0.0, 0.0, 0.0, 0.0, 0};
    if (MODE == MT_MARG && w.act) {
        const i64 eu = (i64)__double_as_longlong(w.oEu[r]);
        const i64 ea = (i64)__double_as_longlong(w.oEa[r]);
        const double base = mt_scale(kz, w.E + eu - EZ) * f * xf * w.etmo;
        mq.q0 = base * w.oU[r * C + j];
        mq.q0e = base * w.oRu[r];
        const double cbase = mt_scale(kz, w.E + ea - EZ) * w.emt;
        mq.cb = cbase * w.oA[r * C + j];
        mq.cbe = cbase * w.oRa[r];
        mq.lim = w.side ? t - (w.L - w.m) : K;
    }
    MStep st = {0.0, 0.0, 0.0, 0.0, 0.0};
    if (w.act) {
        if (t >= 2 && l < w.wb) {
            const double* tl = w.p.tl + j;
            for (int i = l; i < C; i += w.wb) {
                const double x = Ap[i], e = ERp[i], tv = __ldg(&tl[(i64)i * C]);
                const double term = x * tv;
                st.v += term;
                st.ev += e * tv;
                st.m = st.m > x ? st.m : x;
                st.em = st.em > e ? st.em : e;
                if (MODE == MT_MARG) w.acct[(i64)i * C + j] += term * mq.cb;
            }
        }
        const int d0 = l == 0 ? 1 + tw : l + 1;
        st.s = mt_window<MODE == MT_MARG>(w.ring + (i64)j * K, w.p.wl + (i64)j * K,
                                          MODE == MT_MARG ? w.accd + (i64)j * K : nullptr, d0,
                                          ndj, tw, w.tm, K, w.G * mq.q0, mq.lim);
    }
    mstep_reduce(st, tw);
    // The label's scalar part, on every lane of the team.
    if (t == 1) {
        st.v = w.u0;
        st.ev = 0.0;
        st.m = 0.0;
        st.em = 0.0;
    } else if (st.em > mt_err() * st.m) {
        if (l == 0 && w.act) atomicOr(w.flg, 4);
    }
    int e = 0;
    if (t >= 2 && st.m > 0.0) {
        e = ilogb(st.m);
        e = e < -MT_STEP ? -MT_STEP : e > MT_STEP ? MT_STEP : e;
    }
    w.Eold = w.E;
    w.E += e;
    w.Gold = w.G;
    if (!w.act) {
        mt_sync();
        return;
    }
    const double sc = mt_pow2(-e);
    const double twin = st.v * bbf, tb = st.ev * bbf;
    double entry = 0.0, term1 = 0.0, tot = 0.0;
    if (f == 0.0) {
        // A -inf score at t-1: no segment of j covers it, the window closes.
        w.floor = t;
        w.G = 1.0;
        w.Gi = 1.0;
        w.lam = 0.0;
        w.last = -1;
    } else {
        const double gi = w.Gi;
        w.G = w.G * f * sc;
        w.Gi = w.Gi * fi * mt_pow2(e);
        entry = twin * gi;
        const double eb = tb * gi;
        if (entry < mt_etiny()) {
            if (entry > 0.0 || eb > 0.0) {
                w.lam = w.lam > eb ? w.lam : eb;
                w.lam = w.lam > mt_etiny() ? w.lam : mt_etiny();
                w.last = t - 1;
            }
            entry = 0.0;
        } else if (entry > mt_ehuge()) {
            if (l == 0) atomicOr(w.flg, 2);
        }
        term1 = twin * f * sc * w.w1;
        tot = w.G * st.s + term1;
    }
    if (w.last < t - K) w.lam = 0.0;
    const int ndn = nd < t - w.floor ? nd : t - w.floor;
    const double an = xf * tot;
    const double ern = (w.lam > 0.0 && w.last >= t - ndn) ? w.lam * w.G * (double)ndn * xf : 0.0;
    if (!(an <= mt_huge()) && l == 0) atomicOr(w.flg, 2);
    if (MODE == MT_MARG) {
        // Begin marginal of t-1, end marginal of t, d = 1, the running position marginal.
        const double bm = st.v * mq.cb;
        const double em = mq.q0 * (w.Gold * st.s + twin * w.w1);
        const double lost = w.lam > 0.0 ? w.lam * w.Gold * (double)ndj * mq.q0 : 0.0;
        const double err = st.ev * mq.cb + st.v * mq.cbe + lost +
                           (w.Gold * st.s + twin * w.w1) * mq.q0e;
        if (l == 0) {
            if (!(err <= mt_err())) atomicOr(w.flg, 4);
            w.accd[(i64)j * K] += twin * w.w1 * mq.q0;
            const double nmu = *mu + bm - *eprev;
            *mu = nmu;
            *eprev = em;
            const double g = a.up[w.b];
            // Original coordinates: the forward sweep's begin/end are the reverse's end/begin.
            const int ps = w.side ? w.L - t : t - 1;  // position of this μ and of bm/em's row
            const i64 o = ((i64)w.b * a.T + ps) * C + j;
            a.gsc[o] = g * nmu;
            if (w.side == 0) {
                a.gbb[o] = bm;  // begin at t-1 (scaled by the tail)
                if (a.geb) a.geb[o] = g * em;  // end at t: end_boundary[t-1]
                if (t == w.L) a.pen[(i64)w.b * C + j] = em;
            } else {
                a.gbb[o] = em;  // begin at L-t
                if (a.geb) a.geb[o] = g * bm;  // end at L-t+1: end_boundary[L-t]
                if (t == w.L) a.pst[(i64)w.b * C + j] = em;
            }
        }
    }
    if (l == 0) {
        const int cur = t & 1;
        w.A[cur * C + j] = an;
        w.ER[cur * C + j] = ern;
        w.ring[(i64)j * K + (w.tm == 0 ? K - 1 : w.tm - 1)] = entry;
        if (MODE == MT_SAVE) {
            const i64 row = ((i64)w.b * 2 + w.side) * a.H;
            a.alpha[(row + t) * C + j] = an;
            a.u[(row + t - 1) * C + j] = st.v;
            if (j == 0) {
                a.ex[row + t] = w.E;
                if (t >= 2) a.erm[row + t - 1] = st.em;
            }
        }
    }
    mt_sync();
}

// Loads a sweep's state saved by the first kernel (the ring into `w.ring`).
__device__ void mt_load(Sweep& w, const double* s) {
    const int K = w.K, C = w.C;
    for (i64 x = threadIdx.x; x < (i64)K * C; x += blockDim.x) w.ring[x] = s[x];
    const double* q = s + (i64)K * C;
    if (w.act) {
        w.G = q[w.j];
        w.Gold = q[C + w.j];
        w.Gi = q[2 * C + w.j];
        w.lam = q[3 * C + w.j];
        w.last = (int)q[4 * C + w.j];
        w.floor = (int)q[5 * C + w.j];
    }
    const double* z = q + 8 * C;
    w.E = (i64)__double_as_longlong(z[0]);
    w.Eold = (i64)__double_as_longlong(z[1]);
    w.tm = (int)z[2] % K;
}

// Saves a sweep's state after step t (the ring from `w.ring`).
__device__ void mt_save(Sweep& w, double* s, int t) {
    const int K = w.K, C = w.C;
    for (i64 x = threadIdx.x; x < (i64)K * C; x += blockDim.x) s[x] = w.ring[x];
    double* q = s + (i64)K * C;
    if (w.act && w.l == 0) {
        q[w.j] = w.G;
        q[C + w.j] = w.Gold;
        q[2 * C + w.j] = w.Gi;
        q[3 * C + w.j] = w.lam;
        q[4 * C + w.j] = (double)w.last;
        q[5 * C + w.j] = (double)w.floor;
        q[6 * C + w.j] = w.A[(t & 1) * C + w.j];
        q[7 * C + w.j] = w.ER[(t & 1) * C + w.j];
    }
    if (threadIdx.x == 0) {
        double* z = q + 8 * C;
        z[0] = __longlong_as_double(w.E);
        z[1] = __longlong_as_double(w.Eold);
        z[2] = (double)t;
    }
}

// The block's sequence and side: blocks 2q and 2q+1 are the forward and reverse sweeps of
// sequence seq[q].
__device__ __forceinline__ int mt_seq(const MArgs& a, int q) { return a.seq ? a.seq[q] : q; }

// First halves: the forward sweep through steps 1..m, the reverse one through 1..L-m+1.
template <int MODE, bool RS>
__device__ void meet_a(const MArgs& a) {
    const int b = mt_seq(a, blockIdx.x >> 1), side = blockIdx.x & 1;
    MEET_SMEM(smem);
    Sweep w(a, b, side, smem, false);
    mt_place<RS, false>(w, false);
    const int C = w.C, K = w.K;
    if (threadIdx.x == 0) *w.flg = 0;
    for (i64 x = threadIdx.x; x < (i64)K * C; x += blockDim.x) w.ring[x] = 0.0;
    for (int x = threadIdx.x; x < 2 * C; x += blockDim.x) {
        w.A[x] = 0.0;
        w.ER[x] = 0.0;
    }
    w.G = 1.0;
    w.Gold = 1.0;
    w.Gi = 1.0;
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
    __syncthreads();
    const int steps = side ? w.L - w.m + 1 : w.m;
    double mu = 0.0, ep = 0.0;
    for (int t0 = 1; t0 <= steps; t0 += a.ch) {
        __syncthreads();
        w.stage(t0, false, nullptr, nullptr, nullptr, nullptr);
        __syncthreads();
        const int n = steps - t0 + 1 < a.ch ? steps - t0 + 1 : a.ch;
        for (int r = 0; r < n; ++r) mt_step<MODE>(w, t0 + r, r, 0, 0.0, &mu, &ep);
    }
    __syncthreads();
    if (MODE == MT_SAVE && threadIdx.x == 0) {
        // The last row's bound (the others were written at the next step).
        double em = 0.0;
        for (int c = 0; c < C; ++c) em = em > w.ER[(steps & 1) * C + c] ? em : w.ER[(steps & 1) * C + c];
        a.erm[row + steps] = em;
    }
    mt_save(w, a.st + ((i64)b * 2 + side) * state_len(K, C), steps);
    __syncthreads();
    if (threadIdx.x == 0) atomicOr(&a.flag[b], *w.flg);
}

// Σ_{c=0..nc} wl[c]·ring[(r0 - c) mod K] (0 <= r0 < K, nc < K): two contiguous runs, four
// partial sums each.
__device__ __forceinline__ double mt_dot(const double* __restrict__ wl, const double* ring,
                                         int nc, int r0, int K) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int c = 0;
    for (int seg = 0; seg < 2; ++seg) {
        const int hi = seg == 0 ? (nc < r0 ? nc : r0) : nc;
        const double* base = ring + r0 + (seg == 0 ? 0 : K);
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

// What the meet finds for one sequence (computed identically by every block that needs it).
struct Met {
    double z;   // Z relative to 2^EZ
    i64 EZ;
    bool lost;  // what underflow lost could matter
};

// The meet: Z and, in `w.zl`, each label's share Zd_j (relative to 2^EZ), from the two saved
// states. The forward ring at time m and the reverse one at time L-m (G before its last
// update). Every thread returns the same result.
__device__ Met mt_meet(Sweep& w, const double* sf, const double* sr) {
    const int K = w.K, C = w.C, L = w.L, m = w.m, tw = w.tw, l = w.l, j = w.j;
    const double* qf = sf + (i64)K * C;
    const double* qr = sr + (i64)K * C;
    double* zz = w.zl;        // z_j (scaled by 2^-(kx+ky))
    double* zk = w.zl + C;    // kx + ky (as a double), or a bound
    if (w.act) {
        const double gf = qf[j], gr = qr[C + j];
        const int ff = (int)qf[5 * C + j], fr = (int)qr[5 * C + j];
        const int na = (K < m - ff ? K : m - ff);             // starts m-a >= the window's start
        const int ncr = (K - 1 < L - m - fr ? K - 1 : L - m - fr);  // ends m+c: c <= ncr
        double mx = 0.0, my = 0.0, sxf = 0.0, syr = 0.0;
        for (int a1 = 1 + l; a1 <= na; a1 += tw) {
            const double x = sf[(i64)j * K + w.slot(m - a1)] * gf;
            mx = mx > x ? mx : x;
            sxf += x;
        }
        for (int c = l; c <= ncr; c += tw) {
            const double y = sr[(i64)j * K + w.slot(L - m - c)] * gr;
            my = my > y ? my : y;
            syr += y;
        }
        const unsigned tm = w.tmask;
        mx = team_max(mx, tw, tm);
        my = team_max(my, tw, tm);
        sxf = team_add(sxf, tw, tm);
        syr = team_add(syr, tw, tm);
        const int kx = mx > 0.0 ? ilogb(mx) : 0, ky = my > 0.0 ? ilogb(my) : 0;
        const double sx = gf * mt_pow2(-kx), sy = gr * mt_pow2(-ky);
        // Entries are at least 2^-500 and weights e^-100, so only x·s·sy can underflow, and
        // only where both x and s are positive (`live`).
        double z = 0.0, live = 0.0;
        const double* rr = sr + (i64)j * K;
        const int r0 = w.slot(L - m);  // the slot of end m (c = 0); end m+c at r0 - c (mod K)
        for (int a1 = 1 + l; a1 <= na; a1 += tw) {
            const double x = sf[(i64)j * K + w.slot(m - a1)] * sx;
            const int nc = (K - a1 < ncr ? K - a1 : ncr);
            const double s = mt_dot(w.p.wl + (i64)j * K + a1 - 1, rr, nc, r0, K);
            z += x * s * sy;
            if (x > 0.0 && s > 0.0) live = 1.0;
        }
        z = team_add(z, tw, tm) * __ldg(&w.p.emd[j]);
        live = team_max(live, tw, tm);
        // What underflow lost: lost entries (λ) and products below the normal range.
        const double lf = (qf[4 * C + j] >= m - K && qf[3 * C + j] > 0.0) ? qf[3 * C + j] * gf * K : 0.0;
        const double lr = (qr[4 * C + j] >= L - m - K && qr[3 * C + j] > 0.0) ? qr[3 * C + j] * gr * K : 0.0;
        const double under = live > 0.0 ? (double)K * K * 0x1p-1000 : 0.0;
        const double ebound = __ldg(&w.p.emd[j]) *
                              (mt_pow2(-kx) * mt_pow2(-ky) * (lf * (syr + lr) + sxf * lr) + under);
        if (l == 0) {
            zz[j] = z;
            zk[j] = (double)(kx + ky);
            w.ER[j] = ebound;  // scratch until the sweep resumes
        }
    }
    __syncthreads();
    // Every thread combines the labels in order.
    int top = -100000;
    for (int c = 0; c < C; ++c)
        if (zz[c] > 0.0) {
            const int k = (int)zk[c] + ilogb(zz[c]);
            top = top > k ? top : k;
        }
    if (top == -100000) top = 0;
    double z = 0.0, err = 0.0;
    for (int c = 0; c < C; ++c) {
        z += mt_scale(zz[c], (i64)zk[c] - top);
        err += mt_scale(w.ER[c], (i64)zk[c] - top);
    }
    const i64 Ef = (i64)__double_as_longlong(qf[8 * C]);
    const i64 Er = (i64)__double_as_longlong(qr[8 * C + 1]);
    Met r;
    r.z = z;
    r.EZ = Ef + Er + top;
    r.lost = err > mt_err() * z;
    __syncthreads();
    // Each label's share relative to 2^EZ, for the position marginal at m-1.
    if (w.act && l == 0) zz[j] = mt_scale(zz[j], (i64)zk[j] - top);
    __syncthreads();
    return r;
}

// Forward only: the meet of each sequence (one block per sequence).
__device__ void meet_z(const MArgs& a) {
    const int b = mt_seq(a, blockIdx.x);
    MEET_SMEM(smem);
    Sweep w(a, b, 0, smem, false);
    const i64 sl = state_len(w.K, w.C);
    const double* sf = a.st + ((i64)b * 2) * sl;
    const Met r = mt_meet(w, sf, sf + sl);
    if (threadIdx.x == 0) {
        a.out[2 * b] = r.z > 0.0 ? log(r.z) + (double)r.EZ * 0.69314718055994530942 : neg_inf();
        a.out[2 * b + 1] = 0.0;
        if (r.lost) atomicOr(&a.flag[b], 4);
    }
}

// Second halves: the meet, then each sweep through the rest of the sequence with the other's
// saved rows, the marginals and their position sums, and the tail (boundary marginals).
template <bool RS, bool AS>
__device__ void meet_b(const MArgs& a) {
    const int b = mt_seq(a, blockIdx.x >> 1), side = blockIdx.x & 1;
    MEET_SMEM(smem);
    Sweep w(a, b, side, smem, true);
    mt_place<RS, AS>(w, true);
    const int C = w.C, K = w.K, L = w.L, m = w.m;
    const i64 sl = state_len(K, C);
    const double* sf = a.st + ((i64)b * 2) * sl;
    const double* sr = sf + sl;
    if (threadIdx.x == 0) *w.flg = 0;
    const Met r = mt_meet(w, sf, sr);
    const double kz = 1.0 / r.z;
    const double g = a.up[b];
    if (r.lost && threadIdx.x == 0) *w.flg |= 4;
    const int oside = 1 - side;
    const i64 orow = ((i64)b * 2 + oside) * a.H;
    const double *oal = a.alpha + orow * C, *ou = a.u + orow * C;
    const i64* oex = a.ex + orow;
    const double* oerm = a.erm + orow;
    // The meet's own marginals: E_m, B_{m-1}, the segment (m-1, 1), μ_{m-1}.
    const i64 rowf = ((i64)b * 2) * a.H, rowr = ((i64)b * 2 + 1) * a.H;
    double mu = 0.0, ep = 0.0;
    if (w.act) {
        const int j = w.j;
        const double emv = mt_scale(kz, a.ex[rowf + m] + a.ex[rowr + L - m] - r.EZ) *
                           a.alpha[(rowf + m) * C + j] * a.u[(rowr + L - m) * C + j] *
                           __ldg(&Par(a, 1).emt[j]);
        const double bmv = mt_scale(kz, a.ex[rowf + m - 1] + a.ex[rowr + L - m + 1] - r.EZ) *
                           a.u[(rowf + m - 1) * C + j] * a.alpha[(rowr + L - m + 1) * C + j] *
                           __ldg(&Par(a, 0).emt[j]);
        mu = w.zl[j] * kz;
        ep = side ? bmv : emv;
        if (side == 0 && w.l == 0) {
            const i64 o = ((i64)b * a.T + m - 1) * C + j;
            a.gsc[o] = g * mu;
            a.gbb[o] = bmv;
            if (a.geb) a.geb[o] = g * emv;  // end at m: end_boundary[m-1]
            if (m == 1) a.pst[(i64)b * C + j] = bmv;
            if (m == L) a.pen[(i64)b * C + j] = emv;
        }
    }
    // Accumulators, the own ring and state.
    const i64 kc = (i64)K * C;
    for (i64 x = threadIdx.x; x < kc + (i64)C * C; x += blockDim.x) w.accd[x] = 0.0;
    mt_load(w, side ? sr : sf);
    const double* qs = (side ? sr : sf) + kc;
    for (int x = threadIdx.x; x < C; x += blockDim.x) {
        const int t = side ? L - m + 1 : m;
        w.A[(t & 1) * C + x] = qs[6 * C + x];
        w.ER[(t & 1) * C + x] = qs[7 * C + x];
    }
    __syncthreads();
    if (side == 0 && w.act && w.l == 0) {
        // The segment (m-1, 1, j): the a = 1, c = 0 term of the meet.
        const int j = w.j;
        if ((int)sf[kc + 5 * C + j] <= m - 1 && (int)sr[kc + 5 * C + j] <= L - m) {
            const double x = sf[(i64)j * K + w.slot(m - 1)] * sf[kc + j];
            const double y = sr[(i64)j * K + w.slot(L - m)] * sr[kc + C + j];
            if (x > 0.0 && y > 0.0) {
                const int kx = ilogb(x), ky = ilogb(y);
                const double v = mt_scale(x, -kx) * mt_scale(y, -ky) * w.w1 *
                                 __ldg(&w.p.emd[j]) * kz;
                w.accd[(i64)j * K] =
                    mt_scale(v, (i64)kx + ky + (i64)__double_as_longlong(sf[kc + 8 * C]) +
                                    (i64)__double_as_longlong(sr[kc + 8 * C + 1]) - r.EZ);
            }
        }
    }
    __syncthreads();
    const int first = side ? L - m + 2 : m + 1;
    if (r.z > 0.0) {
        for (int t0 = first; t0 <= L; t0 += a.ch) {
            __syncthreads();
            w.stage(t0, true, oal, ou, oex, oerm);
            __syncthreads();
            const int n = L - t0 + 1 < a.ch ? L - t0 + 1 : a.ch;
            for (int rr = 0; rr < n; ++rr) mt_step<MT_MARG>(w, t0 + rr, rr, r.EZ, kz, &mu, &ep);
        }
    }
    __syncthreads();
    // The accumulators out, the reverse sweep's transitions transposed.
    double* pd = a.pdur + ((i64)b * 2 + side) * kc;
    for (i64 x = threadIdx.x; x < kc; x += blockDim.x) {
        const i64 d1 = x / C, c = x % C;
        pd[x] = r.z > 0.0 ? w.accd[c * K + d1] : 0.0;
    }
    double* pt = a.ptr + ((i64)b * 2 + side) * C * C;
    for (i64 x = threadIdx.x; x < (i64)C * C; x += blockDim.x) {
        const i64 i = x / C, c = x % C;
        pt[x] = r.z > 0.0 ? (side ? w.acct[c * C + i] : w.acct[x]) : 0.0;
    }
    // Boundary marginals and the begin marginals scaled, over the positions this block wrote
    // (the forward block also the meet's m-1).
    const int lo = side ? 0 : m - 1, hi = side ? m - 2 : L - 1;
    for (int t = lo + threadIdx.x; t <= hi; t += blockDim.x) {
        double s = 0.0;
        const i64 o = ((i64)b * a.T + t) * C;
        for (int c = 0; c < C; ++c) {
            const double x = a.gbb[o + c];
            s += x;
            a.gbb[o + c] = g * x;
        }
        a.bmarg[(i64)b * a.T + t] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicOr(&a.flag[b], *w.flg);
        if (side == 0) {
            a.out[2 * b] = r.z > 0.0 ? log(r.z) + (double)r.EZ * 0.69314718055994530942 : neg_inf();
            a.out[2 * b + 1] = 0.0;
        }
    }
}

// One kernel per placement of the ring (suffix _r: shared memory) and of the accumulators
// (_a), so that shared memory is addressed directly.
#define MT_K extern "C" __global__ void __launch_bounds__(512)
MT_K meet_fwd_log(MArgs a) { meet_a<MT_FWD, false>(a); }
MT_K meet_fwd_log_r(MArgs a) { meet_a<MT_FWD, true>(a); }
MT_K meet_save_log(MArgs a) { meet_a<MT_SAVE, false>(a); }
MT_K meet_save_log_r(MArgs a) { meet_a<MT_SAVE, true>(a); }
MT_K meet_z_log(MArgs a) { meet_z(a); }
MT_K meet_bwd_log(MArgs a) { meet_b<false, false>(a); }
MT_K meet_bwd_log_r(MArgs a) { meet_b<true, false>(a); }
MT_K meet_bwd_log_a(MArgs a) { meet_b<false, true>(a); }
MT_K meet_bwd_log_ra(MArgs a) { meet_b<true, true>(a); }
