//! Property tests (proptest) of the invariants promised in `GUARANTEES.md`, on every engine
//! and the f64 reference, over problems whose potentials span the whole `f64` range: from
//! `1e-300` (and subnormals) to `1.7e308` in magnitude, with `-inf` entries, ragged lengths,
//! `K ≥ T`, one label, 2-D and 3-D transitions and every optional input.
//!
//! Every problem is either refused with [`Error::Magnitude`] exactly where the numeric range
//! says (`semicrf::range`), or answered within the invariants:
//!
//! - every output is finite wherever log Z is finite (and `Error::Infeasible` where it is not);
//! - log Z ≥ the Viterbi score, the Viterbi segments score the Viterbi score, NLL ≥ 0;
//! - position marginals lie in [0, 1] and sum to 1 at every position, 0 beyond the length;
//!   boundary marginals are 1 at `t = 0`, 0 beyond the length;
//! - 0 ≤ entropy ≤ log(number of segmentations);
//! - every engine agrees with every other and with the reference;
//! - allowing longer segments (`K + 1`) never lowers log Z.
//!
//! Scores are compared within `2⁻⁴⁰·max(1, M_b)` (the range's accuracy of log-space values),
//! probabilities within `1e-4` (its accuracy of gradients, marginals and entropies).
//!
//! The count is `PROPTEST_CASES` (256 by default; the long local run uses 10⁶). A failure
//! prints the minimal problem found (seed and description) to turn into a regression test.
#![cfg(feature = "cpu")]

use std::sync::atomic::{AtomicU64, Ordering};

use ndarray::{ArrayD, Axis, IxDyn};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use semicrf::range::probability_limit;
use semicrf_core::reference::{self, Reference};
use semicrf_core::testing::{GenSpec, TransitionKind, random_problem, random_segmentation};
use semicrf_core::{
    Engine, EntropySemiring, Error, Gradients, LogSemiring, MaxSemiring, OwnedPotentials, Problem,
    gold_score,
};
use semicrf_cpu::{ExactEngine, Parallelism, ScanEngine, StreamingEngine};

/// Accuracy of probabilities within the range.
const PROB_TOL: f64 = 1e-4;

/// One drawn problem: a generator description, its seed, and a scale `m · 10^e` that every
/// finite potential is multiplied by.
#[derive(Clone, Debug)]
struct Case {
    spec: GenSpec,
    seed: u64,
    mantissa: f64,
    exponent: i32,
}

fn case() -> impl Strategy<Value = Case> {
    let shape = (1..=3usize, 1..=12usize, 0..5usize, 1..=5usize);
    let inputs = (
        any::<bool>(),
        0..3usize,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    );
    let forbid = (
        prop::sample::select(vec![0.0, 0.0, 0.3, 0.9]),
        prop::sample::select(vec![0.0, 0.0, 0.1, 0.5]),
        any::<bool>(),
        any::<bool>(),
    );
    // Mostly ordinary scales, often the extremes of the range.
    let exponent = prop_oneof![
        6 => -1..=4i32,
        2 => -300..=308i32,
        1 => prop::sample::select(vec![-300, -200, 8, 9, 10, 12, 15, 100, 300, 307, 308]),
    ];
    (shape, inputs, forbid, exponent, 1.0..1.7f64, any::<u64>()).prop_map(
        |((b, t, kpick, c), inp, forbid, exponent, mantissa, seed)| {
            let k = [1, 2, 3, t, t + 2][kpick];
            let mut spec = GenSpec::new(b, t, k, c);
            spec.ragged = inp.0;
            spec.transition = [
                TransitionKind::Absent,
                TransitionKind::Static,
                TransitionKind::DurationDependent,
            ][inp.1];
            spec.duration = inp.2;
            spec.start = inp.3;
            spec.end = inp.4;
            spec.boundaries = inp.5;
            spec.forbid_transitions = forbid.0;
            spec.forbid_scores = forbid.1;
            spec.unreachable_label = forbid.2 && c > 1;
            spec.capped_durations = forbid.3;
            Case {
                spec,
                seed,
                mantissa,
                exponent,
            }
        },
    )
}

