//! The facade API: selection, forced backends, memory budgets, devices, NLL and marginals.
#![cfg(feature = "cpu")]

use semicrf::ndarray::{Array2, Array3, Axis};
use semicrf::reference::{self, Reference};
use semicrf::{
    Algorithm, Backend, Config, Device, EdgePotentials, Engine, EntropySemiring, Error,
    LogSemiring, MaxSemiring, Op, OwnedPotentials, Parallelism, Potentials, Problem, Segment,
    SemiCrf, materialize,
};
use semicrf_core::testing::{GenSpec, random_problem, random_segmentation, random_spec};

const TOL: f64 = 1e-9;

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= TOL * (1.0 + a.abs().max(b.abs()))
}

/// A plain structured problem of shape `(B, T, K, C)` with a static transition.
fn plain(batch: usize, len: usize, k: usize, c: usize) -> OwnedPotentials<f64> {
    random_problem(11, &GenSpec::new(batch, len, k, c))
}

fn with_budget(bytes: u64) -> SemiCrf {
    SemiCrf::with_config(Config::new().memory_budget(bytes))
}

#[test]
fn auto_selection_prefers_streaming_for_structured_input_and_says_why() {
    let owned = plain(2, 20, 4, 3);
    let problem: Problem<f64> = owned.view().unwrap().into();
    let s = SemiCrf::new().select(&problem, Op::Backward).unwrap();
    assert_eq!(s.algorithm, Algorithm::Streaming);
    assert_eq!(s.device, Device::Cpu);
    assert!(s.reason.contains("cpu/streaming"), "{}", s.reason);
    assert!(s.reason.contains("budget"), "{}", s.reason);
}

#[test]
fn auto_selection_prefers_exact_for_edge_input() {
    let owned = plain(1, 6, 3, 2);
    let p = owned.view().unwrap();
    let edges = materialize(&p);
    let problem: Problem<f64> = EdgePotentials::new(edges.view(), &owned.lengths)
        .unwrap()
        .into();
    let s = SemiCrf::new().select(&problem, Op::Backward).unwrap();
    assert_eq!(s.algorithm, Algorithm::Exact);
}

#[test]
fn a_forced_backend_is_the_only_candidate() {
    let owned = plain(2, 12, 3, 3);
    let problem: Problem<f64> = owned.view().unwrap().into();
    for (backend, algorithm) in [
        (Backend::Exact, Algorithm::Exact),
        (Backend::Scan, Algorithm::Scan),
        (Backend::Streaming, Algorithm::Streaming),
    ] {
        let crf = SemiCrf::with_config(Config::new().backend(backend));
        for op in [
            Op::forward::<LogSemiring>(),
            Op::forward::<MaxSemiring>(),
            Op::forward::<EntropySemiring>(),
            Op::Viterbi,
            Op::Backward,
        ] {
            let s = crf.select(&problem, op).unwrap();
            assert_eq!(s.algorithm, algorithm, "{backend} {op:?}");
            assert_eq!(s.index, 0);
        }
    }
}

#[test]
fn every_forced_backend_agrees_with_the_reference_on_log_z_and_viterbi() {
    let owned = random_problem(5, &random_spec(5));
    let problem: Problem<f64> = owned.view().unwrap().into();
    let want = Engine::<f64>::forward::<LogSemiring>(&Reference, &problem).unwrap();
    let want_max = Engine::<f64>::forward::<MaxSemiring>(&Reference, &problem).unwrap();
    let want_h = Engine::<f64>::forward::<EntropySemiring>(&Reference, &problem).unwrap();
    for backend in [Backend::Exact, Backend::Scan, Backend::Streaming] {
        let crf = SemiCrf::with_config(Config::new().backend(backend));
        let got = crf.log_partition(&problem).unwrap();
        let best = crf.viterbi(&problem).unwrap();
        let h = crf.forward::<EntropySemiring, f64>(&problem).unwrap();
        for b in 0..want.len() {
            assert!(close(h[b].entropy, want_h[b].entropy), "{backend}: entropy");
            assert!(
                close(got[b], want[b]),
                "{backend}: {} vs {}",
                got[b],
                want[b]
            );
            assert!(close(best[b].score, want_max[b]), "{backend}");
        }
    }
}

