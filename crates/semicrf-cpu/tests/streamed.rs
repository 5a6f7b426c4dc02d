//! The streaming engine on a potentials source (`SourceEngine`): bitwise the results of the
//! same values in arrays for every chunk size, and the f64 reference oracle and brute force
//! independently; the checkpointed Viterbi against the Viterbi with backpointers, ties
//! included; bad rows from a source.

use ndarray::{Array2, ArrayD, IxDyn};
use semicrf_core::reference::{Reference, brute_force};
use semicrf_core::testing::{
    GenSpec, Hashed, Tolerance, TransitionKind, cases, hashed, positive_upstream, random_problem,
};
use semicrf_core::{
    Engine, EntropySemiring, Error, GradientArrays, GradientRows, GradientSink, LogSemiring,
    MaxSemiring, OwnedPotentials, PotentialSource, Potentials, Problem, Result, SourceEngine,
    StreamedPotentials, gold_score,
};
use semicrf_cpu::{Parallelism, StreamingEngine};

/// Every named edge case and seeded random problems, plus medium ones with every input.
fn problems() -> Vec<(String, OwnedPotentials<f64>)> {
    let mut v = cases(700, 12);
    for (i, (b, t, k, c)) in [(3, 40, 6, 4), (2, 33, 9, 3), (1, 50, 12, 5)]
        .into_iter()
        .enumerate()
    {
        for tk in [TransitionKind::Static, TransitionKind::DurationDependent] {
            let mut g = GenSpec::new(b, t, k, c).everything();
            g.transition = tk;
            g.forbid_scores = if i == 1 { 0.1 } else { 0.0 };
            v.push((
                format!("medium {i} {tk:?}"),
                random_problem(40 + i as u64, &g),
            ));
        }
    }
    v
}

fn engines(p: &Potentials<'_, f64>) -> Vec<StreamingEngine> {
    let sh = p.shape();
    let mut out = Vec::new();
    for rows in [1, 7, sh.max_duration, sh.len + 5] {
        for (par, delta) in [
            (Parallelism::Sequential, Some(3)),
            (Parallelism::Rayon, None),
        ] {
            out.push(
                StreamingEngine::new()
                    .parallelism(par)
                    .checkpoint_interval(delta)
                    .chunk_rows(Some(rows)),
            );
        }
    }
    out
}

#[test]
fn a_source_gives_bitwise_the_results_of_arrays_for_every_chunk_size() {
    for (name, owned) in problems() {
        let p = owned.view().unwrap();
        let s = StreamedPotentials::of(&p);
        let prob: Problem<f64> = p.clone().into();
        let arrays = StreamingEngine::new();
        let log_z = arrays.forward::<LogSemiring>(&prob).unwrap();
        let h = arrays.forward::<EntropySemiring>(&prob);
        let best = arrays.viterbi(&prob).unwrap();
        let oracle = Reference.forward::<LogSemiring>(&prob).unwrap();
        for (a, b) in log_z.iter().zip(&oracle) {
            assert!(
                Tolerance::F64_VALUES.ok(*a, *b),
                "{name}: {a} vs oracle {b}"
            );
        }
        let g = positive_upstream(3, p.shape().batch);
        let bw = arrays.backward(&prob, &g);
        for e in engines(&p) {
            let what = format!("{name}, {e:?}");
            assert_eq!(
                e.forward_streamed::<LogSemiring, _>(&s).unwrap(),
                log_z,
                "{what}"
            );
            assert_eq!(
                e.forward_streamed::<EntropySemiring, _>(&s).ok(),
                h.clone().ok(),
                "{what}"
            );
            assert_eq!(e.viterbi_streamed(&s).unwrap(), best, "{what}");
            let sink = GradientArrays::new(p.shape(), s.source().has_begin_boundary(), {
                s.source().has_end_boundary()
            });
            let got = e.backward_streamed(&s, &g, &sink);
            match (&bw, got) {
                (Ok(want), Ok(got)) => {
                    assert_eq!(got.log_z, want.log_z, "{what}");
                    let (sc, bb, eb, bm) = sink.into_arrays();
                    assert_eq!(Some(sc), want.grad.scores, "{what}");
                    assert_eq!(bb, want.grad.begin_boundary, "{what}");
                    assert_eq!(eb, want.grad.end_boundary, "{what}");
                    assert_eq!(bm, want.boundary_marginals, "{what}");
                    assert_eq!(got.grad.transition, want.grad.transition, "{what}");
                    assert_eq!(got.grad.duration, want.grad.duration, "{what}");
                    assert_eq!(got.grad.start, want.grad.start, "{what}");
                    assert_eq!(got.grad.end, want.grad.end, "{what}");
                }
                (Err(a), Err(b)) => assert_eq!(a, &b, "{what}"),
                (a, b) => panic!("{what}: arrays {a:?}, source {b:?}"),
            }
        }
    }
}

