//! The streaming algorithm on the CPU: structured potentials, edges never materialised.
//!
//! # Recurrences
//!
//! The factorised recurrence of the model page (`semicrf_core::model`, "The factorised
//! forward"): with `P[t, c] = Σ_{u<t} scores[u, c]` (prefix sums in `f64`, [`prefix`]) and
//! `seg(s, d, j) = P[s+d, j] - P[s, j] + duration[d-1, j] + begin_boundary[s, j]
//! + end_boundary[s+d-1, j]`, for a static transition
//!
//! ```text
//! u_0(j) = start[j],        u_s(j) = ⊕_i α_s(i) ⊗ transition[i, j]          (s ≥ 1)
//! α_t(j) = ⊕_{d=1..min(K,t)} u_{t-d}(j) ⊗ seg(t-d, d, j)
//! result = ⊕_j α_L(j) ⊗ end[j]
//! ```
//!
//! in any semiring ([`forward::StaticFwd`]): the window over `d` is the semiring's
//! [`Ring`](semicrf_semiring::Ring), the step over `i` its
//! [`Matrix`](semicrf_semiring::Matrix). A duration-dependent `(K, C, C)` transition does
//! not factorise and costs `O(K·C²)` per position ([`forward::DdFwd`]). The backward pass
//! (log semiring: gradients and marginals) is in [`backward`], Viterbi (with backpointers,
//! or with checkpoints for a source) in [`viterbi`]. On a
//! [`PotentialSource`](semicrf_core::PotentialSource) ([`streamed`]) the same loops read
//! their rows through a chunk buffer and the backward pass delivers its rows to a
//! [`GradientSink`](semicrf_core::GradientSink) (model §11).
//!
//! | module | what |
//! |---|---|
//! | [`params`] | shared parameters in the layouts the loops read, prepared once per batch |
//! | [`input`] | one sequence's position-wise tensors, read a row at a time (from arrays or a source's chunks) |
//! | [`prefix`] | re-anchored prefix sums and the `-inf` barriers |
//! | [`forward`] | the forward state of each transition form, generic over the semiring |
//! | [`backward`] | the checkpointed outside pass: marginals and gradients |
//! | [`viterbi`] | the max-semiring forward with backpointers, or with checkpoints |
//! | [`streamed`] | the engine on a potentials source ([`SourceEngine`](semicrf_core::SourceEngine)) |
//!
//! # Cost per sequence
//!
//! | | time | working memory |
//! |---|---|---|
//! | forward, static transition | `O(T·C·(C+K))` | `O(K·C)` |
//! | forward, `(K, C, C)` transition | `O(T·K·C²)` | `O(K·C)` |
//! | forward + backward | about 3× the forward | `O(K·C + (T/Δ)·K·C + Δ·C)`, `O(sqrt(T·K)·C)` at the default `Δ` |
//! | Viterbi | the forward | `O(K·C)` + `3·T·C` bytes of backpointers (`K < 2¹⁶`, `C <= 256`; at most `8·T·C`) |
//! | Viterbi on a source | at most 2× the forward | `O(K·C + (T/Δ)·K·C + Δ·C)`, `O(sqrt(T·K)·C)` at the default `Δ` |
//!
//! [`StreamingEngine`]'s [`EngineInfo::memory_required`] gives the exact formula.
//!
//! # Numerics
//!
//! Everything inside is `f64`, whatever the input type. With the log semiring and a static
//! transition the loops run in the linear domain through the log semiring's operators
//! ([`LinearRing`](semicrf_semiring::LinearRing),
//! [`LinearMatrix`](semicrf_semiring::LinearMatrix)), which need far fewer `exp` and `ln`
//! evaluations than a log-sum-exp per term (about `4C` per position instead of
//! `C² + K·C`), with exact log-domain fallbacks wherever the linear domain would lose
//! precision; the backward pass uses the same factors for its marginals. The max and
//! entropy semirings, Viterbi and the duration-dependent transition run in the log domain.
//! No value is ever clamped.

