//! The forward recurrence, one position at a time, in any semiring: one state type per
//! transition form.

use semicrf_core::{Scalar, Semiring};
use semicrf_semiring::{Matrix, Ring};

use super::input::SeqIn;
use super::params::Params;
use super::prefix::Prefix;

/// The forward state of one sequence, advanced one position at a time.
///
/// After [`Forward::step`] at position `p` it holds `α_p` (for `p >= 1`) and, for `p < L`,
/// `u_p`; [`Forward::total`] after step `L` is `⊕_j α_L(j) ⊗ end[j]`. A saved state
/// ([`Forward::save`]) restores bitwise, so a recomputed interval reproduces the first pass.
pub(crate) trait Forward<S: Semiring>: Send + Sized {
    /// Whether [`Forward::u`] holds `u_p` (the static form) or nothing.
    const HAS_U: bool;
    fn new(par: &Params<S>) -> Self;
    /// `f64` words held for `K`, `C` and a semiring of the given description.
    fn words(k: usize, c: usize, s: semicrf_semiring::SemiringInfo) -> usize;
    fn step<F: Scalar>(&mut self, p: usize, seq: &SeqIn<'_, F>, par: &Params<S>);
    fn total(&mut self, par: &Params<S>) -> S::Value;
    fn alpha(&self) -> &[S::Value];
    /// `u_p` (static transition; empty for the duration-dependent form, which has none).
    fn u(&self) -> &[S::Value];
    fn pref(&self) -> &[f64];
    /// `f64` words of one saved state (besides the `C` first-admissible starts).
    fn saved_words(k: usize, c: usize) -> usize;
    fn save(&self, words: &mut [f64], z: &mut [usize]);
    /// Restores a state saved before position `p`.
    fn restore(&mut self, words: &[f64], z: &[usize], p: usize);
}

/// Static `(C, C)` transition: the factorised recurrence
///
/// ```text
/// u_0(j) = start[j],        u_s(j) = ⊕_i α_s(i) ⊗ transition[i, j]          (s ≥ 1)
/// α_t(j) = P[t, j] ⊗ end_boundary[t-1, j] ⊗ ⊕_{d=1..min(K, t - z_j)} v_{t-d}(j) ⊗ duration[d-1, j]
/// ```
///
/// where the ring holds `v_s(j) = u_s(j) ⊗ begin_boundary[s, j] ⊗ P[s, j]⁻¹` for the last `K`
/// starts (`P` relative to the label's current origin) and `z_j` is the first start after
/// the label's last `-inf` score. The window sum is the semiring's [`Ring`], the transition
/// step its [`Matrix`].
#[derive(Clone, Debug)]
pub(crate) struct StaticFwd<S: Semiring> {
    k: usize,
    c: usize,
    pub(super) prefix: Prefix,
    pub(super) ring: S::Ring,
    pub(super) alpha: Vec<S::Value>,
    pub(super) u: Vec<S::Value>,
    /// `v_p`, the entries last pushed into the ring.
    pub(super) v: Vec<S::Value>,
    pub(super) first: Vec<usize>,
    pub(super) len: Vec<usize>,
    kmax: Vec<usize>,
    scratch: <S::Matrix as Matrix<S>>::Scratch,
    pub(super) row: Vec<f64>,
    buf: Vec<S::Value>,
}

impl<S: Semiring> StaticFwd<S> {
    /// The windows of `α_p`: for every label the last `min(K_j, p - z_j)` starts (`K_j` the
    /// label's longest finite duration).
    #[inline]
    pub(super) fn windows(&mut self, p: usize) {
        let lens = self.len.iter_mut().zip(&mut self.first).zip(&self.kmax);
        for (((n, f), &k), z) in lens.zip(&self.prefix.z) {
            *n = k.min(p - z);
            *f = p - *n;
        }
    }