#[test]
fn streamed_gradients_match_the_reference_backward() {
    for (name, owned) in problems() {
        let p = owned.view().unwrap();
        let s = StreamedPotentials::of(&p);
        let prob: Problem<f64> = p.clone().into();
        let g = positive_upstream(5, p.shape().batch);
        let Ok(want) = Reference.backward(&prob, &g) else {
            continue;
        };
        let e = StreamingEngine::new().chunk_rows(Some(7));
        let sink = GradientArrays::new(p.shape(), true, true);
        let got = e.backward_streamed(&s, &g, &sink).unwrap();
        let (sc, _, _, bm) = sink.into_arrays();
        let tol = Tolerance::F64_GRADS;
        let scores = want.grad.scores.as_ref().unwrap();
        for (a, b) in sc.iter().zip(scores.iter()) {
            assert!(tol.ok(*a, *b), "{name}: position marginal {a} vs {b}");
        }
        for (a, b) in bm.iter().zip(want.boundary_marginals.iter()) {
            assert!(tol.ok(*a, *b), "{name}: boundary marginal {a} vs {b}");
        }
        let (a, b) = (got.grad.duration.unwrap(), want.grad.duration.unwrap());
        for (a, b) in a.iter().zip(b.iter()) {
            assert!(
                Tolerance::F64_GRADS.ok(*a, *b) || (a - b).abs() < 1e-9,
                "{name}"
            );
        }
    }
}

/// Integer scores on a few values: many segmentations tie exactly.
fn tied(seed: u64, b: usize, t: usize, k: usize, c: usize, dd: bool) -> OwnedPotentials<f64> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % 3) as f64 - 1.0
    };
    let scores = ArrayD::from_shape_fn(IxDyn(&[b, t, c]), |_| next());
    let mut o = OwnedPotentials::new(scores, (0..b).map(|i| t - i % t.min(3)).collect(), k);
    let tr = if dd { vec![k, c, c] } else { vec![c, c] };
    o.transition = Some(ArrayD::from_shape_fn(IxDyn(&tr), |_| next()));
    o.duration = Some(ArrayD::from_shape_fn(IxDyn(&[k, c]), |_| next()));
    o
}

#[test]
fn the_checkpointed_viterbi_equals_the_viterbi_with_backpointers_and_brute_force_ties_included() {
    for seed in 0..40 {
        let dd = seed % 2 == 1;
        let (t, k, c) = (
            3 + seed as usize % 6,
            1 + seed as usize % 4,
            1 + seed as usize % 3,
        );
        // One sequence: the traceback recomputes two blocks at once (with rayon).
        let owned = tied(seed, 1 + seed as usize % 3, t, k, c, dd);
        let p = owned.view().unwrap();
        let s = StreamedPotentials::of(&p);
        let prob: Problem<f64> = p.clone().into();
        let full = StreamingEngine::new().viterbi(&prob).unwrap();
        for delta in [1, 2, 5, 100] {
            // The backpointers of the last 0, 1, 2 or 3 positions kept by the sweep (3 bytes
            // a label), or of all of them.
            for tail in [delta % 4, 1000] {
                let e = StreamingEngine::new()
                    .checkpoint_interval(Some(delta))
                    .chunk_rows(Some(1 + delta % 3))
                    .viterbi_tail(3 * c * tail);
                let got = e.viterbi_streamed(&s).unwrap();
                assert_eq!(got, full, "seed {seed}, Δ = {delta}, tail {tail}");
            }
        }
        for (b, d) in full.iter().enumerate() {
            let bf = brute_force(&p, b).unwrap();
            assert_eq!(d.score, bf.max, "seed {seed}");
            assert_eq!(
                gold_score(&p, b, &d.segments).unwrap(),
                bf.max,
                "seed {seed}"
            );
        }
    }
}