pub(crate) mod backward;
pub(crate) mod forward;
pub(crate) mod input;
pub(crate) mod params;
pub(crate) mod prefix;
mod streamed;
pub(crate) mod viterbi;

use ndarray::{Array1, Array2, Array3, ArrayD, IxDyn};
use rayon::prelude::*;
use semicrf_core::{
    Algorithm, Backward, ByteCount, Decoded, Device, Engine, EngineInfo, Error, Form, GradientRows,
    Gradients, LogSemiring, MaxSemiring, Op, Potentials, Problem, Query, Result, Scalar, Semiring,
    SemiringInfo, Shape, check_feasible, check_upstream,
};

use crate::Parallelism;
use crate::par::{in_flight, map_indexed};
use backward::{DdBwd, Outside, Partials, SeqOut, StaticBwd};
use forward::{DdFwd, Forward, StaticFwd};
use input::SeqIn;
use params::Params;

const BACKEND: &str = "cpu/streaming";

/// The streaming engine on the CPU: the factorised `O(T·C·(C+K))` recurrence over structured
/// potentials in any semiring, with a checkpointed backward pass in `O(sqrt(T·K)·C)` memory
/// per sequence.
///
/// ```
/// use ndarray::{Array2, Array3};
/// use semicrf_core::{Engine, EntropySemiring, LogSemiring, Potentials, Problem};
/// use semicrf_cpu::StreamingEngine;
///
/// let scores = Array3::<f32>::from_elem((2, 50, 4), 0.1);
/// let transition = Array2::<f32>::zeros((4, 4));
/// let lengths = [50, 20];
/// let p: Problem<f32> = Potentials::builder(scores.view(), &lengths, 6)
///     .transition(transition.view())
///     .build()?
///     .into();
/// let engine = StreamingEngine::new().checkpoint_interval(Some(16));
/// let log_z = engine.forward::<LogSemiring>(&p)?;
/// let bw = engine.backward(&p, &[1.0, 1.0])?;
/// assert!((bw.log_z[0] - log_z[0]).abs() < 1e-9);
/// let h = engine.forward::<EntropySemiring>(&p)?;
/// assert!(h[0].entropy > h[1].entropy); // more positions, more uncertainty
/// # Ok::<(), semicrf_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct StreamingEngine {
    /// Threading: over the sequences of the batch.
    pub parallelism: Parallelism,
    /// Positions between saved forward states in the backward pass (and in the Viterbi of a
    /// streamed problem); `None` picks `max(K, ⌈sqrt(T·K)⌉)`, which minimises memory (for
    /// Viterbi, an interval that adapts to the size of the checkpoints during the sweep:
    /// [`StreamingEngine::memory_bytes_streamed`]). Any value `>= 1` gives the same results
    /// bitwise.
    pub checkpoint_interval: Option<usize>,
    /// Rows asked of a [`PotentialSource`](semicrf_core::PotentialSource) at a time, and
    /// delivered to a [`GradientSink`](semicrf_core::GradientSink) at a time; `None`:
    /// [`DEFAULT_CHUNK_ROWS`]. Any value `>= 1` gives the same results bitwise.
    pub chunk_rows: Option<usize>,
    /// Bytes of backpointers that the Viterbi of a streamed problem keeps from its forward
    /// sweep, per sequence in flight, for the last positions of the sequence: the traceback
    /// recomputes no block there (memory traded for time; 0, the default, keeps none). Any
    /// value gives the same results bitwise.
    pub viterbi_tail: usize,
}

/// The rows per chunk of a streamed problem when [`StreamingEngine::chunk_rows`] is `None`.
pub const DEFAULT_CHUNK_ROWS: usize = 1024;

/// Allowance for allocator bookkeeping and small vectors per sequence.
const PER_SEQUENCE_SLACK: usize = 512;
/// Allowance for the batch-level vectors of results and the thread pool's job queue.
const CONSTANT_SLACK: usize = 4096;

impl StreamingEngine {
    /// An engine with default settings (rayon, automatic checkpoint interval).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the threading mode.
    pub fn parallelism(mut self, parallelism: Parallelism) -> Self {
        self.parallelism = parallelism;
        self
    }

