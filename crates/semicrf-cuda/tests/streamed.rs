//! The CUDA engine on a potentials source (`SourceEngine`): bitwise the results of the same
//! values given as arrays to the CUDA engine, for chunk sizes 1, 7, `K` and more than `T`,
//! in `f64` and `f32`; the f64 reference oracle independently; a source computed on the fly;
//! bad rows and a failing sink. Without a usable GPU each test that needs one prints why and
//! passes, unless `SEMICRF_REQUIRE_GPU=1`, which makes that a failure.

use ndarray::{Array2, Array3};
use semicrf_core::reference::Reference;
use semicrf_core::testing::{
    GenSpec, Hashed, Tolerance, TransitionKind, hashed, positive_upstream, random_problem,
};
use semicrf_core::{
    Algorithm, Engine, EngineInfo, EntropySemiring, Error, Form, GradientArrays, GradientRows,
    GradientSink, LogSemiring, MaxSemiring, Op, OwnedPotentials, Potentials, Problem, Query,
    Result, Scalar, Shape, SourceEngine, StreamedPotentials,
};
use semicrf_cuda::CudaEngine;

fn gpu() -> Option<CudaEngine> {
    CudaEngine::usable_or_skip(0)
}

/// Small problems of every input and both transition forms: the linear-domain and the
/// log-domain kernels, one team and several (`C = 33`), ragged lengths, `-inf` entries.
fn problems() -> Vec<(String, OwnedPotentials<f64>)> {
    let mut v = Vec::new();
    for (i, (b, t, k, c)) in [(3, 40, 6, 4), (2, 33, 1, 3), (2, 25, 9, 33), (1, 12, 40, 2)]
        .into_iter()
        .enumerate()
    {
        for tk in [TransitionKind::Static, TransitionKind::DurationDependent] {
            let mut g = GenSpec::new(b, t, k, c).everything();
            g.transition = tk;
            g.forbid_scores = if i == 0 { 0.1 } else { 0.0 };
            v.push((
                format!("({b}, {t}, {k}, {c}) {tk:?}"),
                random_problem(70 + i as u64, &g),
            ));
        }
    }
    v
}

/// The engines of a problem of `shape`: one per chunk size, and the log domain only.
fn engines(cuda: CudaEngine, shape: Shape) -> Vec<CudaEngine> {
    let mut v: Vec<CudaEngine> = [1, 7, shape.max_duration, shape.len + 5]
        .into_iter()
        .map(|rows| cuda.chunk_rows(Some(rows)))
        .collect();
    v.push(cuda.log_domain_only().chunk_rows(Some(7)));
    v
}

/// Every result of `s` on every engine of [`engines`] equals, bit for bit, that of the
/// arrays `p` on the same engine.
fn same_as_arrays<'a, F: Scalar>(cuda: CudaEngine, name: &str, p: &'a Potentials<'a, F>) {
    let s = StreamedPotentials::of(p);
    let prob: Problem<F> = p.clone().into();
    let sh = p.shape();
    let g = positive_upstream(3, sh.batch);
    for e in engines(cuda, sh) {
        let what = format!("{name} {}: {e:?}", F::DTYPE);
        let want = e.forward::<LogSemiring>(&prob).unwrap();
        let got = e.forward_streamed::<LogSemiring, _>(&s).unwrap();
        assert_eq!(got, want, "{what}: log Z");
        let want = e.forward::<EntropySemiring>(&prob);
        let got = e.forward_streamed::<EntropySemiring, _>(&s);
        assert_eq!(got, want, "{what}: entropy");
        let want = e.viterbi(&prob).unwrap();
        assert_eq!(e.viterbi_streamed(&s).unwrap(), want, "{what}: Viterbi");
        let (has_bb, has_eb) = (p.begin_boundary().is_some(), p.end_boundary().is_some());
        let sink = GradientArrays::new(sh, has_bb, has_eb);
        match (e.backward(&prob, &g), e.backward_streamed(&s, &g, &sink)) {
            (Ok(want), Ok(got)) => {
                let (sc, bb, eb, bm) = sink.into_arrays();
                assert_eq!(got.log_z, want.log_z, "{what}");
                assert_eq!(Some(sc), want.grad.scores, "{what}: scores");
                assert_eq!(bb, want.grad.begin_boundary, "{what}: begin boundary");
                assert_eq!(eb, want.grad.end_boundary, "{what}: end boundary");
                assert_eq!(bm, want.boundary_marginals, "{what}: boundary marginals");
                assert_eq!(got.grad.transition, want.grad.transition, "{what}");
                assert_eq!(got.grad.duration, want.grad.duration, "{what}");
                assert_eq!(got.grad.start, want.grad.start, "{what}");
                assert_eq!(got.grad.end, want.grad.end, "{what}");
            }
            (Err(a), Err(b)) => assert_eq!(a, b, "{what}"),
            (a, b) => panic!("{what}: arrays {a:?}, source {b:?}"),
        }
    }
}

