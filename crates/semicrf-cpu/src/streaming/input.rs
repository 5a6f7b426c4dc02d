//! The per-sequence inputs of the streaming recurrences, read one position at a time.

use ndarray::{ArrayView2, Axis};
use semicrf_core::{Potentials, Scalar};

/// The rows of sequence `b`'s position-wise tensors, widened to `f64` on reading.
pub(crate) struct SeqIn<'a, F> {
    scores: ArrayView2<'a, F>,
    bb: Option<ArrayView2<'a, F>>,
    eb: Option<ArrayView2<'a, F>>,
    /// The same tensors as row-major slices when they are laid out so.
    scores_s: Option<&'a [F]>,
    bb_s: Option<&'a [F]>,
    eb_s: Option<&'a [F]>,
    c: usize,
    /// `L_b`.
    pub len: usize,
}

impl<'a, F: Scalar> SeqIn<'a, F> {
    pub(crate) fn new(p: &Potentials<'a, F>, b: usize) -> Self {
        let scores = (*p.scores()).index_axis_move(Axis(0), b);
        let bb = p.begin_boundary().map(|x| (*x).index_axis_move(Axis(0), b));
        let eb = p.end_boundary().map(|x| (*x).index_axis_move(Axis(0), b));
        SeqIn {
            scores_s: scores.to_slice(),
            bb_s: bb.and_then(|v| v.to_slice()),
            eb_s: eb.and_then(|v| v.to_slice()),
            c: p.shape().labels,
            scores,
            bb,
            eb,
            len: p.lengths()[b],
        }
    }

    #[inline]
    fn read(v: &ArrayView2<'a, F>, s: Option<&'a [F]>, c: usize, t: usize, out: &mut [f64]) {
        match s {
            Some(s) => {
                for (o, x) in out.iter_mut().zip(&s[t * c..(t + 1) * c]) {
                    *o = x.as_f64();
                }
            }
            None => {
                for (o, x) in out.iter_mut().zip(v.row(t).iter()) {
                    *o = x.as_f64();
                }
            }
        }
    }

    /// `scores[t, ·]`.
    #[inline]
    pub(crate) fn scores_row(&self, t: usize, out: &mut [f64]) {
        Self::read(&self.scores, self.scores_s, self.c, t, out);
    }

    /// `begin_boundary[t, ·]` (zeros when absent).
    #[inline]
    pub(crate) fn bb_row(&self, t: usize, out: &mut [f64]) {
        match &self.bb {
            Some(v) => Self::read(v, self.bb_s, self.c, t, out),
            None => out.fill(0.0),
        }
    }

    /// `end_boundary[t, ·]` (zeros when absent).
    #[inline]
    pub(crate) fn eb_row(&self, t: usize, out: &mut [f64]) {
        match &self.eb {
            Some(v) => Self::read(v, self.eb_s, self.c, t, out),
            None => out.fill(0.0),
        }
    }
}
