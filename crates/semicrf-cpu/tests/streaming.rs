//! The streaming engine on what is particular to it, against the f64 reference oracle: the
//! linear-domain operators at magnitudes that force their fallbacks, the checkpoints, the
//! pipelined backward, the re-anchored prefix sums. (The cases every engine must pass are
//! in the root conformance suite.)

use ndarray::{ArrayD, IxDyn};
use semicrf_core::reference::Reference;
use semicrf_core::testing::{
    GenSpec, TransitionKind, positive_upstream, random_problem, wide_spec,
};
use semicrf_core::{
    Backward, Engine, EngineInfo, EntropySemiring, Error, LogSemiring, MaxSemiring,
    OwnedPotentials, Problem, Scalar, Semiring, gold_score,
};
use semicrf_cpu::{Parallelism, StreamingEngine};

/// Entropies agree within `1e-10` relative to the size of the log-weights they mix (their
/// rounding is relative to the scores, not to the entropy, which is small when one
/// segmentation dominates), and their log Z within `1e-10` relative.
fn entropy_close(a: semicrf_core::EntropyValue, b: semicrf_core::EntropyValue) -> bool {
    let scale = b.log_weight.abs().max(b.entropy.abs()).max(1.0);
    close(a.log_weight, b.log_weight, 1e-10)
        && (b.log_weight == f64::NEG_INFINITY || (a.entropy - b.entropy).abs() <= 1e-10 * scale)
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    if a == b {
        return true;
    }
    (a - b).abs() <= rel * b.abs().max(1.0)
}

/// Seeded stress problems: medium shapes with every input, and magnitudes that force the
/// linear-domain operators to rebuild and fall back to the log domain.
fn problems() -> Vec<(String, OwnedPotentials<f64>)> {
    let mut out = Vec::new();
    for (i, (b, t, k, c)) in [(3, 40, 6, 4), (2, 25, 9, 3), (2, 30, 4, 7), (1, 17, 30, 2)]
        .into_iter()
        .enumerate()
    {
        for tk in [TransitionKind::Static, TransitionKind::DurationDependent] {
            let mut g = GenSpec::new(b, t, k, c);
            g.transition = tk;
            g.ragged = true;
            g.boundaries = i % 2 == 0;
            g.start = true;
            g.end = true;
            g.forbid_scores = if i == 1 { 0.1 } else { 0.0 };
            g.forbid_transitions = if i == 2 { 0.4 } else { 0.0 };
            out.push((
                format!("medium {i} {tk:?}"),
                random_problem(100 + i as u64, &g),
            ));
        }
    }
    // Magnitudes that force the linear-domain paths to rebase and fall back to the exact
    // log-domain computation: large scores, long windows that drift, `-inf` durations.
    for (i, (scale, t, k, c)) in [
        (50.0, 120, 20, 3),
        (1e3, 60, 8, 4),
        (1e4, 40, 6, 3),
        (300.0, 80, 30, 2),
        (5.0, 400, 200, 3),
        (20.0, 300, 120, 2),
    ]
    .into_iter()
    .enumerate()
    {
        let mut g = GenSpec::new(2, t, k, c);
        g.scale = scale;
        g.ragged = true;
        g.start = true;
        g.end = true;
        g.boundaries = i % 2 == 1;
        g.forbid_scores = if i == 2 { 0.05 } else { 0.0 };
        g.forbid_transitions = if i == 3 { 0.3 } else { 0.0 };
        let mut p = random_problem(200 + i as u64, &g);
        if let Some(d) = p.duration.as_mut() {
            for (n, x) in d.iter_mut().enumerate() {
                if n % 5 == 1 {
                    *x = f64::NEG_INFINITY;
                }
            }
        }
        out.push((format!("extreme {i}"), p));
    }
    out
}

fn forward<S: Semiring, F: Scalar, E: Engine<F>>(e: &E, p: &OwnedPotentials<F>) -> Vec<S::Value> {
    let v = p.view().unwrap();
    e.forward::<S>(&Problem::Structured(v)).unwrap()
}

fn backward<F: Scalar, E: Engine<F>>(
    e: &E,
    p: &OwnedPotentials<F>,
    g: &[f64],
) -> semicrf_core::Result<Backward> {
    let v = p.view().unwrap();
    e.backward(&Problem::Structured(v), g)
}

