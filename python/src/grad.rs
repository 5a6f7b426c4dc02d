//! Gold segmentations: parsed from Python, scored, and their counts (the gradient of the
//! gold score) taken off the expected counts for the NLL's gradients.

use pyo3::prelude::*;
use semicrf::{
    Gradients, LogSemiring, Problem, Scalar, Segment, Shape, gold_score, gold_score_edges,
    segments_from_labels,
};

use crate::args::{listed, type_name};
use crate::errors::{Failure, Outcome};

/// `gold=` as given: labels per position or segments per sequence.
pub enum Gold {
    /// `(B, T)` labels; only the first `lengths[b]` of row `b` are read.
    Labels(Vec<Vec<i64>>),
    /// One list of `(start, duration, label)` per sequence.
    Segments(Vec<Vec<(i64, i64, i64)>>),
}

impl Gold {
    /// Parses `gold=`: a 2-D integer array (or nested list) of labels, or lists of triples.
    pub fn parse(v: &Bound<'_, PyAny>) -> Outcome<Gold> {
        let l = listed(v);
        if let Ok(labels) = l.extract::<Vec<Vec<i64>>>() {
            return Ok(Gold::Labels(labels));
        }
        if let Ok(segs) = l.extract::<Vec<Vec<(i64, i64, i64)>>>() {
            return Ok(Gold::Segments(segs));
        }
        Err(Failure::Type(format!(
            "`gold` must be an integer array (B, T) of labels or a list (one per sequence) of \
             lists of (start, duration, label), not {}",
            type_name(v)
        )))
    }

    /// The gold segmentations of a problem of `shape` and `lengths`.
    pub fn segments(&self, shape: Shape, lengths: &[usize]) -> Outcome<Vec<Vec<Segment>>> {
        let neg = |b: usize, what: &str, x: i64| {
            Failure::Value(format!("`gold[{b}]`: {what} {x} is negative"))
        };
        match self {
            Gold::Labels(rows) => {
                if rows.len() != shape.batch {
                    return Err(Failure::Value(format!(
                        "`gold` has {} rows of labels, expected one per sequence (B = {})",
                        rows.len(),
                        shape.batch
                    )));
                }
                rows.iter()
                    .zip(lengths)
                    .enumerate()
                    .map(|(b, (row, &len))| {
                        if row.len() < len {
                            return Err(Failure::Value(format!(
                                "`gold[{b}]` has {} labels, fewer than lengths[{b}] = {len}",
                                row.len()
                            )));
                        }
                        let labels = row[..len]
                            .iter()
                            .map(|&x| usize::try_from(x).map_err(|_| neg(b, "label", x)))
                            .collect::<Outcome<Vec<usize>>>()?;
                        Ok(segments_from_labels(&labels, shape.max_duration, true)?)
                    })
                    .collect()
            }
            Gold::Segments(all) => all
                .iter()
                .enumerate()
                .map(|(b, segs)| {
                    segs.iter()
                        .map(|&(s, d, c)| {
                            let u = |what, x: i64| usize::try_from(x).map_err(|_| neg(b, what, x));
                            Ok(Segment::new(
                                u("start", s)?,
                                u("duration", d)?,
                                u("label", c)?,
                            ))
                        })
                        .collect()
                })
                .collect(),
        }
    }
}

/// The score of each gold segmentation (validated by the library).
pub fn scores<F: Scalar>(p: &Problem<'_, F>, gold: &[Vec<Segment>]) -> Outcome<Vec<f64>> {
    let batch = p.shape().batch;
    if gold.len() != batch {
        return Err(Failure::Value(format!(
            "{} gold segmentations given, expected one per sequence (B = {batch})",
            gold.len()
        )));
    }
    gold.iter()
        .enumerate()
        .map(|(b, segs)| {
            Ok(match p {
                Problem::Structured(s) => gold_score(s, b, segs)?,
                Problem::Edges(e) => gold_score_edges::<LogSemiring, F>(e, b, segs)?,
            })
        })
        .collect()
}

/// Takes `upstream[b]` times the gradient of gold score `b` off `grad`: the expected counts
/// become the gradient of `Σ_b upstream[b] · NLL_b`. The gold segmentations must have been
/// validated ([`scores`]) and have finite scores.
pub fn subtract<F: Scalar>(
    grad: &mut Gradients,
    p: &Problem<'_, F>,
    gold: &[Vec<Segment>],
    upstream: &[f64],
) {
    for (b, (segs, &u)) in gold.iter().zip(upstream).enumerate() {
        if u == 0.0 {
            continue;
        }
        match p {
            Problem::Structured(_) => structured(grad, b, segs, u),
            Problem::Edges(e) => {
                let Some(g) = grad.edges.as_mut() else {
                    continue;
                };
                let e = e.edges();
                let first = segs[0];
                // The first segment's score is a log-sum-exp over the virtual start's
                // sources: its gradient is their softmax.
                let row: Vec<f64> = (0..e.shape()[4])
                    .map(|i| e[[b, 0, first.duration - 1, first.label, i]].as_f64())
                    .collect();
                let top = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = row.iter().map(|&x| (x - top).exp()).collect();
                let total: f64 = w.iter().sum();
                for (i, wi) in w.iter().enumerate() {
                    g[[b, 0, first.duration - 1, first.label, i]] -= u * wi / total;
                }
                for pair in segs.windows(2) {
                    let (prev, s) = (pair[0], pair[1]);
                    g[[b, s.start, s.duration - 1, s.label, prev.label]] -= u;
                }
            }
        }
    }
}

fn structured(grad: &mut Gradients, b: usize, segs: &[Segment], u: f64) {
    if let (Some(g), Some(first)) = (grad.start.as_mut(), segs.first()) {
        g[first.label] -= u;
    }
    if let (Some(g), Some(last)) = (grad.end.as_mut(), segs.last()) {
        g[last.label] -= u;
    }
    for (n, s) in segs.iter().enumerate() {
        let (c, d) = (s.label, s.duration);
        if let Some(g) = grad.scores.as_mut() {
            for t in s.start..s.end() {
                g[[b, t, c]] -= u;
            }
        }
        if let Some(g) = grad.duration.as_mut() {
            g[[d - 1, c]] -= u;
        }
        if let Some(g) = grad.begin_boundary.as_mut() {
            g[[b, s.start, c]] -= u;
        }
        if let Some(g) = grad.end_boundary.as_mut() {
            g[[b, s.end() - 1, c]] -= u;
        }
        if n > 0
            && let Some(g) = grad.transition.as_mut()
        {
            let prev = segs[n - 1].label;
            if g.ndim() == 3 {
                g[[d - 1, prev, c]] -= u;
            } else {
                g[[prev, c]] -= u;
            }
        }
    }
}