#[test]
fn a_source_gives_bitwise_the_results_of_arrays_on_the_gpu_for_every_chunk_size() {
    let Some(cuda) = gpu() else { return };
    for (name, owned) in problems() {
        same_as_arrays(cuda, &name, &owned.view().unwrap());
        let narrow = owned.cast::<f32>();
        same_as_arrays(cuda, &name, &narrow.view().unwrap());
    }
}

#[test]
fn a_source_on_the_gpu_matches_the_reference_oracle() {
    let Some(cuda) = gpu() else { return };
    for (name, owned) in problems() {
        let p = owned.view().unwrap();
        let s = StreamedPotentials::of(&p);
        let prob: Problem<f64> = p.clone().into();
        let e = cuda.chunk_rows(Some(7));
        let want = Reference.forward::<LogSemiring>(&prob).unwrap();
        let got = e.forward_streamed::<LogSemiring, _>(&s).unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert!(Tolerance::F64_VALUES.ok(*a, *b), "{name}: {a} vs {b}");
        }
        let best = e.viterbi_streamed(&s).unwrap();
        let max = Reference.forward::<MaxSemiring>(&prob).unwrap();
        for (d, m) in best.iter().zip(&max) {
            assert!(Tolerance::F64_VALUES.ok(d.score, *m), "{name}");
        }
        let g = positive_upstream(5, p.shape().batch);
        let Ok(want) = Reference.backward(&prob, &g) else {
            continue;
        };
        let sink = GradientArrays::new(p.shape(), true, true);
        let got = e.backward_streamed(&s, &g, &sink).unwrap();
        let (sc, _, _, bm) = sink.into_arrays();
        let tol = Tolerance::F64_GRADS;
        for (a, b) in sc.iter().zip(want.grad.scores.as_ref().unwrap().iter()) {
            assert!(tol.ok(*a, *b), "{name}: position marginal {a} vs {b}");
        }
        for (a, b) in bm.iter().zip(want.boundary_marginals.iter()) {
            assert!(tol.ok(*a, *b), "{name}: boundary marginal {a} vs {b}");
        }
        let (a, b) = (got.grad.transition.unwrap(), want.grad.transition.unwrap());
        for (a, b) in a.iter().zip(b.iter()) {
            assert!(tol.ok(*a, *b) || (a - b).abs() < 1e-9, "{name}: {a} vs {b}");
        }
    }
}

#[test]
fn a_computed_source_on_the_gpu_matches_its_values_in_arrays_and_the_oracle() {
    let Some(cuda) = gpu() else { return };
    let src = Hashed {
        lengths: vec![30, 17, 1],
        c: 3,
        bad: None,
    };
    let t = 30;
    let scores = Array3::from_shape_fn((3, t, 3), |(b, t, j)| hashed(b, t, j, 1));
    let bb = Array3::from_shape_fn((3, t, 3), |(b, t, j)| 0.5 * hashed(b, t, j, 2));
    let tr = Array2::from_shape_fn((3, 3), |(i, j)| hashed(9, i, j, 3));
    let k = 5;
    let p = Potentials::builder(scores.view(), &src.lengths, k)
        .begin_boundary(bb.view())
        .transition(tr.view())
        .build()
        .unwrap();
    let s = StreamedPotentials::builder(&src, k)
        .transition(tr.view())
        .build()
        .unwrap();
    let prob: Problem<f64> = p.into();
    let e = cuda.chunk_rows(Some(4));
    let got = e.forward_streamed::<LogSemiring, _>(&s).unwrap();
    assert_eq!(got, e.forward::<LogSemiring>(&prob).unwrap());
    let want = Reference.forward::<LogSemiring>(&prob).unwrap();
    for (a, b) in got.iter().zip(&want) {
        assert!(Tolerance::F64_VALUES.ok(*a, *b), "{a} vs {b}");
    }
    assert_eq!(e.viterbi_streamed(&s).unwrap(), e.viterbi(&prob).unwrap());
    let g = [1.0, 0.5, 2.0];
    let sink = GradientArrays::new(s.shape(), true, false);
    let got = e.backward_streamed(&s, &g, &sink).unwrap();
    let want = e.backward(&prob, &g).unwrap();
    let (sc, gbb, _, bm) = sink.into_arrays();
    assert_eq!(got.log_z, want.log_z);
    assert_eq!(Some(sc), want.grad.scores);
    assert_eq!(gbb, want.grad.begin_boundary);
    assert_eq!(bm, want.boundary_marginals);
}

