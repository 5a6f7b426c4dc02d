// The edge form on the GPU (the exact and scan algorithms): the generic recurrences of the
// model page (crates/semicrf-core/src/model.md, "Edge form") over a materialised edge tensor
//
//     α_0(i) = one,   α_t(j) = ⊕_{d ≤ min(K, t)} ⊕_i α_{t-d}(i) ⊗ E[t-d, d-1, j, i]
//     β_L(j) = one,   β_s(i) = ⊕_{d ≤ min(K, L-s)} ⊕_j E[s, d-1, j, i] ⊗ β_{s+d}(j)
//     μ[s, d-1, j, i] = exp(α_s(i) + E[s, d-1, j, i] + β_{s+d}(j) - log Z)
//
// One thread block per sequence walks the positions in order. Teams of `team` lanes each take
// a label (team g: labels g, g + nteams, ...) and split its K·C items between their lanes
// (lane l: items l, l + team, ...), then reduce them with the semiring's butterfly
// (semiring.cuh), so every reduction has a fixed order. α and β are whole (T+1, C) tables in
// global memory, a factor K·C smaller than the edges they are computed from; a barrier after
// each position makes its row visible to the whole block before the next position reads it.
// The marginals are one independent thread per edge, written over the edges.

struct EArgs {
    double* e;          // (B, T, K, C, C) edges [((s·K + d-1)·C + j)·C + i]; marginals after
    const double* v0;   // (B, K, C) the virtual start's item per (d, j) (entropy), or null
    const i64* len;     // (B)
    double* alpha;      // (B, T+1, C)
    double* alphah;     // (B, T+1, C) entropies of α (entropy semiring), or null
    double* beta;       // (B, T+1, C) (backward)
    int* bp;            // (B, T+1, C) best (d-1)·C + i (Viterbi), or null
    double* out;        // (B, 2) forward result (x, h)
    const double* lz;   // (B) log Z (marginals)
    const double* up;   // (B) upstream gradients (marginals)
    double* bm;         // (B, T) boundary marginals
    i64 B, T, K, C;
    int team;
};

#define EDGE(a, b, s, d, j, i) \
    ((a).e[((((i64)(b) * (a).T + (s)) * (a).K + ((d) - 1)) * (a).C + (j)) * (a).C + (i)])

// Forward in semiring SR; with `a.bp` set (SR_MAX) it records the best (d-1)·C + i.
//
// The C sources of a first segment (t - d = 0, the virtual start) are one segmentation, not
// C: for the entropy they enter as the one item v0[d-1, j] = (⊕_i E[0, d-1, j, i], 0). For log
// and max, C items with α_0 = one give the same value, and Viterbi keeps the best i.
template <int SR>
__device__ void edge_fwd(const EArgs& a) {
    const int b = blockIdx.x;
    const i64 L = a.len[b], K = a.K, C = a.C;
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    double* al = a.alpha + (i64)b * (a.T + 1) * C;
    double* ah = SR == SR_ENT ? a.alphah + (i64)b * (a.T + 1) * C : nullptr;
    int* bp = a.bp ? a.bp + (i64)b * (a.T + 1) * C : nullptr;
    for (i64 j = threadIdx.x; j < C; j += blockDim.x) {
        al[j] = 0.0;
        if (SR == SR_ENT) ah[j] = 0.0;
        if (bp) bp[j] = 0;
    }
    __syncthreads();
    for (i64 t = 1; t <= L; ++t) {
        const i64 nd = t < K ? t : K;
        const i64 n = nd * C;
        // Every lane runs every round (the butterfly needs whole warps).
        for (i64 jb = 0; jb < C; jb += nteams) {
            const i64 j = jb + g;
            Acc<SR> acc;
            acc.init();
            if (j < C) {
                for (i64 x = l; x < n; x += team) {
                    const i64 d = x / C + 1, i = x - (d - 1) * C, s = t - d;
                    if (SR == SR_ENT && s == 0) {
                        if (i == 0) acc.add(a.v0[((i64)b * K + d - 1) * C + j], 0.0, (int)x);
                        continue;
                    }
                    const double v = al[s * C + i] + EDGE(a, b, s, d, j, i);
                    acc.add(v, SR == SR_ENT ? ah[s * C + i] : 0.0, (int)x);
                }
            }
            acc.team_reduce(team);
            if (j < C && l == 0) {
                al[t * C + j] = acc.x();
                if (SR == SR_ENT) ah[t * C + j] = acc.h();
                if (bp) bp[t * C + j] = acc.m == neg_inf() ? 0 : acc.arg;
            }
        }
        __syncthreads();
    }
    // ⊕_j α_L(j) by the first team.
    if (g == 0) {
        Acc<SR> acc;
        acc.init();
        for (i64 j = l; j < C; j += team) acc.add(al[L * C + j], SR == SR_ENT ? ah[L * C + j] : 0.0, (int)j);
        acc.team_reduce(team);
        if (l == 0) {
            a.out[2 * b] = acc.x();
            a.out[2 * b + 1] = acc.h();
        }
    }
}

