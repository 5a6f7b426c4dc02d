// The log semiring's streaming forward and backward in the linear domain (static transition).
//
// The log-domain kernels spend most of a position on exponentials and logarithms: every ring
// entry is exponentiated again at every position it is read. Here every quantity is kept as
// a plain number relative to one power of two per position, 2^E_t, chosen from the previous
// position's largest value, so that a position costs multiplications and sums only:
//
//     twin r̃_s(j) = exp(r_s(j)) · 2^-E_t        (forward ring; backward: w̃_e(j), 2^-F_s)
//     ã_t(j)      = exp(α_t(j)) · 2^-E_t
//     ũ_t(j)      = exp(u_t(j) - Mt_j) · 2^-E_t
//
// The parameters are exponentiated once: Wl[j·K + d-1] = exp(duration[d-1, j] - Md_j) (at most 1),
// Tl[i, j] = exp(transition[i, j] - Mt_j) and Tr[i, j] = exp(transition[i, j] - Mr_i), with
// Md, Mt, Mr the per-label maxima (prepared on the host, `lin`). Scores and boundaries are
// exponentiated as they are staged. Scaling by a power of two is exact.
//
// # When a sequence is given up
//
// The kernels compute exactly what the log-domain kernels compute, up to rounding, or set
// `flag[b]` and leave the sequence to them (the host reruns it there):
//
// - flag 1, range: a finite score or boundary beyond ±LIN_RANGE nats (the host checks the
//   other parameters). Within the range every factor lies in [e^-100, e^100], so no product
//   of a twin (>= LIN_TINY) and a weight underflows.
// - flag 2, overflow: a twin above LIN_HUGE or a non-finite value.
// - flag 4, precision: a twin that falls below LIN_TINY is replaced by the marker LIN_LOST
//   (its true value is below LIN_TINY at that time); λ_j bounds every lost twin of label j,
//   scaled as the twins are, and is cleared when no lost twin is left in the window. A
//   position whose values lost to underflow could exceed 2^-60 of its largest value (or, in
//   the backward, 2^-60 in absolute terms of a marginal) gives the sequence up.
//
// `-inf` is represented by -0.0 (never produced by underflow, which the twins turn into
// LIN_LOST), so a window whose every term is -inf yields exactly -inf, as in the log domain.

#define LIN_RANGE 50.0
#define LIN_LOST (-1.0)

__device__ __forceinline__ double lin_tiny() { return 0x1p-700; }
__device__ __forceinline__ double lin_huge() { return 0x1p+900; }
__device__ __forceinline__ double lin_err() { return 0x1p-60; }

__device__ __forceinline__ bool is_nz(double x) {
    return __double_as_longlong(x) == (long long)0x8000000000000000ULL;
}

// 2^e for -1022 <= e <= 1023.
__device__ __forceinline__ double pow2(int e) {
    return __longlong_as_double((long long)(1023 + e) << 52);
}

// The exponent that brings m near 1 (0 for m = 0 or a non-finite m).
__device__ __forceinline__ int scale_of(double m) {
    if (!(m > 0.0) || !(m <= 1.7976931348623157e308)) return 0;
    int e = ilogb(m);
    return e < -900 ? -900 : e > 900 ? 900 : e;
}

// exp(x + add), -0.0 for x = -inf; flags a finite x beyond the range.
__device__ __forceinline__ double lin_exp(double x, double add, int* flg) {
    if (x == neg_inf()) return -0.0;
    if (fabs(x) > LIN_RANGE) atomicOr(flg, 1);
    return exp(x + add);
}

// exp(x + y), -0.0 when either is -inf (both within the range: the caller checked).
__device__ __forceinline__ double lin_exp2(double x, double y) {
    return (x == neg_inf() || y == neg_inf()) ? -0.0 : exp(x + y);
}

