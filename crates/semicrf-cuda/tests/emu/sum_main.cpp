// Runs `meet_sum` of kernels/io.cu on the CPU (each thread of the grid in turn: the kernel
// shares nothing between threads):
//
//     sum_main INPUT OUTPUT
//
// INPUT (little-endian): i64 header B, KC, CC; f64 pdur[B·2·KC], ptr[B·2·CC], up[B].
// OUTPUT: f64 red[KC + CC].
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
    const auto h = emu::read<long long>(in, 3);
    const long long B = h[0], KC = h[1], CC = h[2];
    const auto pdur = emu::read<double>(in, B * 2 * KC);
    const auto ptr = emu::read<double>(in, B * 2 * CC);
    const auto up = emu::read<double>(in, B);
    fclose(in);
    std::vector<double> red(KC + CC);
    const unsigned block = 256, grid = (unsigned)((KC + CC + block - 1) / block);
    blockDim.x = block;
    gridDim.x = grid;
    for (unsigned g = 0; g < grid; ++g) {
        for (unsigned t = 0; t < block; ++t) {
            blockIdx.x = g;
            threadIdx.x = t;
            meet_sum(pdur.data(), ptr.data(), up.data(), red.data(), B, KC, CC);
        }
    }
    FILE* out = fopen(argv[2], "wb");
    if (!out) return 2;
    fwrite(red.data(), sizeof(double), red.size(), out);
    fclose(out);
    return 0;
}
