//! The laws, the `-inf` rules and the agreement of every fast reduction with its plain
//! definition, for every semiring of the crate.

use crate::kernels::logsumexp;
use crate::{
    EntropySemiring, EntropyValue, Lag, LinearMatrix, LinearRing, LogSemiring, Matrix, MaxSemiring,
    PlainMatrix, PlainRing, Ring, Semiring,
};

const NINF: f64 = f64::NEG_INFINITY;

/// A small deterministic generator (xorshift64*), so this leaf crate needs no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `|a - b| <= tol · max(1, |a|, |b|)`, equal infinities included.
fn close(a: f64, b: f64, tol: f64) -> bool {
    a == b || (a - b).abs() <= tol * a.abs().max(b.abs()).max(1.0)
}

/// Log-weights spanning the range the laws must hold on.
fn weights() -> Vec<f64> {
    vec![
        NINF, -1e300, -1e4, -3.5, -1.0, 0.0, 0.5, 2.0, 1e3, 1e4, 1e300,
    ]
}

/// A semiring under test: its elements, and how to compare two of them.
trait UnderTest: Semiring {
    fn samples() -> Vec<Self::Value>;
    fn close(a: Self::Value, b: Self::Value, tol: f64) -> bool;
    /// Whether `a` is moderate enough for distributivity to hold to rounding (at 1e300 the
    /// `ln 2` of a log-add disappears before the product cancels it).
    fn moderate(a: Self::Value) -> bool {
        let w = Self::weight(a);
        w.abs() <= 1e4 || w == NINF
    }
}

impl UnderTest for LogSemiring {
    fn samples() -> Vec<f64> {
        weights()
    }
    fn close(a: f64, b: f64, tol: f64) -> bool {
        close(a, b, tol)
    }
}

impl UnderTest for MaxSemiring {
    fn samples() -> Vec<f64> {
        weights()
    }
    fn close(a: f64, b: f64, tol: f64) -> bool {
        close(a, b, tol)
    }
}

impl UnderTest for EntropySemiring {
    fn samples() -> Vec<EntropyValue> {
        let mut out = vec![EntropySemiring::zero(), EntropySemiring::one()];
        for (n, &w) in weights().iter().enumerate().skip(1) {
            out.push(EntropyValue {
                log_weight: w,
                entropy: [0.0, 0.3, 2.5, 17.0][n % 4],
            });
        }
        out
    }
    fn close(a: EntropyValue, b: EntropyValue, tol: f64) -> bool {
        if a.log_weight == NINF && b.log_weight == NINF {
            return true; // every zero is the same set, whatever its entropy field says
        }
        // The mixing rule takes differences of log-weights, so the entropy carries absolute
        // errors of the order of the log-weights' rounding: compare it on their scale.
        let scale = a.log_weight.abs().max(b.log_weight.abs()).max(1.0);
        close(a.log_weight, b.log_weight, tol)
            && (a.entropy - b.entropy).abs() <= tol * scale.max(a.entropy.abs())
    }
}

fn laws<S: UnderTest>() {
    let v = S::samples();
    let zero = S::zero();
    for &a in &v {
        assert!(S::close(S::plus(a, zero), a, 1e-12), "{} identity", S::NAME);
        assert!(S::close(S::times(a, S::one()), a, 1e-12));
        for &b in &v {
            assert!(
                S::close(S::plus(S::times(zero, a), b), b, 1e-12),
                "{} absorbing zero",
                S::NAME
            );
            assert!(S::close(S::plus(a, b), S::plus(b, a), 1e-12), "commutative");
            assert!(S::close(S::times(a, b), S::times(b, a), 1e-12));
            for &c in &v {
                let l = S::plus(S::plus(a, b), c);
                let r = S::plus(a, S::plus(b, c));
                assert!(
                    S::close(l, r, 1e-12),
                    "{} associative {a:?} {b:?} {c:?}: {l:?} {r:?}",
                    S::NAME
                );
                // `⊗` adds log-weights: exact up to the rounding of the largest operand, so
                // compare where that rounding is below the tolerance.
                if [a, b, c].into_iter().all(S::moderate) {
                    assert!(S::close(
                        S::times(S::times(a, b), c),
                        S::times(a, S::times(b, c)),
                        1e-12
                    ));
                    let l = S::times(a, S::plus(b, c));
                    let r = S::plus(S::times(a, b), S::times(a, c));
                    assert!(
                        S::close(l, r, 1e-12),
                        "{} distributive {a:?} {b:?} {c:?}",
                        S::NAME
                    );
                }
            }
        }
    }
    for &x in &weights() {
        for &y in &weights() {
            if x.abs() <= 1e4 && y.abs() <= 1e4 {
                let l = S::lift(x + y);
                let r = S::times(S::lift(x), S::lift(y));
                assert!(S::close(l, r, 1e-12), "{} lift is a homomorphism", S::NAME);
            }
        }
    }
    assert_eq!(S::lift(0.0), S::one());
    assert_eq!(S::weight(S::lift(NINF)), NINF);
    assert_eq!(S::weight(S::zero()), NINF);
    assert_eq!(S::weight(S::one()), 0.0);
}

