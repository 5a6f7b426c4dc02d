//! This machine's `exp` throughput, and the fraction of it the streaming forward reaches.
//!
//! ```text
//! cargo run --release -p semicrf-bench --bin exp_bound -- [--json PATH]
//! ```
//!
//! 1. `y[i] = x[i].exp()` over arrays of 2²² elements (x uniform in [-20, 0], the range
//!    log-sum-exp feeds `exp`), for `f64` and `f32`, on one thread and on all of rayon's
//!    threads (chunks per thread); median of 9 repeats, in elements per second. The standard
//!    library's `exp` is a scalar libm call; a branch-free polynomial `exp` that the compiler
//!    vectorises (baseline x86-64 SSE2, no `target-cpu`) is measured too, as a stricter bound
//!    (an engine may use such an `exp`).
//! 2. The streaming engine's log forward at S4 = (4, 4096, 63, 8), median of 7 runs; its term
//!    rate counts `C² + K·C` log-sum-exp terms per position per sequence
//!    ([`semicrf_bench::lse_terms`]), and is divided by the all-thread `f64::exp` bound, the
//!    vectorised polynomial bound, and the `f32::exp` one. An engine need not call `exp` once
//!    per term (it may sum in linear space after one `exp` per label), so the fraction can
//!    exceed 1.

use rayon::prelude::*;
use semicrf_bench::{SEED, canonical, lse_terms, median, problem, time_ms};
use semicrf_core::{Engine, LogSemiring, Problem};
use semicrf_cpu::StreamingEngine;
use serde_json::json;

const N: usize = 1 << 22;
const REPEATS: usize = 9;

fn inputs() -> Vec<f64> {
    // A fixed low-discrepancy fill; no RNG needed.
    (0..N)
        .map(|i| -20.0 * ((i as f64 * 0.618_033_988_749_895) % 1.0))
        .collect()
}

/// `exp(x)` for `x` in `[-708, 709]`: `x = n·ln 2 + r`, `|r| <= ln 2 / 2`, a degree-12
/// Taylor polynomial for `e^r` (relative error below 1e-15) and `2^n` put into the exponent
/// bits. Branch-free, so loops over it vectorise.
#[inline(always)]
fn exp_poly(x: f64) -> f64 {
    const SHIFT: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52: rounds to an integer in the low bits
    const LN2_HI: f64 = 0.693_147_180_369_123_8;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    let x = x.max(-708.0);
    let t = x * std::f64::consts::LOG2_E + SHIFT;
    let n = t - SHIFT;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.0 / 479_001_600.0;
    for c in [
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p * r + c;
    }
    let scale = f64::from_bits((t.to_bits().wrapping_add(1023)) << 52);
    p * scale
}

fn rate<T: Copy + Send + Sync>(
    x: &[T],
    y: &mut [T],
    f: impl Fn(T) -> T + Sync + Copy,
    parallel: bool,
) -> f64 {
    let mut ms = time_ms(REPEATS, || {
        if parallel {
            let chunk = x.len().div_ceil(rayon::current_num_threads().max(1));
            y.par_chunks_mut(chunk)
                .zip(x.par_chunks(chunk))
                .for_each(|(yc, xc)| {
                    for (o, &i) in yc.iter_mut().zip(xc) {
                        *o = f(i);
                    }
                });
        } else {
            for (o, &i) in y.iter_mut().zip(x) {
                *o = f(i);
            }
        }
        std::hint::black_box(&mut *y);
    });
    x.len() as f64 / (median(&mut ms) * 1e-3)
}

fn main() {
    let mut json_path: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json_path = Some(args.next().expect("--json takes a path")),
            other => panic!("unknown argument {other}"),
        }
    }
    let threads = rayon::current_num_threads();
    let x64 = inputs();
    let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
    let mut y64 = vec![0.0f64; N];
    let mut y32 = vec![0.0f32; N];
    let f64_1 = rate(&x64, &mut y64, f64::exp, false);
    let f64_n = rate(&x64, &mut y64, f64::exp, true);
    let poly_1 = rate(&x64, &mut y64, exp_poly, false);
    let poly_n = rate(&x64, &mut y64, exp_poly, true);
    let worst = x64
        .iter()
        .step_by(97)
        .map(|&v| ((exp_poly(v) - v.exp()) / v.exp()).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-14, "exp_poly is off by {worst:e}");
    let f32_1 = rate(&x32, &mut y32, f32::exp, false);
    let f32_n = rate(&x32, &mut y32, f32::exp, true);
    println!("exp throughput over {N} elements (median of {REPEATS}):");
    println!(
        "  f64::exp: {:.3e}/s on 1 thread, {:.3e}/s on {threads}",
        f64_1, f64_n
    );
    println!(
        "  f32::exp: {:.3e}/s on 1 thread, {:.3e}/s on {threads}",
        f32_1, f32_n
    );

    let s4 = canonical("S4").expect("S4");
    let owned = problem(s4, SEED);
    let p = Problem::Structured(owned.view().expect("valid"));
    let engine = StreamingEngine::new();
    let mut streaming = json!(null);
    match Engine::<f32>::forward::<LogSemiring>(&engine, &p) {
        Err(e) => println!("streaming forward at S4 unavailable: {e}"),
        Ok(_) => {
            let mut ms = time_ms(7, || Engine::<f32>::forward::<LogSemiring>(&engine, &p));
            let t = median(&mut ms);
            let terms = lse_terms(s4);
            let r = terms as f64 / (t * 1e-3);
            println!(
                "streaming log forward at S4 {s4}: {t:.2} ms (median of 7), {terms} terms, \
                 {r:.3e} terms/s"
            );
            println!(
                "  = {:.1}% of the {threads}-thread f64::exp bound, {:.1}% of the vectorised \
                 polynomial exp bound, {:.1}% of the f32::exp bound",
                100.0 * r / f64_n,
                100.0 * r / poly_n,
                100.0 * r / f32_n
            );
            streaming = json!({
                "shape": [s4.batch, s4.len, s4.max_duration, s4.labels],
                "median_ms": t,
                "runs_ms": ms,
                "terms": terms,
                "terms_per_s": r,
                "fraction_of_f64_bound": r / f64_n,
                "fraction_of_f64_poly_bound": r / poly_n,
                "fraction_of_f32_bound": r / f32_n,
            });
        }
    }
    let doc = json!({
        "elements": N,
        "threads": threads,
        "exp_f64_per_s": {"one_thread": f64_1, "all_threads": f64_n},
        "exp_f64_poly_per_s": {"one_thread": poly_1, "all_threads": poly_n},
        "exp_f32_per_s": {"one_thread": f32_1, "all_threads": f32_n},
        "streaming_s4_log_forward": streaming,
    });
    if let Some(path) = json_path {
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&doc).expect("json") + "\n",
        )
        .expect("writable JSON path");
        println!("JSON written to {path}");
    }
}
