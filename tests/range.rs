//! The numeric range (`semicrf::range`): potentials too large for a result are refused with
//! `Error::Magnitude` naming the sequence, tensor, index and value; within the range the
//! hardest case (every segmentation scoring the same, so the posterior is spread over all of
//! them) keeps its probabilities within 1e-4, on every backend.
#![cfg(feature = "cpu")]

use semicrf::ndarray::{Array3, ArrayD, Axis, IxDyn};
use semicrf::range::{PRECISE_LIMIT, SCORE_LIMIT, probability_limit};
use semicrf::{
    Backend, Config, EdgePotentials, EntropySemiring, Error, OwnedPotentials, Potentials, Problem,
    SemiCrf, gold_score, materialize,
};

const BACKENDS: [Backend; 3] = [Backend::Exact, Backend::Scan, Backend::Streaming];

fn crf(backend: Backend) -> SemiCrf {
    SemiCrf::with_config(Config::new().backend(backend))
}

fn scores(values: &[&[f64]]) -> Array3<f64> {
    let t = values.len();
    let c = values[0].len();
    Array3::from_shape_fn((1, t, c), |(_, t, c)| values[t][c])
}

/// Every label scores `s` at every position of a sequence of length `len`.
fn equal(len: usize, labels: usize, s: f64) -> Array3<f64> {
    Array3::from_elem((1, len, labels), s)
}

#[test]
fn scores_of_1e15_give_log_z_and_viterbi_but_refuse_probabilities_on_every_backend() {
    // The reported case: position marginals 0.607 and 0.607 at one position, a boundary
    // marginal of 1.21. log Z and the Viterbi score are exact enough to answer.
    let s = scores(&[&[1e15, -1e15], &[3e15, 2e15], &[-1e15, 1e15], &[2e15, 2e15]]);
    let lengths = [4];
    let p: Problem<f64> = Potentials::builder(s.view(), &lengths, 2)
        .build()
        .unwrap()
        .into();
    for backend in BACKENDS {
        let crf = crf(backend);
        let z = crf.log_partition(&p).unwrap()[0];
        let v = &crf.viterbi(&p).unwrap()[0];
        assert!(
            z.is_finite() && z >= v.score,
            "{backend:?}: {z} vs {}",
            v.score
        );
        let Problem::Structured(pot) = &p else {
            unreachable!()
        };
        assert_eq!(gold_score(pot, 0, &v.segments).unwrap(), v.score);
        for err in [
            crf.marginals(&p).unwrap_err(),
            crf.gradients(&p).unwrap_err(),
            crf.entropy(&p).unwrap_err(),
        ] {
            let Error::Magnitude {
                sequence,
                tensor,
                ref index,
                value,
                bound,
                limit,
                ..
            } = err
            else {
                panic!("{backend:?}: {err}")
            };
            assert_eq!((sequence, tensor, value), (0, "scores", 3e15));
            assert_eq!(index, &[0, 1, 0]);
            assert_eq!(bound, 1e15 + 3e15 + 1e15 + 2e15);
            assert_eq!(limit, probability_limit(4));
            let text = err.to_string();
            for needle in [
                "sequence 0",
                "`scores` at [0, 1, 0] = 3e15",
                "-inf",
                "rescale",
            ] {
                assert!(text.contains(needle), "{text}");
            }
        }
    }
}

#[test]
fn potentials_of_1e308_are_refused_when_built() {
    // The reported cases: 1e308 everywhere (marginals 1 and 1, a boundary marginal of 2), and
    // a mix of ±1e308 (a NaN caught only at the output).
    let all = equal(3, 2, 1e308);
    let mix = scores(&[&[1e308, -1e308], &[-1e308, 1e308], &[1.0, 2.0]]);
    let lengths = [3];
    for s in [&all, &mix] {
        let err = Potentials::builder(s.view(), &lengths, 2)
            .build()
            .unwrap_err();
        let Error::Magnitude {
            sequence,
            limit,
            tensor,
            ..
        } = err
        else {
            panic!("{err}")
        };
        assert_eq!((sequence, limit, tensor), (0, SCORE_LIMIT, "scores"));
    }
    // A large negative score standing for "forbidden" is refused with the advice to use -inf;
    // -inf itself is fine.
    let penalty = scores(&[&[0.5, -1e301], &[0.1, 0.2]]);
    let err = Potentials::builder(penalty.view(), &[2], 2)
        .build()
        .unwrap_err();
    assert!(
        err.to_string().contains("= -1e301") && err.to_string().contains("-inf"),
        "{err}"
    );
    let forbidden = scores(&[&[0.5, f64::NEG_INFINITY], &[0.1, 0.2]]);
    let p: Problem<f64> = Potentials::builder(forbidden.view(), &[2], 2)
        .build()
        .unwrap()
        .into();
    let m = SemiCrf::new().marginals(&p).unwrap();
    assert_eq!(m.position[[0, 0, 1]], 0.0);
}

