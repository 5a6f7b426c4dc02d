//! The static-transition kernels of `kernels/streaming.cu` under the CPU emulation of
//! `tests/emu` against the `f64` reference: problems with `-inf` score cuts (some labels cut,
//! others never), `-inf` transitions and durations, 33 to 70 labels, rings in shared and in
//! global memory, and a sequence that no segmentation can label.

use super::{pipe, smem, spread};
use crate::emu::{build_emulator, run_emulated};
use crate::kernel::{Kernel, STEPS, shared_defines};
use semicrf_core::reference::Reference;
use semicrf_core::testing::{GenSpec, Tolerance, random_problem, upstream};
use semicrf_core::{
    Engine, EntropySemiring, LogSemiring, MaxSemiring, OwnedPotentials, Problem, decode_best,
};

/// The emulated kernels, built once per process (the tests share them).
fn emulator() -> Option<std::path::PathBuf> {
    static EXE: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    EXE.get_or_init(|| build("semicrf-stream-emu", &[])).clone()
}

/// The emulated kernels with the extra compiler `flags`.
fn build(name: &str, extra: &[&str]) -> Option<std::path::PathBuf> {
    // Tasks from two durations on, so that the short windows an emulation can afford are
    // split over several teams.
    let flags: Vec<String> = shared_defines(STEPS)
        .into_iter()
        .filter(|f| !f.starts_with("-DLD_SPAN"))
        .chain(["-DLD_SPAN=2".into()])
        .collect();
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend(extra);
    build_emulator(name, "stream_main.cpp", &flags)
}

/// What the emulation runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Log = 0,
    Viterbi = 1,
    Entropy = 2,
    Backward = 3,
}

/// Runs `mode` on `p` with `team` lanes a team, `threads` a block, and the rings in shared
/// memory where `ring`: the `f64`s the emulation writes (see `stream_main.cpp`).
fn emulate(
    exe: &std::path::Path,
    p: &OwnedPotentials<f64>,
    mode: Mode,
    plan: (usize, usize),
    ring: bool,
    up: &[f64],
) -> Vec<f64> {
    emulate_on(exe, p, mode, plan, ring, up, 1)
}

/// [`emulate`] with each sequence spread over `nb` blocks where `nb > 1` (log Z, Viterbi and
/// the backward: the kernels of `kernels/spread.cu`).
fn emulate_on(
    exe: &std::path::Path,
    p: &OwnedPotentials<f64>,
    mode: Mode,
    plan: (usize, usize),
    ring: bool,
    up: &[f64],
    nb: usize,
) -> Vec<f64> {
    emulate_in(exe, p, mode, plan, ring, up, (nb, None))
}

