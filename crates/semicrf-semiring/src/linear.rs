//! The log semiring's streaming operators, evaluated in the linear domain.
//!
//! A log-sum-exp of `n` terms costs `n` exponentials. The streaming recurrence reduces the
//! same stored values again and again (each ring entry is read by `K` windows; each `α_t` by
//! `C` columns), so both operators here keep values in the linear domain relative to a
//! reference and reduce with dot products:
//!
//! - [`LinearRing`] keeps, next to each log value `v`, its *linear twin* `exp(v - ρ_j)` with a
//!   reference `ρ_j` per label, and prepared weights `exp(w - max_d w)`
//!   ([`LinearWeights`]): a window sum is `ρ_j + max w + ln Σ twin · weight`;
//! - [`LinearMatrix`] scales the input by its maximum, `exp(x - max x)`, and takes dot
//!   products with the prepared columns `exp(m[i, j] - max_i m[i, j])`.
//!
//! # Soundness
//!
//! Nothing is ever clamped. A value is computed in the linear domain only when that is exact
//! to rounding; otherwise it is computed exactly in the log domain (a max-shifted
//! log-sum-exp, `-inf` when the maximum is `-inf`):
//!
//! - a matrix-vector sum (factors `<= 1`) is used only when it is at least
//!   [`LinearMatrix::MIN_SUM`] `= 1e-280`: every term lost to underflow is below `3e-308`, so
//!   with at most `1e20` terms the relative error they cause is below `1e-8 · 1e-20`;
//! - a new ring entry more than `e^600` above its label's reference makes the label *stale*:
//!   before its next window is read, the label is rebuilt (reference = the window's maximum,
//!   twins recomputed), so twins stay below `e^600` and no sum of `K` of them times weights
//!   `<= 1` can overflow;
//! - a ring window sum is trusted only when it is at least `1e-30 · K`: a twin can be up to
//!   `e^600 ≈ 4e260` while its weight underflows to 0, so a lost term is below
//!   `4e260 · 3e-308 ≈ 1.1e-47`, and `K` of them stay below `1e-16` of the sum. A smaller sum
//!   first rebuilds the label (its reference may be far above the window) and, if still too
//!   small, is computed exactly.
//!
//! `exp` and `ln` are the branch-free polynomials of [`kernels`](crate::kernels) (relative
//! error about `2e-15` and `1e-16`).

use crate::kernels::{dot, exp_fast, exp_in_place, ln_in_place, lse_add, max_of};
use crate::{Lag, LogSemiring, Matrix, Ring};

const NEG: f64 = f64::NEG_INFINITY;
/// A linear ring entry more than `exp(REBASE)` above its reference makes the label stale.
const REBASE: f64 = 600.0;
/// A ring window sum is trusted when it is at least this times `K` (see the module docs).
const RING_MIN_SUM_PER_TERM: f64 = 1e-30;

/// `exp(x - m)` with the library `exp`, or 0 when `m = -inf`.
fn exp_rel(x: f64, m: f64) -> f64 {
    if m == NEG { 0.0 } else { (x - m).exp() }
}

/// Per-lag weights of a [`LinearRing`]: the raw table and its linear form
/// `exp(w[j, d-1] - max_d w[j, d-1])`, both laid out so that every window's weights are one
/// contiguous slice.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearWeights {
    k: usize,
    lag: Lag,
    raw: Vec<f64>,
    lin: Vec<f64>,
    max: Vec<f64>,
}

impl LinearWeights {
    #[inline]
    fn range(&self, j: usize, n: usize) -> core::ops::Range<usize> {
        let k = self.k;
        match self.lag {
            Lag::FromEnd => j * k + k - n..j * k + k,
            Lag::FromStart => j * k..j * k + n,
        }
    }
    /// The raw weights of a window of `n` positions of label `j`, in window order.
    #[inline]
    pub fn raw(&self, j: usize, n: usize) -> &[f64] {
        &self.raw[self.range(j, n)]
    }
    /// The linear weights `exp(w - max)` of a window of `n` positions of label `j`.
    #[inline]
    pub fn linear(&self, j: usize, n: usize) -> &[f64] {
        &self.lin[self.range(j, n)]
    }
    /// `max_d w[j, d-1]` (`-inf` when every weight of label `j` is `-inf`).
    #[inline]
    pub fn max(&self, j: usize) -> f64 {
        self.max[j]
    }
}

