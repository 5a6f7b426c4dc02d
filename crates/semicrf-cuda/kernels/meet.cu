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
// the twin of start s at time t (scores s..t-1 added) is entry·G_t (G is kept as a mantissa
// and a power of two, so it never leaves the range) and
//
//     α̃_t(j) = exp(eb[t-1, j] + Md_j) · (G_t(j)·Σ_{d>=2} entry_{t-d}(j)·Wl[j, d] + twin_{t-1}(j)·f·Wl[j, 1]).
//
// When G has left about 2^±48 at the end of a block of steps, the label's entries are
// multiplied by it and G is reset (rebase). A -inf score closes the label's window (`floor`):
// no entry before it is read again.
//
// # When a sequence is given up
//
// `flag[b]` says why a sequence is left to the log-domain kernels:
// 1 a finite score or boundary beyond ±50 nats, 2 an overflow (an entry above 2^800, an α̃
// above 2^900, a marginal above 2), 4 values lost to underflow that could matter. An entry
// below 2^-800 is replaced by 0 and counted as lost: λ_j bounds every lost entry of label j
// in the window (`last` is the newest one's start). A step whose lost values could exceed
// 2^-60 of its largest α̃, or 2^-60 of a marginal in absolute terms, or a meet whose could
// exceed 2^-60 of Z, gives the sequence up. A value 0 with no bound is -inf: nothing is lost
// by underflow without raising a bound.
//
// # Blocks of steps
//
// One step of the recurrence needs the previous step's α̃ of every label, so the steps of a
// sweep run one after the other; what a step needs of older steps does not have to. A sweep
// runs in blocks of P steps (t0 .. t0+P-1), each in three phases separated by barriers:
//
// 1. All threads: for every step t of the block and label j, the window's sum over the
//    entries of starts before t0 - 1, H_t(j) = Σ_{s<=t0-2} entry_s(j)·Wl[j, t-s] (groups of
//    lanes split each sum and reduce it with a butterfly).
// 2. One thread per label, step by step: the transition step (a dot product over the
//    previous α̃ row), the few window terms of starts t0-1 .. t-2 (the entries the thread
//    made in this block), the new entry and α̃_t(j). The threads of this phase share α̃ rows
//    through shared memory, one barrier a step (a warp's when C <= 32). A step in which no
//    label of a warp has anything unusual (a closed window, lost values, bounds, a rebase)
//    takes a short path of arithmetic only (`mt_easy`).
// 3. All threads: what the block's steps leave to the outputs. The first halves of a
//    backward save the rows; the second halves find each step's marginal factors and its
//    begin and end marginals (phase 2 leaves each label's transition sum, window sum and G
//    of every step in shared memory), then the running position marginals, and the duration
//    and transition marginals of the block's steps, each accumulator owned by one thread.
//
// So the sequential part of a step costs O(C + P) per thread instead of O(C + K·C / threads),
// and the O(K·C) part and everything a step only writes run on every thread of the block.
// Sums are taken in an order fixed by the thread numbers alone: results are bitwise
// identical from run to run.

#ifndef MEET_SMEM
#define MEET_SMEM(name) extern __shared__ double name[]
#endif
#ifndef MT_SMEM_END  // (the CPU emulation checks the end of the layout against the launch's)
#define MT_SMEM_END(end)
#endif

#define MT_RANGE 50.0
#define MT_RB 16  // a block ends with a rebase where G is beyond 2^±(16+32)
#ifndef MT_SELF
#define MT_SELF 300  // a label rebases itself in a block where G is beyond 2^±(300+32)
#endif
#define MT_STEP 256
#ifndef MT_P
#define MT_P 8  // steps a block
#endif

#define MT_FWD 0   // forward only: no rows saved
#define MT_SAVE 1  // first halves of a backward: rows saved
#define MT_MARG 2  // second halves: marginals

