// Runs the static-transition kernels of kernels/streaming.cu under the CPU emulation (emu.h)
// on one call:
//
//     stream_main INPUT OUTPUT
//
// INPUT (little-endian): i64 header B, T, K, C, team, threads, ch, mode (0: forward log, 1:
// Viterbi, 2: forward entropy, 3: forward log saving α and u, then the backward), ring_f,
// bytes_f (the forward's ring in shared memory, its dynamic shared memory), ring_b, acc_b,
// bytes_b (the backward's), nb (blocks a sequence: above 1, modes 0, 1 and 3 run
// kernels/spread.cu's kernels on nb blocks a sequence, with bytes_f and bytes_b their shared
// memory), bnd (1: begin and end boundaries follow the scores), near, round (near above 0:
// the forward of modes 0, 1 and 3 runs kernels/pipe.cu's kernels instead, with that near
// depth and steps a round, on nb blocks a sequence); i64 lengths[B]; f64 scores[B·T·C], transition[C·C] (i·C + j),
// duration[K·C] ((d-1)·C + j), start[C], end[C], upstream[B]. The layouts are the host's
// (`logdomain::smem`).
//
// OUTPUT: f64 out[2·B] (x, h); for mode 1 then best durations and best previous labels
// (B·(T+1)·C each, as f64) and α_L (B·C); for mode 3 then the scores' gradient (B·T·C), the
// boundary marginals (B·T), duration (B·K·C), transition (B·C·C), start and end marginals
// (B·C each), each per sequence and scaled by the upstream gradient where the kernels scale
// them.
#include "emu.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#define STREAM_SMEM(name) double* name = emu::cur->smem.data()
#define STREAM_SMEM_END(end) MT_SMEM_END(end)
#include "pipe.cu"

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: stream_main INPUT OUTPUT\n");
        return 2;
    }
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const auto h = emu::read<long long>(in, 17);
    const long long B = h[0], T = h[1], K = h[2], C = h[3], team = h[4], threads = h[5];
    const long long ch = h[6], mode = h[7], nb = h[13], near = h[15], round = h[16];
    const auto len = emu::read<long long>(in, B);
    const auto sc = emu::read<double>(in, B * T * C);
    const auto bbv = emu::read<double>(in, h[14] ? B * T * C : 0);
    const auto ebv = emu::read<double>(in, h[14] ? B * T * C : 0);
    const auto tr = emu::read<double>(in, C * C);
    const auto dur = emu::read<double>(in, K * C);
    const auto st = emu::read<double>(in, C);
    const auto en = emu::read<double>(in, C);
    const auto up = emu::read<double>(in, B);
    fclose(in);

    const size_t bkc = B * K * C, saved = B * (T + 1) * C, btc = B * T * C;
    std::vector<double> ring(bkc), ringh(bkc), ring2(bkc), out(2 * B), last(B * C);
    std::vector<double> alpha(saved), u(saved), lz(B);
    std::vector<int> bpd(saved), bpi(saved);
    std::vector<double> gsc(btc), gbb(btc), geb(btc), bm(B * T), pdur(bkc), ptr(B * C * C), pst(B * C),
        pen(B * C);
    Args a{};
    a.sc = sc.data();
    a.bb = h[14] ? bbv.data() : nullptr;
    a.eb = h[14] ? ebv.data() : nullptr;
    a.tr = tr.data();
    a.dur = dur.data();
    a.st = st.data();
    a.en = en.data();
    a.len = len.data();
    a.up = up.data();
    a.ring = ring.data();
    a.ringh = ringh.data();
    a.ring2 = ring2.data();
    a.out = out.data();
    a.T = T;
    a.K = K;
    a.C = C;
    a.team = (int)team;
    a.ch = (int)ch;
    a.smem_ring = (int)h[8];
    const size_t bytes_f = h[9], bytes_b = h[12];
    void (*fwd)(Args) = mode == 1 ? fwd_static_max : mode == 2 ? fwd_static_ent : fwd_static_log;
    if (mode == 1) {
        a.bpd = bpd.data();
        a.bpi = bpi.data();
        a.last = last.data();
    }
    if (mode == 3) {
        a.alpha = alpha.data();
        a.u = u.data();
    }
    // The spread kernels' partials, barriers' counters and duration marginals' copies (zero).
    const bool spread = nb > 1 && mode != 2;
    const size_t np = 2 * B * C * nb;
    std::vector<double> pm(np), ps(np), pdc(spread && mode == 3 ? B * nb * K * C : 0);
    std::vector<int> pa(np);
    std::vector<unsigned long long> bar(B);
    auto fresh = [&] {
        std::fill(bar.begin(), bar.end(), 0ULL);
        return Spread{pm.data(), ps.data(), pa.data(), bar.data(), pdc.data(), (int)nb, (int)near,
                      (int)round, 0};
    };
    if (spread && near > 0) {
        // The pipeline's buffers are carved from the (zero) ring.
        std::fill(ring.begin(), ring.end(), 0.0);
        emu::launch_coop(mode == 1 ? fwd_pipe_max : fwd_pipe_log, (unsigned)(B * nb),
                         (unsigned)threads, bytes_f, a, fresh());
    } else if (spread) {
        emu::launch_coop(mode == 1 ? fwd_spread_max : fwd_spread_log, (unsigned)(B * nb),
                         (unsigned)threads, bytes_f, a, fresh());
    } else {
        emu::launch(fwd, B, threads, bytes_f, a);
    }
    if (mode == 3) {
        for (long long b = 0; b < B; ++b) lz[b] = out[2 * b];
        Args g = a;
        g.ring = ring.data();
        g.ring2 = ring2.data();
        g.lz = lz.data();
        g.gsc = gsc.data();
        g.gbb = h[14] ? gbb.data() : gsc.data();
        g.geb = geb.data();
        g.bmarg = bm.data();
        g.pdur = pdur.data();
        g.ptr = ptr.data();
        g.pst = pst.data();
        g.pen = pen.data();
        g.smem_ring = (int)h[10];
        g.smem_acc = (int)h[11];
        if (spread)
            emu::launch_coop(bwd_spread_log, (unsigned)(B * nb), (unsigned)threads, bytes_b, g,
                             fresh());
        else
            emu::launch(bwd_static_log, B, threads, bytes_b, g);
    }
    FILE* o = fopen(argv[2], "wb");
    if (!o) return 2;
    auto wr = [&](const std::vector<double>& v) { fwrite(v.data(), sizeof(double), v.size(), o); };
    auto wri = [&](const std::vector<int>& v) { wr(std::vector<double>(v.begin(), v.end())); };
    wr(out);
    if (mode == 1) {
        wri(bpd);
        wri(bpi);
        wr(last);
    }
    if (mode == 3) {
        wr(gsc);
        wr(bm);
        wr(pdur);
        wr(ptr);
        wr(pst);
        wr(pen);
    }
    fclose(o);
    return 0;
}
