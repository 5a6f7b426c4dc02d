//! Partially labelled sequences (model §13): a label or "unknown" per position, and the
//! problem restricted to the segmentations that agree with it.
//!
//! A segmentation *agrees* with an annotation `a` (`a[b, t]` a label, or `-1` for unknown)
//! when every position `t < L_b` with `a[b, t] >= 0` lies in a segment of label `a[b, t]`. A
//! segment of label `c` that covers a position annotated `c' != c` is forbidden, and nothing
//! else is; so the restricted problem is the same problem with `scores[b, t, c] = -inf` for
//! every annotated `t` and `c != a[b, t]` (structured potentials), or with every edge of a
//! segment that covers such a position set to `-inf` (edge potentials). Its log Z is
//! `log Z_partial`, on any engine, and `NLL_partial = log Z - log Z_partial >= 0`.
//!
//! The gradient of `log Z_partial` with respect to an input is that of the restricted
//! problem: the scores it sets to `-inf` get 0 (the agreeing segmentations never use them),
//! every other input its expected count under the restricted posterior.

use ndarray::{Array3, Array5, ArrayView2, Axis, Zip};

use crate::{EdgePotentials, Error, Gradients, Potentials, Problem, Result, Scalar};

/// Checks an annotation `(B, T)` against a problem of shape `(B, T, K, C)`: every entry
/// below a sequence's length must be `-1` or a label in `0..C` (entries past the length are
/// ignored). A wrong shape is [`Error::Shape`]; a bad entry [`Error::Segmentation`] naming
/// the sequence and position.
pub fn check_partial_labels<F: Scalar>(
    problem: &Problem<'_, F>,
    labels: ArrayView2<'_, i64>,
) -> Result<()> {
    let sh = problem.shape();
    if labels.dim() != (sh.batch, sh.len) {
        return Err(Error::Shape {
            tensor: "partial_labels",
            got: labels.shape().to_vec(),
            expected: "(B, T)".into(),
        });
    }
    for (b, &len) in problem.lengths().iter().enumerate() {
        for t in 0..len {
            let a = labels[[b, t]];
            if a < -1 || a >= sh.labels as i64 {
                return Err(Error::Segmentation {
                    sequence: b,
                    reason: format!(
                        "partial label {a} at position {t} is neither -1 (unknown) nor a \
                         label in 0..{}",
                        sh.labels
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Whether label `c` is allowed at position `t` of sequence `b` by the annotation.
#[inline]
fn allowed(labels: &ArrayView2<'_, i64>, b: usize, t: usize, c: usize) -> bool {
    let a = labels[[b, t]];
    a < 0 || a as usize == c
}

/// The scores of the restricted problem: `scores` with `-inf` at every annotated position
/// for every other label. The annotation must have passed [`check_partial_labels`].
pub fn restricted_scores<F: Scalar>(
    p: &Potentials<'_, F>,
    labels: ArrayView2<'_, i64>,
) -> Array3<F> {
    let mut out = p.scores().to_owned();
    let lengths = p.lengths();
    for ((b, t, c), x) in out.indexed_iter_mut() {
        if t < lengths[b] && !allowed(&labels, b, t, c) {
            *x = F::neg_infinity();
        }
    }
    out
}

/// The edges of the restricted problem: `-inf` on every edge `(s, d, j, ·)` whose segment
/// `[s, s + d)` (within the length) covers a position annotated with a label other than `j`.
/// The annotation must have passed [`check_partial_labels`].
pub fn restricted_edges<F: Scalar>(
    e: &EdgePotentials<'_, F>,
    labels: ArrayView2<'_, i64>,
) -> Array5<F> {
    let mut out = e.edges().to_owned();
    let lengths = e.lengths();
    for (b, mut seq) in out.axis_iter_mut(Axis(0)).enumerate() {
        let len = lengths[b];
        for (s, mut starts) in seq.axis_iter_mut(Axis(0)).enumerate().take(len) {
            for (d0, mut lanes) in starts.axis_iter_mut(Axis(0)).enumerate() {
                let end = (s + d0 + 1).min(len);
                for (j, mut lane) in lanes.axis_iter_mut(Axis(0)).enumerate() {
                    if (s..end).any(|t| !allowed(&labels, b, t, j)) {
                        lane.fill(F::neg_infinity());
                    }
                }
            }
        }
    }
    out
}

/// The restricted problem's tensor, owned: what [`restricted_problem`] views.
#[derive(Clone, Debug)]
pub enum Restricted<F> {
    /// Structured potentials: the restricted scores.
    Scores(Array3<F>),
    /// Edge potentials: the restricted edges.
    Edges(Array5<F>),
}

/// Checks the annotation and builds the restricted problem's changed tensor (the scores or
/// the edges); view it with [`restricted_problem`].
pub fn restrict<F: Scalar>(
    problem: &Problem<'_, F>,
    labels: ArrayView2<'_, i64>,
) -> Result<Restricted<F>> {
    check_partial_labels(problem, labels)?;
    Ok(match problem {
        Problem::Structured(p) => Restricted::Scores(restricted_scores(p, labels)),
        Problem::Edges(e) => Restricted::Edges(restricted_edges(e, labels)),
    })
}

/// The restricted problem: `problem` with the tensor of [`restrict`] in place of its scores
/// (or edges), every other input shared.
pub fn restricted_problem<'r, F: Scalar>(
    problem: &'r Problem<'_, F>,
    restricted: &'r Restricted<F>,
) -> Result<Problem<'r, F>> {
    Ok(match (problem, restricted) {
        (Problem::Structured(p), Restricted::Scores(scores)) => {
            let sh = p.shape();
            let mut b = Potentials::builder(scores.view(), p.lengths(), sh.max_duration);
            if let Some(t) = p.transition() {
                b = match t {
                    crate::Transition::Static(t) => b.transition(t.view()),
                    crate::Transition::DurationDependent(t) => b.transition(t.view()),
                };
            }
            if let Some(t) = p.duration() {
                b = b.duration(t.view());
            }
            if let Some(t) = p.start() {
                b = b.start(t.view());
            }
            if let Some(t) = p.end() {
                b = b.end(t.view());
            }
            if let Some(t) = p.begin_boundary() {
                b = b.begin_boundary(t.view());
            }
            if let Some(t) = p.end_boundary() {
                b = b.end_boundary(t.view());
            }
            Problem::Structured(b.build()?)
        }
        (Problem::Edges(e), Restricted::Edges(edges)) => {
            Problem::Edges(EdgePotentials::new(edges.view(), e.lengths())?)
        }
        _ => {
            return Err(Error::Unsupported {
                backend: "partial labels".into(),
                what: "a restricted tensor of the other input form".into(),
            });
        }
    })
}

/// `NLL_partial_b = log Z_b - log Z_partial_b`, `(B)`: `+inf` where no agreeing segmentation
/// has a finite score (`log Z_partial = -inf`) while some segmentation does. Where
/// `log Z = -inf` too the NLL is undefined and this fails with [`Error::Infeasible`].
pub fn partial_nll(log_z: &[f64], log_z_partial: &[f64]) -> Result<Vec<f64>> {
    crate::check_feasible(log_z)?;
    Ok(log_z
        .iter()
        .zip(log_z_partial)
        .map(|(&z, &zp)| {
            if zp == f64::NEG_INFINITY {
                f64::INFINITY
            } else {
                z - zp
            }
        })
        .collect())
}

/// `full - restricted`, field by field: the gradient of `NLL_partial` from the gradients of
/// `log Z` and of `log Z_partial` (the same fields are present in both: they come from the
/// same input form and tensors).
pub fn gradient_difference(full: &Gradients, restricted: &Gradients) -> Gradients {
    fn sub<D: ndarray::Dimension>(
        a: &Option<ndarray::Array<f64, D>>,
        b: &Option<ndarray::Array<f64, D>>,
    ) -> Option<ndarray::Array<f64, D>> {
        match (a, b) {
            (Some(a), Some(b)) => {
                let mut out = a.clone();
                Zip::from(&mut out).and(b).for_each(|o, &y| *o -= y);
                Some(out)
            }
            (Some(a), None) => Some(a.clone()),
            (None, _) => None,
        }
    }
    Gradients {
        scores: sub(&full.scores, &restricted.scores),
        transition: sub(&full.transition, &restricted.transition),
        duration: sub(&full.duration, &restricted.duration),
        start: sub(&full.start, &restricted.start),
        end: sub(&full.end, &restricted.end),
        begin_boundary: sub(&full.begin_boundary, &restricted.begin_boundary),
        end_boundary: sub(&full.end_boundary, &restricted.end_boundary),
        edges: sub(&full.edges, &restricted.edges),
    }
}
