//! Segmentations: validation, gold scores, and conversion to and from per-position labels.

use semicrf_semiring::Semiring;

use crate::{EdgePotentials, Error, Potentials, Result, Scalar, Segment};

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

/// The score of a segmentation of sequence `b` (SPEC §1.1), in `f64`.
///
/// ```
/// use ndarray::{array, Array3};
/// use semicrf_core::{gold_score, Potentials, Segment};
///
/// let scores = Array3::from_shape_vec((1, 3, 2), vec![1.0, 0.0, 2.0, 0.0, 0.0, 5.0]).unwrap();
/// let transition = array![[0.0, -1.0], [0.0, 0.0]];
/// let lengths = [3];
/// let p = Potentials::builder(scores.view(), &lengths, 2).transition(transition.view()).build()?;
/// let segs = [Segment::new(0, 2, 0), Segment::new(2, 1, 1)];
/// assert_eq!(gold_score(&p, 0, &segs)?, 1.0 + 2.0 - 1.0 + 5.0);
/// # Ok::<(), semicrf_core::Error>(())
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

/// The score of a segmentation of sequence `b` in edge form. The first segment follows the
/// virtual start, so its score is `⊕_i edges[b, 0, d-1, j, i]` in semiring `S` (log-sum-exp
/// for NLL, max for comparing with Viterbi).
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
    let firsts: Vec<f64> = (0..sh.labels)
        .map(|i| e[[b, 0, first.duration - 1, first.label, i]].as_f64())
        .collect();
    let mut total = S::sum(&firsts);
    for w in segments.windows(2) {
        total += e[[b, w[1].start, w[1].duration - 1, w[1].label, w[0].label]].as_f64();
    }
    Ok(total)
}

/// Segments from per-position labels: each maximal run of equal labels becomes one segment.
///
/// A run longer than `max_duration` is an [`Error::RunTooLong`] naming it, unless
/// `split_long_runs` is set: then it becomes a chain of segments of `max_duration` positions
/// and a shorter remainder (those consecutive segments share a label and pay
/// `transition[c, c]` between them).
///
/// ```
/// use semicrf_core::{segments_from_labels, labels_from_segments, Segment};
/// let labels = [2, 2, 0, 1, 1, 1];
/// let segs = segments_from_labels(&labels, 3, false)?;
/// assert_eq!(segs, [Segment::new(0, 2, 2), Segment::new(2, 1, 0), Segment::new(3, 3, 1)]);
/// assert_eq!(labels_from_segments(&segs), labels);
/// assert!(segments_from_labels(&labels, 2, false).is_err());
/// assert_eq!(segments_from_labels(&labels, 2, true)?.len(), 4);
/// # Ok::<(), semicrf_core::Error>(())
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
