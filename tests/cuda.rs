//! The CUDA streaming engine against the CPU streaming engine and the oracle on the shapes
//! that stress a kernel's block layout (`K` and `C` not multiples of the team or warp size,
//! `K` and `C` above 32 and 1024 lanes), and bitwise reproducibility across runs.
//!
//! The cross-backend conformance suite (`tests/conformance.rs`, module `cuda`) holds the
//! rest. Without a usable GPU every test here prints why and passes, unless
//! `SEMICRF_REQUIRE_GPU=1`, which makes that a failure.
#![cfg(all(feature = "cpu", feature = "cuda"))]

use semicrf_core::reference::{self, Reference};
use semicrf_core::testing::{
    GenSpec, Tolerance, TransitionKind, Worst, assert_gradients_close, random_problem, upstream,
};
use semicrf_core::{Engine, EntropySemiring, LogSemiring, MaxSemiring, Problem, gold_score};
use semicrf_cpu::{Parallelism, StreamingEngine};
use semicrf_cuda::CudaEngine;

fn gpu() -> Option<CudaEngine> {
    CudaEngine::usable_or_skip(0)
}

/// Every `(K, C)` of the grid, both transition forms, all inputs, ragged lengths and some
/// `-inf` scores and transitions: CUDA against CPU streaming (itself checked against the
/// oracle by the conformance suite), in every semiring, gradients and Viterbi.
#[test]
fn every_block_layout_matches_the_cpu_engine() {
    let Some(cuda) = gpu() else { return };
    layouts_match(&cuda, "cuda");
}

/// The same with the log semiring in the log-domain kernels only.
#[test]
fn every_block_layout_matches_the_cpu_engine_in_the_log_domain() {
    let Some(cuda) = gpu() else { return };
    layouts_match(&cuda.log_domain_only(), "cuda (log domain)");
}

fn layouts_match(cuda: &CudaEngine, name: &str) {
    let cuda = *cuda;
    let reruns = CudaEngine::reruns();
    let cpu = StreamingEngine::new().parallelism(Parallelism::Rayon);
    let worst_z = Worst::new(format!("{name} vs cpu: log Z (relative)"));
    let worst_g = Worst::new(format!("{name} vs cpu: gradients (absolute)"));
    let mut n = 0;
    for (x, k) in [1usize, 2, 3, 64, 1000].into_iter().enumerate() {
        for (y, c) in [1usize, 3, 5, 24, 33, 100].into_iter().enumerate() {
            for dd in [false, true] {
                // Keep the duration-dependent O(T·K·C²) cases small.
                let len = match (dd, k * c * c) {
                    (true, w) if w > 200_000 => 12,
                    (true, _) => 40,
                    (false, _) if k == 1000 => 1100,
                    _ => 70,
                };
                let mut spec = GenSpec::new(3, len, k, c).everything();
                spec.transition = if dd {
                    TransitionKind::DurationDependent
                } else {
                    TransitionKind::Static
                };
                spec.forbid_scores = 0.02;
                spec.forbid_transitions = if c > 1 { 0.1 } else { 0.0 };
                let seed = (x * 100 + y * 10 + dd as usize) as u64;
                let owned = random_problem(seed, &spec);
                let p = Problem::Structured(owned.view().unwrap());
                let tag = format!("K={k} C={c} dd={dd} T={len}");
                let z = Engine::<f64>::forward::<LogSemiring>(&cuda, &p).unwrap();
                let zc = cpu.forward::<LogSemiring>(&p).unwrap();
                let h = Engine::<f64>::forward::<EntropySemiring>(&cuda, &p).unwrap();
                let hc = cpu.forward::<EntropySemiring>(&p).unwrap();
                let m = Engine::<f64>::forward::<MaxSemiring>(&cuda, &p).unwrap();
                let mc = cpu.forward::<MaxSemiring>(&p).unwrap();
                let v = Engine::<f64>::viterbi(&cuda, &p).unwrap();
                let pv = owned.view().unwrap();
                for b in 0..3 {
                    let ok = Tolerance::F64_VALUES;
                    assert!(
                        ok.ok(z[b], zc[b]),
                        "{tag} b={b}: log Z {} vs {}",
                        z[b],
                        zc[b]
                    );
                    if zc[b].is_finite() {
                        worst_z.see((z[b] - zc[b]).abs() / zc[b].abs().max(1.0));
                        assert!(
                            ok.ok(h[b].entropy, hc[b].entropy)
                                || (h[b].entropy - hc[b].entropy).abs() <= 1e-10,
                            "{tag} b={b}: entropy {} vs {}",
                            h[b].entropy,
                            hc[b].entropy
                        );
                    }
                    assert!(ok.ok(m[b], mc[b]), "{tag} b={b}: max {} vs {}", m[b], mc[b]);
                    assert!(ok.ok(v[b].score, mc[b]), "{tag} b={b}: Viterbi score");
                    if mc[b].is_finite() {
                        let g = gold_score(&pv, b, &v[b].segments).unwrap();
                        assert!(
                            ok.ok(g, v[b].score),
                            "{tag} b={b}: gold {g} vs {}",
                            v[b].score
                        );
                    }
                }
                if zc.iter().all(|z| z.is_finite()) {
                    let g = upstream(seed, 3);
                    let got = Engine::<f64>::backward(&cuda, &p, &g).unwrap();
                    let want = cpu.backward(&p, &g).unwrap();
                    for (name, a) in got.grad.fields() {
                        if let (Some(a), Some(w)) = (
                            a,
                            want.grad
                                .fields()
                                .iter()
                                .find(|f| f.0 == name)
                                .and_then(|f| f.1.clone()),
                        ) {
                            for (x, y) in a.iter().zip(w.iter()) {
                                worst_g.see((x - y).abs());
                            }
                        }
                    }
                    assert_gradients_close(&tag, &got.grad, &want.grad, Tolerance::F64_GRADS);
                    for (a, w) in got.boundary_marginals.iter().zip(&want.boundary_marginals) {
                        assert!((a - w).abs() <= 1e-9, "{tag}: boundary marginal {a} vs {w}");
                    }
                }
                n += 1;
            }
        }
    }
    assert_eq!(n, 60);
    // Nothing here is beyond the linear domain: no sequence may have fallen back to the
    // log-domain kernels (which would hide the linear kernels' own results).
    assert_eq!(
        CudaEngine::reruns(),
        reruns,
        "{name}: sequences rerun in the log domain"
    );
}