#[test]
fn every_semiring_obeys_the_laws_from_minus_infinity_to_1e300() {
    laws::<LogSemiring>();
    laws::<MaxSemiring>();
    laws::<EntropySemiring>();
}

fn zero_rules<S: UnderTest>() {
    let z = S::zero();
    assert_eq!(S::plus(z, z), z, "{}", S::NAME);
    assert_eq!(S::sum(&mut []), z);
    assert_eq!(S::sum(&mut [z; 7]), z);
    assert_eq!(S::sum_shifted(&[], &[], &mut []), z);
    let mut buf = [z; 3];
    assert_eq!(S::sum_shifted(&[S::one(); 3], &[NINF; 3], &mut buf), z);
    assert_eq!(S::sum_shifted(&[z; 3], &[1.0, 2.0, 3.0], &mut buf), z);
    let mut words = vec![0.0; S::WIDTH];
    for &v in &S::samples() {
        S::to_words(v, &mut words);
        assert_eq!(S::from_words(&words), v);
        assert!(words.iter().all(|w| !w.is_nan()));
    }
}

#[test]
fn a_reduction_whose_largest_weight_is_minus_infinity_is_zero_never_nan() {
    zero_rules::<LogSemiring>();
    zero_rules::<MaxSemiring>();
    zero_rules::<EntropySemiring>();
}

fn reductions_agree_with_folded_plus<S: UnderTest>(rng: &mut Rng, scale: f64) {
    for n in 0..40 {
        let xs: Vec<S::Value> = (0..n)
            .map(|_| {
                let s = S::samples();
                let v = s[rng.below(s.len())];
                // keep magnitudes where a fold and a shifted reduction round alike
                if S::moderate(v) {
                    S::shift(v, rng.range(-scale, scale))
                } else {
                    S::shift(S::one(), rng.range(-scale, scale))
                }
            })
            .collect();
        let ws: Vec<f64> = (0..n)
            .map(|_| {
                if rng.below(6) == 0 {
                    NINF
                } else {
                    rng.range(-scale, scale)
                }
            })
            .collect();
        let folded = xs.iter().fold(S::zero(), |acc, &x| S::plus(acc, x));
        assert!(
            S::close(S::sum(&mut xs.clone()), folded, 1e-12),
            "{}",
            S::NAME
        );
        let folded = xs
            .iter()
            .zip(&ws)
            .fold(S::zero(), |acc, (&x, &w)| S::plus(acc, S::shift(x, w)));
        let mut buf = vec![S::zero(); n];
        let got = S::sum_shifted(&xs, &ws, &mut buf);
        assert!(
            S::close(got, folded, 1e-12),
            "{} n {n}: {got:?} vs {folded:?}",
            S::NAME
        );
    }
}

#[test]
fn slice_reductions_agree_with_a_fold_of_plus() {
    let mut rng = Rng(0x5eed);
    for scale in [1.0, 50.0, 700.0, 1e4] {
        reductions_agree_with_folded_plus::<LogSemiring>(&mut rng, scale);
        reductions_agree_with_folded_plus::<MaxSemiring>(&mut rng, scale);
        reductions_agree_with_folded_plus::<EntropySemiring>(&mut rng, scale);
    }
}

