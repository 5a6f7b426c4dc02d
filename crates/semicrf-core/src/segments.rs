//! Segmentations: validation, gold scores, and conversion to and from per-position labels.

use semicrf_semiring::Semiring;

use crate::{
    Decoded, EdgePotentials, Error, Gradients, Potentials, Problem, Result, Scalar, Segment,
};

/// Checks that `segments` tile `[0, len)` in order with durations `1..=max_duration` and
/// labels `< labels`.
pub fn validate_segmentation(
    sequence: usize,
    segments: &[Segment],
    len: usize,
    max_duration: usize,
    labels: usize,
) -> Result<()> {
    let bad = |reason: String| Err(Error::Segmentation { sequence, reason });
    let mut pos = 0;
    for (n, s) in segments.iter().enumerate() {
        if s.start != pos {
            return bad(format!(
                "segment {n} starts at {}, expected {pos} (segments must tile the sequence in order)",
                s.start
            ));
        }
        if s.duration == 0 || s.duration > max_duration {
            return bad(format!(
                "segment {n} has duration {}, expected 1..={max_duration}",
                s.duration
            ));
        }
        if s.label >= labels {
            return bad(format!(
                "segment {n} has label {}, expected 0..{labels}",
                s.label
            ));
        }
        pos += s.duration;
    }
    if pos != len {
        return bad(format!("segments cover 0..{pos}, expected 0..{len}"));
    }
    Ok(())
}

/// The score of a segmentation of sequence `b` (model §2), in `f64`.
///
/// ```
/// # mod semicrf { pub use ::ndarray; pub use semicrf_core::*; } // the facade's paths
/// use semicrf::ndarray::{array, Array3};
/// use semicrf::{gold_score, Potentials, Segment};
///
/// let scores = Array3::from_shape_vec((1, 3, 2), vec![1.0, 0.0, 2.0, 0.0, 0.0, 5.0]).unwrap();
/// let transition = array![[0.0, -1.0], [0.0, 0.0]];
/// let lengths = [3];
/// let p = Potentials::builder(scores.view(), &lengths, 2).transition(transition.view()).build()?;
/// let segs = [Segment::new(0, 2, 0), Segment::new(2, 1, 1)];
/// assert_eq!(gold_score(&p, 0, &segs)?, 1.0 + 2.0 - 1.0 + 5.0);
/// # Ok::<(), semicrf::Error>(())
/// ```
pub fn gold_score<F: Scalar>(p: &Potentials<'_, F>, b: usize, segments: &[Segment]) -> Result<f64> {
    let sh = p.shape();
    if b >= sh.batch {
        return Err(Error::Segmentation {
            sequence: b,
            reason: format!("no such sequence (B = {})", sh.batch),
        });
    }
    let len = p.lengths()[b];
    validate_segmentation(b, segments, len, sh.max_duration, sh.labels)?;
    let mut total = p.start_at(segments[0].label);
    for (n, s) in segments.iter().enumerate() {
        total += p.segment_score(b, s.start, s.duration, s.label);
        if n > 0 {
            total += p.transition_at(s.duration, segments[n - 1].label, s.label);
        }
    }
    Ok(total + p.end_at(segments[segments.len() - 1].label))
}

/// The score of a segmentation of sequence `b` in edge form, `⊕`-summed in semiring `S` over
/// the virtual start's sources of the first segment (log-sum-exp for NLL with
/// [`LogSemiring`](crate::LogSemiring), max for comparing with Viterbi with
/// [`MaxSemiring`](crate::MaxSemiring)); returns the log-weight ([`Semiring::weight`]).
pub fn gold_score_edges<S: Semiring, F: Scalar>(
    p: &EdgePotentials<'_, F>,
    b: usize,
    segments: &[Segment],
) -> Result<f64> {
    let sh = p.shape();
    if b >= sh.batch {
        return Err(Error::Segmentation {
            sequence: b,
            reason: format!("no such sequence (B = {})", sh.batch),
        });
    }
    validate_segmentation(b, segments, p.lengths()[b], sh.max_duration, sh.labels)?;
    let e = p.edges();
    let first = segments[0];
    let mut firsts: Vec<S::Value> = (0..sh.labels)
        .map(|i| S::lift(e[[b, 0, first.duration - 1, first.label, i]].as_f64()))
        .collect();
    let mut total = S::weight(S::sum(&mut firsts));
    for w in segments.windows(2) {
        total += e[[b, w[1].start, w[1].duration - 1, w[1].label, w[0].label]].as_f64();
    }
    Ok(total)
}

