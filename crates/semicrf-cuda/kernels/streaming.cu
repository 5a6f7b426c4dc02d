// The streaming algorithm on the GPU: one thread block per sequence, parallel inside a
// position over labels and durations (model page §5-§7).
//
// A block is split into teams of `team` lanes (a power of two, at most 32, inside one warp).
// Team g handles labels g, g + nteams, ...; inside a team, lane l handles durations
// l + 1, l + 1 + team, ... (or previous labels l, l + team, ...) and the team reduces them
// with a butterfly. Each ring entry is owned by one thread in a step and the steps are
// separated by barriers, so no reduction order depends on scheduling.
//
// The ring of the forward pass keeps, for each of the last K starts s and each label j,
//     r_s(j) = u_s(j) ⊗ begin_boundary[s, j] ⊗ Σ_{p = s}^{t-1} scores[p, j]
// which each step extends by one score, so that α_t(j) = end_boundary[t-1, j] ⊗
// ⊕_d r_{t-d}(j) ⊗ duration[d-1, j]. A ring entry sums at most K scores, in f64, so it carries
// the rounding of K scores whatever t is (no global prefix sum), and a -inf score makes the
// entry -inf for good, which is exactly the window barrier of the model.

struct Args {
    const double* sc;   // (B, T, C) scores (f32 when `f32in`: read them with `ld_in`)
    const double* bb;   // (B, T, C) begin boundary, or null (likewise)
    const double* eb;   // (B, T, C) end boundary, or null (likewise)
    const double* tr;   // (C, C) [i*C + j], or (K, C, C) [(d-1)*C*C + i*C + j]
    const double* dur;  // (K, C) [(d-1)*C + j]
    const double* st;   // (C)
    const double* en;   // (C)
    const i64* len;     // (B)
    const double* lz;   // (B) log Z (backward)
    const double* up;   // (B) upstream gradients (backward)
    double* ring;       // (B, K, C) forward r ring / backward w ring (log-weights)
    double* ringh;      // (B, K, C) entropies of the ring entries (entropy semiring)
    double* ring2;      // (B, K, C) α ring (duration-dependent forward); (B, K, C) scratch
    double* ring2h;     // (B, K, C) entropies of the α ring
    double* alpha;      // (B, T+1, C) saved α_t (backward), or null
    double* u;          // (B, T+1, C) saved u_s (static backward), or null
    int* bpd;           // (B, T+1, C) best durations (Viterbi), or null
    int* bpi;           // (B, T+1, C) best previous labels (Viterbi), or null
    double* out;        // (B, 2) forward result (x, h); (B, C) final α in `last`
    double* last;       // (B, C) α_L (Viterbi), or null
    double* gsc;        // (B, T, C) position marginals × g (backward)
    double* gbb;        // (B, T, C) begin marginals × g; `gsc` when there is no begin boundary
    double* geb;        // (B, T, C) end marginals × g
    double* bmarg;      // (B, T) boundary marginals
    double* pdur;       // (B, K, C) duration marginals per sequence [(d-1)*C + j]
    double* ptr;        // (B, C, C) or (B, K, C, C) transition marginals per sequence
    double* pst;        // (B, C) start marginals
    double* pen;        // (B, C) end marginals
    const int* seq;     // (grid) the sequence of each block, or null (block b runs sequence b)
    i64 T, K, C;
    int team;
    int ch;         // positions staged in shared memory at a time
    int smem_ring;  // whether the rings live in shared memory (else in `ring`, `ring2`)
    int smem_acc;   // whether the backward's shared-parameter accumulators do (else global)
    int f32in;      // whether sc, bb and eb hold f32 (the caller's f32 inputs, not widened)
};

#define AT(p, b, t, j) ((p)[((i64)(b) * a.T + (t)) * a.C + (j)])
#define SAVED(p, b, t, j) ((p)[((i64)(b) * (a.T + 1) + (t)) * a.C + (j)])

// Element i of an input tensor (sc, bb, eb), stored as f32 or f64.
__device__ __forceinline__ double ld_in(const Args& a, const double* p, i64 i) {
    return a.f32in ? (double)reinterpret_cast<const float*>(p)[i] : p[i];
}