#[test]
fn the_entropy_of_a_sum_of_lifted_scores_is_the_entropy_of_their_distribution() {
    let mut rng = Rng(7);
    for n in 1..30 {
        for scale in [0.1, 3.0, 40.0, 1e3] {
            let scores: Vec<f64> = (0..n)
                .map(|i| {
                    if i > 0 && rng.below(5) == 0 {
                        NINF
                    } else {
                        rng.range(-scale, scale)
                    }
                })
                .collect();
            let log_z = logsumexp(&scores);
            // -Σ p log p, each term in f64 with the library exp
            let want: f64 = scores
                .iter()
                .filter(|s| s.is_finite())
                .map(|&s| (s - log_z).exp() * (log_z - s))
                .sum();
            let mut xs: Vec<EntropyValue> =
                scores.iter().map(|&s| EntropySemiring::lift(s)).collect();
            let got = EntropySemiring::sum(&mut xs);
            assert!(close(got.log_weight, log_z, 1e-14));
            assert!(
                (got.entropy - want).abs() <= 1e-13 * want.max(1.0),
                "n {n} scale {scale}: {} vs {want}",
                got.entropy
            );
            assert!(got.entropy >= 0.0);
            assert!(got.entropy <= (n as f64).ln() + 1e-13);
        }
    }
    // One dominant item: the entropy is tiny and exact, not the difference of large numbers.
    let mut xs = [1e6, 1e6 - 50.0].map(EntropySemiring::lift);
    let got = EntropySemiring::sum(&mut xs);
    let p = (-50f64).exp() / (1.0 + (-50f64).exp());
    let want = -(p * p.ln() + (1.0 - p) * (1.0 - p).ln());
    assert!(
        (got.entropy - want).abs() <= 1e-12 * want,
        "{got:?} vs {want}"
    );
}

/// The plain definition of a ring window: `⊕_i v_i ⊗ lift(w_i)` with library functions.
fn window_oracle(values: &[f64], weights: &[f64]) -> f64 {
    let terms: Vec<f64> = values.iter().zip(weights).map(|(v, w)| v + w).collect();
    logsumexp(&terms)
}