/// Problems like the benchmarks' (scores, durations and transitions of a few nats, in f32 and
/// f64, with and without boundaries, ragged lengths) are answered by the linear-domain kernels
/// without a rerun, and match the CPU engine; a sequence with a score beyond their range is
/// rerun, alone, and still matches.
#[test]
fn ordinary_problems_stay_in_the_linear_domain() {
    let Some(cuda) = gpu() else { return };
    let cpu = StreamingEngine::new().parallelism(Parallelism::Rayon);
    for (i, (b, t, k, c)) in [
        (32, 64, 7, 9),
        (4, 700, 63, 8),
        (1, 3000, 127, 4),
        (3, 500, 100, 24),
    ]
    .into_iter()
    .enumerate()
    {
        for all in [false, true] {
            let mut spec = GenSpec::new(b, t, k, c);
            if all {
                spec = spec.everything();
            }
            spec.scale = 3.0;
            let owned = random_problem(40 + i as u64, &spec);
            let before = CudaEngine::reruns();
            let p32 = owned.cast::<f32>();
            let p = Problem::Structured(p32.view().unwrap());
            let g = upstream(i as u64, b);
            let got = Engine::<f32>::backward(&cuda, &p, &g).unwrap();
            let z = Engine::<f32>::forward::<LogSemiring>(&cuda, &p).unwrap();
            let want = cpu.backward(&p, &g).unwrap();
            let tag = format!("B={b} T={t} K={k} C={c} all={all}");
            assert_eq!(
                CudaEngine::reruns(),
                before,
                "{tag}: rerun in the log domain"
            );
            for x in 0..b {
                assert!(
                    Tolerance::F64_VALUES.ok(z[x], want.log_z[x]),
                    "{tag}: log Z {x}"
                );
                assert!(
                    Tolerance::F64_VALUES.ok(got.log_z[x], want.log_z[x]),
                    "{tag}: {x}"
                );
            }
            assert_gradients_close(&tag, &got.grad, &want.grad, Tolerance::F64_GRADS);
        }
    }
    let mut owned = random_problem(3, &GenSpec::new(3, 200, 20, 5).everything());
    owned.scores[[1, 50, 2]] = 60.0;
    let p = Problem::Structured(owned.view().unwrap());
    let before = CudaEngine::reruns();
    let z = Engine::<f64>::forward::<LogSemiring>(&cuda, &p).unwrap();
    assert_eq!(CudaEngine::reruns(), before + 1, "only sequence 1 is rerun");
    let want = Reference.backward(&p, &[1.0; 3]).unwrap();
    let got = Engine::<f64>::backward(&cuda, &p, &[1.0; 3]).unwrap();
    assert_eq!(CudaEngine::reruns(), before + 2);
    for x in 0..3 {
        assert!(Tolerance::F64_VALUES.ok(z[x], want.log_z[x]), "log Z {x}");
    }
    assert_gradients_close("range", &got.grad, &want.grad, Tolerance::F64_GRADS);
}

/// Sequences the linear-domain kernels give up (a score beyond their range; values that
/// underflow and may matter later) or keep (labels far apart, so that many twins underflow
/// for good) next to ordinary ones in one batch: every sequence matches CPU streaming (log Z)
/// and the oracle (gradients, boundary marginals).
#[test]
fn sequences_beyond_the_linear_domain_are_answered_exactly() {
    let Some(cuda) = gpu() else { return };
    let cpu = StreamingEngine::new().parallelism(Parallelism::Rayon);
    let worst = Worst::new("linear-domain edge cases vs the oracle: score gradients (absolute)");
    for (k, c, len, case) in [
        (64, 5, 300, "range"),
        (1000, 3, 2500, "apart"),
        (40, 4, 600, "steep"),
    ] {
        let mut spec = GenSpec::new(4, len, k, c).everything();
        spec.transition = TransitionKind::Static;
        let mut owned = random_problem(17, &spec);
        match case {
            // Sequence 1 has a score of 60 nats (beyond the linear range).
            "range" => owned.scores[[1, len / 2, 0]] = 60.0,
            // Label 0 scores 4 nats a position above the others in every sequence: the
            // others' ring entries fall far below the reference and underflow.
            "apart" => owned
                .scores
                .indexed_iter_mut()
                .for_each(|(ix, x)| if ix[2] == 0 { *x += 4.0 } else { *x -= 4.0 }),
            // Sequence 2 alternates which label is far ahead, every 30 positions: twins that
            // underflowed must not come back.
            _ => owned.scores.indexed_iter_mut().for_each(|(ix, x)| {
                if ix[0] == 2 && ix[2] == (ix[1] / 30) % c {
                    *x += 45.0
                }
            }),
        }
        let p = Problem::Structured(owned.view().unwrap());
        let tag = format!("{case}: K={k} C={c} T={len}");
        let z = Engine::<f64>::forward::<LogSemiring>(&cuda, &p).unwrap();
        let zc = cpu.forward::<LogSemiring>(&p).unwrap();
        for b in 0..4 {
            assert!(
                Tolerance::F64_VALUES.ok(z[b], zc[b]),
                "{tag} b={b}: log Z {} vs {}",
                z[b],
                zc[b]
            );
        }
        // Against the oracle: at log Z ≈ 10⁴ the CPU engine's own rounding (≈ 2e-10 in the
        // marginals, measured) is of the order of the tolerance.
        let g = upstream(5, 4);
        let got = Engine::<f64>::backward(&cuda, &p, &g).unwrap();
        let want = Reference.backward(&p, &g).unwrap();
        if let (Some(a), Some(w)) = (&got.grad.scores, &want.grad.scores) {
            for (x, y) in a.iter().zip(w.iter()) {
                worst.see((x - y).abs());
            }
        }
        assert_gradients_close(&tag, &got.grad, &want.grad, Tolerance::F64_GRADS);
        for (a, w) in got.boundary_marginals.iter().zip(&want.boundary_marginals) {
            assert!((a - w).abs() <= 1e-9, "{tag}: boundary marginal {a} vs {w}");
        }
    }
}

