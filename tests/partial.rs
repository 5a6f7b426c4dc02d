//! Partially labelled sequences on every CPU engine: `log Z_partial` against brute-force
//! enumeration of the agreeing segmentations, the gradients of the partial NLL against
//! central finite differences (every input, structured and edge form), and the infeasible
//! and malformed annotations. The CUDA check is in `tests/cuda_partial.rs`.
#![cfg(feature = "cpu")]

use semicrf::ndarray::{Array2, ArrayD};
use semicrf::reference::for_each_segmentation;
use semicrf::{
    Backend, Config, EdgePotentials, Error, OwnedPotentials, Potentials, Problem, Segment, SemiCrf,
    gold_score, materialize,
};
use semicrf_core::testing::{GenSpec, TransitionKind, random_problem, rng, upstream};

use rand::Rng;

const BACKENDS: [Backend; 3] = [Backend::Exact, Backend::Scan, Backend::Streaming];

fn crf(backend: Backend) -> SemiCrf {
    SemiCrf::with_config(Config::new().backend(backend))
}

/// Whether segmentation `y` agrees with sequence `b` of the annotation.
fn agrees(y: &[Segment], labels: &Array2<i64>, b: usize) -> bool {
    y.iter().all(|s| {
        (s.start..s.end()).all(|t| labels[[b, t]] < 0 || labels[[b, t]] as usize == s.label)
    })
}

/// `log Z_partial` of sequence `b` by enumeration.
fn brute_force_partial(p: &Potentials<'_, f64>, labels: &Array2<i64>, b: usize) -> f64 {
    let sh = p.shape();
    let mut scores = Vec::new();
    for_each_segmentation(p.lengths()[b], sh.max_duration, sh.labels, |y| {
        if agrees(y, labels, b) {
            scores.push(gold_score(p, b, y).unwrap());
        }
    });
    let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + scores.iter().map(|s| (s - m).exp()).sum::<f64>().ln()
}

/// An annotation of `(B, T)` with about `known` of the positions labelled.
fn annotation(seed: u64, b: usize, t: usize, c: usize, known: f64) -> Array2<i64> {
    let mut r = rng(seed ^ 0x9a27);
    Array2::from_shape_fn((b, t), |_| {
        if r.random_bool(known) {
            r.random_range(0..c as i64)
        } else {
            -1
        }
    })
}

fn specs() -> Vec<(&'static str, GenSpec)> {
    let mut dd = GenSpec::new(3, 6, 3, 3).everything();
    dd.transition = TransitionKind::DurationDependent;
    let mut forbidden = GenSpec::new(3, 7, 4, 3).everything();
    forbidden.forbid_scores = 0.15;
    forbidden.forbid_transitions = 0.2;
    forbidden.capped_durations = true;
    vec![
        ("every input", GenSpec::new(3, 6, 3, 3).everything()),
        ("duration-dependent transition", dd),
        ("-inf potentials", forbidden),
        ("linear chain", GenSpec::new(2, 6, 1, 3)),
        ("K > T", GenSpec::new(2, 4, 6, 2)),
    ]
}

#[test]
fn log_z_partial_matches_brute_force_on_every_engine_and_form() {
    for (name, spec) in specs() {
        for (seed, known) in [(1, 0.0), (2, 0.3), (3, 0.7), (4, 1.0)] {
            let owned = random_problem(seed, &spec);
            let p = owned.view().unwrap();
            let sh = p.shape();
            let labels = annotation(seed, sh.batch, sh.len, sh.labels, known);
            let want: Vec<f64> = (0..sh.batch)
                .map(|b| brute_force_partial(&p, &labels, b))
                .collect();
            let edges = materialize(&p);
            let e = EdgePotentials::new(edges.view(), &owned.lengths).unwrap();
            for backend in BACKENDS {
                let mut forms = vec![("structured", Problem::from(p.clone()))];
                if backend != Backend::Streaming {
                    forms.push(("edges", Problem::from(e.clone())));
                }
                for (form, problem) in forms {
                    let got = crf(backend)
                        .log_partition_partial(&problem, labels.view())
                        .unwrap();
                    for b in 0..sh.batch {
                        let (g, w) = (got[b], want[b]);
                        assert!(
                            g == w || (g - w).abs() <= 1e-10 * (1.0 + w.abs()),
                            "{name}, known {known}, {backend:?} {form}, sequence {b}: \
                             {g} vs brute force {w}"
                        );
                    }
                }
            }
        }
    }
}

/// Every tensor of an owned problem, by name.
fn tensors(o: &mut OwnedPotentials<f64>) -> Vec<(&'static str, &mut ArrayD<f64>)> {
    let mut v = vec![("scores", &mut o.scores)];
    for (name, t) in [
        ("transition", o.transition.as_mut()),
        ("duration", o.duration.as_mut()),
        ("start", o.start.as_mut()),
        ("end", o.end.as_mut()),
        ("begin_boundary", o.begin_boundary.as_mut()),
        ("end_boundary", o.end_boundary.as_mut()),
    ] {
        if let Some(t) = t {
            v.push((name, t));
        }
    }
    v
}

/// `Σ_b u_b · NLL_partial_b`.
fn objective(crf: &SemiCrf, p: &Problem<'_, f64>, labels: &Array2<i64>, u: &[f64]) -> f64 {
    let nll = crf.partial_nll(p, labels.view()).unwrap();
    nll.iter().zip(u).map(|(n, u)| n * u).sum()
}

const H: f64 = 1e-5;
const FD_TOL: f64 = 2e-7;

