//! Exact materialisation of structured potentials into edges (model §3) and its adjoint, the
//! pull-back of edge gradients onto the structured inputs.
//!
//! `edges[b, s, d-1, j, i] = Σ_{t=s}^{s+d-1} scores[b, t, j] + duration[d-1, j]
//! + begin_boundary[b, s, j] + end_boundary[b, s+d-1, j] + transition[(d-1,) i, j]` for
//! `s > 0`; for `s = 0` the transition is replaced by `start[j]` on source `i = 0` and `-inf` on
//! every other source (the edge form's virtual start sums over sources); `end[j]` is added where
//! `s + d == L_b`; edges with `s + d > L_b` are `-inf`. Content sums are accumulated directly in
//! `f64` (no prefix-sum differences), so `-inf` scores stay `-inf`.

use ndarray::{Array1, Array2, Array3, Array5, ArrayD, ArrayView5, IxDyn};

use crate::{Gradients, Potentials, Scalar, Shape};

/// Bytes of a materialised `f64` edge tensor of `shape`.
pub fn edge_tensor_bytes(shape: Shape) -> u64 {
    (shape.batch as u64)
        .saturating_mul(shape.len as u64)
        .saturating_mul(shape.max_duration as u64)
        .saturating_mul((shape.labels * shape.labels) as u64)
        .saturating_mul(8)
}

/// Materialises structured potentials into an `f64` edge tensor `(B, T, K, C, C)`.
pub fn materialize<F: Scalar>(p: &Potentials<'_, F>) -> Array5<f64> {
    let sh = p.shape();
    let (k, c) = (sh.max_duration, sh.labels);
    let mut e = Array5::from_elem((sh.batch, sh.len, k, c, c), f64::NEG_INFINITY);
    for (b, &len) in p.lengths().iter().enumerate() {
        for s in 0..len {
            for j in 0..c {
                let mut content = 0.0;
                for d in 1..=k.min(len - s) {
                    content += p.scores()[[b, s + d - 1, j]].as_f64();
                    let mut base = content
                        + p.duration_at(d, j)
                        + p.begin_boundary_at(b, s, j)
                        + p.end_boundary_at(b, s + d - 1, j);
                    if s + d == len {
                        base += p.end_at(j);
                    }
                    if s == 0 {
                        e[[b, 0, d - 1, j, 0]] = base + p.start_at(j);
                    } else {
                        for i in 0..c {
                            e[[b, s, d - 1, j, i]] = base + p.transition_at(d, i, j);
                        }
                    }
                }
            }
        }
    }
    e
}

/// Pulls an edge gradient `(B, T, K, C, C)` back onto the structured inputs (the adjoint of
/// [`materialize`]). Shared parameters are summed in a fixed order (batch, then position,
/// duration, labels), so the result is deterministic.
///
/// Entries of `edge_grad` at edges that [`materialize`] sets to `-inf` are ignored.
pub fn pull_back<F: Scalar>(p: &Potentials<'_, F>, edge_grad: ArrayView5<'_, f64>) -> Gradients {
    let sh = p.shape();
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let mut scores = Array3::<f64>::zeros((bn, t, c));
    let mut duration = Array2::<f64>::zeros((k, c));
    let dd = p.has_duration_dependent_transition();
    let mut transition = if dd {
        ArrayD::<f64>::zeros(IxDyn(&[k, c, c]))
    } else {
        ArrayD::<f64>::zeros(IxDyn(&[c, c]))
    };
    let mut start = Array1::<f64>::zeros(c);
    let mut end = Array1::<f64>::zeros(c);
    let mut bb = Array3::<f64>::zeros((bn, t, c));
    let mut eb = Array3::<f64>::zeros((bn, t, c));
    for (b, &len) in p.lengths().iter().enumerate() {
        // Difference array for the position marginals: + at s, - at s + d.
        let mut diff = Array2::<f64>::zeros((t + 1, c));
        for s in 0..len {
            for d in 1..=k.min(len - s) {
                for j in 0..c {
                    let g = if s == 0 {
                        let g = edge_grad[[b, 0, d - 1, j, 0]];
                        start[j] += g;
                        g
                    } else {
                        let mut g = 0.0;
                        for i in 0..c {
                            let gi = edge_grad[[b, s, d - 1, j, i]];
                            g += gi;
                            if dd {
                                transition[[d - 1, i, j]] += gi;
                            } else {
                                transition[[i, j]] += gi;
                            }
                        }
                        g
                    };
                    duration[[d - 1, j]] += g;
                    bb[[b, s, j]] += g;
                    eb[[b, s + d - 1, j]] += g;
                    if s + d == len {
                        end[j] += g;
                    }
                    diff[[s, j]] += g;
                    diff[[s + d, j]] -= g;
                }
            }
        }
        let mut run = vec![0.0; c];
        for u in 0..len {
            for j in 0..c {
                run[j] += diff[[u, j]];
                scores[[b, u, j]] = run[j];
            }
        }
    }
    Gradients {
        scores: Some(scores),
        transition: Some(transition),
        duration: Some(duration),
        start: Some(start),
        end: Some(end),
        begin_boundary: p.begin_boundary().map(|_| bb),
        end_boundary: p.end_boundary().map(|_| eb),
        edges: None,
    }
}

/// Boundary marginals `(B, T)` from edge marginals: `Σ_{d, j, i} μ[b, s, d-1, j, i]`.
pub fn boundary_marginals_from_edges(marginals: ArrayView5<'_, f64>) -> Array2<f64> {
    let (bn, t, _, _, _) = marginals.dim();
    let mut out = Array2::<f64>::zeros((bn, t));
    for ((b, s, _, _, _), &m) in marginals.indexed_iter() {
        out[[b, s]] += m;
    }
    out
}

/// Position marginals `(B, T, C)` from edge marginals: P(position `t` lies in a segment of
/// label `c`) = `Σ` of the marginals of the edges that cover `t` with label `c`.
pub fn position_marginals_from_edges(marginals: ArrayView5<'_, f64>) -> Array3<f64> {
    let (bn, t, k, c, _) = marginals.dim();
    let mut out = Array3::<f64>::zeros((bn, t, c));
    for b in 0..bn {
        let mut diff = Array2::<f64>::zeros((t + k + 1, c));
        for s in 0..t {
            for d in 1..=k {
                for j in 0..c {
                    let m: f64 = (0..c).map(|i| marginals[[b, s, d - 1, j, i]]).sum();
                    diff[[s, j]] += m;
                    diff[[s + d, j]] -= m;
                }
            }
        }
        let mut run = vec![0.0; c];
        for u in 0..t {
            for j in 0..c {
                run[j] += diff[[u, j]];
                out[[b, u, j]] = run[j];
            }
        }
    }
    out
}