/// Small problems against brute-force enumeration directly, every optional input.
#[test]
fn small_problems_match_brute_force() {
    let Some(cuda) = gpu() else { return };
    let mut n = 0;
    for seed in 0..60u64 {
        let k = 1 + (seed as usize % 4);
        let c = 1 + (seed as usize / 4 % 4);
        let mut spec = GenSpec::new(3, 6, k, c).everything();
        if seed % 3 == 0 {
            spec.transition = TransitionKind::DurationDependent;
        }
        let owned = random_problem(9000 + seed, &spec);
        let pv = owned.view().unwrap();
        let p = Problem::Structured(pv.clone());
        let z = Engine::<f64>::forward::<LogSemiring>(&cuda, &p).unwrap();
        let h = Engine::<f64>::forward::<EntropySemiring>(&cuda, &p).unwrap();
        let v = Engine::<f64>::viterbi(&cuda, &p).unwrap();
        for b in 0..3 {
            let bf = reference::brute_force(&pv, b).unwrap();
            assert!(
                Tolerance::F64_VALUES.ok(z[b], bf.log_z),
                "seed {seed}: log Z"
            );
            assert!(
                Tolerance::F64_VALUES.ok(v[b].score, bf.max),
                "seed {seed}: max"
            );
            assert!(
                (h[b].entropy - bf.entropy).abs() <= 1e-10 * bf.entropy.max(1.0),
                "seed {seed}: entropy"
            );
            n += 1;
        }
        let g = upstream(seed, 3);
        let got = Engine::<f64>::backward(&cuda, &p, &g).unwrap();
        let want = Engine::<f64>::backward(&Reference, &p, &g).unwrap();
        assert_gradients_close(
            &format!("seed {seed}"),
            &got.grad,
            &want.grad,
            Tolerance::F64_GRADS,
        );
    }
    assert_eq!(n, 180);
}

/// Ten runs of the same input give bitwise identical gradients, marginals, entropies and
/// Viterbi paths, on both transition forms at a shape with many teams per block.
#[test]
fn ten_runs_are_bitwise_identical() {
    let Some(cuda) = gpu() else { return };
    for dd in [false, true] {
        let mut spec = GenSpec::new(4, 300, if dd { 20 } else { 100 }, 24).everything();
        if dd {
            spec.transition = TransitionKind::DurationDependent;
        }
        let owned = random_problem(77, &spec);
        let p = Problem::Structured(owned.view().unwrap());
        let g = upstream(3, 4);
        let first = format!("{:?}", Engine::<f64>::backward(&cuda, &p, &g).unwrap());
        let v0 = Engine::<f64>::viterbi(&cuda, &p).unwrap();
        let h0 = format!(
            "{:?}",
            Engine::<f64>::forward::<EntropySemiring>(&cuda, &p).unwrap()
        );
        for run in 1..10 {
            assert_eq!(
                format!("{:?}", Engine::<f64>::backward(&cuda, &p, &g).unwrap()),
                first,
                "dd={dd} run {run}: backward"
            );
            assert_eq!(
                Engine::<f64>::viterbi(&cuda, &p).unwrap(),
                v0,
                "dd={dd} run {run}: Viterbi"
            );
            assert_eq!(
                format!(
                    "{:?}",
                    Engine::<f64>::forward::<EntropySemiring>(&cuda, &p).unwrap()
                ),
                h0,
                "dd={dd} run {run}: entropy"
            );
        }
    }
}

/// The exact and scan engines (the edge-form kernels) on edge input over the `(K, C)` grid
/// (items per label from 1 to 10⁵: one lane to many rounds of a full team), ragged lengths and
/// `-inf` edges: against the CPU exact engine in every semiring, Viterbi (score and path),
/// edge gradients and boundary marginals; then ten runs bitwise identical.
#[test]
fn edge_kernels_match_the_cpu_exact_engine() {
    use semicrf_core::{Algorithm, EdgePotentials, materialize};
    let Some(_) = gpu() else { return };
    let cpu = semicrf_cpu::ExactEngine::new().parallelism(Parallelism::Rayon);
    let worst = Worst::new("cuda exact vs cpu exact: edge gradients (absolute)");
    let (mut n, mut repeated) = (0, 0);
    for (x, k) in [1usize, 2, 3, 64, 1000].into_iter().enumerate() {
        for (y, c) in [1usize, 3, 5, 24, 33, 100].into_iter().enumerate() {
            // At most about 3·10⁶ edges per sequence.
            let len = (3_000_000 / (k * c * c)).clamp(2, 70);
            let mut spec = GenSpec::new(3, len, k, c).everything();
            spec.forbid_scores = 0.02;
            let seed = (x * 10 + y) as u64;
            let owned = random_problem(500 + seed, &spec);
            let pv = owned.view().unwrap();
            let mut edges = materialize(&pv);
            // Some finite edges where materialisation put -inf, some -inf where it did not.
            let mut r = seed;
            edges.mapv_inplace(|v| {
                r = r
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                match (v.is_finite(), (r >> 33) % 16) {
                    (false, 0) => -0.5,
                    (true, 1) => f64::NEG_INFINITY,
                    _ => v,
                }
            });
            let ep = EdgePotentials::new(edges.view(), pv.lengths()).unwrap();
            let p = Problem::Edges(ep);
            let tag = format!("K={k} C={c} T={len}");
            let zc = cpu.forward::<LogSemiring>(&p).unwrap();
            let hc = cpu.forward::<EntropySemiring>(&p).unwrap();
            let mc = cpu.forward::<MaxSemiring>(&p).unwrap();
            let vc = cpu.viterbi(&p).unwrap();
            for algorithm in [Algorithm::Exact, Algorithm::Scan] {
                let cuda = CudaEngine::new(algorithm, 0);
                let z = Engine::<f64>::forward::<LogSemiring>(&cuda, &p).unwrap();
                let h = Engine::<f64>::forward::<EntropySemiring>(&cuda, &p).unwrap();
                let m = Engine::<f64>::forward::<MaxSemiring>(&cuda, &p).unwrap();
                let v = Engine::<f64>::viterbi(&cuda, &p).unwrap();
                let ok = Tolerance::F64_VALUES;
                for b in 0..3 {
                    assert!(
                        ok.ok(z[b], zc[b]),
                        "{tag} b={b}: log Z {} vs {}",
                        z[b],
                        zc[b]
                    );
                    assert!(ok.ok(m[b], mc[b]), "{tag} b={b}: max {} vs {}", m[b], mc[b]);
                    assert!(ok.ok(v[b].score, vc[b].score), "{tag} b={b}: Viterbi score");
                    // Ties are broken alike, so the paths are the same.
                    assert_eq!(v[b].segments, vc[b].segments, "{tag} b={b}: Viterbi path");
                    if zc[b].is_finite() {
                        assert!(
                            ok.ok(h[b].entropy, hc[b].entropy)
                                || (h[b].entropy - hc[b].entropy).abs() <= 1e-10,
                            "{tag} b={b}: entropy {} vs {}",
                            h[b].entropy,
                            hc[b].entropy
                        );
                    }
                }
                if zc.iter().all(|z| z.is_finite()) {
                    let g = upstream(seed, 3);
                    let got = Engine::<f64>::backward(&cuda, &p, &g).unwrap();
                    let want = cpu.backward(&p, &g).unwrap();
                    if let (Some(a), Some(w)) = (&got.grad.edges, &want.grad.edges) {
                        for (x, y) in a.iter().zip(w.iter()) {
                            worst.see((x - y).abs());
                        }
                    }
                    assert_gradients_close(&tag, &got.grad, &want.grad, Tolerance::F64_GRADS);
                    for (a, w) in got.boundary_marginals.iter().zip(&want.boundary_marginals) {
                        assert!((a - w).abs() <= 1e-9, "{tag}: boundary marginal {a} vs {w}");
                    }
                    if (k, c) == (64, 24) {
                        let first = format!("{got:?}");
                        for run in 1..10 {
                            let again = Engine::<f64>::backward(&cuda, &p, &g).unwrap();
                            assert_eq!(format!("{again:?}"), first, "{tag} run {run}: backward");
                            let w = Engine::<f64>::viterbi(&cuda, &p).unwrap();
                            assert_eq!(w, v, "{tag} run {run}: Viterbi");
                        }
                        repeated += 1;
                    }
                }
                n += 1;
            }
        }
    }
    assert_eq!(n, 60);
    assert_eq!(repeated, 2, "the ten-run check ran for exact and scan");
}

