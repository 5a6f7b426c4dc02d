//! The edge program shared by the exact and scan engines, on what is particular to it: the
//! checkpoint interval (exact is the one-interval case), and edge tensors and structured
//! inputs in any memory layout. (What every engine must satisfy is in the root conformance
//! suite.)

use ndarray::{Array5, Axis, IxDyn, Slice};
use rand::Rng;
use semicrf_core::testing::{GenSpec, TransitionKind, random_problem, random_spec, rng, upstream};
use semicrf_core::{
    Backward, EdgePotentials, Engine, EntropySemiring, LogSemiring, MaxSemiring, Potentials,
    Problem, materialize,
};
use semicrf_cpu::{ExactEngine, Parallelism, ScanEngine};

/// Random edges `(B, T, K, C, C)` with the shape and lengths of `p`, a quarter `-inf`.
fn random_edges(seed: u64, b: usize, t: usize, k: usize, c: usize) -> Array5<f64> {
    let mut r = rng(seed ^ 0xed9e);
    Array5::from_shape_fn((b, t, k, c, c), |_| {
        if r.random_bool(0.25) {
            f64::NEG_INFINITY
        } else {
            r.random_range(-2.0..2.0)
        }
    })
}

/// Every output of one engine on one problem, to compare bitwise.
fn everything<E: Engine<f64>>(e: &E, p: &Problem<'_, f64>, up: &[f64]) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {:?}",
        e.forward::<LogSemiring>(p),
        e.forward::<MaxSemiring>(p),
        e.forward::<EntropySemiring>(p),
        e.viterbi(p),
        e.backward(p, up)
    )
}

#[test]
fn every_checkpoint_interval_gives_the_exact_engines_results_bitwise() {
    let mut g = GenSpec::new(3, 23, 4, 3).everything();
    g.forbid_scores = 0.05;
    for tk in [TransitionKind::Static, TransitionKind::DurationDependent] {
        g.transition = tk;
        let owned = random_problem(11, &g);
        let up = [1.0, -0.5, 2.0];
        let edges = materialize(&owned.view().unwrap());
        let problems: [Problem<'_, f64>; 2] = [
            owned.view().unwrap().into(),
            EdgePotentials::new(edges.view(), &owned.lengths)
                .unwrap()
                .into(),
        ];
        for p in &problems {
            let exact = ExactEngine::new().parallelism(Parallelism::Sequential);
            let want = everything(&exact, p, &up);
            assert_eq!(ScanEngine::new().effective_checkpoint_interval(23, 4), 10);
            for delta in [
                None,
                Some(1),
                Some(2),
                Some(4),
                Some(7),
                Some(22),
                Some(23),
                Some(100),
            ] {
                let scan = ScanEngine::new().checkpoint_interval(delta);
                assert_eq!(everything(&scan, p, &up), want, "{tk:?} Δ = {delta:?}");
            }
        }
    }
}

#[test]
fn edges_in_any_layout_give_the_results_of_contiguous_edges() {
    let mut strided = 0;
    for seed in 0..40 {
        let g = random_spec(seed);
        let owned = random_problem(seed, &g);
        let (b, t, c) = (g.batch, g.len, g.labels);
        let edges = random_edges(seed, b, t, g.max_duration, c);
        let lengths = owned.lengths.clone();
        let up = upstream(seed, lengths.len());
        // Source axis stored first: a permuted, non-contiguous view of the same values.
        let swapped = edges
            .view()
            .permuted_axes([0, 1, 2, 4, 3])
            .as_standard_layout()
            .into_owned();
        let permuted = swapped.view().permuted_axes([0, 1, 2, 4, 3]);
        // pytorch-struct style: the duration axis shifted by one, sliced off.
        let mut padded = Array5::<f64>::zeros({
            let s = edges.shape();
            (s[0], s[1], s[2] + 1, s[3], s[4])
        });
        padded
            .slice_axis_mut(Axis(2), Slice::from(1..))
            .assign(&edges);
        let shifted = padded.slice_axis(Axis(2), Slice::from(1..));
        let dense: Problem<f64> = EdgePotentials::new(edges.view(), &lengths).unwrap().into();
        let engines = |p: &Problem<'_, f64>| {
            (
                everything(&ExactEngine::new(), p, &up),
                everything(&ScanEngine::new().checkpoint_interval(Some(2)), p, &up),
            )
        };
        let want = engines(&dense);
        for view in [permuted, shifted] {
            strided += usize::from(view.as_slice().is_none());
            let p: Problem<f64> = EdgePotentials::new(view, &lengths).unwrap().into();
            assert_eq!(engines(&p), want, "seed {seed}");
        }
    }
    assert!(strided > 40, "only {strided} views were not contiguous");
}

#[test]
fn non_contiguous_structured_inputs_give_the_results_of_contiguous_ones() {
    let mut g = GenSpec::new(2, 6, 3, 3);
    g.boundaries = true;
    let owned = random_problem(5, &g);
    // The scores stored (B, C, T) and viewed as (B, T, C).
    let stored = owned
        .scores
        .view()
        .permuted_axes(IxDyn(&[0, 2, 1]))
        .as_standard_layout()
        .into_owned();
    let scores = stored.view().permuted_axes(IxDyn(&[0, 2, 1]));
    assert!(scores.as_slice().is_none());
    let p: Problem<f64> = Potentials::builder(scores, &owned.lengths, 3)
        .transition(owned.transition.as_ref().unwrap().view())
        .duration(owned.duration.as_ref().unwrap().view())
        .begin_boundary(owned.begin_boundary.as_ref().unwrap().view())
        .end_boundary(owned.end_boundary.as_ref().unwrap().view())
        .build()
        .unwrap()
        .into();
    let dense: Problem<f64> = owned.view().unwrap().into();
    let up = [1.0, 0.5];
    for (a, b) in [
        (
            everything(&ExactEngine::new(), &p, &up),
            everything(&ExactEngine::new(), &dense, &up),
        ),
        (
            everything(&ScanEngine::new(), &p, &up),
            everything(&ScanEngine::new(), &dense, &up),
        ),
    ] {
        assert_eq!(a, b);
    }
}

/// The edge gradient of a sequence shorter than the padded length is zero past its end.
#[test]
fn edge_gradients_are_zero_past_each_sequence_end() {
    let edges = random_edges(3, 3, 9, 3, 2);
    let lengths = [9, 4, 1];
    let p: Problem<f64> = EdgePotentials::new(edges.view(), &lengths).unwrap().into();
    let runs: [Backward; 2] = [
        ExactEngine::new().backward(&p, &[1.0; 3]).unwrap(),
        ScanEngine::new()
            .checkpoint_interval(Some(2))
            .backward(&p, &[1.0; 3])
            .unwrap(),
    ];
    for back in runs {
        let mu = back.grad.edges.unwrap();
        for (b, &len) in lengths.iter().enumerate() {
            let tail = mu
                .index_axis(Axis(0), b)
                .slice_axis(Axis(0), Slice::from(len..))
                .to_owned();
            assert!(tail.iter().all(|&x| x == 0.0));
            assert!(
                back.boundary_marginals
                    .row(b)
                    .iter()
                    .skip(len)
                    .all(|&x| x == 0.0)
            );
        }
    }
}
