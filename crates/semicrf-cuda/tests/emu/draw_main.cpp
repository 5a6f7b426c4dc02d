// Runs the sampling kernel of kernels/sample.cu (and its generator) under the CPU emulation
// (emu.h):
//
//     draw_main INPUT OUTPUT
//
// INPUT (little-endian) starts with an i64 mode.
//
// Mode 0, the draws: i64 B, T, K, C, dd (0: (C, C) transition with saved u; 1: (K, C, C)),
// N, I0, seed (its bits), has_bb, has_eb, warps (a block); i64 lengths[B]; f64 scores,
// begin boundary, end boundary [B·T·C] each (a boundary is passed as null where absent),
// transition [C·C] or [K·C·C], duration [K·C], start [C], end [C], α and u [B·(T+1)·C] each
// (u ignored for dd). OUTPUT: f64 the kernel's `cnt` [2·B·N + 1] (counts, offsets, words
// taken), then its `out` [B·N·T] (the packed segments).
//
// Mode 1, the generator: i64 n, then n keys (seed, sequence, sample); OUTPUT: f64 the first
// 40 uniforms of each key.
#include "emu.h"

#include <cstdio>
#include <vector>

#include "sample.cu"

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: draw_main INPUT OUTPUT\n");
        return 2;
    }
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const long long mode = emu::read<long long>(in, 1)[0];
    std::vector<double> res;
    if (mode == 1) {
        const long long n = emu::read<long long>(in, 1)[0];
        const auto keys = emu::read<long long>(in, 3 * n);
        for (long long x = 0; x < n; ++x) {
            Cha g;
            cha_init(g, (unsigned long long)keys[3 * x], (unsigned long long)keys[3 * x + 1],
                     (unsigned long long)keys[3 * x + 2]);
            for (int i = 0; i < 40; ++i) res.push_back(cha_uniform(g));
        }
    } else {
        const auto h = emu::read<long long>(in, 11);
        const long long B = h[0], T = h[1], K = h[2], C = h[3], dd = h[4], N = h[5];
        const auto len = emu::read<long long>(in, B);
        const auto sc = emu::read<double>(in, B * T * C);
        const auto bb = emu::read<double>(in, B * T * C);
        const auto eb = emu::read<double>(in, B * T * C);
        const auto tr = emu::read<double>(in, dd ? K * C * C : C * C);
        const auto dur = emu::read<double>(in, K * C);
        const auto st = emu::read<double>(in, C);
        const auto en = emu::read<double>(in, C);
        const auto alpha = emu::read<double>(in, B * (T + 1) * C);
        const auto u = emu::read<double>(in, B * (T + 1) * C);
        const long long W = K > C ? K : C, warps = h[10];
        std::vector<double> work(B * N * W, std::nan(""));
        std::vector<int> seg(B * N * T, 0x7fffffff), packed(B * N * T, 0x7fffffff);
        std::vector<int> cnt(2 * B * N + 1, 0x7fffffff);
        cnt[2 * B * N] = 0;
        SArgs a{};
        a.sc = sc.data();
        a.bb = h[8] ? bb.data() : nullptr;
        a.eb = h[9] ? eb.data() : nullptr;
        a.tr = tr.data();
        a.dur = dur.data();
        a.st = st.data();
        a.en = en.data();
        a.len = len.data();
        a.alpha = alpha.data();
        a.u = dd ? nullptr : u.data();
        a.work = work.data();
        a.seg = seg.data();
        a.cnt = cnt.data();
        a.out = packed.data();
        a.B = B;
        a.T = T;
        a.K = K;
        a.C = C;
        a.N = N;
        a.I0 = h[6];
        a.seed = h[7];
        a.dd = (int)dd;
        emu::launch(sample_draw, (unsigned)((B * N + warps - 1) / warps), (unsigned)(32 * warps), 0, a);
        for (int x : cnt) res.push_back(x);
        for (int x : packed) res.push_back(x);
    }
    fclose(in);
    FILE* o = fopen(argv[2], "wb");
    if (!o) return 2;
    fwrite(res.data(), sizeof(double), res.size(), o);
    fclose(o);
    return 0;
}