    /// Sets the checkpoint interval `Δ` of the backward pass (`None`: automatic).
    pub fn checkpoint_interval(mut self, delta: Option<usize>) -> Self {
        self.checkpoint_interval = delta;
        self
    }

    /// Sets the rows per chunk of a streamed problem (`None`: [`DEFAULT_CHUNK_ROWS`]).
    pub fn chunk_rows(mut self, rows: Option<usize>) -> Self {
        self.chunk_rows = rows;
        self
    }

    /// Sets the bytes of backpointers the Viterbi of a streamed problem keeps for the last
    /// positions of each sequence ([`StreamingEngine::viterbi_tail`]).
    pub fn viterbi_tail(mut self, bytes: usize) -> Self {
        self.viterbi_tail = bytes;
        self
    }

    /// The positions whose backpointers [`StreamingEngine::viterbi_tail`] bytes hold, for
    /// `shape` (3 bytes a label while `K < 2¹⁶` and `C <= 256`, up to 8).
    pub(crate) fn viterbi_tail_positions(&self, shape: Shape) -> usize {
        let (k, c) = (shape.max_duration, shape.labels);
        let width = if k <= u16::MAX as usize { 2 } else { 4 } + if c <= 256 { 1 } else { 4 };
        self.viterbi_tail / (width * c.max(1))
    }

    /// The rows per chunk of a streamed problem: the configured number (at least 1) or
    /// [`DEFAULT_CHUNK_ROWS`].
    pub fn rows_per_chunk(&self) -> usize {
        self.chunk_rows.unwrap_or(DEFAULT_CHUNK_ROWS).max(1)
    }

    /// The checkpoint interval used for `shape`: the configured one (at least 1) or
    /// `max(K, ⌈sqrt(T·K)⌉)`.
    pub fn delta(&self, shape: Shape) -> usize {
        match self.checkpoint_interval {
            Some(d) => d.max(1),
            None => {
                let tk = (shape.len as f64) * (shape.max_duration as f64);
                (tk.sqrt().ceil() as usize).max(shape.max_duration).max(1)
            }
        }
    }

    /// The checkpoint interval of Viterbi on a source, and whether it adapts: the configured
    /// one, fixed; or by default `max(K, 1)` doubled during the sweep while the checkpoints
    /// hold more bytes than the blocks of backpointers, so that both stay near their balance
    /// `O(sqrt(T·S·C))` for checkpoints of `S` words (a static transition's checkpoint keeps
    /// only the open windows, often far fewer than `K·C` words).
    pub(crate) fn viterbi_delta(&self, shape: Shape) -> (usize, bool) {
        match self.checkpoint_interval {
            Some(d) => (d.max(1), false),
            None => (shape.max_duration.max(1), true),
        }
    }

    /// Whether the backward pass of each sequence recomputes the next interval on a second
    /// thread while `β` runs through the current one: with rayon, when the batch has fewer
    /// sequences than there are `threads` (otherwise the batch keeps them busy).
    pub fn pipelines(&self, batch: usize, threads: usize) -> bool {
        self.parallelism != Parallelism::Sequential && batch < threads
    }