/// Largest violation of `|a - b| <= abs + rel·|b|` over every gradient and the marginals.
fn grad_err(a: &Backward, b: &Backward, rel: f64) -> f64 {
    let mut worst = 0.0f64;
    let mut cmp = |x: &[f64], y: &[f64]| {
        assert_eq!(x.len(), y.len());
        for (u, v) in x.iter().zip(y) {
            assert!(u.is_finite(), "non-finite gradient {u}");
            let e = (u - v).abs() / (rel * v.abs().max(1.0));
            worst = worst.max(e);
        }
    };
    let (ga, gb) = (&a.grad, &b.grad);
    let s = |x: &Option<ndarray::Array3<f64>>| -> Option<Vec<f64>> {
        x.as_ref().map(|a| a.iter().copied().collect())
    };
    let v: fn(&Option<ArrayD<f64>>) -> Option<Vec<f64>> =
        |x| x.as_ref().map(|a| a.iter().copied().collect());
    cmp(&s(&ga.scores).unwrap(), &s(&gb.scores).unwrap());
    cmp(&v(&ga.transition).unwrap(), &v(&gb.transition).unwrap());
    assert_eq!(
        ga.transition.as_ref().unwrap().shape(),
        gb.transition.as_ref().unwrap().shape()
    );
    cmp(
        &ga.duration
            .as_ref()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        &gb.duration
            .as_ref()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
    );
    cmp(
        ga.start.as_ref().unwrap().as_slice().unwrap(),
        gb.start.as_ref().unwrap().as_slice().unwrap(),
    );
    cmp(
        ga.end.as_ref().unwrap().as_slice().unwrap(),
        gb.end.as_ref().unwrap().as_slice().unwrap(),
    );
    assert_eq!(ga.begin_boundary.is_some(), gb.begin_boundary.is_some());
    assert_eq!(ga.end_boundary.is_some(), gb.end_boundary.is_some());
    if ga.begin_boundary.is_some() {
        cmp(
            &s(&ga.begin_boundary).unwrap(),
            &s(&gb.begin_boundary).unwrap(),
        );
        cmp(&s(&ga.end_boundary).unwrap(), &s(&gb.end_boundary).unwrap());
    }
    cmp(
        a.boundary_marginals.as_slice().unwrap(),
        b.boundary_marginals.as_slice().unwrap(),
    );
    for (x, y) in a.log_z.iter().zip(&b.log_z) {
        worst = worst.max((x - y).abs() / (rel * y.abs().max(1.0)));
    }
    worst
}

#[test]
fn every_semiring_and_viterbi_match_the_oracle_on_the_stress_problems() {
    for (name, p) in problems() {
        for delta in [None, Some(1), Some(5)] {
            if let Err(e) = check_against_oracle(&p, delta, grad_tol(&p)) {
                panic!("{name} delta {delta:?}: {e}");
            }
        }
    }
}

/// Gradients of `Σ_b g_b log Z_b` scale with the (positive) upstream `g`, and so do their
/// rounding errors: tolerances calibrated for `g = 1` are multiplied by `max(1, max_b g_b)`.
fn scale(g: &[f64]) -> f64 {
    g.iter().fold(1.0f64, |m, x| m.max(x.abs()))
}

/// The relative tolerance of gradients: `1e-10`, widened for inputs whose path scores are so
/// large (`max |score| · T > 1e4`) that the log-space arguments of the marginals themselves
/// carry rounding errors above `1e-11` in any `f64` implementation.
fn grad_tol(p: &OwnedPotentials<f64>) -> f64 {
    let big = p
        .scores
        .iter()
        .filter(|x| x.is_finite())
        .fold(0.0f64, |m, x| m.max(x.abs()));
    1e-10 * (big * p.scores.shape()[1] as f64 / 1e4).max(1.0)
}

#[test]
fn gradients_match_the_reference_backward_within_1e_10() {
    let e = StreamingEngine::new();
    let mut worst = 0.0f64;
    for (i, (name, p)) in problems().into_iter().enumerate() {
        let g = positive_upstream(i as u64, p.lengths.len());
        let want = backward(&Reference, &p, &g);
        let got = backward(&e, &p, &g);
        match (got, want) {
            (Ok(a), Ok(b)) => {
                let err = grad_err(&a, &b, grad_tol(&p) * scale(&g));
                assert!(err <= 1.0, "{name}: error {err} × tolerance");
                if err > 0.3 {
                    eprintln!("{name}: {err} × tolerance");
                }
                worst = worst.max(err);
            }
            (Err(Error::Infeasible { sequence: x }), Err(Error::Infeasible { sequence: y })) => {
                assert_eq!(x, y, "{name}")
            }
            (a, b) => panic!("{name}: {a:?} vs {b:?}"),
        }
    }
    eprintln!("worst gradient error: {worst} × tolerance");
}

#[test]
fn results_do_not_depend_on_the_checkpoint_interval() {
    let mut g = GenSpec::new(3, 70, 7, 4).everything();
    g.forbid_scores = 0.05;
    for tk in [TransitionKind::Static, TransitionKind::DurationDependent] {
        g.transition = tk;
        let p = random_problem(3, &g);
        let up = [1.0, -0.5, 2.0];
        let base = backward(&Reference, &p, &up).unwrap();
        for delta in [1, 2, 5, 7, 8, 13, 23, 69, 70, 71, 500] {
            let e = StreamingEngine::new().checkpoint_interval(Some(delta));
            let got = backward(&e, &p, &up).unwrap();
            let err = grad_err(&got, &base, 1e-10);
            assert!(err <= 1.0, "{tk:?} delta {delta}: error {err} × tolerance");
        }
    }
}