/// `memory_required` is an upper bound of the bytes every call allocates, for every engine,
/// operation, transition form and input type, with both boundaries or none, and it is not
/// loose: the bytes allocated are at least two thirds of it. What the
/// driver set aside (the fall of free memory, page granularity included) is printed.
#[test]
fn memory_required_bounds_what_calls_allocate() {
    use semicrf_core::{Algorithm, EngineInfo};
    let Some(_) = gpu() else { return };
    for (algorithm, dd, bounds, (b, t, k, c)) in [
        (Algorithm::Streaming, false, true, (4, 3000, 40, 6)),
        (Algorithm::Streaming, false, false, (4, 3000, 40, 6)),
        (Algorithm::Streaming, false, false, (32, 64, 7, 9)),
        (Algorithm::Streaming, true, true, (2, 500, 12, 5)),
        (Algorithm::Streaming, true, false, (2, 500, 12, 5)),
        (Algorithm::Exact, false, true, (2, 400, 12, 5)),
        (Algorithm::Scan, true, true, (3, 300, 7, 9)),
    ] {
        let mut spec = GenSpec::new(b, t, k, c).everything();
        // Without boundaries the bound counts the scores alone.
        spec.boundaries = bounds;
        spec.transition = if dd {
            TransitionKind::DurationDependent
        } else {
            TransitionKind::Static
        };
        let owned = random_problem(41, &spec);
        let e = CudaEngine::new(algorithm, 0);
        let tag = format!(
            "{} dd={dd} boundaries={bounds} ({b}, {t}, {k}, {c})",
            e.name()
        );
        allocations_within_the_bound(&e, &Problem::Structured(owned.view().unwrap()), &tag);
        let o32 = owned.cast::<f32>();
        allocations_within_the_bound(&e, &Problem::Structured(o32.view().unwrap()), &tag);
    }
}

fn allocations_within_the_bound<F: semicrf_core::Scalar>(
    e: &CudaEngine,
    p: &Problem<'_, F>,
    tag: &str,
) where
    CudaEngine: Engine<F>,
{
    use semicrf_core::{EngineInfo, Op, Query};
    let g = upstream(2, p.shape().batch);
    let ops = [
        Op::forward::<LogSemiring>(),
        Op::forward::<EntropySemiring>(),
        Op::forward::<MaxSemiring>(),
        Op::Viterbi,
        Op::Backward,
    ];
    for op in ops {
        let ((), used) = e
            .measure_memory(|| match op {
                Op::Forward(i) if i.name == "log" => {
                    e.forward::<LogSemiring>(p).map(|_| ()).unwrap()
                }
                Op::Forward(i) if i.name == "entropy" => {
                    e.forward::<EntropySemiring>(p).map(|_| ()).unwrap()
                }
                Op::Forward(_) => e.forward::<MaxSemiring>(p).map(|_| ()).unwrap(),
                Op::Viterbi => e.viterbi(p).map(|_| ()).unwrap(),
                Op::Backward => e.backward(p, &g).map(|_| ()).unwrap(),
            })
            .unwrap();
        let need = e.memory_required(&Query::of(p, op)).unwrap();
        let tag = format!("{tag} {} {op:?}", F::DTYPE);
        eprintln!(
            "{tag}: required {need}, allocated {}, driver {}",
            used.allocated, used.driver
        );
        assert!(used.allocated <= need, "{tag}: {} > {need}", used.allocated);
        assert!(
            3 * used.allocated >= 2 * need,
            "{tag}: {} << {need}",
            used.allocated
        );
    }
}

