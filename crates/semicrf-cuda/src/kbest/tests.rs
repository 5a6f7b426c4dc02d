//! The k-best kernel of `kernels/kbest.cu` under the CPU emulation of `tests/emu` against the
//! core's `kbest_sequence` (scores bit for bit, segments and their order) and, on problems
//! small enough, brute-force enumeration: ties from integer scores, k from 1 to more
//! segmentations than exist, more than 32 labels, more than 64 durations, `-inf` scores,
//! transitions and durations, ragged lengths, every optional input, the `(K, C, C)`
//! transition, and blocks of fewer warps than labels.

use crate::emu::{build_emulator, run_emulated};
use semicrf_core::testing::{GenSpec, TransitionKind, random_problem};
use semicrf_core::{
    Decoded, OwnedPotentials, Problem, Segment, StructuredScores, enumerate, kbest_sequence,
};

/// The emulated kernel, built once per process.
fn emulator() -> Option<std::path::PathBuf> {
    static EXE: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    EXE.get_or_init(|| build_emulator("semicrf-kbest-emu", "kbest_main.cpp", &[]))
        .clone()
}

/// The kernel's `k` best of every sequence of `p` on blocks of `warps` warps.
fn emulate(
    exe: &std::path::Path,
    p: &OwnedPotentials<f64>,
    k: usize,
    warps: usize,
) -> Vec<Vec<Decoded>> {
    let v = p.view().unwrap();
    let sh = v.shape();
    let (bn, t, kd, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let dd = p.transition.as_ref().is_some_and(|x| x.ndim() == 3);
    let (has_bb, has_eb) = (v.begin_boundary().is_some(), v.end_boundary().is_some());
    let mut buf: Vec<u8> = Vec::new();
    let header = [
        bn,
        t,
        kd,
        c,
        k,
        dd as usize,
        32 * warps,
        has_bb as usize,
        has_eb as usize,
    ];
    for x in header.into_iter().chain(v.lengths().iter().copied()) {
        buf.extend_from_slice(&(x as i64).to_le_bytes());
    }
    let mut f: Vec<f64> = v.scores().iter().copied().collect();
    f.extend(
        v.begin_boundary()
            .into_iter()
            .flat_map(|x| x.iter().copied()),
    );
    f.extend(v.end_boundary().into_iter().flat_map(|x| x.iter().copied()));
    if dd {
        f.extend((0..kd * c * c).map(|x| v.transition_at(x / (c * c) + 1, x / c % c, x % c)));
    } else {
        f.extend((0..c * c).map(|x| v.transition_at(1, x / c, x % c)));
    }
    f.extend((0..kd * c).map(|x| v.duration_at(x / c + 1, x % c)));
    f.extend((0..c).map(|j| v.start_at(j)));
    f.extend((0..c).map(|j| v.end_at(j)));
    for x in f {
        buf.extend_from_slice(&x.to_le_bytes());
    }
    let out = run_emulated(exe, &buf);
    let (on, rest) = out.split_at(bn);
    let (oscore, rest) = rest.split_at(bn * k);
    let (olen, rest) = rest.split_at(bn * k);
    let (od, oc) = rest.split_at(bn * k * t);
    (0..bn)
        .map(|b| {
            (0..on[b] as usize)
                .map(|r| {
                    let o = b * k + r;
                    let mut start = 0;
                    let segments = (0..olen[o] as usize)
                        .rev()
                        .map(|x| {
                            let d = od[o * t + x] as usize;
                            let s = Segment::new(start, d, oc[o * t + x] as usize);
                            start += d;
                            s
                        })
                        .collect();
                    Decoded {
                        score: oscore[o],
                        segments,
                    }
                })
                .collect()
        })
        .collect()
}

/// The emulated kernel's lists equal `kbest_sequence`'s, scores bit for bit; where `brute`,
/// also those of enumeration (scores within 1e-9: it sums in another order).
fn check(name: &str, p: &OwnedPotentials<f64>, ks: &[usize], warps: usize, brute: bool) -> usize {
    let Some(exe) = emulator() else { return 0 };
    let v = p.view().unwrap();
    let mut seen = 0;
    for &k in ks {
        let got = emulate(&exe, p, k, warps);
        for (b, got) in got.iter().enumerate() {
            let want = kbest_sequence(&mut StructuredScores::new(&v, b), k).unwrap();
            assert_eq!(got.len(), want.len(), "{name} k={k} b={b}: list lengths");
            for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.score.to_bits(),
                    w.score.to_bits(),
                    "{name} k={k} b={b} r={r}"
                );
                assert_eq!(g.segments, w.segments, "{name} k={k} b={b} r={r}");
            }
            if brute {
                let e = enumerate::kbest(&Problem::Structured(v.clone()), b, k).unwrap();
                assert_eq!(
                    got.len(),
                    e.len(),
                    "{name} k={k} b={b}: against enumeration"
                );
                for (g, w) in got.iter().zip(&e) {
                    assert!((g.score - w.score).abs() <= 1e-9, "{name} k={k} b={b}");
                    assert_eq!(g.segments, w.segments, "{name} k={k} b={b}");
                }
            }
            seen += got.len();
        }
    }
    seen
}

