//! `SemiCrf::kbest` and `SemiCrf::posterior_decode` through the facade, on every backend,
//! against brute-force enumeration (`semicrf::enumerate`); the CUDA module checks k best and
//! posterior decoding on the GPU (it skips with a printed reason without one, unless
//! `SEMICRF_REQUIRE_GPU=1`).

#![cfg(feature = "cpu")]

use semicrf::{
    Backend, Config, EdgePotentials, Error, Parallelism, Problem, SemiCrf, enumerate, materialize,
};
use semicrf_core::testing::{GenSpec, TransitionKind, random_problem};

fn crf(backend: Backend) -> SemiCrf {
    SemiCrf::with_config(
        Config::new()
            .backend(backend)
            .parallelism(Parallelism::Sequential),
    )
}

fn problem(seed: u64) -> semicrf::OwnedPotentials<f64> {
    let mut g = GenSpec::new(3, 5, 3, 3).everything();
    g.transition = TransitionKind::DurationDependent;
    g.forbid_transitions = 0.2;
    // Integer scores: exact ties, which must come in the documented order.
    let mut o = random_problem(seed, &g);
    let optional = [
        &mut o.transition,
        &mut o.duration,
        &mut o.start,
        &mut o.end,
        &mut o.begin_boundary,
        &mut o.end_boundary,
    ];
    for a in optional.into_iter().flatten().chain([&mut o.scores]) {
        a.mapv_inplace(|x| (x * 2.0).round());
    }
    o
}

#[test]
fn k_best_equals_brute_force_on_every_backend() {
    for seed in 0..3 {
        let o = problem(seed);
        let p: Problem<'_, f64> = o.view().unwrap().into();
        for backend in [
            Backend::Auto,
            Backend::Exact,
            Backend::Scan,
            Backend::Streaming,
        ] {
            for k in [1, 2, 5, 1000] {
                let got = crf(backend).kbest(&p, k).unwrap();
                for (b, got) in got.iter().enumerate() {
                    let want = enumerate::kbest(&p, b, k).unwrap();
                    assert_eq!(got.len(), want.len(), "{backend:?}, k = {k}, seq {b}");
                    for (g, w) in got.iter().zip(&want) {
                        assert_eq!((g.score, &g.segments), (w.score, &w.segments));
                    }
                }
            }
        }
    }
}

#[test]
fn the_first_of_each_list_is_the_viterbi_decoding() {
    let o = random_problem(4, &GenSpec::new(4, 40, 6, 4).everything());
    let crf = SemiCrf::new();
    let best = crf.kbest(&o.view().unwrap(), 1).unwrap();
    let viterbi = crf.viterbi(&o.view().unwrap()).unwrap();
    for (k, v) in best.iter().zip(&viterbi) {
        assert_eq!(k[0].segments, v.segments);
        assert!((k[0].score - v.score).abs() <= 1e-9 * v.score.abs().max(1.0));
    }
}

#[test]
fn posterior_decoding_equals_brute_force_on_every_backend() {
    for seed in 0..3 {
        let o = problem(seed);
        let p: Problem<'_, f64> = o.view().unwrap().into();
        let edges = materialize(&o.view().unwrap());
        let pe: Problem<'_, f64> = EdgePotentials::new(edges.view(), &o.lengths)
            .unwrap()
            .into();
        for backend in [Backend::Exact, Backend::Scan, Backend::Streaming] {
            for q in [&p, &pe] {
                if backend == Backend::Streaming && matches!(q, Problem::Edges(_)) {
                    continue;
                }
                let got = crf(backend).posterior_decode(q).unwrap();
                for (b, d) in got.iter().enumerate() {
                    let want = enumerate::posterior(q, b).unwrap();
                    let x = enumerate::expected_correct(&want.position, &d.segments);
                    assert!((x - want.best).abs() < 1e-9, "{backend:?} seq {b}");
                    assert!((d.score - want.best).abs() < 1e-9, "{backend:?} seq {b}");
                }
            }
        }
    }
}

