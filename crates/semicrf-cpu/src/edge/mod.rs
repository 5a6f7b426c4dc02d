//! The edge-form dynamic program shared by the exact and scan engines.
//!
//! Both run the generic recurrences of the model page (`semicrf_core::model`, "Edge form")
//! over the edges `E[s, d-1, j, i]` of one sequence at a time, parallel over the batch:
//!
//! ```text
//! α_0(i) = one                                       (the virtual start)
//! α_t(j) = ⊕_{d=1..min(K,t)} ⊕_i α_{t-d}(i) ⊗ E[t-d, d-1, j, i]          t = 1..=L
//! result = ⊕_j α_L(j)
//! β_L(j) = one,   β_s(i) = ⊕_{d=1..min(K,L-s)} ⊕_j E[s, d-1, j, i] ⊗ β_{s+d}(j)
//! μ[s, d-1, j, i] = exp(α_s(i) + E[s, d-1, j, i] + β_{s+d}(j) - log Z)  (edge marginals)
//! ```
//!
//! - **Input.** Structured potentials are materialised into `f64` edges one sequence at a
//!   time (its first `L_b` positions, durations `1..=min(K, L_b)`), so peak memory scales
//!   with the sequences in flight, never with the batch. Edge input is read in place through
//!   the caller's view, whatever its layout ([`lanes`]).
//! - **Forward** in any semiring: a ring of the last `K` rows of `α`; each `(t, j)` gathers
//!   its `min(K, t)·C` terms and reduces them with [`Semiring::sum`](semicrf_core::Semiring::sum).
//! - **Viterbi**: the max-semiring forward with a `u32` backpointer `(d-1)·C + i` per `(t, j)`
//!   and [`trace_back`](semicrf_core::trace_back).
//! - **Backward** (log semiring): [`dp::backward`] with a checkpoint interval `Δ`; the exact
//!   engine uses `Δ = L` (one interval: the forward keeps its whole table, nothing is
//!   recomputed), the scan engine `Δ ≈ sqrt(T·K)` (checkpoints every `Δ` positions, `α`
//!   recomputed one interval at a time, about `O((T/Δ)·K·C + Δ·C)` memory instead of
//!   `O(T·C)`). Results are bitwise identical for every `Δ`.
//! - **Gradients.** Edge input gets `grad.edges = g_b·μ`; structured input gets the edge
//!   marginals (written over the materialised edges in place) pulled back onto its tensors
//!   with [`pull_back`], and the shared parameters summed over the batch in order
//!   `b = 0, 1, …` after the parallel part.
//!
//! Every sequence is computed by the same code on its own data, so results are bitwise
//! identical between [`Parallelism::Sequential`] and [`Parallelism::Rayon`] and between a
//! batch and its sequences one at a time.

pub(crate) mod dp;
pub(crate) mod lanes;

use ndarray::{Array1, Array2, Array3, Array5, ArrayD, Axis, IxDyn, Slice};
use semicrf_core::{
    Backward, ByteCount, Decoded, EdgePotentials, Error, Form, Gradients, Op, Potentials, Problem,
    Query, Result, Scalar, Semiring, check_feasible, check_upstream, materialize, pull_back,
};

use crate::Parallelism;
use crate::par::{in_flight, map_indexed, map_zip_chunks};
use dp::{InPlace, Separate};
use lanes::{one_sequence, sequence, with_lanes};

/// What the backward pass of one structured sequence hands back: log Z and, when it is
/// finite, the unscaled boundary marginals of positions `0..L` and the pulled-back gradient
/// of this sequence alone.
type SeqBackward = (f64, Option<(Vec<f64>, Gradients)>);

/// `⊕` over every segmentation of each sequence, in semiring `S`.
pub(crate) fn forward<S: Semiring, F: Scalar>(
    par: Parallelism,
    problem: &Problem<'_, F>,
) -> Result<Vec<S::Value>> {
    semicrf_core::range::check_semiring::<S, F>(problem)?;
    let lengths = problem.lengths();
    map_indexed(par, lengths.len(), |b| -> Result<S::Value> {
        let edges = sequence(problem, b)?;
        Ok(with_lanes!(&edges, |lanes| dp::forward::<S, _>(
            &lanes, lengths[b]
        )))
    })
    .into_iter()
    .collect()
}

