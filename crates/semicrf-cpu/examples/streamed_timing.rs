//! Wall-clock timings of the streaming engine on arrays and on the same values read from a
//! source chunk by chunk (release build):
//!
//! ```text
//! cargo run --release -p semicrf-cpu --example streamed_timing [T K C]
//! ```
//!
//! One sequence (default `(T, K, C) = (100000, 100, 24)`, static transition): medians of log Z,
//! Viterbi (backpointers on arrays, checkpoints on the source) and the backward pass, and the
//! source's chunk sizes 64, 1024 (the default) and 16384.

use std::hint::black_box;
use std::time::Instant;

use semicrf_core::testing::{GenSpec, random_problem};
use semicrf_core::{
    Engine, GradientRows, GradientSink, LogSemiring, Problem, Result, SourceEngine,
    StreamedPotentials,
};
use semicrf_cpu::StreamingEngine;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// A sink that drops the rows (what a consumer that reduces them on the fly costs at most).
struct Drop;

impl GradientSink for Drop {
    fn put(&self, _: usize, _: usize, rows: GradientRows<'_>) -> Result<()> {
        black_box(rows.scores[0]);
        Ok(())
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (t, k, c) = match args[..] {
        [t, k, c] => (t, k, c),
        _ => (100_000, 100, 24),
    };
    let owned = random_problem(1, &GenSpec::new(1, t, k, c));
    let p = owned.view().expect("a valid problem");
    let prob: Problem<f64> = p.clone().into();
    let s = StreamedPotentials::of(&p);
    let reps = 5;
    let e = StreamingEngine::new();
    println!("(T, K, C) = ({t}, {k}, {c}), medians of {reps} runs, seconds");
    let fa = time(reps, || {
        black_box(e.forward::<LogSemiring>(&prob).unwrap());
    });
    let va = time(reps, || {
        black_box(e.viterbi(&prob).unwrap());
    });
    let ba = time(reps, || {
        black_box(e.backward(&prob, &[1.0]).unwrap());
    });
    println!("arrays:            log Z {fa:.3}  Viterbi {va:.3}  backward {ba:.3}");
    for rows in [64, 1024, 16384] {
        let e = StreamingEngine::new().chunk_rows(Some(rows));
        let fs = time(reps, || {
            black_box(e.forward_streamed::<LogSemiring, _>(&s).unwrap());
        });
        let vs = time(reps, || {
            black_box(e.viterbi_streamed(&s).unwrap());
        });
        let bs = time(reps, || {
            black_box(e.backward_streamed(&s, &[1.0], &Drop).unwrap());
        });
        println!("source, {rows:>5} rows: log Z {fs:.3}  Viterbi {vs:.3}  backward {bs:.3}");
    }
}