/// Takes `weight` times the gradient of sequence `b`'s gold score ([`gold_score`], or
/// [`gold_score_edges`] in the log semiring) off every gradient `grad` holds: applied to the
/// expected counts (the gradients of `log Z`), it gives the gradients of the NLL
/// `log Z − score(gold)`. A structured problem's gold score is linear in its inputs, so its
/// gradient is the count of each input the segments use; in edge form the first segment's
/// log-sum-exp over the virtual start's sources contributes their softmax. The segments must
/// be valid for sequence `b` (as [`gold_score`] checks) and, in edge form, have a finite score.
pub fn gold_score_pull_back<F: Scalar>(
    grad: &mut Gradients,
    p: &Problem<'_, F>,
    b: usize,
    segments: &[Segment],
    weight: f64,
) {
    let Some(&first) = segments.first() else {
        return;
    };
    if let Problem::Edges(e) = p {
        let Some(g) = grad.edges.as_mut() else {
            return;
        };
        let e = e.edges();
        let row: Vec<f64> = (0..e.shape()[4])
            .map(|i| e[[b, 0, first.duration - 1, first.label, i]].as_f64())
            .collect();
        let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = row.iter().map(|&x| (x - top).exp()).collect();
        let total: f64 = w.iter().sum();
        for (i, wi) in w.iter().enumerate() {
            g[[b, 0, first.duration - 1, first.label, i]] -= weight * wi / total;
        }
        for pair in segments.windows(2) {
            let (prev, s) = (pair[0], pair[1]);
            g[[b, s.start, s.duration - 1, s.label, prev.label]] -= weight;
        }
        return;
    }
    if let Some(g) = grad.start.as_mut() {
        g[first.label] -= weight;
    }
    if let (Some(g), Some(last)) = (grad.end.as_mut(), segments.last()) {
        g[last.label] -= weight;
    }
    for (n, s) in segments.iter().enumerate() {
        let (c, d) = (s.label, s.duration);
        if let Some(g) = grad.scores.as_mut() {
            for t in s.start..s.end() {
                g[[b, t, c]] -= weight;
            }
        }
        if let Some(g) = grad.duration.as_mut() {
            g[[d - 1, c]] -= weight;
        }
        if let Some(g) = grad.begin_boundary.as_mut() {
            g[[b, s.start, c]] -= weight;
        }
        if let Some(g) = grad.end_boundary.as_mut() {
            g[[b, s.end() - 1, c]] -= weight;
        }
        if n > 0
            && let Some(g) = grad.transition.as_mut()
        {
            let prev = segments[n - 1].label;
            if g.ndim() == 3 {
                g[[d - 1, prev, c]] -= weight;
            } else {
                g[[prev, c]] -= weight;
            }
        }
    }
}

/// The segments of a Viterbi decoding, traced back from the end of a sequence of `len`
/// positions whose best final label is `last`: `best(t, j)` gives the duration `d` of the
/// best segment of label `j` that ends at `t` (exclusive) and the label before it (ignored
/// when the segment starts at 0). Every engine's Viterbi ends here.
///
/// The walk runs twice, once to count the segments and once to fill a vector of exactly that
/// size, so `best` must be a pure lookup.
///
/// ```
/// # mod semicrf { pub use ::ndarray; pub use semicrf_core::*; } // the facade's paths
/// use semicrf::{Segment, trace_back};
///
/// // Best segments: label 1 over [0, 2), then label 0 over [2, 3).
/// let best = |t: usize, j: usize| match (t, j) {
///     (3, 0) => (1, 1),
///     (2, 1) => (2, 0),
///     _ => unreachable!(),
/// };
/// assert_eq!(trace_back(3, 0, best), [Segment::new(0, 2, 1), Segment::new(2, 1, 0)]);
/// ```
///
/// # Panics
///
/// If `best` returns a duration of 0 or longer than the positions left: backpointers come
/// from the engines' own tables, so that is a bug in an engine, never bad input.
pub fn trace_back(
    len: usize,
    last: usize,
    best: impl Fn(usize, usize) -> (usize, usize),
) -> Vec<Segment> {
    let walk = |visit: &mut dyn FnMut(Segment)| {
        let (mut t, mut j) = (len, last);
        while t > 0 {
            let (d, before) = best(t, j);
            assert!(
                (1..=t).contains(&d),
                "backpointer of duration {d} at position {t}, label {j}"
            );
            visit(Segment::new(t - d, d, j));
            t -= d;
            j = before;
        }
    };
    let mut count = 0;
    walk(&mut |_| count += 1);
    let mut segments = vec![Segment::new(0, 0, 0); count];
    let mut slot = count;
    walk(&mut |s| {
        slot -= 1;
        segments[slot] = s;
    });
    segments
}

