// Runs the k-best kernel of kernels/kbest.cu under the CPU emulation (emu.h) on one call:
//
//     kbest_main INPUT OUTPUT
//
// INPUT (little-endian): i64 header B, T, K, C, k, dd, threads, has_bb, has_eb; i64
// lengths[B]; f64 scores[B·T·C], begin boundary[B·T·C] (if has_bb), end boundary[B·T·C] (if
// has_eb), transition[C·C] or [K·C·C] (dd), duration[K·C], start[C], end[C].
//
// OUTPUT: as f64, the number of results of each sequence (B), their scores (B·k), their
// numbers of segments (B·k), and their segments' durations and labels, last segment first
// (B·k·T each).
#include "emu.h"

#include <cstdio>
#include <vector>

#include "kbest.cu"

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: kbest_main INPUT OUTPUT\n");
        return 2;
    }
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const auto h = emu::read<long long>(in, 9);
    const long long B = h[0], T = h[1], K = h[2], C = h[3], k = h[4], dd = h[5], threads = h[6];
    const auto len = emu::read<long long>(in, B);
    const auto sc = emu::read<double>(in, B * T * C);
    const auto bb = emu::read<double>(in, h[7] ? B * T * C : 0);
    const auto eb = emu::read<double>(in, h[8] ? B * T * C : 0);
    const auto tr = emu::read<double>(in, dd ? K * C * C : C * C);
    const auto dur = emu::read<double>(in, K * C);
    const auto st = emu::read<double>(in, C);
    const auto en = emu::read<double>(in, C);
    fclose(in);

    const long long warps = threads / 32, lists = B * T * C;
    std::vector<double> score(lists * k), seg(B * warps * K), hv(B * warps * K * C), oscore(B * k);
    std::vector<int> back(lists * k), rank(lists * k), cnt(lists), head(B * warps * K * C),
        pick(B * k * 2), on(B), olen(B * k), od(B * k * T), oc(B * k * T);
    KArgs a{};
    a.sc = sc.data();
    a.bb = h[7] ? bb.data() : nullptr;
    a.eb = h[8] ? eb.data() : nullptr;
    a.tr = tr.data();
    a.dur = dur.data();
    a.st = st.data();
    a.en = en.data();
    a.len = len.data();
    a.score = score.data();
    a.back = back.data();
    a.rank = rank.data();
    a.cnt = cnt.data();
    a.head = head.data();
    a.seg = seg.data();
    a.hv = hv.data();
    a.pick = pick.data();
    a.oscore = oscore.data();
    a.on = on.data();
    a.olen = olen.data();
    a.od = od.data();
    a.oc = oc.data();
    a.T = T;
    a.K = K;
    a.C = C;
    a.k = (int)k;
    a.dd = (int)dd;
    emu::launch(kbest_fwd, B, threads, 0, a);
    FILE* o = fopen(argv[2], "wb");
    if (!o) return 2;
    auto wr = [&](const std::vector<double>& v) { fwrite(v.data(), sizeof(double), v.size(), o); };
    auto wri = [&](const std::vector<int>& v) { wr(std::vector<double>(v.begin(), v.end())); };
    wri(on);
    wr(oscore);
    wri(olen);
    wri(od);
    wri(oc);
    fclose(o);
    return 0;
}
