//! The exact algorithm on the CPU: the edge-form dynamic program with full tables.
//!
//! [`ExactEngine`] is the most general CPU engine: it takes structured potentials (2-D or 3-D
//! transition) and edge potentials `(B, T, K, C, C)`, and answers every query. It pays
//! `O(L·K·C²)` time per sequence whatever the input form; for structured input with a static
//! transition the streaming engine does less work (`O(L·C·(C+K))`) in far less memory.
//!
//! Its backward pass keeps the whole forward table of a sequence (`(L + K)·C` values): one
//! forward and one backward sweep, nothing recomputed. The recurrences, input handling and
//! determinism guarantees are those of the shared edge program (`edge` module); the only
//! difference from [`ScanEngine`](crate::ScanEngine) is that checkpoint interval, `Δ = L`.

use semicrf_core::{
    Algorithm, Backward, Decoded, Device, Engine, EngineInfo, Op, Problem, Query, Result, Scalar,
    Semiring,
};

use crate::{Parallelism, edge};

const BACKEND: &str = "cpu/exact";

/// The exact engine on the CPU: full forward tables over (materialised) edges.
///
/// Supports every [`Query`]: structured potentials with a 2-D or 3-D transition and edge
/// potentials; forward in any semiring, backward, Viterbi. Structured input is materialised
/// one sequence at a time. Working memory per sequence in flight: its `f64` edges
/// (`L·min(K, L)·C²` for structured input, none for edge input) and `O(L·C)` tables; the
/// formula is on [`EngineInfo::memory_required`].
///
/// ```
/// use ndarray::{Array2, Array3};
/// use semicrf_core::{Engine, LogSemiring, Potentials, Problem};
/// use semicrf_cpu::ExactEngine;
///
/// let scores = Array3::<f32>::from_elem((2, 6, 3), 0.25);
/// let transition = Array2::<f32>::zeros((3, 3));
/// let lengths = [6, 4];
/// let p: Problem<f32> = Potentials::builder(scores.view(), &lengths, 3)
///     .transition(transition.view())
///     .build()?
///     .into();
/// let engine = ExactEngine::new();
/// let log_z = engine.forward::<LogSemiring>(&p)?;
/// let out = engine.backward(&p, &[1.0, 1.0])?;
/// assert_eq!(out.log_z, log_z);
/// // Some segment starts at position 0 with probability 1.
/// assert!((out.boundary_marginals[[0, 0]] - 1.0).abs() < 1e-12);
/// let best = engine.viterbi(&p)?;
/// assert_eq!(best[1].segments.iter().map(|s| s.duration).sum::<usize>(), 4);
/// # Ok::<(), semicrf_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ExactEngine {
    /// Threading: rayon over the batch, or the calling thread only.
    pub parallelism: Parallelism,
}

impl ExactEngine {
    /// An engine with default settings (rayon over the batch).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the threading.
    pub fn parallelism(mut self, parallelism: Parallelism) -> Self {
        self.parallelism = parallelism;
        self
    }
}

impl EngineInfo for ExactEngine {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Exact
    }

    fn device(&self) -> Device {
        Device::Cpu
    }

    /// Every query is supported, except shapes the program cannot index: `K·C` above `2³²`
    /// (Viterbi backpointers are `u32`) or one sequence's edge tensor beyond the address
    /// space ([`Error::Unsupported`](semicrf_core::Error::Unsupported)).
    fn check(&self, query: &Query) -> Result<()> {
        edge::check(BACKEND, query)
    }

    /// The edge program's formula (see below) with the checkpoint interval `Δ = T`: one
    /// interval, so `n = 1` and the interval rows are the whole table.
    ///
    /// With `K' = min(K, T)` for structured input and `K` for edges, `P` the sequences in
    /// flight (1 when sequential, else `min(B, query.threads)`), `W` the semiring's width in
    /// words, `w` the input element size, `Δ' = min(Δ, T)` and `n = ⌈T/Δ'⌉`, in `f64` words
    /// unless marked:
    ///
    /// ```text
    /// M   = T·K'·C²                       one sequence's materialised edges (structured input)
    /// F   = W·(2·K'·C + C) + w·C bytes    forward: ring, row, gathered terms, lane buffer
    /// V   = 2·K'·C + C + 4·T·C bytes + w·C bytes   Viterbi: ring, row, u32 backpointers, lane
    /// Bw  = (n + 3)·K'·C + (Δ' + K')·C + K'·C² + 7·C + 2·w·C bytes
    ///                                     backward: checkpoints, rings, interval rows, one
    ///                                     start's marginals, per-label rows, lane buffers
    /// G   = 3·T·C + K'·C + 2·C + C²·(K' for a (K, C, C) transition, else 1) + T
    ///                                     one sequence's pulled-back gradient, boundary row
    ///
    /// forward    P·(M + F)                      + B·128 + 64 KiB
    /// viterbi    P·(M + V)                      + B·128 + 64 KiB
    /// backward   P·(M + Bw + (T + 2)·C + T)     + B·(G + 128) + 64 KiB   structured input
    /// backward   P·Bw                           + B·128 + 64 KiB         edge input
    /// ```
    fn memory_required(&self, query: &Query) -> Result<u64> {
        edge::memory(BACKEND, query, self.parallelism, usize::MAX)
    }
}

impl<F: Scalar> Engine<F> for ExactEngine {
    fn forward<S: Semiring>(&self, problem: &Problem<'_, F>) -> Result<Vec<S::Value>> {
        self.check(&Query::of(problem, Op::forward::<S>()))?;
        edge::forward::<S, F>(self.parallelism, problem)
    }

    fn backward(&self, problem: &Problem<'_, F>, upstream: &[f64]) -> Result<Backward> {
        self.check(&Query::of(problem, Op::Backward))?;
        edge::backward(self.parallelism, problem, upstream, usize::MAX)
    }

    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        self.check(&Query::of(problem, Op::Viterbi))?;
        edge::viterbi(self.parallelism, problem)
    }
}