    /// Working bytes of `op` on `shape` beyond inputs and returned outputs, for a `(K, C, C)`
    /// transition when `dd`, planned for `threads` threads. With `P = min(B, threads)`
    /// sequences in flight (1 when sequential), `f = 8` bytes, `R = C²` (static) or `K·C²`
    /// (duration-dependent), `Δ' = min(Δ, T + 1)`, `n = ⌈(T+1)/Δ'⌉`:
    ///
    /// - parameters of the semiring `S` (the forward's, log for the backward, max for
    ///   Viterbi): `f·(R (+ R for dd) + K·C + 2C + (K·C + C)·r + (C² + C)·m)` with `r`, `m`
    ///   the words per entry of the semiring's ring and matrix;
    /// - forward state per sequence (static): `f·(2K·C·r + (K + 6C)·w + 8C·w + 6C)`, `w` the
    ///   semiring's width; duration-dependent: `f·(K·C·w + K·C + (2C + K)·w + 4C)`;
    /// - forward: parameters + `P ×` forward state;
    /// - Viterbi: forward (max) + `P × (w(T+1)·C` bytes of backpointers `+ f·max(K, C))`,
    ///   `w` = 3 bytes while `K < 2¹⁶` and `C <= 256`, up to 8;
    /// - backward: parameters (log) + the outside pass's shared operators + `P ×` (forward
    ///   state + `n` checkpoints + interval buffers `f·3Δ'·C` (twice when
    ///   [`StreamingEngine::pipelines`]) + outside state + partials `f·(R + K·C + 2C)`), plus
    ///   `B ×` partials kept for the ordered batch sums, plus the sums `f·(R + K·C + 2C)`;
    ///
    /// plus 512 bytes per sequence and 4 KiB for bookkeeping. The exact per-form sizes are
    /// the `words` functions of the state types. Every term is linear in `B`; the forward
    /// is flat in `T`, the backward grows like `sqrt(T·K)·C` at the default `Δ`.
    pub fn memory_bytes(&self, shape: Shape, dd: bool, op: Op, threads: usize) -> ByteCount {
        self.memory(shape, dd, op, threads, None)
    }

    /// [`StreamingEngine::memory_bytes`] for arrays (`streamed = None`) or for a
    /// [`PotentialSource`](semicrf_core::PotentialSource) of `dtype_bytes`-byte elements and
    /// `tensors` position tensors (`streamed = Some((dtype_bytes, tensors))`).
    pub(crate) fn memory(
        &self,
        shape: Shape,
        dd: bool,
        op: Op,
        threads: usize,
        streamed: Option<(usize, usize)>,
    ) -> ByteCount {
        let (b, t, k, c) = (shape.batch, shape.len, shape.max_duration, shape.labels);
        // Sizes that depend on K and C alone are small sums of the units K, C, K·C, C² and
        // (dd) K·C²; once each unit is below 2^52 words (32 PiB, far beyond any allocation)
        // those sums fit in 64 bits. Every term with B or T goes through checked arithmetic.
        let units = [Some(k), Some(c), k.checked_mul(c), c.checked_mul(c)];
        let kcc = k.checked_mul(c).and_then(|kc| kc.checked_mul(c));
        let small = |x: Option<usize>| x.is_some_and(|x| x < 1 << 52);
        if !units.into_iter().all(small) || (dd && !small(kcc)) {
            return ByteCount::f64s(&[usize::MAX, usize::MAX]);
        }
        let p = in_flight(self.parallelism, b, threads);
        let r = if dd { k * c * c } else { c * c };
        let info = match op {
            Op::Forward(info) => info,
            Op::Backward => LogSemiring::info(),
            Op::Viterbi => MaxSemiring::info(),
        };
        let params = words::<LogSemiring>(k, c, dd, info);
        let fwd = if dd {
            DdFwd::<LogSemiring>::words(k, c, info)
        } else {
            StaticFwd::<LogSemiring>::words(k, c, info)
        };
        let slack =
            ByteCount::bytes(&[b, PER_SEQUENCE_SLACK]) + ByteCount::bytes(&[CONSTANT_SLACK]);
        let partials = r + k * c + 2 * c;
        let rows = self.rows_per_chunk();
        // A chunked reader's buffers (none on arrays); the backward pass has two.
        let reader = match streamed {
            Some((bytes, tensors)) => ByteCount::bytes(&[rows.min(t.max(1)), c, tensors * bytes]),
            None => ByteCount::ZERO,
        };
        let per_seq = match op {
            Op::Forward(_) => ByteCount::f64s(&[fwd]) + reader,
            Op::Viterbi if streamed.is_some() => {
                let saved = if dd {
                    DdFwd::<MaxSemiring>::saved_words(k, c)
                } else {
                    StaticFwd::<MaxSemiring>::saved_words(k, c)
                };
                // With a pipelined traceback, a second sweep, block and reader.
                let pipeline = self.pipelines(b, threads);
                let ahead = pipeline.then_some(fwd + k.max(c));
                let (delta, adaptive) = self.viterbi_delta(shape);
                ByteCount::f64s(&[fwd + k.max(c) + viterbi::sweep_words(k, c)])
                    + viterbi::checkpointed_bytes(
                        k,
                        c,
                        t,
                        delta,
                        adaptive,
                        saved,
                        ahead,
                        self.viterbi_tail_positions(shape),
                    )
                    + reader
                    + if pipeline { reader } else { ByteCount::ZERO }
            }
            Op::Viterbi => {
                // Backpointers: a duration (16 bits while K < 2^16) and a label (8 bits
                // while C <= 256) per position and label.
                let width =
                    if k <= u16::MAX as usize { 2 } else { 4 } + if c <= 256 { 1 } else { 4 };
                ByteCount::f64s(&[fwd + k.max(c) + viterbi::sweep_words(k, c)])
                    + ByteCount::bytes(&[width, t.saturating_add(1), c])
            }
            Op::Backward => {
                let pipeline = self.pipelines(b, threads);
                let delta = self.delta(shape);
                let (out, tensors) = match streamed {
                    Some((_, tensors)) => (rows, tensors),
                    None => (ARRAY_ROWS, 3),
                };
                let bwd = if dd {
                    backward::bytes::<DdFwd<LogSemiring>, DdBwd>(
                        k, c, t, delta, pipeline, partials, out, tensors,
                    )
                } else {
                    backward::bytes::<StaticFwd<LogSemiring>, StaticBwd>(
                        k, c, t, delta, pipeline, partials, out, tensors,
                    )
                };
                ByteCount::f64s(&[fwd]) + bwd + reader + reader
            }
        };
        let batch = match op {
            Op::Backward => {
                let shared = if dd {
                    DdBwd::shared_words(k, c)
                } else {
                    StaticBwd::shared_words(k, c)
                };
                ByteCount::f64s(&[b, partials]) + ByteCount::f64s(&[shared + partials])
            }
            _ => ByteCount::ZERO,
        };
        ByteCount::f64s(&[params]) + batch + per_seq * p + slack
    }
}