    /// Pushes `v_p = u_p ⊗ begin_boundary[p] ⊗ P[p]⁻¹` and advances the prefix sums.
    #[inline]
    pub(super) fn push<F: Scalar>(&mut self, p: usize, seq: &SeqIn<'_, F>) {
        seq.bb_row(p, &mut self.row);
        let rows = self.row.iter().zip(&self.prefix.pref);
        for ((v, &u), (&bb, &pref)) in self.v.iter_mut().zip(&self.u).zip(rows) {
            *v = S::shift(u, bb - pref);
        }
        self.ring.push(p, &self.v);
        let ring = &mut self.ring;
        self.prefix.advance(p, seq, |j, d| ring.shift(j, d));
    }
}

impl<S: Semiring> Forward<S> for StaticFwd<S> {
    const HAS_U: bool = true;
    fn new(par: &Params<S>) -> Self {
        let (k, c) = (par.k, par.c);
        StaticFwd {
            k,
            c,
            prefix: Prefix::new(k, c),
            ring: S::Ring::new(k, c),
            alpha: vec![S::zero(); c],
            u: vec![S::zero(); c],
            v: vec![S::zero(); c],
            first: vec![0; c],
            len: vec![0; c],
            kmax: par.kmax.clone(),
            scratch: S::Matrix::scratch(c),
            row: vec![0.0; c],
            buf: vec![S::zero(); c],
        }
    }

    fn words(k: usize, c: usize, s: semicrf_semiring::SemiringInfo) -> usize {
        // Ring entries and their scratch, α, u, v, the output buffer, matrix scratch (at most
        // 4 words per label), windows and a row.
        2 * k * c * s.ring_words
            + (k + 6 * c) * s.width.max(1)
            + 4 * c * s.width
            + 4 * c * s.width.max(1)
            + 4 * c
            + Prefix::words(c)
    }

    #[inline]
    fn step<F: Scalar>(&mut self, p: usize, seq: &SeqIn<'_, F>, par: &Params<S>) {
        if p == 0 {
            for (u, &x) in self.u.iter_mut().zip(&par.start) {
                *u = S::lift(x);
            }
        } else {
            seq.eb_row(p - 1, &mut self.row);
            self.windows(p);
            self.ring
                .sums(&self.first, &self.len, &par.weights, &mut self.alpha);
            let rows = self.prefix.pref.iter().zip(&self.row);
            for (a, (&pref, &eb)) in self.alpha.iter_mut().zip(rows) {
                *a = S::shift(*a, pref + eb);
            }
            if p == seq.len {
                return;
            }
            par.matrix
                .apply(&self.alpha, &mut self.u, &mut self.scratch);
        }
        self.push(p, seq);
    }

    fn total(&mut self, par: &Params<S>) -> S::Value {
        S::sum_shifted(&self.alpha, &par.end, &mut self.buf)
    }

    fn alpha(&self) -> &[S::Value] {
        &self.alpha
    }
    fn u(&self) -> &[S::Value] {
        &self.u
    }
    fn pref(&self) -> &[f64] {
        &self.prefix.pref
    }

    fn saved_words(k: usize, c: usize) -> usize {
        S::Ring::saved_words(k, c) + c
    }
    fn save(&self, words: &mut [f64], z: &mut [usize]) {
        let n = S::Ring::saved_words(self.k, self.c);
        self.ring.save(&mut words[..n]);
        words[n..n + self.c].copy_from_slice(&self.prefix.pref);
        z.copy_from_slice(&self.prefix.z);
    }
    fn restore(&mut self, words: &[f64], z: &[usize], p: usize) {
        let n = S::Ring::saved_words(self.k, self.c);
        self.ring.restore(&words[..n]);
        self.prefix.restore(&words[n..n + self.c], z, p);
    }
}

/// Duration-dependent `(K, C, C)` transition: no factorisation, `O(K·C²)` per position,
///
/// ```text
/// α_t(j) = P[t, j] ⊗ end_boundary[t-1, j] ⊗ ⊕_{d=1..min(K, t - z_j)} inner_{t-d}(d, j)
///          ⊗ q_{t-d}(j) ⊗ duration[d-1, j]
/// inner_s(d, j) = start[j] if s = 0, else ⊕_i α_s(i) ⊗ transition[d-1, i, j]
/// ```
///
/// with a ring of the last `K` rows `α_s` and of `q_s(j) = begin_boundary[s, j] - P[s, j]`.
#[derive(Clone, Debug)]
pub(crate) struct DdFwd<S: Semiring> {
    k: usize,
    c: usize,
    pub(super) prefix: Prefix,
    /// `ring[(s mod K)*C + i] = α_s(i)`.
    pub(super) ring: Vec<S::Value>,
    /// `q[(s mod K)*C + j]`.
    pub(super) q: Vec<f64>,
    pub(super) alpha: Vec<S::Value>,
    terms: Vec<S::Value>,
    pub(super) row: Vec<f64>,
    pub(super) buf: Vec<S::Value>,
}

impl<S: Semiring> Forward<S> for DdFwd<S> {
    const HAS_U: bool = false;
    fn new(par: &Params<S>) -> Self {
        let (k, c) = (par.k, par.c);
        DdFwd {
            k,
            c,
            prefix: Prefix::new(k, c),
            ring: vec![S::zero(); k * c],
            q: vec![f64::NEG_INFINITY; k * c],
            alpha: vec![S::zero(); c],
            terms: vec![S::zero(); k],
            row: vec![0.0; c],
            buf: vec![S::zero(); c],
        }
    }

