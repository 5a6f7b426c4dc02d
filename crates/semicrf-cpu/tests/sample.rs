//! Exact posterior samples on every CPU engine, against the posterior enumerated by brute
//! force: a chi-square test at a fixed seed, the total variation of 10⁵ samples,
//! reproducibility (threads, checkpoint intervals, engines) and long sequences.

use std::collections::HashMap;

use semicrf_core::testing::{
    GenSpec, TransitionKind, random_problem, segmentation_posterior, total_variation,
};
use semicrf_core::{
    EdgePotentials, Engine, Error, LogSemiring, OwnedPotentials, Problem, Sampler, Segment,
    gold_score, materialize, validate_segmentation,
};
use semicrf_cpu::{ExactEngine, Parallelism, ScanEngine, StreamingEngine};

/// Counts of each drawn segmentation.
fn counts(samples: &[Vec<Segment>]) -> HashMap<Vec<Segment>, usize> {
    let mut c = HashMap::new();
    for y in samples {
        *c.entry(y.clone()).or_insert(0) += 1;
    }
    c
}

/// Pearson's chi-square statistic and its degrees of freedom, outcomes of expected count
/// below 5 pooled into one bin; a sample outside the support fails at once.
fn chi_square(p: &HashMap<Vec<Segment>, f64>, samples: &[Vec<Segment>]) -> (f64, usize) {
    let n = samples.len() as f64;
    let c = counts(samples);
    assert!(
        c.keys().all(|y| p.contains_key(y)),
        "a sample outside the posterior's support"
    );
    let (mut stat, mut bins) = (0.0, 0usize);
    let (mut pooled_e, mut pooled_o) = (0.0, 0.0);
    for (y, &q) in p {
        let (e, o) = (q * n, c.get(y).copied().unwrap_or(0) as f64);
        if e < 5.0 {
            pooled_e += e;
            pooled_o += o;
        } else {
            stat += (o - e) * (o - e) / e;
            bins += 1;
        }
    }
    if pooled_e > 0.0 {
        stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
        bins += 1;
    }
    (stat, bins.saturating_sub(1))
}

