//! Brute-force oracles of k-best and posterior decoding: every segmentation of a small
//! sequence enumerated, scored ([`gold_score`], or [`gold_score_edges`] with the maximum
//! over the virtual start's sources, as Viterbi scores edges) and sorted or weighed. The
//! engines' [`KBest`](crate::KBest) and [`posterior_decode`](crate::posterior_decode) are
//! tested against them.
//!
//! ```
//! # mod semicrf { pub use ::ndarray; pub use semicrf_core::*; } // the facade's paths
//! use semicrf::ndarray::Array3;
//! use semicrf::{enumerate, Potentials, Problem};
//!
//! let scores = Array3::<f64>::zeros((1, 3, 2));
//! let lengths = [3];
//! let p: Problem<f64> = Potentials::builder(scores.view(), &lengths, 3).build()?.into();
//! assert_eq!(enumerate::kbest(&p, 0, 100)?.len(), 18); // every one of the 18
//! let post = enumerate::posterior(&p, 0)?;
//! assert!((post.best - 1.5).abs() < 1e-12); // each position right with probability 1/2
//! # Ok::<(), semicrf::Error>(())
//! ```

use std::cmp::Ordering;

use ndarray::Array2;
use semicrf_semiring::{LogSemiring, MaxSemiring};

use crate::reference::{BRUTE_FORCE_LIMIT, count_segmentations, for_each_segmentation};
use crate::{Decoded, Error, Problem, Result, Scalar, Segment, gold_score, gold_score_edges};

/// Every segmentation of sequence `b` with its score (max-scored edges) and its log-weight
/// (log-sum-exp-scored edges; the same for structured input).
fn scored<F: Scalar>(p: &Problem<'_, F>, b: usize) -> Result<Vec<(f64, f64, Vec<Segment>)>> {
    let sh = p.shape();
    let len = p.lengths()[b];
    let count = count_segmentations(len, sh.max_duration, sh.labels);
    if count > BRUTE_FORCE_LIMIT {
        return Err(Error::Unsupported {
            backend: "reference/brute-force".into(),
            what: format!("{count} segmentations of sequence {b} (limit {BRUTE_FORCE_LIMIT})"),
        });
    }
    let mut out = Vec::new();
    let mut err = None;
    for_each_segmentation(len, sh.max_duration, sh.labels, |segs| {
        let scores = match p {
            Problem::Structured(s) => gold_score(s, b, segs).map(|x| (x, x)),
            Problem::Edges(e) => gold_score_edges::<MaxSemiring, F>(e, b, segs)
                .and_then(|m| gold_score_edges::<LogSemiring, F>(e, b, segs).map(|l| (m, l))),
        };
        match scores {
            Ok((m, l)) => out.push((m, l, segs.to_vec())),
            Err(e) => err = Some(e),
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The tie order of k best: segments compared from the last one backwards, the smaller
/// label, then the smaller duration.
pub fn tie_order(a: &[Segment], b: &[Segment]) -> Ordering {
    let key = |s: &[Segment]| -> Vec<(usize, usize)> {
        s.iter().rev().map(|x| (x.label, x.duration)).collect()
    };
    key(a).cmp(&key(b))
}

/// The `k` best segmentations of sequence `b` with a finite score, by enumeration: sorted
/// by descending score, ties in [`tie_order`].
pub fn kbest<F: Scalar>(p: &Problem<'_, F>, b: usize, k: usize) -> Result<Vec<Decoded>> {
    let mut all: Vec<(f64, Vec<Segment>)> = scored(p, b)?
        .into_iter()
        .filter(|x| x.0 > f64::NEG_INFINITY)
        .map(|(m, _, s)| (m, s))
        .collect();
    all.sort_by(|x, y| y.0.total_cmp(&x.0).then_with(|| tie_order(&x.1, &y.1)));
    Ok(all
        .into_iter()
        .take(k)
        .map(|(score, segments)| Decoded { score, segments })
        .collect())
}

/// The posterior of one sequence by enumeration, and its posterior decoding.
#[derive(Clone, Debug, PartialEq)]
pub struct Posterior {
    /// `(L, C)`: `p(y_t = c)`.
    pub position: Array2<f64>,
    /// The largest expected number of correctly labelled positions of a segmentation with
    /// a finite score.
    pub best: f64,
    /// A segmentation that attains it (the first in enumeration order).
    pub argmax: Vec<Segment>,
}

/// The expected number of correctly labelled positions of `segments` under position
/// marginals `(L, C)`.
pub fn expected_correct(position: &Array2<f64>, segments: &[Segment]) -> f64 {
    segments
        .iter()
        .flat_map(|s| (s.start..s.end()).map(move |t| position[[t, s.label]]))
        .sum()
}

/// The position marginals of sequence `b` and its posterior decoding, by enumeration.
/// [`Error::Infeasible`] when no segmentation has a finite score.
pub fn posterior<F: Scalar>(p: &Problem<'_, F>, b: usize) -> Result<Posterior> {
    let all = scored(p, b)?;
    let log_z = semicrf_semiring::kernels::logsumexp(&all.iter().map(|x| x.1).collect::<Vec<_>>());
    if log_z == f64::NEG_INFINITY {
        return Err(Error::Infeasible { sequence: b });
    }
    let (len, c) = (p.lengths()[b], p.shape().labels);
    let mut position = Array2::<f64>::zeros((len, c));
    for (_, l, segs) in &all {
        let w = (l - log_z).exp();
        for s in segs {
            for t in s.start..s.end() {
                position[[t, s.label]] += w;
            }
        }
    }
    let (mut best, mut argmax) = (f64::NEG_INFINITY, Vec::new());
    for (m, _, segs) in &all {
        let x = expected_correct(&position, segs);
        if *m > f64::NEG_INFINITY && x > best {
            best = x;
            argmax = segs.clone();
        }
    }
    Ok(Posterior {
        position,
        best,
        argmax,
    })
}