/// `f64` words of [`Params`] for a semiring described by `info`.
fn words<S: Semiring>(k: usize, c: usize, dd: bool, info: SemiringInfo) -> usize {
    Params::<S>::words(k, c, dd, info.ring_words, info.matrix_words)
}

fn structured<'p, 'a, F>(problem: &'p Problem<'a, F>) -> Result<&'p Potentials<'a, F>> {
    match problem {
        Problem::Structured(p) => Ok(p),
        Problem::Edges(_) => Err(edges_unsupported()),
    }
}

pub(crate) fn edges_unsupported() -> Error {
    Error::Unsupported {
        backend: BACKEND.into(),
        what: "edge potentials (streaming needs structured potentials)".into(),
    }
}

/// The forward pass of one sequence in semiring `S`.
pub(crate) fn run_forward<S: Semiring, Fw: Forward<S>, F: Scalar>(
    seq: &SeqIn<'_, F>,
    par: &Params<S>,
) -> S::Value {
    let mut f = Fw::new(par);
    for p in 0..=seq.len {
        f.step(p, seq, par);
    }
    f.total(par)
}

impl StreamingEngine {
    fn forward_in<S: Semiring, Fw: Forward<S>, F: Scalar>(
        &self,
        p: &Potentials<'_, F>,
    ) -> Vec<S::Value> {
        let par = Params::<S>::new(&p.shared());
        map_indexed(self.parallelism, p.shape().batch, |b| {
            run_forward::<S, Fw, F>(&SeqIn::new(p, b), &par)
        })
    }