#[test]
fn k_best_refuses_what_it_cannot_do_with_typed_errors() {
    let o = problem(1);
    let p = o.view().unwrap();
    let tiny = SemiCrf::with_config(Config::new().memory_budget(64));
    assert!(matches!(tiny.kbest(&p, 3), Err(Error::MemoryBudget { .. })));
    let edges = materialize(&p);
    let e = EdgePotentials::new(edges.view(), &o.lengths).unwrap();
    assert!(matches!(
        crf(Backend::Streaming).kbest(&e, 3),
        Err(Error::Unsupported { .. })
    ));
    let s = SemiCrf::new().select_kbest(&p, 3).unwrap();
    assert!(s.reason.contains("k = 3"), "{}", s.reason);
    // No posterior without a finite segmentation.
    let mut inf = o.clone();
    inf.scores.mapv_inplace(|_| f64::NEG_INFINITY);
    assert!(matches!(
        SemiCrf::new().posterior_decode(&inf.view().unwrap()),
        Err(Error::Infeasible { sequence: 0 })
    ));
    assert!(SemiCrf::new().kbest(&inf.view().unwrap(), 3).unwrap()[0].is_empty());
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use semicrf::Device;

    fn gpu() -> Option<SemiCrf> {
        semicrf::cuda::CudaEngine::usable_or_skip(0)?;
        Some(SemiCrf::with_config(Config::new().device(Device::Cuda(0))))
    }

    /// Posterior decoding is engine-generic: on the GPU it equals brute force too.
    #[test]
    fn posterior_decoding_on_cuda_equals_brute_force() {
        let Some(gpu) = gpu() else { return };
        for seed in 0..3 {
            let o = problem(seed);
            let p: Problem<'_, f64> = o.view().unwrap().into();
            let got = gpu.posterior_decode(&p).unwrap();
            for (b, d) in got.iter().enumerate() {
                let want = enumerate::posterior(&p, b).unwrap();
                let x = enumerate::expected_correct(&want.position, &d.segments);
                assert!(
                    (x - want.best).abs() < 1e-9,
                    "seq {b}: {x} vs {}",
                    want.best
                );
                assert!((d.score - want.best).abs() < 1e-9, "seq {b}");
            }
            let f32s = o.cast::<f32>();
            let got = gpu.posterior_decode(&f32s.view().unwrap()).unwrap();
            for (b, d) in got.iter().enumerate() {
                let want = enumerate::posterior(&p, b).unwrap();
                let x = enumerate::expected_correct(&want.position, &d.segments);
                assert!(
                    (x - want.best).abs() < 1e-4,
                    "f32 seq {b}: {x} vs {}",
                    want.best
                );
            }
        }
    }

    /// The k best of `p` on the CPU streaming engine (the reference the kernel follows
    /// value for value).
    fn on_cpu<F: semicrf::Scalar>(p: &Problem<'_, F>, k: usize) -> Vec<Vec<semicrf::Decoded>> {
        crf(Backend::Streaming).kbest(p, k).unwrap()
    }

    /// Lists equal, scores bit for bit.
    fn same(what: &str, got: &[Vec<semicrf::Decoded>], want: &[Vec<semicrf::Decoded>]) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (b, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.len(), w.len(), "{what}, seq {b}: list lengths");
            for (r, (g, w)) in g.iter().zip(w).enumerate() {
                assert_eq!(
                    g.score.to_bits(),
                    w.score.to_bits(),
                    "{what}, seq {b}, rank {r}"
                );
                assert_eq!(g.segments, w.segments, "{what}, seq {b}, rank {r}");
            }
        }
    }

    /// Integer scores (exact ties in the documented order), `(K, C, C)` transitions, every
    /// optional input, ragged lengths: the GPU's lists equal brute force and the CPU's, for
    /// `k` from 1 to more than exist, `f64` and `f32`.
    #[test]
    fn k_best_on_cuda_equals_brute_force_and_the_cpu_engine() {
        let Some(gpu) = gpu() else { return };
        for seed in 0..3 {
            let o = problem(seed);
            let p: Problem<'_, f64> = o.view().unwrap().into();
            for k in [1, 2, 5, 32, 1000] {
                let got = gpu.kbest(&p, k).unwrap();
                for (b, got) in got.iter().enumerate() {
                    let want = enumerate::kbest(&p, b, k).unwrap();
                    assert_eq!(got.len(), want.len(), "k = {k}, seq {b}");
                    for (g, w) in got.iter().zip(&want) {
                        assert_eq!((g.score, &g.segments), (w.score, &w.segments));
                    }
                }
                same(&format!("seed {seed}, k = {k}"), &got, &on_cpu(&p, k));
                let f32s = o.cast::<f32>();
                let q: Problem<'_, f32> = f32s.view().unwrap().into();
                same(
                    &format!("f32, seed {seed}, k = {k}"),
                    &gpu.kbest(&q, k).unwrap(),
                    &on_cpu(&q, k),
                );
            }
        }
    }

    /// Real-valued scores with `-inf` cuts, more than 32 labels and more than 64 durations,
    /// batches whose sequences are shorter than T: the GPU's lists are the CPU's, bit for bit.
    #[test]
    fn k_best_on_cuda_equals_the_cpu_engine_on_larger_problems() {
        let Some(gpu) = gpu() else { return };
        for (seed, (b, t, kd, c)) in [
            (1, (3, 120, 12, 40)),
            (2, (2, 150, 70, 3)),
            (3, (5, 300, 8, 24)),
        ] {
            let mut g = GenSpec::new(b, t, kd, c).everything();
            g.forbid_scores = 0.05;
            g.forbid_transitions = 0.2;
            g.capped_durations = seed == 3;
            let o = random_problem(seed, &g);
            let p: Problem<'_, f64> = o.view().unwrap().into();
            for k in [1, 8, 32] {
                let got = gpu.kbest(&p, k).unwrap();
                assert!(got[0].len() == k, "{b}x{t}x{kd}x{c}: k = {k}");
                same(&format!("{b}x{t}x{kd}x{c}, k = {k}"), &got, &on_cpu(&p, k));
            }
        }
    }

    /// `k = 0` gives empty lists; a `k` beyond the kernel's limit, edge input and the
    /// exact algorithm on the GPU are typed errors naming what is refused.
    #[test]
    fn k_best_on_cuda_refuses_what_it_cannot_do_with_typed_errors() {
        let Some(gpu) = gpu() else { return };
        let o = problem(0);
        let p = o.view().unwrap();
        assert!(gpu.kbest(&p, 0).unwrap().iter().all(|l| l.is_empty()));
        let max = semicrf::cuda::KBEST_MAX_K;
        assert_eq!(
            gpu.kbest(&p, max).unwrap()[0],
            on_cpu(&p.clone().into(), max)[0]
        );
        match gpu.kbest(&p, max + 1) {
            Err(Error::Unsupported { what, .. }) => assert!(what.contains("1024"), "{what}"),
            other => panic!("{other:?}"),
        }
        let edges = materialize(&p);
        let e = EdgePotentials::new(edges.view(), &o.lengths).unwrap();
        let exact = SemiCrf::with_config(
            Config::new()
                .device(Device::Cuda(0))
                .backend(Backend::Exact),
        );
        for r in [gpu.kbest(&e, 3), exact.kbest(&p, 3)] {
            assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
        }
    }
}
