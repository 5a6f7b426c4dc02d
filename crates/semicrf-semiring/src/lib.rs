//! Semirings for semi-Markov CRF inference.
//!
//! A semiring supplies `zero` (`-inf`), `one` (`0`), `plus` and `times` (`+`). The dynamic
//! programs of semicrf are written once, generic over [`Semiring`], and instantiated with
//! [`LogSemiring`] (partition function, marginals) or [`MaxSemiring`] (Viterbi).
//!
//! Use this crate directly only to write a new backend; users reach for the `semicrf` facade.
//!
//! ```
//! use semicrf_semiring::{LogSemiring, MaxSemiring, Semiring};
//!
//! let ninf = f64::NEG_INFINITY;
//! assert_eq!(LogSemiring::plus(ninf, ninf), ninf); // never NaN
//! assert!((LogSemiring::plus(0.0f64, 0.0) - 2f64.ln()).abs() < 1e-15);
//! assert_eq!(MaxSemiring::sum(&[1.0f64, 3.0, 2.0]), 3.0);
//! assert_eq!(LogSemiring::sum::<f64>(&[]), ninf);
//! ```
//!
//! # Laws
//!
//! For every implementation and all `a, b, c` in `[-inf, +inf)` (up to rounding for Log):
//!
//! - `plus` is associative and commutative with identity `zero()`;
//! - `times` is associative and commutative with identity `one()` and absorbing element
//!   `zero()`: `times(zero, a) = zero`;
//! - `times` distributes over `plus`: `times(a, plus(b, c)) = plus(times(a, b), times(a, c))`.
//!
//! # The `-inf` rules
//!
//! `-inf` is the semiring zero: it forbids what it scores. `plus(-inf, -inf) = -inf` (never NaN,
//! never a sentinel such as `-1e9`) and a log-sum-exp over a set whose maximum is `-inf` returns
//! `-inf`. `+inf` and NaN are never valid potentials; inputs are validated before they reach a
//! semiring, so the functions here do not test for them.
//!
//! # Crate features
//!
//! None.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use core::fmt::Debug;
use num_traits::Float;

/// The operations a dynamic program needs, with `-inf` as zero and `0` as one.
///
/// Implementations are zero-sized types used for static dispatch: hot loops are generic over
/// `S: Semiring`.
pub trait Semiring: Copy + Clone + Default + Debug + Send + Sync + 'static {
    /// A short lowercase name (`"log"`, `"max"`), used in reports and benchmark ids.
    const NAME: &'static str;

    /// The additive identity, `-inf`.
    #[inline(always)]
    fn zero<F: Float>() -> F {
        F::neg_infinity()
    }

    /// The multiplicative identity, `0`.
    #[inline(always)]
    fn one<F: Float>() -> F {
        F::zero()
    }

    /// `a ⊕ b`.
    fn plus<F: Float>(a: F, b: F) -> F;

    /// `a ⊗ b = a + b`. `-inf ⊗ x = -inf` for every finite or `-inf` `x`.
    #[inline(always)]
    fn times<F: Float>(a: F, b: F) -> F {
        a + b
    }

    /// `⊕` over a slice; `zero()` for an empty slice.
    fn sum<F: Float>(xs: &[F]) -> F;
}

/// The log semiring: `plus` is log-add-exp. Its dynamic programs compute log partition
/// functions, and their derivatives are marginal probabilities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogSemiring;

/// The max (tropical) semiring: `plus` is `max`. Its dynamic programs compute Viterbi scores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaxSemiring;

impl Semiring for LogSemiring {
    const NAME: &'static str = "log";

    #[inline(always)]
    fn plus<F: Float>(a: F, b: F) -> F {
        log_add_exp(a, b)
    }

    #[inline]
    fn sum<F: Float>(xs: &[F]) -> F {
        logsumexp(xs)
    }
}

impl Semiring for MaxSemiring {
    const NAME: &'static str = "max";

    #[inline(always)]
    fn plus<F: Float>(a: F, b: F) -> F {
        if b > a { b } else { a }
    }

    #[inline]
    fn sum<F: Float>(xs: &[F]) -> F {
        xs.iter()
            .fold(F::neg_infinity(), |m, &x| if x > m { x } else { m })
    }
}

/// `log(exp(a) + exp(b))`, with `log_add_exp(-inf, -inf) = -inf`.
///
/// ```
/// use semicrf_semiring::log_add_exp;
/// assert_eq!(log_add_exp(f64::NEG_INFINITY, 2.0), 2.0);
/// assert_eq!(log_add_exp(f32::NEG_INFINITY, f32::NEG_INFINITY), f32::NEG_INFINITY);
/// assert_eq!(log_add_exp(1e308f64, 1e308), 1e308 + 2f64.ln());
/// ```
#[inline(always)]
pub fn log_add_exp<F: Float>(a: F, b: F) -> F {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    if hi == F::neg_infinity() {
        // Both are -inf: `lo - hi` would be NaN.
        return hi;
    }
    hi + (lo - hi).exp().ln_1p()
}