#[test]
fn the_bound_counts_every_tensor_that_a_segmentation_adds_up() {
    // Each of the 6 positions can start a segment (transition, duration, begin and end
    // boundaries once each) and the sequence has a start and an end.
    let (t, k, c) = (6, 3, 2);
    let s = Array3::from_elem((1, t, c), 1.0);
    let tr = ArrayD::from_elem(IxDyn(&[c, c]), -2.0);
    let dur = ArrayD::from_elem(IxDyn(&[k, c]), 3.0);
    let bb = ArrayD::from_elem(IxDyn(&[1, t, c]), 4.0);
    let mut eb = ArrayD::from_elem(IxDyn(&[1, t, c]), 5.0);
    eb[[0, 4, 1]] = -50.0;
    eb[[0, 5, 0]] = 1e9; // beyond the length of 5: ignored
    let start = ArrayD::from_elem(IxDyn(&[c]), 6.0);
    let end = ArrayD::from_elem(IxDyn(&[c]), f64::NEG_INFINITY);
    let lengths = [5];
    let p = Potentials::builder(s.view(), &lengths, k)
        .transition(tr.view())
        .duration(dur.view())
        .begin_boundary(bb.view())
        .end_boundary(eb.view())
        .start(start.view())
        .end(end.view())
        .build()
        .unwrap();
    let m = &p.magnitudes()[0];
    assert_eq!(
        m.bound,
        5.0 * (1.0 + 2.0 + 3.0 + 4.0) + 4.0 * 5.0 + 50.0 + 6.0
    );
    let largest = m.largest.as_ref().unwrap();
    assert_eq!(
        (largest.tensor, &largest.index[..], largest.value),
        ("end_boundary", &[0, 4, 1][..], -50.0)
    );
}

#[test]
fn edge_potentials_have_the_same_range() {
    let s = scores(&[&[1e15, -1e15], &[3e15, 2e15], &[-1e15, 1e15]]);
    let lengths = [3];
    let p = Potentials::builder(s.view(), &lengths, 2).build().unwrap();
    let edges = materialize(&p);
    let e: Problem<f64> = EdgePotentials::new(edges.view(), &lengths).unwrap().into();
    for backend in [Backend::Exact, Backend::Scan] {
        let crf = crf(backend);
        assert!(crf.log_partition(&e).unwrap()[0].is_finite());
        assert!(matches!(
            crf.marginals(&e),
            Err(Error::Magnitude {
                sequence: 0,
                tensor: "edges",
                ..
            })
        ));
    }
    let huge = edges.mapv(|x| x * 1e285);
    assert!(matches!(
        EdgePotentials::new(huge.view(), &lengths),
        Err(Error::Magnitude { .. })
    ));
}

/// The worst case at a bound `M = fraction · probability_limit(len)`: every segmentation
/// scores `M`, so the posterior is uniform over all of them and every probability is a
/// difference of numbers of size `M`.
fn hardest_case(len: usize, fraction: f64) -> OwnedPotentials<f64> {
    let labels = 2;
    let s = fraction * probability_limit(len) / len as f64;
    OwnedPotentials::new(equal(len, labels, s).into_dyn(), vec![len], 4.min(len))
}

/// The log of the number of segmentations of `len` positions into segments of at most `k`
/// with `c` labels: `n_t = c · Σ_{d ≤ k} n_{t-d}`, in log space (the count overflows).
fn ln_segmentations(len: usize, k: usize, c: usize) -> f64 {
    let mut ln_n = vec![f64::NEG_INFINITY; len + 1];
    ln_n[0] = 0.0;
    for t in 1..=len {
        let terms = &ln_n[t.saturating_sub(k)..t];
        let m = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = terms.iter().map(|x| (x - m).exp()).sum();
        ln_n[t] = (c as f64).ln() + m + sum.ln();
    }
    ln_n[len]
}

