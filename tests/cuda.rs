//! The CUDA streaming engine against the CPU streaming engine and the oracle on the shapes
//! that stress a kernel's block layout (`K` and `C` not multiples of the team or warp size,
//! `K` and `C` above 32 and 1024 lanes), and bitwise reproducibility across runs.
//!
//! The cross-backend conformance suite (`tests/conformance.rs`, module `cuda`) holds the
//! rest, and `tests/cuda_device.rs` potentials and outputs in device memory. Without a
//! usable GPU every test here prints why and passes, unless `SEMICRF_REQUIRE_GPU=1`, which
//! makes that a failure.

#![cfg(all(feature = "cpu", feature = "cuda"))]

use semicrf_core::reference::{self, Reference};
use semicrf_core::testing::{
    GenSpec, Tolerance, TransitionKind, Worst, assert_gradients_close, random_problem, upstream,
};
use semicrf_core::{Engine, EntropySemiring, LogSemiring, MaxSemiring, Problem, gold_score};
use semicrf_cpu::{Parallelism, StreamingEngine};
use semicrf_cuda::CudaEngine;

/// The tests of this file share the device; the memory test measures alone (a measurement
/// counts every call on the device meanwhile, `CudaEngine::measure_memory`).
static DEVICE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The engine and a share of the device, or `None` (the test passes) without a usable GPU.
fn gpu() -> Option<(CudaEngine, std::sync::RwLockReadGuard<'static, ()>)> {
    let e = CudaEngine::usable_or_skip(0)?;
    Some((e, DEVICE.read().unwrap_or_else(|e| e.into_inner())))
}

/// Every `(K, C)` of the grid, both transition forms, all inputs, ragged lengths and some
/// `-inf` scores and transitions: CUDA against CPU streaming (itself checked against the
/// oracle by the conformance suite), in every semiring, gradients and Viterbi.
#[test]
fn every_block_layout_matches_the_cpu_engine() {
    let Some((cuda, _shared)) = gpu() else { return };
    layouts_match(&cuda, "cuda");
}

/// The same with the log semiring in the log-domain kernels only.
#[test]
fn every_block_layout_matches_the_cpu_engine_in_the_log_domain() {
    let Some((cuda, _shared)) = gpu() else { return };
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
    let Some((cuda, _shared)) = gpu() else { return };
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
    let Some((cuda, _shared)) = gpu() else { return };
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
    let Some((cuda, _shared)) = gpu() else { return };
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
    let Some((cuda, _shared)) = gpu() else { return };
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
    let Some((_, _shared)) = gpu() else { return };
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
    if CudaEngine::usable_or_skip(0).is_none() {
        return;
    }
    let _alone = DEVICE.write().unwrap_or_else(|e| e.into_inner());
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
