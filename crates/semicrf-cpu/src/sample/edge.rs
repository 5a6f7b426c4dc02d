//! The forward values of the edge program (exact and scan) as backward sampling reads them.

use semicrf_core::{ForwardBlocks, LogSemiring, Result, Scalar, Semiring};

use crate::edge::dp::Step;
use crate::edge::lanes::Lanes;

const NEG: f64 = f64::NEG_INFINITY;

/// One sequence's edge-form forward values `α`, block by block: the forward sweep saves its
/// ring of the last `K` rows at every block start `mΔ` and keeps the rows of the last block;
/// [`ForwardBlocks::load`] restores a block's ring and recomputes the block's rows, bitwise
/// those of the sweep. With `Δ >= L` (the exact engine) there is one block and nothing is
/// recomputed. Memory: `(⌈L/Δ⌉ - 1)·K·C` checkpoint words and `(Δ + K)·C` words of rows.
pub(crate) struct EdgeBlocks<'l, L: Lanes> {
    lanes: &'l L,
    len: usize,
    k: usize,
    c: usize,
    delta: usize,
    /// The ring at `t = mΔ`, for `m = 1..n`.
    checkpoints: Vec<f64>,
    /// `α_p` of the loaded block's positions `base + 1 - K ..= end - 1`, position `p` at row
    /// `p + K - 1 - base`.
    rows: Vec<f64>,
    loaded: usize,
    last: Vec<f64>,
    step: Step<LogSemiring, L::Elem>,
    lane: Vec<L::Elem>,
    terms: Vec<f64>,
}

impl<'l, L: Lanes> EdgeBlocks<'l, L> {
    /// Runs the forward sweep of a sequence of `len` positions with blocks of `delta` segment
    /// ends (clamped to `1..=len`).
    pub(crate) fn new(lanes: &'l L, len: usize, delta: usize) -> Self {
        let (k, c) = (lanes.k(), lanes.c());
        let delta = delta.clamp(1, len.max(1));
        let n = len.div_ceil(delta).max(1);
        let last_base = (n - 1) * delta;
        let mut b = EdgeBlocks {
            lanes,
            len,
            k,
            c,
            delta,
            checkpoints: vec![NEG; (n - 1) * k * c],
            rows: vec![NEG; (delta + k) * c],
            loaded: n - 1,
            last: vec![NEG; c],
            step: Step::new(k, c),
            lane: vec![L::Elem::default(); c],
            terms: vec![0.0; c],
        };
        let mut ring = vec![NEG; k * c];
        ring[..c].fill(0.0);
        let row_of = |p: usize| p + k - 1 - last_base;
        if k > last_base {
            b.rows[row_of(0) * c..][..c].fill(0.0);
        }
        let mut row = vec![NEG; c];
        for t in 1..=len {
            b.step.alpha(t, lanes, &ring, |p| p % k, &mut row);
            ring[(t % k) * c..][..c].copy_from_slice(&row);
            if t % delta == 0 && t / delta < n {
                b.checkpoints[(t / delta - 1) * k * c..][..k * c].copy_from_slice(&ring);
            }
            if t < len && t + k > last_base {
                b.rows[row_of(t) * c..][..c].copy_from_slice(&row);
            }
        }
        b.last.copy_from_slice(&ring[(len % k) * c..][..c]);
        b
    }

    /// The row of position `p` in the loaded block.
    #[inline]
    fn row(&self, p: usize) -> usize {
        p + self.k - 1 - self.loaded * self.delta
    }
}

impl<L: Lanes> ForwardBlocks for EdgeBlocks<'_, L> {
    fn len(&self) -> usize {
        self.len
    }

    fn interval(&self) -> usize {
        self.delta
    }

    fn load(&mut self, m: usize) -> Result<()> {
        if self.loaded == m {
            return Ok(());
        }
        let (k, c, delta) = (self.k, self.c, self.delta);
        let base = m * delta;
        let end = (base + delta).min(self.len);
        let row = move |p: usize| p + k - 1 - base;
        if m == 0 {
            self.rows[row(0) * c..][..c].fill(0.0);
        } else {
            let cp = &self.checkpoints[(m - 1) * k * c..][..k * c];
            for p in (base + 1).saturating_sub(k)..=base {
                self.rows[row(p) * c..][..c].copy_from_slice(&cp[(p % k) * c..][..c]);
            }
        }
        for t in base + 1..end {
            let (src, rest) = self.rows.split_at_mut(row(t) * c);
            self.step.alpha(t, self.lanes, src, row, &mut rest[..c]);
        }
        self.loaded = m;
        Ok(())
    }

    fn last(&mut self, out: &mut Vec<f64>) {
        out.clear();
        out.extend_from_slice(&self.last);
    }

    /// `⊕_i α_{t-d}(i) ⊗ E[t-d, d-1, j, i]` for each `d` (the first segment's sources, with
    /// `α_0 = one`, merged as in the forward).
    fn durations(&mut self, t: usize, j: usize, out: &mut Vec<f64>) {
        let c = self.c;
        out.clear();
        for d in 1..=self.k.min(t) {
            let s = t - d;
            let r = self.row(s) * c;
            let lane = self.lanes.lane(s, d, j, &mut self.lane);
            for ((x, &a), &w) in self.terms.iter_mut().zip(&self.rows[r..r + c]).zip(lane) {
                *x = a + w.as_f64();
            }
            out.push(LogSemiring::sum(&mut self.terms));
        }
    }

    /// `α_s(i) ⊗ E[s, d-1, j, i]`.
    fn sources(&mut self, s: usize, d: usize, j: usize, out: &mut Vec<f64>) {
        let c = self.c;
        let r = self.row(s) * c;
        let lane = self.lanes.lane(s, d, j, &mut self.lane);
        out.clear();
        out.extend(
            self.rows[r..r + c]
                .iter()
                .zip(lane)
                .map(|(&a, &w)| a + w.as_f64()),
        );
    }
}