fn probabilities_keep_their_accuracy_at_the_limit(backend: Backend, len: usize) {
    let crf = crf(backend);
    let inside = hardest_case(len, 0.999);
    let p: Problem<f64> = inside.view().unwrap().into();
    let m = crf.marginals(&p).unwrap();
    let worst = m
        .position
        .index_axis(Axis(0), 0)
        .outer_iter()
        .map(|row| (row.sum() - 1.0).abs())
        .fold((m.boundary[[0, 0]] - 1.0).abs(), f64::max);
    assert!(worst <= 1e-4, "{backend:?} L={len}: off by {worst}");
    let h = crf.entropy(&p).unwrap()[0];
    let ln_n = ln_segmentations(len, 4.min(len), 2);
    assert!(
        h >= -1e-4 && h <= ln_n + 1e-4,
        "{backend:?} L={len}: H {h} > {ln_n}"
    );
    eprintln!("{backend:?} L={len}: marginals within {worst:.1e} of summing to 1");

    let beyond = hardest_case(len, 1.001);
    let p: Problem<f64> = beyond.view().unwrap().into();
    assert!(matches!(
        crf.marginals(&p),
        Err(Error::Magnitude { sequence: 0, .. })
    ));
    // log Z stays available beyond the probability limit.
    assert!(crf.log_partition(&p).unwrap()[0].is_finite());
    assert!(matches!(
        crf.forward::<EntropySemiring, f64>(&p),
        Err(Error::Magnitude { .. })
    ));
}

#[test]
fn probabilities_keep_their_accuracy_up_to_the_limit_and_are_refused_beyond_it() {
    for backend in BACKENDS {
        for len in [1, 2, 7, 100, 2000] {
            probabilities_keep_their_accuracy_at_the_limit(backend, len);
        }
    }
    probabilities_keep_their_accuracy_at_the_limit(Backend::Streaming, 100_000);
    assert_eq!(PRECISE_LIMIT, 2f64.powi(34));
}

/// The measurement behind the range's stated accuracy (run with `--ignored`, release mode).
#[test]
#[ignore = "a million positions: run in release with --ignored"]
fn probabilities_keep_their_accuracy_at_the_limit_for_a_million_positions() {
    probabilities_keep_their_accuracy_at_the_limit(Backend::Streaming, 1_000_000);
}

#[test]
fn tiny_and_subnormal_potentials_are_answered_as_the_small_numbers_they_are() {
    let (t, c, k) = (5, 3, 3);
    let lengths = [t];
    let zero = Array3::<f64>::zeros((1, t, c));
    let z0: Problem<f64> = Potentials::builder(zero.view(), &lengths, k)
        .build()
        .unwrap()
        .into();
    for x in [1e-300, -1e-300, 5e-324, f64::MIN_POSITIVE, -1e-310] {
        let s = Array3::from_elem((1, t, c), x);
        let tr = ArrayD::from_elem(IxDyn(&[c, c]), x);
        let p: Problem<f64> = Potentials::builder(s.view(), &lengths, k)
            .transition(tr.view())
            .build()
            .unwrap()
            .into();
        for backend in BACKENDS {
            let crf = crf(backend);
            let want = crf.marginals(&z0).unwrap();
            let got = crf.marginals(&p).unwrap();
            assert!((got.log_z[0] - want.log_z[0]).abs() <= 1e-12, "{x}");
            let off = (&got.position - &want.position)
                .iter()
                .fold(0f64, |m, d| m.max(d.abs()));
            assert!(off <= 1e-12, "{backend:?} {x}: {off}");
            let h = crf.entropy(&p).unwrap()[0];
            assert!((h - crf.entropy(&z0).unwrap()[0]).abs() <= 1e-12);
        }
    }
    // f32 inputs: the smallest subnormal.
    let s = Array3::from_elem((1, t, c), f32::from_bits(1));
    let p: Problem<f32> = Potentials::builder(s.view(), &lengths, k)
        .build()
        .unwrap()
        .into();
    let m = SemiCrf::new().marginals(&p).unwrap();
    assert!(m.position.iter().all(|x| x.is_finite()));
}
