// Runs `check_input` of kernels/io.cu under the CPU emulation (emu.h) on a few arrays in turn:
//
//     check_main INPUT OUTPUT
//
// INPUT (little-endian): i64 header B, T, C, f32in, threads, n (arrays); i64 lengths[B]; f64
// bound[B] (the bounds' starting values); then n arrays of B·T·C values, f32 when `f32in`,
// else f64.
//
// OUTPUT: f64 bound[B] (after every array), then per array f64 out[B·7] (the seventh word: a
// -inf within the length).
#include "emu.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "semiring.cuh"
#include "io.cu"

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: check_main INPUT OUTPUT\n");
        return 2;
    }
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const auto h = emu::read<long long>(in, 6);
    const long long B = h[0], T = h[1], C = h[2], f32in = h[3], threads = h[4], n = h[5];
    const auto len = emu::read<long long>(in, B);
    auto words = emu::read<double>(in, B);
    words.resize(B + n * B * 7);
    std::vector<std::vector<char>> arrays;
    const size_t bytes = (size_t)(B * T * C) * (f32in ? 4 : 8);
    for (long long i = 0; i < n; ++i) arrays.push_back(emu::read<char>(in, bytes));
    fclose(in);
    std::vector<double> rowmax(B * T);
    std::vector<int> rowarg(B * T), rowbad(B * T);
    for (long long i = 0; i < n; ++i) {
        CArgs a{};
        a.x = arrays[i].data();
        a.len = len.data();
        a.rowmax = rowmax.data();
        a.rowarg = rowarg.data();
        a.rowbad = rowbad.data();
        a.bound = words.data();
        a.out = words.data() + B + i * B * 7;
        a.T = T;
        a.C = C;
        a.f32in = (int)f32in;
        emu::launch(check_input, (unsigned)B, (unsigned)threads, 0, a);
    }
    FILE* out = fopen(argv[2], "wb");
    if (!out) return 2;
    fwrite(words.data(), sizeof(double), words.size(), out);
    fclose(out);
    return 0;
}