/// The problem of a case: the generator's draw (scores in [-1, 1]), scaled.
fn problem(case: &Case) -> OwnedPotentials<f64> {
    let mut p = random_problem(case.seed, &case.spec);
    // `10^e` underflows to a subnormal or 0 below 1e-308, as the inputs it stands for would.
    let scale = case.mantissa * 10f64.powi(case.exponent);
    let mut all: Vec<&mut ArrayD<f64>> = vec![&mut p.scores];
    for t in [
        &mut p.transition,
        &mut p.duration,
        &mut p.start,
        &mut p.end,
        &mut p.begin_boundary,
        &mut p.end_boundary,
    ]
    .into_iter()
    .flatten()
    {
        all.push(t);
    }
    for a in all {
        a.mapv_inplace(|x| if x.is_finite() { x * scale } else { x });
    }
    p
}

/// What one engine answered, for the comparisons across engines.
struct Answer {
    name: String,
    log_z: Vec<f64>,
    grad: Option<Gradients>,
    entropy: Option<Vec<f64>>,
}

fn fail(what: String) -> TestCaseError {
    TestCaseError::fail(what)
}

/// Runs every operation of one engine and checks the invariants that need no other engine.
fn answer<E: Engine<f64>>(e: &E, owned: &OwnedPotentials<f64>) -> Result<Answer, TestCaseError> {
    let p = owned.view().map_err(|err| fail(format!("view: {err}")))?;
    let problem = Problem::Structured(p.clone());
    let name = e.name();
    let (batch, k, c) = (p.shape().batch, p.shape().max_duration, p.shape().labels);
    let magnitude = |b: usize| problem.magnitudes()[b].bound;
    let in_range = (0..batch).all(|b| magnitude(b) <= probability_limit(p.lengths()[b]));
    let slack = |b: usize| 2f64.powi(-40) * magnitude(b).max(1.0);

    let z = e
        .forward::<LogSemiring>(&problem)
        .map_err(|err| fail(format!("{name}: log Z: {err}")))?;
    let m = e
        .forward::<MaxSemiring>(&problem)
        .map_err(|err| fail(format!("{name}: max: {err}")))?;
    let v = e
        .viterbi(&problem)
        .map_err(|err| fail(format!("{name}: viterbi: {err}")))?;
    for b in 0..batch {
        let (zb, mb) = (z[b], m[b]);
        prop_assert!(
            !zb.is_nan() && zb != f64::INFINITY,
            "{name} b={b}: log Z {zb}"
        );
        prop_assert!(
            !mb.is_nan() && mb != f64::INFINITY,
            "{name} b={b}: max {mb}"
        );
        prop_assert_eq!(zb.is_finite(), mb.is_finite(), "{} b={}", name, b);
        if !zb.is_finite() {
            continue;
        }
        prop_assert!(mb <= zb + slack(b), "{name} b={b}: max {mb} > log Z {zb}");
        let vs = v[b].score;
        prop_assert!(
            (vs - mb).abs() <= slack(b),
            "{name} b={b}: viterbi {vs} vs max {mb}"
        );
        let gold = gold_score(&p, b, &v[b].segments)
            .map_err(|err| fail(format!("{name} b={b}: viterbi segments: {err}")))?;
        prop_assert!(
            (gold - vs).abs() <= slack(b),
            "{name} b={b}: gold {gold} vs {vs}"
        );
        let segs = random_segmentation(b as u64, p.lengths()[b], k, c);
        let gold = gold_score(&p, b, &segs).map_err(|err| fail(format!("{err}")))?;
        if gold.is_finite() {
            prop_assert!(zb - gold >= -slack(b), "{name} b={b}: NLL {}", zb - gold);
        }
    }

    // Probabilities: refused beyond the range, within the invariants inside it.
    let entropy = match e.forward::<EntropySemiring>(&problem) {
        Err(Error::Magnitude { .. }) if !in_range => None,
        Err(err) => return Err(fail(format!("{name}: entropy: {err}"))),
        Ok(_) if !in_range => return Err(fail(format!("{name}: entropy beyond the range"))),
        Ok(h) => {
            for b in 0..batch {
                prop_assert_eq!(h[b].log_weight.is_finite(), z[b].is_finite());
                if z[b].is_finite() {
                    let n = reference::count_segmentations(p.lengths()[b], k, c) as f64;
                    let hb = h[b].entropy;
                    prop_assert!(
                        hb >= -PROB_TOL && hb <= n.ln() + PROB_TOL,
                        "{name} b={b}: entropy {hb} outside [0, log {n}]"
                    );
                }
            }
            Some(h.iter().map(|h| h.entropy).collect())
        }
    };
    let grad = match e.backward(&problem, &vec![1.0; batch]) {
        Err(Error::Infeasible { sequence }) => {
            prop_assert!(
                z[sequence] == f64::NEG_INFINITY,
                "{name}: infeasible {sequence}"
            );
            None
        }
        Err(Error::Magnitude { .. }) if !in_range => None,
        Err(err) => return Err(fail(format!("{name}: backward: {err}"))),
        Ok(_) if !in_range => return Err(fail(format!("{name}: gradients beyond the range"))),
        Ok(back) => {
            prop_assert!(z.iter().all(|z| z.is_finite()), "{name}: gradients of -inf");
            for (field, x) in back.grad.fields() {
                if let Some(x) = x {
                    prop_assert!(x.iter().all(|v| v.is_finite()), "{name}: grad.{field}");
                }
            }
            let pos = back.grad.scores.as_ref().expect("position marginals");
            for b in 0..batch {
                let len = p.lengths()[b];
                let bm = back.boundary_marginals.index_axis(Axis(0), b);
                prop_assert!(
                    (bm[0] - 1.0).abs() <= PROB_TOL,
                    "{name} b={b}: bm[0] {}",
                    bm[0]
                );
                for t in 0..p.shape().len {
                    let row = pos.index_axis(Axis(0), b);
                    let row = row.row(t);
                    if t >= len {
                        prop_assert!(bm[t] == 0.0, "{name} b={b} t={t}: bm past the length");
                        prop_assert!(row.iter().all(|&x| x == 0.0), "{name} b={b} t={t}");
                        continue;
                    }
                    let prob = |x: f64| (-PROB_TOL..=1.0 + PROB_TOL).contains(&x);
                    prop_assert!(prob(bm[t]), "{name} b={b} t={t}: bm {}", bm[t]);
                    prop_assert!(row.iter().all(|&x| prob(x)), "{name} b={b} t={t}: {row}");
                    let s = row.sum();
                    prop_assert!((s - 1.0).abs() <= PROB_TOL, "{name} b={b} t={t}: Σ {s}");
                }
            }
            Some(back.grad)
        }
    };
    Ok(Answer {
        name,
        log_z: z,
        grad,
        entropy,
    })
}

