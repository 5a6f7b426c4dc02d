//! k-best and posterior decoding on every CPU engine, against brute-force enumeration
//! (`semicrf_core::enumerate`): scores and segments for several `k`, ties of integer scores
//! in the documented order, `k = 1` against each engine's Viterbi, and the posterior
//! decoding against the best expected number of correct positions.

use ndarray::Array5;
use rand::Rng;
use semicrf_core::testing::{GenSpec, TransitionKind, cases, random_problem, rng};
use semicrf_core::{
    Decoded, EdgePotentials, Engine, KBest, OwnedPotentials, Problem, Query, enumerate,
    materialize, posterior_decode,
};
use semicrf_cpu::{ExactEngine, Parallelism, ScanEngine, StreamingEngine};

const SEQ: Parallelism = Parallelism::Sequential;

/// Runs `f` with each CPU engine (streaming only for structured input).
fn engines(structured: bool, mut f: impl FnMut(&str, &dyn Fn(&Problem<'_, f64>, usize) -> Run)) {
    let exact = ExactEngine::new().parallelism(SEQ);
    let scan = ScanEngine::new().checkpoint_interval(Some(2));
    let streaming = StreamingEngine::new().checkpoint_interval(Some(2));
    f("exact", &|p, k| run(&exact, p, k));
    f("scan", &|p, k| run(&scan, p, k));
    if structured {
        f("streaming", &|p, k| run(&streaming, p, k));
    }
}

struct Run {
    kbest: Vec<Vec<Decoded>>,
    viterbi: Vec<Decoded>,
    posterior: semicrf_core::Result<Vec<Decoded>>,
}

fn run<E: KBest<f64> + Engine<f64>>(e: &E, p: &Problem<'_, f64>, k: usize) -> Run {
    Run {
        kbest: e.kbest(p, k).unwrap(),
        viterbi: e.viterbi(p).unwrap(),
        posterior: posterior_decode(e, p),
    }
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Checks k best against enumeration; `exact_ties`: the scores are integers, so every tie
/// is exact and the segments must come in the documented order.
fn check_kbest(name: &str, p: &Problem<'_, f64>, exact_ties: bool) {
    let lengths = p.lengths();
    let all: Vec<Vec<Decoded>> = (0..lengths.len())
        .map(|b| enumerate::kbest(p, b, usize::MAX).unwrap())
        .collect();
    let most = all.iter().map(Vec::len).max().unwrap();
    engines(matches!(p, Problem::Structured(_)), |engine, go| {
        for k in [1, 2, 5, most + 3] {
            let out = go(p, k);
            for b in 0..lengths.len() {
                let want = &all[b][..k.min(all[b].len())];
                let got = &out.kbest[b];
                let at = format!("{name}, {engine}, k = {k}, sequence {b}");
                assert_eq!(got.len(), want.len(), "{at}: list lengths");
                for (n, (g, w)) in got.iter().zip(want).enumerate() {
                    assert!(
                        close(g.score, w.score),
                        "{at}, #{n}: {} vs {}",
                        g.score,
                        w.score
                    );
                    if exact_ties {
                        assert_eq!(g.segments, w.segments, "{at}, #{n}");
                    }
                    assert!(
                        n == 0 || got[n - 1].score >= g.score,
                        "{at}: not descending"
                    );
                }
                // Distinct segmentations, each scored as its list says.
                for (n, g) in got.iter().enumerate() {
                    assert!(got[..n].iter().all(|h| h.segments != g.segments), "{at}");
                    let again = all[b]
                        .iter()
                        .find(|d| d.segments == g.segments)
                        .expect("a listed segmentation has a finite score");
                    assert!(close(g.score, again.score), "{at}: #{n} rescored");
                }
                if k == 1 {
                    let v = &out.viterbi[b];
                    match got.first() {
                        Some(g) => {
                            assert!(close(g.score, v.score), "{at}: Viterbi {}", v.score);
                            assert_eq!(g.segments, v.segments, "{at}: Viterbi's segments");
                        }
                        None => assert!(v.score == f64::NEG_INFINITY && v.segments.is_empty()),
                    }
                }
            }
        }
    });
}

fn check_posterior(name: &str, p: &Problem<'_, f64>) {
    engines(matches!(p, Problem::Structured(_)), |engine, go| {
        let out = go(p, 1);
        let feasible = (0..p.lengths().len()).all(|b| !out.kbest[b].is_empty());
        let Ok(decoded) = out.posterior else {
            assert!(!feasible, "{name}, {engine}: {:?}", out.posterior);
            return;
        };
        for (b, d) in decoded.iter().enumerate() {
            let want = enumerate::posterior(p, b).unwrap();
            let at = format!("{name}, {engine}, sequence {b}");
            let got = enumerate::expected_correct(&want.position, &d.segments);
            assert!(
                (got - want.best).abs() < 1e-9,
                "{at}: {got} vs {}",
                want.best
            );
            assert!(
                (d.score - want.best).abs() < 1e-9,
                "{at}: score {}",
                d.score
            );
            // It is a segmentation the model allows.
            let listed = enumerate::kbest(p, b, usize::MAX).unwrap();
            assert!(
                listed.iter().any(|x| x.segments == d.segments),
                "{at}: forbidden"
            );
        }
    });
}

/// Small problems: every named edge case that brute force can take, and seeded random ones.
fn small_cases() -> Vec<(String, OwnedPotentials<f64>)> {
    let mut v: Vec<_> = cases(700, 0)
        .into_iter()
        .filter(|(_, o)| o.scores.shape()[1] <= 6)
        .collect();
    for seed in 0..6u64 {
        let mut g = GenSpec::new(3, 5, 3, 3).everything();
        g.transition = if seed % 2 == 0 {
            TransitionKind::Static
        } else {
            TransitionKind::DurationDependent
        };
        g.forbid_transitions = 0.2;
        g.forbid_scores = 0.1;
        v.push((format!("random {seed}"), random_problem(900 + seed, &g)));
    }
    v
}

/// The same problem with every finite value rounded to an integer in `-2..=2`: many exact
/// ties.
fn integer(o: &OwnedPotentials<f64>) -> OwnedPotentials<f64> {
    let r = |a: &ndarray::ArrayD<f64>| a.mapv(|x| (x.clamp(-1.0, 1.0) * 2.0).round());
    OwnedPotentials {
        scores: r(&o.scores),
        transition: o.transition.as_ref().map(r),
        duration: o.duration.as_ref().map(r),
        start: o.start.as_ref().map(r),
        end: o.end.as_ref().map(r),
        begin_boundary: o.begin_boundary.as_ref().map(r),
        end_boundary: o.end_boundary.as_ref().map(r),
        ..o.clone()
    }
}

#[test]
fn k_best_lists_equal_brute_force_on_every_engine_for_structured_input() {
    for (name, o) in small_cases() {
        let p: Problem<'_, f64> = o.view().unwrap().into();
        check_kbest(&name, &p, false);
    }
}

#[test]
fn integer_ties_come_in_the_documented_order_on_every_engine() {
    for (name, o) in small_cases() {
        let o = integer(&o);
        let p: Problem<'_, f64> = o.view().unwrap().into();
        check_kbest(&format!("{name} (integers)"), &p, true);
    }
}

/// Random edges `(B, T, K, C, C)`, a quarter `-inf`, integers when `integers`.
fn random_edges(seed: u64, shape: (usize, usize, usize, usize), integers: bool) -> Array5<f64> {
    let (b, t, k, c) = shape;
    let mut r = rng(seed);
    Array5::from_shape_fn((b, t, k, c, c), |_| {
        if r.random_bool(0.25) {
            f64::NEG_INFINITY
        } else if integers {
            r.random_range(-2i32..=2) as f64
        } else {
            r.random_range(-2.0..2.0)
        }
    })
}

#[test]
fn k_best_lists_equal_brute_force_for_edge_input() {
    let lengths = [5, 3, 1];
    for seed in 0..4 {
        for integers in [false, true] {
            let edges = random_edges(seed, (3, 5, 3, 3), integers);
            let p: Problem<'_, f64> = EdgePotentials::new(edges.view(), &lengths).unwrap().into();
            check_kbest(&format!("edges {seed}"), &p, integers);
            check_posterior(&format!("edges {seed}"), &p);
        }
    }
    // Materialised structured potentials: the same lists as the structured input.
    let o = integer(&random_problem(5, &GenSpec::new(2, 5, 3, 2).everything()));
    let edges = materialize(&o.view().unwrap());
    let p: Problem<'_, f64> = EdgePotentials::new(edges.view(), &o.lengths)
        .unwrap()
        .into();
    check_kbest("materialised", &p, true);
}

#[test]
fn posterior_decoding_maximises_the_expected_correct_positions_on_every_engine() {
    for (name, o) in small_cases() {
        let p: Problem<'_, f64> = o.view().unwrap().into();
        check_posterior(&name, &p);
    }
}

#[test]
fn k_best_memory_estimates_grow_with_k_and_bound_the_table() {
    let o = random_problem(1, &GenSpec::new(2, 50, 4, 3));
    let p: Problem<'_, f64> = o.view().unwrap().into();
    let q = Query::of(&p, semicrf_core::Op::Viterbi);
    let s = StreamingEngine::new();
    let e = ExactEngine::new();
    let small = KBest::<f64>::kbest_memory_required(&s, &q, 1).unwrap();
    let big = KBest::<f64>::kbest_memory_required(&s, &q, 10).unwrap();
    assert!(big > small);
    // 51 positions · 3 labels · 10 entries of 16 bytes per sequence in flight, at least.
    assert!(big >= 51 * 3 * 10 * 16);
    // Exact materialises edges: more than streaming.
    assert!(KBest::<f64>::kbest_memory_required(&e, &q, 10).unwrap() > big);
    let edges = materialize(&p.clone().try_into_structured());
    let pe: Problem<'_, f64> = EdgePotentials::new(edges.view(), &o.lengths)
        .unwrap()
        .into();
    let qe = Query::of(&pe, semicrf_core::Op::Viterbi);
    assert!(KBest::<f64>::kbest_memory_required(&s, &qe, 1).is_err());
    assert!(KBest::<f64>::kbest(&s, &pe, 1).is_err());
    assert!(
        KBest::<f64>::kbest(&e, &pe, 0)
            .unwrap()
            .iter()
            .all(Vec::is_empty)
    );
}

trait Structured<'a> {
    fn try_into_structured(self) -> semicrf_core::Potentials<'a, f64>;
}

impl<'a> Structured<'a> for Problem<'a, f64> {
    fn try_into_structured(self) -> semicrf_core::Potentials<'a, f64> {
        match self {
            Problem::Structured(p) => p,
            Problem::Edges(_) => unreachable!("built from structured potentials"),
        }
    }
}
