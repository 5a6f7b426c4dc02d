//! The streaming engine on a [`PotentialSource`]: the same recurrences, reading rows through a
//! chunk buffer ([`SeqIn::chunked`]), the backward pass delivering its rows to a
//! [`GradientSink`], and Viterbi with checkpoints instead of backpointers.

use semicrf_core::{
    EntropySemiring, Form, GradientRows, GradientSink, LogSemiring, MaxSemiring, Op,
    PotentialSource, Query, Result, Scalar, Semiring, SourceEngine, SourceRows, StreamedBackward,
    StreamedPotentials, check_upstream,
};

use super::backward::{self, DdBwd, Outside, SeqOut, StaticBwd};
use super::forward::{DdFwd, Forward, StaticFwd};
use super::input::{Dir, SeqIn};
use super::params::Params;
use super::{BACKEND, StreamingEngine, run_forward, sum_partials, viterbi};
use crate::par::map_indexed;

/// A sized view of a source of any type, so that the readers hold it as a trait object.
struct Source<'a, P: ?Sized>(&'a P);

impl<F: Scalar, P: PotentialSource<F> + ?Sized> PotentialSource<F> for Source<'_, P> {
    fn lengths(&self) -> &[usize] {
        self.0.lengths()
    }
    fn labels(&self) -> usize {
        self.0.labels()
    }
    fn has_begin_boundary(&self) -> bool {
        self.0.has_begin_boundary()
    }
    fn has_end_boundary(&self) -> bool {
        self.0.has_end_boundary()
    }
    fn fill(&self, sequence: usize, t0: usize, rows: SourceRows<'_, F>) -> Result<()> {
        self.0.fill(sequence, t0, rows)
    }
}

impl StreamingEngine {
    fn forward_src<S: Semiring, Fw: Forward<S>, F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        p: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<S::Value>> {
        let par = Params::<S>::new(p.shared());
        let rows = self.rows_per_chunk();
        let probabilities = S::NAME == EntropySemiring::NAME;
        let results = map_indexed(self.parallelism, p.shape().batch, |b| {
            let src = Source(p.source());
            let seq = SeqIn::chunked(&src, b, rows, Dir::Up, Some(p.shared_bound()));
            let v = run_forward::<S, Fw, F>(&seq, &par);
            seq.verify(probabilities).map(|()| v)
        });
        results.into_iter().collect()
    }

    fn backward_src<Fw, Bw, F, P, G>(
        &self,
        p: &StreamedPotentials<'_, F, P>,
        upstream: &[f64],
        sink: &G,
    ) -> Result<StreamedBackward>
    where
        Fw: Forward<LogSemiring>,
        Bw: Outside,
        F: Scalar,
        P: PotentialSource<F> + ?Sized,
        G: GradientSink + ?Sized,
    {
        let sh = p.shape();
        let par = Params::<LogSemiring>::new(p.shared());
        let shared = Bw::shared(&par);
        let delta = self.delta(sh);
        let rows = self.rows_per_chunk();
        let source = p.source();
        let boundaries = [source.has_begin_boundary(), source.has_end_boundary()];
        let pipeline = self.pipelines(sh.batch, rayon::current_num_threads());
        let results = map_indexed(self.parallelism, sh.batch, |b| {
            let src = Source(source);
            let up = SeqIn::chunked(&src, b, rows, Dir::Up, Some(p.shared_bound()));
            let down = SeqIn::chunked(&src, b, rows, Dir::Down, None);
            let mut put = |t0: usize, r: GradientRows<'_>| sink.put(b, t0, r);
            let out = SeqOut {
                rows,
                boundaries,
                sink: &mut put,
            };
            backward::backward::<Fw, Bw, F>(
                up,
                down,
                &par,
                &shared,
                delta,
                upstream[b],
                out,
                pipeline,
            )
        });
        let dd = p.shared().has_duration_dependent_transition();
        let (log_z, grad) = sum_partials(&par, dd, results, upstream)?;
        Ok(StreamedBackward { log_z, grad })
    }
}

impl<F: Scalar> SourceEngine<F> for StreamingEngine {
    fn forward_streamed<S: Semiring, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<S::Value>> {
        if problem.shared().has_duration_dependent_transition() {
            self.forward_src::<S, DdFwd<S>, F, P>(problem)
        } else {
            self.forward_src::<S, StaticFwd<S>, F, P>(problem)
        }
    }