/// Drives a ring like the streaming recurrence does (push, windows of the live positions,
/// re-anchoring shifts) and compares every window with the plain definition.
fn ring_matches_the_definition<R: Ring<LogSemiring>>(seed: u64, lag: Lag, scale: f64) {
    let mut rng = Rng(seed);
    let (k, c) = (1 + rng.below(9), 1 + rng.below(5));
    let table: Vec<f64> = (0..k * c)
        .map(|_| {
            if rng.below(7) == 0 {
                NINF
            } else {
                rng.range(-scale, scale)
            }
        })
        .collect();
    let w = R::weights(&table, k, c, lag);
    let mut ring = R::new(k, c);
    let mut history: Vec<Vec<f64>> = Vec::new(); // history[q][j]
    let mut out = vec![0.0; c];
    let mut saved = vec![0.0; R::saved_words(k, c)];
    let mut shadow: Option<(R, usize)> = None;
    let mut barrier = vec![0usize; c];
    for pos in 0..60 {
        let values: Vec<f64> = (0..c)
            .map(|_| match rng.below(8) {
                0 => NINF,
                1 => rng.range(-1e4, 1e4),
                2 => rng.range(600.0, 2000.0) + pos as f64 * 50.0,
                _ => rng.range(-scale, scale),
            })
            .collect();
        ring.push(pos, &values);
        history.push(values);
        if rng.below(5) == 0 {
            let j = rng.below(c);
            let by = rng.range(-2000.0, 2000.0);
            ring.shift(j, by);
            let from = history.len().saturating_sub(k);
            for h in &mut history[from..] {
                h[j] += by;
            }
        }
        if pos == 20 {
            ring.save(&mut saved);
            shadow = Some((ring.clone(), pos));
        }
        // Windows as the streaming recurrence reads them: every position since the label's
        // last barrier (a `-inf` score), at most K.
        for b in barrier.iter_mut() {
            if rng.below(12) == 0 {
                *b = pos + 1;
            }
        }
        let len: Vec<usize> = barrier.iter().map(|&b| k.min(pos + 1 - b)).collect();
        let first: Vec<usize> = len.iter().map(|&n| pos + 1 - n).collect();
        ring.sums(&first, &len, &w, &mut out);
        for j in 0..c {
            let n = len[j];
            let vals: Vec<f64> = (first[j]..first[j] + n).map(|q| history[q][j]).collect();
            let ws: Vec<f64> = (0..n)
                .map(|i| {
                    let d = match lag {
                        Lag::FromEnd => n - i,
                        Lag::FromStart => i + 1,
                    };
                    table[j * k + d - 1]
                })
                .collect();
            let want = window_oracle(&vals, &ws);
            let scale = vals
                .iter()
                .zip(&ws)
                .map(|(v, w)| (v + w).abs())
                .filter(|x| x.is_finite())
                .fold(1.0f64, f64::max);
            assert!(
                out[j] == want || (out[j] - want).abs() <= 1e-13 * scale,
                "seed {seed} pos {pos} label {j}: {} vs {want}",
                out[j]
            );
            for (i, q) in (first[j]..first[j] + n).enumerate() {
                assert_eq!(ring.get(j, q), vals[i]);
            }
        }
    }
    // A restored ring behaves bitwise as the saved one.
    let (mut original, _) = shadow.expect("saved at position 20");
    let mut restored = R::new(k, c);
    restored.restore(&saved);
    let first = vec![21 - k.min(21); c];
    let len = vec![k.min(21); c];
    let (mut a, mut b) = (vec![0.0; c], vec![0.0; c]);
    original.sums(&first, &len, &w, &mut a);
    restored.sums(&first, &len, &w, &mut b);
    assert_eq!(
        a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        b.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn ring_windows_equal_their_definition_through_pushes_shifts_and_restores() {
    for seed in 1..120 {
        for lag in [Lag::FromEnd, Lag::FromStart] {
            for scale in [2.0, 100.0, 1e4] {
                ring_matches_the_definition::<LinearRing>(seed, lag, scale);
                ring_matches_the_definition::<PlainRing<LogSemiring>>(seed, lag, scale);
            }
        }
    }
}

fn matrix_matches_the_definition<M: Matrix<LogSemiring>>(seed: u64) {
    let mut rng = Rng(seed);
    let c = 1 + rng.below(9);
    let mode = rng.below(4);
    let table: Vec<f64> = (0..c * c)
        .map(|_| match (mode, rng.below(6)) {
            (_, 0) => NINF,
            (1, _) => rng.range(-1e3, 1e3),
            (2, _) => rng.range(-800.0, -600.0),
            _ => rng.range(-3.0, 3.0),
        })
        .collect();
    let m = M::new(&table, c);
    let mut scratch = M::scratch(c);
    let x: Vec<f64> = (0..c)
        .map(|_| match rng.below(5) {
            0 => NINF,
            1 => rng.range(-700.0, 700.0),
            _ => rng.range(-5.0, 5.0),
        })
        .collect();
    let mut out = vec![0.0; c];
    m.apply(&x, &mut out, &mut scratch);
    for j in 0..c {
        let col: Vec<f64> = (0..c).map(|i| table[i * c + j]).collect();
        let want = window_oracle(&x, &col);
        let scale = x
            .iter()
            .zip(&col)
            .map(|(a, b)| (a + b).abs())
            .filter(|v| v.is_finite())
            .fold(1.0f64, f64::max);
        assert!(
            out[j] == want || (out[j] - want).abs() <= 1e-13 * scale,
            "seed {seed} column {j}: {} vs {want}",
            out[j]
        );
    }
}

#[test]
fn matrix_vector_products_equal_their_definition() {
    for seed in 1..2000 {
        matrix_matches_the_definition::<LinearMatrix>(seed);
        matrix_matches_the_definition::<PlainMatrix<LogSemiring>>(seed);
    }
}

#[test]
fn the_generic_operators_serve_the_max_and_entropy_semirings() {
    // Max: a window is the best shifted entry.
    let mut ring = PlainRing::<MaxSemiring>::new(3, 1);
    let w = PlainRing::<MaxSemiring>::weights(&[0.0, -1.0, 5.0], 3, 1, Lag::FromEnd);
    for (pos, v) in [1.0, 4.0, 2.0].into_iter().enumerate() {
        ring.push(pos, &[v]);
    }
    let mut out = [0.0];
    // positions 0, 1, 2 end at 3: lags 3, 2, 1 → weights 5, -1, 0
    ring.sums(&[0], &[3], &w, &mut out);
    assert_eq!(out[0], (1.0f64 + 5.0).max(4.0 - 1.0).max(2.0));
    // Entropy: two equal entries → ln 2.
    let mut ring = PlainRing::<EntropySemiring>::new(2, 1);
    let w = PlainRing::<EntropySemiring>::weights(&[0.0, 0.0], 2, 1, Lag::FromStart);
    ring.push(1, &[EntropySemiring::lift(3.0)]);
    ring.push(2, &[EntropySemiring::lift(3.0)]);
    let mut out = [EntropySemiring::zero()];
    ring.sums(&[1], &[2], &w, &mut out);
    assert!((out[0].entropy - 2f64.ln()).abs() < 1e-15);
    assert!((out[0].log_weight - (3.0 + 2f64.ln())).abs() < 1e-15);
    let m = PlainMatrix::<EntropySemiring>::new(&[0.0, NINF, 0.0, 0.0], 2);
    let mut out = [EntropySemiring::zero(); 2];
    m.apply(
        &[EntropySemiring::lift(0.0), EntropySemiring::lift(0.0)],
        &mut out,
        &mut PlainMatrix::<EntropySemiring>::scratch(2),
    );
    // Both sources reach label 0, only the second reaches label 1.
    assert!((out[0].entropy - 2f64.ln()).abs() < 1e-15);
    assert_eq!(out[1].entropy, 0.0);
}
