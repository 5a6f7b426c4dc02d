//! The shared parameters, converted once to `f64` in the layouts the recurrences read.

use semicrf_core::{Scalar, Semiring, SharedParams, Transition};
use semicrf_semiring::{Lag, Matrix, Ring};

/// The shared parameters of a batch for semiring `S`.
#[derive(Debug)]
pub(crate) struct Params<S: Semiring> {
    /// `K`.
    pub k: usize,
    /// `C`.
    pub c: usize,
    /// Static: `tr[i*C + j]`. Duration-dependent: `tr[i*K*C + (d-1)*C + j]` (the layout of
    /// the transition gradient's partial sums).
    pub tr: Vec<f64>,
    /// Duration-dependent only: `tr_t[(d-1)*C*C + j*C + i]`, a contiguous source lane per
    /// `(d, j)`.
    pub tr_t: Vec<f64>,
    /// `dur[j*K + d-1]`.
    pub dur: Vec<f64>,
    /// The longest duration of label `j` whose weight is finite (0 when none is): windows
    /// stop there, so a label whose duration table ends in `-inf` costs only its own span.
    pub kmax: Vec<usize>,
    /// `start[j]`.
    pub start: Vec<f64>,
    /// `end[j]`.
    pub end: Vec<f64>,
    /// Static: the duration table prepared for windows of starts that end at a position.
    pub weights: <S::Ring as Ring<S>>::Weights,
    /// Static: `u = α ⊙ transition`.
    pub matrix: S::Matrix,
}

impl<S: Semiring> Params<S> {
    /// `f64` words held for `K`, `C` (`dd`: a `(K, C, C)` transition) and a semiring whose
    /// ring keeps `ring_words` and matrix `matrix_words` words per entry.
    pub(crate) fn words(
        k: usize,
        c: usize,
        dd: bool,
        ring_words: usize,
        matrix_words: usize,
    ) -> usize {
        let r = if dd { k * c * c } else { c * c };
        let tr_t = if dd { k * c * c } else { 0 };
        r + tr_t + k * c + 3 * c + (k * c + c) * ring_words + (c * c + c) * matrix_words
    }

    pub(crate) fn new<F: Scalar>(p: &SharedParams<'_, F>) -> Self {
        let (k, c) = (p.max_duration(), p.labels());
        let (tr, tr_t) = match p.transition() {
            Some(Transition::DurationDependent(t)) => {
                let mut tr = vec![0.0; k * c * c];
                let mut tr_t = vec![0.0; k * c * c];
                for d in 0..k {
                    for i in 0..c {
                        for j in 0..c {
                            let x = t[[d, i, j]].as_f64();
                            tr[i * k * c + d * c + j] = x;
                            tr_t[d * c * c + j * c + i] = x;
                        }
                    }
                }
                (tr, tr_t)
            }
            Some(Transition::Static(t)) => {
                let tr = (0..c * c).map(|n| t[[n / c, n % c]].as_f64()).collect();
                (tr, Vec::new())
            }
            None => (vec![0.0; c * c], Vec::new()),
        };
        let mut dur = vec![0.0; k * c];
        for j in 0..c {
            for d in 1..=k {
                dur[j * k + d - 1] = p.duration_at(d, j);
            }
        }
        let kmax = (0..c)
            .map(|j| {
                (1..=k)
                    .rev()
                    .find(|&d| dur[j * k + d - 1] > f64::NEG_INFINITY)
                    .unwrap_or(0)
            })
            .collect();
        let dd = p.has_duration_dependent_transition();
        let static_tr = if dd { vec![0.0; c * c] } else { tr.clone() };
        Params {
            k,
            c,
            weights: S::Ring::weights(&dur, k, c, Lag::FromEnd),
            matrix: S::Matrix::new(&static_tr, c),
            tr,
            tr_t,
            dur,
            kmax,
            start: (0..c).map(|j| p.start_at(j)).collect(),
            end: (0..c).map(|j| p.end_at(j)).collect(),
        }
    }
}