/// `log Σ exp(x)` over a slice, with the max shift. Returns `-inf` for an empty slice or when
/// every element is `-inf` (the guard that keeps `-inf - -inf` from making NaN).
///
/// ```
/// use semicrf_semiring::logsumexp;
/// let ninf = f64::NEG_INFINITY;
/// assert_eq!(logsumexp(&[ninf, ninf]), ninf);
/// assert!((logsumexp(&[1000.0f64, 1000.0]) - (1000.0 + 2f64.ln())).abs() < 1e-12);
/// ```
#[inline]
pub fn logsumexp<F: Float>(xs: &[F]) -> F {
    let m = xs
        .iter()
        .fold(F::neg_infinity(), |m, &x| if x > m { x } else { m });
    if m == F::neg_infinity() {
        return m;
    }
    let s = xs.iter().fold(F::zero(), |s, &x| s + (x - m).exp());
    m + s.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NINF: f64 = f64::NEG_INFINITY;

    fn close(a: f64, b: f64) -> bool {
        if a == b {
            return true;
        }
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
    }

    fn values() -> Vec<f64> {
        vec![
            NINF, -1e300, -1e4, -3.5, -1.0, 0.0, 0.5, 2.0, 1e3, 1e4, 1e300,
        ]
    }

    #[test]
    fn log_plus_of_two_neg_infinities_is_neg_infinity_not_nan() {
        assert_eq!(LogSemiring::plus(NINF, NINF), NINF);
        assert_eq!(
            LogSemiring::plus(f32::NEG_INFINITY, f32::NEG_INFINITY),
            f32::NEG_INFINITY
        );
        assert_eq!(LogSemiring::sum(&[NINF; 7]), NINF);
        assert_eq!(LogSemiring::sum::<f32>(&[]), f32::NEG_INFINITY);
        assert_eq!(MaxSemiring::sum(&[NINF; 3]), NINF);
        assert_eq!(MaxSemiring::sum::<f64>(&[]), NINF);
    }

    #[test]
    fn log_plus_is_exact_at_large_magnitudes() {
        assert_eq!(LogSemiring::plus(1e300, NINF), 1e300);
        assert!(close(LogSemiring::plus(1e4, 1e4), 1e4 + 2f64.ln()));
        assert!(close(LogSemiring::plus(-1e4, -1e4), -1e4 + 2f64.ln()));
        assert_eq!(LogSemiring::plus(1e4, -1e4), 1e4);
        let big = LogSemiring::sum(&[3e38f32, 3e38, 3e38]);
        assert!(big.is_finite());
        let s = LogSemiring::sum(&[700.0f64, 710.0, 720.0]);
        assert!(close(
            s,
            720.0 + (1.0 + (-10f64).exp() + (-20f64).exp()).ln()
        ));
    }

    #[test]
    fn semiring_laws_hold_for_log_and_max() {
        fn check<S: Semiring>() {
            let v = values();
            for &a in &v {
                assert!(close(S::plus(a, S::zero()), a), "{} identity", S::NAME);
                assert!(close(S::times(a, S::one()), a));
                assert_eq!(S::times(a, S::zero::<f64>()), NINF, "absorbing zero");
                for &b in &v {
                    assert!(close(S::plus(a, b), S::plus(b, a)), "commutative");
                    for &c in &v {
                        let l = S::plus(S::plus(a, b), c);
                        let r = S::plus(a, S::plus(b, c));
                        assert!(close(l, r), "{} associative {a} {b} {c}: {l} {r}", S::NAME);
                        // Distributivity, where the sums are exact enough to compare: at
                        // 1e300 the ln 2 of a log-add disappears in rounding before `a`
                        // cancels it.
                        let moderate = [a, b, c].iter().all(|x| x.abs() <= 1e4 || *x == NINF);
                        if moderate || a == NINF {
                            let l = S::times(a, S::plus(b, c));
                            let r = S::plus(S::times(a, b), S::times(a, c));
                            assert!(close(l, r), "{} distributive {a} {b} {c}", S::NAME);
                        }
                        assert!(!l.is_nan());
                    }
                }
            }
        }
        check::<LogSemiring>();
        check::<MaxSemiring>();
    }

    #[test]
    fn sum_over_slice_agrees_with_folded_plus() {
        let xs = [-2.0, NINF, 5.0, 4.5, -1e4, 1e3];
        for n in 0..=xs.len() {
            let s = &xs[..n];
            let folded = s.iter().fold(NINF, |acc, &x| LogSemiring::plus(acc, x));
            assert!(close(LogSemiring::sum(s), folded));
            let m = s.iter().fold(NINF, |acc, &x| MaxSemiring::plus(acc, x));
            assert_eq!(MaxSemiring::sum(s), m);
        }
    }
}
