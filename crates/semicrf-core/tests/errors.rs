//! One test per row of the error table in the crate docs: every bad input is a typed error
//! naming the tensor, index or figures, never a panic.

use ndarray::{Array, Array1, Array2, Array3, Array5, IxDyn};
use semicrf_core::{
    Algorithm, Device, EdgePotentials, Engine, EngineInfo, Error, LogSemiring, Op, Potentials,
    Problem, Query, Result, Segment, gold_score, reference::Reference, segments_from_labels,
    select,
};

fn scores(b: usize, t: usize, c: usize) -> Array3<f64> {
    Array3::from_shape_fn((b, t, c), |(i, j, k)| (i + 2 * j + 3 * k) as f64 * 0.1)
}

#[test]
fn a_scores_tensor_of_rank_two_is_a_rank_error_naming_scores() {
    let s = Array2::<f64>::zeros((3, 2));
    let err = Potentials::builder(s.view(), &[3], 2).build().unwrap_err();
    assert_eq!(
        err,
        Error::Rank {
            tensor: "scores",
            expected: "3".into(),
            got: 2
        }
    );
    assert_eq!(
        err.to_string(),
        "tensor `scores` has rank 2, expected rank 3"
    );
}

#[test]
fn a_transition_of_rank_four_is_a_rank_error() {
    let s = scores(1, 3, 2);
    let t = Array::<f64, _>::zeros(IxDyn(&[2, 2, 2, 2]));
    let err = Potentials::builder(s.view(), &[3], 2)
        .transition(t.view())
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Rank {
                tensor: "transition",
                got: 4,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn every_tensor_with_wrong_extents_is_a_shape_error_naming_it() {
    let s = scores(2, 4, 3);
    let l = [4, 2];
    let check = |err: Error, name: &str, got: &[usize]| match err {
        Error::Shape { tensor, got: g, .. } => {
            assert_eq!(tensor, name);
            assert_eq!(g, got);
        }
        e => panic!("expected a shape error for {name}, got {e}"),
    };
    let t = Array2::<f64>::zeros((3, 2));
    check(
        Potentials::builder(s.view(), &l, 2)
            .transition(t.view())
            .build()
            .unwrap_err(),
        "transition",
        &[3, 2],
    );
    let t3 = Array3::<f64>::zeros((3, 3, 3));
    check(
        Potentials::builder(s.view(), &l, 2)
            .transition(t3.view())
            .build()
            .unwrap_err(),
        "transition",
        &[3, 3, 3],
    );
    let d = Array2::<f64>::zeros((3, 3));
    check(
        Potentials::builder(s.view(), &l, 2)
            .duration(d.view())
            .build()
            .unwrap_err(),
        "duration",
        &[3, 3],
    );
    let v = Array1::<f64>::zeros(2);
    check(
        Potentials::builder(s.view(), &l, 2)
            .start(v.view())
            .build()
            .unwrap_err(),
        "start",
        &[2],
    );
    check(
        Potentials::builder(s.view(), &l, 2)
            .end(v.view())
            .build()
            .unwrap_err(),
        "end",
        &[2],
    );
    let bb = Array3::<f64>::zeros((2, 3, 3));
    check(
        Potentials::builder(s.view(), &l, 2)
            .begin_boundary(bb.view())
            .build()
            .unwrap_err(),
        "begin_boundary",
        &[2, 3, 3],
    );
    check(
        Potentials::builder(s.view(), &l, 2)
            .end_boundary(bb.view())
            .build()
            .unwrap_err(),
        "end_boundary",
        &[2, 3, 3],
    );
    let e = Array5::<f64>::zeros((1, 3, 2, 2, 3));
    check(
        EdgePotentials::new(e.view(), &[3]).unwrap_err(),
        "edges",
        &[1, 3, 2, 2, 3],
    );
    let msg = Potentials::builder(s.view(), &l, 2)
        .duration(d.view())
        .build()
        .unwrap_err()
        .to_string();
    assert_eq!(
        msg,
        "tensor `duration` has shape [3, 3], expected (K, C) = (2, 3)"
    );
}

#[test]
fn an_empty_batch_is_an_error() {
    let s = scores(0, 3, 2);
    assert_eq!(
        Potentials::builder(s.view(), &[], 2).build().unwrap_err(),
        Error::EmptyBatch
    );
}

#[test]
fn zero_labels_is_an_error() {
    let s = scores(1, 3, 0);
    assert_eq!(
        Potentials::builder(s.view(), &[3], 2).build().unwrap_err(),
        Error::NoLabels
    );
    let e = Array5::<f64>::zeros((1, 3, 2, 0, 0));
    assert_eq!(
        EdgePotentials::new(e.view(), &[3]).unwrap_err(),
        Error::NoLabels
    );
}

#[test]
fn a_max_duration_of_zero_is_an_error() {
    let s = scores(1, 3, 2);
    assert_eq!(
        Potentials::builder(s.view(), &[3], 0).build().unwrap_err(),
        Error::ZeroMaxDuration
    );
    let e = Array5::<f64>::zeros((1, 3, 0, 2, 2));
    assert_eq!(
        EdgePotentials::new(e.view(), &[3]).unwrap_err(),
        Error::ZeroMaxDuration
    );
    assert_eq!(
        segments_from_labels(&[0, 1], 0, false).unwrap_err(),
        Error::ZeroMaxDuration
    );
}

#[test]
fn lengths_of_the_wrong_count_are_an_error() {
    let s = scores(2, 3, 2);
    assert_eq!(
        Potentials::builder(s.view(), &[3], 2).build().unwrap_err(),
        Error::LengthsCount {
            expected: 2,
            got: 1
        }
    );
}

#[test]
fn a_length_of_zero_or_beyond_t_is_an_error_naming_the_sequence() {
    let s = scores(2, 3, 2);
    assert_eq!(
        Potentials::builder(s.view(), &[3, 0], 2)
            .build()
            .unwrap_err(),
        Error::Length {
            sequence: 1,
            length: 0,
            max: 3
        }
    );
    let err = Potentials::builder(s.view(), &[4, 1], 2)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        Error::Length {
            sequence: 0,
            length: 4,
            max: 3
        }
    );
    assert_eq!(err.to_string(), "`lengths[0]` = 4 is out of range 1..=3");
}

#[test]
fn nan_or_positive_infinity_in_any_tensor_is_an_error_naming_tensor_and_index() {
    let l = [3, 3];
    let base = scores(2, 3, 2);
    for bad in [f64::NAN, f64::INFINITY] {
        let mut s = base.clone();
        s[[1, 2, 0]] = bad;
        match Potentials::builder(s.view(), &l, 2).build().unwrap_err() {
            Error::NonFinite {
                tensor,
                index,
                value,
            } => {
                assert_eq!(tensor, "scores");
                assert_eq!(index, vec![1, 2, 0]);
                assert!(value.is_nan() || value == f64::INFINITY);
            }
            e => panic!("{e}"),
        }
        let mut t = Array2::<f64>::zeros((2, 2));
        t[[0, 1]] = bad;
        let err = Potentials::builder(base.view(), &l, 2)
            .transition(t.view())
            .build()
            .unwrap_err();
        assert!(
            matches!(&err, Error::NonFinite { tensor: "transition", index, .. } if index == &vec![0, 1]),
            "{err}"
        );
        let mut d = Array2::<f64>::zeros((2, 2));
        d[[1, 1]] = bad;
        let err = Potentials::builder(base.view(), &l, 2)
            .duration(d.view())
            .build()
            .unwrap_err();
        assert!(matches!(
            err,
            Error::NonFinite {
                tensor: "duration",
                ..
            }
        ));
        let mut v = Array1::<f64>::zeros(2);
        v[1] = bad;
        let err = Potentials::builder(base.view(), &l, 2)
            .start(v.view())
            .build()
            .unwrap_err();
        assert!(matches!(
            err,
            Error::NonFinite {
                tensor: "start",
                ..
            }
        ));
        let err = Potentials::builder(base.view(), &l, 2)
            .end(v.view())
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::NonFinite { tensor: "end", .. }));
        let mut bb = Array3::<f64>::zeros((2, 3, 2));
        bb[[0, 1, 1]] = bad;
        let err = Potentials::builder(base.view(), &l, 2)
            .begin_boundary(bb.view())
            .build()
            .unwrap_err();
        assert!(matches!(
            err,
            Error::NonFinite {
                tensor: "begin_boundary",
                ..
            }
        ));
        let err = Potentials::builder(base.view(), &l, 2)
            .end_boundary(bb.view())
            .build()
            .unwrap_err();
        assert!(matches!(
            err,
            Error::NonFinite {
                tensor: "end_boundary",
                ..
            }
        ));
        let mut e = Array5::<f32>::zeros((1, 3, 2, 2, 2));
        e[[0, 2, 1, 0, 1]] = bad as f32;
        let err = EdgePotentials::new(e.view(), &[3]).unwrap_err();
        assert!(
            matches!(&err, Error::NonFinite { tensor: "edges", index, .. } if index == &vec![0, 2, 1, 0, 1])
        );
    }
    // -inf is legal: it forbids.
    let mut s = base.clone();
    s[[0, 0, 0]] = f64::NEG_INFINITY;
    assert!(Potentials::builder(s.view(), &l, 2).build().is_ok());
}

