// The log semiring's streaming forward and backward in the linear domain (static transition).
//
// The log-domain kernels spend most of a position on exponentials and logarithms: every ring
// entry is exponentiated again at every position it is read. Here every quantity is kept as
// a plain number relative to one power of two per position, 2^E_t, chosen from the largest
// value two positions back (`next_scale`), so that a position costs multiplications and sums
// only:
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
        const double v = (src && p >= 0 && p < L) ? ld_in(a, src, ((i64)b * rows + p) * C + j) : 0.0;
        dst[x] = lin_exp(v, add ? add[j] : 0.0, flg);
    }
}

// The duration accumulator of (d, j): label-major in shared memory (pdk: no bank conflicts
// between the lanes of a team), in the output's layout [(d-1)·C + j] in global memory.
__device__ __forceinline__ int pd_at(int d, int j, int C, int K, bool pdk) {
    return pdk ? j * K + d - 1 : (d - 1) * C + j;
}

// What a team found in one position, as bits (OR-reduced across the team).
#define LB_FIN 1     // some window term is finite (not -inf) in the log domain
#define LB_LOST 2    // some twin of the window is LIN_LOST
#define LB_NEWLY 4   // some twin became LIN_LOST at this position
#define LB_OVER 8    // some twin exceeds LIN_HUGE
#define LB_TFIN 16   // some term of the transition step is finite

// One position of one team, before and after the team's reduction.
struct Step {
    double sum;  // Σ max(twin, 0) · Wl over the window's durations
    double v;    // Σ max(x, 0) · w over the transition step's labels
    double m;    // max x over the transition step's labels (at least 0)
    double em;   // max of their bounds on what underflow lost
    int bits;
};

// The larger of two numbers that are never NaN (cheaper than fmax, which handles NaN).
__device__ __forceinline__ double bigger(double a, double b) { return a > b ? a : b; }

// Butterfly across a team of `width` lanes (a power of two, at most 32), every quantity in
// one pass so that their shuffles overlap; the transition step's three only over the `wb`
// lanes that hold them (the others hold 0). Floating-point addition is commutative, so both
// lanes of a pair compute the same sum and every lane ends with the team's result, reduced
// in an order fixed by the lane numbers alone.
__device__ __forceinline__ void step_reduce(Step& s, int width, int wb) {
    for (int off = width >> 1; off >= wb; off >>= 1) {
        const double os = __shfl_xor_sync(0xffffffffu, s.sum, off, width);
        const int ob = __shfl_xor_sync(0xffffffffu, s.bits, off, width);
        s.sum += os;
        s.bits |= ob;
    }
    for (int off = (wb < width ? wb : width) >> 1; off > 0; off >>= 1) {
        const double os = __shfl_xor_sync(0xffffffffu, s.sum, off, width);
        const double ov = __shfl_xor_sync(0xffffffffu, s.v, off, width);
        const double om = __shfl_xor_sync(0xffffffffu, s.m, off, width);
        const double oe = __shfl_xor_sync(0xffffffffu, s.em, off, width);
        const int ob = __shfl_xor_sync(0xffffffffu, s.bits, off, width);
        s.sum += os;
        s.v += ov;
        s.m = bigger(s.m, om);
        s.em = bigger(s.em, oe);
        s.bits |= ob;
    }
    // Lanes at or beyond wb took no part in the transition step's reduction: broadcast it.
    if (wb < width) {
        s.v = __shfl_sync(0xffffffffu, s.v, 0, width);
        s.m = __shfl_sync(0xffffffffu, s.m, 0, width);
        s.em = __shfl_sync(0xffffffffu, s.em, 0, width);
    }
}