/// The log semiring's [`Ring`]: log values with linear twins, see the [module docs](self).
#[derive(Clone, Debug)]
pub struct LinearRing {
    k: usize,
    c: usize,
    /// `log[j*2K + slot]`, doubled: position `q` at `q mod K` and `q mod K + K`.
    log: Vec<f64>,
    /// `exp(log - rho[j])`, laid out as `log`.
    lin: Vec<f64>,
    /// Per-label reference (`-inf` before any finite entry).
    rho: Vec<f64>,
    /// The label's twins or reference are out of date: rebuild before reading a window.
    stale: Vec<bool>,
    min_sum: f64,
    /// The last window start whose slot was computed, and that slot (the windows of one
    /// call usually share their start: one division per call, not per label).
    slot_of: (usize, usize),
    ex: Vec<f64>,
    sums: Vec<f64>,
    exact: Vec<bool>,
    buf: Vec<f64>,
}

impl LinearRing {
    #[inline]
    fn window_range(&self, j: usize, first: usize, n: usize) -> core::ops::Range<usize> {
        let off = j * 2 * self.k + first % self.k;
        off..off + n
    }

    /// [`LinearRing::window_range`] through the one-entry cache of `first mod K`.
    #[inline]
    fn cached_range(&mut self, j: usize, first: usize, n: usize) -> core::ops::Range<usize> {
        if self.slot_of.0 != first {
            self.slot_of = (first, first % self.k);
        }
        let off = j * 2 * self.k + self.slot_of.1;
        off..off + n
    }

    /// The log values of label `j` at positions `first..first + n`.
    #[inline]
    pub fn log_window(&self, j: usize, first: usize, n: usize) -> &[f64] {
        &self.log[self.window_range(j, first, n)]
    }

    /// The linear twins of label `j` at positions `first..first + n`, relative to
    /// [`LinearRing::reference`]; valid after [`LinearRing::linear_sums`] read that window.
    #[inline]
    pub fn linear_window(&self, j: usize, first: usize, n: usize) -> &[f64] {
        &self.lin[self.window_range(j, first, n)]
    }

    /// The reference `ρ_j` of label `j`'s twins.
    #[inline]
    pub fn reference(&self, j: usize) -> f64 {
        self.rho[j]
    }

    /// Recomputes the reference of label `j` as the maximum of the window and its twins.
    fn rebuild(&mut self, j: usize, first: usize, n: usize) {
        let r = self.window_range(j, first, n);
        let m = max_of(&self.log[r.clone()]);
        self.rho[j] = m;
        let k = self.k;
        let base = j * 2 * k;
        for q in first..first + n {
            let slot = base + q % k;
            let x = if m == NEG {
                0.0
            } else {
                exp_fast(self.log[slot] - m)
            };
            self.lin[slot] = x;
            self.lin[slot + k] = x;
        }
        self.stale[j] = false;
    }

    /// The linear part of [`Ring::sums`]: for every label `j` with a non-empty window and a
    /// finite weight, `sums[j] = Σ twin · linear weight` over the window (rebuilding the label
    /// first when it is stale or the sum too small) and `exact[j] = false`; where the sum is
    /// still too small to be trusted, `sums[j] = 1` and `exact[j] = true` (compute that label
    /// in the log domain). Labels with an empty window or no finite weight get `sums[j] = 1`,
    /// `exact[j] = false`.
    pub fn linear_sums(
        &mut self,
        first: &[usize],
        len: &[usize],
        w: &LinearWeights,
        sums: &mut [f64],
        exact: &mut [bool],
    ) {
        let c = self.c;
        let (first, len, sums, exact) = (&first[..c], &len[..c], &mut sums[..c], &mut exact[..c]);
        let wmax = &w.max[..c];
        for j in 0..c {
            let n = len[j];
            sums[j] = 1.0;
            exact[j] = false;
            if n == 0 || wmax[j] == NEG {
                continue;
            }
            let stale = self.stale[j];
            if stale {
                self.rebuild(j, first[j], n);
            }
            let r = self.cached_range(j, first[j], n);
            let dl = w.linear(j, n);
            let mut sum = dot(&self.lin[r.clone()], dl);
            if sum < self.min_sum && !stale {
                // The reference may be far above this window: rebuild it from the window.
                self.rebuild(j, first[j], n);
                sum = dot(&self.lin[r], dl);
            }
            if sum >= self.min_sum {
                sums[j] = sum;
            } else {
                exact[j] = true;
            }
        }
    }
}

