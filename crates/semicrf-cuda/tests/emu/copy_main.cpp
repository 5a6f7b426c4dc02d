// Runs `copy_out` of kernels/io.cu on the CPU (each thread of a small grid in turn: the kernel
// shares nothing between threads, and each item's grid-stride loop covers more values than
// its threads):
//
//     copy_main INPUT OUTPUT
//
// INPUT (little-endian): i64 count; per item i64 n, i64 stride, i64 f32; then per item its
// source, f64 src[n · stride].
// OUTPUT: each item's n results in turn, each widened (exactly) to f64.
#include "emu.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "semiring.cuh"
#include "io.cu"

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: copy_main INPUT OUTPUT\n");
        return 2;
    }
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const long long count = emu::read<long long>(in, 1)[0];
    if (count < 1 || count > OUT_ITEMS) return 2;
    const auto head = emu::read<long long>(in, 3 * count);
    std::vector<std::vector<double>> src(count);
    std::vector<std::vector<float>> f32(count);
    std::vector<std::vector<double>> f64(count);
    OArgs a = {};
    a.count = (int)count;
    for (long long k = 0; k < count; ++k) {
        const long long n = head[3 * k], stride = head[3 * k + 1];
        src[k] = emu::read<double>(in, n * stride);
        f32[k].assign(n, -1.0f);
        f64[k].assign(n, -1.0);
        a.src[k] = src[k].data();
        a.f32[k] = (int)head[3 * k + 2];
        a.dst[k] = a.f32[k] ? (void*)f32[k].data() : (void*)f64[k].data();
        a.n[k] = n;
        a.stride[k] = (int)stride;
    }
    fclose(in);
    const unsigned block = 32, per = 2, grid = per * (unsigned)count;
    blockDim.x = block;
    gridDim.x = grid;
    for (unsigned g = 0; g < grid; ++g) {
        for (unsigned t = 0; t < block; ++t) {
            blockIdx.x = g;
            threadIdx.x = t;
            copy_out(a);
        }
    }
    FILE* out = fopen(argv[2], "wb");
    if (!out) return 2;
    for (long long k = 0; k < count; ++k) {
        std::vector<double> wide = a.f32[k] ? std::vector<double>(f32[k].begin(), f32[k].end())
                                            : f64[k];
        fwrite(wide.data(), sizeof(double), wide.size(), out);
    }
    fclose(out);
    return 0;
}