/// Every value of `p` rounded to an integer in `[-2, 2]` (`-inf` kept): many exact ties.
fn integer(mut p: OwnedPotentials<f64>) -> OwnedPotentials<f64> {
    let round = |x: &mut f64| {
        if x.is_finite() {
            *x = (*x * 2.0).round();
        }
    };
    p.scores.iter_mut().for_each(round);
    for a in [
        &mut p.transition,
        &mut p.duration,
        &mut p.start,
        &mut p.end,
        &mut p.begin_boundary,
        &mut p.end_boundary,
    ]
    .into_iter()
    .flatten()
    {
        a.iter_mut().for_each(round);
    }
    p
}

#[test]
fn ties_from_integer_scores_in_the_cpu_order_for_every_k() {
    let mut spec = GenSpec::new(3, 4, 2, 3).everything();
    spec.forbid_transitions = 0.2;
    let p = integer(random_problem(11, &spec));
    // 4 positions, durations up to 2, 3 labels: at most 171 segmentations, so k = 500 asks
    // for more than exist and the lists hold every finite one (brute force counts them).
    let seen = check("ties", &p, &[1, 2, 5, 32, 500], 1, true);
    assert!(seen == 0 || seen > 200, "{seen} segmentations compared");
    let mut spec = GenSpec::new(2, 9, 3, 3).everything();
    spec.forbid_transitions = 0.2;
    let p = integer(random_problem(17, &spec));
    check("ties, longer", &p, &[5, 32], 1, true);
}

#[test]
fn duration_dependent_transitions_and_cut_problems() {
    let mut spec = GenSpec::new(3, 8, 4, 4).everything();
    spec.transition = TransitionKind::DurationDependent;
    spec.forbid_scores = 0.2;
    spec.forbid_transitions = 0.3;
    spec.capped_durations = true;
    spec.unreachable_label = true;
    let p = random_problem(12, &spec);
    check("dd cut", &p, &[1, 5, 32], 2, true);
    let p = integer(random_problem(13, &spec));
    check("dd cut integer", &p, &[3, 32], 1, true);
}

#[test]
fn more_than_32_labels_on_fewer_warps() {
    let mut spec = GenSpec::new(2, 5, 2, 35).everything();
    spec.forbid_transitions = 0.5;
    let p = random_problem(14, &spec);
    check("C=35", &p, &[1, 5], 2, false);
    check("C=35 integer", &integer(p), &[32], 3, false);
}

#[test]
fn more_than_64_durations() {
    let mut spec = GenSpec::new(2, 72, 70, 2);
    spec.ragged = true;
    spec.start = true;
    spec.end = true;
    spec.forbid_scores = 0.05;
    let p = random_problem(15, &spec);
    check("K=70", &p, &[1, 8], 1, false);
    check("K=70 integer", &integer(p), &[32], 2, false);
}

#[test]
fn an_infeasible_sequence_has_no_segmentation() {
    let mut spec = GenSpec::new(2, 4, 2, 2);
    spec.start = true;
    let mut p = random_problem(16, &spec);
    // Sequence 1: every score -inf.
    for (i, x) in p.scores.indexed_iter_mut() {
        if i[0] == 1 {
            *x = f64::NEG_INFINITY;
        }
    }
    let Some(exe) = emulator() else { return };
    let got = emulate(&exe, &p, 4, 1);
    assert_eq!(got[0].len(), 4);
    assert!(got[1].is_empty());
    check("infeasible", &p, &[1, 4], 1, true);
}

/// The same emulation built with ThreadSanitizer: no access of one thread to the table, the
/// warps' scratch or the results is left unordered against another's by the kernel's
/// barriers (a missing one makes it report, and the run fail); two warps, labels split
/// between them, and results traced by several threads.
#[test]
fn the_emulated_kernel_leaves_no_access_unordered() {
    let Some(exe) = build_emulator(
        "semicrf-kbest-tsan",
        "kbest_main.cpp",
        &["-fsanitize=thread", "-g"],
    ) else {
        return;
    };
    let mut spec = GenSpec::new(2, 6, 3, 3).everything();
    spec.forbid_transitions = 0.2;
    let p = random_problem(18, &spec);
    let got = emulate(&exe, &p, 5, 2);
    assert_eq!(got[0].len(), 5);
}