__device__ __forceinline__ double opt_at(const double* p, const Args& a, int b, i64 t, i64 j) {
    return p ? ld_in(a, p, ((i64)b * a.T + t) * a.C + j) : 0.0;
}

// Copies rows p0 + off .. p0 + off + n - 1 of a (B, rows, C) tensor of sequence b into dst
// (n rows of C), zeros for rows outside [0, L) or an absent tensor. `input`: src is one of the
// caller's inputs (sc, bb, eb: f32 when `a.f32in`), else one of the kernels' f64 tables. All
// threads take part; the caller synchronises before reading.
__device__ void stage(double* dst, const double* src, const Args& a, int b, i64 rows, i64 p0,
                      i64 off, i64 n, i64 L, bool input) {
    const i64 C = a.C;
    const bool f32 = input && a.f32in;
    for (i64 x = threadIdx.x; x < n * C; x += blockDim.x) {
        const i64 p = p0 + off + x / C;
        const i64 i = ((i64)b * rows + p) * C + x % C;
        double v = 0.0;
        if (src && p >= 0 && p < L) v = f32 ? (double)reinterpret_cast<const float*>(src)[i] : src[i];
        dst[x] = v;
    }
}

// (x - y) mod K for 0 <= x < K and y >= 0, without a division in the common case (I: the
// index type, 32 or 64 bits).
template <typename I>
__device__ __forceinline__ I slot_back(I x, int y, I K) {
    I r = x - y;
    if (r < 0) {
        r += K;
        if (r < 0) r = ((r % K) + K) % K;
    }
    return r;
}

// (x + y) mod K for 0 <= x < K and y >= 0.
template <typename I>
__device__ __forceinline__ I slot_fwd(I x, int y, I K) {
    I r = x + y;
    if (r >= K) {
        r -= K;
        if (r >= K) r %= K;
    }
    return r;
}

// ---------------------------------------------------------------------------------------
// Forward, static (C, C) transition, in semiring SR. With `a.alpha`/`a.u` set it saves α and
// u for the backward pass; with `a.bpd` set it records Viterbi backpointers (SR_MAX).
template <int SR>
__device__ void fwd_static(const Args& a) {
    const int b = a.seq ? a.seq[blockIdx.x] : (int)blockIdx.x;
    const i64 L = a.len[b], K = a.K, C = a.C, ch = a.ch;
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    int wb = 1;  // lanes of the team that reduce over the C previous labels
    while (wb < C && wb < team) wb <<= 1;
    // Shared memory: α and its entropy, the staged rows of scores, end and begin boundaries,
    // then the ring when it fits.
    extern __shared__ double smem[];
    double* ax = smem;
    double* ah = ax + C;
    double* scs = ah + C;
    double* ebs = scs + ch * C;
    double* bbs = ebs + ch * C;
    double* rx = a.smem_ring ? bbs + ch * C : a.ring + (i64)b * K * C;
    double* rh = SR != SR_ENT ? nullptr : a.smem_ring ? rx + K * C : a.ringh + (i64)b * K * C;

    for (i64 j = threadIdx.x; j < C; j += blockDim.x) {
        rx[j] = a.st[j] + opt_at(a.bb, a, b, 0, j);
        if (SR == SR_ENT) rh[j] = 0.0;
        if (a.u) SAVED(a.u, b, 0, j) = a.st[j];
    }
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
        const i64 nd = t < K ? t : K;
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            const bool act = j < C;
            Two<SR> acc;
            acc.init();
            const i64 slot0 = slot_back(tk, l + 1, K);  // the slot of start t - (l + 1)
            if (act) {
                const double sv = scs[r * C + j];
                i64 slot = slot0;
                for (i64 d = l + 1; d <= nd; d += team) {
                    const i64 q = slot * C + j;
                    const double x = rx[q] + sv;
                    rx[q] = x;
                    acc.max(x + a.dur[(d - 1) * C + j], (int)d);
                    slot = slot_back(slot, team, K);
                }
            }
            acc.max_reduce(team);
            if (act && SR != SR_MAX) {
                i64 slot = slot0;
                for (i64 d = l + 1; d <= nd; d += team) {
                    const i64 q = slot * C + j;
                    acc.sum(rx[q] + a.dur[(d - 1) * C + j], SR == SR_ENT ? rh[q] : 0.0);
                    slot = slot_back(slot, team, K);
                }
            }
            acc.sum_reduce(team);
            if (act && l == 0) {
                const double x = acc.x() + ebs[r * C + j];
                ax[j] = x;
                if (SR == SR_ENT) ah[j] = acc.h();
                if (a.alpha) SAVED(a.alpha, b, t, j) = x;
                if (a.bpd) SAVED(a.bpd, b, t, j) = acc.arg;
            }
        }
        __syncthreads();
        if (t == L) break;
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
                for (i64 i = l; i < C; i += wb)
                    acc.sum(ax[i] + a.tr[i * C + j], SR == SR_ENT ? ah[i] : 0.0);
            }
            acc.sum_reduce(wb);
            if (act && l == 0) {
                const double x = acc.x();
                const i64 q = tk * C + j;
                rx[q] = x + bbs[r * C + j];
                if (SR == SR_ENT) rh[q] = acc.h();
                if (a.u) SAVED(a.u, b, t, j) = x;
                if (a.bpi) SAVED(a.bpi, b, t, j) = acc.arg;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        Acc<SR> acc;
        acc.init();
        for (i64 j = 0; j < C; ++j) acc.add(ax[j] + a.en[j], SR == SR_ENT ? ah[j] : 0.0, (int)j);
        a.out[2 * b] = acc.x();
        a.out[2 * b + 1] = acc.h();
    }
    if (a.last)
        for (i64 j = threadIdx.x; j < C; j += blockDim.x) a.last[b * C + j] = ax[j];
}

