//! The exact algorithm on the CPU: full `(T+1)×C` dynamic-programming tables over edge
//! potentials, one sequence at a time, parallel over the batch.
//!
//! This is the most general CPU backend: it takes structured potentials (2-D or 3-D transition)
//! and edge potentials `(B, T, K, C, C)`, and answers every query (log Z, Viterbi scores,
//! gradients, marginals, Viterbi segments). It pays `O(L·K·C²)` time per sequence whatever the
//! input form; for structured input with a static transition the streaming backend does less
//! work (`O(L·C·(C+K))`) and needs far less memory.
//!
//! # Input
//!
//! - **Structured potentials** are materialised into `f64` edges *one sequence at a time*, with
//!   [`semicrf_core::materialize`] applied to that sequence alone (its first `L_b` positions
//!   and durations `1..=min(K, L_b)`; longer durations cannot occur). Peak memory therefore
//!   scales with the sequences in flight, not with the batch.
//! - **Edge potentials** are read in place through the caller's view, each element widened with
//!   [`Scalar::as_f64`]. A view in standard (C-contiguous) layout is read as plain slices; any
//!   other layout is read lane by lane through a `C`-element buffer, so no copy of the edge
//!   tensor is ever made.
//!
//! Edge form convention (SPEC §1.2): `edges[s, d-1, j, i]` scores a segment starting at `s`,
//! lasting `d`, with label `j`, after label `i`. The first segment follows a *virtual start*:
//! `α_0(i) = one` for every `i`, so first segments are `⊕`-summed over their source label.
//! Segments with `s + d > L_b` are never read.
//!
//! # Recurrences (per sequence, length `L`, `E = edges`)
//!
//! ```text
//! α_0(i) = one
//! α_t(j) = ⊕_{d=1..min(K,t)} ⊕_i  α_{t-d}(i) ⊗ E[t-d, d-1, j, i]          t = 1..=L
//! Z      = ⊕_j α_L(j)
//! β_L(j) = one
//! β_s(i) = ⊕_{d=1..min(K,L-s)} ⊕_j  E[s, d-1, j, i] ⊗ β_{s+d}(j)          s = L-1..1
//! μ[s, d-1, j, i] = exp(α_s(i) + E[s, d-1, j, i] + β_{s+d}(j) - log Z)   (edge marginals)
//! ```
//!
//! The forward pass is generic over the [`Semiring`]: Log gives log Z, Max the Viterbi score.
//! For each `(t, j)` the `min(K,t)·C` candidate terms are gathered into a buffer and reduced
//! with [`Semiring::sum`] (for Log, a max-shifted log-sum-exp). The backward pass (Log only)
//! reduces `β_s(·)` for all `C` source labels at once: one pass for the per-label maxima, one
//! pass for the shifted exponentials, both contiguous in `i`. Every log-sum-exp whose maximum is
//! `-inf` returns `-inf` (the shift is replaced by 0 so that no `-inf - -inf` is formed); nothing
//! is clamped. All tables are `f64`, row-major `(L+1)×C`.
//!
//! # Gradients and marginals
//!
//! With upstream gradients `g_b`, the edge gradient of sequence `b` is `g_b·μ`. For edge input
//! that is [`Gradients::edges`]; for structured input `g_b·μ` is pulled back onto the inputs
//! with [`semicrf_core::pull_back`], sequence by sequence, and the per-sequence parts of the
//! shared parameters (transition, duration, start, end) are then added over the batch in
//! order `b = 0, 1, …` after the parallel part. The boundary marginals are the unscaled
//! `P(a segment starts at s) = Σ_{d,j,i} μ[s, d-1, j, i]`, 0 beyond the length. If any
//! `log Z_b = -inf` the call fails with [`Error::Infeasible`].
//!
//! # Viterbi and ties (SPEC §5)
//!
//! Max-semiring forward with a backpointer `(d, i)` per `(t, j)`. Candidates are visited in
//! order of increasing `d`, then increasing `i`, and only a strictly greater score replaces the
//! best, so among equal scores the smaller duration, then the smaller previous label wins; the
//! final label is the smallest index among the best `α_L(j)`. A sequence without a finite
//! segmentation decodes to `Decoded { score: -inf, segments: [] }`.
//!
//! # Determinism
//!
//! Every sequence is computed by the same code on its own data, whatever the batch and the
//! [`Parallelism`]; reductions over the batch happen afterwards in a fixed order. So results
//! are bitwise identical for [`Parallelism::Sequential`] and [`Parallelism::Rayon`], and a
//! sequence gets exactly the same numbers in a batch as alone.
//!
//! # Cost
//!
//! Time `O(L·K·C²)` per sequence (plus the same for materialisation of structured input).
//! Working memory: for structured input the `f64` edges of each sequence in flight (and their
//! marginals, for gradients), for edge input only `O(T·C)` tables per sequence in flight; the
//! exact bound is documented on `ExactEngine`'s [`Engine::memory_required`].
//!
//! # Example
//!
//! ```
//! use ndarray::{Array2, Array3};
//! use semicrf_core::{Engine, Potentials, Problem, SemiringKind};
//! use semicrf_cpu::ExactEngine;
//!
//! let scores = Array3::<f32>::from_elem((2, 6, 3), 0.25);
//! let transition = Array2::<f32>::zeros((3, 3));
//! let lengths = [6, 4];
//! let p: Problem<f32> = Potentials::builder(scores.view(), &lengths, 3)
//!     .transition(transition.view())
//!     .build()?
//!     .into();
//! let engine = ExactEngine::new();
//! let log_z = engine.forward(&p, SemiringKind::Log)?;
//! let out = engine.backward(&p, &[1.0, 1.0])?;
//! assert_eq!(out.log_z, log_z);
//! // Some segment starts at position 0 with probability 1.
//! assert!((out.boundary_marginals[[0, 0]] - 1.0).abs() < 1e-12);
//! let best = engine.viterbi(&p)?;
//! assert_eq!(best[1].segments.iter().map(|s| s.duration).sum::<usize>(), 4);
//! # Ok::<(), semicrf_core::Error>(())
//! ```

use core::mem::size_of;

use ndarray::{Array1, Array2, Array3, Array5, ArrayD, ArrayView3, ArrayView4, Axis, IxDyn, Slice};
use rayon::prelude::*;
use semicrf_core::{
    Algorithm, Backward, Decoded, Device, Engine, Error, Form, Gradients, Op, Potentials, Problem,
    Query, Result, Scalar, Segment, SemiringKind, Transition, check_feasible, check_upstream,
    materialize, pull_back,
};
use semicrf_semiring::{LogSemiring, MaxSemiring, Semiring, logsumexp};

use crate::{Parallelism, map_indexed};

const BACKEND: &str = "cpu/exact";
const NEG_INF: f64 = f64::NEG_INFINITY;

/// The exact engine on the CPU: full forward/backward tables over (materialised) edges.
///
/// Supports every [`Query`]: structured potentials with a 2-D or 3-D transition, and edge
/// potentials; forward in the Log and Max semirings, backward, Viterbi. See the module docs
/// for the recurrences, tie rules and determinism guarantees, and its
/// [`Engine::memory_required`] for the memory formula.
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

    /// The number of sequences whose working memory is alive at once: 1 when sequential,
    /// otherwise at most one per rayon worker.
    fn sequences_in_flight(&self, batch: usize) -> usize {
        match self.parallelism {
            Parallelism::Sequential => 1,
            Parallelism::Rayon => batch.min(rayon::current_num_threads()).max(1),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reading edges
// ---------------------------------------------------------------------------------------------

/// Read access to the edges `E[s, d-1, j, i]` of one sequence, one source-label lane at a time.
trait Lanes {
    /// The element type (the caller's `F`, or `f64` for materialised edges).
    type Elem: Scalar;
    /// Durations stored per start position (`K`, or `min(K, L)` when materialised).
    fn k(&self) -> usize;
    /// Labels `C`.
    fn c(&self) -> usize;
    /// The lane `E[s, d-1, j, 0..C]`, either borrowed or copied into `buf` (`C` elements).
    fn lane<'b>(
        &'b self,
        s: usize,
        d: usize,
        j: usize,
        buf: &'b mut [Self::Elem],
    ) -> &'b [Self::Elem];
}

/// Edges in standard layout: lanes are sub-slices.
struct Dense<'a, E> {
    data: &'a [E],
    k: usize,
    c: usize,
}