impl Ring<LogSemiring> for LinearRing {
    const ENTRY_WORDS: usize = 2;
    type Weights = LinearWeights;

    fn weights(table: &[f64], k: usize, c: usize, lag: Lag) -> LinearWeights {
        let raw = crate::plain::PlainWeights::oriented(table, k, c, lag);
        let max: Vec<f64> = (0..c).map(|j| max_of(&raw[j * k..(j + 1) * k])).collect();
        let lin = raw
            .iter()
            .enumerate()
            .map(|(n, &x)| exp_rel(x, max[n / k]))
            .collect();
        LinearWeights {
            k,
            lag,
            raw,
            lin,
            max,
        }
    }
    fn weight_words(k: usize, c: usize) -> usize {
        2 * k * c + c
    }
    fn new(k: usize, c: usize) -> Self {
        LinearRing {
            k,
            c,
            log: vec![NEG; 2 * k * c],
            lin: vec![0.0; 2 * k * c],
            rho: vec![NEG; c],
            stale: vec![false; c],
            min_sum: RING_MIN_SUM_PER_TERM * k as f64,
            slot_of: (0, 0),
            ex: vec![0.0; c],
            sums: vec![0.0; c],
            exact: vec![false; c],
            buf: vec![0.0; k],
        }
    }
    fn words(k: usize, c: usize) -> usize {
        4 * k * c + 6 * c + k
    }
    #[inline]
    fn push(&mut self, pos: usize, values: &[f64]) {
        let (k, slot) = (self.k, pos % self.k);
        for j in 0..self.c {
            let v = values[j];
            let base = j * 2 * k;
            self.log[base + slot] = v;
            self.log[base + slot + k] = v;
            let x = v - self.rho[j];
            let rebase = v != NEG && (self.rho[j] == NEG || x > REBASE);
            if rebase {
                self.stale[j] = true;
            }
            self.ex[j] = if v == NEG || rebase { NEG } else { x };
        }
        exp_in_place(&mut self.ex);
        for j in 0..self.c {
            let base = j * 2 * k;
            self.lin[base + slot] = self.ex[j];
            self.lin[base + slot + k] = self.ex[j];
        }
    }
    fn sums(&mut self, first: &[usize], len: &[usize], w: &LinearWeights, out: &mut [f64]) {
        let mut sums = core::mem::take(&mut self.sums);
        let mut exact = core::mem::take(&mut self.exact);
        self.linear_sums(first, len, w, &mut sums, &mut exact);
        ln_in_place(&mut sums);
        let c = self.c;
        let (first, len, out, wmax) = (&first[..c], &len[..c], &mut out[..c], &w.max[..c]);
        for j in 0..c {
            let n = len[j];
            out[j] = if n == 0 || wmax[j] == NEG {
                NEG
            } else if exact[j] {
                let r = self.cached_range(j, first[j], n);
                lse_add(&self.log[r], w.raw(j, n), &mut self.buf[..n]).0
            } else {
                self.rho[j] + wmax[j] + sums[j]
            };
        }
        self.sums = sums;
        self.exact = exact;
    }
    fn shift(&mut self, j: usize, by: f64) {
        let k = self.k;
        for x in &mut self.log[j * 2 * k..(j + 1) * 2 * k] {
            *x += by;
        }
        self.rho[j] += by;
    }
    #[inline]
    fn get(&self, j: usize, pos: usize) -> f64 {
        self.log[j * 2 * self.k + pos % self.k]
    }
    fn saved_words(k: usize, c: usize) -> usize {
        2 * k * c + 2 * c
    }
    fn save(&self, out: &mut [f64]) {
        let (k, c) = (self.k, self.c);
        let (log, rest) = out.split_at_mut(k * c);
        let (lin, rest) = rest.split_at_mut(k * c);
        for j in 0..c {
            log[j * k..(j + 1) * k].copy_from_slice(&self.log[j * 2 * k..j * 2 * k + k]);
            lin[j * k..(j + 1) * k].copy_from_slice(&self.lin[j * 2 * k..j * 2 * k + k]);
        }
        rest[..c].copy_from_slice(&self.rho);
        for (o, &s) in rest[c..2 * c].iter_mut().zip(&self.stale) {
            *o = if s { 1.0 } else { 0.0 };
        }
    }
    fn restore(&mut self, from: &[f64]) {
        let (k, c) = (self.k, self.c);
        let (log, rest) = from.split_at(k * c);
        let (lin, rest) = rest.split_at(k * c);
        for j in 0..c {
            let (a, b) = (j * 2 * k, j * k);
            self.log[a..a + k].copy_from_slice(&log[b..b + k]);
            self.log[a + k..a + 2 * k].copy_from_slice(&log[b..b + k]);
            self.lin[a..a + k].copy_from_slice(&lin[b..b + k]);
            self.lin[a + k..a + 2 * k].copy_from_slice(&lin[b..b + k]);
        }
        self.rho.copy_from_slice(&rest[..c]);
        for (s, &x) in self.stale.iter_mut().zip(&rest[c..2 * c]) {
            *s = x != 0.0;
        }
    }
}