// One window term: multiplies twin y by f (f = 0: the window ends, the twin is -inf),
// marks it lost below LIN_TINY, adds max(twin, 0) · wd to `sum` and returns the new twin and
// the term (through `term`). Written with selects rather than branches.
__device__ __forceinline__ double lin_item(double y, double f, double wd, double& sum,
                                           double& term, int& bits) {
    const bool live = y > 0.0;
    double x = live ? y * f : y;
    const bool low = live && x < lin_tiny();
    x = f == 0.0 ? -0.0 : low ? LIN_LOST : x;
    bits |= (low && f != 0.0 ? LB_NEWLY : 0) | (x > lin_huge() ? LB_OVER : 0) |
            (!is_nz(x) && !is_nz(wd) ? LB_FIN : 0) | (x == LIN_LOST ? LB_LOST : 0);
    term = (x > 0.0 ? x : 0.0) * wd;
    sum += term;
    return x;
}

// The window's terms of label j from duration d to nd, every `team`-th, at ring slots that
// move by `team` from `slot` (FWD: back from the newest start; otherwise on to later ends),
// two at a time with both loads before either store; with `skip`, from the second of them
// (d = 1 waits for the new twin). With `pd`, adds p · term to the accumulator of (d, j)
// (`pd_at`).
template <bool FWD>
__device__ __forceinline__ void lin_window(double* ring, const double* __restrict__ wl, int j,
                                           int C, int K, int d, int slot, bool skip, int nd,
                                           int team, double f, Step& st, double p, double* pd,
                                           bool pdk) {
    if (skip) {
        d += team;
        slot = FWD ? slot_back(slot, team, K) : slot_fwd(slot, team, K);
    }
    for (; d + team <= nd; d += 2 * team) {
        const int s1 = FWD ? slot_back(slot, team, K) : slot_fwd(slot, team, K);
        const int q0 = j * K + slot, q1 = j * K + s1;
        const double y0 = ring[q0], y1 = ring[q1];
        const double w0 = __ldg(&wl[j * K + d - 1]);
        const double w1 = __ldg(&wl[j * K + d - 1 + team]);
        double t0, t1;
        ring[q0] = lin_item(y0, f, w0, st.sum, t0, st.bits);
        ring[q1] = lin_item(y1, f, w1, st.sum, t1, st.bits);
        if (pd) {
            pd[pd_at(d, j, C, K, pdk)] += p * t0;
            pd[pd_at(d + team, j, C, K, pdk)] += p * t1;
        }
        slot = FWD ? slot_back(s1, team, K) : slot_fwd(s1, team, K);
    }
    if (d <= nd) {
        const int q = j * K + slot;
        double term;
        ring[q] = lin_item(ring[q], f, __ldg(&wl[j * K + d - 1]), st.sum, term, st.bits);
        if (pd) pd[pd_at(d, j, C, K, pdk)] += p * term;
    }
}

// The transition step's terms for label j (act: j is a label): lanes l < wb visit the labels
// k = l, l + wb, ... < C of the previous position's values x (bounds er) against the weights
// w[k·ws], and take the maxima of x and er whether or not j is a label. With `acc`, adds
// q · term to acc[k].
__device__ __forceinline__ void lin_mix(Step& st, const double* x, const double* er,
                                        const double* __restrict__ w, int ws, int C, int l,
                                        int wb, bool act, double* acc, double q) {
    if (l >= wb) return;
    for (int k = l; k < C; k += wb) {
        const double xk = x[k];
        if (act) {
            const double wk = __ldg(&w[k * ws]);
            const double term = fmax(xk, 0.0) * wk;
            st.v += term;
            if (acc) acc[k] += q * term;
            if (!is_nz(xk) && !is_nz(wk)) st.bits |= LB_TFIN;
        }
        st.m = bigger(st.m, xk);
        st.em = bigger(st.em, er[k]);
    }
}