/// Potentials in device memory (cudarc buffers and raw addresses with a stream of their
/// own) give what the same potentials from the host give, bit for bit: log Z, entropy and
/// Viterbi, every gradient and marginal, and the magnitude bounds computed on the device
/// equal the host's; both element types, both transition forms, boundaries, ragged lengths
/// and `-inf` entries.
#[test]
fn potentials_in_device_memory_match_host_potentials() {
    use semicrf_cuda::cudarc::driver::{CudaContext, DevicePtr};
    use semicrf_cuda::{DeviceArray, Dtype};
    let Some(cuda) = gpu() else { return };
    let ctx = CudaContext::new(0).unwrap();
    let side = ctx.new_stream().unwrap();
    for (seed, (b, t, k, c, dd)) in [
        (3, 40, 6, 5, false),
        (2, 300, 30, 8, false),
        (4, 120, 7, 24, true),
        (1, 70, 3, 70, false),
    ]
    .into_iter()
    .enumerate()
    {
        let mut spec = GenSpec::new(b, t, k, c).everything();
        if dd {
            spec.transition = TransitionKind::DurationDependent;
        }
        let owned = random_problem(500 + seed as u64, &spec);
        let g = upstream(9, b);
        let flat = |a: &Option<ndarray::ArrayD<f64>>| {
            a.as_ref().map(|a| a.iter().copied().collect::<Vec<f64>>())
        };
        let host_view = owned.view().unwrap();
        for f32 in [false, true] {
            let name = format!("B{b} T{t} K{k} C{c} dd={dd} f32={f32}");
            // The host's answers, for the same values (f32 input: the same f32 values, the
            // parameters too).
            let cast = owned.cast::<f32>();
            let widened = cast.cast::<f64>();
            let from = if f32 { &widened } else { &owned };
            let expect_mag = if f32 {
                cast.view().unwrap().magnitudes().to_vec()
            } else {
                host_view.magnitudes().to_vec()
            };
            let (hb, hz, hh, hv) = if f32 {
                let p = Problem::Structured(cast.view().unwrap());
                (
                    Engine::<f32>::backward(&cuda, &p, &g).unwrap(),
                    Engine::<f32>::forward::<LogSemiring>(&cuda, &p).unwrap(),
                    Engine::<f32>::forward::<EntropySemiring>(&cuda, &p).unwrap(),
                    Engine::<f32>::viterbi(&cuda, &p).unwrap(),
                )
            } else {
                let p = Problem::Structured(host_view.clone());
                (
                    Engine::<f64>::backward(&cuda, &p, &g).unwrap(),
                    Engine::<f64>::forward::<LogSemiring>(&cuda, &p).unwrap(),
                    Engine::<f64>::forward::<EntropySemiring>(&cuda, &p).unwrap(),
                    Engine::<f64>::viterbi(&cuda, &p).unwrap(),
                )
            };
            // The position tensors on the device: scores on the side stream (raw address),
            // boundaries as cudarc buffers of the default stream.
            let up = |v: Vec<f64>, s: &std::sync::Arc<semicrf_cuda::cudarc::driver::CudaStream>| {
                if f32 {
                    let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                    (None, Some(s.clone_htod(&v).unwrap()))
                } else {
                    (Some(s.clone_htod(&v).unwrap()), None)
                }
            };
            let scores: Vec<f64> = owned.scores.iter().copied().collect();
            let sc = up(scores, &side);
            let bb = flat(&owned.begin_boundary).map(|v| up(v, &ctx.default_stream()));
            let eb = flat(&owned.end_boundary).map(|v| up(v, &ctx.default_stream()));
            let (sc_ptr, n) = match &sc {
                (Some(d), _) => (d.device_ptr(&side).0, d.len()),
                (_, Some(s)) => (s.device_ptr(&side).0, s.len()),
                _ => unreachable!(),
            };
            let dtype = if f32 { Dtype::F32 } else { Dtype::F64 };
            // SAFETY: `sc` outlives every call below and is written by nothing else.
            let raw = unsafe { DeviceArray::from_raw(sc_ptr, n, dtype, side.cu_stream()) };
            for scores in [dev_array(&sc), raw] {
                let bounds = [bb.as_ref().map(dev_array), eb.as_ref().map(dev_array)];
                let (dims, lens) = ((b, t, c), &owned.lengths[..]);
                let p = build_on_device(&cuda, scores, bounds, lens, dims, k, Some(from)).unwrap();
                assert_eq!(p.magnitudes(), &expect_mag[..], "{name}: magnitudes");
                let db = cuda.backward_on_device(&p, &g).unwrap().to_host().unwrap();
                assert_same_bits(&db, &hb, &format!("{name}: backward"));
                let z = cuda.forward_on_device::<LogSemiring>(&p).unwrap();
                assert_eq!(format!("{z:?}"), format!("{hz:?}"), "{name}: log Z");
                let h = cuda.forward_on_device::<EntropySemiring>(&p).unwrap();
                assert_eq!(format!("{h:?}"), format!("{hh:?}"), "{name}: entropy");
                assert_eq!(cuda.viterbi_on_device(&p).unwrap(), hv, "{name}: Viterbi");
            }
        }
    }
}

/// Bad potentials in device memory are refused as the host's are: the first NaN or `+inf`
/// by tensor and index, a wrong length, mixed element types, an address that is not device
/// memory or whose allocation is too short, bad lengths; and an engine of another algorithm.
#[test]
fn bad_potentials_in_device_memory_are_refused() {
    use semicrf_core::{Algorithm, Error, Potentials};
    use semicrf_cuda::cudarc::driver::{CudaContext, DevicePtr};
    use semicrf_cuda::{DeviceArray, DevicePotentials, Dtype};
    let Some(cuda) = gpu() else { return };
    let stream = CudaContext::new(0).unwrap().default_stream();
    let (b, t, c, k) = (3, 20, 4, 5);
    let lengths = [20, 7, 13];
    let mut v = vec![0.25f64; b * t * c];
    v[5] = f64::NEG_INFINITY;
    // A NaN beyond sequence 1's length (checked too, as on the host) and a +inf later.
    v[(t + 9) * c + 2] = f64::NAN;
    v[(2 * t + 3) * c + 1] = f64::INFINITY;
    let host = ndarray::Array3::from_shape_vec((b, t, c), v.clone()).unwrap();
    let want = Potentials::builder(host.view(), &lengths, k)
        .build()
        .unwrap_err();
    let d = stream.clone_htod(&v).unwrap();
    let got = DevicePotentials::builder(DeviceArray::f64(&d), (b, t, c), &lengths, k)
        .build(&cuda)
        .unwrap_err();
    assert_eq!(format!("{got}"), format!("{want}"));
    assert!(
        matches!(got, Error::NonFinite { ref index, .. } if index == &[1, 9, 2]),
        "{got}"
    );

    let ok = stream.clone_htod(&vec![0.5f64; b * t * c]).unwrap();
    let ok32 = stream.clone_htod(&vec![0.5f32; b * t * c]).unwrap();
    let short = stream.clone_htod(&vec![0.5f64; b * t * c - 1]).unwrap();
    let build = |s, bb, lens| build_on_device(&cuda, s, [bb, None], lens, (b, t, c), k, None);

    assert!(matches!(
        build(DeviceArray::f64(&short), None, &lengths),
        Err(Error::Shape {
            tensor: "scores",
            ..
        })
    ));
    assert!(matches!(
        build(
            DeviceArray::f64(&ok),
            Some(DeviceArray::f32(&ok32)),
            &lengths
        ),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        build(DeviceArray::f64(&ok), None, &[20, 0, 3][..]),
        Err(Error::Length { sequence: 1, .. })
    ));
    assert!(matches!(
        build(DeviceArray::f64(&ok), None, &[20, 3][..]),
        Err(Error::LengthsCount {
            expected: 3,
            got: 2
        })
    ));
    // Host memory, and device memory too short for the length claimed.
    let host_mem = vec![0.5f64; b * t * c];
    // SAFETY: never read: the check refuses the address first.
    let not_dev = unsafe {
        DeviceArray::from_raw(
            host_mem.as_ptr() as u64,
            b * t * c,
            Dtype::F64,
            std::ptr::null_mut(),
        )
    };
    let e = build(not_dev, None, &lengths).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported { ref what, .. } if what.contains("not device memory")),
        "{e}"
    );
    let p = short.device_ptr(&stream).0;
    // SAFETY: never read: the check refuses the length first.
    let long = unsafe { DeviceArray::from_raw(p, b * t * c, Dtype::F64, std::ptr::null_mut()) };
    let e = build(long, None, &lengths).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported { ref what, .. } if what.contains("do not fit")),
        "{e}"
    );
    // Magnitudes beyond the limit, as on the host.
    let huge = stream.clone_htod(&vec![1e299f64; b * t * c]).unwrap();
    let e = build(DeviceArray::f64(&huge), None, &lengths).unwrap_err();
    assert!(matches!(e, Error::Magnitude { sequence: 0, .. }), "{e}");
    // Only the streaming engine takes them.
    let p = build(DeviceArray::f64(&ok), None, &lengths).unwrap();
    let exact = semicrf_cuda::CudaEngine::new(Algorithm::Exact, 0);
    assert!(matches!(
        exact.forward_on_device::<LogSemiring>(&p),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        cuda.backward_on_device(&p, &[1.0]),
        Err(Error::Upstream { .. })
    ));
}

