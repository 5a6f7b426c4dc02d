//! Wall-clock timings of the streaming engine at the canonical shapes (release build):
//!
//! ```text
//! cargo run --release -p semicrf-cpu --example streaming_timing [s2|s4|s8|exp|all]
//! ```
//!
//! Prints medians over repeated runs, and for S4 the ratio of log-sum-exp terms per second
//! (`C² + K·C` per position) to the machine's `f64::exp` throughput measured on all threads.

use std::hint::black_box;
use std::time::Instant;

use rayon::prelude::*;
use semicrf_core::testing::{GenSpec, random_problem};
use semicrf_core::{Engine, LogSemiring, OwnedPotentials, Problem};
use semicrf_cpu::StreamingEngine;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// CPU time of every thread of this process so far, in seconds (Linux; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    dir.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .sum::<f64>()
        * 1e-9
}

/// Median wall time and mean CPU time per run, in seconds.
fn time2(reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    f();
    let c0 = cpu_seconds();
    let wall = median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    );
    (wall, (cpu_seconds() - c0) / reps as f64)
}

fn time(reps: usize, f: impl FnMut()) -> f64 {
    time2(reps, f).0
}

fn problem(b: usize, t: usize, k: usize, c: usize) -> OwnedPotentials<f32> {
    let mut g = GenSpec::new(b, t, k, c);
    g.scale = 2.0;
    g.start = true;
    g.end = true;
    random_problem(42, &g).cast::<f32>()
}

/// `f64::exp` evaluations per second on all threads.
fn exp_rate() -> f64 {
    let n = 1 << 22;
    let threads = rayon::current_num_threads();
    let xs: Vec<f64> = (0..n).map(|i| -((i % 1000) as f64) * 0.01).collect();
    let secs = time(7, || {
        let s: f64 = (0..threads)
            .into_par_iter()
            .map(|_| xs.iter().map(|&x| x.exp()).sum::<f64>())
            .sum();
        black_box(s);
    });
    (n * threads) as f64 / secs
}

fn shape(name: &str, (b, t, k, c): (usize, usize, usize, usize), reps: usize, exp: Option<f64>) {
    let p = problem(b, t, k, c);
    let v = Problem::Structured(p.view().expect("valid"));
    let e = StreamingEngine::new();
    let (fwd, fwd_cpu) = time2(reps, || {
        black_box(e.forward::<LogSemiring>(&v).expect("forward"));
    });
    let up = vec![1.0; b];
    let (bwd, bwd_cpu) = time2(reps, || {
        black_box(e.backward(&v, &up).expect("backward"));
    });
    let (vit, vit_cpu) = time2(reps, || {
        black_box(e.viterbi(&v).expect("viterbi"));
    });
    println!(
        "{name} (B,T,K,C)=({b},{t},{k},{c}): wall medians of {reps}: forward {:.3} ms, forward+backward {:.3} ms, viterbi {:.3} ms",
        fwd * 1e3,
        bwd * 1e3,
        vit * 1e3
    );
    println!(
        "{name}: CPU time per run (all threads): forward {:.3} ms, forward+backward {:.3} ms, viterbi {:.3} ms",
        fwd_cpu * 1e3,
        bwd_cpu * 1e3,
        vit_cpu * 1e3
    );
    if let Some(rate) = exp {
        let terms = (b * t * (c * c + k * c)) as f64;
        println!(
            "{name}: {:.1} M log-sum-exp terms/s forward = {:.0}% of the exp throughput ({:.1} M exp/s); forward+backward counting 3 passes: {:.0}%",
            terms / fwd / 1e6,
            100.0 * terms / fwd / rate,
            rate / 1e6,
            100.0 * 3.0 * terms / bwd / rate
        );
    }
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let all = which == "all";
    println!("threads: {}", rayon::current_num_threads());
    let rate = (all || which == "exp" || which == "s4").then(exp_rate);
    if let Some(r) = rate {
        println!("f64::exp throughput: {:.1} M/s", r / 1e6);
    }
    if all || which == "s2" {
        shape("S2", (16, 256, 15, 8), 51, None);
    }
    if all || which == "s4" {
        shape("S4", (4, 4096, 63, 8), 9, rate);
    }
    if all || which == "s8" {
        shape("S8", (1, 100_000, 1000, 24), 1, None);
    }
}
