// The log semiring's streaming forward and backward with a static transition, in the linear
// domain, from both ends of each sequence at once: the meet of the two sweeps and the
// kernels. The design is told in meet_common.cuh; the sweeps are in meet_sweep.cuh and
// meet_phases.cuh.
#ifndef KERNELS_MEET_CU
#define KERNELS_MEET_CU

#include "meet_phases.cuh"

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
#ifndef MT_LB  // the most threads a block (`max_threads` of src/kernel/mod.rs), from the host
#error "MT_LB is defined by the host (src/kernel/mod.rs: max_threads)"
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

#endif  // KERNELS_MEET_CU