/// [`emulate_on`], the forward pipelined (`kernels/pipe.cu`) with near depth and steps a round
/// `pipe` where given (on `nb` blocks a sequence: the main block and `nb - 1` helpers).
fn emulate_in(
    exe: &std::path::Path,
    p: &OwnedPotentials<f64>,
    mode: Mode,
    (team, threads): (usize, usize),
    ring: bool,
    up: &[f64],
    (nb, pipe): (usize, Option<(usize, usize)>),
) -> Vec<f64> {
    let v = p.view().unwrap();
    let sh = v.shape();
    let (b, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let fwd = match mode {
        Mode::Viterbi => Kernel::FwdStaticMax,
        Mode::Entropy => Kernel::FwdStaticEnt,
        _ => Kernel::FwdStaticLog,
    };
    // The layout with the rings where asked: all the room they need, or a word less.
    let place = |kernel| {
        let full = smem(kernel, k, c, usize::MAX / 2);
        if ring {
            full
        } else {
            smem(kernel, k, c, full.bytes - 8)
        }
    };
    let (mut mf, mut mb) = (place(fwd), place(Kernel::BwdStaticLog));
    assert_eq!(mf.ring, ring);
    if nb > 1 {
        let (ch, p) = (mf.ch.min(mb.ch), k.div_ceil(nb));
        mf.bytes = 8 * spread::smem_words(c, ch, p, 3);
        mb.bytes = 8 * spread::smem_words(c, ch, p, 5);
        if let Some(how) = pipe {
            mf.bytes = 8 * pipe::smem_words(c, ch, how, k.div_ceil(nb - 1));
        }
    }
    let mut buf: Vec<u8> = Vec::new();
    let header = [
        b,
        t,
        k,
        c,
        team,
        threads,
        mf.ch.min(mb.ch),
        mode as usize,
        mf.ring as usize,
        mf.bytes,
        mb.ring as usize,
        mb.acc as usize,
        mb.bytes,
        nb,
        usize::from(v.begin_boundary().is_some() && v.end_boundary().is_some()),
        pipe.map_or(0, |x| x.0),
        pipe.map_or(0, |x| x.1),
    ];
    for x in header.into_iter().chain(v.lengths().iter().copied()) {
        buf.extend_from_slice(&(x as i64).to_le_bytes());
    }
    let tr = (0..c * c).map(|x| v.transition_at(1, x / c, x % c));
    let dur = (0..k * c).map(|x| v.duration_at(x / c + 1, x % c));
    let st = (0..c).map(|j| v.start_at(j));
    let en = (0..c).map(|j| v.end_at(j));
    let bnd: Vec<f64> = match (v.begin_boundary(), v.end_boundary()) {
        (Some(bb), Some(eb)) => bb.iter().chain(eb.iter()).copied().collect(),
        _ => Vec::new(),
    };
    let all = v
        .scores()
        .iter()
        .copied()
        .chain(bnd)
        .chain(tr)
        .chain(dur)
        .chain(st);
    for x in all.chain(en).chain(up.iter().copied()) {
        buf.extend_from_slice(&x.to_le_bytes());
    }
    run_emulated(exe, &buf)
}

/// A problem of `(B, T, K, C)` whose scores are cut (`-inf`) at random in three labels of
/// four, with `-inf` transitions, and durations capped per label where `capped`.
fn cut_problem(
    seed: u64,
    (b, t, k, c): (usize, usize, usize, usize),
    capped: bool,
) -> OwnedPotentials<f64> {
    let mut spec = GenSpec::new(b, t, k, c);
    spec.ragged = true;
    spec.start = true;
    spec.end = true;
    spec.forbid_scores = 0.2;
    spec.forbid_transitions = 0.3;
    spec.capped_durations = capped;
    let mut p = random_problem(seed, &spec);
    // Every fourth label is never cut: its windows stay open over the whole K.
    for ((_, _, j), x) in p
        .scores
        .view_mut()
        .into_dimensionality::<ndarray::Ix3>()
        .unwrap()
        .indexed_iter_mut()
    {
        if j % 4 == 0 && *x == f64::NEG_INFINITY {
            *x = 0.25;
        }
    }
    p
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The Viterbi segments of sequence `x` from the emulated Viterbi output `out` (`stream_main`:
/// the results, then best durations, best previous labels and α_L).
fn emulated_segments(
    out: &[f64],
    owned: &OwnedPotentials<f64>,
    x: usize,
) -> Vec<semicrf_core::Segment> {
    let v = owned.view().unwrap();
    let sh = v.shape();
    let (b, t1, c) = (sh.batch, sh.len + 1, sh.labels);
    let (bpd, rest) = out[2 * b..].split_at(b * t1 * c);
    let (bpi, last) = rest.split_at(b * t1 * c);
    let at = |s: usize, j: usize| (x * t1 + s) * c + j;
    decode_best(
        v.lengths()[x],
        c,
        |j| last[x * c + j] + v.end_at(j),
        |s, j| {
            let d = bpd[at(s, j)] as usize;
            let prev = if s == d {
                0
            } else {
                bpi[at(s - d, j)] as usize
            };
            (d, prev)
        },
    )
    .segments
}

/// Asserts that the emulated backward's output `out` (`stream_main`, mode 3) gives the
/// reference's gradients `want` of the scores, durations and (where `transition`) the
/// transition, weighted by `up`, within `Tolerance::F64_GRADS`.
fn assert_backward(
    tag: &str,
    out: &[f64],
    owned: &OwnedPotentials<f64>,
    want: &semicrf_core::Backward,
    up: &[f64],
    transition: bool,
) {
    let sh = owned.view().unwrap().shape();
    let (b, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let tol = Tolerance::F64_GRADS;
    let gsc = &out[2 * b..2 * b + b * t * c];
    let want_sc = want.grad.scores.as_ref().unwrap();
    for (i, (&g, &w)) in gsc.iter().zip(want_sc.iter()).enumerate() {
        assert!(tol.ok(g, w), "{tag}: scores' gradient {i}: {g} vs {w}");
    }
    // Per-sequence sums weighted by the upstream gradients.
    let weighted = |at: usize, n: usize, i: usize| -> f64 {
        (0..b).map(|x| up[x] * out[at + x * n + i]).sum()
    };
    let at = 2 * b + b * t * c + b * t;
    let want_dur = want.grad.duration.as_ref().unwrap();
    for (i, &w) in want_dur.iter().enumerate() {
        let g = weighted(at, k * c, i);
        assert!(tol.ok(g, w), "{tag}: duration's gradient {i}: {g} vs {w}");
    }
    if transition {
        let want_tr = want.grad.transition.as_ref().unwrap();
        for (i, &w) in want_tr.iter().enumerate() {
            let g = weighted(at + b * k * c, c * c, i);
            assert!(tol.ok(g, w), "{tag}: transition's gradient {i}: {g} vs {w}");
        }
    }
}

#[test]
fn the_windowed_kernels_match_the_reference_under_a_cpu_emulation() {
    let Some(exe) = emulator() else { return };
    let cases = [
        (2, 12, 8, 33),
        (1, 14, 13, 50),
        (1, 9, 6, 64),
        (1, 9, 12, 70),
        (2, 20, 3, 5),
        (1, 1, 4, 2),
    ];
    for (n, &shape) in cases.iter().enumerate() {
        let b = shape.0;
        let seed = 900 + n as u64;
        let owned = cut_problem(seed, shape, n % 2 == 1);
        let p = Problem::Structured(owned.view().unwrap());
        // Few threads (the emulation runs each on its own): several teams in a warp, or a
        // warp a team, and a long window then spread over them.
        let plan = if n % 2 == 0 { (4, 32) } else { (8, 64) };
        let up = upstream(seed, b);
        for ring in [true, false] {
            let tag = format!("{shape:?} ring in shared memory {ring}");
            let log_z = Reference.forward::<LogSemiring>(&p).unwrap();
            let out = emulate(&exe, &owned, Mode::Log, plan, ring, &up);
            for x in 0..b {
                let z = out[2 * x];
                assert!(
                    Tolerance::F64_VALUES.ok(z, log_z[x]),
                    "{tag}: log Z {z} vs {}",
                    log_z[x]
                );
            }
            let ent = Reference.forward::<EntropySemiring>(&p).unwrap();
            let out = emulate(&exe, &owned, Mode::Entropy, plan, ring, &up);
            for x in 0..b {
                let (z, h) = (out[2 * x], out[2 * x + 1]);
                assert!(
                    Tolerance::F64_VALUES.ok(z, ent[x].log_weight),
                    "{tag}: entropy's log Z"
                );
                let tol = Tolerance {
                    abs: 1e-10,
                    rel: 1e-10,
                };
                assert!(
                    tol.ok(h, ent[x].entropy),
                    "{tag}: entropy {h} vs {}",
                    ent[x].entropy
                );
            }
            let best = Reference.viterbi(&p).unwrap();
            let max = Reference.forward::<MaxSemiring>(&p).unwrap();
            let out = emulate(&exe, &owned, Mode::Viterbi, plan, ring, &up);
            for x in 0..b {
                assert!(Tolerance::F64_VALUES.ok(out[2 * x], max[x]), "{tag}: max");
                let got = emulated_segments(&out, &owned, x);
                assert_eq!(got, best[x].segments, "{tag}: Viterbi of {x}");
            }
            let Ok(want) = Reference.backward(&p, &up) else {
                continue;
            };
            let out = emulate(&exe, &owned, Mode::Backward, plan, ring, &up);
            let again = emulate(&exe, &owned, Mode::Backward, plan, ring, &up);
            assert_eq!(bits(&out), bits(&again), "{tag}: a rerun differs");
            assert_backward(&tag, &out, &owned, &want, &up, false);
        }
    }
}

#[test]
fn a_sequence_no_segmentation_labels_has_log_z_minus_infinity_not_nan() {
    let Some(exe) = emulator() else { return };
    let shape = (2, 12, 6, 33);
    let mut owned = cut_problem(77, shape, false);
    // Sequence 1 loses every label at its first position.
    for j in 0..shape.3 {
        owned.scores[[1, 0, j]] = f64::NEG_INFINITY;
    }
    let up = [1.0, 1.0];
    let plan = (4, 32);
    for mode in [Mode::Log, Mode::Entropy, Mode::Viterbi] {
        let out = emulate(&exe, &owned, mode, plan, true, &up);
        assert!(out[0].is_finite(), "{mode:?}: sequence 0 {}", out[0]);
        assert_eq!(out[2], f64::NEG_INFINITY, "{mode:?}: sequence 1");
        assert_eq!(out[3], 0.0, "{mode:?}: sequence 1's entropy");
    }
}

/// The same emulation built with ThreadSanitizer: no access of one thread to shared memory or
/// to the rings is left unordered against another's by the kernels' barriers (a missing one
/// makes it report, and the run fail). The backward (after its forward) and Viterbi, with the
/// rings in shared and in global memory, windows split over the teams.
#[test]
fn the_emulated_kernels_leave_no_access_unordered() {
    let Some(exe) = build("semicrf-stream-tsan", &["-fsanitize=thread", "-g"]) else {
        return;
    };
    let shape = (2, 10, 7, 33);
    let owned = cut_problem(31, shape, true);
    for ring in [true, false] {
        emulate(&exe, &owned, Mode::Backward, (4, 32), ring, &[1.0, 0.5]);
        emulate(&exe, &owned, Mode::Viterbi, (8, 64), ring, &[1.0, 0.5]);
    }
}

#[test]
fn the_spread_kernels_match_the_reference_under_a_cpu_emulation() {
    let Some(exe) = emulator() else { return };
    // (B, T, K, C) and blocks a sequence: slot ranges of unequal sizes, windows that wrap
    // around the ring many times, labels cut and never cut, durations capped or not.
    let cases = [
        ((2, 30, 13, 33), 3),
        ((1, 40, 24, 6), 4),
        ((1, 25, 16, 5), 2),
        ((2, 18, 9, 7), 5),
    ];
    for (n, &(shape, nb)) in cases.iter().enumerate() {
        let b = shape.0;
        let seed = 4100 + n as u64;
        let mut owned = cut_problem(seed, shape, n % 2 == 1);
        if n == 3 {
            // Sequence 1 loses every label at its first position: -inf, not NaN.
            for j in 0..shape.3 {
                owned.scores[[1, 0, j]] = f64::NEG_INFINITY;
            }
        }
        let p = Problem::Structured(owned.view().unwrap());
        let tag = format!("{shape:?} over {nb} blocks");
        let up = upstream(seed, b);
        let plan = (4, 32);
        let log_z = Reference.forward::<LogSemiring>(&p).unwrap();
        let out = emulate_on(&exe, &owned, Mode::Log, plan, true, &up, nb);
        let again = emulate_on(&exe, &owned, Mode::Log, plan, true, &up, nb);
        assert_eq!(bits(&out), bits(&again), "{tag}: a rerun differs");
        for x in 0..b {
            let z = out[2 * x];
            let ok = Tolerance::F64_VALUES.ok(z, log_z[x]) || (z == log_z[x]);
            assert!(ok, "{tag}: log Z {z} vs {}", log_z[x]);
        }
        let best = Reference.viterbi(&p).unwrap();
        let max = Reference.forward::<MaxSemiring>(&p).unwrap();
        let out = emulate_on(&exe, &owned, Mode::Viterbi, plan, true, &up, nb);
        // The one-block kernel's backpointers, tie for tie.
        let one = emulate(&exe, &owned, Mode::Viterbi, plan, true, &up);
        assert_eq!(
            bits(&out),
            bits(&one),
            "{tag}: Viterbi against one block a sequence"
        );
        for x in 0..b {
            assert!(
                Tolerance::F64_VALUES.ok(out[2 * x], max[x]) || out[2 * x] == max[x],
                "{tag}: max"
            );
            if max[x] == f64::NEG_INFINITY {
                continue;
            }
            let got = emulated_segments(&out, &owned, x);
            assert_eq!(got, best[x].segments, "{tag}: Viterbi of {x}");
        }
        let Ok(want) = Reference.backward(&p, &up) else {
            continue;
        };
        let out = emulate_on(&exe, &owned, Mode::Backward, plan, true, &up, nb);
        let again = emulate_on(&exe, &owned, Mode::Backward, plan, true, &up, nb);
        assert_eq!(
            bits(&out),
            bits(&again),
            "{tag}: a rerun of the backward differs"
        );
        assert_backward(&tag, &out, &owned, &want, &up, true);
    }
}

/// Begin and end boundaries, ragged lengths and a label far ahead of the others (log Z near
/// 10³), one block a sequence and spread over four: log Z, Viterbi and the gradients against
/// the reference.
#[test]
fn boundaries_match_the_reference_on_one_block_and_spread_under_a_cpu_emulation() {
    let Some(exe) = emulator() else { return };
    let (b, t, k, c) = (2, 150, 20, 3);
    let mut spec = GenSpec::new(b, t, k, c).everything();
    spec.transition = semicrf_core::testing::TransitionKind::Static;
    let mut owned = random_problem(17, &spec);
    owned
        .scores
        .indexed_iter_mut()
        .for_each(|(ix, x)| if ix[2] == 0 { *x += 4.0 } else { *x -= 4.0 });
    let p = Problem::Structured(owned.view().unwrap());
    let up = upstream(5, b);
    let log_z = Reference.forward::<LogSemiring>(&p).unwrap();
    let best = Reference.forward::<MaxSemiring>(&p).unwrap();
    let want = Reference.backward(&p, &up).unwrap();
    for nb in [1, 4] {
        let tag = format!("boundaries over {nb} blocks");
        let out = emulate_on(&exe, &owned, Mode::Log, (4, 32), true, &up, nb);
        let max = emulate_on(&exe, &owned, Mode::Viterbi, (4, 32), true, &up, nb);
        for x in 0..b {
            assert!(
                Tolerance::F64_VALUES.ok(out[2 * x], log_z[x]),
                "{tag}: log Z"
            );
            assert!(Tolerance::F64_VALUES.ok(max[2 * x], best[x]), "{tag}: max");
        }
        let out = emulate_on(&exe, &owned, Mode::Backward, (4, 32), true, &up, nb);
        assert_backward(&tag, &out, &owned, &want, &up, false);
    }
}

/// The pipelined forward (`kernels/pipe.cu`): log Z and the backward's gradients (from the α
/// and u it saves) against the reference, Viterbi backpointers bit for bit those of one block
/// a sequence, and a rerun's bits; rounds of 1 to 3 steps, near depths of 5 to 8, 2 to 4
/// helpers with slot ranges of unequal sizes, cut and uncut labels, capped durations, begin and
/// end boundaries, and a sequence that no segmentation can label.
#[test]
fn the_pipelined_forward_matches_the_reference_under_a_cpu_emulation() {
    let Some(exe) = emulator() else { return };
    let mut bounded = GenSpec::new(2, 150, 64, 3).everything();
    bounded.transition = semicrf_core::testing::TransitionKind::Static;
    let cases = [
        (cut_problem(4200, (2, 150, 96, 4), true), 4, (6, 2)),
        (cut_problem(4201, (1, 120, 40, 6), false), 3, (5, 1)),
        (cut_problem(4202, (2, 200, 150, 3), true), 5, (8, 3)),
        (random_problem(4203, &bounded), 3, (5, 1)),
    ];
    for (n, (mut owned, nb, how)) in cases.into_iter().enumerate() {
        let sh = owned.view().unwrap().shape();
        let (b, k, c) = (sh.batch, sh.max_duration, sh.labels);
        assert!(
            pipe::words(nb - 1, how.1, how.0, c) <= k * c,
            "case {n}: no room"
        );
        if n == 2 {
            // Sequence 1 loses every label at its first position: -inf, not NaN. No label
            // follows label 0 into label 1, and none leads to label 2: where every term of the
            // transition step is -inf, the best previous label is still the scan's first.
            for j in 0..c {
                owned.scores[[1, 0, j]] = f64::NEG_INFINITY;
            }
            let tr = owned.transition.as_mut().unwrap();
            tr[[0, 1].as_slice()] = f64::NEG_INFINITY;
            for i in 0..c {
                tr[[i, 2].as_slice()] = f64::NEG_INFINITY;
            }
        }
        let p = Problem::Structured(owned.view().unwrap());
        let tag = format!("case {n}: {sh:?} pipelined over {nb} blocks, {how:?}");
        let up = upstream(4300 + n as u64, b);
        let plan = (4, 32);
        let run = |mode| emulate_in(&exe, &owned, mode, plan, true, &up, (nb, Some(how)));
        let log_z = Reference.forward::<LogSemiring>(&p).unwrap();
        let out = run(Mode::Log);
        assert_eq!(bits(&out), bits(&run(Mode::Log)), "{tag}: a rerun differs");
        for x in 0..b {
            let z = out[2 * x];
            let ok = Tolerance::F64_VALUES.ok(z, log_z[x]) || (z == log_z[x]);
            assert!(ok, "{tag}: log Z {z} vs {}", log_z[x]);
        }
        let best = Reference.viterbi(&p).unwrap();
        let out = run(Mode::Viterbi);
        let one = emulate(&exe, &owned, Mode::Viterbi, plan, true, &up);
        assert_eq!(bits(&out), bits(&one), "{tag}: Viterbi against one block");
        for x in 0..b {
            if best[x].score == f64::NEG_INFINITY {
                assert_eq!(out[2 * x], f64::NEG_INFINITY, "{tag}: max of {x}");
                continue;
            }
            assert_eq!(
                emulated_segments(&out, &owned, x),
                best[x].segments,
                "{tag}: {x}"
            );
        }
        let Ok(want) = Reference.backward(&p, &up) else {
            continue;
        };
        let out = run(Mode::Backward);
        assert_backward(&tag, &out, &owned, &want, &up, n != 3);
    }
}