/// The log semiring's [`Matrix`], see the [module docs](self).
#[derive(Clone, Debug, PartialEq)]
pub struct LinearMatrix {
    c: usize,
    /// `raw[j*C + i] = m[i, j]`.
    raw: Vec<f64>,
    /// `exp(m[i, j] - max[j])` at `[j*C + i]`.
    lin: Vec<f64>,
    /// `max_i m[i, j]`.
    max: Vec<f64>,
}

/// Scratch of [`LinearMatrix::apply`](Matrix::apply).
#[derive(Clone, Debug)]
pub struct LinearMatrixScratch {
    ex: Vec<f64>,
    sums: Vec<f64>,
    exact: Vec<bool>,
    buf: Vec<f64>,
}

impl LinearMatrix {
    /// Smallest matrix-vector sum (of factors `<= 1`) computed in the linear domain; below it
    /// the value is computed exactly in the log domain (see the [module docs](self)).
    pub const MIN_SUM: f64 = 1e-280;

    /// Column `j`: the raw `m[·, j]`, its linear form `exp(m[·, j] - max)` and the maximum
    /// (`-inf` when the whole column is `-inf`).
    #[inline]
    pub fn column(&self, j: usize) -> (&[f64], &[f64], f64) {
        let r = j * self.c..(j + 1) * self.c;
        (&self.raw[r.clone()], &self.lin[r], self.max[j])
    }
}

impl Matrix<LogSemiring> for LinearMatrix {
    const ENTRY_WORDS: usize = 2;
    type Scratch = LinearMatrixScratch;

    fn new(table: &[f64], c: usize) -> Self {
        let mut raw = vec![0.0; c * c];
        for i in 0..c {
            for j in 0..c {
                raw[j * c + i] = table[i * c + j];
            }
        }
        let max: Vec<f64> = (0..c).map(|j| max_of(&raw[j * c..(j + 1) * c])).collect();
        let lin = raw
            .iter()
            .enumerate()
            .map(|(n, &x)| exp_rel(x, max[n / c.max(1)]))
            .collect();
        LinearMatrix { c, raw, lin, max }
    }
    fn scratch(c: usize) -> LinearMatrixScratch {
        LinearMatrixScratch {
            ex: vec![0.0; c],
            sums: vec![0.0; c],
            exact: vec![false; c],
            buf: vec![0.0; c],
        }
    }
    fn scratch_words(c: usize) -> usize {
        4 * c
    }
    fn apply(&self, x: &[f64], out: &mut [f64], s: &mut LinearMatrixScratch) {
        let c = self.c;
        let x = &x[..c];
        let m = max_of(x);
        if m == NEG {
            out[..c].fill(NEG);
            return;
        }
        for (e, &a) in s.ex.iter_mut().zip(x) {
            *e = a - m;
        }
        exp_in_place(&mut s.ex);
        for j in 0..c {
            let sum = dot(&s.ex, &self.lin[j * c..(j + 1) * c]);
            s.exact[j] = sum < Self::MIN_SUM;
            s.sums[j] = if s.exact[j] { 1.0 } else { sum };
        }
        ln_in_place(&mut s.sums);
        for j in 0..c {
            out[j] = if self.max[j] == NEG {
                NEG
            } else if s.exact[j] {
                lse_add(x, &self.raw[j * c..(j + 1) * c], &mut s.buf).0
            } else {
                m + self.max[j] + s.sums[j]
            };
        }
    }
}
