// Kernels around a call's inputs and outputs.
//
// `check_input`: the checks of potentials that are already on the device (the host checks its
// own arrays when they are built): for one (B, T, C) array, each sequence's first NaN or +inf, and
// what its magnitude bound needs (the `range` module of semicrf-core): the largest finite
// |x| of each of its positions, summed in position order, and where the largest of all is.
//
// One block per sequence. Its threads first take positions in turn and write each one's
// largest |x| (the first entry attaining it) and first NaN or +inf to the scratch arrays;
// after a barrier, thread 0 walks the positions in order, as the host does, so that the sum
// is the host's to the last bit.

struct CArgs {
    const void* x;     // (B, T, C): f32 when `f32in`, else f64
    const i64* len;    // (B)
    double* rowmax;    // (B, T) scratch: the largest finite |x| of each position (0 if none)
    int* rowarg;       // (B, T) scratch: its label (-1 if none)
    int* rowbad;       // (B, T) scratch: the first label holding NaN or +inf (-1 if none)
    double* bound;     // (B) in: the bound so far; out: plus this array's positions
    double* out;       // (B, 6) the largest: |x|, t, c, x; the first NaN or +inf: t, c (-1)
    i64 T, C;
    int f32in;
};

__device__ __forceinline__ double ck_ld(const CArgs& a, i64 i) {
    return a.f32in ? (double)((const float*)a.x)[i] : ((const double*)a.x)[i];
}

extern "C" __global__ void check_input(const CArgs a) {
    const i64 b = blockIdx.x;
    for (i64 t = threadIdx.x; t < a.T; t += blockDim.x) {
        const i64 row = b * a.T + t;
        double m = 0.0;
        int arg = -1, bad = -1;
        for (i64 c = 0; c < a.C; ++c) {
            const double x = ck_ld(a, row * a.C + c);
            if (x != x || x == -neg_inf()) {
                if (bad < 0) bad = (int)c;
            } else if (x != neg_inf() && fabs(x) > m) {
                m = fabs(x);
                arg = (int)c;
            }
        }
        a.rowmax[row] = m;
        a.rowarg[row] = arg;
        a.rowbad[row] = bad;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    double bound = a.bound[b], top = 0.0;
    i64 top_t = -1;
    for (i64 t = 0; t < a.len[b]; ++t) {
        const double r = a.rowmax[b * a.T + t];
        bound += r;
        if (r > top) {
            top = r;
            top_t = t;
        }
    }
    a.bound[b] = bound;
    double* o = a.out + 6 * b;
    o[0] = top;
    o[1] = (double)top_t;
    const int c = top_t >= 0 ? a.rowarg[b * a.T + top_t] : -1;
    o[2] = (double)c;
    o[3] = top_t >= 0 ? ck_ld(a, (b * a.T + top_t) * a.C + c) : 0.0;
    o[4] = -1.0;
    o[5] = -1.0;
    for (i64 t = 0; t < a.T; ++t) {
        const int bad = a.rowbad[b * a.T + t];
        if (bad >= 0) {
            o[4] = (double)t;
            o[5] = (double)bad;
            break;
        }
    }
}

// `meet_sum`: the batch's duration and transition marginals of `kernels/meet.cu`'s backward,
// weighted by the upstream gradient: for each of the K·C + C·C items, in ascending b,
//     acc += up[b] · (sweep 0's value + sweep 1's value)
// one thread per item, every operation rounded on its own (no fused multiply-add), so that
// the result is, bit for bit, what the host computes from the per-sweep values.
extern "C" __global__ void meet_sum(const double* pdur, const double* ptr, const double* up,
                                    double* red, const i64 B, const i64 KC, const i64 CC) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= KC + CC) return;
    const double* v = i < KC ? pdur : ptr;
    const i64 n = i < KC ? KC : CC, j = i < KC ? i : i - KC;
    double acc = 0.0;
    for (i64 b = 0; b < B; ++b) {
        const double y = v[2 * b * n + j], z = v[(2 * b + 1) * n + j];
        acc = __dadd_rn(acc, __dmul_rn(up[b], __dadd_rn(y, z)));
    }
    red[i] = acc;
}