/// The chi-square quantile of `df` degrees of freedom at upper tail 1e-4 (Wilson–Hilferty).
fn chi_square_limit(df: usize) -> f64 {
    let df = df.max(1) as f64;
    let z = 3.719; // the standard normal quantile of 1 - 1e-4
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

/// The three CPU engines (sequential), with checkpoint intervals that make scan and
/// streaming recompute blocks.
fn engines() -> (ExactEngine, ScanEngine, StreamingEngine) {
    let seq = Parallelism::Sequential;
    (
        ExactEngine::new().parallelism(seq),
        ScanEngine::new()
            .parallelism(seq)
            .checkpoint_interval(Some(2)),
        StreamingEngine::new()
            .parallelism(seq)
            .checkpoint_interval(Some(2)),
    )
}

/// Samples of every engine that takes the problem's form, by name.
fn all_samples(
    p: &Problem<'_, f64>,
    n: usize,
    seed: u64,
) -> Vec<(&'static str, Vec<Vec<Vec<Segment>>>)> {
    let (exact, scan, streaming) = engines();
    let mut out = vec![
        ("exact", exact.sample(p, n, seed).unwrap()),
        ("scan", scan.sample(p, n, seed).unwrap()),
    ];
    if matches!(p, Problem::Structured(_)) {
        out.push(("streaming", streaming.sample(p, n, seed).unwrap()));
    }
    out
}

/// Small problems of every kind the engines distinguish.
fn problems() -> Vec<(&'static str, OwnedPotentials<f64>)> {
    let mut everything = GenSpec::new(2, 5, 3, 2).everything();
    everything.ragged = false;
    let mut dd = GenSpec::new(2, 5, 3, 2);
    dd.transition = TransitionKind::DurationDependent;
    dd.start = true;
    let mut forbidden = GenSpec::new(2, 6, 3, 2);
    forbidden.forbid_scores = 0.2;
    forbidden.capped_durations = true;
    let mut lengths = GenSpec::new(3, 6, 4, 2);
    lengths.ragged = true;
    vec![
        ("every input", feasible(1, &everything)),
        ("duration-dependent transition", feasible(2, &dd)),
        ("-inf scores and capped durations", feasible(3, &forbidden)),
        ("ragged lengths", feasible(4, &lengths)),
    ]
}

/// The problem of `spec` from the first seed from `seed` on whose every sequence is feasible.
fn feasible(seed: u64, spec: &GenSpec) -> OwnedPotentials<f64> {
    (seed..)
        .step_by(100)
        .map(|s| random_problem(s, spec))
        .find(|o| {
            let z = ExactEngine::new().forward::<LogSemiring>(&o.view().unwrap().into());
            z.unwrap().iter().all(|z| z.is_finite())
        })
        .unwrap()
}

#[test]
fn samples_pass_a_chi_square_test_against_the_enumerated_posterior_on_every_engine() {
    let n = 20_000;
    for (name, owned) in problems() {
        let p = owned.view().unwrap();
        let edges = materialize(&p);
        let as_edges = EdgePotentials::new(edges.view(), &owned.lengths).unwrap();
        for problem in [Problem::from(p.clone()), Problem::from(as_edges)] {
            for (engine, samples) in all_samples(&problem, n, 2026) {
                for b in 0..p.shape().batch {
                    let post = segmentation_posterior(&p, b);
                    let (stat, df) = chi_square(&post, &samples[b]);
                    let limit = chi_square_limit(df);
                    assert!(
                        stat < limit,
                        "{name}, {engine}, sequence {b}: chi-square {stat:.1} >= {limit:.1} \
                         ({df} degrees of freedom)"
                    );
                }
            }
        }
    }
}

#[test]
fn the_empirical_distribution_of_1e5_samples_is_within_total_variation_001() {
    // Few enough segmentations that 10⁵ samples can resolve the posterior to 0.01.
    let mut g = GenSpec::new(1, 4, 2, 2).everything();
    g.ragged = false;
    let owned = random_problem(7, &g);
    let p = owned.view().unwrap();
    let post = segmentation_posterior(&p, 0);
    let problem = Problem::from(p);
    let mut worst: f64 = 0.0;
    for (engine, samples) in all_samples(&problem, 100_000, 99) {
        let tv = total_variation(&post, &samples[0]);
        println!(
            "{engine}: total variation {tv:.5} over {} segmentations",
            post.len()
        );
        assert!(tv < 0.01, "{engine}: total variation {tv}");
        worst = worst.max(tv);
    }
    println!("worst total variation: {worst:.5}");
}

#[test]
fn every_sample_is_a_valid_segmentation_of_finite_score() {
    let mut g = GenSpec::new(3, 40, 6, 4).everything();
    g.forbid_scores = 0.1;
    g.capped_durations = true;
    for tk in [TransitionKind::Static, TransitionKind::DurationDependent] {
        g.transition = tk;
        let owned = random_problem(5, &g);
        let p = owned.view().unwrap();
        let z = ExactEngine::new()
            .forward::<LogSemiring>(&p.clone().into())
            .unwrap();
        if z.contains(&f64::NEG_INFINITY) {
            continue;
        }
        for (engine, samples) in all_samples(&p.clone().into(), 20, 3) {
            for (b, per) in samples.iter().enumerate() {
                assert_eq!(per.len(), 20);
                for y in per {
                    validate_segmentation(b, y, owned.lengths[b], 6, 4).unwrap();
                    let s = gold_score(&p, b, y).unwrap();
                    assert!(s.is_finite(), "{engine}: a sample of score {s}");
                }
            }
        }
    }
}

#[test]
fn samples_are_the_same_for_any_threads_checkpoint_interval_and_edge_engine() {
    let mut g = GenSpec::new(4, 30, 5, 3).everything();
    g.forbid_scores = 0.05;
    let owned = random_problem(8, &g);
    let p: Problem<'_, f64> = owned.view().unwrap().into();
    let want = ExactEngine::new()
        .parallelism(Parallelism::Sequential)
        .sample(&p, 50, 17)
        .unwrap();
    let pool = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    };
    for threads in [1, 2] {
        let got = pool(threads).install(|| ExactEngine::new().sample(&p, 50, 17).unwrap());
        assert_eq!(got, want, "exact on {threads} threads");
        for delta in [None, Some(1), Some(3), Some(7), Some(100)] {
            let scan = ScanEngine::new().checkpoint_interval(delta);
            let got = pool(threads).install(|| scan.sample(&p, 50, 17).unwrap());
            assert_eq!(got, want, "scan, Δ = {delta:?}, {threads} threads");
        }
        let stream_want = StreamingEngine::new()
            .parallelism(Parallelism::Sequential)
            .sample(&p, 50, 17)
            .unwrap();
        for delta in [None, Some(1), Some(3), Some(7), Some(100)] {
            let e = StreamingEngine::new().checkpoint_interval(delta);
            let got = pool(threads).install(|| e.sample(&p, 50, 17).unwrap());
            assert_eq!(
                got, stream_want,
                "streaming, Δ = {delta:?}, {threads} threads"
            );
        }
    }
    // A sequence's samples do not depend on the batch around it, and another seed differs.
    let one = semicrf_core::testing::alone(&owned, 2);
    let alone = ExactEngine::new()
        .sample(&one.view().unwrap().into(), 50, 17)
        .unwrap();
    assert_ne!(alone[0], want[2], "sequence index keys the generator");
    let other = ExactEngine::new().sample(&p, 50, 18).unwrap();
    assert_ne!(other, want);
}