// `stage` in the linear domain: exp(src + add[j]) (src 0 where absent or outside [0, L)).
__device__ void stage_lin(double* dst, const double* src, const double* add, const Args& a,
                          int b, i64 rows, i64 p0, i64 off, i64 n, i64 L, int* flg) {
    const int C = (int)a.C;
    for (int x = threadIdx.x; x < n * C; x += blockDim.x) {
        const i64 p = p0 + off + x / C;
        const int j = x % C;
        const double v = (src && p >= 0 && p < L) ? src[((i64)b * rows + p) * C + j] : 0.0;
        dst[x] = lin_exp(v, add ? add[j] : 0.0, flg);
    }
}

__device__ __forceinline__ double team_max(double v, int width) {
    for (int off = width >> 1; off > 0; off >>= 1)
        v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off, width));
    return v;
}

// Whether any lane of this lane's team has `p`.
__device__ __forceinline__ bool team_any(bool p, int width) {
    const unsigned bits = __ballot_sync(0xffffffffu, p);
    if (width >= 32) return bits != 0;
    const int base = (threadIdx.x & 31) & ~(width - 1);
    return ((bits >> base) & ((1u << width) - 1)) != 0;
}

// The duration accumulator of (d, j): label-major in shared memory (pdk: no bank conflicts
// between the lanes of a team), in the output's layout [(d-1)·C + j] in global memory.
__device__ __forceinline__ int pd_at(int d, int j, int C, int K, bool pdk) {
    return pdk ? j * K + d - 1 : (d - 1) * C + j;
}

// What one team's pass over a label's ring window found.
struct Window {
    double sum;   // Σ max(twin, 0) · Wl
    bool fin;     // some term is finite (not -inf) in the log domain
    bool lost;    // some twin of the window is LIN_LOST
    bool newly;   // some twin became LIN_LOST in this pass
    bool over;    // some twin exceeds LIN_HUGE
};

// Multiplies the window's twins of label j by f (f = 0: the window ends, every twin is -inf)
// and sums them against the duration weights. Lane l visits durations l + 1, l + 1 + team,
// ... <= nd, at slots slot0, slot0 ∓ team, ... (FWD: going back from the newest start;
// otherwise forward from the nearest end). With `pd`, adds p · twin · Wl to its entry of
// (d, j) (`pd_at`). The ring and the weights are label-major (rx[j·K + slot], Wl[j·K + d-1]):
// the lanes of a team read consecutive words.
template <bool FWD>
__device__ __forceinline__ Window lin_window(double* rx, const double* __restrict__ wl, int j, int C, int K,
                                             int slot0, int nd, int team, int l, double f,
                                             double p, double* pd, bool pdk, bool act) {
    Window w = {0.0, false, false, false, false};
    if (act) {
        int slot = slot0;
        for (int d = l + 1; d <= nd; d += team) {
            const int q = j * K + slot;
            double y = rx[q];
            if (f == 0.0) {
                y = -0.0;
            } else if (y > 0.0) {
                y *= f;
                if (y < lin_tiny()) {
                    y = LIN_LOST;
                    w.newly = true;
                } else if (y > lin_huge()) {
                    w.over = true;
                }
            }
            rx[q] = y;
            const double wd = __ldg(&wl[j * K + d - 1]);
            const double term = fmax(y, 0.0) * wd;
            w.sum += term;
            if (pd) pd[pd_at(d, j, C, K, pdk)] += p * term;
            w.fin |= !is_nz(y) && !is_nz(wd);
            w.lost |= y == LIN_LOST;
            slot = FWD ? slot_back(slot, team, K) : slot_fwd(slot, team, K);
        }
    }
    w.sum = team_sum(w.sum, team);
    w.fin = team_any(w.fin, team);
    w.lost = team_any(w.lost, team);
    w.newly = team_any(w.newly, team);
    w.over = team_any(w.over, team);
    return w;
}

// What a transition step's pass over the C labels of one row or column found.
struct Mix {
    double v;   // Σ_k max(x[k], 0) · w[k·ws]
    double m;   // max_k x[k] (at least 0)
    double em;  // max_k er[k]
    bool fin;   // some term is finite in the log domain
};