/// The same problem with segments of up to `K + 1` allowed (the new duration's scores drawn
/// in the same range).
fn one_longer(owned: &OwnedPotentials<f64>, seed: u64) -> OwnedPotentials<f64> {
    let mut p = owned.clone();
    let k = p.max_duration;
    p.max_duration = k + 1;
    let grow = |a: &mut ArrayD<f64>, axis: usize| {
        let mut shape = a.shape().to_vec();
        shape[axis] += 1;
        // Scale of the new row: the largest finite magnitude already there.
        let scale = a
            .iter()
            .filter(|x| x.is_finite())
            .fold(0f64, |m, x| m.max(x.abs()));
        let mut r = semicrf_core::testing::rng(seed);
        let grown = ArrayD::from_shape_fn(IxDyn(&shape), |i| {
            if i[axis] < a.shape()[axis] {
                a[i]
            } else {
                scale * rand::Rng::random_range(&mut r, -1.0..=1.0)
            }
        });
        *a = grown;
    };
    if let Some(d) = &mut p.duration {
        grow(d, 0);
    }
    if let Some(t) = &mut p.transition
        && t.ndim() == 3
    {
        grow(t, 0);
    }
    p
}

/// Checks one case; `Ok(true)` when its potentials were (rightly) refused when built.
fn check(case: &Case) -> Result<bool, TestCaseError> {
    let owned = problem(case);
    let view = match owned.view() {
        // Refused when built: only beyond the finite-results limit.
        Err(Error::Magnitude { bound, limit, .. }) => {
            prop_assert!(bound > limit, "refused within the range");
            prop_assert_eq!(limit, semicrf::range::SCORE_LIMIT);
            return Ok(true);
        }
        Err(err) => return Err(fail(format!("view: {err}"))),
        Ok(v) => v,
    };
    prop_assert!(
        view.magnitudes()
            .iter()
            .all(|m| m.bound <= semicrf::range::SCORE_LIMIT),
        "accepted beyond the range"
    );
    let seq = Parallelism::Sequential;
    let answers = [
        answer(&Reference, &owned)?,
        answer(&ExactEngine::new().parallelism(seq), &owned)?,
        answer(&ScanEngine::new().parallelism(seq), &owned)?,
        answer(&StreamingEngine::new().parallelism(seq), &owned)?,
    ];
    let answers: Vec<Answer> = answers.into_iter().chain(cuda_answer(&owned)?).collect();
    let reference = &answers[0];
    for a in &answers[1..] {
        for b in 0..case.spec.batch {
            let (x, y) = (a.log_z[b], reference.log_z[b]);
            let slack = 2f64.powi(-40) * view.magnitudes()[b].bound.max(1.0);
            prop_assert!(
                x == y || (x - y).abs() <= slack,
                "{} b={b}: log Z {x} vs reference {y}",
                a.name
            );
        }
        match (&a.entropy, &reference.entropy) {
            (Some(h), Some(want)) => {
                for (x, y) in h.iter().zip(want) {
                    prop_assert!(
                        x == y || (x - y).abs() <= PROB_TOL,
                        "{}: entropy {x} vs {y}",
                        a.name
                    );
                }
            }
            (None, None) => {}
            _ => return Err(fail(format!("{}: entropy answered by one only", a.name))),
        }
        match (&a.grad, &reference.grad) {
            (Some(g), Some(want)) => {
                for ((field, x), (_, y)) in g.fields().into_iter().zip(want.fields()) {
                    let (Some(x), Some(y)) = (x, y) else { continue };
                    let worst = x
                        .iter()
                        .zip(y.iter())
                        .map(|(x, y)| (x - y).abs())
                        .fold(0.0, f64::max);
                    // Shared parameters sum over the sequence: scale by its length.
                    let scale = (case.spec.len * case.spec.batch) as f64;
                    prop_assert!(
                        worst <= PROB_TOL * scale,
                        "{}: grad.{field} off by {worst}",
                        a.name
                    );
                }
            }
            (None, None) => {}
            _ => return Err(fail(format!("{}: gradients answered by one only", a.name))),
        }
    }
    // Longer segments allowed: log Z cannot fall.
    let longer = one_longer(&owned, case.seed ^ 0x10f);
    if let Ok(v) = longer.view() {
        let z2 = StreamingEngine::new()
            .parallelism(seq)
            .forward::<LogSemiring>(&Problem::Structured(v.clone()))
            .map_err(|err| fail(format!("K + 1: {err}")))?;
        for b in 0..case.spec.batch {
            let slack = 2f64.powi(-40) * v.magnitudes()[b].bound.max(1.0);
            let z1 = reference.log_z[b];
            prop_assert!(
                z2[b] >= z1 - slack,
                "b={b}: log Z fell from {z1} to {} at K + 1",
                z2[b]
            );
        }
    }
    Ok(false)
}

#[cfg(feature = "cuda")]
fn cuda_answer(owned: &OwnedPotentials<f64>) -> Result<Option<Answer>, TestCaseError> {
    // Asked once: a machine without a GPU says why once, not once per problem.
    static GPU: std::sync::OnceLock<Option<semicrf_cuda::CudaEngine>> = std::sync::OnceLock::new();
    match GPU.get_or_init(|| semicrf_cuda::CudaEngine::usable_or_skip(0)) {
        Some(e) => answer(e, owned).map(Some),
        None => Ok(None),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_answer(_: &OwnedPotentials<f64>) -> Result<Option<Answer>, TestCaseError> {
    Ok(None)
}

#[test]
fn every_problem_across_the_f64_range_is_refused_or_keeps_the_invariants() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let checked = AtomicU64::new(0);
    let refused = AtomicU64::new(0);
    let outcome = runner.run(&case(), |case| {
        checked.fetch_add(1, Ordering::Relaxed);
        if check(&case)? {
            refused.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    eprintln!(
        "{} problems checked ({} refused when built, as the range says)",
        checked.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed)
    );
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