/// Two backward results, every value bit for bit (shapes included).
fn assert_same_bits(got: &semicrf_core::Backward, want: &semicrf_core::Backward, what: &str) {
    let bits = |v: &mut dyn Iterator<Item = &f64>| v.map(|x| x.to_bits()).collect::<Vec<u64>>();
    assert_eq!(
        bits(&mut got.log_z.iter()),
        bits(&mut want.log_z.iter()),
        "{what}: log Z"
    );
    assert_eq!(
        got.boundary_marginals.shape(),
        want.boundary_marginals.shape()
    );
    assert!(
        bits(&mut got.boundary_marginals.iter()) == bits(&mut want.boundary_marginals.iter()),
        "{what}: boundary marginals"
    );
    for ((field, a), (_, b)) in got.grad.fields().into_iter().zip(want.grad.fields()) {
        match (a, b) {
            (None, None) => {}
            (Some(a), Some(b)) => {
                assert_eq!(a.shape(), b.shape(), "{what}: shape of grad.{field}");
                assert!(
                    bits(&mut a.iter()) == bits(&mut b.iter()),
                    "{what}: grad.{field}"
                );
            }
            _ => panic!("{what}: grad.{field} present in one only"),
        }
    }
}

/// A device copy of a position tensor, in `f64` or in `f32`.
type OnDevice = (
    Option<semicrf_cuda::cudarc::driver::CudaSlice<f64>>,
    Option<semicrf_cuda::cudarc::driver::CudaSlice<f32>>,
);

fn dev_array(x: &OnDevice) -> semicrf_cuda::DeviceArray<'_> {
    match x {
        (Some(d), _) => semicrf_cuda::DeviceArray::f64(d),
        (_, Some(s)) => semicrf_cuda::DeviceArray::f32(s),
        _ => unreachable!("one of the two"),
    }
}

/// Scores and the begin and end boundaries given on the device, with the shared parameters
/// of `params` (where given), checked.
fn build_on_device<'a>(
    cuda: &CudaEngine,
    scores: semicrf_cuda::DeviceArray<'a>,
    [bb, eb]: [Option<semicrf_cuda::DeviceArray<'a>>; 2],
    lengths: &'a [usize],
    dims: (usize, usize, usize),
    k: usize,
    params: Option<&'a semicrf_core::OwnedPotentials<f64>>,
) -> semicrf_core::Result<semicrf_cuda::DevicePotentials<'a>> {
    let mut pb = semicrf_cuda::DevicePotentials::builder(scores, dims, lengths, k);
    if let Some(x) = bb {
        pb = pb.begin_boundary(x);
    }
    if let Some(x) = eb {
        pb = pb.end_boundary(x);
    }
    if let Some(p) = params {
        if let Some(x) = &p.transition {
            pb = pb.transition(x.view());
        }
        if let Some(x) = &p.duration {
            pb = pb.duration(x.view());
        }
        if let Some(x) = &p.start {
            pb = pb.start(x.view());
        }
        if let Some(x) = &p.end {
            pb = pb.end(x.view());
        }
    }
    pb.build(cuda)
}

/// Copies larger than the page-locked buffer (more chunks than it has slots, and a last
/// chunk not full) in both directions: a backward from host arrays (copied through it)
/// equals, bit for bit, the same backward on the same values already on the device, read
/// back with a plain copy; f32 and f64.
#[test]
fn large_copies_through_page_locked_memory_are_exact() {
    use semicrf_cuda::cudarc::driver::CudaContext;
    let Some(cuda) = gpu() else { return };
    let stream = CudaContext::new(0).unwrap().default_stream();
    // 3 · 230001 · 7 positions: 38.6 MB of f64 gradient, 19.3 MB of f32 scores.
    let (b, t, k, c) = (3, 230_001, 4, 7);
    let mut spec = GenSpec::new(b, t, k, c);
    spec.ragged = true;
    let owned = random_problem(41, &spec);
    let g = upstream(5, b);
    let cast = owned.cast::<f32>();
    let widened = cast.cast::<f64>();
    let lengths = owned.lengths.clone();
    let flat: Vec<f64> = owned.scores.iter().copied().collect();
    for f32 in [false, true] {
        let host = if f32 {
            let p = Problem::Structured(cast.view().unwrap());
            Engine::<f32>::backward(&cuda, &p, &g).unwrap()
        } else {
            let p = Problem::Structured(owned.view().unwrap());
            Engine::<f64>::backward(&cuda, &p, &g).unwrap()
        };
        let on: OnDevice = if f32 {
            let v: Vec<f32> = flat.iter().map(|&x| x as f32).collect();
            (None, Some(stream.clone_htod(&v).unwrap()))
        } else {
            (Some(stream.clone_htod(&flat).unwrap()), None)
        };
        let params = if f32 { &widened } else { &owned };
        let (dims, sc) = ((b, t, c), dev_array(&on));
        let p = build_on_device(&cuda, sc, [None, None], &lengths, dims, k, Some(params)).unwrap();
        let dev = cuda.backward_on_device(&p, &g).unwrap().to_host().unwrap();
        assert_same_bits(&dev, &host, &format!("f32={f32}: staged and plain copies"));
    }
}