// ---------------------------------------------------------------------------------------
// Forward, duration-dependent (K, C, C) transition: the ring keeps α of the last K positions
// (q) and r_s(j) = begin_boundary[s, j] ⊗ Σ_{p=s}^{t-1} scores[p, j] (r).
//     α_t(j) = eb[t-1, j] ⊗ ⊕_d duration[d-1, j] ⊗ r_{t-d}(j) ⊗ X(t-d, d, j),
//     X(0, d, j) = start[j],  X(s, d, j) = ⊕_i α_s(i) ⊗ transition[d-1, i, j].
// Backpointers (SR_MAX): the best duration and, for it, the best previous label, both by
// (t, j); the index (d-1)·C + i orders ties by the smaller duration, then the smaller label.
template <int SR>
__device__ void fwd_dd(const Args& a) {
    const int b = a.seq ? a.seq[blockIdx.x] : (int)blockIdx.x;
    const i64 L = a.len[b], K = a.K, C = a.C, ch = a.ch;
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    extern __shared__ double smem[];
    double* ax = smem;
    double* ah = ax + C;
    double* scs = ah + C;
    double* ebs = scs + ch * C;
    double* bbs = ebs + ch * C;
    double* rx = a.smem_ring ? bbs + ch * C : a.ring + (i64)b * K * C;
    double* qx = a.smem_ring ? rx + K * C : a.ring2 + (i64)b * K * C;
    double* qh = SR != SR_ENT ? nullptr : a.smem_ring ? qx + K * C : a.ring2h + (i64)b * K * C;

    for (i64 j = threadIdx.x; j < C; j += blockDim.x) rx[j] = opt_at(a.bb, a, b, 0, j);
    i64 tk = 0, r = ch - 1;
    for (i64 t = 1; t <= L; ++t) {
        tk = tk + 1 == K ? 0 : tk + 1;
        if (++r == ch) {
            r = 0;
            stage(scs, a.sc, a, b, a.T, t - 1, 0, ch, L, true);
            stage(ebs, a.eb, a, b, a.T, t - 1, 0, ch, L, true);
            stage(bbs, a.bb, a, b, a.T, t - 1, 1, ch, L, true);
            __syncthreads();
        }
        const i64 nd = t < K ? t : K;
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            const bool act = j < C;
            Acc<SR> acc;
            acc.init();
            if (act) {
                const double sv = scs[r * C + j];
                i64 sl = slot_back(tk, l + 1, K);  // the slot of start t - d
                for (i64 d = l + 1; d <= nd; d += team) {
                    const i64 s = t - d;
                    const i64 slot = sl * C;
                    sl = slot_back(sl, team, K);
                    const double rv = rx[slot + j] + sv;
                    rx[slot + j] = rv;
                    const double w = rv + a.dur[(d - 1) * C + j];
                    if (s == 0) {
                        acc.add(a.st[j] + w, 0.0, (int)((d - 1) * C));
                    } else {
                        Acc<SR> in;
                        in.init();
                        const double* trd = a.tr + (d - 1) * C * C + j;
                        for (i64 i = 0; i < C; ++i)
                            in.add(qx[slot + i] + trd[i * C], SR == SR_ENT ? qh[slot + i] : 0.0,
                                   (int)i);
                        acc.add(in.x() + w, in.h(),
                                (int)((d - 1) * C + (SR == SR_MAX ? in.arg : 0)));
                    }
                }
            }
            acc.team_reduce(team);
            if (act && l == 0) {
                const double x = acc.x() + ebs[r * C + j];
                ax[j] = x;
                if (SR == SR_ENT) ah[j] = acc.h();
                if (a.alpha) SAVED(a.alpha, b, t, j) = x;
                if (a.bpd) {
                    SAVED(a.bpd, b, t, j) = acc.arg / (int)C + 1;
                    SAVED(a.bpi, b, t, j) = acc.arg % (int)C;
                }
            }
        }
        __syncthreads();
        if (t == L) break;
        for (i64 j = threadIdx.x; j < C; j += blockDim.x) {
            const i64 q = tk * C + j;
            qx[q] = ax[j];
            if (SR == SR_ENT) qh[q] = ah[j];
            rx[q] = bbs[r * C + j];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        Acc<SR> acc;
        acc.init();
        for (i64 j = 0; j < C; ++j) acc.add(ax[j] + a.en[j], SR == SR_ENT ? ah[j] : 0.0, (int)j);
        a.out[2 * b] = acc.x();
        a.out[2 * b + 1] = acc.h();
    }
    if (a.last)
        for (i64 j = threadIdx.x; j < C; j += blockDim.x) a.last[b * C + j] = ax[j];
}