#[test]
fn partial_nll_gradients_match_finite_differences_for_every_input_on_every_engine() {
    for tk in [TransitionKind::Static, TransitionKind::DurationDependent] {
        let mut spec = GenSpec::new(3, 5, 3, 3).everything();
        spec.transition = tk;
        let owned = random_problem(21, &spec);
        let labels = annotation(21, 3, 5, 3, 0.5);
        let u = upstream(21, 3);
        for backend in BACKENDS {
            let crf = crf(backend);
            let got = crf
                .partial_nll_backward(&owned.view().unwrap(), labels.view(), Some(&u))
                .unwrap();
            let fields = got.grad.fields();
            let mut o = owned.clone();
            let names: Vec<&str> = tensors(&mut o).iter().map(|(n, _)| *n).collect();
            for name in names {
                let analytic = fields
                    .iter()
                    .find(|(n, _)| *n == name)
                    .and_then(|(_, v)| v.clone())
                    .unwrap_or_else(|| panic!("{backend:?}: no gradient for {name}"));
                let size = analytic.len();
                for idx in 0..size {
                    let f = |delta: f64| {
                        let mut q = owned.clone();
                        for (n, t) in tensors(&mut q) {
                            if n == name {
                                t.as_slice_mut().unwrap()[idx] += delta;
                            }
                        }
                        objective(&crf, &q.view().unwrap().into(), &labels, &u)
                    };
                    let fd = (f(H) - f(-H)) / (2.0 * H);
                    let a = analytic.as_slice().unwrap()[idx];
                    assert!(
                        (a - fd).abs() <= FD_TOL,
                        "{tk:?}, {backend:?}: d/d {name}[{idx}] = {a} vs finite difference {fd}"
                    );
                }
            }
        }
    }
}

#[test]
fn partial_nll_gradients_of_edges_match_finite_differences() {
    let owned = random_problem(23, &GenSpec::new(2, 4, 2, 2).everything());
    let p = owned.view().unwrap();
    let edges = materialize(&p);
    let labels = annotation(23, 2, 4, 2, 0.5);
    let u = [1.0, -0.75];
    for backend in [Backend::Exact, Backend::Scan] {
        let crf = crf(backend);
        let e = EdgePotentials::new(edges.view(), &owned.lengths).unwrap();
        let got = crf
            .partial_nll_backward(&e, labels.view(), Some(&u))
            .unwrap();
        let analytic = got.grad.edges.unwrap();
        for (idx, &x) in edges.iter().enumerate() {
            if x == f64::NEG_INFINITY {
                assert_eq!(analytic.as_slice().unwrap()[idx], 0.0);
                continue;
            }
            let f = |delta: f64| {
                let mut q = edges.clone();
                q.as_slice_mut().unwrap()[idx] += delta;
                let e = EdgePotentials::new(q.view(), &owned.lengths).unwrap();
                objective(&crf, &e.into(), &labels, &u)
            };
            let fd = (f(H) - f(-H)) / (2.0 * H);
            let a = analytic.as_slice().unwrap()[idx];
            assert!(
                (a - fd).abs() <= FD_TOL,
                "{backend:?}: d/d edges[{idx}] = {a} vs finite difference {fd}"
            );
        }
    }
}

#[test]
fn an_annotation_nothing_agrees_with_is_minus_inf_and_its_nll_plus_inf() {
    // K = 1 and a -inf score for label 1 at position 1: annotating label 1 there leaves
    // nothing.
    let mut owned = random_problem(5, &GenSpec::new(2, 3, 1, 2));
    owned.scores[[0, 1, 1]] = f64::NEG_INFINITY;
    let labels = Array2::from_shape_vec((2, 3), vec![-1, 1, -1, 0, -1, 1]).unwrap();
    for backend in BACKENDS {
        let crf = crf(backend);
        let p = owned.view().unwrap();
        let z = crf.log_partition_partial(&p, labels.view()).unwrap();
        assert_eq!(z[0], f64::NEG_INFINITY, "{backend:?}");
        assert!(z[1].is_finite());
        let nll = crf.partial_nll(&p, labels.view()).unwrap();
        assert_eq!(nll[0], f64::INFINITY);
        assert!(nll[1] >= 0.0 && nll[1].is_finite());
        assert!(matches!(
            crf.partial_nll_backward(&p, labels.view(), None),
            Err(Error::Infeasible { sequence: 0 })
        ));
    }
}

#[test]
fn an_unknown_annotation_gives_log_z_and_a_zero_nll() {
    let owned = random_problem(6, &GenSpec::new(2, 6, 3, 3).everything());
    let p = owned.view().unwrap();
    let labels = Array2::from_elem((2, 6), -1i64);
    let crf = SemiCrf::new();
    assert_eq!(
        crf.log_partition_partial(&p, labels.view()).unwrap(),
        crf.log_partition(&p).unwrap()
    );
    let out = crf.partial_nll_backward(&p, labels.view(), None).unwrap();
    assert!(out.nll.iter().all(|&x| x == 0.0));
    assert!(out.grad.scores.unwrap().iter().all(|&g| g == 0.0));
}

#[test]
fn a_malformed_annotation_is_an_error_naming_it() {
    let owned = random_problem(7, &GenSpec::new(2, 4, 2, 3));
    let p = owned.view().unwrap();
    let crf = SemiCrf::new();
    let wrong_shape = Array2::from_elem((2, 5), -1i64);
    let e = crf
        .log_partition_partial(&p, wrong_shape.view())
        .unwrap_err();
    assert!(
        matches!(&e, Error::Shape { tensor, .. } if *tensor == "partial_labels"),
        "{e}"
    );
    for bad in [3, -2] {
        let mut labels = Array2::from_elem((2, 4), -1i64);
        labels[[1, 2]] = bad;
        let e = crf.partial_nll(&p, labels.view()).unwrap_err();
        assert!(
            matches!(e, Error::Segmentation { sequence: 1, .. })
                && e.to_string().contains("position 2"),
            "{e}"
        );
    }
}