__device__ __forceinline__ double mt_etiny() { return 0x1p-800; }
__device__ __forceinline__ double mt_ehuge() { return 0x1p+800; }
__device__ __forceinline__ double mt_huge() { return 0x1p+900; }
__device__ __forceinline__ double mt_err() { return 0x1p-60; }
__device__ __forceinline__ double mt_dmax() { return 1.7976931348623157e308; }

// 2^e for -1022 <= e <= 1023.
__device__ __forceinline__ double mt_pow2(int e) {
    return __longlong_as_double((long long)(1023 + e) << 52);
}

// x · 2^n for -1022 <= n <= 1023, exactly unless the result leaves the range. The kernels'
// exponents stay well within: a label's G within 2^±600 (a rebase at 2^±300, a step moves
// it at most 2^±(256+73)).
__device__ __forceinline__ double mt_mulp2(double x, int n) {
    return x * mt_pow2(n < -1022 ? -1022 : n > 1023 ? 1023 : n);
}

// x · 2^n for any n (0 below the subnormals, inf above the range), rounded once: one
// multiplication where 2^n is a double, else ldexp.
__device__ __forceinline__ double mt_scale(double x, i64 n) {
    if (n >= -1022 && n <= 1023) return x * mt_pow2((int)n);
    return ldexp(x, (int)(n < -4000 ? -4000 : n > 4000 ? 4000 : n));
}

// exp(x + add), 0 for x = -inf; flags a finite x beyond the range.
__device__ __forceinline__ double mt_exp(double x, double add, int* flg) {
    if (x == neg_inf()) return 0.0;
    if (fabs(x) > MT_RANGE) atomicOr(flg, 1);
    return exp(x + add);
}

// The barrier of the threads 0 .. n-1 (phase 2): a warp's for n = 32.
#ifndef MT_BAR_N
__device__ __forceinline__ void mt_bar_n(int n) {
    if (n == 32) __syncwarp();
    else asm volatile("bar.sync 1, %0;" ::"r"(n) : "memory");
}
#endif

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
    double* ring;       // (B, 2, K+P, C) rings, where they are not in shared memory
    double* out;        // (B, 2): log Z, 0
    int* flag;          // (B) why a sequence was given up (0: it was not)
    const double* up;   // (B) upstream gradients
    double* gsc;        // (B, T, C) position marginals × g
    double* gbb;        // (B, T, C) begin marginals (× g after the tail)
    double* geb;        // (B, T, C) end marginals × g, or null
    double* bmarg;      // (B, T) boundary marginals
    double* pdur;       // (B, 2, K, C) duration marginals per sweep [(d-1)·C + j], zeroed
    double* ptr;        // (B, 2, C, C) transition marginals per sweep [i·C + j], zeroed
    double* pst;        // (B, C) start marginals
    double* pen;        // (B, C) end marginals
    i64 T, K, C, H;
    int ch;     // steps staged at a time (a multiple of MT_P)
    int f32in;  // whether sc, bb and eb hold f32
    int acc;    // second halves: the duration and transition marginals accumulate in shared
                // memory (else in pdur and ptr)
};