impl<E: Scalar> Lanes for Dense<'_, E> {
    type Elem = E;
    #[inline(always)]
    fn k(&self) -> usize {
        self.k
    }
    #[inline(always)]
    fn c(&self) -> usize {
        self.c
    }
    #[inline(always)]
    fn lane<'b>(&'b self, s: usize, d: usize, j: usize, _buf: &'b mut [E]) -> &'b [E] {
        let off = ((s * self.k + d - 1) * self.c + j) * self.c;
        &self.data[off..off + self.c]
    }
}

/// Edges in any other layout: each lane is copied into the buffer.
struct Strided<'a, E>(ArrayView4<'a, E>);

impl<E: Scalar> Lanes for Strided<'_, E> {
    type Elem = E;
    fn k(&self) -> usize {
        self.0.dim().1
    }
    fn c(&self) -> usize {
        self.0.dim().2
    }
    fn lane<'b>(&'b self, s: usize, d: usize, j: usize, buf: &'b mut [E]) -> &'b [E] {
        for (o, &x) in buf.iter_mut().zip(
            self.0
                .index_axis(Axis(0), s)
                .index_axis_move(Axis(0), d - 1)
                .index_axis_move(Axis(0), j),
        ) {
            *o = x;
        }
        buf
    }
}

/// The edges of one sequence, `(L, K_s, C, C)`.
enum SeqEdges<'a, F> {
    /// Materialised from structured potentials: `(1, L, min(K, L), C, C)`, `f64`.
    Materialized(Array5<f64>),
    /// The caller's edge tensor, restricted to the sequence and its first `L` positions.
    View(ArrayView4<'a, F>),
}

/// Binds `$lanes` to the fastest [`Lanes`] reader of `$edges` and evaluates `$body` with it
/// (the body is compiled once per reader type).
macro_rules! with_lanes {
    ($edges:expr, |$lanes:ident| $body:expr) => {{
        match $edges {
            SeqEdges::Materialized(e) => {
                let v = e.view().index_axis_move(Axis(0), 0);
                match v.to_slice() {
                    Some(data) => {
                        let (_, k, c, _) = v.dim();
                        let $lanes = Dense { data, k, c };
                        $body
                    }
                    None => {
                        let $lanes = Strided(v);
                        $body
                    }
                }
            }
            SeqEdges::View(v) => match v.to_slice() {
                Some(data) => {
                    let (_, k, c, _) = v.dim();
                    let $lanes = Dense { data, k, c };
                    $body
                }
                None => {
                    let $lanes = Strided(v.clone());
                    $body
                }
            },
        }
    }};
}

/// The edges of sequence `b` of `problem`: materialised for structured input, a view of the
/// caller's tensor for edge input.
fn sequence<'p, F: Scalar>(problem: &'p Problem<'_, F>, b: usize) -> Result<SeqEdges<'p, F>> {
    Ok(match problem {
        Problem::Structured(p) => SeqEdges::Materialized(materialize(&one_sequence(p, b)?)),
        Problem::Edges(e) => SeqEdges::View(
            e.edges()
                .view()
                .index_axis_move(Axis(0), b)
                .slice_axis_move(Axis(0), Slice::from(..e.lengths()[b])),
        ),
    })
}

/// Rows `b..=b` and positions `..len` of a `(B, T, C)` tensor (the `s!` macro is avoided: it
/// expands to an `allow(unsafe_code)` that this crate's `forbid` rejects).
fn sequence_rows<'v, F>(x: &'v ArrayView3<'_, F>, b: usize, len: usize) -> ArrayView3<'v, F> {
    x.slice_axis(Axis(0), Slice::from(b..b + 1))
        .slice_axis_move(Axis(1), Slice::from(..len))
}

/// The structured potentials of sequence `b` alone: its first `L_b` positions, durations
/// `1..=min(K, L_b)` (the only ones a segmentation of `L_b` positions can use).
fn one_sequence<'p, F: Scalar>(p: &'p Potentials<'_, F>, b: usize) -> Result<Potentials<'p, F>> {
    let len = p.lengths()[b];
    let k = p.shape().max_duration.min(len);
    let mut builder =
        Potentials::builder(sequence_rows(p.scores(), b, len), &p.lengths()[b..=b], k);
    match p.transition() {
        Some(Transition::Static(t)) => builder = builder.transition(t.view()),
        Some(Transition::DurationDependent(t)) => {
            builder = builder.transition(t.slice_axis(Axis(0), Slice::from(..k)))
        }
        None => {}
    }
    if let Some(t) = p.duration() {
        builder = builder.duration(t.slice_axis(Axis(0), Slice::from(..k)));
    }
    if let Some(t) = p.start() {
        builder = builder.start(t.view());
    }
    if let Some(t) = p.end() {
        builder = builder.end(t.view());
    }
    if let Some(t) = p.begin_boundary() {
        builder = builder.begin_boundary(sequence_rows(t, b, len));
    }
    if let Some(t) = p.end_boundary() {
        builder = builder.end_boundary(sequence_rows(t, b, len));
    }
    builder.build()
}

// ---------------------------------------------------------------------------------------------
// Kernels (one sequence)
// ---------------------------------------------------------------------------------------------

/// The forward table `α[t·C + j]`, `t = 0..=len`, in semiring `S`.
fn alpha_table<S: Semiring, L: Lanes>(lanes: &L, len: usize) -> Vec<f64> {
    let (k, c) = (lanes.k(), lanes.c());
    let mut alpha = vec![S::zero::<f64>(); (len + 1) * c];
    alpha[..c].fill(S::one());
    let mut terms: Vec<f64> = Vec::with_capacity(k.min(len) * c);
    let mut buf = vec![L::Elem::default(); c];
    for t in 1..=len {
        let (prev, rest) = alpha.split_at_mut(t * c);
        for (j, out) in rest[..c].iter_mut().enumerate() {
            terms.clear();
            for d in 1..=k.min(t) {
                let s = t - d;
                let a = &prev[s * c..(s + 1) * c];
                let e = lanes.lane(s, d, j, &mut buf);
                terms.extend(a.iter().zip(e).map(|(&x, &w)| S::times(x, w.as_f64())));
            }
            *out = S::sum(&terms);
        }
    }
    alpha
}

/// `⊕`-sum over all segmentations of one sequence in semiring `S`.
fn forward_seq<S: Semiring, L: Lanes>(lanes: &L, len: usize) -> f64 {
    let c = lanes.c();
    let alpha = alpha_table::<S, L>(lanes, len);
    S::sum(&alpha[len * c..])
}

/// The outside table `β[s·C + i]` (log semiring), `β_L = 0`; row 0 is not computed (the first
/// segment follows the virtual start and its marginal uses `α_0 = 0`).
fn beta_table<L: Lanes>(lanes: &L, len: usize) -> Vec<f64> {
    let (k, c) = (lanes.k(), lanes.c());
    let mut beta = vec![NEG_INF; (len + 1) * c];
    beta[len * c..].fill(0.0);
    let mut max = vec![NEG_INF; c];
    let mut acc = vec![0.0f64; c];
    let mut buf = vec![L::Elem::default(); c];
    for s in (1..len).rev() {
        let (head, after) = beta.split_at_mut((s + 1) * c);
        // `after` starts at row s + 1, so row s + d is at offset (d - 1)·C.
        let dmax = k.min(len - s);
        max.fill(NEG_INF);
        for d in 1..=dmax {
            let next = &after[(d - 1) * c..d * c];
            for (j, &w) in next.iter().enumerate() {
                if w == NEG_INF {
                    continue;
                }
                let e = lanes.lane(s, d, j, &mut buf);
                for (m, &x) in max.iter_mut().zip(e) {
                    *m = m.max(x.as_f64() + w);
                }
            }
        }
        acc.fill(0.0);
        for d in 1..=dmax {
            let next = &after[(d - 1) * c..d * c];
            for (j, &w) in next.iter().enumerate() {
                if w == NEG_INF {
                    continue;
                }
                let e = lanes.lane(s, d, j, &mut buf);
                for ((a, &m), &x) in acc.iter_mut().zip(&max).zip(e) {
                    // An all -inf lane has max -inf: shift by 0 so exp(-inf) = 0, never NaN.
                    let shift = if m == NEG_INF { 0.0 } else { m };
                    *a += (x.as_f64() + w - shift).exp();
                }
            }
        }
        for ((out, &m), &a) in head[s * c..].iter_mut().zip(&max).zip(&acc) {
            *out = if m == NEG_INF { NEG_INF } else { m + a.ln() };
        }
    }
    beta
}

