//! The CUDA streaming engine against the CPU streaming engine on a gene-shaped problem, in one
//! process: forward (log), Viterbi and forward+backward, medians of whole calls by the host's
//! clock, their ratio, and a check that both engines agree.
//!
//! ```text
//! cargo run --release -p semicrf-bench --features cuda --bin gene_shape -- \
//!     [--repeats 3] [--cpu-only | --cuda-only] [--log-domain] [B=1] [T=20000] [K=8192] [C=50] \
//!     [CODING=40] [SEED=1]
//! ```
//!
//! `--cuda-only` times the CUDA engine alone (no ratio, no agreement check): for comparing
//! the CUDA engine's settings (its environment variables, docs/configuration.md) one process
//! each.
//!
//! `--log-domain` times the CUDA engine's log-domain kernels alone
//! ([`semicrf_cuda::CudaEngine::log_domain_only`]) as well: by default the log semiring's
//! forward and backward run in the linear-domain kernels where the labels allow. The line
//! `reruns` counts the sequences those handed to the log-domain kernels.
//!
//! The problem (`f64`, `B` sequences of length `T`, one by default, seeded, synthetic) has the
//! structure of a gene model's:
//!
//! - `CODING` labels (40 of 50 by default) stand for exons of a strand and a reading frame
//!   (6 kinds: 2 strands × 3 frames). Each kind has its own in-frame stop codons, one every
//!   20–60 positions (uniform gaps), where the scores of its labels are `-inf`: their
//!   segments end before a stop. Their durations reach `K`.
//! - The other labels (intergenic, introns) have no `-inf` score and every duration up to
//!   `K`: their windows stay open over the whole `K`.
//! - The transition forbids (`-inf`) exon → exon of every pair and a few noncoding pairs,
//!   as a gene grammar does (an exon is followed by an intron or intergenic stretch).
//! - Scores, durations, start and end are uniform in `[-1, 1]`.
//!
//! The CPU engine is [`StreamingEngine`] with rayon on every core (what the facade runs for
//! `Backend::Streaming`). The results must agree: `log Z` within a relative `1e-9`, the
//! Viterbi segments equal, the scores' gradients within `2⁻⁴⁵·M·√T` absolute, the rounding
//! that GUARANTEES.md's error model gives a sequence of magnitude bound `M` (both printed;
//! the measured difference was `3.7e-9` on an H100 host); the binary exits with status 1
//! when they do not. Without a usable GPU it prints why and times the CPU alone.

use ndarray::{Array1, Array2, Array3};
use semicrf::{AnyEngine, Decoded, Engine, LogSemiring};
use semicrf_bench::{median, time_ms};
use semicrf_core::{Potentials, Problem};
use semicrf_cpu::StreamingEngine;

/// The gene-shaped problem's sizes and seed.
#[derive(Clone, Copy, Debug)]
struct GeneShape {
    b: usize,
    t: usize,
    k: usize,
    c: usize,
    coding: usize,
    seed: u64,
}

/// A small seeded generator (xorshift64*): the problem is the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `[-1, 1)`.
    fn sym(&mut self) -> f64 {
        2.0 * self.unit() - 1.0
    }
    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
}

/// The potentials' arrays: scores `(B, T, C)`, transition, duration `(K, C)`, start, end.
struct Arrays {
    scores: Array3<f64>,
    transition: Array2<f64>,
    duration: Array2<f64>,
    start: Array1<f64>,
    end: Array1<f64>,
    lengths: Vec<usize>,
}

impl GeneShape {
    /// Whether label `j` is an exon label (the last `coding` labels are).
    fn is_coding(&self, j: usize) -> bool {
        j >= self.c - self.coding
    }