// ---------------------------------------------------------------------------------------
// Backward (log semiring), shared tail: position marginals from the begin and end marginals,
// P(t in a segment of j) = Σ_{s<=t} begin(s, j) - Σ_{e<t} end(e, j), accumulated in f64 in
// position order; boundary marginals; everything per sequence scaled by g_b. Without a begin
// boundary the begin marginals are kept in `gsc` (`gbb == gsc`), each read just before its
// place is overwritten by the position marginal.
__device__ void bwd_tail(const Args& a, int b, i64 L) {
    const i64 C = a.C;
    for (i64 t = threadIdx.x; t < a.T; t += blockDim.x) {
        double s = 0.0;
        if (t < L)
            for (i64 j = 0; j < C; ++j) s += AT(a.gbb, b, t, j);
        a.bmarg[(i64)b * a.T + t] = s;
    }
    __syncthreads();
    const double gb = a.up[b];
    for (i64 j = threadIdx.x; j < C; j += blockDim.x) {
        double run = 0.0;
        for (i64 t = 0; t < L; ++t) {
            const double bm = AT(a.gbb, b, t, j), em = AT(a.geb, b, t, j);
            run += bm;
            AT(a.gsc, b, t, j) = gb * run;
            run -= em;
            if (a.gbb != a.gsc) AT(a.gbb, b, t, j) = gb * bm;
            AT(a.geb, b, t, j) = gb * em;
        }
    }
}

// Backward, both forms: the last position. β_L(j) = end[j] enters the w ring, and the end
// marginals of position L - 1 (and of `end`) are exp(α_L(j) + end[j] - log Z).
__device__ void bwd_begin(const Args& a, int b, i64 L, double z, double* wx) {
    const i64 K = a.K, C = a.C;
    for (i64 j = threadIdx.x; j < C; j += blockDim.x) {
        const double al = SAVED(a.alpha, b, L, j);
        wx[(L % K) * C + j] = a.en[j] + opt_at(a.eb, a, b, L - 1, j);
        const double em = exp(al + a.en[j] - z);
        a.pen[(i64)b * C + j] = em;
        AT(a.geb, b, L - 1, j) = em;
    }
}

