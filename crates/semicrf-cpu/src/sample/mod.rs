//! Exact posterior samples on the CPU engines (model §12): each engine restores its forward
//! values block by block ([`ForwardBlocks`](semicrf_core::ForwardBlocks)) and the core's
//! [`sample_sequence`] draws the samples, one sequence per task, parallel over the batch.
//!
//! | engine | forward values | memory per sequence in flight |
//! |---|---|---|
//! | exact | the whole table, one block | edges + `(L + K)·C` words |
//! | scan | a ring saved every `Δ`, one block of rows recomputed at a time | edges + `(⌈L/Δ⌉ - 1)·K·C + (Δ + K)·C` words |
//! | streaming | the forward state saved before every block, `α`, `u` and the rows of one block recomputed at a time | `⌈L/Δ⌉` saved states + `5·(Δ + K)·C` words |
//!
//! Samples depend on the seed and the sequence's values only: bitwise the same for any
//! number of threads, and the same on exact and scan (their forward values are bitwise
//! equal); the streaming engine's forward values differ from theirs in the last bits, so a
//! sample whose uniform falls within rounding of a boundary between two choices may differ.

mod edge;
mod streaming;

use semicrf_core::sample::sample_sequence;
use semicrf_core::{EngineInfo, LogSemiring, Op, Problem, Query, Result, Sampler, Samples, Scalar};

use crate::edge::lanes::{sequence, with_lanes};
use crate::par::map_indexed;
use crate::streaming::forward::{DdFwd, StaticFwd};
use crate::streaming::input::SeqIn;
use crate::streaming::params::Params;
use crate::{ExactEngine, Parallelism, ScanEngine, StreamingEngine};
use edge::EdgeBlocks;
use streaming::StreamBlocks;

/// Samples of the edge program with blocks of `delta` segment ends.
fn sample_edges<F: Scalar>(
    par: Parallelism,
    problem: &Problem<'_, F>,
    n: usize,
    seed: u64,
    delta: usize,
) -> Result<Samples> {
    semicrf_core::range::check_probabilities(problem)?;
    let lengths = problem.lengths();
    map_indexed(par, lengths.len(), |b| {
        let edges = sequence(problem, b)?;
        with_lanes!(&edges, |lanes| {
            let mut blocks = EdgeBlocks::new(&lanes, lengths[b], delta);
            sample_sequence(&mut blocks, b, n, seed)
        })
    })
    .into_iter()
    .collect()
}

/// The exact engine samples from its whole forward table (one block, no recomputation).
impl<F: Scalar> Sampler<F> for ExactEngine {
    fn sample(&self, problem: &Problem<'_, F>, n: usize, seed: u64) -> Result<Samples> {
        self.check(&Query::of(problem, Op::Backward))?;
        sample_edges(self.parallelism, problem, n, seed, usize::MAX)
    }
}

/// The scan engine samples from checkpoints every `Δ` positions (its backward's interval).
impl<F: Scalar> Sampler<F> for ScanEngine {
    fn sample(&self, problem: &Problem<'_, F>, n: usize, seed: u64) -> Result<Samples> {
        self.check(&Query::of(problem, Op::Backward))?;
        let sh = problem.shape();
        let delta = self.effective_checkpoint_interval(sh.len, sh.max_duration);
        sample_edges(self.parallelism, problem, n, seed, delta)
    }
}

/// The streaming engine samples from checkpoints every `Δ` positions
/// ([`StreamingEngine::delta`]), recomputing one block of forward values at a time.
impl<F: Scalar> Sampler<F> for StreamingEngine {
    fn sample(&self, problem: &Problem<'_, F>, n: usize, seed: u64) -> Result<Samples> {
        let Problem::Structured(p) = problem else {
            return Err(crate::streaming::edges_unsupported());
        };
        semicrf_core::range::check_probabilities(problem)?;
        let par = Params::<LogSemiring>::new(&p.shared());
        let delta = self.delta(p.shape());
        let dd = p.has_duration_dependent_transition();
        map_indexed(self.parallelism, p.shape().batch, |b| {
            let seq = SeqIn::new(p, b);
            if dd {
                let mut blocks = StreamBlocks::<DdFwd<LogSemiring>, F>::new(&seq, &par, delta);
                sample_sequence(&mut blocks, b, n, seed)
            } else {
                let mut blocks = StreamBlocks::<StaticFwd<LogSemiring>, F>::new(&seq, &par, delta);
                sample_sequence(&mut blocks, b, n, seed)
            }
        })
        .into_iter()
        .collect()
    }
}