// The transition step's sum for one label: lanes l < wb of the team visit k = l, l + wb, ...
// < C, then the team reduces. With `acc`, adds q · term to acc[k] (each owned by one lane).
__device__ __forceinline__ Mix lin_mix(const double* x, const double* er, const double* w,
                                       int ws, int C, int l, int wb, int team, bool act,
                                       double* acc, double q) {
    Mix r = {0.0, 0.0, 0.0, false};
    if (act && l < wb) {
        for (int k = l; k < C; k += wb) {
            const double xk = x[k], wk = w[k * ws];
            const double term = fmax(xk, 0.0) * wk;
            r.v += term;
            if (acc) acc[k] += q * term;
            r.m = fmax(r.m, xk);
            r.em = fmax(r.em, er[k]);
            r.fin |= !is_nz(xk) && !is_nz(wk);
        }
    }
    r.v = team_sum(r.v, wb);
    r.m = team_max(r.m, wb);
    r.em = team_max(r.em, wb);
    r.fin = team_any(r.fin, team);
    return r;
}

// The bound on label j's lost twins after a pass with factor f.
__device__ __forceinline__ double lin_lambda(double lam, double f, const Window& w) {
    lam = f == 0.0 ? 0.0 : lam * f;
    if (w.newly) lam = fmax(lam, lin_tiny());
    return w.lost ? lam : 0.0;
}

// A new twin y (fin: it is finite in the log domain): LIN_LOST below LIN_TINY, with the
// label's bound raised; -0.0 when it is -inf.
__device__ __forceinline__ double lin_insert(double y, bool fin, double* lam, int* flg) {
    if (!fin || is_nz(y)) return -0.0;
    if (!(y <= lin_huge())) atomicOr(flg, 2);
    if (y < lin_tiny()) {
        *lam = fmax(*lam, lin_tiny());
        return LIN_LOST;
    }
    return y;
}

// The prepared parameters: Wl (K, C), Tl (C, C), Tr (C, C), Md, Mt, Mr, exp(Mt), exp(Mr)
// (C each).
struct Lin {
    const double *wl, *tl, *tr, *md, *mt, *mr, *emt, *emr;
    __device__ Lin(const Args& a) {
        wl = a.lin;
        tl = wl + a.K * a.C;
        tr = tl + a.C * a.C;
        md = tr + a.C * a.C;
        mt = md + a.C;
        mr = mt + a.C;
        emt = mr + a.C;
        emr = emt + a.C;
    }
};

