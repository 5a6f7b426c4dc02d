// Runs `shared_sum` of kernels/io.cu on the CPU (each thread of the grid in turn: the kernel
// shares nothing between threads):
//
//     sum_main INPUT OUTPUT
//
// INPUT (little-endian): i64 header B, KC, CC, NC, two (per-sweep rows given), redo (flags
// given); f64 dur2[B·2·KC], tr2[B·2·CC] (where `two`), dur1[B·KC], tr1[B·CC], st[B·NC],
// en[B·NC], up[B]; i64 flags[B] (where `redo`).
// OUTPUT: f64 red[KC + CC + 2·NC].
#include "emu.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "semiring.cuh"
#include "io.cu"

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: sum_main INPUT OUTPUT\n");
        return 2;
    }
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const auto h = emu::read<long long>(in, 6);
    const long long B = h[0], KC = h[1], CC = h[2], NC = h[3], two = h[4], redo = h[5];
    const auto dur2 = emu::read<double>(in, two ? B * 2 * KC : 0);
    const auto tr2 = emu::read<double>(in, two ? B * 2 * CC : 0);
    const auto dur1 = emu::read<double>(in, B * KC);
    const auto tr1 = emu::read<double>(in, B * CC);
    const auto st = emu::read<double>(in, B * NC);
    const auto en = emu::read<double>(in, B * NC);
    const auto up = emu::read<double>(in, B);
    const auto flags64 = emu::read<long long>(in, redo ? B : 0);
    fclose(in);
    std::vector<int> flags(flags64.begin(), flags64.end());
    const long long n = KC + CC + 2 * NC;
    std::vector<double> red(n);
    const unsigned block = 256, grid = (unsigned)((n + block - 1) / block);
    blockDim.x = block;
    gridDim.x = grid;
    for (unsigned g = 0; g < grid; ++g) {
        for (unsigned t = 0; t < block; ++t) {
            blockIdx.x = g;
            threadIdx.x = t;
            shared_sum(two ? dur2.data() : nullptr, two ? tr2.data() : nullptr, dur1.data(),
                       tr1.data(), st.data(), en.data(), redo ? flags.data() : nullptr,
                       up.data(), red.data(), B, KC, CC, NC);
        }
    }
    FILE* out = fopen(argv[2], "wb");
    if (!out) return 2;
    fwrite(red.data(), sizeof(double), red.size(), out);
    fclose(out);
    return 0;
}