fn problem_owned() -> (Array3<f64>, Array2<f64>) {
    (scores(2, 3, 2), Array2::zeros((2, 2)))
}

#[test]
fn an_upstream_gradient_of_the_wrong_count_or_not_finite_is_an_error() {
    let (s, t) = problem_owned();
    let l = [3, 2];
    let p: Problem<f64> = Potentials::builder(s.view(), &l, 2)
        .transition(t.view())
        .build()
        .unwrap()
        .into();
    let err = Engine::<f64>::backward(&Reference, &p, &[1.0]).unwrap_err();
    assert!(matches!(err, Error::Upstream { .. }), "{err}");
    let err = Engine::<f64>::backward(&Reference, &p, &[1.0, f64::NAN]).unwrap_err();
    assert!(err.to_string().contains("index 1"), "{err}");
}

#[test]
fn a_gradient_of_an_infeasible_sequence_is_an_error_naming_it() {
    let s = scores(2, 3, 2);
    let mut t = Array2::<f64>::zeros((2, 2));
    t.fill(f64::NEG_INFINITY);
    // K = 1 and every transition forbidden: sequences longer than 1 have no segmentation.
    let l = [1, 3];
    let p: Problem<f64> = Potentials::builder(s.view(), &l, 1)
        .transition(t.view())
        .build()
        .unwrap()
        .into();
    let z = Engine::<f64>::forward::<LogSemiring>(&Reference, &p).unwrap();
    assert!(z[0].is_finite());
    assert_eq!(z[1], f64::NEG_INFINITY);
    assert_eq!(
        Engine::<f64>::backward(&Reference, &p, &[1.0, 1.0]).unwrap_err(),
        Error::Infeasible { sequence: 1 }
    );
}