// ---------------------------------------------------------------------------------------
// Forward. Saves ã_t (alpha), ũ_t (u) and E_t (ex) when asked; writes log Z to out and Z
// relative to 2^E_L to zl.
__device__ void fwd_lin(const Args& a) {
    const int b = a.seq ? a.seq[blockIdx.x] : (int)blockIdx.x;
    const int L = (int)a.len[b], K = (int)a.K, C = (int)a.C, ch = a.ch;
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    int wb = 1;
    while (wb < C && wb < team) wb <<= 1;
    const Lin p(a);
    extern __shared__ double smem[];
    double* ax = smem;   // ã_t
    double* er = ax + C;  // bound on ã_t's part lost to underflow
    double* lam = er + C;  // λ_j
    double* misc = lam + C;  // [0]: the step's largest ã; [1]: the flag (an int)
    int* flg = (int*)(misc + 1);
    double* scs = misc + 2 + 32;
    double* ebs = scs + ch * C;  // exp(eb[t-1] + Md)
    double* bbs = ebs + ch * C;  // exp(bb[t] + Mt)
    double* rx = a.smem_ring ? bbs + ch * C : a.ring + (i64)b * K * C;

    if (threadIdx.x == 0) *flg = 0;
    __syncthreads();
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        const double bb0 = opt_at(a.bb, a, b, 0, j);
        if (bb0 != neg_inf() && fabs(bb0) > LIN_RANGE) atomicOr(flg, 1);
        rx[j * K] = lin_exp2(a.st[j], bb0);
        lam[j] = 0.0;
        if (a.u) SAVED(a.u, b, 0, j) = a.st[j] == neg_inf() ? -0.0 : exp(a.st[j] - p.mt[j]);
    }
    if (a.ex && threadIdx.x == 0) a.ex[(i64)b * (a.T + 1)] = 0;
    i64 E = 0;
    int e = 0;
    int tk = 0, r = ch - 1;
    bool done = true;
    for (int t = 1; t <= L; ++t) {
        tk = tk + 1 == K ? 0 : tk + 1;
        if (++r == ch) {
            r = 0;
            stage_lin(scs, a.sc, nullptr, a, b, a.T, t - 1, 0, ch, L, flg);
            stage_lin(ebs, a.eb, p.md, a, b, a.T, t - 1, 0, ch, L, flg);
            stage_lin(bbs, a.bb, p.mt, a, b, a.T, t - 1, 1, ch, L, flg);
            // Every thread sees its own flags: the OR is the same on all of them.
            if (__syncthreads_or(*flg != 0)) {
                done = false;
                break;
            }
        }
        E += e;
        const double sc = pow2(-e);
        const int nd = t < K ? t : K;
        for (int jb = 0; jb < C; jb += nteams) {
            const int j = jb + g;
            const bool act = j < C;
            const double f = act ? scs[r * C + j] * sc : 0.0;
            const Window w = lin_window<true>(rx, p.wl, j, C, K, slot_back(tk, l + 1, K), nd,
                                              team, l, f, 0.0, nullptr, false, act);
            if (act && l == 0) {
                const double lm = lin_lambda(lam[j], f, w);
                lam[j] = lm;
                const double eb = ebs[r * C + j];
                const double x = w.fin ? w.sum * eb : -0.0;
                ax[j] = x;
                er[j] = lm * (double)nd * fabs(eb);
                if (w.over || !(x <= lin_huge())) atomicOr(flg, 2);
                if (a.alpha) SAVED(a.alpha, b, t, j) = x;
            }
        }
        __syncthreads();
        if (a.ex && threadIdx.x == 0) a.ex[(i64)b * (a.T + 1) + t] = E;
        if (t == L) break;
        for (int jb = 0; jb < C; jb += nteams) {
            const int j = jb + g;
            const bool act = j < C;
            const Mix x = lin_mix(ax, er, act ? p.tl + j : p.tl, C, C, l, wb, team, act,
                                  nullptr, 0.0);
            if (act && l == 0) {
                rx[j * K + tk] = lin_insert(x.v * bbs[r * C + j], x.fin, &lam[j], flg);
                if (a.u) SAVED(a.u, b, t, j) = x.fin ? x.v : -0.0;
                if (x.em > lin_err() * x.m) atomicOr(flg, 4);
                if (j == 0) misc[0] = x.m;
            }
        }
        __syncthreads();
        e = scale_of(misc[0]);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double z = 0.0, ez = 0.0, m = 0.0, em = 0.0;
        bool fin = false;
        if (done) {
            for (int j = 0; j < C; ++j) {
                const double x = ax[j];
                const double w = a.en[j] == neg_inf() ? -0.0 : exp(a.en[j]);
                z += fmax(x, 0.0) * w;
                ez += er[j] * fabs(w);
                m = fmax(m, x);
                em = fmax(em, er[j]);
                fin |= !is_nz(x) && !is_nz(w);
            }
            if (ez > lin_err() * z || em > lin_err() * m) atomicOr(flg, 4);
        }
        a.out[2 * b] = fin ? log(z) + (double)E * 0.69314718055994530942 : neg_inf();
        a.out[2 * b + 1] = 0.0;
        if (a.zl) a.zl[b] = fin ? z : 0.0;
        a.flag[b] = *flg;
    }
}

