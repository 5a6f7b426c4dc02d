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
//
// This header: the constants, the argument block (`MArgs`), the prepared parameters (`Par`)
// and the small arithmetic helpers of the meet kernels. `meet_sweep.cuh` holds a sweep's
// state and its rows, `meet_phases.cuh` the three phases of a block of steps, `meet.cu` the
// meet and the kernels.
#ifndef KERNELS_MEET_COMMON_CUH
#define KERNELS_MEET_COMMON_CUH

#include "semiring.cuh"

#ifndef MEET_SMEM
#define MEET_SMEM(name) extern __shared__ double name[]
#endif
#ifndef MT_SMEM_END  // (the CPU emulation checks the end of the layout against the launch's)
#define MT_SMEM_END(end)
#endif

// Constants the host shares (`src/kernel/mod.rs`, passed to NVRTC and the emulation as
// defines): the largest finite parameter's magnitude (RANGE) and the steps a block (STEPS or
// STEPS_WIDE).
#ifndef MT_RANGE
#error "MT_RANGE is defined by the host (src/kernel/mod.rs: RANGE)"
#endif
#define MT_RB 16  // a block ends with a rebase where G is beyond 2^±(16+32)
#ifndef MT_SELF
#define MT_SELF 300  // a label rebases itself in a block where G is beyond 2^±(300+32)
#endif
#define MT_STEP 256
#ifndef MT_P
#error "MT_P (steps a block) is defined by the host (src/kernel/mod.rs: STEPS, STEPS_WIDE)"
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
// sizeof(MArgs) and each field's offset against the host's `MeetArgs` (generated by the host).
#include "MArgs_layout.cuh"

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

#endif  // KERNELS_MEET_COMMON_CUH