    fn backward_streamed<P: PotentialSource<F> + ?Sized, G: GradientSink + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
        upstream: &[f64],
        sink: &G,
    ) -> Result<StreamedBackward> {
        check_upstream(upstream, problem.shape().batch)?;
        if problem.shared().has_duration_dependent_transition() {
            self.backward_src::<DdFwd<LogSemiring>, DdBwd, F, P, G>(problem, upstream, sink)
        } else {
            self.backward_src::<StaticFwd<LogSemiring>, StaticBwd, F, P, G>(problem, upstream, sink)
        }
    }

    fn viterbi_streamed<P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<Decoded>> {
        let par = Params::<MaxSemiring>::new(problem.shared());
        let dd = problem.shared().has_duration_dependent_transition();
        let rows = self.rows_per_chunk();
        let (delta, adaptive) = self.viterbi_delta(problem.shape());
        let tail = self.viterbi_tail_positions(problem.shape());
        let batch = problem.shape().batch;
        let pipeline = self.pipelines(batch, rayon::current_num_threads());
        let results = map_indexed(self.parallelism, batch, |b| {
            let src = Source(problem.source());
            let bound = Some(problem.shared_bound());
            let mut seq = SeqIn::chunked(&src, b, rows, Dir::Up, bound);
            let mut ahead = pipeline.then(|| SeqIn::chunked(&src, b, rows, Dir::Up, None));
            let d = viterbi::viterbi_checkpointed(
                &mut seq,
                ahead.as_mut(),
                &par,
                dd,
                delta,
                adaptive,
                tail,
            );
            seq.verify(false)?;
            if let Some(a) = &ahead {
                a.verify(false)?;
            }
            Ok(d)
        });
        results.into_iter().collect()
    }

    /// [`StreamingEngine::memory_bytes_streamed`] for the query.
    fn memory_required_streamed(&self, query: &Query) -> Result<u64> {
        let (dd, boundaries) = match query.form {
            Form::Structured {
                duration_dependent_transition,
                boundaries,
            } => (duration_dependent_transition, boundaries),
            Form::Edges => return Err(super::edges_unsupported()),
        };
        let tensors = 1 + boundaries.iter().filter(|&&x| x).count();
        let bytes = usize::try_from(query.dtype_bytes).unwrap_or(usize::MAX);
        self.memory_bytes_streamed(query.shape, dd, query.op, query.threads, bytes, tensors)
            .finish(BACKEND, query.shape)
    }
}

use semicrf_core::{ByteCount, Decoded, Shape};

impl StreamingEngine {
    /// Working bytes of `op` on a streamed problem of `shape` whose source gives `tensors`
    /// position tensors (1 to 3) of `dtype_bytes`-byte elements, planned for `threads`
    /// threads: [`StreamingEngine::memory_bytes`] with, instead of anything of size `T·C`,
    ///
    /// - per reader of a source, `ρ·C·tensors·dtype_bytes` bytes of chunk buffer,
    ///   `ρ = min(rows per chunk, T)`: one per sequence in flight for the forward pass and
    ///   Viterbi, two for the backward pass;
    /// - Viterbi: checkpoints of the max forward state (at most `f·(saved + 2C + 6)` each,
    ///   `saved` the ring and prefix sums: `K·C + C` words for a static transition, of which
    ///   a checkpoint keeps only the live windows) and one block of
    ///   `w·Δ'·C` bytes of backpointers, instead of `w·(T+1)·C`. With a configured `Δ`, `n`
    ///   checkpoints; by default `Δ` starts at `K` and doubles while the checkpoints hold
    ///   more than the blocks, so they hold at most the blocks' bytes plus two checkpoints,
    ///   and `Δ` is at most the first `K·2^m` at which `n` full checkpoints fit; when
    ///   [`StreamingEngine::pipelines`], two blocks, a second max forward state and a second
    ///   reader (the traceback recomputes the next block on another thread); and
    ///   `w·min(Λ, T+1)·C` bytes of backpointers kept for the last `Λ` positions, `Λ` those
    ///   that [`StreamingEngine::viterbi_tail`] bytes hold (none by default);
    /// - backward: the ring of unfinished output rows `f·(K+2)·(3C+1)` and one output chunk
    ///   `f·(ρ·(tensors·C + 1) + C)`, instead of nothing (the arrays are outputs).
    ///
    /// At the default `Δ` both Viterbi and backward are `O(K·C + sqrt(T·K)·C)`
    /// per sequence: one sequence of `(T, K, C) = (10⁷, 1000, 24)` in `f32` with a static
    /// transition and the default chunk, planned for two threads, needs 1.5 MB for the
    /// forward pass, 44.9 MB for Viterbi and 159 MB for the backward pass (model §11).
    pub fn memory_bytes_streamed(
        &self,
        shape: Shape,
        dd: bool,
        op: Op,
        threads: usize,
        dtype_bytes: usize,
        tensors: usize,
    ) -> ByteCount {
        self.memory(shape, dd, op, threads, Some((dtype_bytes, tensors)))
    }
}