// ---------------------------------------------------------------------------------------
// Backward, from the linear forward's ã, ũ, E and Z. With κ_s = 2^(E_s + F_s - E_L) / Z:
//     duration    ũ_s(j) · exp(bb[s, j] + Md_j + Mt_j) · κ_s · Wl[d, j] · w̃_{s+d}(j)
//     begin       ũ_s(j) · exp(bb[s, j] + Md_j + Mt_j) · κ_s · Σ_d Wl[d, j] · w̃_{s+d}(j)
//     transition  ã_s(i) · exp(Mr_i) · κ_s · Tr[i, j] · γ̃_s(j)
//     end         ã_s(i) · exp(Mr_i) · κ_s · β̃_s(i)
// with γ̃_s(j) = exp(bb[s, j] + Md_j) Σ_d Wl w̃, β̃_s(i) = Σ_j Tr[i, j] γ̃_s(j), and the new
// twin w̃_s(i) = β̃_s(i) · exp(eb[s-1, i] + Mr_i).
__device__ void bwd_lin(const Args& a) {
    const int b = a.seq ? a.seq[blockIdx.x] : (int)blockIdx.x;
    const int L = (int)a.len[b], K = (int)a.K, C = (int)a.C, ch = a.ch;
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    int wb = 1;
    while (wb < C && wb < team) wb <<= 1;
    const Lin p(a);
    const double kz = 1.0 / a.zl[b];
    const i64 EL = a.ex[(i64)b * (a.T + 1) + L];
    extern __shared__ double smem[];
    double* gam = smem;  // γ̃_s
    double* er = gam + C;
    double* lam = er + C;
    double* misc = lam + C;
    int* flg = (int*)(misc + 1);
    double* exs = misc + 2;  // E of the staged rows (exact in f64)
    double* scs = exs + 32;
    double* gbs = scs + ch * C;  // exp(bb[s] + Md)
    double* us = gbs + ch * C;   // ũ_s
    double* als = us + ch * C;   // ã_s
    double* ebs = als + ch * C;  // exp(eb[s-1] + Mr)
    double* next = ebs + ch * C;
    double* wx = a.smem_ring ? next : a.ring + (i64)b * K * C;
    if (a.smem_ring) next += K * C;
    double* pd = a.smem_acc ? next : a.pdur + (i64)b * K * C;
    double* pt = a.smem_acc ? next + K * C : a.ptr + (i64)b * C * C;

    if (threadIdx.x == 0) *flg = 0;
    for (int x = threadIdx.x; x < K * C; x += blockDim.x) pd[x] = 0.0;
    for (int x = threadIdx.x; x < C * C; x += blockDim.x) pt[x] = 0.0;
    __syncthreads();
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        const double ebl = opt_at(a.eb, a, b, L - 1, j);
        if (ebl != neg_inf() && fabs(ebl) > LIN_RANGE) atomicOr(flg, 1);
        wx[j * K + L % K] = lin_exp2(a.en[j], ebl);
        lam[j] = 0.0;
        const double w = a.en[j] == neg_inf() ? -0.0 : exp(a.en[j]);
        const double em = fmax(SAVED(a.alpha, b, L, j), 0.0) * w * kz;
        a.pen[(i64)b * C + j] = em;
        AT(a.geb, b, L - 1, j) = em;
    }
    i64 F = 0;
    int e = 0;
    int lo = L, sk = L % K;
    bool done = true;
    for (int s = L - 1; s >= 0; --s) {
        sk = sk == 0 ? K - 1 : sk - 1;
        if (s < lo) {
            lo = s + 1 > ch ? s + 1 - ch : 0;
            const int n = s - lo + 1;
            __syncthreads();
            stage_lin(scs, a.sc, nullptr, a, b, a.T, lo, 0, n, L, flg);
            stage_lin(gbs, a.bb, p.md, a, b, a.T, lo, 0, n, L, flg);
            stage(us, a.u, a, b, a.T + 1, lo, 0, n, L);
            stage(als, a.alpha, a, b, a.T + 1, lo, 0, n, L);
            stage_lin(ebs, a.eb, p.mr, a, b, a.T, lo, -1, n, L, flg);
            for (int x = threadIdx.x; x < n; x += blockDim.x)
                exs[x] = (double)a.ex[(i64)b * (a.T + 1) + lo + x];
            // Every thread sees its own flags: the OR is the same on all of them.
            if (__syncthreads_or(*flg != 0)) {
                done = false;
                break;
            }
        }
        const int r = s - lo;
        F += e;
        const double sc = pow2(-e);
        const i64 ke = (i64)exs[r] + F - EL;
        const double kap = ldexp(kz, (int)(ke < -100000 ? -100000 : ke > 100000 ? 100000 : ke));
        const int nd = (L - s) < K ? (L - s) : K;
        for (int jb = 0; jb < C; jb += nteams) {
            const int j = jb + g;
            const bool act = j < C;
            double f = 0.0, gb = 0.0, pj = 0.0;
            if (act) {
                f = scs[r * C + j] * sc;
                gb = gbs[r * C + j];
                pj = us[r * C + j] * gb * p.emt[j] * kap;
            }
            const Window w = lin_window<false>(wx, p.wl, j, C, K, slot_fwd(sk, l + 1, K), nd,
                                               team, l, f, pj, pd, a.smem_acc != 0, act);
            if (act && l == 0) {
                const double lm = lin_lambda(lam[j], f, w);
                lam[j] = lm;
                const double gs = w.fin ? w.sum * gb : -0.0;
                gam[j] = gs;
                er[j] = lm * (double)nd * fabs(gb);
                const double bm = w.fin ? pj * w.sum + 0.0 : 0.0;
                AT(a.gbb, b, s, j) = bm;
                if (s == 0) a.pst[(i64)b * C + j] = bm;
                if (w.over || !(gs <= lin_huge()) || !(fabs(pj) <= lin_huge()))
                    atomicOr(flg, 2);
                if (fabs(pj) * lm * (double)nd > lin_err()) atomicOr(flg, 4);
            }
        }
        __syncthreads();
        if (s == 0) break;
        for (int ib = 0; ib < C; ib += nteams) {
            const int i = ib + g;
            const bool act = i < C;
            const double q = act ? als[r * C + i] * p.emr[i] * kap : 0.0;
            const int row = act ? i * C : 0;
            const Mix x = lin_mix(gam, er, p.tr + row, 1, C, l, wb, team, act, pt + row, q);
            if (act && l == 0) {
                AT(a.geb, b, s - 1, i) = x.fin ? q * x.v + 0.0 : 0.0;
                wx[i * K + sk] = lin_insert(x.v * ebs[r * C + i], x.fin, &lam[i], flg);
                if (x.em > lin_err() * x.m) atomicOr(flg, 4);
                if (fabs(q) * x.em * (double)C > lin_err()) atomicOr(flg, 4);
                if (i == 0) misc[0] = x.m;
            }
        }
        __syncthreads();
        e = scale_of(misc[0]);
    }
    __syncthreads();
    if (done && *flg == 0) {
        if (a.smem_acc) {
            const i64 kc = (i64)K * C;
            for (int x = threadIdx.x; x < K * C; x += blockDim.x)
                a.pdur[(i64)b * kc + x] = pd[pd_at(x / C + 1, x % C, C, K, true)];
            for (int x = threadIdx.x; x < C * C; x += blockDim.x)
                a.ptr[(i64)b * C * C + x] = pt[x];
        }
        __syncthreads();
        bwd_tail(a, b, L);
    }
    if (threadIdx.x == 0) a.flag[b] = *flg;
}

extern "C" __global__ void __launch_bounds__(1024) fwd_lin_log(Args a) { fwd_lin(a); }
extern "C" __global__ void __launch_bounds__(1024) bwd_lin_log(Args a) { bwd_lin(a); }
