//! Posterior samples on the CUDA streaming engine against the posterior enumerated by brute
//! force (total variation of 10⁵ samples) and against the CPU streaming engine's samples for
//! the same seed, on shapes with more than 32 labels, more than 64 durations, `-inf` scores
//! and transitions, ragged lengths and both transition forms, in `f64` and `f32`.
//!
//! The samples equal the CPU engine's because a draw compares one uniform (the device computes
//! the host's generators) with cumulative weights, and the device's forward values and its
//! draws' `exp` and `log` differ from the CPU's only in the last bits: a
//! draw can differ only where its uniform falls within rounding (about 10⁻¹⁵ relative) of a
//! boundary between two choices, which none of the few million draws here comes near but
//! with probability about 10⁻⁸. Without a usable GPU every test prints why and passes,
//! unless `SEMICRF_REQUIRE_GPU=1`.

use semicrf_core::testing::{
    GenSpec, TransitionKind, random_problem, segmentation_posterior, total_variation,
};
use semicrf_core::{
    Algorithm, Engine, Error, LogSemiring, OwnedPotentials, Problem, Sampler, Samples, Scalar,
    Segment, gold_score, materialize, validate_segmentation,
};
use semicrf_cpu::{Parallelism, StreamingEngine};
use semicrf_cuda::CudaEngine;

const NEG: f64 = f64::NEG_INFINITY;

fn gpu() -> Option<CudaEngine> {
    CudaEngine::usable_or_skip(0)
}

/// The first problem of `spec` from `seed` on whose every sequence is feasible.
fn feasible(seed: u64, spec: &GenSpec) -> OwnedPotentials<f64> {
    (seed..)
        .step_by(100)
        .map(|s| random_problem(s, spec))
        .find(|o| {
            let p = Problem::Structured(o.view().unwrap());
            let z = StreamingEngine::new().forward::<LogSemiring>(&p).unwrap();
            z.iter().all(|z| z.is_finite())
        })
        .unwrap()
}

/// Small problems whose posterior can be enumerated, of every kind the sampler
/// distinguishes.
fn small() -> Vec<(&'static str, OwnedPotentials<f64>)> {
    let mut every = GenSpec::new(2, 6, 3, 2).everything();
    every.ragged = false;
    let mut dd = GenSpec::new(2, 6, 3, 2).everything();
    dd.transition = TransitionKind::DurationDependent;
    let mut cut = GenSpec::new(2, 7, 3, 3);
    cut.forbid_scores = 0.2;
    cut.forbid_transitions = 0.2;
    cut.capped_durations = true;
    let mut ragged = GenSpec::new(3, 7, 4, 2).everything();
    ragged.ragged = true;
    vec![
        ("every input", feasible(1, &every)),
        ("duration-dependent transition", feasible(2, &dd)),
        (
            "-inf scores and transitions, capped durations",
            feasible(3, &cut),
        ),
        ("ragged lengths", feasible(4, &ragged)),
    ]
}

/// Larger shapes: `C > 32`, `K > 64`, `K = 1000`, both forms, `-inf`, ragged lengths.
fn large() -> Vec<(String, OwnedPotentials<f64>)> {
    let shapes = [
        (3, 200, 20, 40, false),
        (2, 300, 100, 33, false),
        (2, 120, 80, 5, true),
        (2, 40, 12, 36, true),
        (1, 1100, 1000, 24, false),
        (4, 64, 7, 100, false),
    ];
    shapes
        .into_iter()
        .enumerate()
        .map(|(x, (b, t, k, c, dd))| {
            let mut g = GenSpec::new(b, t, k, c).everything();
            g.forbid_scores = 0.02;
            g.forbid_transitions = 0.1;
            if dd {
                g.transition = TransitionKind::DurationDependent;
            }
            let name = format!("({b}, {t}, {k}, {c}), duration-dependent {dd}");
            (name, feasible(40 + x as u64, &g))
        })
        .collect()
}

fn cpu_samples<F: Scalar>(p: &Problem<'_, F>, n: usize, seed: u64) -> Samples {
    StreamingEngine::new()
        .parallelism(Parallelism::Rayon)
        .sample(p, n, seed)
        .unwrap()
}