#[test]
fn a_computed_source_matches_its_values_in_arrays_and_the_oracle() {
    let src = Hashed {
        lengths: vec![30, 17, 1],
        c: 3,
        bad: None,
    };
    let (scores, bb) = src.arrays();
    let tr = Array2::from_shape_fn((3, 3), |(i, j)| hashed(9, i, j, 3));
    let k = 5;
    let p = Potentials::builder(scores.view(), &src.lengths, k)
        .begin_boundary(bb.view())
        .transition(tr.view())
        .build()
        .unwrap();
    let s = StreamedPotentials::builder(&src, k)
        .transition(tr.view())
        .build()
        .unwrap();
    let prob: Problem<f64> = p.into();
    let e = StreamingEngine::new().chunk_rows(Some(4));
    let want = Reference.forward::<LogSemiring>(&prob).unwrap();
    let got = e.forward_streamed::<LogSemiring, _>(&s).unwrap();
    assert_eq!(got, e.forward::<LogSemiring>(&prob).unwrap());
    for (a, b) in got.iter().zip(&want) {
        assert!(Tolerance::F64_VALUES.ok(*a, *b));
    }
    let best = e.viterbi_streamed(&s).unwrap();
    let oracle = Reference.forward::<MaxSemiring>(&prob).unwrap();
    for (d, m) in best.iter().zip(&oracle) {
        assert!(Tolerance::F64_VALUES.ok(d.score, *m));
    }
    assert_eq!(best, e.viterbi(&prob).unwrap());
}

#[test]
fn a_non_finite_row_from_a_source_is_an_error_naming_it() {
    let src = Hashed {
        lengths: vec![20, 12],
        c: 3,
        bad: Some(11),
    };
    let s = StreamedPotentials::<f64, _>::builder(&src, 4)
        .build()
        .unwrap();
    let e = StreamingEngine::new().chunk_rows(Some(5));
    let want = Error::NonFinite {
        tensor: "scores",
        index: vec![0, 11, 1],
        value: f64::INFINITY,
    };
    assert_eq!(e.forward_streamed::<LogSemiring, _>(&s).unwrap_err(), want);
    assert_eq!(e.viterbi_streamed(&s).unwrap_err(), want);
    let sink = GradientArrays::new(s.shape(), true, false);
    assert_eq!(
        e.backward_streamed(&s, &[1.0, 1.0], &sink).unwrap_err(),
        want
    );
}

/// A sink that fails.
struct Full;

impl GradientSink for Full {
    fn put(&self, sequence: usize, _t0: usize, _rows: GradientRows<'_>) -> Result<()> {
        Err(Error::Infeasible { sequence })
    }
}

#[test]
fn a_sink_error_ends_the_backward_pass() {
    let src = Hashed {
        lengths: vec![9],
        c: 2,
        bad: None,
    };
    let s = StreamedPotentials::<f64, _>::builder(&src, 3)
        .build()
        .unwrap();
    let e = StreamingEngine::new();
    assert_eq!(
        e.backward_streamed(&s, &[1.0], &Full).unwrap_err(),
        Error::Infeasible { sequence: 0 }
    );
}

#[test]
fn a_source_with_no_sequence_or_no_label_is_refused() {
    let none = Hashed {
        lengths: vec![],
        c: 2,
        bad: None,
    };
    let r = StreamedPotentials::<f64, _>::builder(&none, 3).build();
    assert_eq!(r.unwrap_err(), Error::EmptyBatch);
    let zero = Hashed {
        lengths: vec![3, 0],
        c: 2,
        bad: None,
    };
    let r = StreamedPotentials::<f64, _>::builder(&zero, 3).build();
    assert!(matches!(r.unwrap_err(), Error::Length { sequence: 1, .. }));
    let tr = Array2::<f64>::zeros((3, 3));
    let ok = Hashed {
        lengths: vec![3],
        c: 2,
        bad: None,
    };
    let r = StreamedPotentials::builder(&ok, 3)
        .transition(tr.view())
        .build();
    assert!(matches!(
        r.unwrap_err(),
        Error::Shape {
            tensor: "transition",
            ..
        }
    ));
}

