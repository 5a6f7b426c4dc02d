// Runs the kernels of kernels/meet.cu under the CPU emulation (emu.h) on one prepared call:
//
//     meet_main INPUT OUTPUT
//
// INPUT (little-endian): i64 header B, T, K, C, H, ch, threads, ring_a, ring_b, bytes_a,
// bytes_b, backward, has_bb, has_eb, ct (the kernels' label width: 0, 8, 16 or 32), acc
// (the second kernel's accumulators in shared memory); i64 lengths[B]; f64 scores[B·T·C];
// begin boundary and end boundary likewise where present; i64 n; f64 parameters[n] (`meet::params`); f64
// upstream[B]. The layouts (`ring_*`: the ring in shared memory; `bytes_*`: dynamic shared
// memory) are the host's (`meet::layout`) for the first and the second kernel.
//
// OUTPUT: f64 out[2·B] (log Z, 0), f64 flag[B]; for a backward then gsc, gbb, geb (B·T·C
// each), bmarg (B·T), pdur (B·2·K·C), ptr (B·2·C·C), pst, pen (B·C each).
#include "emu.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "semiring.cuh"
#define MT_ALL
#include "meet.cu"

// The kernels of one label width.
struct Set {
    void (*fwd)(MArgs), (*fwd_r)(MArgs), (*save)(MArgs), (*save_r)(MArgs), (*bwd)(MArgs),
        (*bwd_r)(MArgs);
};
#define MT_SET(N)                                                                        \
    Set {                                                                                \
        meet_fwd_log##N, meet_fwd_log##N##_r, meet_save_log##N, meet_save_log##N##_r, \
            meet_bwd_log##N, meet_bwd_log##N##_r                                         \
    }

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: meet_main INPUT OUTPUT\n");
        return 2;
    }
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const auto h = emu::read<long long>(in, 16);
    const long long B = h[0], T = h[1], K = h[2], C = h[3], H = h[4], ch = h[5], threads = h[6];
    const bool ring_a = h[7], ring_b = h[8], backward = h[11], has_bb = h[12], has_eb = h[13];
    const size_t bytes_a = h[9], bytes_b = h[10];
    const Set set = h[14] == 8    ? MT_SET(_c8)
                    : h[14] == 16 ? MT_SET(_c16)
                    : h[14] == 32 ? MT_SET(_c32)
                                  : MT_SET();
    const auto len = emu::read<long long>(in, B);
    const size_t btc = B * T * C;
    const auto sc = emu::read<double>(in, btc);
    const auto bb = emu::read<double>(in, has_bb ? btc : 0);
    const auto eb = emu::read<double>(in, has_eb ? btc : 0);
    const auto npar = emu::read<long long>(in, 1);
    const auto par = emu::read<double>(in, npar[0]);
    const auto up = emu::read<double>(in, B);
    fclose(in);

    const long long S = K * C + 10 * C + 4;
    std::vector<double> st(B * 2 * S), alpha(B * 2 * H * C), u(B * 2 * H * C), erm(B * 2 * H);
    std::vector<double> ring(B * 2 * (K + MT_P) * C), out(2 * B), gsc(btc), gbb(btc), geb(btc);
    std::vector<double> bm(B * T), pdur(B * 2 * K * C), ptr(B * 2 * C * C), pst(B * C), pen(B * C);
    std::vector<long long> ex(B * 2 * H);
    std::vector<int> flag(B);
    MArgs a{};
    a.sc = sc.data();
    a.bb = has_bb ? bb.data() : nullptr;
    a.eb = has_eb ? eb.data() : nullptr;
    a.par = par.data();
    a.len = len.data();
    a.st = st.data();
    a.alpha = alpha.data();
    a.u = u.data();
    a.ex = ex.data();
    a.erm = erm.data();
    a.ring = ring.data();
    a.out = out.data();
    a.flag = flag.data();
    a.up = up.data();
    a.gsc = gsc.data();
    a.gbb = gbb.data();
    a.geb = has_eb ? geb.data() : nullptr;
    a.bmarg = bm.data();
    a.pdur = pdur.data();
    a.ptr = ptr.data();
    a.pst = pst.data();
    a.pen = pen.data();
    a.T = T;
    a.K = K;
    a.C = C;
    a.H = H;
    a.ch = (int)ch;
    a.f32in = 0;
    if (!backward) {
        emu::launch(ring_a ? set.fwd_r : set.fwd, 2 * B, threads, bytes_a, a);
        emu::launch(meet_z_log, B, threads, bytes_a, a);
    } else {
        emu::launch(ring_a ? set.save_r : set.save, 2 * B, threads, bytes_a, a);
        a.acc = (int)h[15];
        emu::launch(ring_b ? set.bwd_r : set.bwd, 2 * B, threads, bytes_b, a);
    }
    FILE* o = fopen(argv[2], "wb");
    if (!o) return 2;
    auto wr = [&](const std::vector<double>& v) { fwrite(v.data(), sizeof(double), v.size(), o); };
    wr(out);
    wr(std::vector<double>(flag.begin(), flag.end()));
    if (backward) {
        wr(gsc);
        wr(gbb);
        wr(geb);
        wr(bm);
        wr(pdur);
        wr(ptr);
        wr(pst);
        wr(pen);
    }
    fclose(o);
    return 0;
}
