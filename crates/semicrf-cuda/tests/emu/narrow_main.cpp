// Runs `narrow_f32` of kernels/io.cu on the CPU (each thread of a small grid in turn: the
// kernel shares nothing between threads, and the grid-stride loop covers more values than
// threads):
//
//     narrow_main INPUT OUTPUT
//
// INPUT (little-endian): i64 n; f64 src[n].
// OUTPUT: the f32 results, each widened (exactly) to f64, n values.
#include "emu.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "semiring.cuh"
#include "io.cu"

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: narrow_main INPUT OUTPUT\n");
        return 2;
    }
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const long long n = emu::read<long long>(in, 1)[0];
    const auto src = emu::read<double>(in, n);
    fclose(in);
    std::vector<float> dst(n, -1.0f);
    const unsigned block = 32, grid = 3;
    blockDim.x = block;
    gridDim.x = grid;
    for (unsigned g = 0; g < grid; ++g) {
        for (unsigned t = 0; t < block; ++t) {
            blockIdx.x = g;
            threadIdx.x = t;
            narrow_f32(src.data(), dst.data(), n);
        }
    }
    std::vector<double> wide(dst.begin(), dst.end());
    FILE* out = fopen(argv[2], "wb");
    if (!out) return 2;
    fwrite(wide.data(), sizeof(double), wide.size(), out);
    fclose(out);
    return 0;
}
