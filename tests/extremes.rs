//! Extreme shapes and faults: `K = T`, `K > T`, `K` absurdly beyond `T`, one label,
//! everything `-inf` but one path, everything `-inf`, a poisoned value midway in a batch,
//! and (run with `--ignored` in release) `T = 10⁶` with `K = 1000`.
#![cfg(feature = "cpu")]

use semicrf::ndarray::{Array2, Array3, ArrayD, Axis, IxDyn};
use semicrf::reference::{self, Reference};
use semicrf::{
    Backend, Config, Engine, Error, LogSemiring, OwnedPotentials, Potentials, Problem, Segment,
    SemiCrf, gold_score,
};
use semicrf_core::testing::{GenSpec, random_problem};

const BACKENDS: [Backend; 3] = [Backend::Exact, Backend::Scan, Backend::Streaming];

fn crf(backend: Backend) -> SemiCrf {
    SemiCrf::with_config(Config::new().backend(backend))
}

#[test]
fn k_equal_to_t_and_k_beyond_t_match_brute_force_on_every_backend() {
    for (t, k, c) in [(6, 6, 2), (5, 9, 3), (1, 1, 1), (1, 40, 2), (7, 7, 1)] {
        let owned = random_problem(3, &GenSpec::new(2, t, k, c).everything());
        let p = owned.view().unwrap();
        let problem = Problem::Structured(p.clone());
        for backend in BACKENDS {
            let z = crf(backend).log_partition(&problem).unwrap();
            let m = crf(backend).marginals(&problem).unwrap();
            for b in 0..2 {
                let bf = reference::brute_force(&p, b).unwrap();
                assert!((z[b] - bf.log_z).abs() <= 1e-10 * bf.log_z.abs().max(1.0));
                for row in m
                    .position
                    .index_axis(Axis(0), b)
                    .outer_iter()
                    .take(p.lengths()[b])
                {
                    assert!((row.sum() - 1.0).abs() <= 1e-10, "{backend:?} T={t} K={k}");
                }
            }
        }
    }
}

#[test]
fn a_k_far_beyond_t_answers_what_fits_and_refuses_what_does_not_with_a_typed_error() {
    // Segments cannot be longer than T: log Z and Viterbi need nothing of size K. The
    // gradient of the (K, C) duration table does, and 16 TB is refused, not attempted.
    let s = Array3::<f64>::from_shape_fn((1, 3, 2), |(_, t, c)| (t + c) as f64 / 4.0);
    let lengths = [3];
    let k = 1_000_000_000_000;
    let p: Problem<f64> = Potentials::builder(s.view(), &lengths, k)
        .build()
        .unwrap()
        .into();
    let small: Problem<f64> = Potentials::builder(s.view(), &lengths, 3)
        .build()
        .unwrap()
        .into();
    let crf = SemiCrf::new();
    let want = Reference.forward::<LogSemiring>(&small).unwrap()[0];
    assert!((crf.log_partition(&p).unwrap()[0] - want).abs() <= 1e-12);
    assert_eq!(crf.viterbi(&p).unwrap(), crf.viterbi(&small).unwrap());
    for backend in [
        Backend::Auto,
        Backend::Exact,
        Backend::Scan,
        Backend::Streaming,
    ] {
        let err = SemiCrf::with_config(Config::new().backend(backend))
            .gradients(&p)
            .unwrap_err();
        assert!(
            matches!(err, Error::MemoryBudget { .. }),
            "{backend:?}: {err}"
        );
    }
}

#[test]
fn one_label_is_a_segmentation_into_durations_only() {
    // C = 1: the posterior is over where segments end; count them.
    let t = 9;
    let s = Array3::<f64>::zeros((1, t, 1));
    let lengths = [t];
    for k in [1, 2, 4, 9, 12] {
        let p: Problem<f64> = Potentials::builder(s.view(), &lengths, k)
            .build()
            .unwrap()
            .into();
        let n = reference::count_segmentations(t, k, 1) as f64;
        for backend in BACKENDS {
            let z = crf(backend).log_partition(&p).unwrap()[0];
            assert!((z - n.ln()).abs() <= 1e-12, "{backend:?} K={k}");
            let h = crf(backend).entropy(&p).unwrap()[0];
            assert!(
                (h - n.ln()).abs() <= 1e-12,
                "{backend:?} K={k}: uniform posterior"
            );
        }
    }
}

#[test]
fn everything_forbidden_but_one_path_gives_that_path_with_probability_one() {
    // Label 1 for 3 positions, then label 0 for 2: every other segmentation has a -inf.
    let (t, c, k) = (5, 3, 5);
    let path = [Segment::new(0, 3, 1), Segment::new(3, 2, 0)];
    let mut s = Array3::<f64>::from_elem((1, t, c), f64::NEG_INFINITY);
    for seg in &path {
        for u in seg.start..seg.end() {
            s[[0, u, seg.label]] = 0.25 * u as f64;
        }
    }
    // Only durations 3 (label 1) and 2 (label 0) are allowed.
    let mut dur = Array2::<f64>::from_elem((k, c), f64::NEG_INFINITY);
    dur[[2, 1]] = 0.5;
    dur[[1, 0]] = -0.5;
    let lengths = [t];
    let p = Potentials::builder(s.view(), &lengths, k)
        .duration(dur.view())
        .build()
        .unwrap();
    let problem = Problem::Structured(p.clone());
    let score = gold_score(&p, 0, &path).unwrap();
    for backend in BACKENDS {
        let crf = crf(backend);
        assert_eq!(crf.log_partition(&problem).unwrap()[0], score);
        let v = &crf.viterbi(&problem).unwrap()[0];
        assert_eq!((v.score, &v.segments[..]), (score, &path[..]));
        assert_eq!(crf.entropy(&problem).unwrap()[0], 0.0);
        let m = crf.marginals(&problem).unwrap();
        for seg in &path {
            for u in seg.start..seg.end() {
                assert_eq!(m.position[[0, u, seg.label]], 1.0, "{backend:?}");
            }
        }
        assert_eq!(m.boundary.row(0).to_vec(), [1.0, 0.0, 0.0, 1.0, 0.0]);
    }
}