/// The end of every engine's Viterbi: the final label is the smallest index `j < labels`
/// attaining the largest `finals(j)` (the final `α_L(j)` with the end score), no finite one
/// gives the empty decoding of score `-inf`, and otherwise the segments are traced back from
/// that label ([`trace_back`], with the engine's backpointer lookup `best`).
///
/// ```
/// use semicrf_core::{decode_best, Segment};
///
/// // Labels 0 and 2 tie: the smaller wins; its best segment covers the whole sequence.
/// let finals = [1.5, -2.0, 1.5];
/// let d = decode_best(4, 3, |j| finals[j], |_, _| (4, 0));
/// assert_eq!((d.score, d.segments), (1.5, vec![Segment::new(0, 4, 0)]));
/// let none = decode_best(4, 3, |_| f64::NEG_INFINITY, |_, _| unreachable!());
/// assert!(none.score == f64::NEG_INFINITY && none.segments.is_empty());
/// ```
pub fn decode_best(
    len: usize,
    labels: usize,
    finals: impl Fn(usize) -> f64,
    best: impl Fn(usize, usize) -> (usize, usize),
) -> Decoded {
    let (mut score, mut last) = (f64::NEG_INFINITY, 0);
    for j in 0..labels {
        let x = finals(j);
        if x > score {
            score = x;
            last = j;
        }
    }
    if score == f64::NEG_INFINITY {
        return Decoded {
            score,
            segments: Vec::new(),
        };
    }
    Decoded {
        score,
        segments: trace_back(len, last, best),
    }
}

/// Segments from per-position labels: each maximal run of equal labels becomes one segment.
///
/// A run longer than `max_duration` is an [`Error::RunTooLong`] naming it, unless
/// `split_long_runs` is set: then it becomes a chain of segments of `max_duration` positions
/// and a shorter remainder (those consecutive segments share a label and pay
/// `transition[c, c]` between them).
///
/// ```
/// # mod semicrf { pub use ::ndarray; pub use semicrf_core::*; } // the facade's paths
/// use semicrf::{labels_from_segments, segments_from_labels, Segment};
/// let labels = [2, 2, 0, 1, 1, 1];
/// let segs = segments_from_labels(&labels, 3, false)?;
/// assert_eq!(segs, [Segment::new(0, 2, 2), Segment::new(2, 1, 0), Segment::new(3, 3, 1)]);
/// assert_eq!(labels_from_segments(&segs), labels);
/// assert!(segments_from_labels(&labels, 2, false).is_err());
/// assert_eq!(segments_from_labels(&labels, 2, true)?.len(), 4);
/// # Ok::<(), semicrf::Error>(())
/// ```
pub fn segments_from_labels(
    labels: &[usize],
    max_duration: usize,
    split_long_runs: bool,
) -> Result<Vec<Segment>> {
    if max_duration == 0 {
        return Err(Error::ZeroMaxDuration);
    }
    let mut out = Vec::new();
    let mut start = 0;
    while start < labels.len() {
        let label = labels[start];
        let mut end = start + 1;
        while end < labels.len() && labels[end] == label {
            end += 1;
        }
        if end - start > max_duration && !split_long_runs {
            return Err(Error::RunTooLong {
                label,
                start,
                end,
                max_duration,
            });
        }
        let mut s = start;
        while s < end {
            let d = (end - s).min(max_duration);
            out.push(Segment::new(s, d, label));
            s += d;
        }
        start = end;
    }
    Ok(out)
}

/// Per-position labels of a segmentation (adjacent segments with one label merge into a run,
/// so this is the inverse of [`segments_from_labels`] only up to such splits).
pub fn labels_from_segments(segments: &[Segment]) -> Vec<usize> {
    let mut out = Vec::with_capacity(segments.last().map_or(0, Segment::end));
    for s in segments {
        out.extend(std::iter::repeat_n(s.label, s.duration));
    }
    out
}
