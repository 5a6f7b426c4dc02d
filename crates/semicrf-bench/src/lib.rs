//! Benchmark support for semicrf: the canonical shapes, the one way every bench, binary and
//! peer script builds its problems, a counting allocator for peak heap, and small helpers for
//! timing and output sizes.
//!
//! Not a library to depend on: it exists for `cargo bench -p semicrf-bench`, the binaries in
//! `src/bin/` and the peer harness in `peers/`.
//!
//! # What is here
//!
//! - [`CANONICAL`]: the shapes S1–S9 of the bench README, with [`shape_label`] and [`bench_id`]
//!   (`cpu/streaming/log/B16_T256_K15_C8`).
//! - [`problem`]: seeded random structured potentials (f32, |score| ≤ [`SCALE`]) with a start
//!   vector that makes the model identical to the peers' virtual-start convention.
//! - [`alloc`]: a counting global allocator and [`alloc::measure`].
//! - [`OutputBytes`]: heap bytes held by an engine's outputs, to subtract from a peak.
//! - [`streaming_formula_bytes`], [`lse_terms`]: the documented memory formula and the
//!   log-sum-exp term count used to judge measurements.
//! - [`sweep`]: the benchmark report's sweeps (T at fixed `(B, K, C)`, K at fixed `(B, T, C)`).
//! - [`report`]: the code of the `report` binary (criterion, memory and peer results in;
//!   `docs/benchmarks.md` and SVG plots out).
//!
//! # Binaries
//!
//! - `memory`: peak heap of streaming (and scan / exact where they fit) against
//!   `memory_required` and the documented formula, as a table and JSON.
//! - `report`: writes `docs/benchmarks.md` and its plots.
//! - `exp_bound`: this machine's `exp` throughput and the fraction of it the streaming forward
//!   achieves at S4.
//! - `export_problem`: writes a problem as interchange JSON (`semicrf_core::model` §10) with our timings and results, for the
//!   peer harness.
//!
//! ```
//! use semicrf_bench::{CANONICAL, problem, shape_label};
//!
//! let s1 = CANONICAL[0].shape;
//! assert_eq!(shape_label(s1), "B32_T64_K7_C9");
//! let p = problem(s1, 0);
//! assert!(p.view().is_ok());
//! ```
#![deny(missing_docs)]

pub mod alloc;
pub mod report;
pub mod sweep;

use std::time::Instant;

use ndarray::{ArrayD, IxDyn};
use semicrf::{
    EntropySemiring, EntropyValue, LogSemiring, MaxSemiring, Problem, Result, Scalar, Semiring,
};
use semicrf_core::testing::{GenSpec, random_problem};
use semicrf_core::{Backward, Decoded, Engine, Error, Op, OwnedPotentials, Segment, Shape};

/// A canonical benchmark shape (the bench README lists them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Canonical {
    /// `S1` … `S9`.
    pub id: &'static str,
    /// `(B, T, K, C)`.
    pub shape: Shape,
}

const fn sh(batch: usize, len: usize, max_duration: usize, labels: usize) -> Shape {
    Shape {
        batch,
        len,
        max_duration,
        labels,
    }
}

/// The canonical shapes S1–S9, in order.
pub const CANONICAL: [Canonical; 9] = [
    Canonical {
        id: "S1",
        shape: sh(32, 64, 7, 9),
    },
    Canonical {
        id: "S2",
        shape: sh(16, 256, 15, 8),
    },
    Canonical {
        id: "S3",
        shape: sh(8, 1024, 31, 8),
    },
    Canonical {
        id: "S4",
        shape: sh(4, 4096, 63, 8),
    },
    Canonical {
        id: "S5",
        shape: sh(1, 16384, 127, 4),
    },
    Canonical {
        id: "S6",
        shape: sh(64, 1000, 100, 24),
    },
    Canonical {
        id: "S7",
        shape: sh(4, 4450, 200, 6),
    },
    Canonical {
        id: "S8",
        shape: sh(1, 100_000, 1000, 24),
    },
    Canonical {
        id: "S9",
        shape: sh(1, 1_000_000, 1000, 24),
    },
];

/// The shape of a canonical id (`"S4"`, case-insensitive).
pub fn canonical(id: &str) -> Option<Shape> {
    CANONICAL
        .iter()
        .find(|c| c.id.eq_ignore_ascii_case(id))
        .map(|c| c.shape)
}

/// `B16_T256_K15_C8`.
pub fn shape_label(s: Shape) -> String {
    format!("B{}_T{}_K{}_C{}", s.batch, s.len, s.max_duration, s.labels)
}

/// `{device}/{algo}/{semiring}/B{B}_T{T}_K{K}_C{C}`, the id of every benchmark.
pub fn bench_id(device: &str, algo: &str, semiring: &str, s: Shape) -> String {
    format!("{device}/{algo}/{semiring}/{}", shape_label(s))
}

