//! The streaming operators for any semiring, from its slice reductions.

use core::marker::PhantomData;

use crate::{Lag, Matrix, Ring, Semiring};

/// Per-lag weights of a [`PlainRing`]: the raw table, laid out so that every window's weights
/// are one contiguous slice.
#[derive(Clone, Debug, PartialEq)]
pub struct PlainWeights {
    k: usize,
    lag: Lag,
    /// `Lag::FromEnd`: `raw[j*K + K - d]`; `Lag::FromStart`: `raw[j*K + d - 1]`.
    raw: Vec<f64>,
}

impl PlainWeights {
    pub(crate) fn oriented(table: &[f64], k: usize, c: usize, lag: Lag) -> Vec<f64> {
        let mut raw = vec![0.0; k * c];
        for j in 0..c {
            for d in 1..=k {
                let x = table[j * k + d - 1];
                match lag {
                    Lag::FromEnd => raw[j * k + k - d] = x,
                    Lag::FromStart => raw[j * k + d - 1] = x,
                }
            }
        }
        raw
    }

    /// The weights of a window of `n` positions of label `j`, in window order.
    #[inline]
    pub fn window(&self, j: usize, n: usize) -> &[f64] {
        let k = self.k;
        match self.lag {
            Lag::FromEnd => &self.raw[j * k + k - n..j * k + k],
            Lag::FromStart => &self.raw[j * k..j * k + n],
        }
    }
}

/// Entries between the starts of two labels' rings: `2K` and one cache line (8 entries)
/// more, so that the labels' entries of one position fall in different cache sets (at a
/// power-of-two `2K` they would all compete for one).
#[inline]
fn stride(k: usize) -> usize {
    2 * k + 8
}

/// A [`Ring`] for any semiring: the last `K` values of each label, stored twice over (slot
/// `q mod K` and `q mod K + K`) so that every window is one contiguous slice, reduced with
/// [`Semiring::sum_shifted`].
#[derive(Clone, Debug)]
pub struct PlainRing<S: Semiring> {
    k: usize,
    c: usize,
    values: Vec<S::Value>,
    buf: Vec<S::Value>,
    _s: PhantomData<S>,
}

impl<S: Semiring> PlainRing<S> {
    /// The entries of label `j` at positions `first..first + n` (`n <= K`).
    #[inline]
    pub fn window(&self, j: usize, first: usize, n: usize) -> &[S::Value] {
        let off = j * stride(self.k) + first % self.k;
        &self.values[off..off + n]
    }
}

impl<S: Semiring> Ring<S> for PlainRing<S> {
    const ENTRY_WORDS: usize = S::WIDTH;
    type Weights = PlainWeights;

    fn weights(table: &[f64], k: usize, c: usize, lag: Lag) -> PlainWeights {
        PlainWeights {
            k,
            lag,
            raw: PlainWeights::oriented(table, k, c, lag),
        }
    }
    fn weight_words(k: usize, c: usize) -> usize {
        k * c
    }
    fn new(k: usize, c: usize) -> Self {
        PlainRing {
            k,
            c,
            values: vec![S::zero(); stride(k) * c],
            buf: vec![S::zero(); k],
            _s: PhantomData,
        }
    }
    fn words(k: usize, c: usize) -> usize {
        (stride(k) * c + k) * S::WIDTH
    }
    #[inline]
    fn push(&mut self, pos: usize, values: &[S::Value]) {
        let (k, slot) = (self.k, pos % self.k);
        for (j, &v) in values[..self.c].iter().enumerate() {
            self.values[j * stride(k) + slot] = v;
            self.values[j * stride(k) + slot + k] = v;
        }
    }
    #[inline]
    fn sums(&mut self, first: &[usize], len: &[usize], w: &PlainWeights, out: &mut [S::Value]) {
        let k = self.k;
        // The windows of one call usually share their start: one division, not one per label.
        let mut slot_of = (usize::MAX, 0);
        for j in 0..self.c {
            let n = len[j];
            out[j] = if n == 0 {
                S::zero()
            } else {
                if slot_of.0 != first[j] {
                    slot_of = (first[j], first[j] % k);
                }
                let off = j * stride(k) + slot_of.1;
                S::sum_shifted(&self.values[off..off + n], w.window(j, n), &mut self.buf)
            };
        }
    }
    fn shift(&mut self, j: usize, by: f64) {
        let k = self.k;
        for v in &mut self.values[j * stride(k)..j * stride(k) + 2 * k] {
            *v = S::shift(*v, by);
        }
    }
    #[inline]
    fn get(&self, j: usize, pos: usize) -> S::Value {
        self.values[j * stride(self.k) + pos % self.k]
    }
    fn saved_words(k: usize, c: usize) -> usize {
        k * c * S::WIDTH
    }
    fn save(&self, out: &mut [f64]) {
        let (k, w) = (self.k, S::WIDTH);
        for j in 0..self.c {
            for slot in 0..k {
                let n = (j * k + slot) * w;
                S::to_words(self.values[j * stride(k) + slot], &mut out[n..n + w]);
            }
        }
    }
    fn restore(&mut self, from: &[f64]) {
        let (k, w) = (self.k, S::WIDTH);
        for j in 0..self.c {
            for slot in 0..k {
                let n = (j * k + slot) * w;
                let v = S::from_words(&from[n..n + w]);
                self.values[j * stride(k) + slot] = v;
                self.values[j * stride(k) + slot + k] = v;
            }
        }
    }
}

/// A [`Matrix`] for any semiring: the columns of the table, each reduced with
/// [`Semiring::sum_shifted`].
#[derive(Clone, Debug, PartialEq)]
pub struct PlainMatrix<S: Semiring> {
    c: usize,
    /// `columns[j*C + i] = m[i, j]`.
    columns: Vec<f64>,
    _s: PhantomData<S>,
}

impl<S: Semiring> PlainMatrix<S> {
    /// Column `j`: `m[·, j]`.
    #[inline]
    pub fn column(&self, j: usize) -> &[f64] {
        &self.columns[j * self.c..(j + 1) * self.c]
    }
}

impl<S: Semiring> Matrix<S> for PlainMatrix<S> {
    const ENTRY_WORDS: usize = 1;
    type Scratch = Vec<S::Value>;

    fn new(table: &[f64], c: usize) -> Self {
        let mut columns = vec![0.0; c * c];
        for i in 0..c {
            for j in 0..c {
                columns[j * c + i] = table[i * c + j];
            }
        }
        PlainMatrix {
            c,
            columns,
            _s: PhantomData,
        }
    }
    fn scratch(c: usize) -> Vec<S::Value> {
        vec![S::zero(); c]
    }
    fn scratch_words(c: usize) -> usize {
        c * S::WIDTH
    }
    #[inline]
    fn apply(&self, x: &[S::Value], out: &mut [S::Value], scratch: &mut Vec<S::Value>) {
        for (j, o) in out[..self.c].iter_mut().enumerate() {
            *o = S::sum_shifted(x, self.column(j), scratch);
        }
    }
}