/// A device output of either element type, made on `s` full of NaN (so a value the call
/// does not write shows).
fn nan_output(
    s: &std::sync::Arc<semicrf_cuda::cudarc::driver::CudaStream>,
    n: usize,
    f32: bool,
) -> OnDevice {
    if f32 {
        (None, Some(s.clone_htod(&vec![f32::NAN; n]).unwrap()))
    } else {
        (Some(s.clone_htod(&vec![f64::NAN; n]).unwrap()), None)
    }
}

fn out_array(x: &mut OnDevice) -> semicrf_cuda::DeviceArrayMut<'_> {
    match x {
        (Some(d), _) => semicrf_cuda::DeviceArrayMut::f64(d),
        (_, Some(s)) => semicrf_cuda::DeviceArrayMut::f32(s),
        _ => unreachable!("one of the two"),
    }
}

/// An output read back on its own stream, as `f64` (`f32` widened exactly).
fn read_output(x: &OnDevice) -> Vec<f64> {
    match x {
        (Some(d), _) => d.stream().clone_dtoh(d).unwrap(),
        (_, Some(s)) => s
            .stream()
            .clone_dtoh(s)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        _ => unreachable!("one of the two"),
    }
}

/// `backward_into` writes into the caller's arrays (made on another stream than the
/// engine's, full of NaN) what `backward_on_device` gives, bit for bit (rounded to `f32` for
/// `f32` potentials), and returns the same log Z and shared gradients: both element types,
/// with and without boundaries, a `(K, C, C)` transition, the log-domain kernels alone, and
/// sequences beyond the linear domain's range (rerun in the log domain) beside ordinary ones.
#[test]
fn backward_into_writes_what_backward_on_device_gives() {
    use semicrf_cuda::cudarc::driver::{CudaContext, DevicePtrMut};
    use semicrf_cuda::{DeviceArrayMut, DeviceOutputs, Dtype};
    let Some(cuda) = gpu() else { return };
    let ctx = CudaContext::new(0).unwrap();
    let side = ctx.new_stream().unwrap();
    let stream = ctx.default_stream();
    // (B, T, K, C, boundaries and start/end, (K, C, C) transition, a score of 60 nats)
    for (seed, (b, t, k, c, all, dd, range)) in [
        (3, 40, 6, 5, false, false, false),
        (2, 120, 7, 24, true, true, false),
        (4, 300, 64, 5, true, false, true),
        (4, 300, 64, 5, false, false, true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut spec = GenSpec::new(b, t, k, c);
        if all {
            spec = spec.everything();
        }
        spec.transition = if dd {
            TransitionKind::DurationDependent
        } else {
            TransitionKind::Static
        };
        let mut owned = random_problem(17 + seed as u64, &spec);
        if range {
            // As in `sequences_beyond_the_linear_domain_are_answered_exactly`: a score of 60
            // nats (beyond the linear range) within sequence 1.
            let at = owned.lengths[1] / 2;
            owned.scores[[1, at, 0]] = 60.0;
        }
        let g = upstream(5, b);
        let widened = owned.cast::<f32>().cast::<f64>();
        let flat = |a: &ndarray::ArrayD<f64>| a.iter().copied().collect::<Vec<f64>>();
        for f32 in [false, true] {
            let from = if f32 { &widened } else { &owned };
            let up = |v: Vec<f64>| {
                if f32 {
                    let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                    (None, Some(stream.clone_htod(&v).unwrap()))
                } else {
                    (Some(stream.clone_htod(&v).unwrap()), None)
                }
            };
            let sc: OnDevice = up(owned.scores.iter().copied().collect());
            let bb = owned.begin_boundary.as_ref().map(|x| up(flat(x)));
            let eb = owned.end_boundary.as_ref().map(|x| up(flat(x)));
            let bounds = [bb.as_ref().map(dev_array), eb.as_ref().map(dev_array)];
            let (dims, lens) = ((b, t, c), &owned.lengths[..]);
            let p =
                build_on_device(&cuda, dev_array(&sc), bounds, lens, dims, k, Some(from)).unwrap();
            for engine in [cuda, cuda.log_domain_only()] {
                let name = format!(
                    "B{b} T{t} K{k} C{c} all={all} dd={dd} range={range} f32={f32} \
                     linear={}",
                    engine == cuda
                );
                let want = engine
                    .backward_on_device(&p, &g)
                    .unwrap()
                    .to_host()
                    .unwrap();
                let (btc, bt) = (b * t * c, b * t);
                let mut o_sc = nan_output(&side, btc, f32);
                let mut o_bb = bb.as_ref().map(|_| nan_output(&side, btc, f32));
                let mut o_eb = eb.as_ref().map(|_| nan_output(&side, btc, f32));
                let mut o_bm = nan_output(&side, bt, f32);
                let mut o_lz = nan_output(&side, b, f32);
                // The scores' output by its raw address and stream.
                let (ptr, dtype) = match &mut o_sc {
                    (Some(d), _) => (d.device_ptr_mut(&side).0, Dtype::F64),
                    (_, Some(s)) => (s.device_ptr_mut(&side).0, Dtype::F32),
                    _ => unreachable!(),
                };
                // SAFETY: `o_sc` outlives the call and is used by nothing else meanwhile.
                let raw = unsafe { DeviceArrayMut::from_raw(ptr, btc, dtype, side.cu_stream()) };
                let mut out = DeviceOutputs::new(raw)
                    .boundary(out_array(&mut o_bm))
                    .log_z(out_array(&mut o_lz));
                if let Some(x) = o_bb.as_mut() {
                    out = out.begin_boundary(out_array(x));
                }
                if let Some(x) = o_eb.as_mut() {
                    out = out.end_boundary(out_array(x));
                }
                let before = CudaEngine::reruns();
                let host = engine.backward_into(&p, &g, out).unwrap();
                if range && engine == cuda {
                    assert!(CudaEngine::reruns() > before, "{name}: sequence 1 rerun");
                }
                let bits = |v: &mut dyn Iterator<Item = &f64>| {
                    v.map(|&x| if f32 { f64::from(x as f32) } else { x }.to_bits())
                        .collect::<Vec<u64>>()
                };
                let got = |x: &OnDevice| read_output(x).iter().map(|x| x.to_bits()).collect();
                let w = &want.grad;
                let s: Vec<u64> = got(&o_sc);
                assert!(
                    s == bits(&mut w.scores.as_ref().unwrap().iter()),
                    "{name}: scores"
                );
                let both = [
                    (o_bb.as_ref(), w.begin_boundary.as_ref(), "begin"),
                    (o_eb.as_ref(), w.end_boundary.as_ref(), "end"),
                ];
                for (o, wa, side_name) in both {
                    assert_eq!(o.is_some(), wa.is_some(), "{name}: {side_name} boundary");
                    if let (Some(o), Some(wa)) = (o, wa) {
                        let v: Vec<u64> = got(o);
                        assert!(v == bits(&mut wa.iter()), "{name}: {side_name} boundary");
                    }
                }
                let v: Vec<u64> = got(&o_bm);
                assert!(
                    v == bits(&mut want.boundary_marginals.iter()),
                    "{name}: marginals"
                );
                let v: Vec<u64> = got(&o_lz);
                assert_eq!(
                    v,
                    bits(&mut want.log_z.iter()),
                    "{name}: log Z on the device"
                );
                let exact = |v: &mut dyn Iterator<Item = &f64>| {
                    v.map(|x| x.to_bits()).collect::<Vec<u64>>()
                };
                assert_eq!(exact(&mut host.log_z.iter()), exact(&mut want.log_z.iter()));
                let shared = [
                    (host.transition.clone(), w.transition.clone()),
                    (
                        host.duration.clone().into_dyn(),
                        w.duration.clone().map(|a| a.into_dyn()),
                    ),
                    (
                        host.start.clone().into_dyn(),
                        w.start.clone().map(|a| a.into_dyn()),
                    ),
                    (
                        host.end.clone().into_dyn(),
                        w.end.clone().map(|a| a.into_dyn()),
                    ),
                ];
                for (i, (h, wv)) in shared.into_iter().enumerate() {
                    let wv = wv.unwrap();
                    assert_eq!(h.shape(), wv.shape(), "{name}: shared {i}");
                    assert_eq!(
                        exact(&mut h.iter()),
                        exact(&mut wv.iter()),
                        "{name}: shared {i}"
                    );
                }
            }
        }
    }
}

/// Outputs that do not fit the problem are refused before anything is written: a wrong
/// length, another element type, a boundary output missing or given for a boundary the
/// problem lacks, an output overlapping the scores, host memory, and a bad upstream.
#[test]
fn bad_outputs_are_refused() {
    use semicrf_core::Error;
    use semicrf_cuda::cudarc::driver::{CudaContext, DevicePtr};
    use semicrf_cuda::{DeviceArray, DeviceArrayMut, DeviceOutputs, DevicePotentials, Dtype};
    let Some(cuda) = gpu() else { return };
    let stream = CudaContext::new(0).unwrap().default_stream();
    let (b, t, c, k) = (2, 10, 3, 4);
    let lengths = [10, 6];
    let n = b * t * c;
    let scores = stream.clone_htod(&vec![0.5f64; n]).unwrap();
    let bound = stream.clone_htod(&vec![0.1f64; n]).unwrap();
    let p = DevicePotentials::builder(DeviceArray::f64(&scores), (b, t, c), &lengths, k)
        .begin_boundary(DeviceArray::f64(&bound))
        .build(&cuda)
        .unwrap();
    let mut ok = stream.alloc_zeros::<f64>(n).unwrap();
    let mut ok2 = stream.alloc_zeros::<f64>(n).unwrap();
    let mut short = stream.alloc_zeros::<f64>(n - 1).unwrap();
    let mut f32s = stream.alloc_zeros::<f32>(n).unwrap();
    let g = [1.0, 1.0];
    let unsupported = |e: Error, needle: &str| {
        let ok = matches!(&e, Error::Unsupported { what, .. } if what.contains(needle));
        assert!(ok, "{e}");
    };
    let e = cuda
        .backward_into(
            &p,
            &g,
            DeviceOutputs::new(DeviceArrayMut::f64(&mut short))
                .begin_boundary(DeviceArrayMut::f64(&mut ok2)),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shape {
                tensor: "scores output",
                ..
            }
        ),
        "{e}"
    );
    let e = cuda
        .backward_into(
            &p,
            &g,
            DeviceOutputs::new(DeviceArrayMut::f64(&mut ok))
                .begin_boundary(DeviceArrayMut::f32(&mut f32s)),
        )
        .unwrap_err();
    unsupported(e, "F32 for potentials of F64");
    let e = cuda
        .backward_into(&p, &g, DeviceOutputs::new(DeviceArrayMut::f64(&mut ok)))
        .unwrap_err();
    unsupported(e, "begin boundary without");
    let e = cuda
        .backward_into(
            &p,
            &g,
            DeviceOutputs::new(DeviceArrayMut::f64(&mut ok))
                .begin_boundary(DeviceArrayMut::f64(&mut ok2))
                .end_boundary(DeviceArrayMut::f64(&mut short)),
        )
        .unwrap_err();
    unsupported(e, "end boundary's gradient on a problem without");
    // The scores' own memory as an output.
    let at = scores.device_ptr(&stream).0;
    // SAFETY: never written: the check refuses it first.
    let alias = unsafe { DeviceArrayMut::from_raw(at, n, Dtype::F64, std::ptr::null_mut()) };
    let e = cuda
        .backward_into(
            &p,
            &g,
            DeviceOutputs::new(alias).begin_boundary(DeviceArrayMut::f64(&mut ok2)),
        )
        .unwrap_err();
    unsupported(e, "overlapping scores");
    let mut host_mem = vec![0.0f64; n];
    // SAFETY: never written: the check refuses the address first.
    let not_dev = unsafe {
        DeviceArrayMut::from_raw(
            host_mem.as_mut_ptr() as u64,
            n,
            Dtype::F64,
            std::ptr::null_mut(),
        )
    };
    let e = cuda
        .backward_into(
            &p,
            &g,
            DeviceOutputs::new(not_dev).begin_boundary(DeviceArrayMut::f64(&mut ok2)),
        )
        .unwrap_err();
    unsupported(e, "not device memory");
    let e = cuda
        .backward_into(
            &p,
            &[1.0],
            DeviceOutputs::new(DeviceArrayMut::f64(&mut ok))
                .begin_boundary(DeviceArrayMut::f64(&mut ok2)),
        )
        .unwrap_err();
    assert!(matches!(e, Error::Upstream { .. }), "{e}");
    // And the same outputs, right, are taken.
    cuda.backward_into(
        &p,
        &g,
        DeviceOutputs::new(DeviceArrayMut::f64(&mut ok))
            .begin_boundary(DeviceArrayMut::f64(&mut ok2)),
    )
    .unwrap();
}