/// Above this many bytes of materialised `f64` edges (`B·T·K·C²·8`), the exact and scan
/// benchmarks skip a shape: 4 GiB.
pub const EDGE_LIMIT_BYTES: u64 = 4 << 30;

/// Whether exact and scan are benchmarked at `s` (its edge tensor is at most
/// [`EDGE_LIMIT_BYTES`]).
pub fn edges_fit(s: Shape) -> bool {
    semicrf_core::edge_tensor_bytes(s) <= EDGE_LIMIT_BYTES
}

/// Scores, transitions and durations are uniform in `[-SCALE, SCALE]`.
pub const SCALE: f64 = 1.0;

/// The seed the benches use.
pub const SEED: u64 = 0x5e31c6f;

/// The problem every bench, binary and peer comparison uses for shape `s` and `seed`.
///
/// Drawn by [`semicrf_core::testing::random_problem`] with [`GenSpec::new`]: scores `(B, T, C)`,
/// a static `(C, C)` transition and `(K, C)` duration scores, uniform in `[-SCALE, SCALE]`,
/// every length `T`; then rounded to `f32`. The start vector is set to
/// `start[c] = logsumexp_i transition[i, c]` (computed in `f64` from the rounded transition,
/// then rounded), which makes our model the peers' (flash-semicrf, torch-struct): their first
/// segment follows a virtual start from which every label `i` transitions with
/// `transition[i, c]`. There is no end vector and no boundary scores.
pub fn problem(s: Shape, seed: u64) -> OwnedPotentials<f32> {
    let mut spec = GenSpec::new(s.batch, s.len, s.max_duration, s.labels);
    spec.scale = SCALE;
    let mut p = random_problem(seed, &spec).cast::<f32>();
    let c = s.labels;
    let tr = p
        .transition
        .as_ref()
        .expect("GenSpec::new draws a transition");
    let start = ArrayD::from_shape_fn(IxDyn(&[c]), |ix| {
        let j = ix[0];
        let m = (0..c)
            .map(|i| tr[[i, j]] as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = (0..c).map(|i| (tr[[i, j]] as f64 - m).exp()).sum();
        (m + sum.ln()) as f32
    });
    p.start = Some(start);
    p
}

/// One upstream gradient of 1 per sequence.
pub fn ones(batch: usize) -> Vec<f64> {
    vec![1.0; batch]
}

/// Heap bytes held by an engine's output, to subtract from a measured peak.
pub trait OutputBytes {
    /// Bytes of heap the value owns.
    fn output_bytes(&self) -> u64;
}

impl OutputBytes for Vec<f64> {
    fn output_bytes(&self) -> u64 {
        (self.capacity() * 8) as u64
    }
}

fn array_bytes<D: ndarray::Dimension>(a: &ndarray::Array<f64, D>) -> u64 {
    (a.len() * 8) as u64
}

impl OutputBytes for Backward {
    fn output_bytes(&self) -> u64 {
        let g = &self.grad;
        let opt = |a: &Option<ndarray::Array3<f64>>| a.as_ref().map_or(0, array_bytes);
        self.log_z.output_bytes()
            + opt(&g.scores)
            + g.transition.as_ref().map_or(0, array_bytes)
            + g.duration.as_ref().map_or(0, array_bytes)
            + g.start.as_ref().map_or(0, array_bytes)
            + g.end.as_ref().map_or(0, array_bytes)
            + opt(&g.begin_boundary)
            + opt(&g.end_boundary)
            + g.edges.as_ref().map_or(0, array_bytes)
            + array_bytes(&self.boundary_marginals)
    }
}

impl OutputBytes for Vec<Decoded> {
    fn output_bytes(&self) -> u64 {
        let own = self.capacity() * std::mem::size_of::<Decoded>();
        let segs: usize = self
            .iter()
            .map(|d| d.segments.capacity() * std::mem::size_of::<Segment>())
            .sum();
        (own + segs) as u64
    }
}

impl OutputBytes for Vec<EntropyValue> {
    fn output_bytes(&self) -> u64 {
        (self.capacity() * std::mem::size_of::<EntropyValue>()) as u64
    }
}

impl<T: OutputBytes, E> OutputBytes for core::result::Result<T, E> {
    fn output_bytes(&self) -> u64 {
        self.as_ref().map_or(0, OutputBytes::output_bytes)
    }
}

/// Runs `op` on `p` with any engine and returns the heap bytes of its outputs (what a memory
/// measurement subtracts from its peak). A forward pass runs in the semiring its
/// [`Op::Forward`] names (`log`, `max` or `entropy`).
pub fn run<F: Scalar, E: Engine<F>>(e: &E, p: &Problem<'_, F>, op: Op) -> Result<u64> {
    Ok(match op {
        Op::Forward(info) if info == LogSemiring::info() => {
            e.forward::<LogSemiring>(p)?.output_bytes()
        }
        Op::Forward(info) if info == MaxSemiring::info() => {
            e.forward::<MaxSemiring>(p)?.output_bytes()
        }
        Op::Forward(info) if info == EntropySemiring::info() => {
            e.forward::<EntropySemiring>(p)?.output_bytes()
        }
        Op::Forward(info) => {
            return Err(Error::Unsupported {
                backend: e.name(),
                what: format!("the {} semiring in this harness", info.name),
            });
        }
        Op::Backward => e.backward(p, &ones(p.shape().batch))?.output_bytes(),
        Op::Viterbi => e.viterbi(p)?.output_bytes(),
    })
}

/// The streaming engine's working memory by the yardstick formula of the bench README, in bytes of `f64`:
/// `8·B·(K·C + C)` for a forward pass (a ring of the last `K` values of `u` and one `α`), and
/// `8·B·(K·C + sqrt(T·K)·C)` with the backward (checkpoints every `≈ sqrt(T·K)` positions plus
/// one recomputed interval). Constants are 1: it is the yardstick measured bytes are compared
/// against, not a bound.
pub fn streaming_formula_bytes(s: Shape, op: Op) -> u64 {
    let (b, t, k, c) = (
        s.batch as f64,
        s.len as f64,
        s.max_duration as f64,
        s.labels as f64,
    );
    let per_seq = match op {
        Op::Forward(_) => k * c + c,
        Op::Backward | Op::Viterbi => k * c + (t * k).sqrt() * c,
    };
    (8.0 * b * per_seq).round() as u64
}

/// Log-sum-exp terms the factorized streaming recurrence evaluates in a log forward pass:
/// `C²` (the sum over previous labels) plus `K·C` (the sum over durations) per position per
/// sequence, i.e. `B·T·(C² + K·C)` (the first `K` positions have fewer durations; ignored).
pub fn lse_terms(s: Shape) -> u64 {
    let (b, t, k, c) = (
        s.batch as u64,
        s.len as u64,
        s.max_duration as u64,
        s.labels as u64,
    );
    b * t * (c * c + k * c)
}

/// The median of `xs` (which it sorts); NaN if empty.
pub fn median(xs: &mut [f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        0.5 * (xs[n / 2 - 1] + xs[n / 2])
    }
}

/// The command line of the timing binaries, `[--repeats N] [FLAG ...] [S1 S2 ...]`: the
/// number of repeats (`repeats` when not given), whether each of `flags` was given, and the
/// shapes' ids, upper-cased (S1–S7 when none is given). Panics with the usage on a bad
/// `--repeats`.
pub fn timing_args(repeats: usize, flags: &[&str]) -> (usize, Vec<bool>, Vec<String>) {
    let (mut repeats, mut given, mut shapes) = (repeats, vec![false; flags.len()], Vec::new());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--repeats" {
            repeats = args
                .next()
                .and_then(|v| v.parse().ok())
                .expect("--repeats takes an integer");
        } else if let Some(i) = flags.iter().position(|f| *f == a) {
            given[i] = true;
        } else {
            shapes.push(a.to_uppercase());
        }
    }
    if shapes.is_empty() {
        shapes = CANONICAL.iter().take(7).map(|c| c.id.to_string()).collect();
    }
    (repeats, given, shapes)
}