#[test]
fn a_long_sequence_samples_from_checkpoints_on_the_streaming_engine() {
    let mut g = GenSpec::new(1, 20_000, 12, 4);
    g.forbid_scores = 0.01;
    let owned = random_problem(12, &g);
    let p = owned.view().unwrap();
    let problem: Problem<'_, f64> = p.clone().into();
    let samples = StreamingEngine::new().sample(&problem, 3, 1).unwrap();
    for y in &samples[0] {
        validate_segmentation(0, y, 20_000, 12, 4).unwrap();
        assert!(gold_score(&p, 0, y).unwrap().is_finite());
    }
    // The checkpointed samples are those of every other interval, bitwise.
    let small = StreamingEngine::new()
        .checkpoint_interval(Some(13))
        .sample(&problem, 3, 1)
        .unwrap();
    assert_eq!(small, samples);
}

#[test]
fn an_infeasible_sequence_is_an_error_and_zero_samples_are_empty_lists() {
    let mut g = GenSpec::new(2, 4, 2, 2);
    g.transition = TransitionKind::Absent;
    let mut owned = random_problem(9, &g);
    for t in 0..4 {
        for c in 0..2 {
            owned.scores[[1, t, c]] = f64::NEG_INFINITY;
        }
    }
    owned.scores[[1, 0, 0]] = 0.0;
    owned.scores[[1, 1, 0]] = f64::NEG_INFINITY;
    owned.scores[[1, 0, 1]] = f64::NEG_INFINITY;
    let p: Problem<'_, f64> = owned.view().unwrap().into();
    let (exact, scan, streaming) = engines();
    for r in [
        exact.sample(&p, 3, 0),
        scan.sample(&p, 3, 0),
        streaming.sample(&p, 3, 0),
    ] {
        assert!(matches!(r, Err(Error::Infeasible { sequence: 1 })), "{r:?}");
    }
    let fine = semicrf_core::testing::alone(&owned, 0);
    let s = exact.sample(&fine.view().unwrap().into(), 0, 0).unwrap();
    assert_eq!(s, vec![Vec::<Vec<Segment>>::new()]);
    let edges = materialize(&owned.view().unwrap());
    let e: Problem<'_, f64> = EdgePotentials::new(edges.view(), &owned.lengths)
        .unwrap()
        .into();
    assert!(matches!(
        streaming.sample(&e, 1, 0),
        Err(Error::Unsupported { .. })
    ));
}