/// The best segmentation of each sequence.
pub(crate) fn viterbi<F: Scalar>(
    par: Parallelism,
    problem: &Problem<'_, F>,
) -> Result<Vec<Decoded>> {
    let lengths = problem.lengths();
    map_indexed(par, lengths.len(), |b| -> Result<Decoded> {
        let edges = sequence(problem, b)?;
        Ok(with_lanes!(&edges, |lanes| dp::viterbi(&lanes, lengths[b])))
    })
    .into_iter()
    .collect()
}

/// log Z, gradients and boundary marginals with checkpoint interval `delta` (clamped to each
/// sequence's length).
pub(crate) fn backward<F: Scalar>(
    par: Parallelism,
    problem: &Problem<'_, F>,
    upstream: &[f64],
    delta: usize,
) -> Result<Backward> {
    check_upstream(upstream, problem.shape().batch)?;
    semicrf_core::range::check_probabilities(problem)?;
    match problem {
        Problem::Structured(p) => backward_structured(par, p, upstream, delta),
        Problem::Edges(e) => backward_edges(par, e, upstream, delta),
    }
}

fn backward_edges<F: Scalar>(
    par: Parallelism,
    e: &EdgePotentials<'_, F>,
    upstream: &[f64],
    delta: usize,
) -> Result<Backward> {
    let sh = e.shape();
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let lengths = e.lengths();
    let mut mu = Array5::<f64>::zeros((bn, t, k, c, c));
    let mut boundary_marginals = Array2::<f64>::zeros((bn, t));
    let (Some(mu_all), Some(bm_all)) = (mu.as_slice_mut(), boundary_marginals.as_slice_mut())
    else {
        unreachable!("freshly allocated arrays are in standard layout")
    };
    let log_z = map_zip_chunks(par, mu_all, t * k * c * c, bm_all, t, |b, out, bm| {
        let len = lengths[b];
        let view = e
            .edges()
            .view()
            .index_axis_move(Axis(0), b)
            .slice_axis_move(Axis(0), Slice::from(..len));
        with_lanes!(&lanes::SeqEdges::<F>::View(view), |lanes| {
            let mut sink = Separate { lanes, out };
            dp::backward(&mut sink, len, delta, upstream[b], bm)
        })
    });
    check_feasible(&log_z)?;
    Ok(Backward {
        log_z,
        grad: Gradients {
            edges: Some(mu),
            ..Gradients::default()
        },
        boundary_marginals,
    })
}

