//! Median times of k-best decoding on the CUDA streaming engine against the CPU streaming
//! engine on every core (rayon's pool), in one process, at canonical shapes (S3, S4 and S6
//! unless others are named) for k = 1, 8 and 32:
//!
//! ```text
//! cargo run --release -p semicrf-bench --features cuda --bin kbest_times -- \
//!     [--repeats 5] [S3 S4 S6 ...]
//! ```
//!
//! Each cell is the median of whole calls by the host's clock (inputs copied in, results
//! back), after one untimed call; the CUDA column also gives the median by CUDA events
//! ([`semicrf_cuda::CudaEngine::time`]). Before timing, the GPU's lists are checked equal to
//! the CPU's (scores bit for bit, segments), so a table is printed only for agreeing
//! engines. Prints a markdown table.

use semicrf::{AnyEngine, KBest};
use semicrf_bench::{SEED, canonical, median, problem, time_ms};
use semicrf_core::Problem;
use semicrf_cpu::StreamingEngine;

fn main() {
    let (repeats, _, shapes) = semicrf_bench::timing_args(5, &[]);
    let named = std::env::args()
        .skip(1)
        .any(|a| canonical(&a.to_uppercase()).is_some());
    let shapes = if named {
        shapes
    } else {
        vec!["S3".into(), "S4".into(), "S6".into()]
    };
    let gpu = semicrf_cuda::CudaEngine::usable_or_skip(0).expect("a usable GPU");
    let cuda = AnyEngine::Cuda(gpu);
    let host = AnyEngine::Streaming(StreamingEngine::new());
    println!(
        "k-best, f32 input, {repeats} repeats, medians of whole calls (CUDA events in brackets); \
         CPU: streaming engine, {} threads",
        rayon::current_num_threads()
    );
    println!();
    println!("| shape | (B, T, K, C) | k | CUDA ms | CPU ms | CPU/CUDA |");
    println!("|---|---|---|---|---|---|");
    for id in shapes {
        let s = canonical(&id).unwrap_or_else(|| panic!("unknown shape {id}"));
        let owned = problem(s, SEED);
        let p = Problem::Structured(owned.view().expect("generated problems are valid"));
        for k in [1, 8, 32] {
            let on_gpu = KBest::<f32>::kbest(&cuda, &p, k).expect("CUDA k best");
            let on_cpu = KBest::<f32>::kbest(&host, &p, k).expect("CPU k best");
            for (b, (g, c)) in on_gpu.iter().zip(&on_cpu).enumerate() {
                assert_eq!(g.len(), c.len(), "{id} k = {k}, seq {b}");
                for (x, y) in g.iter().zip(c) {
                    assert_eq!(
                        x.score.to_bits(),
                        y.score.to_bits(),
                        "{id} k = {k}, seq {b}"
                    );
                    assert_eq!(x.segments, y.segments, "{id} k = {k}, seq {b}");
                }
            }
            let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
            let events: Vec<f64> = (0..repeats)
                .map(|_| {
                    let run = || KBest::<f32>::kbest(&cuda, &p, k).expect("CUDA k best");
                    ms(gpu.time(run).expect("CUDA events").1)
                })
                .collect();
            let wall = |e: &AnyEngine| {
                median(&mut time_ms(repeats, || {
                    KBest::<f32>::kbest(e, &p, k).expect("k best")
                }))
            };
            let (g, c) = (wall(&cuda), wall(&host));
            println!(
                "| {id} | ({}, {}, {}, {}) | {k} | {g:.2} ({:.2}) | {c:.2} | {:.2}x |",
                s.batch,
                s.len,
                s.max_duration,
                s.labels,
                median(&mut events.clone()),
                c / g
            );
        }
    }
}