#[test]
fn samples_follow_the_enumerated_posterior_within_total_variation() {
    let Some(cuda) = gpu() else { return };
    for (name, owned) in small() {
        let p = owned.view().unwrap();
        let samples = cuda
            .sample(&Problem::Structured(p.clone()), 100_000, 7)
            .unwrap();
        for (b, per) in samples.iter().enumerate() {
            let post = segmentation_posterior(&p, b);
            let tv = total_variation(&post, per);
            println!(
                "{name}, sequence {b}: total variation {tv:.4} ({} segmentations)",
                post.len()
            );
            // 10⁵ samples of at most ~1400 segmentations resolve it to about 0.025.
            assert!(tv < 0.03, "{name}, sequence {b}: total variation {tv}");
        }
    }
}

#[test]
fn samples_are_the_cpu_streaming_engines_for_the_same_seed() {
    let Some(cuda) = gpu() else { return };
    let small = small().into_iter().map(|(n, o)| (n.to_string(), o));
    for (name, owned) in small.chain(large()) {
        let p = Problem::Structured(owned.view().unwrap());
        let got = cuda.sample(&p, 100, 2026).unwrap();
        assert_eq!(got, cpu_samples(&p, 100, 2026), "{name}");
        // The samples are valid segmentations of finite score.
        let v = owned.view().unwrap();
        let sh = v.shape();
        for (b, per) in got.iter().enumerate() {
            for y in per {
                validate_segmentation(b, y, v.lengths()[b], sh.max_duration, sh.labels).unwrap();
                assert!(gold_score(&v, b, y).unwrap().is_finite(), "{name}");
            }
        }
        // f32 input, widened exactly on both.
        let o32 = owned.cast::<f32>();
        let p32 = Problem::Structured(o32.view().unwrap());
        let got = cuda.sample(&p32, 50, 5).unwrap();
        assert_eq!(got, cpu_samples(&p32, 50, 5), "{name}, f32");
    }
}

#[test]
fn the_same_seed_gives_the_same_samples_and_another_seed_others() {
    let Some(cuda) = gpu() else { return };
    let (_, owned) = large().swap_remove(0);
    let p = Problem::Structured(owned.view().unwrap());
    let a = cuda.sample(&p, 30, 11).unwrap();
    assert_eq!(cuda.sample(&p, 30, 11).unwrap(), a);
    // The linear-domain kernels play no part: the same without them.
    assert_eq!(cuda.log_domain_only().sample(&p, 30, 11).unwrap(), a);
    assert_ne!(cuda.sample(&p, 30, 12).unwrap(), a);
    // A sequence's samples do not depend on the batch around it (the first keeps its
    // index 0, which keys its generators).
    let one = semicrf_core::testing::alone(&owned, 0);
    let alone = cuda
        .sample(&Problem::Structured(one.view().unwrap()), 30, 11)
        .unwrap();
    assert_eq!(alone[0], a[0]);
}

#[test]
fn an_infeasible_sequence_edge_input_and_the_edge_kernels_are_errors() {
    let Some(cuda) = gpu() else { return };
    let mut owned = random_problem(9, &GenSpec::new(2, 4, 2, 2));
    for t in 0..4 {
        for c in 0..2 {
            owned.scores[[1, t, c]] = NEG;
        }
    }
    let p = Problem::Structured(owned.view().unwrap());
    let r = cuda.sample(&p, 3, 0);
    assert!(matches!(r, Err(Error::Infeasible { sequence: 1 })), "{r:?}");
    let edges = materialize(&owned.view().unwrap());
    let e = semicrf_core::EdgePotentials::new(edges.view(), &owned.lengths).unwrap();
    let r = cuda.sample(&Problem::Edges(e), 1, 0);
    assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
    for a in [Algorithm::Exact, Algorithm::Scan] {
        let r = CudaEngine::new(a, 0).sample(&p, 1, 0);
        assert!(matches!(r, Err(Error::Unsupported { .. })), "{a:?}: {r:?}");
    }
    // Zero samples: empty lists.
    let fine = semicrf_core::testing::alone(&owned, 0);
    let s = cuda
        .sample(&Problem::Structured(fine.view().unwrap()), 0, 0)
        .unwrap();
    assert_eq!(s, vec![Vec::<Vec<Segment>>::new()]);
}