    fn arrays(&self) -> Arrays {
        let (bn, t, k, c) = (self.b, self.t, self.k, self.c);
        let mut r = Rng(self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut scores = Array3::from_shape_fn((bn, t, c), |_| r.sym());
        // Six kinds of exon (strand × frame), each with its own stops.
        for b in 0..bn {
            for kind in 0..6 {
                let mut p = r.between(0, 40);
                while p < t {
                    for j in (0..c).filter(|&j| self.is_coding(j) && j % 6 == kind) {
                        scores[[b, p, j]] = f64::NEG_INFINITY;
                    }
                    p += r.between(20, 60);
                }
            }
        }
        let transition = Array2::from_shape_fn((c, c), |(i, j)| {
            let exon_to_exon = self.is_coding(i) && self.is_coding(j);
            let noncoding_hole = !self.is_coding(i) && !self.is_coding(j) && (i + 2 * j) % 5 == 0;
            if exon_to_exon || noncoding_hole {
                f64::NEG_INFINITY
            } else {
                r.sym()
            }
        });
        Arrays {
            scores,
            transition,
            duration: Array2::from_shape_fn((k, c), |_| r.sym()),
            start: Array1::from_shape_fn(c, |_| r.sym()),
            end: Array1::from_shape_fn(c, |_| r.sym()),
            lengths: vec![t; bn],
        }
    }
}

impl Arrays {
    fn view(&self, k: usize) -> Potentials<'_, f64> {
        Potentials::builder(self.scores.view(), &self.lengths, k)
            .transition(self.transition.view())
            .duration(self.duration.view())
            .start(self.start.view())
            .end(self.end.view())
            .build()
            .expect("the gene-shaped problem is valid")
    }
}

/// The command line: `(repeats, [cpu only, log domain too, cuda only], shape)`.
fn args() -> (usize, Vec<bool>, GeneShape) {
    let flags = ["--cpu-only", "--log-domain", "--cuda-only"];
    let (repeats, given, rest) = semicrf_bench::timing_args(3, &flags);
    let mut s = GeneShape {
        b: 1,
        t: 20000,
        k: 8192,
        c: 50,
        coding: 40,
        seed: 1,
    };
    for a in rest.iter().filter(|a| a.contains('=')) {
        let (key, value) = a.split_once('=').expect("KEY=VALUE");
        let v: usize = value
            .parse()
            .unwrap_or_else(|_| panic!("{key} takes an integer"));
        match key {
            "B" => s.b = v.max(1),
            "T" => s.t = v,
            "K" => s.k = v,
            "C" => s.c = v,
            "CODING" => s.coding = v,
            "SEED" => s.seed = v as u64,
            _ => panic!("unknown setting {key} (B, T, K, C, CODING, SEED)"),
        }
    }
    assert!(s.coding < s.c, "CODING must be below C");
    assert!(
        !(given[0] && given[2]),
        "--cpu-only and --cuda-only exclude each other"
    );
    (repeats, given, s)
}

/// The three operations' results of one engine.
struct Results {
    log_z: f64,
    best: Decoded,
    grad: Array3<f64>,
}

/// Times forward, Viterbi and forward+backward of `e` on `p` (one untimed call of each
/// first): the three medians in milliseconds and the results.
fn measure(e: &AnyEngine, p: &Problem<'_, f64>, repeats: usize) -> ([f64; 3], Results) {
    let upstream = vec![1.0; p.shape().batch];
    let run = |f: &mut dyn FnMut()| {
        f();
        median(&mut time_ms(repeats, f))
    };
    let fwd = run(&mut || {
        e.forward::<LogSemiring>(p).expect("forward");
    });
    let vit = run(&mut || {
        e.viterbi(p).expect("viterbi");
    });
    let bwd = run(&mut || {
        e.backward(p, &upstream).expect("backward");
    });
    let b = e.backward(p, &upstream).expect("backward");
    let results = Results {
        log_z: e.forward::<LogSemiring>(p).expect("forward")[0],
        best: e.viterbi(p).expect("viterbi").remove(0),
        grad: b.grad.scores.expect("scores' gradient"),
    };
    ([fwd, vit, bwd], results)
}