/// Writes `g·μ[s, d-1, j, i]` into `mu` (layout `(·, K, C, C)` with `K = lanes.k()`, only the
/// entries with `s + d <= len`) and the unscaled boundary marginals `Σ_{d,j,i} μ[s, …]` into
/// `boundary[s]`, `s < len`. Requires a finite `log_z`.
fn marginals_seq<L: Lanes>(
    lanes: &L,
    len: usize,
    alpha: &[f64],
    beta: &[f64],
    log_z: f64,
    g: f64,
    mu: &mut [f64],
    boundary: &mut [f64],
) {
    let (k, c) = (lanes.k(), lanes.c());
    let mut buf = vec![L::Elem::default(); c];
    for s in 0..len {
        let a = &alpha[s * c..(s + 1) * c];
        let mut total = 0.0;
        for d in 1..=k.min(len - s) {
            let next = &beta[(s + d) * c..(s + d + 1) * c];
            for (j, &bj) in next.iter().enumerate() {
                let w = bj - log_z;
                let e = lanes.lane(s, d, j, &mut buf);
                let off = ((s * k + d - 1) * c + j) * c;
                for ((o, &x), &y) in mu[off..off + c].iter_mut().zip(a).zip(e) {
                    let p = (x + y.as_f64() + w).exp();
                    total += p;
                    *o = p * g;
                }
            }
        }
        boundary[s] = total;
    }
}

/// Viterbi decoding of one sequence with the SPEC §5 tie rules.
fn viterbi_seq<L: Lanes>(lanes: &L, len: usize) -> Decoded {
    let (k, c) = (lanes.k(), lanes.c());
    let mut alpha = vec![MaxSemiring::zero::<f64>(); (len + 1) * c];
    alpha[..c].fill(MaxSemiring::one());
    // Backpointer of (t, j): (d - 1)·C + i.
    let mut back = vec![0usize; (len + 1) * c];
    let mut buf = vec![L::Elem::default(); c];
    for t in 1..=len {
        let (prev, rest) = alpha.split_at_mut(t * c);
        let bp = &mut back[t * c..(t + 1) * c];
        for (j, (out, arg)) in rest[..c].iter_mut().zip(bp.iter_mut()).enumerate() {
            let mut best = NEG_INF;
            let mut best_arg = 0;
            for d in 1..=k.min(t) {
                let s = t - d;
                let a = &prev[s * c..(s + 1) * c];
                let e = lanes.lane(s, d, j, &mut buf);
                for (i, (&x, &w)) in a.iter().zip(e).enumerate() {
                    let v = MaxSemiring::times(x, w.as_f64());
                    // Strictly greater: the first best in (d, i) order is kept.
                    if v > best {
                        best = v;
                        best_arg = (d - 1) * c + i;
                    }
                }
            }
            *out = best;
            *arg = best_arg;
        }
    }
    let mut score = NEG_INF;
    let mut label = 0;
    for (j, &x) in alpha[len * c..].iter().enumerate() {
        if x > score {
            score = x;
            label = j;
        }
    }
    if score == NEG_INF {
        return Decoded {
            score,
            segments: Vec::new(),
        };
    }
    // Trace back twice: once to count the segments (so the returned vector is allocated at its
    // exact size), once to fill it from the end.
    let step = |t: usize, j: usize| {
        let code = back[t * c + j];
        (code / c + 1, code % c)
    };
    let (mut count, mut t, mut j) = (0, len, label);
    while t > 0 {
        let (d, i) = step(t, j);
        count += 1;
        t -= d;
        j = i;
    }
    let mut segments = vec![Segment::new(0, 0, 0); count];
    let (mut t, mut j) = (len, label);
    for slot in segments.iter_mut().rev() {
        let (d, i) = step(t, j);
        *slot = Segment::new(t - d, d, j);
        t -= d;
        j = i;
    }
    Decoded { score, segments }
}

// ---------------------------------------------------------------------------------------------
// Batch drivers
// ---------------------------------------------------------------------------------------------

/// What the backward pass of one structured sequence hands back: log Z and, when it is finite,
/// the unscaled boundary marginals of positions `0..L` and the pulled-back gradient of this
/// sequence alone.
type SeqBackward = (f64, Option<(Vec<f64>, Gradients)>);

/// `f(b, chunk_b)` over the consecutive `chunk`-sized pieces of `data`, in order, in parallel
/// when `par` is [`Parallelism::Rayon`] (the in-place twin of [`map_indexed`]).
fn map_chunks_mut<T: Send>(
    par: Parallelism,
    data: &mut [f64],
    chunk: usize,
    f: impl Fn(usize, &mut [f64]) -> T + Sync + Send,
) -> Vec<T> {
    match par {
        Parallelism::Sequential => data
            .chunks_mut(chunk)
            .enumerate()
            .map(|(b, x)| f(b, x))
            .collect(),
        Parallelism::Rayon => data
            .par_chunks_mut(chunk)
            .enumerate()
            .map(|(b, x)| f(b, x))
            .collect(),
    }
}

/// Adds `src` into the leading block of `dst` that has `src`'s shape (`dst` may be longer
/// along its first axis: per-sequence durations stop at `min(K, L_b)`).
fn add_leading<D: ndarray::Dimension>(
    dst: &mut ndarray::Array<f64, D>,
    src: &ndarray::Array<f64, D>,
) {
    let rows = src.shape()[0];
    let mut block = dst.slice_axis_mut(Axis(0), Slice::from(..rows));
    block += src;
}

impl ExactEngine {
    fn forward_in<S: Semiring, F: Scalar>(&self, problem: &Problem<'_, F>) -> Result<Vec<f64>> {
        let lengths = problem.lengths();
        map_indexed(self.parallelism, lengths.len(), |b| -> Result<f64> {
            let edges = sequence(problem, b)?;
            Ok(with_lanes!(&edges, |lanes| forward_seq::<S, _>(
                &lanes, lengths[b]
            )))
        })
        .into_iter()
        .collect()
    }

    fn backward_structured<F: Scalar>(
        &self,
        p: &Potentials<'_, F>,
        upstream: &[f64],
    ) -> Result<Backward> {
        let sh = p.shape();
        let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
        let parts: Vec<SeqBackward> = map_indexed(self.parallelism, bn, |b| -> Result<_> {
            let len = p.lengths()[b];
            let single = one_sequence(p, b)?;
            let edges = SeqEdges::<F>::Materialized(materialize(&single));
            let marginals = with_lanes!(&edges, |lanes| {
                let alpha = alpha_table::<LogSemiring, _>(&lanes, len);
                let log_z = logsumexp(&alpha[len * c..]);
                if log_z == NEG_INF {
                    None
                } else {
                    let beta = beta_table(&lanes, len);
                    let ks = lanes.k();
                    let mut mu = Array5::<f64>::zeros((1, len, ks, c, c));
                    let mut boundary = vec![0.0; len];
                    let Some(out) = mu.as_slice_mut() else {
                        unreachable!("a freshly allocated array is in standard layout")
                    };
                    marginals_seq(
                        &lanes,
                        len,
                        &alpha,
                        &beta,
                        log_z,
                        upstream[b],
                        out,
                        &mut boundary,
                    );
                    Some((log_z, mu, boundary))
                }
            });
            drop(edges);
            Ok(match marginals {
                None => (NEG_INF, None),
                Some((log_z, mu, boundary)) => {
                    (log_z, Some((boundary, pull_back(&single, mu.view()))))
                }
            })
        })
        .into_iter()
        .collect::<Result<_>>()?;
        let log_z: Vec<f64> = parts.iter().map(|x| x.0).collect();
        check_feasible(&log_z)?;

        let dd = p.has_duration_dependent_transition();
        let mut scores = Array3::<f64>::zeros((bn, t, c));
        let mut transition = if dd {
            ArrayD::<f64>::zeros(IxDyn(&[k, c, c]))
        } else {
            ArrayD::<f64>::zeros(IxDyn(&[c, c]))
        };
        let mut duration = Array2::<f64>::zeros((k, c));
        let mut start = Array1::<f64>::zeros(c);
        let mut end = Array1::<f64>::zeros(c);
        let mut begin_boundary = p.begin_boundary().map(|_| Array3::<f64>::zeros((bn, t, c)));
        let mut end_boundary = p.end_boundary().map(|_| Array3::<f64>::zeros((bn, t, c)));
        let mut boundary_marginals = Array2::<f64>::zeros((bn, t));
        // Shared parameters are summed in a fixed order over the batch: b = 0, 1, ….
        for (b, (_, part)) in parts.into_iter().enumerate() {
            let Some((boundary, g)) = part else { continue };
            let len = boundary.len();
            boundary_marginals
                .row_mut(b)
                .slice_axis_move(Axis(0), Slice::from(..len))
                .assign(&Array1::from(boundary));
            let place = |dst: &mut Array3<f64>, src: Option<Array3<f64>>| {
                if let Some(src) = src {
                    dst.index_axis_mut(Axis(0), b)
                        .slice_axis_move(Axis(0), Slice::from(..len))
                        .assign(&src.index_axis(Axis(0), 0));
                }
            };
            place(&mut scores, g.scores);
            if let Some(dst) = begin_boundary.as_mut() {
                place(dst, g.begin_boundary);
            }
            if let Some(dst) = end_boundary.as_mut() {
                place(dst, g.end_boundary);
            }
            if let Some(src) = g.transition {
                add_leading(&mut transition, &src);
            }
            if let Some(src) = g.duration {
                add_leading(&mut duration, &src);
            }
            if let Some(src) = g.start {
                start += &src;
            }
            if let Some(src) = g.end {
                end += &src;
            }
        }
        Ok(Backward {
            log_z,
            grad: Gradients {
                scores: Some(scores),
                transition: Some(transition),
                duration: Some(duration),
                start: Some(start),
                end: Some(end),
                begin_boundary,
                end_boundary,
                edges: None,
            },
            boundary_marginals,
        })
    }

