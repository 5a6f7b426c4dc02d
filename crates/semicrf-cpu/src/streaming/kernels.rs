//! Small numeric kernels the streaming recurrences are built from, written so that the
//! compiler's auto-vectoriser handles them on the baseline target (no intrinsics, no
//! `unsafe`): element-wise maps over slices and reductions with four independent
//! accumulators in a fixed order (results do not depend on the thread that runs them).

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

/// `exp(x)` for `x <= 0` (including `-inf`, which gives 0), branch-free so that loops over it
/// vectorise. Relative error below `1e-15` on `[-708, 0]`; arguments below `-708` give 0.
///
/// Range reduction `x = n·ln 2 + r`, `|r| <= ln 2 / 2`, a degree-12 Taylor polynomial for
/// `e^r` (truncation error `< 2e-16`), and `2^n` added to the exponent bits.
#[inline(always)]
pub(crate) fn exp_nonpos(x: f64) -> f64 {
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
    // `n >= -1021` and `p >= 2^-1`).
    let y = f64::from_bits(p.to_bits().wrapping_add(t.to_bits() << 52));
    if small { 0.0 } else { y }
}

/// `out[i] = a[i] + b[i]`; returns `max_i out[i]` (`-inf` for empty input).
#[inline]
pub(crate) fn add_max(a: &[f64], b: &[f64], out: &mut [f64]) -> f64 {
    let n = out.len();
    let (a, b) = (&a[..n], &b[..n]);
    for i in 0..n {
        out[i] = a[i] + b[i];
    }
    max_of(out)
}

/// `max_i x[i]` with four accumulators (`-inf` for empty input).
#[inline]
pub(crate) fn max_of(x: &[f64]) -> f64 {
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
pub(crate) fn exp_shift_sum(x: &mut [f64], m: f64) -> f64 {
    for v in x.iter_mut() {
        *v = exp_nonpos(*v - m);
    }
    sum_of(x)
}

/// `Σ_i x[i]` with four accumulators, fixed order.
#[inline]
pub(crate) fn sum_of(x: &[f64]) -> f64 {
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
pub(crate) fn lse_add(a: &[f64], b: &[f64], buf: &mut [f64]) -> (f64, f64, f64) {
    let m = add_max(a, b, buf);
    if m == f64::NEG_INFINITY {
        return (f64::NEG_INFINITY, m, 0.0);
    }
    let s = exp_shift_sum(buf, m);
    (m + s.ln(), m, s)
}

/// `max_i (a[i] + b[i])` and the first index attaining it, preferring the *last* index on
/// ties when `prefer_last` (used where the slice runs in decreasing duration).
#[inline]
pub(crate) fn argmax_add(a: &[f64], b: &[f64], prefer_last: bool) -> (f64, usize) {
    let mut best = f64::NEG_INFINITY;
    let mut arg = if prefer_last {
        a.len().saturating_sub(1)
    } else {
        0
    };
    for i in 0..a.len() {
        let x = a[i] + b[i];
        if x > best || (prefer_last && x == best && x != f64::NEG_INFINITY) {
            best = x;
            arg = i;
        }
    }
    (best, arg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_the_library_exp_on_its_domain() {
        let mut worst = 0.0f64;
        let mut x = -707.9;
        while x <= 0.0 {
            let (a, b) = (exp_nonpos(x), x.exp());
            worst = worst.max(((a - b) / b).abs());
            x += 0.013_7;
        }
        assert!(worst < 2e-15, "worst relative error {worst}");
        assert_eq!(exp_nonpos(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpos(-1e300), 0.0);
        assert_eq!(exp_nonpos(0.0), 1.0);
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
