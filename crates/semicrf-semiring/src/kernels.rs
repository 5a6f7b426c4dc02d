//! The numeric kernels every semiring and engine loop is built from, in one place.
//!
//! Two families:
//!
//! - **Vectorisable slice kernels** ([`exp_fast`], [`ln_fast`], [`dot`], [`max_of`],
//!   [`sum_of`], [`lse_add`], [`argmax_add`], …), written so that the compiler's
//!   auto-vectoriser handles them on the baseline target (no intrinsics, no `unsafe`):
//!   element-wise maps over slices and reductions with independent accumulators in a fixed
//!   order, so results do not depend on the thread that runs them. The semirings' slice
//!   reductions ([`Semiring::sum`](crate::Semiring::sum),
//!   [`Semiring::sum_shifted`](crate::Semiring::sum_shifted)) and the engines' hot loops call
//!   these.
//! - **Plain scalar functions** ([`log_add_exp`], [`logsumexp`]) over any float type, with the
//!   library `exp` and `ln`: the straightforward definitions, used for scalar `⊕` and by the
//!   brute-force reference.
//!
//! Every log-sum-exp here returns `-inf` when its maximum is `-inf` (no `-inf - -inf`).

use num_traits::Float;

/// `log2(e)`.
const LOG2E: f64 = std::f64::consts::LOG2_E;
/// `ln 2` split in a high part with trailing zero bits and a low correction.
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// `1.5 · 2^52`: adding it rounds to an integer kept in the low mantissa bits.
const ROUND_MAGIC: f64 = 6_755_399_441_055_744.0;
/// Below this argument `exp` is under `2^-1021` and is returned as 0 (relative to the
/// maximum term of a log-sum-exp, which is 1, such a term is far below one ulp).
const EXP_MIN_ARG: f64 = -708.0;

/// `exp(x)` for `x <= 700` (including `-inf`, which gives 0), branch-free so that loops over
/// it vectorise. Relative error below `2e-15` on `[-708, 700]`; arguments below `-708` give 0.
///
/// Range reduction `x = n·ln 2 + r`, `|r| <= ln 2 / 2`, a degree-12 Taylor polynomial for
/// `e^r` (truncation error `< 2e-16`), and `2^n` added to the exponent bits.
#[inline(always)]
pub fn exp_fast(x: f64) -> f64 {
    let small = x < EXP_MIN_ARG;
    let xc = if small { EXP_MIN_ARG } else { x };
    let t = xc * LOG2E + ROUND_MAGIC;
    let n = t - ROUND_MAGIC;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.0 / 479_001_600.0;
    p = p * r + 1.0 / 39_916_800.0;
    p = p * r + 1.0 / 3_628_800.0;
    p = p * r + 1.0 / 362_880.0;
    p = p * r + 1.0 / 40_320.0;
    p = p * r + 1.0 / 5_040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // The low bits of `t` hold `n` (two's complement inside the mantissa); shifting them to
    // the exponent field and adding scales `p` by `2^n` (the result stays normal because
    // `-1021 <= n <= 1010` and `2^-1 <= p < 2`).
    let y = f64::from_bits(p.to_bits().wrapping_add(t.to_bits() << 52));
    if small { 0.0 } else { y }
}

/// `sqrt(2)`.
const SQRT2: f64 = std::f64::consts::SQRT_2;
/// Bits of `2^52`, for exact small-integer to `f64` conversion.
const TWO52_BITS: u64 = 0x4330_0000_0000_0000;

/// `ln(x)` for normal positive `x` (and `0`, which gives `-inf`), branch-free. Relative error
/// about `1e-16`: `x = 2^e · m`, `m ∈ [sqrt(1/2), sqrt(2))`, `ln m = 2 atanh(s)` with
/// `s = (m-1)/(m+1)`, `|s| < 0.172`, by its odd series to `s^21`.
#[inline(always)]
pub fn ln_fast(x: f64) -> f64 {
    let bits = x.to_bits();
    let m0 = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    let big = m0 > SQRT2;
    let m = if big { m0 * 0.5 } else { m0 };
    // The biased exponent as an exact f64 (it is below 2^11).
    let biased = f64::from_bits((bits >> 52) | TWO52_BITS) - f64::from_bits(TWO52_BITS);
    let e = biased - 1023.0 + if big { 1.0 } else { 0.0 };
    let f = m - 1.0;
    let s = f / (m + 1.0);
    let s2 = s * s;
    let mut q = 1.0 / 21.0;
    q = q * s2 + 1.0 / 19.0;
    q = q * s2 + 1.0 / 17.0;
    q = q * s2 + 1.0 / 15.0;
    q = q * s2 + 1.0 / 13.0;
    q = q * s2 + 1.0 / 11.0;
    q = q * s2 + 1.0 / 9.0;
    q = q * s2 + 1.0 / 7.0;
    q = q * s2 + 1.0 / 5.0;
    q = q * s2 + 1.0 / 3.0;
    let lnm = 2.0 * s + 2.0 * s * s2 * q;
    let y = e * LN2_HI + (lnm + e * LN2_LO);
    if x == 0.0 { f64::NEG_INFINITY } else { y }
}

