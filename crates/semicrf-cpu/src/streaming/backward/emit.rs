//! The per-position outputs of the outside pass, finished `K` positions behind it and
//! delivered in chunks from the last row to the first.
//!
//! The position marginals are kept as differences: each segment `[s, e]`'s marginal is added
//! at its last position `e` and subtracted, as the very same number summed over the segments
//! that start at `s`, at `s - 1`; the marginal of position `t` is the suffix sum
//! `Σ_{u >= t}` of the differences. Going down, the difference of row `e` receives its last
//! term at step `s = e - K` (the flush of the static form's pending sums), so a ring of
//! `K + 2` rows holds every row still open, and row `s + K` is final after step `s`.

use semicrf_core::{GradientRows, Result};

/// Rows `[s - 1, s + K]` of the position marginals' differences, the begin and end
/// marginals and the boundary marginals, in a ring of `K + 2` rows.
pub(crate) struct Rows {
    n: usize,
    c: usize,
    diff: Vec<f64>,
    bgn: Vec<f64>,
    endm: Vec<f64>,
    bm: Vec<f64>,
}

impl Rows {
    pub(crate) fn new(k: usize, c: usize) -> Self {
        let n = k + 2;
        Rows {
            n,
            c,
            diff: vec![0.0; n * c],
            bgn: vec![0.0; n * c],
            endm: vec![0.0; n * c],
            bm: vec![0.0; n],
        }
    }

    /// `f64` words held for `K` and `C`.
    pub(crate) fn words(k: usize, c: usize) -> usize {
        (k + 2) * (3 * c + 1)
    }

    #[inline]
    fn at(&self, e: usize) -> std::ops::Range<usize> {
        let o = (e % self.n) * self.c;
        o..o + self.c
    }

    /// The position marginals' difference of row `e`.
    #[inline]
    pub(crate) fn diff(&mut self, e: usize) -> &mut [f64] {
        let r = self.at(e);
        &mut self.diff[r]
    }

    /// P(a segment of label `j` starts at `s`), unscaled, and their sum.
    #[inline]
    pub(crate) fn set_begin(&mut self, s: usize, bgn: &[f64]) {
        let r = self.at(s);
        self.bgn[r].copy_from_slice(bgn);
        self.bm[s % self.n] = bgn.iter().sum();
    }

    /// P(a segment of label `j` ends at `e`), unscaled.
    #[inline]
    pub(crate) fn set_end(&mut self, e: usize, endm: &[f64]) {
        let r = self.at(e);
        self.endm[r].copy_from_slice(endm);
    }
}

/// Turns the finished rows into gradient rows (scaled by `g`) and delivers them in chunks of
/// `rows` rows, last rows first.
pub(crate) struct Emitter<'s> {
    c: usize,
    g: f64,
    cap: usize,
    /// Filled from the end: rows `[next, cap)` hold rows `[lo, lo + cap - next)`.
    next: usize,
    lo: usize,
    scores: Vec<f64>,
    bb: Option<Vec<f64>>,
    eb: Option<Vec<f64>>,
    bm: Vec<f64>,
    /// The suffix sums of the position marginals' differences.
    run: Vec<f64>,
    sink: &'s mut (dyn FnMut(usize, GradientRows<'_>) -> Result<()> + Send),
    error: Option<semicrf_core::Error>,
}

impl<'s> Emitter<'s> {
    pub(crate) fn new(
        c: usize,
        g: f64,
        rows: usize,
        boundaries: [bool; 2],
        sink: &'s mut (dyn FnMut(usize, GradientRows<'_>) -> Result<()> + Send),
    ) -> Self {
        let cap = rows.max(1);
        let buf = |on: bool| on.then(|| vec![0.0; cap * c]);
        Emitter {
            c,
            g,
            cap,
            next: cap,
            lo: 0,
            scores: vec![0.0; cap * c],
            bb: buf(boundaries[0]),
            eb: buf(boundaries[1]),
            bm: vec![0.0; cap],
            run: vec![0.0; c],
            sink,
            error: None,
        }
    }

    /// `f64` words of an emitter of `rows` rows and `tensors` (1 to 3) position tensors.
    pub(crate) fn words(rows: usize, c: usize, tensors: usize) -> usize {
        rows.max(1) * (tensors * c + 1) + c
    }

    /// Row `e`, final in `rows`, into the chunk (delivered when full); its ring slots are
    /// cleared for reuse.
    pub(crate) fn take(&mut self, e: usize, rows: &mut Rows) {
        let (c, g) = (self.c, self.g);
        if self.next == 0 {
            self.deliver();
        }
        self.next -= 1;
        self.lo = e;
        let o = self.next * c;
        let r = rows.at(e);
        for j in 0..c {
            self.run[j] += rows.diff[r.start + j];
            self.scores[o + j] = g * self.run[j];
        }
        if let Some(bb) = self.bb.as_mut() {
            for j in 0..c {
                bb[o + j] = g * rows.bgn[r.start + j];
            }
        }
        if let Some(eb) = self.eb.as_mut() {
            for j in 0..c {
                eb[o + j] = g * rows.endm[r.start + j];
            }
        }
        self.bm[self.next] = rows.bm[e % rows.n];
        rows.diff[r.clone()].fill(0.0);
        rows.bgn[r.clone()].fill(0.0);
        rows.endm[r].fill(0.0);
        rows.bm[e % rows.n] = 0.0;
    }

    /// Delivers the rows held.
    pub(crate) fn deliver(&mut self) {
        let (c, n) = (self.c, self.next);
        if n == self.cap {
            return;
        }
        let rows = GradientRows::new(
            &self.scores[n * c..],
            self.bb.as_deref().map(|v| &v[n * c..]),
            self.eb.as_deref().map(|v| &v[n * c..]),
            &self.bm[n..],
        );
        if self.error.is_none()
            && let Err(e) = (self.sink)(self.lo, rows)
        {
            self.error = Some(e);
        }
        self.next = self.cap;
    }

    /// The first error the sink returned.
    pub(crate) fn finish(mut self) -> Result<()> {
        self.deliver();
        match self.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
