//! Cross-backend conformance: every engine against the f64 reference oracle (brute-force
//! enumeration and the plain exact recurrences) and against central finite differences, on
//! the named edge cases and a seeded grid of random problems, in the log, max and entropy
//! semirings.
//!
//! Each check is a generic function over an engine; `conformance!` stamps one test per engine
//! (`cpu_exact::…`, `cpu_scan::…`, `cpu_streaming::…`). An engine that does not support a
//! problem's form (streaming takes no edge input) says so through `EngineInfo::check` and the
//! case is skipped for it, never silently passed: every check asserts how many cases it
//! compared.
#![cfg(feature = "cpu")]

use ndarray::{ArrayD, Axis, Dimension};
use rand::Rng;
use semicrf_core::reference::{self, Reference};
use semicrf_core::testing::{
    GenSpec, Tolerance, Worst, alone, assert_gradients_close, cases, random_problem,
    random_segmentation, random_spec, rng, wide_spec, with_all_inputs,
};
use semicrf_core::{
    Backward, EdgePotentials, Engine, EntropySemiring, Error, Gradients, LogSemiring, MaxSemiring,
    Op, OwnedPotentials, Problem, Query, Scalar, Shape, gold_score, materialize,
};
use semicrf_cpu::{ExactEngine, Parallelism, ScanEngine, StreamingEngine};

/// The named edge cases followed by 520 seeded random problems.
fn all_cases() -> Vec<(String, OwnedPotentials<f64>)> {
    cases(7000, 520)
}

fn supports<F: Scalar, E: Engine<F>>(e: &E, p: &Problem<'_, F>, op: Op) -> bool {
    match e.check(&Query::of(p, op)) {
        Ok(()) => true,
        Err(Error::Unsupported { .. }) => false,
        Err(err) => panic!("{}: {err}", e.name()),
    }
}

fn ones(n: usize) -> Vec<f64> {
    vec![1.0; n]
}

/// `|H - H_ref| <= 1e-10 · max(1, |H_ref|)`: the entropy against brute force.
fn entropy_close(h: f64, want: f64) -> bool {
    Tolerance::F64_VALUES.ok(h, want) || (h - want).abs() <= 1e-10
}

fn forward_viterbi_and_entropy_match_brute_force<E: Engine<f64>>(e: &E) {
    let mut compared = 0;
    let worst_z = Worst::new(format!("{}: log Z vs brute force (relative)", e.name()));
    let worst_m = Worst::new(format!("{}: Viterbi vs brute force (relative)", e.name()));
    let worst_h = Worst::new(format!(
        "{}: entropy vs brute force (relative to max(1, H))",
        e.name()
    ));
    for (name, owned) in all_cases() {
        let p = owned.view().unwrap();
        let problem = Problem::Structured(p.clone());
        if !supports(e, &problem, Op::Viterbi) {
            continue;
        }
        let z = e.forward::<LogSemiring>(&problem).unwrap();
        let m = e.forward::<MaxSemiring>(&problem).unwrap();
        let h = e.forward::<EntropySemiring>(&problem).unwrap();
        let v = e.viterbi(&problem).unwrap();
        for b in 0..p.shape().batch {
            let bf = reference::brute_force(&p, b).unwrap();
            if bf.log_z.is_finite() {
                worst_z.see((z[b] - bf.log_z).abs() / bf.log_z.abs().max(1.0));
                worst_m.see((m[b] - bf.max).abs() / bf.max.abs().max(1.0));
                worst_h.see((h[b].entropy - bf.entropy).abs() / bf.entropy.abs().max(1.0));
            }
            let ok = Tolerance::F64_VALUES;
            assert!(
                ok.ok(z[b], bf.log_z),
                "{name} b={b}: log Z {} vs {}",
                z[b],
                bf.log_z
            );
            assert!(
                ok.ok(m[b], bf.max),
                "{name} b={b}: max {} vs {}",
                m[b],
                bf.max
            );
            assert!(ok.ok(v[b].score, bf.max), "{name} b={b}: viterbi score");
            assert!(
                ok.ok(h[b].log_weight, bf.log_z),
                "{name} b={b}: entropy's log Z"
            );
            if bf.log_z.is_finite() {
                assert!(
                    entropy_close(h[b].entropy, bf.entropy),
                    "{name} b={b}: entropy {} vs {}",
                    h[b].entropy,
                    bf.entropy
                );
                assert!(h[b].entropy >= 0.0, "{name} b={b}: negative entropy");
            }
            if bf.max.is_finite() {
                let g = gold_score(&p, b, &v[b].segments).unwrap();
                assert!(
                    ok.ok(g, v[b].score),
                    "{name} b={b}: gold {g} vs {}",
                    v[b].score
                );
            } else {
                assert!(v[b].segments.is_empty(), "{name} b={b}: segments of -inf");
            }
            compared += 1;
        }
    }
    assert!(
        compared >= 500,
        "{}: only {compared} sequences compared",
        e.name()
    );
}