    fn backward_in<Fw: Forward<LogSemiring>, Bw: Outside, F: Scalar>(
        &self,
        p: &Potentials<'_, F>,
        upstream: &[f64],
    ) -> Result<Backward> {
        let sh = p.shape();
        let par = Params::<LogSemiring>::new(&p.shared());
        let shared = Bw::shared(&par);
        let delta = self.delta(sh);
        let (bn, t, c) = (sh.batch, sh.len, sh.labels);
        let mut scores = Array3::<f64>::zeros((bn, t, c));
        let mut bb = p.begin_boundary().map(|_| Array3::<f64>::zeros((bn, t, c)));
        let mut eb = p.end_boundary().map(|_| Array3::<f64>::zeros((bn, t, c)));
        let mut bm = Array2::<f64>::zeros((bn, t));
        let boundaries = [bb.is_some(), eb.is_some()];
        let chunk = (t * c).max(1);
        fn rows(a: &mut Array3<f64>, chunk: usize) -> Vec<&mut [f64]> {
            match a.as_slice_mut() {
                Some(s) => s.chunks_mut(chunk).collect(),
                None => unreachable!("freshly allocated arrays are in standard layout"),
            }
        }
        let mut bb_rows = bb.as_mut().map(|a| rows(a, chunk).into_iter());
        let mut eb_rows = eb.as_mut().map(|a| rows(a, chunk).into_iter());
        let jobs: Vec<(usize, ArrayOut<'_>)> = rows(&mut scores, chunk)
            .into_iter()
            .zip(
                bm.as_slice_mut()
                    .into_iter()
                    .flat_map(|s| s.chunks_mut(t.max(1))),
            )
            .enumerate()
            .map(|(b, (sc, bmr))| {
                let out = ArrayOut {
                    scores: sc,
                    bb: bb_rows.as_mut().and_then(Iterator::next),
                    eb: eb_rows.as_mut().and_then(Iterator::next),
                    bm: bmr,
                };
                (b, out)
            })
            .collect();
        let pipeline = self.pipelines(bn, rayon::current_num_threads());
        let run = |(b, mut o): (usize, ArrayOut<'_>)| -> Result<(f64, Partials)> {
            let mut sink = |t0: usize, r: GradientRows<'_>| o.put(t0, c, r);
            let out = SeqOut {
                rows: ARRAY_ROWS,
                boundaries,
                sink: &mut sink,
            };
            let (up, down) = (SeqIn::new(p, b), SeqIn::new(p, b));
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
        };
        let results: Vec<Result<(f64, Partials)>> = match self.parallelism {
            Parallelism::Sequential => jobs.into_iter().map(run).collect(),
            _ => jobs.into_par_iter().map(run).collect(),
        };
        let (log_z, grad) = sum_partials(
            &par,
            p.has_duration_dependent_transition(),
            results,
            upstream,
        )?;
        Ok(Backward {
            log_z,
            grad: Gradients {
                scores: Some(scores),
                begin_boundary: bb,
                end_boundary: eb,
                ..grad
            },
            boundary_marginals: bm,
        })
    }
}

/// Rows of output arrays delivered at a time by the backward pass on arrays.
const ARRAY_ROWS: usize = 256;

/// One sequence's rows of the output arrays.
struct ArrayOut<'o> {
    scores: &'o mut [f64],
    bb: Option<&'o mut [f64]>,
    eb: Option<&'o mut [f64]>,
    bm: &'o mut [f64],
}

impl ArrayOut<'_> {
    fn put(&mut self, t0: usize, c: usize, r: GradientRows<'_>) -> Result<()> {
        let n = r.boundary_marginals.len();
        self.scores[t0 * c..(t0 + n) * c].copy_from_slice(r.scores);
        if let (Some(d), Some(s)) = (self.bb.as_deref_mut(), r.begin_boundary) {
            d[t0 * c..(t0 + n) * c].copy_from_slice(s);
        }
        if let (Some(d), Some(s)) = (self.eb.as_deref_mut(), r.end_boundary) {
            d[t0 * c..(t0 + n) * c].copy_from_slice(s);
        }
        self.bm[t0..t0 + n].copy_from_slice(r.boundary_marginals);
        Ok(())
    }
}