#[test]
fn everything_forbidden_is_minus_infinity_and_a_typed_error_where_a_gradient_is_asked() {
    let s = Array3::<f64>::from_elem((2, 4, 3), f64::NEG_INFINITY);
    let lengths = [4, 2];
    let p: Problem<f64> = Potentials::builder(s.view(), &lengths, 2)
        .build()
        .unwrap()
        .into();
    for backend in BACKENDS {
        let crf = crf(backend);
        assert_eq!(crf.log_partition(&p).unwrap(), [f64::NEG_INFINITY; 2]);
        for v in crf.viterbi(&p).unwrap() {
            assert!(v.segments.is_empty() && v.score == f64::NEG_INFINITY);
        }
        assert_eq!(
            crf.marginals(&p).unwrap_err(),
            Error::Infeasible { sequence: 0 }
        );
        assert_eq!(
            crf.entropy(&p).unwrap_err(),
            Error::Infeasible { sequence: 0 }
        );
        assert_eq!(
            crf.gradients(&p).unwrap_err(),
            Error::Infeasible { sequence: 0 }
        );
    }
}

#[test]
fn a_poisoned_value_midway_in_a_batch_is_named_and_the_other_sequences_still_answer() {
    let mut owned = random_problem(5, &GenSpec::new(4, 6, 3, 2).everything());
    owned.begin_boundary.as_mut().unwrap()[[2, 3, 1]] = f64::NAN;
    let err = owned.view().unwrap_err();
    let Error::NonFinite {
        tensor,
        ref index,
        value,
    } = err
    else {
        panic!("{err}")
    };
    assert_eq!((tensor, &index[..]), ("begin_boundary", &[2, 3, 1][..]));
    assert!(value.is_nan());
    let text = err.to_string();
    assert!(
        text.contains("begin_boundary") && text.contains("[2, 3, 1]"),
        "{text}"
    );
    // Validation happens before any work, so nothing computed is lost: each other sequence,
    // cut out on its own, answers as it would have in the batch.
    let mut clean = owned.clone();
    clean.begin_boundary.as_mut().unwrap()[[2, 3, 1]] = 0.0;
    let whole = SemiCrf::new()
        .log_partition(&clean.view().unwrap())
        .unwrap();
    for b in [0, 1, 3] {
        let one: OwnedPotentials<f64> = owned.sequence(b).unwrap();
        let z = SemiCrf::new().log_partition(&one.view().unwrap()).unwrap();
        assert_eq!(z[0], whole[b], "sequence {b}");
    }
    assert!(owned.sequence(2).unwrap().view().is_err());
    assert!(owned.sequence(4).is_none());
}

#[test]
fn a_budget_too_small_is_a_typed_error_and_the_next_call_works() {
    let owned = random_problem(9, &GenSpec::new(2, 50, 8, 4));
    let p: Problem<f64> = owned.view().unwrap().into();
    let tiny = SemiCrf::with_config(Config::new().memory_budget(64));
    assert!(matches!(
        tiny.gradients(&p),
        Err(Error::MemoryBudget { budget: 64, .. })
    ));
    assert!(SemiCrf::new().gradients(&p).is_ok());
}

/// T = 10⁶ with K = 1000 on the streaming engine: finite, and its marginals are
/// probabilities. (Release mode: `cargo test --release --test extremes -- --ignored`.)
#[test]
#[ignore = "a million positions with K = 1000: run in release with --ignored"]
fn a_million_positions_with_k_1000_are_answered() {
    let (t, k, c) = (1_000_000, 1000, 2);
    let scores = ArrayD::from_shape_fn(IxDyn(&[1, t, c]), |i| {
        ((i[1] * 7 + i[2] * 3) % 11) as f64 / 5.0 - 1.0
    });
    let owned = OwnedPotentials {
        transition: Some(ArrayD::zeros(IxDyn(&[c, c]))),
        duration: Some(ArrayD::from_shape_fn(IxDyn(&[k, c]), |i| {
            -(i[0] as f64) / 100.0
        })),
        ..OwnedPotentials::new(scores, vec![t], k)
    };
    let p: Problem<f64> = owned.view().unwrap().into();
    let crf = crf(Backend::Streaming);
    let m = crf.marginals(&p).unwrap();
    assert!(m.log_z[0].is_finite());
    let worst = m
        .position
        .index_axis(Axis(0), 0)
        .outer_iter()
        .map(|r| (r.sum() - 1.0).abs())
        .fold(0f64, f64::max);
    // The accuracy the numeric range promises for probabilities (`semicrf::range`).
    assert!(worst <= 1e-4, "{worst}");
    let v = &crf.viterbi(&p).unwrap()[0];
    let Problem::Structured(pot) = &p else {
        unreachable!()
    };
    let gold = gold_score(pot, 0, &v.segments).unwrap();
    assert!((gold - v.score).abs() <= 1e-9 * gold.abs());
    assert!(v.score <= m.log_z[0]);
    eprintln!(
        "T = 10⁶, K = 1000: log Z {}, marginals within {worst:.1e}",
        m.log_z[0]
    );
}