    fn backward_edges<F: Scalar>(
        &self,
        problem: &Problem<'_, F>,
        upstream: &[f64],
    ) -> Result<Backward> {
        let sh = problem.shape();
        let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
        let lengths = problem.lengths();
        let mut mu = Array5::<f64>::zeros((bn, t, k, c, c));
        let per_seq = t * k * c * c;
        let parts: Vec<(f64, Vec<f64>)> = match mu.as_slice_mut() {
            Some(all) => map_chunks_mut(self.parallelism, all, per_seq, |b, out| {
                let len = lengths[b];
                let edges = sequence(problem, b)?;
                Ok(with_lanes!(&edges, |lanes| {
                    let alpha = alpha_table::<LogSemiring, _>(&lanes, len);
                    let log_z = logsumexp(&alpha[len * c..]);
                    let mut boundary = vec![0.0; len];
                    if log_z != NEG_INF {
                        let beta = beta_table(&lanes, len);
                        marginals_seq(
                            &lanes,
                            len,
                            &alpha,
                            &beta,
                            log_z,
                            upstream[b],
                            out,
                            &mut boundary,
                        );
                    }
                    (log_z, boundary)
                }))
            })
            .into_iter()
            .collect::<Result<_>>()?,
            None => unreachable!("a freshly allocated array is in standard layout"),
        };
        let log_z: Vec<f64> = parts.iter().map(|x| x.0).collect();
        check_feasible(&log_z)?;
        let mut boundary_marginals = Array2::<f64>::zeros((bn, t));
        for (b, (_, row)) in parts.into_iter().enumerate() {
            let len = row.len();
            boundary_marginals
                .row_mut(b)
                .slice_axis_move(Axis(0), Slice::from(..len))
                .assign(&Array1::from(row));
        }
        Ok(Backward {
            log_z,
            grad: Gradients {
                edges: Some(mu),
                ..Gradients::default()
            },
            boundary_marginals,
        })
    }
}

/// The byte size of `elements` `f64` values, if it fits an allocation (`≤ isize::MAX`).
fn f64_bytes(elements: Option<usize>) -> Option<usize> {
    elements
        .and_then(|n| n.checked_mul(8))
        .filter(|&n| n <= isize::MAX as usize)
}