// The bound on label j's lost twins after a position with factor f.
__device__ __forceinline__ double lin_lambda(double lam, double f, int bits) {
    lam = f == 0.0 ? 0.0 : lam * f;
    if (bits & LB_NEWLY) lam = fmax(lam, lin_tiny());
    return (bits & LB_LOST) ? lam : 0.0;
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

// The next position's scale exponent. The scale of a position comes from the largest value
// two positions back (the one before is still being reduced when the position starts):
// E_{t+1} = E_{t-1} + exponent(max ã_{t-1}), so e_{t+1} = exponent(m) - e_t. Any exponent is
// exact; one that fits the values badly shows as an overflow or a loss (flags 2, 4).
__device__ __forceinline__ int next_scale(double m, int e) {
    const int n = scale_of(m) - e;
    return n < -1000 ? -1000 : n > 1000 ? 1000 : n;
}

// The prepared parameters: Wl (C, K), Tl (C, C), Tr (C, C), Md, Mt, Mr, exp(Mt), exp(Mr)
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
//
// One barrier per position. Position t's team for label j computes, from ã_{t-1} of every
// label (written at t - 1),
//     ũ_{t-1}(j) = Σ_i ã_{t-1}(i) · Tl[i, j]     (the transition step of t - 1)
// and, at the same time, the window's terms of durations d >= 2, which do not depend on it;
// then the new twin r̃_{t-1}(j) = ũ_{t-1}(j) · exp(bb[t-1, j] + Mt_j), its term (d = 1),
// and ã_t(j). ã and its bounds are double-buffered by the parity of t.
template <bool RS>
__device__ void fwd_lin(const Args& a) {
    const int b = a.seq ? a.seq[blockIdx.x] : (int)blockIdx.x;
    const int L = (int)a.len[b], K = (int)a.K, C = (int)a.C, ch = a.ch;
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    int wb = 1;
    while (wb < C && wb < team) wb <<= 1;
    const Lin p(a);
    extern __shared__ double smem[];
    double* axb = smem;       // ã_t, two buffers
    double* erb = axb + 2 * C;  // bounds on ã_t's part lost to underflow, two buffers
    double* lam = erb + 2 * C;  // λ_j
    int* flg = (int*)(lam + C);
    double* scs = lam + C + 34;
    double* ebs = scs + ch * C;  // exp(eb[t-1] + Md)
    double* bbs = ebs + ch * C;  // exp(bb[t-1] + Mt)
    double* rx = RS ? bbs + ch * C : a.ring + (i64)b * K * C;

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
    int e = 0, en = 0;  // this position's scale exponent, the next one's
    int tk = 0, r = ch - 1;
    bool done = true;
    for (int t = 1; t <= L; ++t) {
        tk = tk + 1 == K ? 0 : tk + 1;
        if (++r == ch) {
            // The previous position ended with a barrier: nobody reads the old chunk any more.
            r = 0;
            stage_lin(scs, a.sc, nullptr, a, b, a.T, t - 1, 0, ch, L, flg);
            stage_lin(ebs, a.eb, p.md, a, b, a.T, t - 1, 0, ch, L, flg);
            stage_lin(bbs, a.bb, p.mt, a, b, a.T, t - 1, 0, ch, L, flg);
            // Every thread sees its own flags: the OR is the same on all of them.
            if (__syncthreads_or(*flg != 0)) {
                done = false;
                break;
            }
        }
        e = en;
        E += e;
        const double sc = pow2(-e);
        const int nd = t < K ? t : K;
        const bool tr = t >= 2;
        const double* axp = axb + ((t - 1) & 1) * C;
        const double* erp = erb + ((t - 1) & 1) * C;
        double* axn = axb + (t & 1) * C;
        double* ern = erb + (t & 1) * C;
        double mx = 0.0;
        for (int jb = 0; jb < C; jb += nteams) {
            const int j = jb + g;
            const bool act = j < C;
            Step st = {0.0, 0.0, 0.0, 0.0, 0};
            if (tr) lin_mix(st, axp, erp, act ? p.tl + j : p.tl, C, C, l, wb, act, nullptr, 0.0);
            const double f = act ? scs[r * C + j] * sc : 0.0;
            if (act) {
                // Durations l + 1, l + 1 + team, ... (starts t - d).
                lin_window<true>(rx, p.wl, j, C, K, l + 1, slot_back(tk, l + 1, K),
                                 tr && l == 0, nd, team, f, st, 0.0, nullptr, false);
            }
            step_reduce(st, team, wb);
            mx = st.m;
            if (act && l == 0) {
                double lm = lam[j];
                if (tr) {
                    const bool fin = (st.bits & LB_TFIN) != 0;
                    const double y = lin_insert(st.v * bbs[r * C + j], fin, &lm, flg);
                    if (a.u) SAVED(a.u, b, t - 1, j) = fin ? st.v : -0.0;
                    if (st.em > lin_err() * st.m) atomicOr(flg, 4);
                    double term;  // its term (d = 1), straight from the register
                    rx[j * K + slot_back(tk, 1, K)] =
                        lin_item(y, f, __ldg(&p.wl[j * K]), st.sum, term, st.bits);
                }
                lm = lin_lambda(lm, f, st.bits);
                lam[j] = lm;
                const double eb = ebs[r * C + j];
                const double x = (st.bits & LB_FIN) ? st.sum * eb : -0.0;
                axn[j] = x;
                ern[j] = lm * (double)nd * fabs(eb);
                if ((st.bits & LB_OVER) || !(x <= lin_huge())) atomicOr(flg, 2);
                if (a.alpha) SAVED(a.alpha, b, t, j) = x;
            }
        }
        if (a.ex && threadIdx.x == 0) a.ex[(i64)b * (a.T + 1) + t] = E;
        en = tr ? next_scale(mx, e) : 0;
        __syncthreads();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double z = 0.0, ez = 0.0, m = 0.0, em = 0.0;
        bool fin = false;
        if (done) {
            const double* ax = axb + (L & 1) * C;
            const double* er = erb + (L & 1) * C;
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
//
// One barrier per position, as in the forward: position s's team for label j computes the
// transition step of s + 1 (β̃_{s+1}(j), the end and transition marginals there) with the
// window's terms of d >= 2, then the new twin w̃_{s+1}(j), its term and γ̃_s(j). Each
// duration and transition accumulator is owned by one thread for the whole pass.
template <bool RS, bool AS>
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
    double* gmb = smem;         // γ̃_s, two buffers
    double* erb = gmb + 2 * C;  // bounds, two buffers
    double* lam = erb + 2 * C;
    int* flg = (int*)(lam + C);
    double* exs = lam + C + 2;  // E of the staged rows (exact in f64)
    double* scs = exs + 32;
    double* gbs = scs + ch * C;  // exp(bb[s] + Md)
    double* us = gbs + ch * C;   // ũ_s
    double* als = us + ch * C;   // ã_s, rows lo..=s+1
    double* ebs = als + (ch + 1) * C;  // exp(eb[s] + Mr)
    double* next = ebs + ch * C;
    double* wx = RS ? next : a.ring + (i64)b * K * C;
    if (RS) next += K * C;
    double* pd = AS ? next : a.pdur + (i64)b * K * C;
    double* pt = AS ? next + K * C : a.ptr + (i64)b * C * C;
    const bool pdk = AS;

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
    int e = 0, en = 0;
    double kn = 0.0;  // κ_{s+1}
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
            stage(us, a.u, a, b, a.T + 1, lo, 0, n, L, false);
            stage(als, a.alpha, a, b, a.T + 1, lo, 0, n + 1, L, false);
            stage_lin(ebs, a.eb, p.mr, a, b, a.T, lo, 0, n, L, flg);
            for (int x = threadIdx.x; x < n; x += blockDim.x)
                exs[x] = (double)a.ex[(i64)b * (a.T + 1) + lo + x];
            // Every thread sees its own flags: the OR is the same on all of them.
            if (__syncthreads_or(*flg != 0)) {
                done = false;
                break;
            }
        }
        const int r = s - lo;
        e = en;
        F += e;
        const double sc = pow2(-e);
        const i64 ke = (i64)exs[r] + F - EL;
        const double kap = ldexp(kz, (int)(ke < -100000 ? -100000 : ke > 100000 ? 100000 : ke));
        const int nd = (L - s) < K ? (L - s) : K;
        const bool tr = s + 1 < L;
        const double* gp = gmb + ((s + 1) & 1) * C;  // γ̃_{s+1}
        const double* erp = erb + ((s + 1) & 1) * C;
        double* gn = gmb + (s & 1) * C;
        double* ern = erb + (s & 1) * C;
        double mx = 0.0;
        for (int jb = 0; jb < C; jb += nteams) {
            const int j = jb + g;
            const bool act = j < C;
            Step st = {0.0, 0.0, 0.0, 0.0, 0};
            double q = 0.0;
            if (tr) {
                if (act) q = als[(r + 1) * C + j] * p.emr[j] * kn;
                const int row = act ? j * C : 0;
                lin_mix(st, gp, erp, p.tr + row, 1, C, l, wb, act, pt + row, q);
            }
            double f = 0.0, gb = 0.0, pj = 0.0;
            if (act) {
                f = scs[r * C + j] * sc;
                gb = gbs[r * C + j];
                pj = us[r * C + j] * gb * p.emt[j] * kap;
                // Durations l + 1, l + 1 + team, ... (ends s + d).
                lin_window<false>(wx, p.wl, j, C, K, l + 1, slot_fwd(sk, l + 1, K),
                                  tr && l == 0, nd, team, f, st, pj, pd, pdk);
            }
            step_reduce(st, team, wb);
            mx = st.m;
            if (act && l == 0) {
                double lm = lam[j];
                if (tr) {
                    const bool fin = (st.bits & LB_TFIN) != 0;
                    AT(a.geb, b, s, j) = fin ? q * st.v + 0.0 : 0.0;
                    const double y = lin_insert(st.v * ebs[r * C + j], fin, &lm, flg);
                    if (st.em > lin_err() * st.m) atomicOr(flg, 4);
                    if (fabs(q) * st.em * (double)C > lin_err()) atomicOr(flg, 4);
                    double term;  // its term (d = 1), straight from the register
                    wx[j * K + slot_fwd(sk, 1, K)] =
                        lin_item(y, f, __ldg(&p.wl[j * K]), st.sum, term, st.bits);
                    pd[pd_at(1, j, C, K, pdk)] += pj * term;
                }
                lm = lin_lambda(lm, f, st.bits);
                lam[j] = lm;
                const bool fin = (st.bits & LB_FIN) != 0;
                const double gs = fin ? st.sum * gb : -0.0;
                gn[j] = gs;
                ern[j] = lm * (double)nd * fabs(gb);
                const double bm = fin ? pj * st.sum + 0.0 : 0.0;
                AT(a.gbb, b, s, j) = bm;
                if (s == 0) a.pst[(i64)b * C + j] = bm;
                if ((st.bits & LB_OVER) || !(gs <= lin_huge()) || !(fabs(pj) <= lin_huge()))
                    atomicOr(flg, 2);
                if (fabs(pj) * lm * (double)nd > lin_err()) atomicOr(flg, 4);
            }
        }
        en = tr ? next_scale(mx, e) : 0;
        kn = kap;
        __syncthreads();
    }
    __syncthreads();
    if (done && *flg == 0) {
        if (AS) {
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

// One kernel per placement of the ring (RS) and the backward's accumulators (AS): in shared
// memory when they fit (suffixes _r, _a), else in global memory. Separate kernels let the
// compiler address shared memory directly rather than through generic pointers, which cost
// most of a position's latency.
extern "C" __global__ void __launch_bounds__(1024) fwd_lin_log(Args a) { fwd_lin<false>(a); }
extern "C" __global__ void __launch_bounds__(1024) fwd_lin_log_r(Args a) { fwd_lin<true>(a); }
extern "C" __global__ void __launch_bounds__(1024) bwd_lin_log(Args a) { bwd_lin<false, false>(a); }
extern "C" __global__ void __launch_bounds__(1024) bwd_lin_log_r(Args a) { bwd_lin<true, false>(a); }
extern "C" __global__ void __launch_bounds__(1024) bwd_lin_log_a(Args a) { bwd_lin<false, true>(a); }
extern "C" __global__ void __launch_bounds__(1024) bwd_lin_log_ra(Args a) { bwd_lin<true, true>(a); }
