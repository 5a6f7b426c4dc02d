// Semirings of the streaming kernels: one accumulator type per semiring, reduced in a fixed
// order (each lane over its own items in increasing index, then a butterfly across the team),
// so that every result is bitwise reproducible from run to run.
//
// An element is a pair (x, h): x the log-weight, h the entropy (ignored by log and max).
// Every reduction subtracts its maximum and skips items of log-weight -inf, so no
// `-inf - -inf` is ever formed (the model page, crates/semicrf-core/src/model.md, §4 and §8).
#ifndef KERNELS_SEMIRING_CUH
#define KERNELS_SEMIRING_CUH

#define SR_LOG 0
#define SR_MAX 1
#define SR_ENT 2

typedef long long i64;

__device__ __forceinline__ double neg_inf() { return __longlong_as_double(0xfff0000000000000ULL); }

template <int SR>
struct Acc {
    double m;  // the largest log-weight so far
    double s;  // Σ exp(x_i - m)                          (log, entropy)
    double t;  // Σ exp(x_i - m) · (h_i + m - x_i)        (entropy; every term >= 0)
    int arg;   // the smallest index attaining m          (max)

    __device__ __forceinline__ void init() {
        m = neg_inf();
        s = 0.0;
        t = 0.0;
        arg = 0x7fffffff;
    }

    __device__ __forceinline__ void add(double x, double h, int idx) {
        if (SR == SR_MAX) {
            if (x > m || (x == m && idx < arg)) {
                m = x;
                arg = idx;
            }
            return;
        }
        if (x == neg_inf()) return;
        if (m == neg_inf()) {
            m = x;
            s = 1.0;
            t = h;
            return;
        }
        if (x > m) {
            double f = exp(m - x);
            if (SR == SR_ENT) t = f * (t + (x - m) * s) + h;
            s = s * f + 1.0;
            m = x;
        } else {
            double e = exp(x - m);
            s += e;
            if (SR == SR_ENT) t += e * (h + (m - x));
        }
    }

    __device__ __forceinline__ void merge(double om, double os, double ot, int oarg) {
        if (SR == SR_MAX) {
            if (om > m || (om == m && oarg < arg)) {
                m = om;
                arg = oarg;
            }
            return;
        }
        if (om == neg_inf()) return;
        if (m == neg_inf()) {
            m = om;
            s = os;
            t = ot;
            return;
        }
        // big absorbs small: scale small by exp(small.m - big.m) <= 1.
        double bm = m, bs = s, bt = t, sm = om, ss = os, st = ot;
        if (om > m) {
            bm = om; bs = os; bt = ot;
            sm = m; ss = s; st = t;
        }
        double f = exp(sm - bm);
        s = bs + ss * f;
        if (SR == SR_ENT) t = bt + f * (st + (bm - sm) * ss);
        m = bm;
    }

    // Butterfly across a team of `width` lanes (a power of two, at most 32); every lane of the
    // warp must call it. Afterwards every lane of the team holds the team's result.
    __device__ __forceinline__ void team_reduce(int width) {
        for (int off = width >> 1; off > 0; off >>= 1) {
            double om = __shfl_xor_sync(0xffffffffu, m, off, width);
            double os = 0.0, ot = 0.0;
            int oa = 0;
            if (SR == SR_MAX) {
                oa = __shfl_xor_sync(0xffffffffu, arg, off, width);
            } else {
                os = __shfl_xor_sync(0xffffffffu, s, off, width);
                if (SR == SR_ENT) ot = __shfl_xor_sync(0xffffffffu, t, off, width);
            }
            // The lower lane of each pair keeps its own items first: a fixed order on both.
            int lane = threadIdx.x & (width - 1);
            if ((lane & off) == 0) {
                merge(om, os, ot, oa);
            } else {
                double km = m, ks = s, kt = t;
                int ka = arg;
                m = om; s = os; t = ot; arg = oa;
                merge(km, ks, kt, ka);
            }
        }
    }

    // The log-weight of the reduction.
    __device__ __forceinline__ double x() const {
        if (SR == SR_MAX) return m;
        return m == neg_inf() ? m : m + log(s);
    }

    // The entropy of the reduction (entropy semiring; 0 for an empty one).
    __device__ __forceinline__ double h() const {
        if (SR != SR_ENT || m == neg_inf()) return 0.0;
        double ls = log(s);
        return t / s + ls;
    }
};

// Plain sum across a team, butterfly order (the same on every lane).
__device__ __forceinline__ double team_sum(double v, int width) {
    for (int off = width >> 1; off > 0; off >>= 1) {
        double o = __shfl_xor_sync(0xffffffffu, v, off, width);
        int lane = threadIdx.x & (width - 1);
        v = (lane & off) == 0 ? v + o : o + v;
    }
    return v;
}

// A two-pass reduction across a team, for loops whose items are cheap to visit twice: first
// the maximum (and, for max, the smallest index attaining it), then the sums relative to it.
// The exponentials of the second pass are independent of each other (no chain of rescaling
// as in `Acc`), so a lane evaluates them back to back.
//
//     Two<SR> r; r.init();
//     for items: r.max(x, idx);      r.max_reduce(width);
//     for items: r.sum(x, h);        r.sum_reduce(width);
//     r.x(), r.h(), r.arg
template <int SR>
struct Two {
    double m, s, t;
    int arg;

    __device__ __forceinline__ void init() {
        m = neg_inf();
        s = 0.0;
        t = 0.0;
        arg = 0x7fffffff;
    }

    __device__ __forceinline__ void max(double x, int idx) {
        if (SR == SR_MAX) {
            if (x > m || (x == m && idx < arg)) {
                m = x;
                arg = idx;
            }
        } else {
            m = fmax(m, x);
        }
    }

    __device__ __forceinline__ void max_reduce(int width) {
        for (int off = width >> 1; off > 0; off >>= 1) {
            double om = __shfl_xor_sync(0xffffffffu, m, off, width);
            if (SR == SR_MAX) {
                int oa = __shfl_xor_sync(0xffffffffu, arg, off, width);
                if (om > m || (om == m && oa < arg)) {
                    m = om;
                    arg = oa;
                }
            } else {
                m = fmax(m, om);
            }
        }
    }

    // Every lane of the team must call it after max_reduce (m is the team's maximum).
    __device__ __forceinline__ void sum(double x, double h) {
        if (SR == SR_MAX || x == neg_inf()) return;
        const double e = exp(x - m);
        s += e;
        if (SR == SR_ENT) t += e * (h + (m - x));
    }

    __device__ __forceinline__ void sum_reduce(int width) {
        if (SR == SR_MAX) return;
        s = team_sum(s, width);
        if (SR == SR_ENT) t = team_sum(t, width);
    }

    __device__ __forceinline__ double x() const {
        if (SR == SR_MAX) return m;
        return m == neg_inf() ? m : m + log(s);
    }

    __device__ __forceinline__ double h() const {
        if (SR != SR_ENT || m == neg_inf()) return 0.0;
        return t / s + log(s);
    }
};

#endif  // KERNELS_SEMIRING_CUH