/// Sparse transition columns (one finite source each) and durations forbidden below a
/// label's shortest one, which the max sweep skips: the segments and scores of brute force,
/// ties included; and on long sequences the checkpointed Viterbi with the interval it adapts
/// (many blocks) equals the Viterbi with every backpointer.
#[test]
fn viterbi_skipping_forbidden_transitions_and_short_durations_matches_brute_force() {
    let sparse = |o: &mut OwnedPotentials<f64>, c: usize, k: usize| {
        let tr = o.transition.as_mut().unwrap();
        for i in 0..c {
            for j in 0..c {
                if (i + j) % c != 0 {
                    tr[[i, j]] = f64::NEG_INFINITY;
                }
            }
        }
        let dur = o.duration.as_mut().unwrap();
        for j in 0..c {
            for d in 1..(1 + j % 3).min(k) {
                dur[[d - 1, j]] = f64::NEG_INFINITY;
            }
        }
    };
    for seed in 0..24 {
        let (t, k, c) = (3 + seed as usize % 5, 1 + seed as usize % 4, 4);
        let mut owned = tied(seed, 2, t, k, c, false);
        sparse(&mut owned, c, k);
        let p = owned.view().unwrap();
        let prob: Problem<f64> = p.clone().into();
        let full = StreamingEngine::new().viterbi(&prob).unwrap();
        let s = StreamedPotentials::of(&p);
        assert_eq!(StreamingEngine::new().viterbi_streamed(&s).unwrap(), full);
        for (b, d) in full.iter().enumerate() {
            let bf = brute_force(&p, b).unwrap();
            assert_eq!(d.score, bf.max, "seed {seed}");
            if d.score > f64::NEG_INFINITY {
                assert_eq!(gold_score(&p, b, &d.segments).unwrap(), bf.max);
            }
        }
    }
    for seed in 0..3 {
        let (t, k, c) = (4000, 5, 8);
        let mut owned = tied(100 + seed, 1, t, k, c, false);
        sparse(&mut owned, c, k);
        let p = owned.view().unwrap();
        let prob: Problem<f64> = p.clone().into();
        let full = StreamingEngine::new().viterbi(&prob).unwrap();
        assert!(full[0].score > f64::NEG_INFINITY);
        let s = StreamedPotentials::of(&p);
        for par in [Parallelism::Sequential, Parallelism::Rayon] {
            // With the backpointers of the last 1234 positions kept, too.
            for tail in [0, 3 * c * 1234] {
                let e = StreamingEngine::new().parallelism(par).viterbi_tail(tail);
                assert_eq!(e.viterbi_streamed(&s).unwrap(), full, "seed {seed}");
            }
        }
    }
}

/// Begin boundaries `-inf` at most starts, as a gene model's are (a splice site or a start
/// codon opens an exon, nothing else): the max sweep then scans a window over its finite
/// entries only. Label `j` allows a start with probability `1, 1/2, 1/5, 1/20, 0`, so
/// windows are dense, sparse, or hold no finite entry at all (their maximum `-inf` at the
/// shortest duration). The segments and scores of the reference oracle, ties included, with
/// every backpointer and with checkpoints.
#[test]
fn viterbi_over_windows_of_mostly_forbidden_starts_matches_the_reference_oracle() {
    for seed in 0..10u64 {
        let (t, k, c) = (120 + 53 * seed as usize, 4 + 7 * seed as usize, 5);
        let mut owned = tied(300 + seed, 2, t, k, c, false);
        let mut x = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
        let bb = ArrayD::from_shape_fn(IxDyn(&[2, t, c]), |ix| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let every = [1, 2, 5, 20, 0][ix[2]];
            if every > 0 && x % every == 0 {
                (x / every % 3) as f64 - 1.0
            } else {
                f64::NEG_INFINITY
            }
        });
        owned.begin_boundary = Some(bb);
        let p = owned.view().unwrap();
        let prob: Problem<f64> = p.clone().into();
        let want = Reference.viterbi(&prob).unwrap();
        assert!(want.iter().all(|d| d.score > f64::NEG_INFINITY));
        assert_eq!(StreamingEngine::new().viterbi(&prob).unwrap(), want);
        let s = StreamedPotentials::of(&p);
        for (par, delta) in [
            (Parallelism::Rayon, None),
            (Parallelism::Sequential, Some(7)),
        ] {
            let e = StreamingEngine::new()
                .parallelism(par)
                .checkpoint_interval(delta);
            assert_eq!(e.viterbi_streamed(&s).unwrap(), want, "seed {seed}");
        }
    }
}