    fn words(k: usize, c: usize, s: semicrf_semiring::SemiringInfo) -> usize {
        k * c * s.width + k * c + (2 * c + k) * s.width + c + Prefix::words(c)
    }

    #[inline]
    fn step<F: Scalar>(&mut self, p: usize, seq: &SeqIn<'_, F>, par: &Params<S>) {
        let (k, c) = (self.k, self.c);
        if p >= 1 {
            seq.eb_row(p - 1, &mut self.row);
            for j in 0..c {
                let n = par.kmax[j].min(p - self.prefix.z[j]);
                for d in 1..=n {
                    let s = p - d;
                    let slot = s % k;
                    let inner = if s == 0 {
                        S::lift(par.start[j])
                    } else {
                        let o = (d - 1) * c * c + j * c;
                        S::sum_shifted(
                            &self.ring[slot * c..(slot + 1) * c],
                            &par.tr_t[o..o + c],
                            &mut self.buf,
                        )
                    };
                    self.terms[d - 1] =
                        S::shift(inner, self.q[slot * c + j] + par.dur[j * k + d - 1]);
                }
                let x = S::sum(&mut self.terms[..n]);
                self.alpha[j] = S::shift(x, self.prefix.pref[j] + self.row[j]);
            }
            if p == seq.len {
                return;
            }
            let slot = p % k;
            self.ring[slot * c..(slot + 1) * c].copy_from_slice(&self.alpha);
        }
        seq.bb_row(p, &mut self.row);
        let slot = p % k;
        for j in 0..c {
            self.q[slot * c + j] = self.row[j] - self.prefix.pref[j];
        }
        let q = &mut self.q;
        self.prefix.advance(p, seq, |j, d| {
            for slot in 0..k {
                q[slot * c + j] += d;
            }
        });
    }

    fn total(&mut self, par: &Params<S>) -> S::Value {
        S::sum_shifted(&self.alpha, &par.end, &mut self.buf)
    }

    fn alpha(&self) -> &[S::Value] {
        &self.alpha
    }
    fn u(&self) -> &[S::Value] {
        &[]
    }
    fn pref(&self) -> &[f64] {
        &self.prefix.pref
    }

    fn saved_words(k: usize, c: usize) -> usize {
        k * c * S::WIDTH + k * c + c
    }
    fn save(&self, words: &mut [f64], z: &mut [usize]) {
        let (k, c, w) = (self.k, self.c, S::WIDTH);
        for (n, &v) in self.ring.iter().enumerate() {
            S::to_words(v, &mut words[n * w..(n + 1) * w]);
        }
        let rest = &mut words[k * c * w..];
        rest[..k * c].copy_from_slice(&self.q);
        rest[k * c..k * c + c].copy_from_slice(&self.prefix.pref);
        z.copy_from_slice(&self.prefix.z);
    }
    fn restore(&mut self, words: &[f64], z: &[usize], p: usize) {
        let (k, c, w) = (self.k, self.c, S::WIDTH);
        for (n, v) in self.ring.iter_mut().enumerate() {
            *v = S::from_words(&words[n * w..(n + 1) * w]);
        }
        let rest = &words[k * c * w..];
        self.q.copy_from_slice(&rest[..k * c]);
        self.prefix.restore(&rest[k * c..k * c + c], z, p);
    }
}