// β of the log semiring, from the last position down: team g takes source labels
// i = g, g + nteams, ..., its lanes the items (d-1)·C + j.
__device__ void edge_bwd(const EArgs& a) {
    const int b = blockIdx.x;
    const i64 L = a.len[b], K = a.K, C = a.C;
    const int team = a.team, nteams = blockDim.x / team;
    const int g = threadIdx.x / team, l = threadIdx.x % team;
    double* be = a.beta + (i64)b * (a.T + 1) * C;
    for (i64 j = threadIdx.x; j < C; j += blockDim.x) be[L * C + j] = 0.0;
    __syncthreads();
    for (i64 s = L - 1; s >= 0; --s) {
        const i64 nd = L - s < K ? L - s : K;
        const i64 n = nd * C;
        for (i64 ib = 0; ib < C; ib += nteams) {
            const i64 i = ib + g;
            Acc<SR_LOG> acc;
            acc.init();
            if (i < C) {
                for (i64 x = l; x < n; x += team) {
                    const i64 d = x / C + 1, j = x - (d - 1) * C;
                    acc.add(EDGE(a, b, s, d, j, i) + be[(s + d) * C + j], 0.0, (int)x);
                }
            }
            acc.team_reduce(team);
            if (i < C && l == 0) be[s * C + i] = acc.x();
        }
        __syncthreads();
    }
}

extern "C" __global__ void edge_fwd_log(const EArgs a) { edge_fwd<SR_LOG>(a); }
extern "C" __global__ void edge_fwd_max(const EArgs a) { edge_fwd<SR_MAX>(a); }
extern "C" __global__ void edge_fwd_ent(const EArgs a) { edge_fwd<SR_ENT>(a); }
extern "C" __global__ void edge_bwd_log(const EArgs a) { edge_bwd(a); }

// g_b · μ over every edge, in place of the edge (0 past a sequence's end, where a term is
// -inf, and for a sequence of log Z = -inf); one thread per edge.
extern "C" __global__ void edge_marg(const EArgs a) {
    const i64 K = a.K, C = a.C;
    const i64 n = a.B * a.T * K * C * C;
    for (i64 x = (i64)blockIdx.x * blockDim.x + threadIdx.x; x < n;
         x += (i64)gridDim.x * blockDim.x) {
        const i64 i = x % C, j = (x / C) % C, d = (x / (C * C)) % K + 1;
        const i64 s = (x / (K * C * C)) % a.T, b = x / (a.T * K * C * C);
        const i64 L = a.len[b];
        const double lz = a.lz[b];
        double m = 0.0;
        if (s + d <= L && lz != neg_inf()) {
            const i64 row = b * (a.T + 1) * C;
            const double al = a.alpha[row + s * C + i], be = a.beta[row + (s + d) * C + j];
            const double e = a.e[x];
            if (al != neg_inf() && be != neg_inf() && e != neg_inf())
                m = a.up[b] * exp(al + e + be - lz);
        }
        a.e[x] = m;
    }
}

// Boundary marginals P(a segment starts at s) = Σ_i exp(α_s(i) + β_s(i) - log Z), one thread
// per (b, s), labels summed in order.
extern "C" __global__ void edge_bm(const EArgs a) {
    const i64 C = a.C;
    for (i64 x = (i64)blockIdx.x * blockDim.x + threadIdx.x; x < a.B * a.T;
         x += (i64)gridDim.x * blockDim.x) {
        const i64 s = x % a.T, b = x / a.T;
        const double lz = a.lz[b];
        double m = 0.0;
        if (s < a.len[b] && lz != neg_inf()) {
            const i64 row = (b * (a.T + 1) + s) * C;
            for (i64 i = 0; i < C; ++i) {
                const double al = a.alpha[row + i], be = a.beta[row + i];
                if (al != neg_inf() && be != neg_inf()) m += exp(al + be - lz);
            }
        }
        a.bm[x] = m;
    }
}
