//! The entropy semiring: log-weights together with the Shannon entropy of the distribution
//! they define.

use crate::kernels::{exp_fast, log_add_exp};
use crate::{PlainMatrix, PlainRing, Semiring};

/// An element of [`EntropySemiring`]: a set of weighted items summarised by its total
/// log-weight `x = log Σ w` and the entropy `h = -Σ p log p` (nats) of the distribution
/// `p = w / Σ w`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EntropyValue {
    /// `log Σ w`; `-inf` for the empty set (the semiring zero).
    pub log_weight: f64,
    /// The entropy of the normalised weights, `≥ 0`; `0` for a single item and for zero.
    pub entropy: f64,
}

/// The entropy semiring: a forward pass gives `log Z` and the Shannon entropy of the
/// posterior over segmentations, `H = -Σ_y p(y) log p(y)`.
///
/// An element `(x, h)` stands for a set of weighted paths (see [`EntropyValue`]).
///
/// - `lift(θ) = (θ, 0)`: one path of log-weight `θ` has no uncertainty;
/// - `(x₁, h₁) ⊗ (x₂, h₂) = (x₁ + x₂, h₁ + h₂)`: concatenating independent choices adds
///   log-weights and entropies;
/// - `⊕` over `(x_i, h_i)`: `x = log Σ e^{x_i}` and, with `π_i = e^{x_i - x}`,
///   `h = Σ_i π_i (h_i + (x - x_i))`: the mixture's entropy is the mean entropy of its parts
///   plus the entropy of choosing a part (the chain rule).
///
/// Every term of the `⊕` rule is non-negative (`x ≥ x_i` holds in floating point as well),
/// so computed entropies are never negative and never lose digits to cancellation, however
/// large the scores: the result does not go through `log Z − E[score]`, which cancels badly
/// when one segmentation dominates. Items of log-weight `-inf` have `π_i = 0` and are skipped
/// (no `0 · ∞`).
///
/// ```
/// use semicrf_semiring::{EntropySemiring, Semiring};
///
/// // Three paths: log-weights 0, 0 and ln 2 (probabilities 1/4, 1/4, 1/2).
/// let mut xs = [0.0, 0.0, 2f64.ln()].map(EntropySemiring::lift);
/// let v = EntropySemiring::sum(&mut xs);
/// assert!((v.log_weight - 4f64.ln()).abs() < 1e-15);
/// assert!((v.entropy - 1.5 * 2f64.ln()).abs() < 1e-15);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntropySemiring;

const ZERO: EntropyValue = EntropyValue {
    log_weight: f64::NEG_INFINITY,
    entropy: 0.0,
};

/// `Σ_i e_i` and `Σ_i e_i · g_i` over the shifted terms, with `e_i = exp(x_i - m)` and
/// `g_i = h_i + (m - x_i)` (0 where `x_i = -inf`), four accumulators in a fixed order.
/// Returns the entropy of the whole set, `Σ e_i g_i / Σ e_i + ln Σ e_i`.
#[inline]
fn mix(xs: impl Iterator<Item = (f64, f64)> + Clone, m: f64) -> EntropyValue {
    let mut s = [0.0f64; 4];
    let mut g = [0.0f64; 4];
    for (n, (x, h)) in xs.enumerate() {
        let d = x - m;
        let e = exp_fast(d);
        // `m - x >= 0`; for x = -inf it is +inf and the term must vanish, not be NaN.
        let gi = if x == f64::NEG_INFINITY { 0.0 } else { h - d };
        s[n % 4] += e;
        g[n % 4] += e * gi;
    }
    let s = (s[0] + s[1]) + (s[2] + s[3]);
    let g = (g[0] + g[1]) + (g[2] + g[3]);
    let l = s.ln();
    EntropyValue {
        log_weight: m + l,
        entropy: g / s + l,
    }
}

impl Semiring for EntropySemiring {
    const NAME: &'static str = "entropy";
    const WIDTH: usize = 2;
    type Value = EntropyValue;
    type Ring = PlainRing<EntropySemiring>;
    type Matrix = PlainMatrix<EntropySemiring>;

    #[inline(always)]
    fn zero() -> EntropyValue {
        ZERO
    }
    #[inline(always)]
    fn one() -> EntropyValue {
        EntropyValue {
            log_weight: 0.0,
            entropy: 0.0,
        }
    }
    #[inline]
    fn plus(a: EntropyValue, b: EntropyValue) -> EntropyValue {
        let x = log_add_exp(a.log_weight, b.log_weight);
        if x == f64::NEG_INFINITY {
            return ZERO;
        }
        let part = |v: EntropyValue| {
            if v.log_weight == f64::NEG_INFINITY {
                0.0
            } else {
                (v.log_weight - x).exp() * (v.entropy + (x - v.log_weight))
            }
        };
        EntropyValue {
            log_weight: x,
            entropy: part(a) + part(b),
        }
    }
    #[inline(always)]
    fn times(a: EntropyValue, b: EntropyValue) -> EntropyValue {
        EntropyValue {
            log_weight: a.log_weight + b.log_weight,
            entropy: a.entropy + b.entropy,
        }
    }
    #[inline(always)]
    fn lift(theta: f64) -> EntropyValue {
        EntropyValue {
            log_weight: theta,
            entropy: 0.0,
        }
    }
    #[inline(always)]
    fn shift(v: EntropyValue, theta: f64) -> EntropyValue {
        EntropyValue {
            log_weight: v.log_weight + theta,
            entropy: v.entropy,
        }
    }
    #[inline(always)]
    fn weight(v: EntropyValue) -> f64 {
        v.log_weight
    }
    #[inline]
    fn sum(xs: &mut [EntropyValue]) -> EntropyValue {
        let m = xs
            .iter()
            .fold(f64::NEG_INFINITY, |m, v| m.max(v.log_weight));
        if m == f64::NEG_INFINITY {
            return ZERO;
        }
        mix(xs.iter().map(|v| (v.log_weight, v.entropy)), m)
    }
    #[inline]
    fn sum_shifted(xs: &[EntropyValue], ws: &[f64], buf: &mut [EntropyValue]) -> EntropyValue {
        let n = xs.len().min(ws.len());
        let buf = &mut buf[..n];
        let mut m = f64::NEG_INFINITY;
        for ((o, x), &w) in buf.iter_mut().zip(&xs[..n]).zip(&ws[..n]) {
            *o = Self::shift(*x, w);
            m = m.max(o.log_weight);
        }
        if m == f64::NEG_INFINITY {
            return ZERO;
        }
        mix(buf.iter().map(|v| (v.log_weight, v.entropy)), m)
    }
    #[inline(always)]
    fn to_words(v: EntropyValue, out: &mut [f64]) {
        out[0] = v.log_weight;
        out[1] = v.entropy;
    }
    #[inline(always)]
    fn from_words(words: &[f64]) -> EntropyValue {
        EntropyValue {
            log_weight: words[0],
            entropy: words[1],
        }
    }
}