fn backward_structured<F: Scalar>(
    par: Parallelism,
    p: &Potentials<'_, F>,
    upstream: &[f64],
    delta: usize,
) -> Result<Backward> {
    let sh = p.shape();
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let parts: Vec<SeqBackward> = map_indexed(par, bn, |b| -> Result<SeqBackward> {
        let len = p.lengths()[b];
        let single = one_sequence(p, b)?;
        let mut edges = materialize(&single);
        let ks = edges.dim().2;
        let mut boundary = vec![0.0; len];
        let log_z = {
            let Some(buf) = edges.as_slice_mut() else {
                unreachable!("a freshly materialised tensor is in standard layout")
            };
            let mut sink = InPlace { buf, k: ks, c };
            dp::backward(&mut sink, len, delta, upstream[b], &mut boundary)
        };
        Ok(if log_z == f64::NEG_INFINITY {
            (log_z, None)
        } else {
            (log_z, Some((boundary, pull_back(&single, edges.view()))))
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
        // Per-sequence durations stop at min(K, L_b): add into the leading block.
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

/// Adds `src` into the leading block of `dst` that has `src`'s shape.
fn add_leading<D: ndarray::Dimension>(
    dst: &mut ndarray::Array<f64, D>,
    src: &ndarray::Array<f64, D>,
) {
    let rows = src.shape()[0];
    let mut block = dst.slice_axis_mut(Axis(0), Slice::from(..rows));
    block += src;
}

/// Refuses what the edge program cannot index: `K·C` above `2³²` (Viterbi backpointers are
/// `u32`) or a per-sequence edge tensor whose element count overflows `usize`.
pub(crate) fn check(backend: &str, query: &Query) -> Result<()> {
    let sh = query.shape;
    let k = kept_durations(query);
    let unsupported = |what: String| Error::Unsupported {
        backend: backend.into(),
        what,
    };
    if (k as u128) * (sh.labels as u128) > u32::MAX as u128 {
        return Err(unsupported(format!(
            "K·C above 2^32 for {sh} (backpointers are u32)"
        )));
    }
    let per_sequence = [sh.len, k, sh.labels, sh.labels, 8]
        .iter()
        .try_fold(1u128, |acc, &x| acc.checked_mul(x as u128));
    if per_sequence.is_none_or(|n| n > isize::MAX as u128) {
        return Err(unsupported(format!(
            "{sh}: one sequence's f64 edge tensor exceeds the address space"
        )));
    }
    Ok(())
}

/// `K'`: the durations a sequence stores, `min(K, T)` for structured input (longer ones
/// cannot occur and are never materialised), `K` for edge input.
fn kept_durations(query: &Query) -> usize {
    match query.form {
        Form::Structured { .. } => query.shape.max_duration.min(query.shape.len),
        Form::Edges => query.shape.max_duration,
    }
}

/// Bytes of bookkeeping per sequence of the batch (result slots, handles), counted
/// generously, and a fixed allowance for the thread pool's per-call bookkeeping and small
/// vectors.
const PER_SEQUENCE: usize = 128;
const FIXED: usize = 64 * 1024;

/// Working memory of the edge program for `query` with checkpoint interval `delta` (for the
/// padded length `T`), beyond inputs and returned outputs, in checked arithmetic: the
/// formula documented on [`ExactEngine`](crate::ExactEngine)'s `memory_required` (the exact
/// engine passes `Δ = T`, the scan engine its checkpoint interval).
pub(crate) fn memory(backend: &str, query: &Query, par: Parallelism, delta: usize) -> Result<u64> {
    let sh = query.shape;
    let (b, t, c) = (sh.batch, sh.len, sh.labels);
    let k = kept_durations(query);
    let structured = matches!(query.form, Form::Structured { .. });
    let p = in_flight(par, b, query.threads);
    let lane = ByteCount::bytes(&[usize::try_from(query.dtype_bytes).unwrap_or(usize::MAX), c]);
    let m = if structured {
        ByteCount::f64s(&[t, k, c, c])
    } else {
        ByteCount::ZERO
    };
    let batch = ByteCount::bytes(&[b, PER_SEQUENCE]) + ByteCount::bytes(&[FIXED]);
    let total = match query.op {
        Op::Forward(info) => {
            let f = ByteCount::f64s(&[info.width, 2, k, c]) + ByteCount::f64s(&[info.width, c]);
            (m + f + lane) * p + batch
        }
        Op::Viterbi => {
            let v = ByteCount::f64s(&[2, k, c])
                + ByteCount::f64s(&[c])
                + ByteCount::bytes(&[4, t, c])
                + lane;
            (m + v) * p + batch
        }
        Op::Backward => {
            let delta = delta.clamp(1, t.max(1));
            let n = t.div_ceil(delta);
            let bw = ByteCount::f64s(&[n.saturating_add(3), k, c])
                + ByteCount::f64s(&[delta.saturating_add(k), c])
                + ByteCount::f64s(&[k, c, c])
                + ByteCount::f64s(&[7, c])
                + lane * 2;
            if structured {
                // The gradients pulled back per sequence have the inputs' shapes: the full
                // `K` of the duration (and duration-dependent transition) tables, even where
                // `K > T` and those inputs are absent.
                let full_k = sh.max_duration;
                let tr = if matches!(
                    query.form,
                    Form::Structured {
                        duration_dependent_transition: true,
                        ..
                    }
                ) {
                    ByteCount::f64s(&[full_k, c, c])
                } else {
                    ByteCount::f64s(&[c, c])
                };
                let g = ByteCount::f64s(&[3, t, c])
                    + ByteCount::f64s(&[full_k, c])
                    + ByteCount::f64s(&[2, c])
                    + tr
                    + ByteCount::f64s(&[t]);
                let pull = ByteCount::f64s(&[t.saturating_add(2), c]) + ByteCount::f64s(&[t]);
                (m + bw + pull) * p + g * b + batch
            } else {
                bw * p + batch
            }
        }
    };
    total.finish(backend, sh)
}