#[test]
fn a_non_finite_row_from_a_source_on_the_gpu_is_an_error_naming_it() {
    let Some(cuda) = gpu() else { return };
    let src = Hashed {
        lengths: vec![20, 12],
        c: 3,
        bad: Some(11),
    };
    let s = StreamedPotentials::<f64, _>::builder(&src, 4)
        .build()
        .unwrap();
    let e = cuda.chunk_rows(Some(5));
    let want = Error::NonFinite {
        tensor: "scores",
        index: vec![0, 11, 1],
        value: f64::INFINITY,
    };
    assert_eq!(e.forward_streamed::<LogSemiring, _>(&s).unwrap_err(), want);
    assert_eq!(e.viterbi_streamed(&s).unwrap_err(), want);
    let sink = GradientArrays::new(s.shape(), true, false);
    assert_eq!(
        e.backward_streamed(&s, &[1.0, 1.0], &sink).unwrap_err(),
        want
    );
    // The engine answers as before afterwards.
    let ok = Hashed { bad: None, ..src };
    let s = StreamedPotentials::<f64, _>::builder(&ok, 4)
        .build()
        .unwrap();
    assert!(e.forward_streamed::<LogSemiring, _>(&s).is_ok());
}

/// A sink that fails at its first chunk.
struct Full;

impl GradientSink for Full {
    fn put(&self, sequence: usize, _t0: usize, _rows: GradientRows<'_>) -> Result<()> {
        Err(Error::Infeasible { sequence })
    }
}

#[test]
fn a_sink_error_ends_the_backward_pass_on_the_gpu() {
    let Some(cuda) = gpu() else { return };
    let src = Hashed {
        lengths: vec![9, 4],
        c: 2,
        bad: None,
    };
    let s = StreamedPotentials::<f64, _>::builder(&src, 3)
        .build()
        .unwrap();
    let e = cuda.chunk_rows(Some(2));
    let err = e.backward_streamed(&s, &[1.0, 1.0], &Full).unwrap_err();
    assert_eq!(err, Error::Infeasible { sequence: 0 });
    // The next call runs (the page-locked buffer was given back).
    let sink = GradientArrays::new(s.shape(), true, false);
    assert!(e.backward_streamed(&s, &[1.0, 1.0], &sink).is_ok());
}

fn query(op: Op, form: Form) -> Query {
    Query {
        shape: Shape::new(2, 1000, 16, 24),
        form,
        op,
        dtype_bytes: 4,
        threads: 1,
    }
}

/// The device holds the whole position tensors, as for arrays: the bound of a streamed
/// call is the bound of the same call on arrays (no GPU needed).
#[test]
fn the_memory_of_a_streamed_call_is_that_of_arrays_on_the_device() {
    let form = Form::Structured {
        duration_dependent_transition: false,
        boundaries: [true, false],
    };
    let e = CudaEngine::new(Algorithm::Streaming, 0);
    for op in [
        Op::forward::<LogSemiring>(),
        Op::forward::<EntropySemiring>(),
        Op::Viterbi,
        Op::Backward,
    ] {
        let q = query(op, form);
        let streamed = SourceEngine::<f32>::memory_required_streamed(&e, &q).unwrap();
        assert_eq!(streamed, e.memory_required(&q).unwrap());
        // At least the scores and the begin boundary in f32.
        assert!(streamed >= 2 * 2 * 1000 * 24 * 4, "{streamed}");
    }
    let exact = CudaEngine::new(Algorithm::Exact, 0);
    let q = query(Op::Viterbi, form);
    assert!(matches!(
        SourceEngine::<f32>::memory_required_streamed(&exact, &q),
        Err(Error::Unsupported { .. })
    ));
}