#[test]
fn a_gold_segmentation_that_does_not_tile_its_sequence_is_an_error() {
    let s = scores(1, 4, 2);
    let l = [4];
    let p = Potentials::builder(s.view(), &l, 2).build().unwrap();
    let cases: [(&[Segment], &str); 5] = [
        (
            &[Segment::new(0, 2, 0), Segment::new(3, 1, 0)],
            "starts at 3",
        ),
        (
            &[Segment::new(0, 3, 0), Segment::new(3, 1, 0)],
            "duration 3",
        ),
        (&[Segment::new(0, 2, 2), Segment::new(2, 2, 0)], "label 2"),
        (&[Segment::new(0, 2, 0)], "cover 0..2"),
        (&[], "cover 0..0"),
    ];
    for (segs, what) in cases {
        let err = gold_score(&p, 0, segs).unwrap_err();
        assert!(
            matches!(&err, Error::Segmentation { sequence: 0, reason } if reason.contains(what)),
            "{err}"
        );
    }
}

#[test]
fn a_label_run_longer_than_k_is_an_error_naming_the_run_unless_split() {
    let labels = [0, 1, 1, 1, 1, 0];
    let err = segments_from_labels(&labels, 3, false).unwrap_err();
    assert_eq!(
        err,
        Error::RunTooLong {
            label: 1,
            start: 1,
            end: 5,
            max_duration: 3
        }
    );
    assert!(
        err.to_string()
            .contains("positions 1..5 has length 4 > K = 3")
    );
    let segs = segments_from_labels(&labels, 3, true).unwrap();
    assert_eq!(
        segs,
        [
            Segment::new(0, 1, 0),
            Segment::new(1, 3, 1),
            Segment::new(4, 1, 1),
            Segment::new(5, 1, 0)
        ]
    );
}