fn gradients_and_marginals_match_the_reference<E: Engine<f64>>(e: &E) {
    let mut compared = 0;
    let mut infeasible = 0;
    for (name, owned) in all_cases() {
        let p = owned.view().unwrap();
        let problem = Problem::Structured(p.clone());
        if !supports(e, &problem, Op::Backward) {
            continue;
        }
        let bn = p.shape().batch;
        // Per-sequence upstream gradients, including a zero and a negative one.
        let g: Vec<f64> = (0..bn).map(|b| [1.0, 0.5, -2.0, 0.0][b % 4]).collect();
        let want: Result<Backward, Error> = Engine::<f64>::backward(&Reference, &problem, &g);
        let got = e.backward(&problem, &g);
        match (got, want) {
            (Ok(got), Ok(want)) => {
                for b in 0..bn {
                    assert!(
                        Tolerance::F64_VALUES.ok(got.log_z[b], want.log_z[b]),
                        "{name}: log Z"
                    );
                }
                assert_gradients_close(&name, &got.grad, &want.grad, Tolerance::F64_GRADS);
                for (x, y) in got
                    .boundary_marginals
                    .iter()
                    .zip(want.boundary_marginals.iter())
                {
                    assert!(
                        Tolerance::F64_GRADS.ok(*x, *y),
                        "{name}: boundary marginal {x} vs {y}"
                    );
                }
                compared += 1;
            }
            (Err(a), Err(b)) => {
                assert_eq!(a, b, "{name}");
                assert!(matches!(a, Error::Infeasible { .. }));
                // The entropy of an infeasible sequence is the same typed error.
                let h = e.forward::<EntropySemiring>(&problem).unwrap();
                assert_eq!(semicrf_core::entropies(&h).unwrap_err(), a, "{name}");
                infeasible += 1;
            }
            (a, b) => panic!("{name}: {:?} vs reference {:?}", a.err(), b.err()),
        }
    }
    assert!(
        compared >= 400,
        "{}: only {compared} problems compared",
        e.name()
    );
    assert!(infeasible > 0, "the suite must contain infeasible problems");
}

/// `Σ_b log Z_b` from the reference over materialised edges.
fn reference_total_log_z(owned: &OwnedPotentials<f64>) -> f64 {
    let p = owned.view().unwrap();
    reference::forward_log(materialize(&p).view(), p.lengths())
        .iter()
        .sum()
}

/// Richardson-extrapolated central difference of the reference's `Σ_b log Z_b` with respect
/// to one entry of one tensor: truncation `O(h⁴)`.
fn finite_difference(
    owned: &OwnedPotentials<f64>,
    field: fn(&mut OwnedPotentials<f64>) -> &mut ArrayD<f64>,
    idx: &[usize],
) -> f64 {
    let h = 1e-3;
    let at = |delta: f64| {
        let mut o = owned.clone();
        field(&mut o)[idx] += delta;
        reference_total_log_z(&o)
    };
    let d1 = (at(h) - at(-h)) / (2.0 * h);
    let d2 = (at(h / 2.0) - at(-h / 2.0)) / h;
    (4.0 * d2 - d1) / 3.0
}

type Field = fn(&mut OwnedPotentials<f64>) -> &mut ArrayD<f64>;

