//! The per-sequence inputs of the streaming recurrences, read one position at a time: straight
//! from the arrays of [`Potentials`], or from a [`PotentialSource`] through a buffer of a
//! chunk of rows, refilled when a row outside it is asked for.

use std::cell::RefCell;

use ndarray::{ArrayView2, Axis};
use semicrf_core::range::SharedBound;
use semicrf_core::{
    Error, PotentialSource, Potentials, Result, RowCheck, Scalar, SourceRows, check_magnitude,
};

/// Which way a chunked reader expects to move: a refill for row `t` takes the chunk that
/// starts at `t` (`Up`: forward sweeps) or ends at `t` (`Down`: the outside pass).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Up,
    Down,
}

/// The rows of sequence `b`'s position-wise tensors, widened to `f64` on reading.
pub(crate) struct SeqIn<'a, F> {
    src: Src<'a, F>,
    c: usize,
    /// `L_b`.
    pub len: usize,
}

enum Src<'a, F> {
    Arrays(Arrays<'a, F>),
    Chunked(RefCell<Chunked<'a, F>>),
}

struct Arrays<'a, F> {
    scores: ArrayView2<'a, F>,
    bb: Option<ArrayView2<'a, F>>,
    eb: Option<ArrayView2<'a, F>>,
    /// The same tensors as row-major slices when they are laid out so.
    scores_s: Option<&'a [F]>,
    bb_s: Option<&'a [F]>,
    eb_s: Option<&'a [F]>,
}

/// A buffer of rows `[t0, t1)` of a source's sequence.
struct Chunked<'a, F> {
    source: &'a dyn PotentialSource<F>,
    b: usize,
    rows: usize,
    dir: Dir,
    t0: usize,
    t1: usize,
    scores: Vec<F>,
    bb: Option<Vec<F>>,
    eb: Option<Vec<F>>,
    /// Checks of the rows read the first time (only on the reader of the first sweep).
    check: Option<(RowCheck, &'a SharedBound)>,
    /// The first failure (the source's, or a bad value); later reads give zeros.
    error: Option<Error>,
}

impl<'a, F: Scalar> SeqIn<'a, F> {
    pub(crate) fn new(p: &Potentials<'a, F>, b: usize) -> Self {
        let scores = (*p.scores()).index_axis_move(Axis(0), b);
        let bb = p.begin_boundary().map(|x| (*x).index_axis_move(Axis(0), b));
        let eb = p.end_boundary().map(|x| (*x).index_axis_move(Axis(0), b));
        SeqIn {
            src: Src::Arrays(Arrays {
                scores_s: scores.to_slice(),
                bb_s: bb.and_then(|v| v.to_slice()),
                eb_s: eb.and_then(|v| v.to_slice()),
                scores,
                bb,
                eb,
            }),
            c: p.shape().labels,
            len: p.lengths()[b],
        }
    }

    /// A reader of sequence `b` of `source` that asks for `rows` rows at a time (at least
    /// 1), moving `dir`; with `check`, the rows it reads the first time are checked
    /// ([`RowCheck`]) against the shared parameters' bound.
    pub(crate) fn chunked(
        source: &'a dyn PotentialSource<F>,
        b: usize,
        rows: usize,
        dir: Dir,
        check: Option<&'a SharedBound>,
    ) -> Self {
        let c = source.labels();
        let len = source.lengths()[b];
        let rows = rows.clamp(1, len.max(1));
        let buf = |on: bool| on.then(|| vec![F::zero(); rows * c]);
        SeqIn {
            src: Src::Chunked(RefCell::new(Chunked {
                source,
                b,
                rows,
                dir,
                t0: 0,
                t1: 0,
                scores: vec![F::zero(); rows * c],
                bb: buf(source.has_begin_boundary()),
                eb: buf(source.has_end_boundary()),
                check: check.map(|s| (RowCheck::new(b, c), s)),
                error: None,
            })),
            c,
            len,
        }
    }

    /// The first failure of a chunked reader (the source's error or a value NaN or `+inf`);
    /// then, on a reader that checks, whether the sequence's magnitude bound allows the
    /// results (`probabilities`: gradients, marginals and entropies too).
    pub(crate) fn verify(&self, probabilities: bool) -> Result<()> {
        let Src::Chunked(ch) = &self.src else {
            return Ok(());
        };
        let ch = ch.borrow();
        if let Some(e) = &ch.error {
            return Err(e.clone());
        }
        match &ch.check {
            Some((rc, shared)) => check_magnitude(
                &rc.magnitude(shared, self.len),
                ch.b,
                self.len,
                probabilities,
            ),
            None => Ok(()),
        }
    }