/// `Σ_i a[i] · b[i]` with eight accumulators, fixed order (`a` and `b` of equal length).
#[inline]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut s = [0.0f64; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..8 {
            s[l] += x[l] * y[l];
        }
    }
    for (l, (x, y)) in ca.remainder().iter().zip(cb.remainder()).enumerate() {
        s[l] += x * y;
    }
    ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

/// `x[i] = ln(x[i])` in place, for normal positive `x[i]` or 0.
#[inline]
pub fn ln_in_place(x: &mut [f64]) {
    for v in x.iter_mut() {
        *v = ln_fast(*v);
    }
}

/// `x[i] = exp(x[i])` in place, for `x[i] <= 700`.
#[inline]
pub fn exp_in_place(x: &mut [f64]) {
    for v in x.iter_mut() {
        *v = exp_fast(*v);
    }
}

/// `out[i] = a[i] + b[i]`; returns `max_i out[i]` (`-inf` for empty input).
#[inline]
pub fn add_max(a: &[f64], b: &[f64], out: &mut [f64]) -> f64 {
    let n = out.len();
    let (a, b) = (&a[..n], &b[..n]);
    for i in 0..n {
        out[i] = a[i] + b[i];
    }
    max_of(out)
}

/// `max_i x[i]` with four accumulators (`-inf` for empty input).
#[inline]
pub fn max_of(x: &[f64]) -> f64 {
    let mut m = [f64::NEG_INFINITY; 4];
    let mut chunks = x.chunks_exact(4);
    for c in &mut chunks {
        for l in 0..4 {
            m[l] = if c[l] > m[l] { c[l] } else { m[l] };
        }
    }
    for &v in chunks.remainder() {
        m[0] = if v > m[0] { v } else { m[0] };
    }
    let a = if m[1] > m[0] { m[1] } else { m[0] };
    let b = if m[3] > m[2] { m[3] } else { m[2] };
    if b > a { b } else { a }
}

/// `x[i] = exp(x[i] - m)` in place, returns `Σ_i x[i]` (four accumulators, fixed order).
/// `m` must be finite and `>= max x`.
#[inline]
pub fn exp_shift_sum(x: &mut [f64], m: f64) -> f64 {
    for v in x.iter_mut() {
        *v = exp_fast(*v - m);
    }
    sum_of(x)
}

