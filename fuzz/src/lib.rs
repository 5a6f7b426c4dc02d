//! What the fuzz targets share: drive the facade with a problem and check every answer
//! against the f64 reference and the invariants of `GUARANTEES.md`. A violation panics,
//! which libFuzzer reports as a crash.

use semicrf::ndarray::Axis;
use semicrf::range::probability_limit;
use semicrf::reference::Reference;
use semicrf::{
    Backend, Config, Engine, EntropySemiring, Error, LogSemiring, OwnedPotentials, Problem, SemiCrf,
};

/// Problems larger than this (`B·T·K·C²`, or `T` beyond 64) are only validated: the fuzzer
/// looks for wrong answers and crashes, not for slow inputs.
const MAX_WORK: usize = 20_000;

/// Validates `owned` and, if it is a valid small problem, checks every backend on it.
pub fn check(owned: &OwnedPotentials<f64>) {
    let Ok(p) = owned.view() else {
        // Every failure is a typed error by construction; nothing more to check.
        return;
    };
    let sh = p.shape();
    let work = sh
        .batch
        .saturating_mul(sh.len)
        .saturating_mul(sh.max_duration)
        .saturating_mul(sh.labels)
        .saturating_mul(sh.labels);
    if work > MAX_WORK || sh.len > 64 {
        return;
    }
    let problem = Problem::Structured(p.clone());
    let in_range = p
        .magnitudes()
        .iter()
        .zip(p.lengths())
        .all(|(m, &len)| m.bound <= probability_limit(len));
    let slack = |b: usize| 2f64.powi(-40) * p.magnitudes()[b].bound.max(1.0);

    let want_z = Reference
        .forward::<LogSemiring>(&problem)
        .expect("reference log Z");
    let want = Reference.backward(&problem, &vec![1.0; sh.batch]);
    for backend in [Backend::Exact, Backend::Scan, Backend::Streaming] {
        let crf = SemiCrf::with_config(Config::new().backend(backend));
        let z = crf.log_partition(&problem).expect("log Z");
        for b in 0..sh.batch {
            assert!(
                !z[b].is_nan() && z[b] != f64::INFINITY,
                "{backend:?}: log Z {}",
                z[b]
            );
            assert!(
                z[b] == want_z[b] || (z[b] - want_z[b]).abs() <= slack(b),
                "{backend:?} b={b}: log Z {} vs reference {}",
                z[b],
                want_z[b]
            );
        }
        let v = crf.viterbi(&problem).expect("viterbi");
        for (b, d) in v.iter().enumerate() {
            if z[b].is_finite() {
                assert!(
                    d.score <= z[b] + slack(b),
                    "{backend:?}: viterbi above log Z"
                );
                let gold = semicrf::gold_score(&p, b, &d.segments).expect("valid segments");
                assert!(
                    (gold - d.score).abs() <= slack(b),
                    "{backend:?}: viterbi gold"
                );
            } else {
                assert!(d.segments.is_empty() && d.score == f64::NEG_INFINITY);
            }
        }
        let h = crf.forward::<EntropySemiring, f64>(&problem);
        let m = crf.marginals(&problem);
        if !in_range {
            assert!(
                matches!(h, Err(Error::Magnitude { .. })),
                "{backend:?}: entropy"
            );
            assert!(
                matches!(m, Err(Error::Magnitude { .. })),
                "{backend:?}: marginals"
            );
            continue;
        }
        let h = h.expect("entropy within the range");
        for (b, h) in h.iter().enumerate() {
            if z[b].is_finite() {
                assert!(h.entropy >= -1e-4, "{backend:?}: entropy {}", h.entropy);
            }
        }
        match (&m, &want) {
            (Err(Error::Infeasible { sequence }), Err(Error::Infeasible { .. })) => {
                assert_eq!(z[*sequence], f64::NEG_INFINITY);
            }
            (Ok(m), Ok(want)) => {
                let ref_pos = want.grad.scores.as_ref().expect("position marginals");
                let off = (&m.position - ref_pos)
                    .iter()
                    .fold(0f64, |a, d| a.max(d.abs()));
                assert!(off <= 1e-4, "{backend:?}: marginals off by {off}");
                for (b, &len) in p.lengths().iter().enumerate() {
                    let pos = m.position.index_axis(Axis(0), b);
                    for t in 0..len {
                        let s = pos.row(t).sum();
                        assert!((s - 1.0).abs() <= 1e-4, "{backend:?}: Σ marginals {s}");
                    }
                    assert!((m.boundary[[b, 0]] - 1.0).abs() <= 1e-4);
                }
            }
            (m, want) => panic!(
                "{backend:?}: marginals {:?} but the reference {:?}",
                m.as_ref().err(),
                want.as_ref().err()
            ),
        }
    }
    // f32 inputs: the same problem rounded; only finiteness and typed errors to check.
    let owned32 = owned.cast::<f32>();
    if let Ok(p32) = owned32.view() {
        let problem = Problem::Structured(p32);
        let crf = SemiCrf::new();
        if let Ok(z) = crf.log_partition(&problem) {
            assert!(z.iter().all(|z| !z.is_nan() && *z != f64::INFINITY));
        }
        if let Ok(m) = crf.marginals(&problem) {
            assert!(m.position.iter().all(|x| x.is_finite()));
        }
    }
}