    #[inline]
    fn read(v: &ArrayView2<'a, F>, s: Option<&'a [F]>, c: usize, t: usize, out: &mut [f64]) {
        match s {
            Some(s) => widen(&s[t * c..(t + 1) * c], out),
            None => {
                for (o, x) in out.iter_mut().zip(v.row(t).iter()) {
                    *o = x.as_f64();
                }
            }
        }
    }

    /// Row `t` of the tensor `which` (0: scores, 1: begin, 2: end boundary) of a chunked
    /// reader, refilling the buffer when `t` is outside it.
    #[cold]
    #[inline(never)]
    fn refill(ch: &mut Chunked<'a, F>, t: usize, c: usize, len: usize) {
        let n = ch.rows;
        let t0 = match ch.dir {
            Dir::Up => t.min(len.saturating_sub(n)),
            Dir::Down => (t + 1).saturating_sub(n),
        };
        let t1 = (t0 + n).min(len);
        let m = (t1 - t0) * c;
        let rows = SourceRows::new(
            &mut ch.scores[..m],
            ch.bb.as_deref_mut().map(|b| &mut b[..m]),
            ch.eb.as_deref_mut().map(|b| &mut b[..m]),
        );
        let mut r = if ch.error.is_some() {
            Ok(())
        } else {
            ch.source.fill(ch.b, t0, rows)
        };
        if r.is_ok()
            && let Some((rc, _)) = ch.check.as_mut()
        {
            let rows = SourceRows::new(
                &mut ch.scores[..m],
                ch.bb.as_deref_mut().map(|b| &mut b[..m]),
                ch.eb.as_deref_mut().map(|b| &mut b[..m]),
            );
            r = rc.rows(t0, &rows);
        }
        if let Err(e) = r {
            ch.error.get_or_insert(e);
        }
        if ch.error.is_some() {
            // The results of this sequence are an error; the sweep runs on over zeros.
            ch.scores.fill(F::zero());
            for b in [ch.bb.as_mut(), ch.eb.as_mut()].into_iter().flatten() {
                b.fill(F::zero());
            }
        }
        ch.t0 = t0;
        ch.t1 = t1;
    }

    #[inline]
    fn chunk_row(&self, ch: &RefCell<Chunked<'a, F>>, which: usize, t: usize, out: &mut [f64]) {
        let mut ch = ch.borrow_mut();
        if t < ch.t0 || t >= ch.t1 {
            Self::refill(&mut ch, t, self.c, self.len);
        }
        let r = (t - ch.t0) * self.c..(t - ch.t0 + 1) * self.c;
        match which {
            0 => widen(&ch.scores[r], out),
            1 => match &ch.bb {
                Some(v) => widen(&v[r], out),
                None => out.fill(0.0),
            },
            _ => match &ch.eb {
                Some(v) => widen(&v[r], out),
                None => out.fill(0.0),
            },
        }
    }

    /// `scores[t, ·]`.
    #[inline]
    pub(crate) fn scores_row(&self, t: usize, out: &mut [f64]) {
        match &self.src {
            Src::Arrays(a) => Self::read(&a.scores, a.scores_s, self.c, t, out),
            Src::Chunked(ch) => self.chunk_row(ch, 0, t, out),
        }
    }

    /// `begin_boundary[t, ·]` (zeros when absent).
    #[inline]
    pub(crate) fn bb_row(&self, t: usize, out: &mut [f64]) {
        match &self.src {
            Src::Arrays(a) => match &a.bb {
                Some(v) => Self::read(v, a.bb_s, self.c, t, out),
                None => out.fill(0.0),
            },
            Src::Chunked(ch) => self.chunk_row(ch, 1, t, out),
        }
    }

    /// `end_boundary[t, ·]` (zeros when absent).
    #[inline]
    pub(crate) fn eb_row(&self, t: usize, out: &mut [f64]) {
        match &self.src {
            Src::Arrays(a) => match &a.eb {
                Some(v) => Self::read(v, a.eb_s, self.c, t, out),
                None => out.fill(0.0),
            },
            Src::Chunked(ch) => self.chunk_row(ch, 2, t, out),
        }
    }
}

#[inline]
fn widen<F: Scalar>(src: &[F], out: &mut [f64]) {
    for (o, x) in out.iter_mut().zip(src) {
        *o = x.as_f64();
    }
}