/// `Σ_i exp(x[i] - m)` with the library `exp` and four accumulators in a fixed order, `x`
/// untouched; `m` must be finite and `>= max x`.
///
/// For a long reduction whose terms are not needed afterwards this is the fastest form
/// measured: the C library picks its `exp` at run time for the machine (an FMA version on
/// current x86-64), where [`exp_fast`] is compiled for the baseline target, and four
/// independent accumulators keep several `exp` calls in flight. (Measured on the 2-core
/// x86-64 development machine: 2.9 ns per term against 3.4 ns for [`exp_shift_sum`].)
#[inline]
pub fn sum_exp_shifted(x: &[f64], m: f64) -> f64 {
    let mut s = [0.0f64; 4];
    let mut chunks = x.chunks_exact(4);
    for c in &mut chunks {
        for l in 0..4 {
            s[l] += (c[l] - m).exp();
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        s[l] += (v - m).exp();
    }
    (s[0] + s[1]) + (s[2] + s[3])
}

/// `Σ_i x[i]` with four accumulators, fixed order.
#[inline]
pub fn sum_of(x: &[f64]) -> f64 {
    let mut s = [0.0f64; 4];
    let mut chunks = x.chunks_exact(4);
    for c in &mut chunks {
        for l in 0..4 {
            s[l] += c[l];
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        s[l] += v;
    }
    (s[0] + s[1]) + (s[2] + s[3])
}

/// `log Σ_i exp(a[i] + b[i])` using `buf` as scratch; `-inf` when every term is `-inf`.
/// On return `buf[i] = exp(a[i] + b[i] - m)` and the pair `(m, Σ buf)` is also returned so
/// callers can form normalised weights.
#[inline]
pub fn lse_add(a: &[f64], b: &[f64], buf: &mut [f64]) -> (f64, f64, f64) {
    let m = add_max(a, b, buf);
    if m == f64::NEG_INFINITY {
        return (f64::NEG_INFINITY, m, 0.0);
    }
    let s = exp_shift_sum(buf, m);
    (m + s.ln(), m, s)
}

/// `max_i (a[i] + b[i])` and an index attaining it: the first one, or the last one when
/// `prefer_last` (used where the slice runs in decreasing duration). All `-inf` gives
/// index 0 (first) or `len - 1` (last). `buf` is scratch of the same length.
#[inline]
pub fn argmax_add(a: &[f64], b: &[f64], prefer_last: bool, buf: &mut [f64]) -> (f64, usize) {
    let buf = &mut buf[..a.len()];
    let m = add_max(a, b, buf);
    let arg = if prefer_last {
        buf.iter().rposition(|&x| x == m)
    } else {
        buf.iter().position(|&x| x == m)
    };
    (m, arg.unwrap_or(0))
}

/// `log(exp(a) + exp(b))`, with `log_add_exp(-inf, -inf) = -inf`.
///
/// ```
/// use semicrf_semiring::kernels::log_add_exp;
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

/// `log Σ exp(x)` over a slice, with the max shift and the library `exp`: the plain
/// definition, used by the brute-force reference. Returns `-inf` for an empty slice or when
/// every element is `-inf`.
///
/// ```
/// use semicrf_semiring::kernels::logsumexp;
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

    #[test]
    fn exp_matches_the_library_exp_on_its_domain() {
        let mut worst = 0.0f64;
        let mut x = -707.9;
        while x <= 0.0 {
            let (a, b) = (exp_fast(x), x.exp());
            worst = worst.max(((a - b) / b).abs());
            x += 0.013_7;
        }
        assert!(worst < 2e-15, "worst relative error {worst}");
        assert_eq!(exp_fast(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp_fast(-1e300), 0.0);
        assert_eq!(exp_fast(0.0), 1.0);
        let mut x = 0.0;
        while x <= 700.0 {
            let (a, b) = (exp_fast(x), x.exp());
            worst = worst.max(((a - b) / b).abs());
            x += 0.0917;
        }
        assert!(worst < 2e-15, "worst relative error {worst}");
    }

    #[test]
    fn ln_matches_the_library_ln_on_normal_numbers() {
        let mut worst = 0.0f64;
        let mut x = 1e-300;
        while x < 1e300 {
            for f in [1.0, 1.1, 1.41, 1.42, 1.7, 1.99] {
                let y = x * f;
                let (a, b) = (ln_fast(y), y.ln());
                worst = worst.max((a - b).abs() / b.abs().max(1.0));
            }
            x *= 3.7;
        }
        for y in [1.0, 1.0 + 1e-12, 1.0 - 1e-12, 0.999, 1.001, 0.5, 2.0] {
            let (a, b) = (ln_fast(y), f64::ln(y));
            worst = worst.max((a - b).abs() / b.abs().max(1e-300));
        }
        assert!(worst < 1e-14, "worst error {worst}");
        assert_eq!(ln_fast(0.0), f64::NEG_INFINITY);
        assert_eq!(ln_fast(1.0), 0.0);
    }

    #[test]
    fn log_sum_exp_of_only_minus_infinity_is_minus_infinity() {
        let a = [f64::NEG_INFINITY; 5];
        let b = [0.0; 5];
        let mut buf = [0.0; 5];
        assert_eq!(lse_add(&a, &b, &mut buf).0, f64::NEG_INFINITY);
        let a = [1.0, f64::NEG_INFINITY, 2.0, 0.5, -3.0];
        let want = a.iter().map(|x: &f64| x.exp()).sum::<f64>().ln();
        assert!((lse_add(&a, &b, &mut buf).0 - want).abs() < 1e-14);
    }
}