/// A stand-in engine that refuses or needs a fixed amount of memory.
struct Fake {
    algorithm: Algorithm,
    refuse: Option<Error>,
    bytes: Option<u64>,
}

impl EngineInfo for Fake {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn check(&self, _: &Query) -> Result<()> {
        self.refuse.clone().map_or(Ok(()), Err)
    }
    fn memory_required(&self, _: &Query) -> Result<u64> {
        self.bytes.ok_or_else(|| Error::Unsupported {
            backend: "cpu/fake".into(),
            what: "a size that overflows".into(),
        })
    }
}

fn query() -> Query {
    let (s, t) = problem_owned();
    let l = [3, 3];
    let p: Problem<f64> = Potentials::builder(s.view(), &l, 2)
        .transition(t.view())
        .build()
        .unwrap()
        .into();
    Query::of(&p, Op::Backward)
}

#[test]
fn a_memory_budget_too_small_for_any_backend_is_an_error_with_the_smallest_need() {
    let a = Fake {
        algorithm: Algorithm::Streaming,
        refuse: None,
        bytes: Some(5000),
    };
    let b = Fake {
        algorithm: Algorithm::Exact,
        refuse: None,
        bytes: Some(3000),
    };
    let err = select(&[&a, &b], &query(), 1000).unwrap_err();
    assert_eq!(
        err,
        Error::MemoryBudget {
            required: 3000,
            budget: 1000,
            algorithm: "cpu/exact".into()
        }
    );
    let ok = select(&[&a, &b], &query(), 4000).unwrap();
    assert_eq!((ok.index, ok.algorithm), (1, Algorithm::Exact));
    assert!(
        ok.reason
            .contains("cpu/streaming skipped (needs 4.9 KiB > budget 3.9 KiB)"),
        "{}",
        ok.reason
    );
    // The reference engine's estimate is a real figure too.
    let err = select(&[&Reference], &query(), 10).unwrap_err();
    assert!(matches!(err, Error::MemoryBudget { budget: 10, .. }));
}

#[test]
fn an_unavailable_backend_is_reported_and_skipped() {
    let gone = Error::BackendUnavailable {
        backend: "cuda/streaming".into(),
        reason: "no driver".into(),
    };
    let a = Fake {
        algorithm: Algorithm::Streaming,
        refuse: Some(gone.clone()),
        bytes: Some(0),
    };
    assert_eq!(select(&[&a], &query(), u64::MAX).unwrap_err(), gone);
    let b = Fake {
        algorithm: Algorithm::Exact,
        refuse: None,
        bytes: Some(1),
    };
    let ok = select(&[&a, &b], &query(), u64::MAX).unwrap();
    assert_eq!(ok.index, 1);
    assert!(ok.reason.contains("no driver"), "{}", ok.reason);
}

#[test]
fn an_unsupported_request_is_reported() {
    let no = Error::Unsupported {
        backend: "cpu/streaming".into(),
        what: "edge input".into(),
    };
    let a = Fake {
        algorithm: Algorithm::Streaming,
        refuse: Some(no.clone()),
        bytes: Some(0),
    };
    let err = select(&[&a], &query(), u64::MAX).unwrap_err();
    assert_eq!(err, no);
    assert_eq!(
        err.to_string(),
        "backend cpu/streaming does not support edge input"
    );
}

#[test]
fn an_estimate_that_overflows_is_skipped_with_its_reason() {
    let huge = Fake {
        algorithm: Algorithm::Exact,
        refuse: None,
        bytes: None,
    };
    let err = select(&[&huge], &query(), u64::MAX).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    let small = Fake {
        algorithm: Algorithm::Scan,
        refuse: None,
        bytes: Some(10),
    };
    let ok = select(&[&huge, &small], &query(), u64::MAX).unwrap();
    assert_eq!(ok.index, 1);
    assert!(ok.reason.contains("overflows"), "{}", ok.reason);
}
