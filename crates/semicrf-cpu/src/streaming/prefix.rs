//! Prefix sums of the scores, re-anchored so that they stay small, and the last `-inf`
//! score of every label.
//!
//! A segment's content is a difference of prefix sums `P[s+d, j] - P[s, j]`. Differences of
//! global prefix sums would carry an absolute error of about `ulp(T · max |score|)` (large
//! scores compensated by durations make `log Z` small while `P` grows with `T`). So after
//! every `K` positions each label whose `|P|` exceeds [`ANCHOR_MIN`] restarts its prefix sum
//! from 0 and the ring entries that hold its old origin take the difference on board: every
//! stored value then carries `|P| < ANCHOR_MIN + 2K · max |score|`, an error of about
//! `ulp(K · max |score|)`, next to `ulp(|α|)` from the recurrence itself. The backward pass
//! moves its ring back to the earlier origin at the same positions by the same amounts.
//!
//! `-inf` scores are legal and forbid a label at a position. The prefix sums keep only the
//! finite part; instead of differencing infinities (`-inf - -inf` is NaN) each label tracks
//! its last `-inf` position, and the window of admissible durations ends there.

use semicrf_core::Scalar;

use super::input::SeqIn;

/// A label's prefix sum is re-anchored only when its magnitude exceeds this: below it the
/// prefix sum adds absolute errors of at most `ulp(1024) ≈ 2.3e-13`, and skipping the shift
/// keeps the common case (moderate scores) free of its cost.
pub(crate) const ANCHOR_MIN: f64 = 1024.0;

/// The first position `>= p` after which the prefix sums are re-anchored (the positions `q`
/// with `(q + 1) mod K = 0`).
pub(crate) fn anchor_from(p: usize, k: usize) -> usize {
    p + (k - 1 - p % k)
}

/// `P[p, ·]` relative to each label's current origin and the first admissible start per label.
#[derive(Clone, Debug)]
pub(crate) struct Prefix {
    k: usize,
    /// `P[p, j]`, finite part (`-inf` scores count as 0; `z` tracks them).
    pub pref: Vec<f64>,
    /// The first start whose segment up to `p` contains no `-inf` score, per label.
    pub z: Vec<usize>,
    row: Vec<f64>,
    next_anchor: usize,
}

impl Prefix {
    pub(crate) fn new(k: usize, c: usize) -> Self {
        Prefix {
            k,
            pref: vec![0.0; c],
            z: vec![0; c],
            row: vec![0.0; c],
            next_anchor: k - 1,
        }
    }

    /// Doubles held (the `usize` vector counted as one word per entry).
    pub(crate) fn words(c: usize) -> usize {
        3 * c
    }

    /// Advances over `scores[p]`; after every `K` positions re-anchors the labels whose
    /// prefix sum exceeds [`ANCHOR_MIN`], calling `shift(j, d)` with the amount `d` the
    /// stored values of label `j` must take on board.
    #[inline]
    pub(crate) fn advance<F: Scalar>(
        &mut self,
        p: usize,
        seq: &SeqIn<'_, F>,
        mut shift: impl FnMut(usize, f64),
    ) {
        seq.scores_row(p, &mut self.row);
        for (j, &x) in self.row.iter().enumerate() {
            if x == f64::NEG_INFINITY {
                self.z[j] = p + 1;
            } else {
                self.pref[j] += x;
            }
        }
        if p == self.next_anchor {
            for (j, pj) in self.pref.iter_mut().enumerate() {
                let d = *pj;
                if d.abs() > ANCHOR_MIN {
                    *pj = 0.0;
                    shift(j, d);
                }
            }
            self.next_anchor += self.k;
        }
    }

    /// Restores the state saved before position `p`.
    pub(crate) fn restore(&mut self, pref: &[f64], z: &[usize], p: usize) {
        self.pref.copy_from_slice(pref);
        self.z.copy_from_slice(z);
        self.next_anchor = anchor_from(p, self.k);
    }
}