/// Every input tensor by name, with its gradient.
fn fields(g: Gradients) -> [(&'static str, Field, Option<ArrayD<f64>>); 7] {
    [
        ("scores", |o| &mut o.scores, g.scores.map(|a| a.into_dyn())),
        (
            "transition",
            |o| o.transition.as_mut().unwrap(),
            g.transition,
        ),
        (
            "duration",
            |o| o.duration.as_mut().unwrap(),
            g.duration.map(|a| a.into_dyn()),
        ),
        (
            "start",
            |o| o.start.as_mut().unwrap(),
            g.start.map(|a| a.into_dyn()),
        ),
        (
            "end",
            |o| o.end.as_mut().unwrap(),
            g.end.map(|a| a.into_dyn()),
        ),
        (
            "begin_boundary",
            |o| o.begin_boundary.as_mut().unwrap(),
            g.begin_boundary.map(|a| a.into_dyn()),
        ),
        (
            "end_boundary",
            |o| o.end_boundary.as_mut().unwrap(),
            g.end_boundary.map(|a| a.into_dyn()),
        ),
    ]
}

fn gradients_match_central_finite_differences<E: Engine<f64>>(e: &E) {
    let mut problems = 0;
    let mut entries = 0;
    let worst = Worst::new(format!(
        "{}: gradients vs central differences (absolute)",
        e.name()
    ));
    for (name, owned) in all_cases() {
        if problems >= 120 {
            break;
        }
        let owned = with_all_inputs(&owned);
        let p = owned.view().unwrap();
        let problem = Problem::Structured(p.clone());
        if !supports(e, &problem, Op::Backward) {
            continue;
        }
        let Ok(back) = e.backward(&problem, &ones(p.shape().batch)) else {
            continue; // infeasible: covered by the reference comparison
        };
        // A central difference of log Z carries a rounding error of about eps·|log Z|/h; keep
        // the problems where that is far below the 1e-9 tolerance (|scores| of 1e4 are
        // compared against the reference's exact marginals instead).
        if back.log_z.iter().any(|z| z.abs() > 1e3) {
            continue;
        }
        for (field_name, field, grad) in fields(back.grad) {
            let mut o = owned.clone();
            let present = match field_name {
                "begin_boundary" => o.begin_boundary.is_some(),
                "end_boundary" => o.end_boundary.is_some(),
                _ => true,
            };
            assert_eq!(
                present,
                grad.is_some(),
                "{name}: grad {field_name} presence"
            );
            let Some(grad) = grad else { continue };
            let values = field(&mut o).clone();
            for (idx, &x) in values.indexed_iter() {
                let idx = idx.as_array_view().to_vec();
                if x == f64::NEG_INFINITY {
                    // A forbidden potential has probability zero of being used (position
                    // marginals come from running sums, so zero up to their rounding).
                    let g = grad[idx.as_slice()];
                    assert!(g.abs() <= 1e-12, "{name}: grad {field_name}{idx:?} = {g}");
                    continue;
                }
                let fd = finite_difference(&owned, field, &idx);
                let g = grad[idx.as_slice()];
                worst.see((fd - g).abs());
                assert!(
                    (fd - g).abs() <= 1e-9,
                    "{name}: grad {field_name}{idx:?} = {g}, fd {fd}"
                );
                entries += 1;
            }
        }
        problems += 1;
    }
    assert!(problems >= 100, "{}: only {problems} problems", e.name());
    assert!(entries > 5000, "{}: only {entries} entries", e.name());
}

fn nll_is_nonnegative_for_random_gold_segmentations<E: Engine<f64>>(e: &E) {
    let mut compared = 0;
    for (name, owned) in all_cases() {
        let p = owned.view().unwrap();
        let problem = Problem::Structured(p.clone());
        if !supports(e, &problem, Op::forward::<LogSemiring>()) {
            continue;
        }
        let z = e.forward::<LogSemiring>(&problem).unwrap();
        let sh = p.shape();
        for b in 0..sh.batch {
            for draw in 0..3u64 {
                let seed = draw * 1_000_003 + b as u64;
                let segs = random_segmentation(seed, p.lengths()[b], sh.max_duration, sh.labels);
                let gold = gold_score(&p, b, &segs).unwrap();
                if gold == f64::NEG_INFINITY {
                    continue;
                }
                let nll = z[b] - gold;
                assert!(
                    nll >= -1e-10 * z[b].abs().max(1.0),
                    "{name} b={b}: NLL {nll}"
                );
                compared += 1;
            }
        }
    }
    assert!(compared >= 500, "only {compared} gold segmentations scored");
}

fn batched_results_equal_one_at_a_time_results<E: Engine<f64>>(e: &E) {
    let mut compared = 0;
    for (name, owned) in all_cases() {
        let p = owned.view().unwrap();
        let problem = Problem::Structured(p.clone());
        let bn = p.shape().batch;
        if bn < 2 || !supports(e, &problem, Op::Backward) {
            continue;
        }
        let z = e.forward::<LogSemiring>(&problem).unwrap();
        let m = e.forward::<MaxSemiring>(&problem).unwrap();
        let h = e.forward::<EntropySemiring>(&problem).unwrap();
        let v = e.viterbi(&problem).unwrap();
        let back = e.backward(&problem, &ones(bn)).ok();
        let mut shared_sum: Option<Vec<ArrayD<f64>>> = None;
        for b in 0..bn {
            let o = alone(&owned, b);
            let q = Problem::Structured(o.view().unwrap());
            let bits = |x: f64| x.to_bits();
            assert_eq!(
                bits(e.forward::<LogSemiring>(&q).unwrap()[0]),
                bits(z[b]),
                "{name}"
            );
            assert_eq!(
                bits(e.forward::<MaxSemiring>(&q).unwrap()[0]),
                bits(m[b]),
                "{name}"
            );
            let h1 = e.forward::<EntropySemiring>(&q).unwrap()[0];
            assert_eq!(
                bits(h1.entropy),
                bits(h[b].entropy),
                "{name} b={b}: entropy"
            );
            assert_eq!(e.viterbi(&q).unwrap()[0], v[b], "{name} b={b}");
            let Some(back) = &back else { continue };
            let one = e.backward(&q, &[1.0]).unwrap();
            let g = &back.grad;
            let row = |a: &Option<ndarray::Array3<f64>>| {
                a.as_ref().map(|a| a.index_axis(Axis(0), b).to_owned())
            };
            let row1 = |a: &Option<ndarray::Array3<f64>>| {
                a.as_ref().map(|a| a.index_axis(Axis(0), 0).to_owned())
            };
            assert_eq!(
                row(&g.scores),
                row1(&one.grad.scores),
                "{name} b={b}: scores grad"
            );
            assert_eq!(
                row(&g.begin_boundary),
                row1(&one.grad.begin_boundary),
                "{name} b={b}"
            );
            assert_eq!(
                row(&g.end_boundary),
                row1(&one.grad.end_boundary),
                "{name} b={b}"
            );
            assert_eq!(
                back.boundary_marginals.row(b),
                one.boundary_marginals.row(0),
                "{name} b={b}: boundary marginals"
            );
            let shared = vec![
                one.grad.transition.clone().unwrap(),
                one.grad.duration.clone().unwrap().into_dyn(),
                one.grad.start.clone().unwrap().into_dyn(),
                one.grad.end.clone().unwrap().into_dyn(),
            ];
            shared_sum = Some(match shared_sum {
                None => shared,
                Some(acc) => acc.into_iter().zip(shared).map(|(a, s)| a + s).collect(),
            });
        }
        if let (Some(back), Some(sum)) = (back, shared_sum) {
            let batched = [
                back.grad.transition.unwrap(),
                back.grad.duration.unwrap().into_dyn(),
                back.grad.start.unwrap().into_dyn(),
                back.grad.end.unwrap().into_dyn(),
            ];
            // Shared parameters are sums over the batch: equal up to the order of additions.
            let tol = Tolerance {
                abs: 1e-13,
                rel: 1e-13,
            };
            for (a, s) in batched.iter().zip(&sum) {
                for (x, y) in a.iter().zip(s.iter()) {
                    assert!(tol.ok(*x, *y), "{name}: {x} vs {y}");
                }
            }
        }
        compared += 1;
    }
    assert!(compared >= 200, "only {compared} batches compared");
}

fn results_are_bitwise_identical_across_runs_and_thread_counts<E: Engine<f64>>(
    e: &E,
    sequential: &E,
) {
    for (name, owned) in all_cases().into_iter().step_by(5) {
        let p = owned.view().unwrap();
        let problem = Problem::Structured(p.clone());
        if !supports(e, &problem, Op::Backward) {
            continue;
        }
        let bn = p.shape().batch;
        let a = e.backward(&problem, &ones(bn));
        let b = e.backward(&problem, &ones(bn));
        let c = sequential.backward(&problem, &ones(bn));
        assert_eq!(
            format!("{a:?}"),
            format!("{b:?}"),
            "{name}: two runs differ"
        );
        assert_eq!(
            format!("{a:?}"),
            format!("{c:?}"),
            "{name}: sequential differs"
        );
        assert_eq!(
            e.viterbi(&problem).unwrap(),
            sequential.viterbi(&problem).unwrap()
        );
        let h = |x: &E| format!("{:?}", x.forward::<EntropySemiring>(&problem).unwrap());
        assert_eq!(h(e), h(sequential), "{name}: entropy");
    }
}

fn f32_inputs_meet_the_accuracy_targets<E: Engine<f32>>(e: &E) {
    let mut compared = 0;
    let worst_z = Worst::new(format!("{}: f32 log Z (relative)", e.name()));
    let worst_g = Worst::new(format!("{}: f32 marginals (absolute)", e.name()));
    for (name, owned) in all_cases() {
        if owned.scores.iter().any(|x| x.abs() > 5.0 && x.is_finite()) {
            continue; // the f32 targets are for |scores| <= 5
        }
        let o32 = owned.cast::<f32>();
        let exact = o32.cast::<f64>(); // the f32 values, exactly, in f64
        let p32 = o32.view().unwrap();
        let problem = Problem::Structured(p32.clone());
        if !supports(e, &problem, Op::Backward) {
            continue;
        }
        let p64 = exact.view().unwrap();
        let r64 = Problem::Structured(p64.clone());
        let bn = p32.shape().batch;
        let z = e.forward::<LogSemiring>(&problem).unwrap();
        let zr = Engine::<f64>::forward::<LogSemiring>(&Reference, &r64).unwrap();
        let h = e.forward::<EntropySemiring>(&problem).unwrap();
        let hr = Engine::<f64>::forward::<EntropySemiring>(&Reference, &r64).unwrap();
        for b in 0..bn {
            assert!(
                Tolerance::F32_LOG_Z.ok(z[b], zr[b]),
                "{name} b={b}: f32 log Z {} vs {}",
                z[b],
                zr[b]
            );
            assert!(
                Tolerance::F32_LOG_Z.ok(h[b].entropy, hr[b].entropy),
                "{name} b={b}: f32 entropy {:?} vs {:?}",
                h[b],
                hr[b]
            );
            if zr[b].is_finite() {
                worst_z.see((z[b] - zr[b]).abs() / zr[b].abs().max(1.0));
            }
        }
        let v = e.viterbi(&problem).unwrap();
        let best = Engine::<f64>::forward::<MaxSemiring>(&Reference, &r64).unwrap();
        for b in 0..bn {
            if best[b].is_finite() {
                let g = gold_score(&p64, b, &v[b].segments).unwrap();
                assert!(
                    Tolerance::F32_LOG_Z.ok(g, best[b]),
                    "{name} b={b}: viterbi gold {g} vs {}",
                    best[b]
                );
            }
        }
        if let (Ok(got), Ok(want)) = (
            e.backward(&problem, &ones(bn)),
            Engine::<f64>::backward(&Reference, &r64, &ones(bn)),
        ) {
            assert_gradients_close(&name, &got.grad, &want.grad, Tolerance::F32_GRADS);
            let s = got.grad.scores.as_ref().unwrap();
            let w = want.grad.scores.as_ref().unwrap();
            for (x, y) in s.iter().zip(w) {
                worst_g.see((x - y).abs());
            }
        }
        compared += 1;
    }
    assert!(compared >= 400, "only {compared} f32 problems compared");
}

fn edge_input_matches_brute_force_over_the_virtual_start<E: Engine<f64>>(e: &E) {
    let mut compared = 0;
    for seed in 0..150u64 {
        let owned = random_problem(seed, &random_spec(seed));
        let p = owned.view().unwrap();
        // A general edge tensor: every source matters at s = 0.
        let mut edges = materialize(&p);
        edges.mapv_inplace(|x| if x.is_finite() { x } else { -0.25 });
        let ep = EdgePotentials::new(edges.view(), p.lengths()).unwrap();
        let problem = Problem::Edges(ep.clone());
        if !supports(e, &problem, Op::Backward) {
            return; // this engine takes structured input only
        }
        let z = e.forward::<LogSemiring>(&problem).unwrap();
        let h = e.forward::<EntropySemiring>(&problem).unwrap();
        let v = e.viterbi(&problem).unwrap();
        for b in 0..p.shape().batch {
            let bf = reference::brute_force_edges(&ep, b).unwrap();
            assert!(
                Tolerance::F64_VALUES.ok(z[b], bf.log_z),
                "seed {seed} b={b}"
            );
            assert!(
                Tolerance::F64_VALUES.ok(v[b].score, bf.max),
                "seed {seed} b={b}: viterbi"
            );
            assert!(
                entropy_close(h[b].entropy, bf.entropy),
                "seed {seed} b={b}: entropy {} vs {}",
                h[b].entropy,
                bf.entropy
            );
            compared += 1;
        }
        let got = e.backward(&problem, &ones(p.shape().batch)).unwrap();
        let want = Engine::<f64>::backward(&Reference, &problem, &ones(p.shape().batch)).unwrap();
        assert_gradients_close(
            &format!("seed {seed}"),
            &got.grad,
            &want.grad,
            Tolerance::F64_GRADS,
        );
    }
    assert!(compared >= 150);
}

fn outputs_are_finite_wherever_log_z_is_finite_on_10000_problems<E: Engine<f64>>(e: &E) {
    let mut checked = 0;
    for seed in 0..10_000u64 {
        let g = wide_spec(seed);
        let owned = random_problem(seed, &g);
        let p = owned.view().unwrap();
        let problem = Problem::Structured(p.clone());
        if !supports(e, &problem, Op::Backward) {
            return;
        }
        let z = e.forward::<LogSemiring>(&problem).unwrap();
        let m = e.forward::<MaxSemiring>(&problem).unwrap();
        let h = e.forward::<EntropySemiring>(&problem).unwrap();
        let v = e.viterbi(&problem).unwrap();
        for b in 0..g.batch {
            assert!(
                !z[b].is_nan() && z[b] != f64::INFINITY,
                "seed {seed}: log Z {}",
                z[b]
            );
            assert!(
                !m[b].is_nan() && m[b] != f64::INFINITY,
                "seed {seed}: max {}",
                m[b]
            );
            assert_eq!(z[b].is_finite(), m[b].is_finite(), "seed {seed}");
            assert_eq!(h[b].log_weight.is_finite(), z[b].is_finite(), "seed {seed}");
            if z[b].is_finite() {
                let slack = 1e-12 * z[b].abs().max(1.0);
                assert!(
                    m[b] <= z[b] + slack,
                    "seed {seed}: max {} > log Z {}",
                    m[b],
                    z[b]
                );
                // 0 <= H <= log(number of segmentations), up to the entropy's rounding,
                // which is relative to the size of the scores.
                let n = reference::count_segmentations(p.lengths()[b], g.max_duration, g.labels);
                let hb = h[b].entropy;
                assert!(hb.is_finite() && hb >= 0.0, "seed {seed}: entropy {hb}");
                assert!(
                    hb <= (n as f64).ln() + 1e-9 * z[b].abs().max(1.0),
                    "seed {seed}: entropy {hb} above log {n}"
                );
            }
            if v[b].score.is_finite() {
                let gold = gold_score(&p, b, &v[b].segments).unwrap();
                assert!(
                    Tolerance::F64_VALUES.ok(gold, v[b].score),
                    "seed {seed}: viterbi gold"
                );
            }
            let segs = random_segmentation(seed, p.lengths()[b], g.max_duration, g.labels);
            let gold = gold_score(&p, b, &segs).unwrap();
            if gold.is_finite() {
                let nll = z[b] - gold;
                assert!(
                    nll >= -1e-10 * z[b].abs().max(1.0),
                    "seed {seed}: NLL {nll}"
                );
            }
        }
        if z.iter().all(|x| x.is_finite()) {
            let back = e.backward(&problem, &ones(g.batch)).unwrap();
            for (name, x) in back.grad.fields() {
                if let Some(x) = x {
                    assert!(x.iter().all(|v| v.is_finite()), "seed {seed}: grad.{name}");
                }
            }
            assert!(
                back.boundary_marginals.iter().all(|x| x.is_finite()),
                "seed {seed}"
            );
            // Position marginals are probabilities: they sum to one over labels.
            let sc = back.grad.scores.as_ref().unwrap();
            for b in 0..g.batch {
                for t in 0..p.lengths()[b] {
                    let s: f64 = sc.index_axis(Axis(0), b).row(t).sum();
                    assert!(
                        (s - 1.0).abs() < 1e-6,
                        "seed {seed} b={b} t={t}: Σ marginals {s}"
                    );
                }
            }
        } else {
            assert!(matches!(
                e.backward(&problem, &ones(g.batch)),
                Err(Error::Infeasible { .. })
            ));
        }
        checked += 1;
    }
    assert_eq!(checked, 10_000);
}

/// `E[score] = Σ θ · ∂ log Z / ∂θ` over every finite potential (the score is linear in the
/// potentials, and forbidden ones are never used).
fn expected_score(owned: &OwnedPotentials<f64>, grad: Gradients) -> f64 {
    let mut total = 0.0;
    let mut o = owned.clone();
    for (_, field, g) in fields(grad) {
        let Some(g) = g else { continue };
        for (x, dg) in field(&mut o).iter().zip(g.iter()) {
            if x.is_finite() {
                total += x * dg;
            }
        }
    }
    total
}

fn a_long_sequence_in_f32_meets_the_accuracy_targets<E: Engine<f32>>(e: &E) {
    // T = 10^5 with the edge tensor still small enough for the materialising engines.
    let mut g = GenSpec::new(1, 100_000, 6, 3);
    g.start = true;
    g.end = true;
    g.scale = 5.0;
    let owned = random_problem(42, &g);
    let o32 = owned.cast::<f32>();
    let exact = with_all_inputs(&o32.cast::<f64>());
    let problem = Problem::Structured(o32.view().unwrap());
    let r64 = Problem::Structured(exact.view().unwrap());
    let z = e.forward::<LogSemiring>(&problem).unwrap();
    let want = Engine::<f64>::backward(&Reference, &r64, &[1.0]).unwrap();
    let rel = (z[0] - want.log_z[0]).abs() / want.log_z[0].abs().max(1.0);
    assert!(rel <= 1e-5, "{}: log Z relative error {rel:e}", e.name());
    let got = e.backward(&problem, &[1.0]).unwrap();
    assert_gradients_close("T = 1e5", &got.grad, &want.grad, Tolerance::F32_GRADS);
    let mut worst = 0.0f64;
    for (x, y) in got
        .grad
        .scores
        .unwrap()
        .iter()
        .zip(want.grad.scores.as_ref().unwrap().iter())
    {
        worst = worst.max((x - y).abs());
    }
    let v = e.viterbi(&problem).unwrap();
    let best = Engine::<f64>::forward::<MaxSemiring>(&Reference, &r64).unwrap()[0];
    let gold = gold_score(&exact.view().unwrap(), 0, &v[0].segments).unwrap();
    let vrel = (gold - best).abs() / best.abs();
    assert!(vrel <= 1e-5, "viterbi gold {gold} vs {best}");
    // The entropy against the oracle's own entropy recurrence over materialised edges (an
    // independent implementation), and against log Z - E[score] with the expected score from
    // the oracle's marginals (an independent method). The latter cancels: |E[score]| is
    // about 37 H here, so the marginals' relative error (about 1e-9 after 1e5 positions of
    // |log Z| ≈ 5e5) is amplified into about 4e-8 of H; it is held to 1e-6.
    let h = e.forward::<EntropySemiring>(&problem).unwrap()[0].entropy;
    let oracle = Engine::<f64>::forward::<EntropySemiring>(&Reference, &r64).unwrap()[0].entropy;
    let orel = (h - oracle).abs() / oracle.abs();
    assert!(
        orel <= 1e-10,
        "{}: entropy {h} vs the oracle's {oracle}",
        e.name()
    );
    let independent = want.log_z[0] - expected_score(&exact, want.grad);
    let hrel = (h - independent).abs() / independent.abs();
    assert!(
        hrel <= 1e-6,
        "{}: entropy {h} vs log Z - E[score] {independent}",
        e.name()
    );
    println!(
        "{}: T = 1e5 f32: log Z rel error {rel:.2e}, worst marginal error {worst:.2e}, \
         viterbi gold rel error {vrel:.2e}, entropy {h:.6e}: vs the oracle's rel error \
         {orel:.2e}, vs log Z - E[score] rel error {hrel:.2e}",
        e.name()
    );
}

/// The entropy of a long sequence (T = 2·10⁴, f64, |scores| <= 1) against an independent
/// method: `log Z - E[score]`, with the expected score from the oracle's marginals. With
/// scores of this size `log Z ≈ 2H`, so that difference is well conditioned.
fn entropy_of_a_long_sequence_is_log_z_minus_the_expected_score<E: Engine<f64>>(e: &E) {
    let mut g = GenSpec::new(1, 20_000, 6, 3);
    g.start = true;
    g.end = true;
    g.boundaries = true;
    let owned = with_all_inputs(&random_problem(43, &g));
    let problem = Problem::Structured(owned.view().unwrap());
    let h = e.forward::<EntropySemiring>(&problem).unwrap()[0];
    let want = Engine::<f64>::backward(&Reference, &problem, &[1.0]).unwrap();
    let independent = want.log_z[0] - expected_score(&owned, want.grad);
    let rel = (h.entropy - independent).abs() / independent.abs();
    assert!(
        rel <= 1e-9,
        "{}: entropy {} vs log Z - E[score] {independent}",
        e.name(),
        h.entropy
    );
    assert!(Tolerance::F64_VALUES.ok(h.log_weight, want.log_z[0]));
    println!(
        "{}: T = 2e4: entropy {:.6e} vs log Z - E[score]: rel error {rel:.2e}",
        e.name(),
        h.entropy
    );
}

/// Integer scores make exact ties common: the segments must be the reference's (shorter
/// duration first, then the smaller previous label, then the smaller final label).
fn viterbi_ties_break_as_the_reference_breaks_them<E: Engine<f64>>(e: &E) {
    let mut compared = 0;
    for seed in 0..200 {
        let mut owned = random_problem(seed, &random_spec(seed));
        let mut r = rng(seed);
        let ninf = f64::NEG_INFINITY;
        owned.scores.mapv_inplace(|x| {
            if x == ninf {
                x
            } else {
                r.random_range(-1..=1) as f64
            }
        });
        if let Some(t) = owned.transition.as_mut() {
            t.mapv_inplace(|x| if x == ninf { x } else { x.round() });
        }
        owned.duration = None;
        owned.begin_boundary = None;
        owned.end_boundary = None;
        owned.start = owned
            .start
            .map(|s| s.mapv(|x| if x == ninf { x } else { 0.0 }));
        owned.end = None;
        let p = Problem::Structured(owned.view().unwrap());
        if !supports(e, &p, Op::Viterbi) {
            continue;
        }
        assert_eq!(
            e.viterbi(&p).unwrap(),
            Reference.viterbi(&p).unwrap(),
            "seed {seed}"
        );
        let edges = materialize(&owned.view().unwrap());
        let ep = Problem::Edges(EdgePotentials::new(edges.view(), &owned.lengths).unwrap());
        if supports(e, &ep, Op::Viterbi) {
            assert_eq!(
                e.viterbi(&ep).unwrap(),
                Reference.viterbi(&ep).unwrap(),
                "seed {seed} edges"
            );
        }
        compared += 1;
    }
    assert_eq!(compared, 200);
}

fn malformed_upstream_gradients_are_typed_errors<E: Engine<f64>>(e: &E) {
    let owned = random_problem(3, &GenSpec::new(2, 4, 2, 2));
    let p = Problem::Structured(owned.view().unwrap());
    for up in [
        &[1.0][..],
        &[1.0, f64::NAN],
        &[1.0, f64::INFINITY],
        &[1.0; 3],
    ] {
        assert!(
            matches!(e.backward(&p, up), Err(Error::Upstream { .. })),
            "{}: {up:?}",
            e.name()
        );
    }
}

/// Estimates at dimensions near `usize::MAX` are answers (a typed refusal or a byte count),
/// never a panic or a wrapped count; estimates never decrease as a dimension grows.
fn estimates_at_huge_dimensions_are_typed_answers<E: Engine<f64>>(e: &E) {
    let huge = [usize::MAX, usize::MAX / 2, 1 << 40, 1 << 32, 3];
    for &b in &[1, usize::MAX] {
        for &t in &huge {
            for &k in &huge {
                for &c in &huge {
                    let shape = Shape::new(b, t, k, c);
                    for form in [
                        semicrf_core::Form::Structured {
                            duration_dependent_transition: false,
                            boundaries: [true, true],
                        },
                        semicrf_core::Form::Structured {
                            duration_dependent_transition: true,
                            boundaries: [true, true],
                        },
                        semicrf_core::Form::Edges,
                    ] {
                        for op in [
                            Op::forward::<LogSemiring>(),
                            Op::forward::<EntropySemiring>(),
                            Op::Backward,
                            Op::Viterbi,
                        ] {
                            for threads in [1, 16, usize::MAX] {
                                let q = Query {
                                    shape,
                                    form,
                                    op,
                                    dtype_bytes: 4,
                                    threads,
                                };
                                let _ = e.check(&q);
                                match e.memory_required(&q) {
                                    Ok(n) => assert!(n > 0),
                                    Err(err) => assert!(
                                        matches!(err, Error::Unsupported { .. }),
                                        "{}: {err}",
                                        e.name()
                                    ),
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    // Monotone in T (a larger problem never needs less).
    let q = |t: usize| Query {
        shape: Shape::new(2, t, 4, 3),
        form: semicrf_core::Form::Structured {
            duration_dependent_transition: false,
            boundaries: [true, true],
        },
        op: Op::Backward,
        dtype_bytes: 8,
        threads: 4,
    };
    let mut last = 0;
    for t in [1, 10, 100, 10_000, 1_000_000] {
        let n = e.memory_required(&q(t)).unwrap();
        assert!(n >= last, "{}: {n} < {last} at T = {t}", e.name());
        last = n;
    }
}

fn exact(par: Parallelism) -> ExactEngine {
    ExactEngine::new().parallelism(par)
}
fn scan(par: Parallelism) -> ScanEngine {
    ScanEngine::new().parallelism(par)
}
fn streaming(par: Parallelism) -> StreamingEngine {
    StreamingEngine::new().parallelism(par)
}

/// Stamps every check for one engine constructor into a module of tests.
macro_rules! conformance {
    ($module:ident, $make:expr) => {
        conformance!($module, $make, || true);
    };
    ($module:ident, $make:expr, $ready:expr) => {
        mod $module {
            use super::*;
            #[test]
            fn forward_viterbi_and_entropy_match_brute_force() {
                if !$ready() {
                    return;
                }
                super::forward_viterbi_and_entropy_match_brute_force(&$make(Parallelism::Rayon));
            }
            #[test]
            fn gradients_and_marginals_match_the_reference() {
                if !$ready() {
                    return;
                }
                super::gradients_and_marginals_match_the_reference(&$make(Parallelism::Rayon));
            }
            #[test]
            fn gradients_match_central_finite_differences() {
                if !$ready() {
                    return;
                }
                super::gradients_match_central_finite_differences(&$make(Parallelism::Rayon));
            }
            #[test]
            fn nll_is_nonnegative_for_random_gold_segmentations() {
                if !$ready() {
                    return;
                }
                super::nll_is_nonnegative_for_random_gold_segmentations(&$make(Parallelism::Rayon));
            }
            #[test]
            fn batched_results_equal_one_at_a_time_results() {
                if !$ready() {
                    return;
                }
                super::batched_results_equal_one_at_a_time_results(&$make(Parallelism::Rayon));
            }
            #[test]
            fn results_are_bitwise_identical_across_runs_and_thread_counts() {
                if !$ready() {
                    return;
                }
                super::results_are_bitwise_identical_across_runs_and_thread_counts(
                    &$make(Parallelism::Rayon),
                    &$make(Parallelism::Sequential),
                );
            }
            #[test]
            fn f32_inputs_meet_the_accuracy_targets() {
                if !$ready() {
                    return;
                }
                super::f32_inputs_meet_the_accuracy_targets(&$make(Parallelism::Rayon));
            }
            #[test]
            fn outputs_are_finite_wherever_log_z_is_finite_on_10000_problems() {
                if !$ready() {
                    return;
                }
                super::outputs_are_finite_wherever_log_z_is_finite_on_10000_problems(&$make(
                    Parallelism::Rayon,
                ));
            }
            #[test]
            fn a_long_sequence_in_f32_meets_the_accuracy_targets() {
                if !$ready() {
                    return;
                }
                super::a_long_sequence_in_f32_meets_the_accuracy_targets(&$make(
                    Parallelism::Rayon,
                ));
            }
            #[test]
            fn edge_input_matches_brute_force_over_the_virtual_start() {
                if !$ready() {
                    return;
                }
                super::edge_input_matches_brute_force_over_the_virtual_start(&$make(
                    Parallelism::Rayon,
                ));
            }
            #[test]
            fn entropy_of_a_long_sequence_is_log_z_minus_the_expected_score() {
                if !$ready() {
                    return;
                }
                super::entropy_of_a_long_sequence_is_log_z_minus_the_expected_score(&$make(
                    Parallelism::Rayon,
                ));
            }
            #[test]
            fn viterbi_ties_break_as_the_reference_breaks_them() {
                if !$ready() {
                    return;
                }
                super::viterbi_ties_break_as_the_reference_breaks_them(&$make(Parallelism::Rayon));
            }
            #[test]
            fn malformed_upstream_gradients_are_typed_errors() {
                if !$ready() {
                    return;
                }
                super::malformed_upstream_gradients_are_typed_errors(&$make(Parallelism::Rayon));
            }
            #[test]
            fn estimates_at_huge_dimensions_are_typed_answers() {
                if !$ready() {
                    return;
                }
                super::estimates_at_huge_dimensions_are_typed_answers(&$make(Parallelism::Rayon));
                super::estimates_at_huge_dimensions_are_typed_answers(&$make(
                    Parallelism::Sequential,
                ));
            }
        }
    };
}

conformance!(cpu_exact, exact);
conformance!(cpu_scan, scan);
conformance!(cpu_streaming, streaming);

/// The CUDA streaming engine on device 0 (the parallelism argument is the CPU's: ignored).
#[cfg(feature = "cuda")]
fn cuda_streaming(_: Parallelism) -> semicrf_cuda::CudaEngine {
    semicrf_cuda::CudaEngine::new(semicrf_core::Algorithm::Streaming, 0)
}

/// Whether the CUDA tests can run here: without a usable GPU they are skipped with the
/// reason printed, unless `SEMICRF_REQUIRE_GPU=1`, which makes that a failure.
#[cfg(feature = "cuda")]
fn gpu_ready() -> bool {
    semicrf_cuda::CudaEngine::usable_or_skip(0).is_some()
}

#[cfg(feature = "cuda")]
conformance!(cuda, cuda_streaming, gpu_ready);

/// The CUDA streaming engine with the log semiring in the log-domain kernels only.
#[cfg(feature = "cuda")]
fn cuda_streaming_log(_: Parallelism) -> semicrf_cuda::CudaEngine {
    semicrf_cuda::CudaEngine::new(semicrf_core::Algorithm::Streaming, 0).log_domain_only()
}

#[cfg(feature = "cuda")]
conformance!(cuda_log, cuda_streaming_log, gpu_ready);

/// The CUDA exact engine (the edge-form kernels) on device 0.
#[cfg(feature = "cuda")]
fn cuda_exact(_: Parallelism) -> semicrf_cuda::CudaEngine {
    semicrf_cuda::CudaEngine::new(semicrf_core::Algorithm::Exact, 0)
}

#[cfg(feature = "cuda")]
conformance!(cuda_exact, cuda_exact, gpu_ready);

/// The CUDA scan engine on device 0 (the same edge-form kernels as exact).
#[cfg(feature = "cuda")]
fn cuda_scan(_: Parallelism) -> semicrf_cuda::CudaEngine {
    semicrf_cuda::CudaEngine::new(semicrf_core::Algorithm::Scan, 0)
}

#[cfg(feature = "cuda")]
conformance!(cuda_scan, cuda_scan, gpu_ready);

/// The oracle's own finite-difference check, so the suite's gradient machinery is known to be
/// able to fail: a perturbed gradient must be caught.
#[test]
fn the_finite_difference_check_catches_a_wrong_gradient() {
    let owned = with_all_inputs(&random_problem(3, &random_spec(3)));
    let fd = finite_difference(&owned, |o| &mut o.scores, &[0, 0, 0]);
    let p = owned.view().unwrap();
    let back = Engine::<f64>::backward(
        &Reference,
        &Problem::Structured(p),
        &[1.0; 8][..owned.lengths.len()],
    )
    .unwrap();
    let g = back.grad.scores.unwrap()[[0, 0, 0]];
    assert!((fd - g).abs() <= 1e-9);
    assert!((fd - (g + 1e-8)).abs() > 1e-9);
}
