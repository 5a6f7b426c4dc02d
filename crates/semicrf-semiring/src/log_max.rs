//! The log and max semirings over `f64` log-weights.

use crate::kernels::{add_max, log_add_exp, lse_add, max_of, sum_exp_shifted};
use crate::{LinearMatrix, LinearRing, PlainMatrix, PlainRing, Semiring};

/// The log semiring: `⊕` is log-add-exp, `⊗` is `+`. Its forward pass computes `log Z`, and
/// the derivatives of `log Z` are the posterior marginals.
///
/// Its streaming operators are [`LinearRing`] and [`LinearMatrix`], which work in the linear
/// domain with exact fallbacks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogSemiring;

/// The max (tropical) semiring: `⊕` is `max`, `⊗` is `+`. Its forward pass computes the
/// Viterbi score.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaxSemiring;

/// The operations the log and max semirings share: elements are `f64` log-weights, `⊗` is
/// `+` and a potential is its own element.
macro_rules! log_weight_elements {
    () => {
        const WIDTH: usize = 1;
        type Value = f64;

        #[inline(always)]
        fn zero() -> f64 {
            f64::NEG_INFINITY
        }
        #[inline(always)]
        fn one() -> f64 {
            0.0
        }
        #[inline(always)]
        fn times(a: f64, b: f64) -> f64 {
            a + b
        }
        #[inline(always)]
        fn lift(theta: f64) -> f64 {
            theta
        }
        #[inline(always)]
        fn shift(v: f64, theta: f64) -> f64 {
            v + theta
        }
        #[inline(always)]
        fn weight(v: f64) -> f64 {
            v
        }
        #[inline(always)]
        fn to_words(v: f64, out: &mut [f64]) {
            out[0] = v;
        }
        #[inline(always)]
        fn from_words(words: &[f64]) -> f64 {
            words[0]
        }
    };
}

impl Semiring for LogSemiring {
    const NAME: &'static str = "log";
    log_weight_elements!();
    type Ring = LinearRing;
    type Matrix = LinearMatrix;

    #[inline(always)]
    fn plus(a: f64, b: f64) -> f64 {
        log_add_exp(a, b)
    }
    /// Max-shifted log-sum-exp, `-inf` when the maximum is `-inf`; `xs` is left as it is.
    /// [`sum_exp_shifted`] sums with the library `exp` and four accumulators in a fixed order.
    #[inline]
    fn sum(xs: &mut [f64]) -> f64 {
        let m = max_of(xs);
        if m == f64::NEG_INFINITY {
            return m;
        }
        m + sum_exp_shifted(xs, m).ln()
    }
    #[inline]
    fn sum_shifted(xs: &[f64], ws: &[f64], buf: &mut [f64]) -> f64 {
        let n = xs.len().min(ws.len());
        lse_add(&xs[..n], &ws[..n], &mut buf[..n]).0
    }
}

impl Semiring for MaxSemiring {
    const NAME: &'static str = "max";
    log_weight_elements!();
    type Ring = PlainRing<MaxSemiring>;
    type Matrix = PlainMatrix<MaxSemiring>;

    #[inline(always)]
    fn plus(a: f64, b: f64) -> f64 {
        if b > a { b } else { a }
    }
    #[inline]
    fn sum(xs: &mut [f64]) -> f64 {
        max_of(xs)
    }
    #[inline]
    fn sum_shifted(xs: &[f64], ws: &[f64], buf: &mut [f64]) -> f64 {
        let n = xs.len().min(ws.len());
        add_max(&xs[..n], &ws[..n], &mut buf[..n])
    }
}