/// Whether `a` (CPU) and `b` (CUDA) agree, with what differs printed.
fn agree(a: &Results, b: &Results, grad_tol: f64) -> bool {
    let rel = (a.log_z - b.log_z).abs() / a.log_z.abs().max(1.0);
    let grad = a
        .grad
        .iter()
        .zip(&b.grad)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    let same = a.best.segments == b.best.segments;
    println!(
        "agreement: log Z cpu {:.12} cuda {:.12} (rel {rel:.1e}); Viterbi segments {} ({} and {}), \
         scores {:.12} and {:.12}; scores' gradient max |diff| {grad:.1e} (bound {grad_tol:.1e})",
        a.log_z,
        b.log_z,
        if same { "equal" } else { "DIFFER" },
        a.best.segments.len(),
        b.best.segments.len(),
        a.best.score,
        b.best.score,
    );
    rel <= 1e-9 && same && grad <= grad_tol
}

fn main() {
    let (repeats, given, s) = args();
    let (cpu_only, log_domain, cuda_only) = (given[0], given[1], given[2]);
    let arrays = s.arrays();
    let view = arrays.view(s.k);
    // GUARANTEES.md: each log-space value of size M rounds by about 2⁻⁵³·M and the errors
    // add up like a random walk along the sequence; 2⁻⁴⁵ leaves a factor 256 of margin.
    let grad_tol = 2f64.powi(-45)
        * view
            .magnitudes()
            .iter()
            .map(|m| m.bound)
            .fold(0.0, f64::max)
        * (s.t as f64).sqrt();
    let p = Problem::Structured(view);
    let cuts = arrays.scores.iter().filter(|x| x.is_infinite()).count();
    println!(
        "gene shape ({}, {}, {}, {}): {} coding labels, {cuts} -inf scores, {repeats} repeats, \
         {} CPU threads; gradients' agreement bound {grad_tol:.1e}",
        s.b,
        s.t,
        s.k,
        s.c,
        s.coding,
        rayon::current_num_threads()
    );
    let names = ["forward", "viterbi", "fwd+bwd"];
    let line = |who: &str, t: &[f64; 3]| {
        let parts: Vec<String> = names
            .iter()
            .zip(t)
            .map(|(n, ms)| format!("{n} {ms:.1} ms"))
            .collect();
        println!("{who}: {}", parts.join(", "));
    };
    let cpu = (!cuda_only).then(|| {
        let cpu = AnyEngine::Streaming(StreamingEngine::new());
        let (ct, cr) = measure(&cpu, &p, repeats);
        line("cpu/streaming", &ct);
        (ct, cr)
    });
    if cpu_only {
        println!("cuda: skipped (--cpu-only)");
        return;
    }
    let Some(gpu) = semicrf_cuda::CudaEngine::usable_or_skip(0) else {
        println!("cuda: skipped (no usable GPU; the reason is above)");
        return;
    };
    let mut ok = true;
    let engines = [
        Some(("cuda/streaming", gpu)),
        log_domain.then(|| ("cuda/streaming (log domain only)", gpu.log_domain_only())),
    ];
    for (name, e) in engines.into_iter().flatten() {
        let reruns = semicrf_cuda::CudaEngine::reruns();
        let (gt, gr) = measure(&AnyEngine::Cuda(e), &p, repeats);
        line(name, &gt);
        let Some((ct, cr)) = &cpu else {
            continue;
        };
        let ratios: Vec<String> = names
            .iter()
            .zip(ct.iter().zip(&gt))
            .map(|(n, (c, g))| format!("{n} {:.2}x", c / g))
            .collect();
        println!("cpu/cuda: {}", ratios.join(", "));
        println!(
            "reruns: {} sequences handed to the log-domain kernels",
            semicrf_cuda::CudaEngine::reruns() - reruns
        );
        ok &= agree(cr, &gr, grad_tol);
    }
    if !ok {
        std::process::exit(1);
    }
}