// The prepared parameters: Wl (C, K) label-major; per side (0 forward, 1 reverse) Tl (C, C)
// [i·C + j] in the side's own orientation, Mt, exp(Mt) and ũ_0 = exp(start - Mt) (C each);
// then Md and exp(Md) (C each).
struct Par {
    const double *wl, *tl, *mt, *emt, *u0, *etmo, *md, *emd;
    __device__ __forceinline__ Par(const MArgs& a, int side) {
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

// A sweep's state saved between the kernels: the ring's window after the sweep's last step
// tl (K·C, label-major: the entries of starts tl-K .. tl-1, start s in slot s mod K; no later
// step reads an older one), then per label the mantissas of G, of G before the last step's
// update and of 1/G, λ, the newest lost entry's start, the window's start, α̃ and its bound
// of the last step, the exponents of G and of G before the last update; then E, E before the
// last step and the steps done (tl).
__device__ __forceinline__ i64 state_len(i64 K, i64 C) { return K * C + 10 * C + 4; }

// An input element, stored as f32 or f64.
__device__ __forceinline__ double mt_in(const MArgs& a, const void* p, i64 i) {
    return a.f32in ? (double)((const float*)p)[i] : ((const double*)p)[i];
}

__device__ __forceinline__ int mt_mod(int s, int K) {
    const int r = s % K;
    return r < 0 ? r + K : r;
}

// The exponent of x > 0 (its biased exponent field less 1023; -1023 for a subnormal).
__device__ __forceinline__ int mt_expo(double x) {
    return (int)((__double_as_longlong(x) >> 52) & 0x7ff) - 1023;
}

// The high word of x: for x >= 0 (α̃ rows), high words order as the doubles do, so a row's
// largest exponent is that of its largest high word, a maximum of integers.
__device__ __forceinline__ int mt_hi(double x) { return (int)(__double_as_longlong(x) >> 32); }
__device__ __forceinline__ int mt_imax(int a, int b) { return a > b ? a : b; }

// The scale step of a row (`step`): the exponent of its largest α̃, whose high word is hm,
// within ±MT_STEP; 0 for a row of zeros. A high word of 0 is a zero or a subnormal below
// 2^-1042, which the other words of the row `Ap` (of n) tell apart (rare).
__device__ __forceinline__ int mt_step_e(int hm, const double* Ap, int n) {
    if (hm > 0) {
        const int e = (hm >> 20) - 1023;
        return e < -MT_STEP ? -MT_STEP : e > MT_STEP ? MT_STEP : e;
    }
    bool any = false;
    for (int i = 0; i < n; ++i) any |= Ap[i] > 0.0;
    return any ? -MT_STEP : 0;
}

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

// What the meet finds for one sequence (computed identically by every block that needs it).
struct Met {
    double z;   // Z relative to 2^EZ
    i64 EZ;
    bool lost;  // what underflow lost could matter
};

// The meet: Z and, in `zl`, each label's share Zd_j (relative to 2^EZ), from the two saved
// states: the forward ring at time m and the reverse one at time L-m (G before its last
// update). Groups of gp lanes (a power of two, at most 32 and K) take a label each, lane l
// the terms a = l+1, l+1+gp, ... (and ends c = l, l+gp, ...), and reduce them with a
// butterfly of shuffles, so the order of every sum is fixed by the lane numbers; every
// thread returns the same result. `zl`: 3·C words of shared scratch.
__device__ Met mt_meet(Sweep& w, const double* sf, const double* sr, double* zl) {
    const int K = w.K, C = w.C, L = w.L, m = w.m, nt = blockDim.x;
    const double* qf = sf + (i64)K * C;
    const double* qr = sr + (i64)K * C;
    double* zz = zl;          // z_j (scaled by 2^-(kx+ky))
    double* zk = zl + C;      // kx + ky
    double* zb = zl + 2 * C;  // the bound on what underflow lost, likewise scaled
    int gp = 1;
    while (gp * 2 <= 32 && gp * 2 <= K && gp * 2 * C <= nt) gp *= 2;
    const int g = threadIdx.x / gp, l = threadIdx.x % gp, groups = nt / gp;
    // The butterflies of a group (all lanes of every warp take part: the rounds are the
    // same for every thread).
    auto sum = [&](double v) {
        for (int off = gp >> 1; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off, gp);
        return v;
    };
    auto max = [&](double v) {
        for (int off = gp >> 1; off > 0; off >>= 1) {
            const double o = __shfl_xor_sync(0xffffffffu, v, off, gp);
            v = v > o ? v : o;
        }
        return v;
    };
    for (int j0 = 0; j0 < C; j0 += groups) {
        const int j = j0 + g;
        const bool on = j < C;
        const int jc = on ? j : 0;
        // The forward G after step m, the reverse G before its last update (mantissa, exponent).
        const double gmf = qf[jc], gmr = qr[C + jc];
        const int gxf = (int)qf[8 * C + jc], gxr = (int)qr[9 * C + jc];
        const int ff = (int)qf[5 * C + jc], fr = (int)qr[5 * C + jc];
        // Starts m-a >= the window's start, ends m+c with c <= ncr (none for a lane off).
        const int na = on ? (K < m - ff ? K : m - ff) : 0;
        const int ncr = on ? (K - 1 < L - m - fr ? K - 1 : L - m - fr) : -1;
        const double* rf = sf + (i64)jc * K;
        const double* rr = sr + (i64)jc * K;
        // Each side scaled by its largest entry: x_a = entry·gmf·2^-kxe, whose true value is
        // x_a·2^(kxe + gxf); likewise y_c.
        double mxe = 0.0, mye = 0.0;
        for (int a1 = 1 + l; a1 <= na; a1 += gp) {
            const double x = rf[mt_mod(m - a1, K)];
            mxe = mxe > x ? mxe : x;
        }
        for (int c = l; c <= ncr; c += gp) {
            const double y = rr[mt_mod(L - m - c, K)];
            mye = mye > y ? mye : y;
        }
        mxe = max(mxe);
        mye = max(mye);
        const int kxe = mxe > 0.0 ? mt_expo(mxe) : 0, kye = mye > 0.0 ? mt_expo(mye) : 0;
        const double sx = gmf * mt_pow2(-kxe), sy = gmr * mt_pow2(-kye);
        const int r0 = mt_mod(L - m, K);  // the slot of end m (c = 0); end m+c at r0 - c
        // A product x·s·sy that underflows, or an x below the subnormals, is at most 2^-1000
        // of the largest (x and y are scaled to at most 2): `under` bounds them all, where
        // something is there to lose (`live`).
        double z = 0.0, sxf = 0.0, syr = 0.0, live = 0.0;
        for (int a1 = 1 + l; a1 <= na; a1 += gp) {
            const double x = rf[mt_mod(m - a1, K)] * sx;
            const int nc = (K - a1 < ncr ? K - a1 : ncr);
            const double s = mt_dot(w.p.wl + (i64)jc * K + a1 - 1, rr, nc, r0, K);
            z += x * s * sy;
            sxf += x;
            live = x > 0.0 && s > 0.0 ? 1.0 : live;
        }
        for (int c = l; c <= ncr; c += gp) syr += rr[mt_mod(L - m - c, K)] * sy;
        z = sum(z);
        sxf = sum(sxf);
        syr = sum(syr);
        live = max(live);
        if (on && l == 0) {
            const double emd = __ldg(&w.p.emd[j]);
            // Lost entries (λ, in entry units), in the same scaled units.
            const double lf =
                (qf[4 * C + j] >= m - K && qf[3 * C + j] > 0.0) ? qf[3 * C + j] * sx * K : 0.0;
            const double lr =
                (qr[4 * C + j] >= L - m - K && qr[3 * C + j] > 0.0) ? qr[3 * C + j] * sy * K : 0.0;
            const double under = live > 0.0 ? (double)K * K * 0x1p-1000 : 0.0;
            zz[j] = z * emd;
            zk[j] = (double)(kxe + gxf + kye + gxr);
            zb[j] = emd * (lf * (syr + lr) + sxf * lr + under);
        }
    }
    __syncthreads();
    // Every thread combines the labels in order.
    int top = -100000;
    for (int c = 0; c < C; ++c)
        if (zz[c] > 0.0) {
            const int k = (int)zk[c] + mt_expo(zz[c]);
            top = top > k ? top : k;
        }
    if (top == -100000) top = 0;
    double z = 0.0, err = 0.0;
    for (int c = 0; c < C; ++c) {
        z += mt_scale(zz[c], (i64)zk[c] - top);
        err += mt_scale(zb[c], (i64)zk[c] - top);
    }
    const i64 Ef = (i64)__double_as_longlong(qf[10 * C]);
    const i64 Er = (i64)__double_as_longlong(qr[10 * C + 1]);
    Met r;
    r.z = z;
    r.EZ = Ef + Er + top;
    r.lost = err > mt_err() * z;
    __syncthreads();
    // Each label's share relative to 2^EZ, for the position marginal at m-1.
    for (int j = threadIdx.x; j < C; j += blockDim.x) zz[j] = mt_scale(zz[j], (i64)zk[j] - top);
    __syncthreads();
    return r;
}

// Forward only: the meet of each sequence (one block per sequence).
__device__ void meet_z(const MArgs& a) {
    const int b = mt_seq(a, blockIdx.x);
    MEET_SMEM(smem);
    Sweep w(a, b, 0, smem, false, 0);
    const i64 sl = state_len(w.K, w.C);
    const double* sf = a.st + ((i64)b * 2) * sl;
    const Met r = mt_meet(w, sf, sf + sl, w.sF);
    if (threadIdx.x == 0) {
        a.out[2 * b] = r.z > 0.0 ? log(r.z) + (double)r.EZ * 0.69314718055994530942 : neg_inf();
        a.out[2 * b + 1] = 0.0;
        if (r.lost) atomicOr(&a.flag[b], 4);
    }
}

// Second halves: the meet, then each sweep through the rest of the sequence with the other's
// saved rows, the marginals and their position sums, and the tail (boundary marginals).
template <bool RS, int CT>
__device__ void meet_b(const MArgs& a) {
    const int b = mt_seq(a, blockIdx.x >> 1), side = blockIdx.x & 1;
    MEET_SMEM(smem);
    Sweep w(a, b, side, smem, true, CT);
    mt_place<RS>(w);
    mt_params(w);
    const int C = w.C, K = w.K, L = w.L, m = w.m;
    const i64 sl = state_len(K, C);
    const double* sf = a.st + ((i64)b * 2) * sl;
    const double* sr = sf + sl;
    if (threadIdx.x == 0) *w.flg = 0;
    double* zl = w.sF;  // scratch until the first staging
    const Met r = mt_meet(w, sf, sr, zl);
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
    const i64 rkc = (i64)K * C;
    double mu = 0.0, ep = 0.0, d1 = 0.0;
    if (w.act) {
        const int j = w.j;
        const double emv = mt_scale(kz, a.ex[rowf + m] + a.ex[rowr + L - m] - r.EZ) *
                           a.alpha[(rowf + m) * C + j] * a.u[(rowr + L - m) * C + j] *
                           __ldg(&Par(a, 1).emt[j]);
        const double bmv = mt_scale(kz, a.ex[rowf + m - 1] + a.ex[rowr + L - m + 1] - r.EZ) *
                           a.u[(rowf + m - 1) * C + j] * a.alpha[(rowr + L - m + 1) * C + j] *
                           __ldg(&Par(a, 0).emt[j]);
        mu = zl[j] * kz;
        ep = side ? bmv : emv;
        w.mus[j] = mu;  // the first block's copy (`mt_outputs`)
        w.eps[j] = ep;
        if (side == 0) {
            const i64 o = ((i64)b * a.T + m - 1) * C + j;
            a.gsc[o] = g * mu;
            a.gbb[o] = bmv;
            if (a.geb) a.geb[o] = g * emv;  // end at m: end_boundary[m-1]
            if (m == 1) a.pst[(i64)b * C + j] = bmv;
            if (m == L) a.pen[(i64)b * C + j] = emv;
            // The segment (m-1, 1, j): the a = 1, c = 0 term of the meet.
            if ((int)sf[rkc + 5 * C + j] <= m - 1 && (int)sr[rkc + 5 * C + j] <= L - m) {
                const double x = sf[(i64)j * K + mt_mod(m - 1, K)];
                const double y = sr[(i64)j * K + mt_mod(L - m, K)];
                if (x > 0.0 && y > 0.0) {
                    const int kx = mt_expo(x), ky = mt_expo(y);
                    const double v = mt_pow2(-kx) * x * sf[rkc + j] * mt_pow2(-ky) * y *
                                     sr[rkc + C + j] * __ldg(&w.p.wl[(i64)j * K]) *
                                     __ldg(&w.p.emd[j]) * kz;
                    const i64 n = (i64)kx + ky + (int)sf[rkc + 8 * C + j] +
                                  (int)sr[rkc + 9 * C + j] +
                                  (i64)__double_as_longlong(sf[rkc + 10 * C]) +
                                  (i64)__double_as_longlong(sr[rkc + 10 * C + 1]) - r.EZ;
                    d1 = mt_scale(v, n);
                }
            }
        }
    }
    if (a.acc)
        for (int x = threadIdx.x; x < K * C + C * C; x += blockDim.x) w.pd[x] = 0.0;
    __syncthreads();
    // The own ring and state; the marginals accumulate in the (zeroed) outputs or in shared
    // memory, duration 1's from the meet's segment (m-1, 1).
    mt_load(w, side ? sr : sf);
    if (w.act && r.z > 0.0) w.pd[w.j] = d1;
    const int first = side ? L - m + 2 : m + 1;
    if (r.z > 0.0) mt_run<MT_MARG, CT>(w, first, L, r.EZ, kz, oal, ou, oex, oerm);
    __syncthreads();
    if (a.acc) {
        for (int x = threadIdx.x; x < K * C; x += blockDim.x) w.gpd[x] = w.pd[x];
        for (int x = threadIdx.x; x < C * C; x += blockDim.x) w.gpt[x] = w.pt[x];
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

// One kernel per placement of the ring (suffix _r: shared memory), so that shared memory is
// addressed directly, and per label width: the general kernels (any C up to 64), and with
// MT_CT = 8, 16 or 32 defined, those with phase 2 compiled for that width (suffix _cN;
// `mt_fast`), whose rows are padded to it. MT_ALL defines them all. Each module is compiled
// for one MT_P (steps a block: 8 for the general kernels, 8 or 16 for the others).
#ifndef MT_LB  // the most threads a block (`max_threads` of src/meet.rs)
#if MT_P > 8
#define MT_LB 256
#else
#define MT_LB 512
#endif
#endif
#define MT_K extern "C" __global__ void __launch_bounds__(MT_LB)
#define MT_KERNELS(N, CT)                                                 \
    MT_K meet_fwd_log##N(MArgs a) { meet_a<MT_FWD, false, CT>(a); }      \
    MT_K meet_fwd_log##N##_r(MArgs a) { meet_a<MT_FWD, true, CT>(a); }   \
    MT_K meet_save_log##N(MArgs a) { meet_a<MT_SAVE, false, CT>(a); }    \
    MT_K meet_save_log##N##_r(MArgs a) { meet_a<MT_SAVE, true, CT>(a); } \
    MT_K meet_bwd_log##N(MArgs a) { meet_b<false, CT>(a); }              \
    MT_K meet_bwd_log##N##_r(MArgs a) { meet_b<true, CT>(a); }
// Every module has its own meet_z_log: it lays out shared memory as its sweeps do, which
// depends on MT_P.
MT_K meet_z_log(MArgs a) { meet_z(a); }
#if !defined(MT_CT) || defined(MT_ALL)
MT_KERNELS(, 0)
#endif
#if MT_CT == 8 || defined(MT_ALL)
MT_KERNELS(_c8, 8)
#endif
#if MT_CT == 16 || defined(MT_ALL)
MT_KERNELS(_c16, 16)
#endif
#if MT_CT == 32 || defined(MT_ALL)
MT_KERNELS(_c32, 32)
#endif
