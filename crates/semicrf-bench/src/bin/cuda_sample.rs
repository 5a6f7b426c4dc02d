//! Median wall times of posterior sampling on the CUDA streaming engine (forward values and
//! draws on the device, one warp per sample) against the CPU streaming engine on every
//! core (rayon's pool), at canonical shapes, in one process:
//!
//! ```text
//! cargo run --release -p semicrf-bench --features cuda --bin cuda_sample -- \
//!     [--repeats 5] [--samples 100] [S3 S4 S6]
//! ```
//!
//! Each call draws `--samples` samples per sequence (100 by default) with the same seed;
//! each is timed as a whole call (host clock), after one untimed call, and the medians are
//! printed in a table with the CUDA engine's forward pass (log Z, its fastest kernels) beside
//! them for scale. The two engines' samples are compared as well: the number of sequences
//! whose samples differ is printed (0 expected; see the CUDA crate's docs).

use semicrf::{AnyEngine, Engine, LogSemiring};
use semicrf_bench::{SEED, canonical, median, problem, time_ms};
use semicrf_core::{Problem, Sampler};
use semicrf_cpu::StreamingEngine;

fn main() {
    let (mut repeats, mut n, mut shapes) = (5usize, 100usize, Vec::new());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |what: &str| -> usize {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{what} takes an integer"))
        };
        match a.as_str() {
            "--repeats" => repeats = value("--repeats").max(1),
            "--samples" => n = value("--samples"),
            _ => shapes.push(a.to_uppercase()),
        }
    }
    if shapes.is_empty() {
        shapes = ["S3", "S4", "S6"].map(String::from).to_vec();
    }
    let gpu = semicrf_cuda::CudaEngine::usable_or_skip(0).expect("a usable GPU");
    let cuda = AnyEngine::Cuda(gpu);
    let cpu = AnyEngine::Streaming(StreamingEngine::new());
    println!(
        "posterior sampling, {n} samples per sequence, median of {repeats} whole calls \
         (CPU: {} threads)",
        rayon::current_num_threads()
    );
    println!(
        "| shape | (B, T, K, C) | cuda sample ms | cpu sample ms | cpu/cuda | cuda forward ms | sequences differing |"
    );
    println!("|---|---|---|---|---|---|---|");
    for id in shapes {
        let s = canonical(&id).unwrap_or_else(|| panic!("unknown shape {id}"));
        let owned = problem(s, SEED);
        let p = Problem::Structured(owned.view().expect("generated problems are valid"));
        let run = |f: &mut dyn FnMut()| {
            f();
            median(&mut time_ms(repeats, f))
        };
        let mut got = Vec::new();
        let tc = run(&mut || got = cuda.sample(&p, n, SEED).expect("CUDA sampling"));
        let mut want = Vec::new();
        let th = run(&mut || want = cpu.sample(&p, n, SEED).expect("CPU sampling"));
        let fwd = run(&mut || {
            cuda.forward::<LogSemiring>(&p).expect("forward");
        });
        let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        println!(
            "| {id} | ({}, {}, {}, {}) | {tc:.2} | {th:.2} | {:.2} | {fwd:.2} | {differ} |",
            s.batch,
            s.len,
            s.max_duration,
            s.labels,
            th / tc
        );
    }
}
