// Runs the log-domain forward kernels of kernels/streaming.cu in their mode that saves the
// forward values (what posterior sampling reads) under the CPU emulation (emu.h):
//
//     sample_main INPUT OUTPUT
//
// INPUT (little-endian): i64 header B, T, K, C, team, threads, ch, dd (0: static (C, C)
// transition, fwd_static_log saving α and u; 1: (K, C, C), fwd_dd_log saving α), ring (the
// rings in shared memory), bytes (dynamic shared memory); i64 lengths[B]; f64 scores,
// begin boundary, end boundary [B·T·C] each (zeros for an absent boundary), transition[C·C] (i·C + j) or [K·C·C] ((d-1)·C·C + i·C + j), duration[K·C] ((d-1)·C + j),
// start[C], end[C]. The layout is the host's (`logdomain::smem`).
//
// OUTPUT: f64 out[2·B] (log Z, 0), then α and u, (B, T+1, C) each (u all zero for dd).
#include "emu.h"

#include <cstdio>
#include <vector>

#define STREAM_SMEM(name) double* name = emu::cur->smem.data()
#define STREAM_SMEM_END(end) MT_SMEM_END(end)
#include "streaming.cu"

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: sample_main INPUT OUTPUT\n");
        return 2;
    }
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const auto h = emu::read<long long>(in, 10);
    const long long B = h[0], T = h[1], K = h[2], C = h[3], team = h[4], threads = h[5];
    const long long ch = h[6], dd = h[7];
    const auto len = emu::read<long long>(in, B);
    const auto sc = emu::read<double>(in, B * T * C);
    const auto bb = emu::read<double>(in, B * T * C);
    const auto eb = emu::read<double>(in, B * T * C);
    const auto tr = emu::read<double>(in, dd ? K * C * C : C * C);
    const auto dur = emu::read<double>(in, K * C);
    const auto st = emu::read<double>(in, C);
    const auto en = emu::read<double>(in, C);
    fclose(in);

    const size_t bkc = B * K * C, saved = B * (T + 1) * C;
    std::vector<double> ring(bkc), ring2(bkc), out(2 * B), alpha(saved), u(saved);
    Args a{};
    a.sc = sc.data();
    a.bb = bb.data();
    a.eb = eb.data();
    a.tr = tr.data();
    a.dur = dur.data();
    a.st = st.data();
    a.en = en.data();
    a.len = len.data();
    a.ring = ring.data();
    a.ring2 = ring2.data();
    a.out = out.data();
    a.alpha = alpha.data();
    a.u = dd ? nullptr : u.data();
    a.T = T;
    a.K = K;
    a.C = C;
    a.team = (int)team;
    a.ch = (int)ch;
    a.smem_ring = (int)h[8];
    emu::launch(dd ? fwd_dd_log : fwd_static_log, B, threads, (size_t)h[9], a);
    FILE* o = fopen(argv[2], "wb");
    if (!o) return 2;
    auto wr = [&](const std::vector<double>& v) { fwrite(v.data(), sizeof(double), v.size(), o); };
    wr(out);
    wr(alpha);
    wr(u);
    fclose(o);
    return 0;
}
