//! Gold segmentations: parsed from Python, scored, and their counts (the gradient of the
//! gold score) taken off the expected counts for the NLL's gradients.

use pyo3::prelude::*;
use semicrf::{
    Gradients, LogSemiring, Problem, Scalar, Segment, Shape, gold_score, gold_score_edges,
    gold_score_pull_back, segments_from_labels,
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
        if u != 0.0 {
            gold_score_pull_back(grad, p, b, segs, u);
        }
    }
}