// Backward, both forms: copies the duration and transition accumulators (`ntr` transition
// entries per sequence) out of shared memory when they were kept there.
__device__ void bwd_flush(const Args& a, int b, const double* pd, const double* pt, i64 ntr) {
    if (!a.smem_acc) return;
    const i64 kc = a.K * a.C;
    for (i64 x = threadIdx.x; x < kc; x += blockDim.x) a.pdur[(i64)b * kc + x] = pd[x];
    for (i64 x = threadIdx.x; x < ntr; x += blockDim.x) a.ptr[(i64)b * ntr + x] = pt[x];
}

// Backward, static transition. The w ring keeps, for the next K ends e and each label j,
//     w_e(j) = β_e(j) ⊗ end_boundary[e-1, j] ⊗ Σ_{p=s}^{e-1} scores[p, j],
// so that γ_s(j) = begin_boundary[s, j] ⊗ ⊕_d duration[d-1, j] ⊗ w_{s+d}(j) and
// β_s(i) = ⊕_j transition[i, j] ⊗ γ_s(j). Marginals (model §6):
//     duration  exp(u_s(j) + bb[s, j] + duration[d-1, j] + w_{s+d}(j) - log Z)
//     begin     exp(u_s(j) + γ_s(j) - log Z)
//     end       exp(α_e(i) + β_e(i) - log Z)
//     transition exp(α_s(i) + transition[i, j] + γ_s(j) - log Z)
// Each duration and transition accumulator is owned by one thread for the whole pass.
//
// Positions are staged in chunks of `ch` going down: rows lo..=hi of scores, begin boundary,
// u and α, and the end boundary of the position before each.
__device__ void bwd_static(const Args& a) {
    const int b = a.seq ? a.seq[blockIdx.x] : (int)blockIdx.x;
    const i64 L = a.len[b], K = a.K, C = a.C, ch = a.ch;
    const double z = a.lz[b];
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    int wb = 1;  // lanes of the team that reduce over the C labels of the transition step
    while (wb < C && wb < team) wb <<= 1;
    extern __shared__ double smem[];
    double* gam = smem;  // γ_s(j)
    double* scs = gam + 2 * C;
    double* bbs = scs + ch * C;
    double* us = bbs + ch * C;
    double* als = us + ch * C;
    double* ebs = als + ch * C;
    double* next = ebs + ch * C;
    double* wx = a.smem_ring ? next : a.ring + (i64)b * K * C;
    if (a.smem_ring) next += K * C;
    double* pd = a.smem_acc ? next : a.pdur + (i64)b * K * C;
    double* pt = a.smem_acc ? next + K * C : a.ptr + (i64)b * C * C;
    for (i64 x = threadIdx.x; x < K * C; x += blockDim.x) pd[x] = 0.0;
    for (i64 x = threadIdx.x; x < C * C; x += blockDim.x) pt[x] = 0.0;
    __syncthreads();

    bwd_begin(a, b, L, z, wx);
    i64 lo = L, sk = L % K;  // the staged chunk starts at lo; s mod K
    for (i64 s = L - 1; s >= 0; --s) {
        sk = sk == 0 ? K - 1 : sk - 1;
        if (s < lo) {
            lo = s + 1 > ch ? s + 1 - ch : 0;
            const i64 n = s - lo + 1;
            stage(scs, a.sc, a, b, a.T, lo, 0, n, L, true);
            stage(bbs, a.bb, a, b, a.T, lo, 0, n, L, true);
            stage(us, a.u, a, b, a.T + 1, lo, 0, n, L, false);
            stage(als, a.alpha, a, b, a.T + 1, lo, 0, n, L, false);
            stage(ebs, a.eb, a, b, a.T, lo, -1, n, L, true);
            __syncthreads();
        }
        const i64 r = s - lo;
        const i64 nd = (L - s) < K ? (L - s) : K;
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            const bool act = j < C;
            Two<SR_LOG> acc;
            acc.init();
            double uu = 0.0, ub = 0.0, bbv = 0.0;
            const i64 e0 = slot_fwd(sk, l + 1, K);  // the slot of end s + l + 1
            if (act) {
                const double sv = scs[r * C + j];
                bbv = bbs[r * C + j];
                uu = us[r * C + j];
                ub = uu + bbv;
                i64 e = e0;
                for (i64 d = l + 1; d <= nd; d += team) {
                    const i64 q = e * C + j;
                    e = slot_fwd(e, team, K);
                    const double w = wx[q] + sv;
                    wx[q] = w;
                    const double x = w + a.dur[(d - 1) * C + j];
                    acc.max(x, 0);
                    pd[(d - 1) * C + j] += exp(ub + x - z);
                }
            }
            acc.max_reduce(team);
            if (act) {
                i64 e = e0;
                for (i64 d = l + 1; d <= nd; d += team) {
                    acc.sum(wx[e * C + j] + a.dur[(d - 1) * C + j], 0.0);
                    e = slot_fwd(e, team, K);
                }
            }
            acc.sum_reduce(team);
            if (act && l == 0) {
                const double gs = acc.x() + bbv;
                gam[j] = gs;
                const double bm = exp(uu + gs - z);
                AT(a.gbb, b, s, j) = bm;
                if (s == 0) a.pst[(i64)b * C + j] = bm;
            }
        }
        __syncthreads();
        if (s == 0) break;
        for (i64 ib = 0; ib < C; ib += nteams) {
            const i64 i = ib + g;
            const bool act = i < C;
            Two<SR_LOG> acc;
            acc.init();
            double al = 0.0;
            if (act && l < wb) {
                al = als[r * C + i];
                for (i64 j = l; j < C; j += wb) {
                    const double x = a.tr[i * C + j] + gam[j];
                    acc.max(x, 0);
                    pt[i * C + j] += exp(al + x - z);
                }
            }
            acc.max_reduce(wb);
            if (act && l < wb) {
                for (i64 j = l; j < C; j += wb) acc.sum(a.tr[i * C + j] + gam[j], 0.0);
            }
            acc.sum_reduce(wb);
            if (act && l == 0) {
                const double be = acc.x();
                AT(a.geb, b, s - 1, i) = exp(al + be - z);
                wx[sk * C + i] = be + ebs[r * C + i];
            }
        }
        __syncthreads();
    }
    __syncthreads();
    bwd_flush(a, b, pd, pt, C * C);
    bwd_tail(a, b, L);
}