impl<F: Scalar> Engine<F> for ExactEngine {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Exact
    }

    fn device(&self) -> Device {
        Device::Cpu
    }

    /// Every query is supported; the only refusal ([`Error::Unsupported`]) is a shape whose
    /// `f64` edge tensor `B·T·K·C²` (with `K` replaced by `min(K, T)` for structured input,
    /// whose longer durations are never materialised) has a byte size that overflows `usize`
    /// (or exceeds `isize::MAX`, the allocation limit). For structured input the `(K, C)`
    /// duration gradient (and `(K, C, C)` transition gradient, for a 3-D transition) must fit
    /// likewise.
    fn check(&self, query: &Query) -> Result<()> {
        let sh = query.shape;
        let (b, t, c) = (sh.batch, sh.len, sh.labels);
        let structured = matches!(query.form, Form::Structured { .. });
        let k = if structured {
            sh.max_duration.min(t)
        } else {
            sh.max_duration
        };
        let c2 = c.checked_mul(c);
        let edges = f64_bytes(
            b.checked_mul(t)
                .and_then(|x| x.checked_mul(k))
                .and_then(|x| c2.and_then(|c2| x.checked_mul(c2))),
        );
        let shared = match query.form {
            Form::Structured {
                duration_dependent_transition,
            } => {
                let dur = f64_bytes(sh.max_duration.checked_mul(c));
                let tr = if duration_dependent_transition {
                    f64_bytes(c2.and_then(|c2| sh.max_duration.checked_mul(c2)))
                } else {
                    f64_bytes(c2)
                };
                dur.and(tr)
            }
            Form::Edges => Some(0),
        };
        if edges.is_some() && shared.is_some() {
            Ok(())
        } else {
            Err(Error::Unsupported {
                backend: BACKEND.into(),
                what: format!("{}: its f64 edge tensor size overflows usize", sh),
            })
        }
    }

    /// An upper bound of the bytes this engine allocates for `query` beyond its inputs and the
    /// outputs it returns. A pure function of the query and [`ExactEngine::parallelism`].
    ///
    /// With `(B, T, K, C)` the query's shape, `K' = min(K, T)` for structured input and `K` for
    /// edges, `w` the input element size, and `P` the sequences in flight (1 when sequential,
    /// `min(B, rayon::current_num_threads())` with rayon), every term in bytes:
    ///
    /// ```text
    /// A   = 8·(T+1)·C                 one (T+1)×C f64 table (α, β, or Viterbi backpointers)
    /// W   = 8·K'·C + 24·C + w·C       gather buffer, β max/sum rows, pull-back running row,
    ///                                 lane buffer
    /// M   = 8·T·K'·C²                 f64 edges (or marginals) of one sequence
    /// R   = size of one per-sequence result record
    /// Gs  = 8·(3·T·C + K'·C + 2·C + C²·(K' if 3-D transition else 1))
    ///                                 one sequence's pulled-back gradient
    /// O   = 64 KiB                    fixed overhead (thread-pool bookkeeping, small vectors)
    ///
    /// forward, structured   P·(M + A + W)         + B·R + O
    /// forward, edges        P·(A + W)             + B·R + O
    /// viterbi, structured   P·(M + 2A + W)        + B·R + O
    /// viterbi, edges        P·(2A + W)            + B·R + O
    /// backward, structured  P·(2M + 3A + W)       + B·(Gs + 8·T + R) + O
    /// backward, edges       P·(2A + W)            + B·(8·T + R) + O
    /// ```
    ///
    /// For structured backward, `2M` is the materialised edges and the marginals of a
    /// sequence, and the extra `A` the pull-back's difference array; the per-sequence gradients
    /// and boundary rows of the whole batch are held until they are summed in batch order. For
    /// edge input the marginals are written straight into the returned gradient, and edges
    /// are read in place whatever their layout. Arithmetic saturates at `u64::MAX`.
    fn memory_required(&self, query: &Query) -> u64 {
        let sh = query.shape;
        let structured = matches!(query.form, Form::Structured { .. });
        let dd = matches!(
            query.form,
            Form::Structured {
                duration_dependent_transition: true
            }
        );
        let (b, t, c) = (sh.batch as u64, sh.len as u64, sh.labels as u64);
        let k = if structured {
            sh.max_duration.min(sh.len)
        } else {
            sh.max_duration
        } as u64;
        let p = self.sequences_in_flight(sh.batch) as u64;
        let mul = |xs: &[u64]| xs.iter().fold(1u64, |acc, &x| acc.saturating_mul(x));
        let table = mul(&[8, t.saturating_add(1), c]);
        let work = mul(&[8, k, c])
            .saturating_add(mul(&[24, c]))
            .saturating_add(mul(&[query.dtype_bytes, c]));
        let seq_edges = mul(&[8, t, k, c, c]);
        let overhead: u64 = 64 * 1024;
        let per_seq_and_batch = |per_seq: u64, per_b: u64| {
            p.saturating_mul(per_seq)
                .saturating_add(b.saturating_mul(per_b))
                .saturating_add(overhead)
        };
        let m = if structured { seq_edges } else { 0 };
        match query.op {
            Op::Forward(_) => per_seq_and_batch(
                m.saturating_add(table).saturating_add(work),
                size_of::<Result<f64>>() as u64,
            ),
            Op::Viterbi => per_seq_and_batch(
                m.saturating_add(mul(&[2, table])).saturating_add(work),
                size_of::<Result<Decoded>>() as u64,
            ),
            Op::Backward if structured => {
                let tr = if dd { mul(&[k, c, c]) } else { mul(&[c, c]) };
                let grads = mul(&[
                    8,
                    mul(&[3, t, c])
                        .saturating_add(mul(&[k, c]))
                        .saturating_add(mul(&[2, c]))
                        .saturating_add(tr),
                ]);
                per_seq_and_batch(
                    mul(&[2, m])
                        .saturating_add(mul(&[3, table]))
                        .saturating_add(work),
                    grads
                        .saturating_add(mul(&[8, t]))
                        .saturating_add(size_of::<Result<SeqBackward>>() as u64),
                )
            }
            Op::Backward => per_seq_and_batch(
                mul(&[2, table]).saturating_add(work),
                mul(&[8, t]).saturating_add(size_of::<Result<(f64, Vec<f64>)>>() as u64),
            ),
        }
    }

    fn forward(&self, problem: &Problem<'_, F>, semiring: SemiringKind) -> Result<Vec<f64>> {
        Engine::<F>::check(self, &Query::of(problem, Op::Forward(semiring)))?;
        match semiring {
            SemiringKind::Log => self.forward_in::<LogSemiring, F>(problem),
            SemiringKind::Max => self.forward_in::<MaxSemiring, F>(problem),
        }
    }

    fn backward(&self, problem: &Problem<'_, F>, upstream: &[f64]) -> Result<Backward> {
        check_upstream(upstream, problem.shape().batch)?;
        Engine::<F>::check(self, &Query::of(problem, Op::Backward))?;
        match problem {
            Problem::Structured(p) => self.backward_structured(p, upstream),
            Problem::Edges(_) => self.backward_edges(problem, upstream),
        }
    }

    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        Engine::<F>::check(self, &Query::of(problem, Op::Viterbi))?;
        let lengths = problem.lengths();
        map_indexed(self.parallelism, lengths.len(), |b| -> Result<Decoded> {
            let edges = sequence(problem, b)?;
            Ok(with_lanes!(&edges, |lanes| viterbi_seq(&lanes, lengths[b])))
        })
        .into_iter()
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use ndarray::{Array2, Array3, Array5, ArrayD, ArrayViewD, Axis, Slice};
    use rand::Rng;
    use semicrf_core::testing::{GenSpec, random_problem, random_spec, rng, spec7_cases};
    use semicrf_core::{
        Backward, Decoded, EdgePotentials, Engine, Error, Form, Gradients, Op, OwnedPotentials,
        Problem, Query, Scalar, Segment, SemiringKind, Shape, gold_score, materialize, reference,
    };

    use super::ExactEngine;
    use crate::Parallelism;

    const NINF: f64 = f64::NEG_INFINITY;
    /// Random problems drawn by `random_spec` per test (plus the SPEC §7 cases).
    const SEEDS: u64 = 150;

    fn engine(parallelism: Parallelism) -> ExactEngine {
        ExactEngine { parallelism }
    }

    /// Relative error with a floor of 1 on the scale (marginals live in [0, 1]); equal values
    /// (both `-inf` included) have error 0.
    fn rel_err(a: f64, b: f64) -> f64 {
        if a == b {
            0.0
        } else {
            (a - b).abs() / 1f64.max(a.abs()).max(b.abs())
        }
    }

    /// The worst relative error seen by one test, printed at its end (`--nocapture`).
    struct Worst {
        name: &'static str,
        err: Cell<f64>,
        problems: Cell<usize>,
    }

    impl Worst {
        fn new(name: &'static str) -> Self {
            Worst {
                name,
                err: Cell::new(0.0),
                problems: Cell::new(0),
            }
        }
        fn check(&self, what: &str, a: f64, b: f64, tol: f64) {
            let e = rel_err(a, b);
            assert!(!a.is_nan() && !b.is_nan(), "{what}: NaN ({a} vs {b})");
            assert!(
                e <= tol,
                "{what}: {a} vs {b} (relative error {e:e} > {tol:e})"
            );
            self.err.set(self.err.get().max(e));
        }
        fn arrays(&self, what: &str, a: ArrayViewD<f64>, b: ArrayViewD<f64>, tol: f64) {
            assert_eq!(a.shape(), b.shape(), "{what}: shapes differ");
            for ((idx, &x), &y) in a.indexed_iter().zip(b.iter()) {
                self.check(&format!("{what}{:?}", idx), x, y, tol);
            }
        }
        fn gradients(&self, what: &str, a: &Gradients, b: &Gradients, tol: f64) {
            for ((name, x), (_, y)) in a.fields().into_iter().zip(b.fields()) {
                match (x, y) {
                    (Some(x), Some(y)) => self.arrays(&format!("{what} grad.{name}"), x, y, tol),
                    (None, None) => {}
                    (x, y) => panic!(
                        "{what} grad.{name}: present {} vs {}",
                        x.is_some(),
                        y.is_some()
                    ),
                }
            }
        }
        fn backward(&self, what: &str, a: &Backward, b: &Backward, tol: f64) {
            for (i, (&x, &y)) in a.log_z.iter().zip(&b.log_z).enumerate() {
                self.check(&format!("{what} log_z[{i}]"), x, y, tol);
            }
            self.arrays(
                &format!("{what} boundary"),
                a.boundary_marginals.view().into_dyn(),
                b.boundary_marginals.view().into_dyn(),
                tol,
            );
            self.gradients(what, &a.grad, &b.grad, tol);
        }
        fn done(&self) {
            self.problems.set(self.problems.get() + 1);
        }
    }

    impl Drop for Worst {
        fn drop(&mut self) {
            eprintln!(
                "{}: {} problems, worst relative error {:e}",
                self.name,
                self.problems.get(),
                self.err.get()
            );
        }
    }

    /// The SPEC §7 cases and `SEEDS` random specs, each with its own seed.
    fn cases() -> Vec<(String, OwnedPotentials<f64>)> {
        let mut out: Vec<(String, OwnedPotentials<f64>)> = spec7_cases()
            .into_iter()
            .enumerate()
            .map(|(i, (name, spec))| (name.to_string(), random_problem(1000 + i as u64, &spec)))
            .collect();
        for seed in 0..SEEDS {
            out.push((
                format!("seed {seed}"),
                random_problem(seed, &random_spec(seed)),
            ));
        }
        out
    }

    fn upstream(seed: u64, batch: usize) -> Vec<f64> {
        let mut r = rng(seed ^ 0xabcd);
        (0..batch)
            .map(|_| {
                let g: f64 = r.random_range(0.25..2.0);
                if r.random_bool(0.3) { -g } else { g }
            })
            .collect()
    }

    /// Random edges `(B, T, K, C, C)` with the shape and lengths of `p`, a quarter `-inf`.
    fn random_edges(seed: u64, p: &OwnedPotentials<f64>) -> Array5<f64> {
        let (b, t, c) = (
            p.scores.shape()[0],
            p.scores.shape()[1],
            p.scores.shape()[2],
        );
        let mut r = rng(seed ^ 0xed9e);
        Array5::from_shape_fn((b, t, p.max_duration, c, c), |_| {
            if r.random_bool(0.25) {
                NINF
            } else {
                r.random_range(-2.0..2.0)
            }
        })
    }

    fn structured<F: Scalar>(p: &OwnedPotentials<F>) -> Problem<'_, F> {
        p.view().expect("generated problems are valid").into()
    }

    /// Runs every entry point of the exact engine and of the reference on `problem` and
    /// compares them.
    fn compare_with_reference<F: Scalar>(
        worst: &Worst,
        what: &str,
        problem: &Problem<'_, F>,
        up: &[f64],
        tol: f64,
    ) {
        let ours = engine(Parallelism::Sequential);
        let oracle = reference::Reference;
        for kind in [SemiringKind::Log, SemiringKind::Max] {
            let a = ours.forward(problem, kind).unwrap();
            let b = oracle.forward(problem, kind).unwrap();
            for (i, (&x, &y)) in a.iter().zip(&b).enumerate() {
                worst.check(&format!("{what} forward {kind:?}[{i}]"), x, y, tol);
            }
        }
        let a = ours.viterbi(problem).unwrap();
        let b = oracle.viterbi(problem).unwrap();
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            worst.check(&format!("{what} viterbi[{i}]"), x.score, y.score, tol);
            assert_eq!(x.segments, y.segments, "{what} viterbi segments [{i}]");
        }
        match (ours.backward(problem, up), oracle.backward(problem, up)) {
            (Ok(a), Ok(b)) => worst.backward(&format!("{what} backward"), &a, &b, tol),
            (Err(a), Err(b)) => assert_eq!(a, b, "{what}: errors differ"),
            (a, b) => panic!("{what}: ours {:?} vs reference {:?}", a.err(), b.err()),
        }
        worst.done();
    }

    #[test]
    fn structured_forward_and_viterbi_match_brute_force_enumeration() {
        let worst = Worst::new("structured vs brute force");
        let ours = engine(Parallelism::Sequential);
        for (name, owned) in cases() {
            let problem = structured(&owned);
            let Problem::Structured(p) = &problem else {
                unreachable!()
            };
            let log_z = ours.forward(&problem, SemiringKind::Log).unwrap();
            let max = ours.forward(&problem, SemiringKind::Max).unwrap();
            let decoded = ours.viterbi(&problem).unwrap();
            for b in 0..owned.lengths.len() {
                let bf = reference::brute_force(p, b).unwrap();
                worst.check(&format!("{name} log Z[{b}]"), log_z[b], bf.log_z, 1e-10);
                worst.check(&format!("{name} max[{b}]"), max[b], bf.max, 1e-10);
                let d = &decoded[b];
                assert_eq!(d.score.to_bits(), max[b].to_bits(), "{name}: viterbi score");
                if d.score == NINF {
                    assert!(d.segments.is_empty(), "{name}: infeasible has no segments");
                } else {
                    let gold = gold_score(p, b, &d.segments).unwrap();
                    worst.check(&format!("{name} gold score[{b}]"), gold, d.score, 1e-10);
                    assert!(log_z[b] >= d.score - 1e-9, "{name}: log Z below the max");
                }
            }
            worst.done();
        }
    }

    #[test]
    fn structured_results_equal_the_reference_engine_in_f64() {
        let worst = Worst::new("structured f64 vs reference");
        for (seed, (name, owned)) in cases().into_iter().enumerate() {
            let up = upstream(seed as u64, owned.lengths.len());
            compare_with_reference(&worst, &name, &structured(&owned), &up, 1e-10);
        }
    }

    #[test]
    fn f32_inputs_match_the_f64_oracle_on_the_same_values() {
        let worst = Worst::new("structured f32 vs reference");
        for (seed, (name, owned)) in cases().into_iter().enumerate() {
            let owned = owned.cast::<f32>();
            let up = upstream(seed as u64, owned.lengths.len());
            compare_with_reference(&worst, &name, &structured(&owned), &up, 1e-5);
        }
    }

    #[test]
    fn edge_input_matches_the_reference_and_brute_force() {
        let worst = Worst::new("edges vs reference and brute force");
        let ours = engine(Parallelism::Sequential);
        for (seed, (name, owned)) in cases().into_iter().enumerate() {
            let seed = seed as u64;
            let lengths = owned.lengths.clone();
            let up = upstream(seed, lengths.len());
            let materialized = materialize(&owned.view().unwrap());
            let drawn = random_edges(seed, &owned);
            for (kind, edges) in [("materialised", &materialized), ("random", &drawn)] {
                let what = format!("{name} {kind} edges");
                let ep = EdgePotentials::new(edges.view(), &lengths).unwrap();
                let log_z = ours.forward(&ep.clone().into(), SemiringKind::Log).unwrap();
                let max = ours.forward(&ep.clone().into(), SemiringKind::Max).unwrap();
                for b in 0..lengths.len() {
                    let bf = reference::brute_force_edges(&ep, b).unwrap();
                    worst.check(&format!("{what} log Z[{b}]"), log_z[b], bf.log_z, 1e-10);
                    worst.check(&format!("{what} max[{b}]"), max[b], bf.max, 1e-10);
                }
                compare_with_reference(&worst, &what, &ep.clone().into(), &up, 1e-10);
                // f32 edges, against the oracle on the same f32 values.
                let e32 = edges.mapv(|x| x as f32);
                let ep32 = EdgePotentials::new(e32.view(), &lengths).unwrap();
                compare_with_reference(&worst, &format!("{what} f32"), &ep32.into(), &up, 1e-5);
            }
        }
    }

    #[test]
    fn edges_in_non_standard_layouts_give_the_same_results_as_contiguous_edges() {
        let ours = engine(Parallelism::Sequential);
        let mut strided = 0;
        for seed in 0..40 {
            let owned = random_problem(seed, &random_spec(seed));
            let edges = random_edges(seed, &owned);
            let lengths = owned.lengths.clone();
            let up = upstream(seed, lengths.len());
            // Source axis stored first: a permuted, non-contiguous view of the same values.
            let swapped = edges
                .view()
                .permuted_axes([0, 1, 2, 4, 3])
                .as_standard_layout()
                .into_owned();
            let permuted = swapped.view().permuted_axes([0, 1, 2, 4, 3]);
            // pytorch-struct style: duration axis shifted by one, sliced off.
            let mut padded = Array5::<f64>::zeros({
                let s = edges.shape();
                (s[0], s[1], s[2] + 1, s[3], s[4])
            });
            padded
                .slice_axis_mut(Axis(2), Slice::from(1..))
                .assign(&edges);
            let shifted = padded.slice_axis(Axis(2), Slice::from(1..));
            let dense: Problem<f64> = EdgePotentials::new(edges.view(), &lengths).unwrap().into();
            let want_z = ours.forward(&dense, SemiringKind::Log).unwrap();
            let want_v = ours.viterbi(&dense).unwrap();
            let want_b = ours.backward(&dense, &up);
            for view in [permuted, shifted] {
                strided += usize::from(view.as_slice().is_none());
                let p: Problem<f64> = EdgePotentials::new(view, &lengths).unwrap().into();
                assert_eq!(ours.forward(&p, SemiringKind::Log).unwrap(), want_z);
                assert_eq!(ours.viterbi(&p).unwrap(), want_v);
                assert_eq!(ours.backward(&p, &up), want_b);
            }
        }
        assert!(strided > 40, "only {strided} views were not contiguous");
    }

    fn bits(b: &Backward) -> Vec<u64> {
        let mut out: Vec<u64> = b.log_z.iter().map(|x| x.to_bits()).collect();
        out.extend(b.boundary_marginals.iter().map(|x| x.to_bits()));
        for (_, x) in b.grad.fields() {
            out.extend(
                x.into_iter()
                    .flat_map(|x| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>()),
            );
        }
        out
    }

    fn decoded_bits(d: &[Decoded]) -> Vec<(u64, Vec<Segment>)> {
        d.iter()
            .map(|d| (d.score.to_bits(), d.segments.clone()))
            .collect()
    }

    #[test]
    fn sequential_and_rayon_results_are_bitwise_identical() {
        let seq = engine(Parallelism::Sequential);
        let par = engine(Parallelism::Rayon);
        let mut spec = GenSpec::new(9, 40, 6, 4);
        spec.ragged = true;
        spec.boundaries = true;
        spec.start = true;
        spec.end = true;
        spec.forbid_transitions = 0.2;
        let mut problems: Vec<OwnedPotentials<f64>> = vec![random_problem(7, &spec)];
        spec.transition = semicrf_core::testing::TransitionKind::DurationDependent;
        problems.push(random_problem(8, &spec));
        for (n, owned) in problems.iter().enumerate() {
            let up = upstream(n as u64, owned.lengths.len());
            let edges = materialize(&owned.view().unwrap());
            let ep: Problem<f64> = EdgePotentials::new(edges.view(), &owned.lengths)
                .unwrap()
                .into();
            for problem in [structured(owned), ep] {
                for kind in [SemiringKind::Log, SemiringKind::Max] {
                    let a = seq.forward(&problem, kind).unwrap();
                    let b = par.forward(&problem, kind).unwrap();
                    let a: Vec<u64> = a.iter().map(|x| x.to_bits()).collect();
                    let b: Vec<u64> = b.iter().map(|x| x.to_bits()).collect();
                    assert_eq!(a, b);
                }
                assert_eq!(
                    decoded_bits(&seq.viterbi(&problem).unwrap()),
                    decoded_bits(&par.viterbi(&problem).unwrap())
                );
                assert_eq!(
                    bits(&seq.backward(&problem, &up).unwrap()),
                    bits(&par.backward(&problem, &up).unwrap())
                );
            }
        }
    }

    /// Sequence `b` of `p` alone (same padded length `T`).
    fn alone(p: &OwnedPotentials<f64>, b: usize) -> OwnedPotentials<f64> {
        let row = |x: &ArrayD<f64>| x.slice_axis(Axis(0), Slice::from(b..b + 1)).to_owned();
        OwnedPotentials {
            scores: row(&p.scores),
            begin_boundary: p.begin_boundary.as_ref().map(row),
            end_boundary: p.end_boundary.as_ref().map(row),
            lengths: vec![p.lengths[b]],
            ..p.clone()
        }
    }

    #[test]
    fn a_batched_call_gives_each_sequence_the_numbers_it_gets_alone() {
        let ours = engine(Parallelism::Rayon);
        let mut spec = GenSpec::new(5, 12, 4, 3);
        spec.ragged = true;
        spec.boundaries = true;
        spec.start = true;
        spec.end = true;
        for seed in 0..4 {
            spec.transition = if seed % 2 == 0 {
                semicrf_core::testing::TransitionKind::Static
            } else {
                semicrf_core::testing::TransitionKind::DurationDependent
            };
            let owned = random_problem(seed, &spec);
            let up = upstream(seed, owned.lengths.len());
            let batch = structured(&owned);
            let z = ours.forward(&batch, SemiringKind::Log).unwrap();
            let v = ours.viterbi(&batch).unwrap();
            let bw = ours.backward(&batch, &up).unwrap();
            let mut shared: Option<Gradients> = None;
            for b in 0..owned.lengths.len() {
                let one = alone(&owned, b);
                let p = structured(&one);
                let z1 = ours.forward(&p, SemiringKind::Log).unwrap();
                assert_eq!(z1[0].to_bits(), z[b].to_bits());
                assert_eq!(ours.viterbi(&p).unwrap()[0], v[b]);
                let g1 = ours.backward(&p, &up[b..=b]).unwrap();
                assert_eq!(g1.log_z[0].to_bits(), bw.log_z[b].to_bits());
                assert_eq!(g1.boundary_marginals.row(0), bw.boundary_marginals.row(b));
                let per_seq = |g: &Gradients| {
                    (
                        g.scores.clone().unwrap(),
                        g.begin_boundary.clone().unwrap(),
                        g.end_boundary.clone().unwrap(),
                    )
                };
                let (s1, bb1, eb1) = per_seq(&g1.grad);
                let (s, bb, eb) = per_seq(&bw.grad);
                assert_eq!(s1.index_axis(Axis(0), 0), s.index_axis(Axis(0), b));
                assert_eq!(bb1.index_axis(Axis(0), 0), bb.index_axis(Axis(0), b));
                assert_eq!(eb1.index_axis(Axis(0), 0), eb.index_axis(Axis(0), b));
                // Shared parameters: the batch sums the single-sequence gradients in order.
                shared = Some(match shared {
                    None => g1.grad,
                    Some(mut acc) => {
                        *acc.transition.as_mut().unwrap() += g1.grad.transition.as_ref().unwrap();
                        *acc.duration.as_mut().unwrap() += g1.grad.duration.as_ref().unwrap();
                        *acc.start.as_mut().unwrap() += g1.grad.start.as_ref().unwrap();
                        *acc.end.as_mut().unwrap() += g1.grad.end.as_ref().unwrap();
                        acc
                    }
                });
            }
            let shared = shared.unwrap();
            assert_eq!(shared.transition, bw.grad.transition);
            assert_eq!(shared.duration, bw.grad.duration);
            assert_eq!(shared.start, bw.grad.start);
            assert_eq!(shared.end, bw.grad.end);

            // Edge input: each sequence alone, cropped to its own length.
            let edges = materialize(&owned.view().unwrap());
            let ep: Problem<f64> = EdgePotentials::new(edges.view(), &owned.lengths)
                .unwrap()
                .into();
            let bw = ours.backward(&ep, &up).unwrap();
            let v = ours.viterbi(&ep).unwrap();
            for (b, &len) in owned.lengths.iter().enumerate() {
                let one = edges
                    .slice_axis(Axis(0), Slice::from(b..b + 1))
                    .slice_axis_move(Axis(1), Slice::from(..len));
                let lens = [len];
                let p: Problem<f64> = EdgePotentials::new(one, &lens).unwrap().into();
                let g1 = ours.backward(&p, &up[b..=b]).unwrap();
                assert_eq!(g1.log_z[0].to_bits(), bw.log_z[b].to_bits());
                let mu = bw.grad.edges.as_ref().unwrap();
                assert_eq!(
                    g1.grad.edges.unwrap().index_axis(Axis(0), 0),
                    mu.index_axis(Axis(0), b)
                        .slice_axis(Axis(0), Slice::from(..len))
                );
                assert!(
                    mu.index_axis(Axis(0), b)
                        .slice_axis(Axis(0), Slice::from(len..))
                        .iter()
                        .all(|&x| x == 0.0)
                );
                assert_eq!(ours.viterbi(&p).unwrap()[0], v[b]);
            }
        }
    }

    #[test]
    fn an_infeasible_sequence_gives_a_typed_error_and_an_empty_decoding() {
        // K = 1 and every transition forbidden: only a sequence of length 1 has a path.
        let scores = Array3::<f64>::zeros((3, 3, 2));
        let transition = Array2::from_elem((2, 2), NINF);
        let lengths = [1, 3, 1];
        let p = semicrf_core::Potentials::builder(scores.view(), &lengths, 1)
            .transition(transition.view())
            .build()
            .unwrap();
        let edges = materialize(&p);
        let ep = EdgePotentials::new(edges.view(), &lengths).unwrap();
        for problem in [Problem::from(p), Problem::from(ep)] {
            for par in [Parallelism::Sequential, Parallelism::Rayon] {
                let e = engine(par);
                let z = e.forward(&problem, SemiringKind::Log).unwrap();
                assert!(z[0].is_finite() && z[2].is_finite());
                assert_eq!(z[1], NINF);
                assert_eq!(e.forward(&problem, SemiringKind::Max).unwrap()[1], NINF);
                let d = e.viterbi(&problem).unwrap();
                assert_eq!(
                    d[1],
                    Decoded {
                        score: NINF,
                        segments: vec![]
                    }
                );
                assert_eq!(d[0].segments, vec![Segment::new(0, 1, 0)]);
                assert_eq!(
                    e.backward(&problem, &[1.0; 3]),
                    Err(Error::Infeasible { sequence: 1 })
                );
            }
        }
    }

    #[test]
    fn an_upstream_gradient_of_the_wrong_length_or_not_finite_is_rejected() {
        let owned = random_problem(3, &GenSpec::new(2, 4, 2, 2));
        let p = structured(&owned);
        let e = ExactEngine::new();
        assert!(matches!(
            e.backward(&p, &[1.0]),
            Err(Error::Upstream { .. })
        ));
        assert!(matches!(
            e.backward(&p, &[1.0, f64::NAN]),
            Err(Error::Upstream { .. })
        ));
    }

    #[test]
    fn ties_prefer_the_shorter_duration_then_the_smaller_previous_label_then_the_smaller_final_label()
     {
        let e = ExactEngine::new();
        // All scores zero: every segmentation ties; unit segments of label 0 win.
        let scores = Array3::<f64>::zeros((1, 5, 3));
        let lengths = [5];
        let p: Problem<f64> = semicrf_core::Potentials::builder(scores.view(), &lengths, 3)
            .build()
            .unwrap()
            .into();
        let d = e.viterbi(&p).unwrap();
        assert_eq!(d[0].score, 0.0);
        let want: Vec<Segment> = (0..5).map(|t| Segment::new(t, 1, 0)).collect();
        assert_eq!(d[0].segments, want);

        // A label-0 segment may not end at position 0. At (t = 2, j = 0) the candidates
        // (d = 1, previous label 1) and (d = 2, virtual start) tie: the shorter duration wins,
        // although the longer one has the smaller previous label. α_2(0) = α_2(1): final label 0.
        let scores = Array3::<f64>::zeros((1, 2, 2));
        let mut end_boundary = Array3::<f64>::zeros((1, 2, 2));
        end_boundary[[0, 0, 0]] = NINF;
        let lengths = [2];
        let p: Problem<f64> = semicrf_core::Potentials::builder(scores.view(), &lengths, 2)
            .end_boundary(end_boundary.view())
            .build()
            .unwrap()
            .into();
        let d = e.viterbi(&p).unwrap();
        assert_eq!(
            d[0].segments,
            vec![Segment::new(0, 1, 1), Segment::new(1, 1, 0)]
        );

        // Integer scores make exact ties common: the segments must be the reference's.
        for seed in 0..60 {
            let mut owned = random_problem(seed, &random_spec(seed));
            let mut r = rng(seed);
            owned.scores.mapv_inplace(|x| {
                if x == NINF {
                    x
                } else {
                    r.random_range(-1..=1) as f64
                }
            });
            if let Some(t) = owned.transition.as_mut() {
                t.mapv_inplace(|x| if x == NINF { x } else { x.round() });
            }
            owned.duration = None;
            owned.begin_boundary = None;
            owned.end_boundary = None;
            owned.start = owned
                .start
                .map(|s| s.mapv(|x| if x == NINF { x } else { 0.0 }));
            owned.end = None;
            let p = structured(&owned);
            assert_eq!(
                e.viterbi(&p).unwrap(),
                reference::Reference.viterbi(&p).unwrap(),
                "seed {seed}"
            );
            let edges = materialize(&owned.view().unwrap());
            let ep: Problem<f64> = EdgePotentials::new(edges.view(), &owned.lengths)
                .unwrap()
                .into();
            assert_eq!(
                e.viterbi(&ep).unwrap(),
                reference::Reference.viterbi(&ep).unwrap(),
                "seed {seed} edges"
            );
        }
    }

    #[test]
    fn long_sequences_with_large_scores_stay_finite_and_normalised() {
        let mut spec = GenSpec::new(2, 3000, 6, 3);
        spec.scale = 1e4;
        spec.boundaries = true;
        let owned = random_problem(11, &spec);
        let p = structured(&owned);
        let e = ExactEngine::new();
        let ours = e.backward(&p, &[1.0, 1.0]).unwrap();
        let want = reference::Reference.backward(&p, &[1.0, 1.0]).unwrap();
        let worst = Worst::new("long, large scores");
        for b in 0..2 {
            worst.check("log Z", ours.log_z[b], want.log_z[b], 1e-10);
        }
        // log Z is about 1e7 here, so exp(α + e + β - log Z) carries absolute errors of
        // about T·ulp(1e7) ≈ 1e-6 in any log-space forward-backward: compare marginals to 1e-5.
        worst.backward("marginals", &ours, &want, 1e-5);
        // Each position is covered by exactly one segment.
        let scores = ours.grad.scores.as_ref().unwrap();
        for b in 0..2 {
            for t in 0..3000 {
                let covered: f64 = scores.index_axis(Axis(0), b).row(t).sum();
                worst.check("coverage", covered, 1.0, 1e-5);
            }
        }
        assert!(ours.boundary_marginals.iter().all(|x| x.is_finite()));
        worst.done();
    }

    fn query(shape: Shape, form: Form, op: Op) -> Query {
        Query {
            shape,
            form,
            op,
            dtype_bytes: 8,
        }
    }

    #[test]
    fn check_accepts_every_query_and_refuses_only_overflowing_shapes() {
        let e = ExactEngine::new();
        let forms = [
            Form::Structured {
                duration_dependent_transition: false,
            },
            Form::Structured {
                duration_dependent_transition: true,
            },
            Form::Edges,
        ];
        let ops = [
            Op::Forward(SemiringKind::Log),
            Op::Forward(SemiringKind::Max),
            Op::Backward,
            Op::Viterbi,
        ];
        for form in forms {
            for op in ops {
                let q = query(Shape::new(4, 100, 8, 24), form, op);
                assert_eq!(Engine::<f32>::check(&e, &q), Ok(()));
                // K far beyond T is fine for structured input (durations > T never exist).
                if form != Form::Edges {
                    let q = query(Shape::new(4, 100, 1 << 40, 24), form, op);
                    assert_eq!(Engine::<f64>::check(&e, &q), Ok(()));
                }
                let q = query(Shape::new(1 << 40, 1 << 20, 64, 64), form, op);
                assert!(matches!(
                    Engine::<f64>::check(&e, &q),
                    Err(Error::Unsupported { .. })
                ));
                let _ = Engine::<f64>::memory_required(&e, &q);
            }
        }
    }

    #[test]
    fn memory_required_follows_the_documented_formula() {
        let e = engine(Parallelism::Sequential);
        let (b, t, k, c) = (3u64, 10u64, 4u64, 5u64);
        let shape = Shape::new(3, 10, 4, 5);
        let a = 8 * (t + 1) * c;
        let w = 8 * k * c + 24 * c + 8 * c;
        let m = 8 * t * k * c * c;
        let o = 64 * 1024;
        let s = Form::Structured {
            duration_dependent_transition: false,
        };
        let r = |bytes: usize| b * bytes as u64;
        let mem = |form, op| Engine::<f64>::memory_required(&e, &query(shape, form, op));
        let fwd = Op::Forward(SemiringKind::Log);
        assert_eq!(
            mem(s, fwd),
            m + a + w + r(size_of::<super::Result<f64>>()) + o
        );
        assert_eq!(
            mem(Form::Edges, fwd),
            a + w + r(size_of::<super::Result<f64>>()) + o
        );
        assert_eq!(
            mem(s, Op::Viterbi),
            m + 2 * a + w + r(size_of::<super::Result<Decoded>>()) + o
        );
        let gs = 8 * (3 * t * c + k * c + 2 * c + c * c);
        assert_eq!(
            mem(s, Op::Backward),
            2 * m
                + 3 * a
                + w
                + b * (gs + 8 * t)
                + r(size_of::<super::Result<super::SeqBackward>>())
                + o
        );
        // K beyond T counts as T for structured input.
        let long_k = query(Shape::new(3, 10, 1000, 5), s, fwd);
        assert_eq!(
            Engine::<f64>::memory_required(&e, &long_k),
            mem(s, fwd) + 8 * t * 6 * c * c + 8 * 6 * c
        );
        // Rayon holds at most one sequence per worker, never fewer than sequential.
        let par = ExactEngine::new();
        let q = query(shape, s, Op::Backward);
        assert!(Engine::<f64>::memory_required(&par, &q) >= mem(s, Op::Backward));
        // Saturates instead of overflowing.
        let huge = query(
            Shape::new(usize::MAX, usize::MAX, 8, 8),
            Form::Edges,
            Op::Backward,
        );
        assert_eq!(Engine::<f64>::memory_required(&e, &huge), u64::MAX);
    }

    #[test]
    fn memory_required_bounds_the_sizes_actually_used() {
        // The dominant terms are the materialised edges and marginals of one sequence.
        let owned = random_problem(5, &GenSpec::new(2, 30, 5, 4));
        let p = structured(&owned);
        let e = engine(Parallelism::Sequential);
        let q = Query::of(&p, Op::Backward);
        let edges = materialize(&owned.view().unwrap());
        let one_sequence = (edges.len() / 2 * 8) as u64;
        assert!(Engine::<f64>::memory_required(&e, &q) >= 2 * one_sequence);
    }

    use core::mem::size_of;
}