/// Runs `f` `repeats` times and returns each run's wall time in milliseconds.
pub fn time_ms<R>(repeats: usize, mut f: impl FnMut() -> R) -> Vec<f64> {
    (0..repeats)
        .map(|_| {
            let t0 = Instant::now();
            std::hint::black_box(f());
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect()
}

/// `12.0 KiB` etc. (re-exported from core).
pub use semicrf_core::human_bytes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_ids_follow_the_house_format() {
        assert_eq!(
            bench_id("cpu", "streaming", "log", canonical("s2").unwrap()),
            "cpu/streaming/log/B16_T256_K15_C8"
        );
    }

    #[test]
    fn problems_are_seeded_bounded_and_carry_the_virtual_start() {
        let s = Shape::new(2, 10, 3, 4);
        let a = problem(s, 7);
        assert_eq!(a, problem(s, 7));
        assert!(a.scores.iter().all(|x| x.abs() <= SCALE as f32));
        let tr = a.transition.as_ref().unwrap();
        let st = a.start.as_ref().unwrap();
        for j in 0..4 {
            let direct: f64 = (0..4).map(|i| (tr[[i, j]] as f64).exp()).sum::<f64>().ln();
            assert!((st[j] as f64 - direct).abs() < 1e-6);
        }
    }

    #[test]
    fn the_edge_limit_separates_s4_from_s6() {
        assert!(edges_fit(canonical("S4").unwrap()));
        assert!(!edges_fit(canonical("S6").unwrap()));
        assert!(!edges_fit(canonical("S8").unwrap()));
    }
}