// Backward, duration-dependent transition. With h(s, d, j) = bb[s, j] + duration[d-1, j] +
// w_{s+d}(j) (kept in hx for the step) and X(s, d, j) as in the forward,
//     β_s(i) = ⊕_{d, j} transition[d-1, i, j] ⊗ h(s, d, j),
//     duration and begin marginals from exp(X(s, d, j) + h(s, d, j) - log Z),
//     transition marginals exp(α_s(i) + transition[d-1, i, j] + h(s, d, j) - log Z).
__device__ void bwd_dd(const Args& a) {
    const int b = a.seq ? a.seq[blockIdx.x] : (int)blockIdx.x;
    const i64 L = a.len[b], K = a.K, C = a.C, ch = a.ch;
    const double z = a.lz[b];
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    extern __shared__ double smem[];
    double* scs = smem + 2 * C;
    double* bbs = scs + ch * C;
    double* als = bbs + ch * C;
    double* ebs = als + ch * C;
    double* next = ebs + 2 * ch * C;
    double* wx = a.smem_ring ? next : a.ring + (i64)b * K * C;
    double* hx = a.smem_ring ? next + K * C : a.ring2 + (i64)b * K * C;  // [(d-1)*C + j]
    if (a.smem_ring) next += 2 * K * C;
    double* pd = a.smem_acc ? next : a.pdur + (i64)b * K * C;
    double* pt = a.smem_acc ? next + K * C : a.ptr + (i64)b * K * C * C;
    for (i64 x = threadIdx.x; x < K * C; x += blockDim.x) pd[x] = 0.0;
    for (i64 x = threadIdx.x; x < K * C * C; x += blockDim.x) pt[x] = 0.0;
    __syncthreads();

    bwd_begin(a, b, L, z, wx);
    i64 lo = L, sk = L % K;
    for (i64 s = L - 1; s >= 0; --s) {
        sk = sk == 0 ? K - 1 : sk - 1;
        if (s < lo) {
            lo = s + 1 > ch ? s + 1 - ch : 0;
            const i64 n = s - lo + 1;
            stage(scs, a.sc, a, b, a.T, lo, 0, n, L, true);
            stage(bbs, a.bb, a, b, a.T, lo, 0, n, L, true);
            stage(als, a.alpha, a, b, a.T + 1, lo, 0, n, L, false);
            stage(ebs, a.eb, a, b, a.T, lo, -1, n, L, true);
            __syncthreads();
        }
        const i64 r = s - lo;
        const i64 nd = (L - s) < K ? (L - s) : K;
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            const bool act = j < C;
            double sum = 0.0;
            if (act) {
                const double sv = scs[r * C + j];
                const double bbv = bbs[r * C + j];
                i64 e = slot_fwd(sk, l + 1, K);  // the slot of end s + d
                for (i64 d = l + 1; d <= nd; d += team) {
                    const i64 q = e * C + j;
                    e = slot_fwd(e, team, K);
                    const double w = wx[q] + sv;
                    wx[q] = w;
                    const double h = bbv + a.dur[(d - 1) * C + j] + w;
                    hx[(d - 1) * C + j] = h;
                    double X;
                    if (s == 0) {
                        X = a.st[j];
                    } else {
                        Acc<SR_LOG> in;
                        in.init();
                        const double* trd = a.tr + (d - 1) * C * C + j;
                        for (i64 i = 0; i < C; ++i) in.add(als[r * C + i] + trd[i * C], 0.0, 0);
                        X = in.x();
                    }
                    const double mu = exp(X + h - z);
                    pd[(d - 1) * C + j] += mu;
                    sum += mu;
                }
            }
            sum = team_sum(sum, team);
            if (act && l == 0) {
                AT(a.gbb, b, s, j) = sum;
                if (s == 0) a.pst[(i64)b * C + j] = sum;
            }
        }
        __syncthreads();
        if (s == 0) break;
        for (i64 ib = 0; ib < C; ib += nteams) {
            const i64 i = ib + g;
            const bool act = i < C;
            Acc<SR_LOG> acc;
            acc.init();
            double al = 0.0;
            if (act) {
                al = als[r * C + i];
                for (i64 q = l; q < nd * C; q += team) {
                    const i64 d1 = q / C, j = q % C;
                    const double x = a.tr[d1 * C * C + i * C + j] + hx[q];
                    acc.add(x, 0.0, 0);
                    pt[d1 * C * C + i * C + j] += exp(al + x - z);
                }
            }
            acc.team_reduce(team);
            if (act && l == 0) {
                const double be = acc.x();
                AT(a.geb, b, s - 1, i) = exp(al + be - z);
                wx[sk * C + i] = be + ebs[r * C + i];
            }
        }
        __syncthreads();
    }
    __syncthreads();
    bwd_flush(a, b, pd, pt, K * C * C);
    bwd_tail(a, b, L);
}

extern "C" __global__ void __launch_bounds__(1024) fwd_static_log(Args a) { fwd_static<SR_LOG>(a); }
extern "C" __global__ void __launch_bounds__(1024) fwd_static_max(Args a) { fwd_static<SR_MAX>(a); }
extern "C" __global__ void __launch_bounds__(1024) fwd_static_ent(Args a) { fwd_static<SR_ENT>(a); }
extern "C" __global__ void __launch_bounds__(1024) fwd_dd_log(Args a) { fwd_dd<SR_LOG>(a); }
extern "C" __global__ void __launch_bounds__(1024) fwd_dd_max(Args a) { fwd_dd<SR_MAX>(a); }
extern "C" __global__ void __launch_bounds__(1024) fwd_dd_ent(Args a) { fwd_dd<SR_ENT>(a); }
extern "C" __global__ void __launch_bounds__(1024) bwd_static_log(Args a) { bwd_static(a); }
extern "C" __global__ void __launch_bounds__(1024) bwd_dd_log(Args a) { bwd_dd(a); }