#[test]
fn sequential_and_rayon_results_are_bitwise_identical() {
    // B = 7 spreads sequences over threads; B = 1 pipelines the backward of one sequence.
    for (batch, len) in [(7, 120), (1, 400)] {
        let mut g = GenSpec::new(batch, len, 9, 5);
        g.ragged = true;
        g.boundaries = true;
        for tk in [TransitionKind::Static, TransitionKind::DurationDependent] {
            g.transition = tk;
            let p = random_problem(11, &g);
            let up = positive_upstream(3, batch);
            let seq = StreamingEngine::new().parallelism(Parallelism::Sequential);
            let par = StreamingEngine::new().parallelism(Parallelism::Rayon);
            let a = backward(&seq, &p, &up).unwrap();
            let b = backward(&par, &p, &up).unwrap();
            assert_eq!(a, b);
            assert_eq!(
                forward::<LogSemiring, _, _>(&seq, &p),
                forward::<LogSemiring, _, _>(&par, &p)
            );
            assert_eq!(
                forward::<EntropySemiring, _, _>(&seq, &p),
                forward::<EntropySemiring, _, _>(&par, &p)
            );
            let v = Problem::Structured(p.view().unwrap());
            assert_eq!(
                Engine::<f64>::viterbi(&seq, &v).unwrap(),
                Engine::<f64>::viterbi(&par, &v).unwrap()
            );
        }
    }
}

