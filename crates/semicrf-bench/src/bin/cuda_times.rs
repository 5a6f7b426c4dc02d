//! Median times of the CUDA streaming engine at canonical shapes, all in one process: each
//! forward (log) and forward+backward call timed by CUDA events on the engine's stream
//! ([`semicrf_cuda::CudaEngine::time`]: from the first copy in to the last copy out), and
//! with `--cpu` the CPU streaming engine on every core (rayon's pool; wall clock) beside it.
//!
//! ```text
//! cargo run --release -p semicrf-bench --features cuda --bin cuda_times -- \
//!     [--repeats 9] [--cpu] [S1 S2 ...]
//! ```
//!
//! One line per shape: `S4 (4, 4096, 63, 8) cuda fwd 2.500 ms fwd+bwd 6.150 ms ...`, after
//! one untimed call of each, then the medians of whole calls by the host's clock. The peer comparison (`peers/run_gpu.sh`) is the reference
//! measurement; this is for quick comparisons, such as the general kernels
//! (`SEMICRF_CUDA_FAST=0`) against those compiled for a label width.

use semicrf::{AnyEngine, Engine, LogSemiring};
use semicrf_bench::{SEED, canonical, median, ones, problem, time_ms};
use semicrf_core::Problem;
use semicrf_cpu::StreamingEngine;

fn main() {
    let (repeats, given, shapes) = semicrf_bench::timing_args(9, &["--cpu"]);
    let cpu = given[0];
    let gpu = semicrf_cuda::CudaEngine::usable_or_skip(0).expect("a usable GPU");
    let cuda = AnyEngine::Cuda(gpu);
    let host = AnyEngine::Streaming(StreamingEngine::new());
    for id in shapes {
        let s = canonical(&id).unwrap_or_else(|| panic!("unknown shape {id}"));
        let owned = problem(s, SEED);
        let p = Problem::Structured(owned.view().expect("generated problems are valid"));
        let up = ones(s.batch);
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let timed = |f: &dyn Fn()| -> f64 {
            f();
            let mut v: Vec<f64> = (0..repeats)
                .map(|_| ms(gpu.time(f).expect("CUDA events").1))
                .collect();
            median(&mut v)
        };
        let wall = |f: &mut dyn FnMut()| median(&mut time_ms(repeats, f));
        let fwd = timed(&|| {
            cuda.forward::<LogSemiring>(&p).expect("forward");
        });
        let bwd = timed(&|| {
            cuda.backward(&p, &up).expect("backward");
        });
        let wf = wall(&mut || {
            cuda.forward::<LogSemiring>(&p).expect("forward");
        });
        let wb = wall(&mut || {
            cuda.backward(&p, &up).expect("backward");
        });
        let mut line = format!(
            "{id} ({}, {}, {}, {}) cuda fwd {fwd:.3} ms fwd+bwd {bwd:.3} ms \
             (whole calls {wf:.3} / {wb:.3} ms, ratio {:.2})",
            s.batch,
            s.len,
            s.max_duration,
            s.labels,
            wb / wf
        );
        if cpu {
            let p = p.clone();
            let run = |f: &mut dyn FnMut()| {
                f();
                median(&mut time_ms(repeats, f))
            };
            let cf = run(&mut || {
                host.forward::<LogSemiring>(&p).expect("forward");
            });
            let cb = run(&mut || {
                host.backward(&p, &up).expect("backward");
            });
            line += &format!(
                " | cpu fwd {cf:.3} ms fwd+bwd {cb:.3} ms | cpu/cuda fwd+bwd {:.2}x",
                cb / bwd
            );
        }
        println!("{line}");
    }
}