/// `log Z` and the shared parameters' gradients from the per-sequence results (the first
/// error, in sequence order, fails): partials scaled by the upstream gradient and summed over
/// the batch in ascending order; an infeasible sequence is [`Error::Infeasible`].
pub(crate) fn sum_partials(
    par: &Params<LogSemiring>,
    dd: bool,
    results: Vec<Result<(f64, Partials)>>,
    upstream: &[f64],
) -> Result<(Vec<f64>, Gradients)> {
    let results: Vec<(f64, Partials)> = results.into_iter().collect::<Result<_>>()?;
    let (k, c) = (par.k, par.c);
    let log_z: Vec<f64> = results.iter().map(|r| r.0).collect();
    check_feasible(&log_z)?;
    let mut tr = vec![0.0; par.tr.len()];
    let mut dur = vec![0.0; k * c];
    let mut start = vec![0.0; c];
    let mut end = vec![0.0; c];
    for (b, (_, pt)) in results.iter().enumerate() {
        let g = upstream[b];
        for (dst, src) in [
            (&mut tr, &pt.tr),
            (&mut dur, &pt.dur),
            (&mut start, &pt.start),
            (&mut end, &pt.end),
        ] {
            for (d, &s) in dst.iter_mut().zip(src.iter()) {
                *d += g * s;
            }
        }
    }
    let transition = if dd {
        ArrayD::from_shape_fn(IxDyn(&[k, c, c]), |ix| {
            tr[ix[1] * k * c + ix[0] * c + ix[2]]
        })
    } else {
        ArrayD::from_shape_fn(IxDyn(&[c, c]), |ix| tr[ix[0] * c + ix[1]])
    };
    let duration = Array2::from_shape_fn((k, c), |(d, j)| dur[j * k + d]);
    let grad = Gradients {
        scores: None,
        transition: Some(transition),
        duration: Some(duration),
        start: Some(Array1::from(start)),
        end: Some(Array1::from(end)),
        begin_boundary: None,
        end_boundary: None,
        edges: None,
    };
    Ok((log_z, grad))
}

impl EngineInfo for StreamingEngine {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Streaming
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
    /// Structured input only; edge input is [`Error::Unsupported`].
    fn check(&self, query: &Query) -> Result<()> {
        match query.form {
            Form::Structured { .. } => Ok(()),
            Form::Edges => Err(edges_unsupported()),
        }
    }
    /// [`StreamingEngine::memory_bytes`] for the query's shape, form, operation and threads.
    fn memory_required(&self, query: &Query) -> Result<u64> {
        let dd = matches!(
            query.form,
            Form::Structured {
                duration_dependent_transition: true,
                ..
            }
        );
        self.memory_bytes(query.shape, dd, query.op, query.threads)
            .finish(BACKEND, query.shape)
    }
}

impl<F: Scalar> Engine<F> for StreamingEngine {
    fn forward<S: Semiring>(&self, problem: &Problem<'_, F>) -> Result<Vec<S::Value>> {
        let p = structured(problem)?;
        semicrf_core::range::check_semiring::<S, F>(problem)?;
        Ok(if p.has_duration_dependent_transition() {
            self.forward_in::<S, DdFwd<S>, F>(p)
        } else {
            self.forward_in::<S, StaticFwd<S>, F>(p)
        })
    }

    fn backward(&self, problem: &Problem<'_, F>, upstream: &[f64]) -> Result<Backward> {
        let p = structured(problem)?;
        check_upstream(upstream, p.shape().batch)?;
        semicrf_core::range::check_probabilities(problem)?;
        if p.has_duration_dependent_transition() {
            self.backward_in::<DdFwd<LogSemiring>, DdBwd, F>(p, upstream)
        } else {
            self.backward_in::<StaticFwd<LogSemiring>, StaticBwd, F>(p, upstream)
        }
    }

    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        let p = structured(problem)?;
        let par = Params::<MaxSemiring>::new(&p.shared());
        let dd = p.has_duration_dependent_transition();
        Ok(map_indexed(self.parallelism, p.shape().batch, |b| {
            viterbi::viterbi_full(&SeqIn::new(p, b), &par, dd)
        }))
    }
}
