//! The scan algorithm on the CPU: the edge-form dynamic program with a ring of the last `K`
//! rows and a checkpointed backward.
//!
//! [`ScanEngine`] runs the same edge program as [`ExactEngine`](crate::ExactEngine) (the
//! `edge` module: recurrences, input handling, determinism), but its backward pass saves the
//! forward ring only every `Δ` positions (default `max(K, ⌈sqrt(T·K)⌉)`) and recomputes `α`
//! one interval at a time, so beyond the edges it needs `O((T/Δ)·K·C + Δ·C + K·C²)` per
//! sequence in flight instead of `O(T·C)`, for about one extra forward sweep. Results are
//! bitwise identical for every `Δ`, and to the exact engine's.
//!
//! Structured input is materialised one sequence at a time, exactly as by the exact engine,
//! so scan never needs more memory than exact; auto-selection tries exact first (it is
//! faster) and scan where exact does not fit. **Prefer the streaming engine for structured
//! potentials with a static `(C, C)` transition**: it never materialises edges and does
//! `O(T·C·(C+K))` work.

use semicrf_core::{
    Algorithm, Backward, Decoded, Device, Engine, EngineInfo, Op, Problem, Query, Result, Scalar,
    Semiring,
};

use crate::{Parallelism, edge};

const BACKEND: &str = "cpu/scan";

/// The scan engine on the CPU: materialised edges, a `K·C` ring of DP state, checkpointed
/// backward.
///
/// ```
/// use ndarray::{Array2, Array3};
/// use semicrf_core::{Engine, LogSemiring, Potentials, Problem};
/// use semicrf_cpu::ScanEngine;
///
/// let scores = Array3::<f64>::from_elem((2, 6, 3), 0.25);
/// let transition = Array2::<f64>::zeros((3, 3));
/// let lengths = [6, 4];
/// let p: Problem<f64> = Potentials::builder(scores.view(), &lengths, 3)
///     .transition(transition.view())
///     .build()?
///     .into();
/// let engine = ScanEngine::new().checkpoint_interval(Some(4));
/// let log_z = engine.forward::<LogSemiring>(&p)?;
/// let best = engine.viterbi(&p)?;
/// assert!(best[0].score <= log_z[0]);
/// # Ok::<(), semicrf_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ScanEngine {
    /// Threading.
    pub parallelism: Parallelism,
    /// The checkpoint interval `Δ` of the backward pass; `None` (the default) picks
    /// `max(K, ⌈sqrt(T·K)⌉)` for the padded length `T`. `Some(0)` is taken as 1.
    pub checkpoint_interval: Option<usize>,
}

impl ScanEngine {
    /// An engine with default settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the threading.
    pub fn parallelism(mut self, parallelism: Parallelism) -> Self {
        self.parallelism = parallelism;
        self
    }

    /// Sets the checkpoint interval `Δ` of the backward pass (`None`: automatic).
    pub fn checkpoint_interval(mut self, delta: Option<usize>) -> Self {
        self.checkpoint_interval = delta;
        self
    }

    /// The checkpoint interval `Δ` used for padded length `len` and maximum duration `k`:
    /// the configured one, or the smallest `d >= max(k, 1)` with `d² >= len·k`.
    pub fn effective_checkpoint_interval(&self, len: usize, k: usize) -> usize {
        match self.checkpoint_interval {
            Some(d) => d.max(1),
            None => {
                let tk = len.saturating_mul(k);
                let mut d = (tk as f64).sqrt().ceil() as usize;
                while d > 1 && (d - 1).saturating_mul(d - 1) >= tk {
                    d -= 1;
                }
                while d.saturating_mul(d) < tk {
                    d += 1;
                }
                d.max(k).max(1)
            }
        }
    }

    fn delta<F: Scalar>(&self, problem: &Problem<'_, F>) -> usize {
        let sh = problem.shape();
        self.effective_checkpoint_interval(sh.len, sh.max_duration)
    }
}

impl EngineInfo for ScanEngine {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Scan
    }

    fn device(&self) -> Device {
        Device::Cpu
    }

    /// As the exact engine: every query, except `K·C` above `2³²` or one sequence's edge
    /// tensor beyond the address space.
    fn check(&self, query: &Query) -> Result<()> {
        edge::check(BACKEND, query)
    }

    /// The exact engine's formula (`ExactEngine`'s [`EngineInfo::memory_required`]) with
    /// `Δ` = [`ScanEngine::effective_checkpoint_interval`] of `T` and `K`: the backward holds
    /// `n = ⌈T/Δ⌉` checkpoints of `K'·C` and `Δ + K'` rows instead of the whole table.
    fn memory_required(&self, query: &Query) -> Result<u64> {
        let sh = query.shape;
        let delta = self.effective_checkpoint_interval(sh.len, sh.max_duration);
        edge::memory(BACKEND, query, self.parallelism, delta)
    }
}

impl<F: Scalar> Engine<F> for ScanEngine {
    fn forward<S: Semiring>(&self, problem: &Problem<'_, F>) -> Result<Vec<S::Value>> {
        self.check(&Query::of(problem, Op::forward::<S>()))?;
        edge::forward::<S, F>(self.parallelism, problem)
    }

    fn backward(&self, problem: &Problem<'_, F>, upstream: &[f64]) -> Result<Backward> {
        self.check(&Query::of(problem, Op::Backward))?;
        edge::backward(self.parallelism, problem, upstream, self.delta(problem))
    }

    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        self.check(&Query::of(problem, Op::Viterbi))?;
        edge::viterbi(self.parallelism, problem)
    }
}