#[test]
fn streaming_forced_on_edge_input_is_unsupported() {
    let owned = plain(1, 5, 2, 2);
    let edges = materialize(&owned.view().unwrap());
    let problem: Problem<f64> = EdgePotentials::new(edges.view(), &owned.lengths)
        .unwrap()
        .into();
    let crf = SemiCrf::with_config(Config::new().backend(Backend::Streaming));
    assert!(matches!(
        crf.select(&problem, Op::Backward),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        crf.log_partition(&problem),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn a_budget_too_small_for_every_backend_is_a_memory_budget_error() {
    let owned = plain(2, 50, 5, 4);
    let problem: Problem<f64> = owned.view().unwrap().into();
    let tiny = with_budget(8);
    match tiny.select(&problem, Op::Backward) {
        Err(Error::MemoryBudget {
            required, budget, ..
        }) => {
            assert_eq!(budget, 8);
            assert!(required > 8);
        }
        other => panic!("expected a memory budget error, got {other:?}"),
    }
    assert!(matches!(
        tiny.log_partition(&problem),
        Err(Error::MemoryBudget { .. })
    ));
    assert!(matches!(
        tiny.marginals(&problem),
        Err(Error::MemoryBudget { .. })
    ));
}

#[test]
fn a_forced_backend_is_still_checked_against_the_budget() {
    let owned = plain(2, 50, 5, 4);
    let problem: Problem<f64> = owned.view().unwrap().into();
    let need = SemiCrf::with_config(Config::new().backend(Backend::Exact))
        .select(&problem, Op::Backward)
        .unwrap()
        .required;
    let crf = SemiCrf::with_config(
        Config::new()
            .backend(Backend::Exact)
            .memory_budget(need - 1),
    );
    assert!(matches!(
        crf.select(&problem, Op::Backward),
        Err(Error::MemoryBudget { .. })
    ));
    let crf = SemiCrf::with_config(Config::new().backend(Backend::Exact).memory_budget(need));
    assert_eq!(
        crf.select(&problem, Op::Backward).unwrap().algorithm,
        Algorithm::Exact
    );
}

#[test]
fn auto_selection_falls_through_to_the_next_candidate_that_fits() {
    // Structured input: streaming first, then exact. Give exactly exact's requirement when
    // streaming needs more, or streaming's when it needs less (then streaming is chosen).
    let owned = plain(1, 400, 8, 3);
    let problem: Problem<f64> = owned.view().unwrap().into();
    let need = |b: Backend| {
        SemiCrf::with_config(Config::new().backend(b))
            .select(&problem, Op::Backward)
            .unwrap()
            .required
    };
    let (streaming, exact, scan) = (
        need(Backend::Streaming),
        need(Backend::Exact),
        need(Backend::Scan),
    );
    let budget = streaming.min(exact).min(scan);
    let s = with_budget(budget).select(&problem, Op::Backward).unwrap();
    assert!(s.required <= budget);
    if s.algorithm != Algorithm::Streaming {
        assert!(
            s.reason.contains("cpu/streaming skipped"),
            "the reason names the skipped candidate: {}",
            s.reason
        );
    }
}

#[cfg(not(feature = "cuda"))]
#[test]
fn a_cuda_device_without_the_cuda_feature_is_unavailable() {
    let owned = plain(1, 4, 2, 2);
    let problem: Problem<f64> = owned.view().unwrap().into();
    let crf = SemiCrf::with_config(Config::new().device(Device::Cuda(0)));
    match crf.log_partition(&problem) {
        Err(Error::BackendUnavailable { backend, reason }) => {
            assert!(backend.starts_with("cuda/"), "{backend}");
            assert!(reason.contains("without the `cuda` feature"), "{reason}");
        }
        other => panic!("expected BackendUnavailable, got {other:?}"),
    }
    assert!(matches!(
        crf.select(&problem, Op::Viterbi),
        Err(Error::BackendUnavailable { .. })
    ));
}

#[cfg(feature = "cuda")]
#[test]
fn a_cuda_device_runs_or_says_why_it_cannot() {
    let owned = plain(2, 6, 3, 2);
    let problem: Problem<f64> = owned.view().unwrap().into();
    let crf = SemiCrf::with_config(Config::new().device(Device::Cuda(0)));
    let want = SemiCrf::new().log_partition(&problem).unwrap();
    match crf.log_partition(&problem) {
        Ok(z) => {
            for (a, b) in z.iter().zip(&want) {
                assert!(close(*a, *b), "{a} vs {b}");
            }
        }
        Err(Error::BackendUnavailable { backend, reason }) => {
            assert!(backend.starts_with("cuda/"), "{backend}");
            assert!(!reason.is_empty());
            assert!(
                std::env::var("SEMICRF_REQUIRE_GPU").as_deref() != Ok("1"),
                "SEMICRF_REQUIRE_GPU=1 but {reason}"
            );
            eprintln!("skipped (no usable GPU): {reason}");
        }
        Err(other) => panic!("expected a result or BackendUnavailable, got {other:?}"),
    }
}

#[test]
fn log_partition_matches_brute_force_enumeration() {
    for seed in 0..30 {
        let owned = random_problem(100 + seed, &random_spec(100 + seed));
        let p = owned.view().unwrap();
        let problem: Problem<f64> = p.clone().into();
        let got = SemiCrf::new().log_partition(&problem).unwrap();
        for (b, &z) in got.iter().enumerate() {
            let bf = reference::brute_force(&p, b).unwrap();
            assert!(close(z, bf.log_z), "seed {seed} b {b}: {z} vs {}", bf.log_z);
        }
    }
}

#[test]
fn nll_of_any_gold_segmentation_is_never_negative() {
    let crf = SemiCrf::new();
    let mut compared = 0;
    for seed in 0..40 {
        let owned = random_problem(200 + seed, &random_spec(200 + seed));
        let problem: Problem<f64> = owned.view().unwrap().into();
        let sh = problem.shape();
        let gold: Vec<Vec<Segment>> = owned
            .lengths
            .iter()
            .enumerate()
            .map(|(b, &len)| {
                random_segmentation(seed * 10 + b as u64, len, sh.max_duration, sh.labels)
            })
            .collect();
        let nll = crf.nll(&problem, &gold).unwrap();
        for (b, &x) in nll.iter().enumerate() {
            assert!(!x.is_nan(), "seed {seed} b {b}");
            assert!(x >= -1e-9, "seed {seed} b {b}: nll {x}");
            compared += 1;
        }
    }
    assert!(compared >= 40);
}

#[test]
fn nll_of_the_viterbi_segmentation_is_log_z_minus_the_viterbi_score() {
    let owned = plain(3, 9, 3, 4);
    let problem: Problem<f64> = owned.view().unwrap().into();
    let crf = SemiCrf::new();
    let best = crf.viterbi(&problem).unwrap();
    let log_z = crf.log_partition(&problem).unwrap();
    let gold: Vec<Vec<Segment>> = best.iter().map(|d| d.segments.clone()).collect();
    let nll = crf.nll(&problem, &gold).unwrap();
    for b in 0..3 {
        assert!(close(nll[b], log_z[b] - best[b].score));
        assert!(nll[b] >= 0.0);
    }
}

#[test]
fn nll_of_a_forbidden_gold_segmentation_is_infinite() {
    let scores = Array3::<f64>::zeros((1, 3, 2));
    let transition = semicrf::ndarray::array![[0.0, f64::NEG_INFINITY], [0.0, 0.0]];
    let lengths = [3];
    let problem: Problem<f64> = Potentials::builder(scores.view(), &lengths, 2)
        .transition(transition.view())
        .build()
        .unwrap()
        .into();
    let gold = vec![vec![Segment::new(0, 1, 0), Segment::new(1, 2, 1)]];
    assert_eq!(
        SemiCrf::new().nll(&problem, &gold).unwrap(),
        [f64::INFINITY]
    );
}

#[test]
fn nll_rejects_a_gold_list_of_the_wrong_length_or_an_invalid_tiling() {
    let owned = plain(2, 4, 2, 2);
    let problem: Problem<f64> = owned.view().unwrap().into();
    let crf = SemiCrf::new();
    let one = vec![vec![Segment::new(0, 2, 0), Segment::new(2, 2, 1)]];
    assert!(matches!(
        crf.nll(&problem, &one),
        Err(Error::Segmentation { .. })
    ));
    let gap = vec![one[0].clone(), vec![Segment::new(0, 1, 0)]];
    assert!(matches!(
        crf.nll(&problem, &gap),
        Err(Error::Segmentation { sequence: 1, .. })
    ));
}

/// Σ_c position marginals = 1 for t < L and 0 beyond; boundary marginals are 1 at t = 0, in
/// [0, 1] inside and 0 beyond.
fn check_marginals(position: &Array3<f64>, boundary: &Array2<f64>, lengths: &[usize]) {
    for (b, &len) in lengths.iter().enumerate() {
        for t in 0..position.dim().1 {
            let total: f64 = position.index_axis(Axis(0), b).row(t).sum();
            let bm = boundary[[b, t]];
            if t < len {
                assert!((total - 1.0).abs() < 1e-9, "b {b} t {t}: sum {total}");
                assert!((-1e-12..=1.0 + 1e-9).contains(&bm), "b {b} t {t}: {bm}");
            } else {
                assert!(
                    total.abs() < 1e-12,
                    "b {b} t {t} beyond the length: {total}"
                );
                assert_eq!(bm, 0.0, "b {b} t {t} beyond the length");
            }
        }
        assert!((boundary[[b, 0]] - 1.0).abs() < 1e-9);
    }
}

#[test]
fn position_marginals_sum_to_one_at_every_position_inside_the_length() {
    let mut compared = 0;
    for seed in 0..30 {
        let owned = random_problem(300 + seed, &random_spec(300 + seed));
        let problem: Problem<f64> = owned.view().unwrap().into();
        let m = match SemiCrf::new().marginals(&problem) {
            Ok(m) => m,
            Err(Error::Infeasible { .. }) => continue,
            Err(e) => panic!("seed {seed}: {e}"),
        };
        check_marginals(&m.position, &m.boundary, &owned.lengths);
        assert!(m.edges.is_none());
        compared += 1;
    }
    assert!(compared >= 10, "only {compared} feasible problems");
}

#[test]
fn marginals_of_edge_input_match_those_of_the_structured_problem() {
    let mut spec = GenSpec::new(3, 7, 3, 3);
    spec.ragged = true;
    spec.boundaries = true;
    spec.start = true;
    spec.end = true;
    let owned = random_problem(17, &spec);
    let p = owned.view().unwrap();
    let edges = materialize(&p);
    let structured: Problem<f64> = p.into();
    let edge_problem: Problem<f64> = EdgePotentials::new(edges.view(), &owned.lengths)
        .unwrap()
        .into();
    let crf = SemiCrf::new();
    let a = crf.marginals(&structured).unwrap();
    let b = crf.marginals(&edge_problem).unwrap();
    check_marginals(&b.position, &b.boundary, &owned.lengths);
    assert!(b.edges.is_some());
    for (x, y) in a.position.iter().zip(b.position.iter()) {
        assert!((x - y).abs() < 1e-9, "{x} vs {y}");
    }
    for (x, y) in a.boundary.iter().zip(b.boundary.iter()) {
        assert!((x - y).abs() < 1e-9, "{x} vs {y}");
    }
    for (x, y) in a.log_z.iter().zip(&b.log_z) {
        assert!(close(*x, *y));
    }
}

#[test]
fn gradients_match_the_reference_and_scale_with_the_upstream() {
    let mut spec = GenSpec::new(2, 6, 3, 3);
    spec.start = true;
    spec.end = true;
    spec.boundaries = true;
    let owned = random_problem(23, &spec);
    let problem: Problem<f64> = owned.view().unwrap().into();
    let crf = SemiCrf::new();
    let want = Engine::<f64>::backward(&Reference, &problem, &[1.0, 1.0]).unwrap();
    let got = crf.gradients(&problem).unwrap();
    let pairs = [
        (
            got.scores.unwrap().into_dyn(),
            want.grad.scores.unwrap().into_dyn(),
        ),
        (got.transition.unwrap(), want.grad.transition.unwrap()),
        (
            got.duration.unwrap().into_dyn(),
            want.grad.duration.unwrap().into_dyn(),
        ),
        (
            got.start.unwrap().into_dyn(),
            want.grad.start.unwrap().into_dyn(),
        ),
        (
            got.end.unwrap().into_dyn(),
            want.grad.end.unwrap().into_dyn(),
        ),
        (
            got.begin_boundary.unwrap().into_dyn(),
            want.grad.begin_boundary.unwrap().into_dyn(),
        ),
        (
            got.end_boundary.unwrap().into_dyn(),
            want.grad.end_boundary.unwrap().into_dyn(),
        ),
    ];
    for (g, w) in &pairs {
        assert_eq!(g.shape(), w.shape());
        for (x, y) in g.iter().zip(w.iter()) {
            assert!((x - y).abs() < 1e-9, "{x} vs {y}");
        }
    }

    let half = crf.backward(&problem, Some(&[0.5, 0.0])).unwrap();
    let full = crf.backward(&problem, None).unwrap();
    let (hs, fs) = (half.grad.scores.unwrap(), full.grad.scores.unwrap());
    for t in 0..6 {
        for c in 0..3 {
            assert!((hs[[0, t, c]] - 0.5 * fs[[0, t, c]]).abs() < 1e-12);
            assert_eq!(hs[[1, t, c]], 0.0);
        }
    }
    assert_eq!(half.boundary_marginals, full.boundary_marginals);
}

#[test]
fn an_upstream_of_the_wrong_length_or_not_finite_is_rejected() {
    let owned = plain(2, 4, 2, 2);
    let problem: Problem<f64> = owned.view().unwrap().into();
    let crf = SemiCrf::new();
    assert!(matches!(
        crf.backward(&problem, Some(&[1.0])),
        Err(Error::Upstream { .. })
    ));
    assert!(matches!(
        crf.backward(&problem, Some(&[1.0, f64::NAN])),
        Err(Error::Upstream { .. })
    ));
}

#[test]
fn gradients_of_an_infeasible_sequence_are_a_typed_error() {
    let scores = Array3::from_elem((2, 2, 1), 0.0);
    let transition = semicrf::ndarray::array![[f64::NEG_INFINITY]];
    let lengths = [1, 2]; // K = 1: sequence 1 needs the forbidden transition
    let problem: Problem<f64> = Potentials::builder(scores.view(), &lengths, 1)
        .transition(transition.view())
        .build()
        .unwrap()
        .into();
    let crf = SemiCrf::new();
    let log_z = crf.log_partition(&problem).unwrap();
    assert!(log_z[0].is_finite());
    assert_eq!(log_z[1], f64::NEG_INFINITY);
    let best = crf.viterbi(&problem).unwrap();
    assert_eq!(best[1].score, f64::NEG_INFINITY);
    assert!(best[1].segments.is_empty());
    assert!(matches!(
        crf.marginals(&problem),
        Err(Error::Infeasible { sequence: 1 })
    ));
}

#[test]
fn f32_input_gives_the_f64_answer_to_single_precision() {
    let owned = plain(2, 10, 3, 3);
    let single = owned.cast::<f32>();
    let p64: Problem<f64> = owned.view().unwrap().into();
    let p32: Problem<f32> = single.view().unwrap().into();
    let crf = SemiCrf::new();
    let (a, b) = (
        crf.log_partition(&p64).unwrap(),
        crf.log_partition(&p32).unwrap(),
    );
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-4 * (1.0 + x.abs()), "{x} vs {y}");
    }
}

#[test]
fn sequential_and_threaded_runs_give_identical_results() {
    let owned = plain(6, 30, 4, 3);
    let problem: Problem<f64> = owned.view().unwrap().into();
    let seq = SemiCrf::with_config(Config::new().parallelism(Parallelism::Sequential));
    let par = SemiCrf::with_config(Config::new().parallelism(Parallelism::Rayon));
    assert_eq!(
        seq.backward(&problem, None).unwrap(),
        par.backward(&problem, None).unwrap()
    );
    assert_eq!(
        seq.viterbi(&problem).unwrap(),
        par.viterbi(&problem).unwrap()
    );
}

#[test]
fn entropy_is_that_of_the_posterior_and_an_infeasible_sequence_is_a_typed_error() {
    // Two labels, durations 1..=2, no potentials: every one of the segmentations of 3
    // positions is equally likely.
    let scores = Array3::<f64>::zeros((1, 3, 2));
    let lengths = [3];
    let problem: Problem<f64> = Potentials::builder(scores.view(), &lengths, 2)
        .build()
        .unwrap()
        .into();
    let n = reference::count_segmentations(3, 2, 2) as f64;
    for backend in [
        Backend::Auto,
        Backend::Exact,
        Backend::Scan,
        Backend::Streaming,
    ] {
        let crf = SemiCrf::with_config(Config::new().backend(backend));
        let h = crf.entropy(&problem).unwrap();
        assert!(
            (h[0] - n.ln()).abs() < 1e-12,
            "{backend}: {} vs ln {n}",
            h[0]
        );
    }
    // K = 1 and every transition forbidden: only a sequence of length 1 has a path.
    let scores = Array3::<f64>::zeros((3, 3, 2));
    let transition = Array2::from_elem((2, 2), f64::NEG_INFINITY);
    let lengths = [1, 3, 1];
    let problem: Problem<f64> = Potentials::builder(scores.view(), &lengths, 1)
        .transition(transition.view())
        .build()
        .unwrap()
        .into();
    for backend in [Backend::Exact, Backend::Scan, Backend::Streaming] {
        let crf = SemiCrf::with_config(Config::new().backend(backend));
        assert_eq!(
            crf.entropy(&problem),
            Err(Error::Infeasible { sequence: 1 })
        );
        assert_eq!(
            crf.gradients(&problem).unwrap_err(),
            Error::Infeasible { sequence: 1 }
        );
    }
}

#[test]
fn every_method_takes_built_potentials_directly_as_it_takes_a_problem() {
    let owned = plain(2, 7, 3, 3);
    let potentials = owned.view().unwrap();
    let edges_tensor = materialize(&potentials);
    let edges = EdgePotentials::new(edges_tensor.view(), &owned.lengths).unwrap();
    let b = owned.lengths.len();
    let want: Vec<f64> = (0..b)
        .map(|seq| reference::brute_force(&potentials, seq).unwrap().log_z)
        .collect();
    let crf = SemiCrf::new();
    let direct = crf.log_partition(&potentials).unwrap();
    let of_edges = crf.log_partition(&edges).unwrap();
    for seq in 0..b {
        assert!(
            close(direct[seq], want[seq]),
            "{} vs {}",
            direct[seq],
            want[seq]
        );
        assert!(
            close(of_edges[seq], want[seq]),
            "{} vs {}",
            of_edges[seq],
            want[seq]
        );
    }
    // The same call through a `Problem` gives the same bits, method by method.
    let problem = Problem::from(potentials.clone());
    assert_eq!(crf.log_partition(&problem).unwrap(), direct);
    assert_eq!(
        crf.select(&potentials, Op::Backward).unwrap(),
        crf.select(&problem, Op::Backward).unwrap()
    );
    assert_eq!(
        crf.forward::<MaxSemiring, _>(&potentials).unwrap(),
        crf.forward::<MaxSemiring, _>(&problem).unwrap()
    );
    assert_eq!(
        crf.entropy(&potentials).unwrap(),
        crf.entropy(&problem).unwrap()
    );
    let best = crf.viterbi(&potentials).unwrap();
    assert_eq!(best, crf.viterbi(&problem).unwrap());
    assert_eq!(
        crf.gradients(&potentials).unwrap(),
        crf.gradients(&problem).unwrap()
    );
    assert_eq!(
        crf.backward(&potentials, Some(&[1.0, 0.5])).unwrap(),
        crf.backward(&problem, Some(&[1.0, 0.5])).unwrap()
    );
    assert_eq!(
        crf.marginals(&potentials).unwrap(),
        crf.marginals(&problem).unwrap()
    );
    let gold: Vec<Vec<Segment>> = best.iter().map(|d| d.segments.clone()).collect();
    assert_eq!(
        crf.nll(&potentials, &gold).unwrap(),
        crf.nll(&problem, &gold).unwrap()
    );
    assert_eq!(
        crf.marginals(&edges).unwrap().edges.map(|e| e.dim()),
        Some((b, 7, 3, 3, 3))
    );
}
