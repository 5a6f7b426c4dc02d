// Runs `shared_check` of kernels/io.cu on the CPU (one block of 256 threads):
//
//     shared_main INPUT OUTPUT
//
// INPUT (little-endian): i64 header n0, n1, n2, n3, f32mask, B; then each parameter's n_k
// values (f32 where bit k of f32mask is set, else f64); i64 len[B].
// OUTPUT: f64 bound[B], copy[n0 + n1 + n2 + n3 + B].
#include "emu.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "semiring.cuh"
#include "io.cu"

struct SharedArgs {
    const void* p[4];
    long long n[4];
    int f32mask;
    const long long* len;
    long long B;
    double* bound;
    double* copy;
};

static void run_shared(SharedArgs a) {
    shared_check(a.p[0], a.p[1], a.p[2], a.p[3], a.n[0], a.n[1], a.n[2], a.n[3], a.f32mask,
                 a.len, a.B, a.bound, a.copy);
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: shared_main INPUT OUTPUT\n");
        return 2;
    }
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const auto h = emu::read<long long>(in, 6);
    const int mask = (int)h[4];
    const long long B = h[5];
    std::vector<double> f64s[4];
    std::vector<float> f32s[4];
    SharedArgs a{};
    long long total = 0;
    for (int k = 0; k < 4; ++k) {
        a.n[k] = h[k];
        total += h[k];
        if ((mask >> k) & 1) {
            f32s[k] = emu::read<float>(in, h[k]);
            a.p[k] = h[k] ? f32s[k].data() : nullptr;
        } else {
            f64s[k] = emu::read<double>(in, h[k]);
            a.p[k] = h[k] ? f64s[k].data() : nullptr;
        }
    }
    const auto len = emu::read<long long>(in, B);
    fclose(in);
    std::vector<double> bound(B), copy(total + B);
    a.f32mask = mask;
    a.len = len.data();
    a.B = B;
    a.bound = bound.data();
    a.copy = copy.data();
    emu::launch(run_shared, 1, 256, 0, a);
    FILE* out = fopen(argv[2], "wb");
    if (!out) return 2;
    fwrite(bound.data(), sizeof(double), bound.size(), out);
    fwrite(copy.data(), sizeof(double), copy.size(), out);
    fclose(out);
    return 0;
}