#[test]
fn edge_input_is_unsupported() {
    let p = random_problem(1, &GenSpec::new(1, 4, 2, 2));
    let v = p.view().unwrap();
    let edges = semicrf_core::materialize(&v);
    let ep = semicrf_core::EdgePotentials::new(edges.view(), &p.lengths).unwrap();
    let e = StreamingEngine::new();
    let q = semicrf_core::Query::of(&Problem::Edges(ep.clone()), semicrf_core::Op::Backward);
    assert!(matches!(e.check(&q), Err(Error::Unsupported { .. })));
    assert!(matches!(
        e.forward::<LogSemiring>(&Problem::Edges(ep)),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn memory_required_grows_like_sqrt_t_for_backward_and_is_flat_for_forward() {
    use semicrf_core::{Form, Op, Query, Shape};
    let e = StreamingEngine::new();
    let q = |t: usize, op| Query {
        shape: Shape::new(1, t, 100, 24),
        form: Form::Structured {
            duration_dependent_transition: false,
            boundaries: [false, false],
        },
        op,
        dtype_bytes: 4,
        threads: 16,
    };
    for op in [
        Op::forward::<LogSemiring>(),
        Op::forward::<EntropySemiring>(),
    ] {
        let f1 = e.memory_required(&q(10_000, op)).unwrap();
        let f2 = e.memory_required(&q(1_000_000, op)).unwrap();
        assert_eq!(f1, f2);
    }
    let b1 = e.memory_required(&q(10_000, Op::Backward)).unwrap() as f64;
    let b2 = e.memory_required(&q(1_000_000, Op::Backward)).unwrap() as f64;
    assert!(b2 / b1 < 12.0 && b2 / b1 > 5.0, "{b1} {b2}");
}

/// Longer extreme problems (T up to 40, K up to T + 5, |scores| up to 1e4) against the oracle.
#[test]
fn extreme_longer_problems_match_the_oracle() {
    let e = StreamingEngine::new();
    for seed in 0..3000u64 {
        let g = wide_spec(seed);
        let p = random_problem(seed, &g);
        let pairs = [
            (
                forward::<LogSemiring, _, _>(&e, &p),
                forward::<LogSemiring, _, _>(&Reference, &p),
            ),
            (
                forward::<MaxSemiring, _, _>(&e, &p),
                forward::<MaxSemiring, _, _>(&Reference, &p),
            ),
        ];
        for (s, (got, want)) in pairs.iter().enumerate() {
            for (b, (x, y)) in got.iter().zip(want).enumerate() {
                assert!(
                    close(*x, *y, 1e-10),
                    "seed {seed} semiring {s} b={b}: {x} vs {y} {g:?}"
                );
            }
        }
        let got = forward::<EntropySemiring, _, _>(&e, &p);
        let want = forward::<EntropySemiring, _, _>(&Reference, &p);
        for (b, (x, y)) in got.iter().zip(&want).enumerate() {
            assert!(
                entropy_close(*x, *y),
                "seed {seed} b={b}: entropy {x:?} vs {y:?}"
            );
        }
        if seed % 3 == 0 {
            let up = positive_upstream(seed, g.batch);
            if let (Ok(a), Ok(b)) = (backward(&e, &p, &up), backward(&Reference, &p, &up)) {
                let err = grad_err(&a, &b, grad_tol(&p) * scale(&up));
                assert!(err <= 1.0, "seed {seed}: gradient error {err} × tolerance");
            }
        }
    }
}

// Regression tests for numerical defects found by adversarial problems: the linear-domain
// guards, the checkpoint restore and the prefix sums.

/// One sequence of length `t`; every optional tensor present and zero except the boundaries
/// (present when `boundaries`).
fn blank(t: usize, k: usize, c: usize, boundaries: bool) -> OwnedPotentials<f64> {
    OwnedPotentials {
        scores: ArrayD::zeros(IxDyn(&[1, t, c])),
        transition: Some(ArrayD::zeros(IxDyn(&[c, c]))),
        duration: Some(ArrayD::zeros(IxDyn(&[k, c]))),
        start: Some(ArrayD::zeros(IxDyn(&[c]))),
        end: Some(ArrayD::zeros(IxDyn(&[c]))),
        begin_boundary: boundaries.then(|| ArrayD::zeros(IxDyn(&[1, t, c]))),
        end_boundary: boundaries.then(|| ArrayD::zeros(IxDyn(&[1, t, c]))),
        lengths: vec![t],
        max_duration: k,
    }
}

/// Checks the streaming engine (sequential, checkpoint interval `delta`) against the oracle:
/// log Z, the max-semiring forward and the Viterbi score within `1e-10` relative, the
/// Viterbi score equal to the gold score of its own segments within `1e-10` relative, and
/// every gradient within `grad_abs · max(1, |reference|)`. Returns the worst gradient error
/// as a multiple of `grad_abs`, or a description of the failure.
fn check_against_oracle(
    p: &OwnedPotentials<f64>,
    delta: Option<usize>,
    grad_abs: f64,
) -> std::result::Result<f64, String> {
    let e = StreamingEngine::new()
        .parallelism(Parallelism::Sequential)
        .checkpoint_interval(delta);
    let v = p.view().unwrap();
    let pairs = [
        (
            "log",
            forward::<LogSemiring, _, _>(&e, p),
            forward::<LogSemiring, _, _>(&Reference, p),
        ),
        (
            "max",
            forward::<MaxSemiring, _, _>(&e, p),
            forward::<MaxSemiring, _, _>(&Reference, p),
        ),
    ];
    for (s, got, want) in &pairs {
        for (b, (x, y)) in got.iter().zip(want).enumerate() {
            if !close(*x, *y, 1e-10) {
                return Err(format!("{s} b={b}: {x} vs oracle {y}"));
            }
        }
    }
    let got = forward::<EntropySemiring, _, _>(&e, p);
    let oracle = forward::<EntropySemiring, _, _>(&Reference, p);
    for (b, (x, y)) in got.iter().zip(&oracle).enumerate() {
        if !entropy_close(*x, *y) {
            return Err(format!("entropy b={b}: {x:?} vs oracle {y:?}"));
        }
    }
    let want = forward::<MaxSemiring, _, _>(&Reference, p);
    let dec = Engine::<f64>::viterbi(&e, &Problem::Structured(v.clone())).unwrap();
    for (b, d) in dec.iter().enumerate() {
        if !close(d.score, want[b], 1e-10) {
            return Err(format!("Viterbi b={b}: {} vs oracle {}", d.score, want[b]));
        }
        if d.score == f64::NEG_INFINITY {
            continue;
        }
        let gold = gold_score(&v, b, &d.segments).unwrap();
        if !close(gold, d.score, 1e-10) {
            return Err(format!("Viterbi b={b}: score {} vs gold {gold}", d.score));
        }
    }
    let up = vec![1.0; p.lengths.len()];
    match (backward(&e, p, &up), backward(&Reference, p, &up)) {
        (Ok(a), Ok(b)) => {
            let err = grad_err(&a, &b, grad_abs);
            if err > 1.0 {
                return Err(format!("gradients: error {err} × {grad_abs:e}"));
            }
            Ok(err)
        }
        (Err(Error::Infeasible { .. }), Err(Error::Infeasible { .. })) => Ok(0.0),
        (a, b) => Err(format!("backward: {a:?} vs {b:?}")),
    }
}

/// Whether two backward results are bitwise identical.
fn bitwise_equal(a: &Backward, b: &Backward) -> bool {
    let bits = |x: &[f64], y: &[f64]| {
        x.len() == y.len() && x.iter().zip(y).all(|(u, v)| u.to_bits() == v.to_bits())
    };
    let d3 = |x: &Option<ndarray::Array3<f64>>| x.as_ref().map(|a| a.iter().copied().collect());
    let dd = |x: &Option<ArrayD<f64>>| x.as_ref().map(|a| a.iter().copied().collect());
    let d2 = |x: &Option<ndarray::Array2<f64>>| x.as_ref().map(|a| a.iter().copied().collect());
    let d1 = |x: &Option<ndarray::Array1<f64>>| x.as_ref().map(|a| a.iter().copied().collect());
    let (ga, gb) = (&a.grad, &b.grad);
    type Pair = (Option<Vec<f64>>, Option<Vec<f64>>);
    let pairs: [Pair; 7] = [
        (d3(&ga.scores), d3(&gb.scores)),
        (dd(&ga.transition), dd(&gb.transition)),
        (d2(&ga.duration), d2(&gb.duration)),
        (d1(&ga.start), d1(&gb.start)),
        (d1(&ga.end), d1(&gb.end)),
        (d3(&ga.begin_boundary), d3(&gb.begin_boundary)),
        (d3(&ga.end_boundary), d3(&gb.end_boundary)),
    ];
    bits(&a.log_z, &b.log_z)
        && bits(
            a.boundary_marginals.as_slice().unwrap(),
            b.boundary_marginals.as_slice().unwrap(),
        )
        && pairs.iter().all(|(x, y)| match (x, y) {
            (Some(x), Some(y)) => bits(x, y),
            (None, None) => true,
            _ => false,
        })
}

/// `C = 1`, `K = 2`, `T = 3`: a ring entry `e^590` above its label's reference at a duration
/// whose weight `exp(-800)` underflows; the ring dot product is tiny but not negligible.
fn large_entry_times_underflowed_weight() -> OwnedPotentials<f64> {
    let mut p = blank(3, 2, 1, true);
    p.duration.as_mut().unwrap()[[1, 0]] = -800.0;
    let bb = p.begin_boundary.as_mut().unwrap();
    bb[[0, 1, 0]] = 590.0;
    bb[[0, 2, 0]] = -1190.0;
    p
}

/// The problem reversed in time (segment `(s, d, c)` becomes `(T-s-d, d, c)`): boundaries,
/// start and end swap and the transition is transposed; log Z is unchanged. Reversing moves
/// a forward-ring configuration into the backward ring.
fn reversed(p: &OwnedPotentials<f64>) -> OwnedPotentials<f64> {
    let t = p.lengths[0];
    let rev = |a: &ArrayD<f64>| {
        ArrayD::from_shape_fn(IxDyn(a.shape()), |ix| a[[ix[0], t - 1 - ix[1], ix[2]]])
    };
    let mut q = p.clone();
    q.scores = rev(&p.scores);
    q.begin_boundary = p.end_boundary.as_ref().map(rev);
    q.end_boundary = p.begin_boundary.as_ref().map(rev);
    q.start = p.end.clone();
    q.end = p.start.clone();
    q.transition = p.transition.as_ref().map(|tr| tr.clone().reversed_axes());
    q
}

#[test]
fn a_large_ring_entry_times_an_underflowed_duration_weight_is_not_dropped() {
    let p = large_entry_times_underflowed_weight();
    for (name, q) in [("forward ring", p.clone()), ("backward ring", reversed(&p))] {
        for delta in [None, Some(1)] {
            if let Err(e) = check_against_oracle(&q, delta, 1e-10) {
                panic!("{name}, delta {delta:?}: {e}");
            }
        }
    }
    // Scores of magnitude 1e3 with boundaries, start and end, ragged lengths: every problem
    // of this family once tripped one of the linear-domain guards.
    let mut g = GenSpec::new(2, 17, 17, 3);
    g.scale = 1e3;
    g.boundaries = true;
    g.start = true;
    g.end = true;
    g.ragged = true;
    for seed in 0..100u64 {
        let p = random_problem(seed, &g);
        // Gradients: 1e-9, not 1e-10. Path scores reach 17 · 1e3 · 4 (scores, durations,
        // boundaries and transitions of that size), so log Z and the log-space arguments of
        // the marginals carry rounding errors of a few ulp(1e5) ≈ 1.5e-11 each in any f64
        // implementation, the oracle's included.
        if let Err(e) = check_against_oracle(&p, None, 1e-9) {
            panic!("seed {seed}: {e}");
        }
    }
}

/// `C = 2`: label 0 has scores `-1e4` everywhere (large ring entries, no probability mass),
/// label 1 ordinary `O(1)` scores.
fn one_label_far_below(t: usize, k: usize, dd: bool) -> OwnedPotentials<f64> {
    use rand::{Rng, SeedableRng};
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let mut p = blank(t, k, 2, false);
    for pos in 0..t {
        p.scores[[0, pos, 0]] = -1e4;
        p.scores[[0, pos, 1]] = r.random_range(-1.0..1.0);
    }
    for x in p.duration.as_mut().unwrap().iter_mut() {
        *x = r.random_range(-1.0..1.0);
    }
    if dd {
        p.transition = Some(ArrayD::from_shape_fn(IxDyn(&[k, 2, 2]), |_| {
            r.random_range(-1.0..1.0)
        }));
    } else {
        for x in p.transition.as_mut().unwrap().iter_mut() {
            *x = r.random_range(-1.0..1.0);
        }
    }
    p
}

/// A checkpoint restores the forward state exactly: a shift shared by all labels used to
/// cost the small entries the absolute precision of the largest label's (scores-gradient
/// errors 2.4e-9 static, 2.8e-9 duration-dependent, against none with a single interval).
#[test]
fn checkpointed_results_equal_single_interval_results_bitwise() {
    for dd in [false, true] {
        for t in [1000usize, 4000] {
            let p = one_label_far_below(t, 4, dd);
            let up = [1.0];
            let single = StreamingEngine::new().checkpoint_interval(Some(t + 1));
            let base = backward(&single, &p, &up).unwrap();
            for delta in [None, Some(1), Some(2), Some(3), Some(5), Some(64), Some(t)] {
                let e = StreamingEngine::new().checkpoint_interval(delta);
                let got = backward(&e, &p, &up).unwrap();
                assert!(
                    bitwise_equal(&got, &base),
                    "dd={dd} T={t} delta {delta:?}: differs from a single interval"
                );
            }
            // |log Z| reaches 4e3 and the recurrence adds T roundings of ulp(|α|) ≈ 5e-13
            // along the path: marginals can be off by ~1e-10 in any f64 implementation.
            if let Err(e) = check_against_oracle(&p, None, 1e-10 * (t as f64 / 1000.0)) {
                panic!("dd={dd} T={t}: {e}");
            }
        }
    }
}

/// `K = 1`, scores `1e4 + U(-1, 1)`, durations `-1e4`: every path score is small while the
/// prefix sums of the scores grow like `1e4 · t`.
fn compensated_scores(t: usize, c: usize, seed: u64) -> OwnedPotentials<f64> {
    use rand::{Rng, SeedableRng};
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut p = blank(t, 1, c, false);
    for x in p.scores.iter_mut() {
        *x = 1e4 + r.random_range(-1.0..1.0);
    }
    for x in p.duration.as_mut().unwrap().iter_mut() {
        *x = -1e4;
    }
    for x in p.transition.as_mut().unwrap().iter_mut() {
        *x = r.random_range(-1.0..1.0);
    }
    p
}

/// Differences of global prefix sums cancel catastrophically here (log Z was off by 3.7e-10
/// relative at T = 1000, marginals by 1.2e-8); relative to an origin re-anchored every `K`
/// positions they do not.
#[test]
fn large_scores_compensated_by_durations_do_not_cancel_through_the_prefix_sums() {
    // C = 1: a single admissible path; log Z is the sum of the noise.
    for t in [300usize, 1000, 3000] {
        let mut p = compensated_scores(t, 1, 2);
        p.transition = None;
        let want: f64 = p.scores.iter().map(|x| x - 1e4).sum();
        let got = forward::<LogSemiring, _, _>(&StreamingEngine::new(), &p)[0];
        assert!(close(got, want, 1e-10), "T={t}: {got} vs {want}");
        for delta in [None, Some(1), Some(7)] {
            if let Err(e) = check_against_oracle(&p, delta, 1e-10) {
                panic!("C=1 T={t} delta {delta:?}: {e}");
            }
        }
    }
    let mut p = compensated_scores(1000, 1, 2);
    p.transition = None;
    let got = forward::<LogSemiring, _, _>(&StreamingEngine::new(), &p)[0];
    assert!(close(got, -17.98333085621016, 1e-10), "{got}");
    for t in [50usize, 100, 300, 1000] {
        for delta in [None, Some(1), Some(13)] {
            if let Err(e) = check_against_oracle(&compensated_scores(t, 2, 1), delta, 1e-10) {
                panic!("C=2 T={t} delta {delta:?}: {e}");
            }
        }
    }
}

/// A mixture of moderate values, huge values (`|x|` up to 1e4) and `-inf`.
#[derive(Clone, Copy, Debug)]
struct Mix {
    scale: f64,
    p_big: f64,
    big: f64,
    p_inf: f64,
}

fn wide_problem(seed: u64, max_t: usize) -> OwnedPotentials<f64> {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    fn draw(r: &mut ChaCha8Rng, allow_inf: bool) -> Mix {
        Mix {
            scale: [0.0, 1.0, 10.0, 100.0, 1e3, 1e4][r.random_range(0..6)],
            p_big: [0.0, 0.0, 0.05, 0.2, 0.5][r.random_range(0..5)],
            big: [300.0, 700.0, 800.0, 1e3, 3e3, 1e4][r.random_range(0..6)],
            p_inf: if allow_inf {
                [0.0, 0.0, 0.0, 0.1, 0.4][r.random_range(0..5)]
            } else {
                0.0
            },
        }
    }
    fn fill(r: &mut ChaCha8Rng, shape: &[usize], m: Mix) -> ArrayD<f64> {
        ArrayD::from_shape_fn(IxDyn(shape), |_| {
            if m.p_inf > 0.0 && r.random_bool(m.p_inf) {
                f64::NEG_INFINITY
            } else if m.p_big > 0.0 && r.random_bool(m.p_big) {
                let s = if r.random_bool(0.5) { 1.0 } else { -1.0 };
                s * m.big * r.random_range(0.5..=1.0)
            } else if m.scale == 0.0 {
                0.0
            } else {
                r.random_range(-m.scale..=m.scale)
            }
        })
    }
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let t = if r.random_bool(0.15) {
        r.random_range(1..=max_t)
    } else {
        r.random_range(1..=25.min(max_t))
    };
    let k = match r.random_range(0..4) {
        0 => 1.max(t / 3),
        1 => t,
        2 => t + 2,
        _ => r.random_range(1..=t.max(1)),
    };
    let c = [1, 2, 3, 5][r.random_range(0..4)];
    let b = r.random_range(1..=2);
    let dd = r.random_bool(0.15);
    let ms = draw(&mut r, true);
    let scores = fill(
        &mut r,
        &[b, t, c],
        Mix {
            p_inf: ms.p_inf * 0.3,
            ..ms
        },
    );
    let mk = |r: &mut ChaCha8Rng, shape: &[usize], present: f64| {
        if !r.random_bool(present) {
            return None;
        }
        let m = draw(r, true);
        Some(fill(r, shape, m))
    };
    let transition = if dd {
        mk(&mut r, &[k, c, c], 1.0)
    } else {
        mk(&mut r, &[c, c], 0.85)
    };
    let duration = mk(&mut r, &[k, c], 0.9);
    let start = mk(&mut r, &[c], 0.6);
    let end = mk(&mut r, &[c], 0.6);
    let (begin_boundary, end_boundary) = if r.random_bool(0.6) {
        (mk(&mut r, &[b, t, c], 1.0), mk(&mut r, &[b, t, c], 1.0))
    } else {
        (None, None)
    };
    let lengths = (0..b)
        .map(|i| if i == 0 { t } else { r.random_range(1..=t) })
        .collect();
    OwnedPotentials {
        scores,
        transition,
        duration,
        start,
        end,
        begin_boundary,
        end_boundary,
        lengths,
        max_duration: k,
    }
}

/// `(T + 4) · max |finite input|`: a bound on the magnitude of any partial path score.
fn magnitude(p: &OwnedPotentials<f64>) -> f64 {
    let mut m = 0.0f64;
    let all = [
        Some(&p.scores),
        p.transition.as_ref(),
        p.duration.as_ref(),
        p.start.as_ref(),
        p.end.as_ref(),
        p.begin_boundary.as_ref(),
        p.end_boundary.as_ref(),
    ];
    for a in all.into_iter().flatten() {
        for &x in a {
            if x.is_finite() {
                m = m.max(x.abs());
            }
        }
    }
    m * (p.scores.shape()[1] as f64 + 4.0)
}

/// Random problems over a wide range: moderate values mixed with values up to 1e4 in any
/// tensor (a few around the linear-domain thresholds 600–800), `-inf` anywhere, `K` below,
/// at and above `T`, several checkpoint intervals.
#[test]
fn wide_range_random_problems_match_the_oracle() {
    let mut failures = Vec::new();
    for seed in (0..3000u64).step_by(3).chain(100_000..100_040) {
        let max_t = if seed >= 100_000 { 300 } else { 40 };
        let p = wide_problem(seed, max_t);
        let delta = [None, Some(1), Some(2), Some(3)][(seed % 4) as usize];
        // Gradients: 1e-10, widened where the inputs make that impossible. Forward and
        // backward values are path scores of size up to `magnitude` (sums of up to `T + 4`
        // inputs of size `max |input|`), each of the `T` positions adds a rounding error of
        // a few ulp of that size, and these errors enter the marginals' exponents in any
        // f64 implementation, the oracle's included; they accumulate like a random walk.
        let t = p.scores.shape()[1] as f64;
        let tol = 1e-10f64.max(4.0 * (t + 4.0).sqrt() * magnitude(&p) * f64::EPSILON);
        if let Err(e) = check_against_oracle(&p, delta, tol) {
            failures.push(format!("seed {seed} delta {delta:?}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Sequence `b` of `p` alone, cut to its length.
fn one_sequence(p: &OwnedPotentials<f64>, b: usize) -> OwnedPotentials<f64> {
    use ndarray::s;
    let l = p.lengths[b];
    let cut = |a: &ArrayD<f64>| a.slice(s![b..b + 1, ..l, ..]).to_owned().into_dyn();
    OwnedPotentials {
        scores: cut(&p.scores),
        begin_boundary: p.begin_boundary.as_ref().map(cut),
        end_boundary: p.end_boundary.as_ref().map(cut),
        lengths: vec![l],
        ..p.clone()
    }
}

/// Per-sequence results do not depend on the rest of the batch: the batch length (and with
/// it the default checkpoint interval) changes, the results do not, to the bit.
#[test]
fn batched_results_equal_one_sequence_at_a_time_bitwise() {
    let mut g = GenSpec::new(5, 90, 7, 4).everything();
    g.forbid_scores = 0.03;
    for tk in [TransitionKind::Static, TransitionKind::DurationDependent] {
        g.transition = tk;
        let p = random_problem(21, &g);
        let e = StreamingEngine::new();
        let up = vec![1.0; 5];
        let all = backward(&e, &p, &up).unwrap();
        let fw = forward::<LogSemiring, _, _>(&e, &p);
        let mx = forward::<MaxSemiring, _, _>(&e, &p);
        let en = forward::<EntropySemiring, _, _>(&e, &p);
        let vit = Engine::<f64>::viterbi(&e, &Problem::Structured(p.view().unwrap())).unwrap();
        for b in 0..5 {
            let q = one_sequence(&p, b);
            let l = q.lengths[0];
            let one = backward(&e, &q, &[1.0]).unwrap();
            assert_eq!(
                one.log_z[0].to_bits(),
                all.log_z[b].to_bits(),
                "{tk:?} b={b}"
            );
            assert_eq!(
                forward::<LogSemiring, _, _>(&e, &q)[0].to_bits(),
                fw[b].to_bits()
            );
            assert_eq!(
                forward::<MaxSemiring, _, _>(&e, &q)[0].to_bits(),
                mx[b].to_bits()
            );
            assert_eq!(
                forward::<EntropySemiring, _, _>(&e, &q)[0]
                    .entropy
                    .to_bits(),
                en[b].entropy.to_bits()
            );
            let v1 = Engine::<f64>::viterbi(&e, &Problem::Structured(q.view().unwrap())).unwrap();
            assert_eq!(v1[0], vit[b], "{tk:?} b={b}");
            let rows = |x: &Option<ndarray::Array3<f64>>, bb: usize, n: usize| -> Vec<u64> {
                let a = x.as_ref().unwrap();
                (0..n)
                    .flat_map(|t| a.slice(ndarray::s![bb, t, ..]).to_vec())
                    .map(f64::to_bits)
                    .collect()
            };
            for (x, y) in [
                (&one.grad.scores, &all.grad.scores),
                (&one.grad.begin_boundary, &all.grad.begin_boundary),
                (&one.grad.end_boundary, &all.grad.end_boundary),
            ] {
                assert_eq!(rows(x, 0, l), rows(y, b, l), "{tk:?} b={b}");
            }
            let bm = |a: &Backward, bb: usize| -> Vec<u64> {
                (0..l)
                    .map(|t| a.boundary_marginals[[bb, t]].to_bits())
                    .collect()
            };
            assert_eq!(bm(&one, 0), bm(&all, b), "{tk:?} b={b}");
        }
    }
}

/// Long windows (`T` up to 200, `K` from 30 to `T`, `C <= 3`): durations, transitions and
/// boundaries huge or `-inf` at a few entries only, `-inf` scores scattered.
#[test]
fn long_windows_with_a_few_extreme_entries_match_the_oracle() {
    use rand::{Rng, SeedableRng};
    let mut failures = Vec::new();
    for seed in 0..150u64 {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let t = r.random_range(30..=200);
        let k = r.random_range(30..=t);
        let c = r.random_range(1..=3);
        let mut p = blank(t, k, c, true);
        let sc = [1.0, 10.0, 100.0][r.random_range(0..3)];
        for x in p.scores.iter_mut() {
            *x = r.random_range(-sc..sc);
            if r.random_bool(0.01) {
                *x = f64::NEG_INFINITY;
            }
        }
        for x in p.transition.as_mut().unwrap().iter_mut() {
            *x = r.random_range(-sc..sc);
            if r.random_bool(0.1) {
                *x = [f64::NEG_INFINITY, 1e4, -1e4, 800.0][r.random_range(0..4)];
            }
        }
        let pd = [0.02, 0.1, 0.3][r.random_range(0..3)];
        for x in p.duration.as_mut().unwrap().iter_mut() {
            *x = r.random_range(-sc..sc);
            if r.random_bool(pd) {
                let v = [f64::NEG_INFINITY, 1e4, -1e4, 750.0, -750.0, -2000.0, 650.0];
                *x = v[r.random_range(0..7)];
            }
        }
        for a in [
            p.begin_boundary.as_mut().unwrap(),
            p.end_boundary.as_mut().unwrap(),
        ] {
            let pb = [0.0, 0.02, 0.1][r.random_range(0..3)];
            for x in a.iter_mut() {
                *x = r.random_range(-sc..sc);
                if r.random_bool(pb) {
                    let v = [f64::NEG_INFINITY, 1e4, -1e4, 700.0, -700.0, 1200.0];
                    *x = v[r.random_range(0..6)];
                }
            }
        }
        for x in p.start.as_mut().unwrap().iter_mut() {
            *x = r.random_range(-sc..sc);
        }
        for x in p.end.as_mut().unwrap().iter_mut() {
            *x = r.random_range(-sc..sc);
        }
        let delta = [None, Some(1), Some(7), Some(k)][r.random_range(0..4)];
        // The same allowance as for the wide-range problems, for the same reason.
        let tol = 1e-10f64.max(4.0 * (t as f64 + 4.0).sqrt() * magnitude(&p) * f64::EPSILON);
        if let Err(e) = check_against_oracle(&p, delta, tol) {
            failures.push(format!(
                "seed {seed} T={t} K={k} C={c} delta {delta:?}: {e}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
