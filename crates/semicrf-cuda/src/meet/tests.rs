//! The meet kernels' plan and layout, and the kernels themselves under the CPU emulation of
//! `tests/emu` against the f64 reference.

use super::plan::*;
use crate::emu::{build_emulator, run_emulated};
use crate::kernel::{Kernel, MeetKernel, MeetPass, STEPS, STEPS_WIDE, WIDTHS, max_threads};

#[test]
fn every_plan_has_a_thread_per_label_in_whole_warps() {
    for k in [1, 2, 3, 7, 31, 63, 64, 100, 127, 200, 1000] {
        for c in [1, 3, 4, 5, 8, 24, 33, 50, MAX_LABELS] {
            for p in [STEPS, STEPS_WIDE] {
                let threads = plan(k, c, p).unwrap();
                assert_eq!(threads % 32, 0);
                assert!((32..=max_threads(p)).contains(&threads));
                assert!(threads >= c, "{k} {c}: {threads}");
            }
        }
    }
    assert_eq!(plan(5, MAX_LABELS + 1, STEPS), None);
    assert_eq!(plan_with(127, 4, 32, STEPS), Some(128));
    assert_eq!(plan_with(127, 4, 8, STEPS), Some(512));
    assert_eq!(plan_with(127, 4, 8, STEPS_WIDE), Some(256));
}

#[test]
fn the_layout_fits_the_limit_and_prefers_shared_memory() {
    for (k, c) in [
        (7, 9),
        (127, 4),
        (100, 24),
        (1000, 24),
        (1, MAX_LABELS),
        (1000, MAX_LABELS),
    ] {
        for marg in [false, true] {
            let lay = layout(k, c, 227 * 1024, marg);
            assert!(lay.bytes <= 227 * 1024, "{k} {c} {marg}: {lay:?}");
        }
    }
    let s5 = layout(127, 4, 227 * 1024, true);
    assert!(
        s5.ring && s5.acc && s5.ch == 64 && s5.p == STEPS_WIDE,
        "{s5:?}"
    );
    assert!(!layout(127, 4, 227 * 1024, false).acc);
    // S8: the ring (194 KB) fits with fewer staged steps and the shorter blocks, the
    // accumulators (194 KB more) do not.
    let s8 = layout(1000, 24, 227 * 1024, true);
    assert!(s8.ring && !s8.acc && s8.ch < 64 && s8.p == STEPS, "{s8:?}");
    for (lay, k, c) in [(s5, 127, 4), (s8, 1000, 24)] {
        assert_eq!(lay.ch % lay.p, 0);
        // Both kernels of a backward pass share the state, so the steps a block.
        assert_eq!(layout(k, c, 227 * 1024, false).p, lay.p);
    }
    // The general kernels are compiled for STEPS alone.
    assert_eq!(layout(100, 40, 227 * 1024, true).p, STEPS);
}

#[test]
fn every_placement_is_a_loaded_kernel() {
    for pass in [
        MeetPass::Forward,
        MeetPass::Save,
        MeetPass::Z,
        MeetPass::Backward,
    ] {
        for ring in [false, true] {
            for ct in [0].into_iter().chain(WIDTHS) {
                let p = if ct == 0 { STEPS } else { STEPS_WIDE };
                let lay = Layout {
                    ct,
                    ch: p,
                    ring,
                    bytes: 0,
                    p,
                    acc: false,
                };
                let k = placed(pass, lay);
                let found = match k.width {
                    0 => Kernel::ALL.contains(&k.general()),
                    ct => MeetKernel::of_width(ct).contains(&k),
                };
                assert!(found, "{pass:?} {lay:?}: {}", k.name());
                assert_eq!(k.width, ct, "{pass:?} {lay:?}");
            }
        }
    }
}

/// The emulated kernels compiled for `p` steps a block, where a label rebases itself in
/// a block beyond 2^±`own` (`MT_SELF`; `None`: the kernels' own bound, which random
/// problems seldom reach).
fn emulator(p: usize, own: Option<usize>) -> Option<std::path::PathBuf> {
    let own = own.map(|x| format!("-DMT_SELF={x}"));
    let flags: Vec<String> = crate::kernel::shared_defines(p)
        .into_iter()
        .chain(own)
        .collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    build_emulator(
        &format!(
            "semicrf-meet-emu-{}",
            flags.join("").replace(['-', '='], "")
        ),
        "meet_main.cpp",
        &flags,
    )
}

/// What one emulated call returns.
struct Emulated {
    out: Vec<f64>,
    flag: Vec<f64>,
    rest: Vec<f64>,
}

/// Runs the kernels of width `ct` on `p` under the emulation `exe` (compiled for `steps`
/// steps a block), with `threads` per block and, where `ring`, the ring in shared memory
/// (where `acc`, the second halves' accumulators too): the forward pass, or the backward
/// pass with upstream gradients `up`.
fn emulate(
    (exe, steps): (&std::path::Path, usize),
    p: &semicrf_core::Potentials<'_, f64>,
    threads: usize,
    (ring, acc): (bool, bool),
    ct: usize,
    up: Option<&[f64]>,
) -> Emulated {
    let sh = p.shape();
    let (b, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let tr: Vec<f64> = (0..c * c)
        .map(|x| p.transition_at(1, x / c, x % c))
        .collect();
    let dur: Vec<f64> = (0..k * c)
        .map(|x| p.duration_at(x / c + 1, x % c))
        .collect();
    let st: Vec<f64> = (0..c).map(|j| p.start_at(j)).collect();
    let en: Vec<f64> = (0..c).map(|j| p.end_at(j)).collect();
    let par = params(&tr, &dur, &st, &en, k, c).expect("parameters within the range");
    let limit = 227 * 1024;
    let la = layout_with(k, c, limit, false, (ring, false), ct, steps);
    let lb = layout_with(k, c, limit, true, (ring, acc), ct, steps);
    let ch = la.ch.min(lb.ch);
    let (la, lb) = (
        layout_at(k, c, ch, (la.ring, false), false, ct, steps),
        layout_at(k, c, ch, (lb.ring, lb.acc), true, ct, steps),
    );
    let mut buf: Vec<u8> = Vec::new();
    let mut int = |x: i64| buf.extend_from_slice(&x.to_le_bytes());
    let backward = up.is_some();
    for x in [
        b as i64,
        t as i64,
        k as i64,
        c as i64,
        rows(t) as i64,
        ch as i64,
        threads as i64,
        la.ring as i64,
        lb.ring as i64,
        la.bytes as i64,
        lb.bytes as i64,
        backward as i64,
        p.begin_boundary().is_some() as i64,
        p.end_boundary().is_some() as i64,
        ct as i64,
        lb.acc as i64,
    ] {
        int(x);
    }
    for &l in p.lengths() {
        int(l as i64);
    }
    let mut f64s = |v: &mut dyn Iterator<Item = f64>| {
        for x in v {
            buf.extend_from_slice(&x.to_le_bytes());
        }
    };
    f64s(&mut p.scores().iter().copied());
    if let Some(a) = p.begin_boundary() {
        f64s(&mut a.iter().copied());
    }
    if let Some(a) = p.end_boundary() {
        f64s(&mut a.iter().copied());
    }
    buf.extend_from_slice(&(par.len() as i64).to_le_bytes());
    let ones = vec![1.0; b];
    let mut f64s2 = |v: &[f64]| {
        for x in v {
            buf.extend_from_slice(&x.to_le_bytes());
        }
    };
    f64s2(&par);
    f64s2(up.unwrap_or(&ones));
    let v = run_emulated(exe, &buf);
    Emulated {
        out: v[..2 * b].to_vec(),
        flag: v[2 * b..3 * b].to_vec(),
        rest: v[3 * b..].to_vec(),
    }
}

/// The layout of `ch` staged steps (the same for both kernels, as the emulation stages).
fn layout_at(
    k: usize,
    c: usize,
    ch: usize,
    (ring, acc): (bool, bool),
    marg: bool,
    ct: usize,
    p: usize,
) -> Layout {
    let lay = layout_with(k, c, usize::MAX / 2, marg, (ring, acc), ct, p);
    // The bytes at `lay.ch`, less the difference in staged steps.
    let per_step = 8 * (4 * c + if marg { 2 * c + 4 } else { 0 });
    Layout {
        ct,
        ch,
        ring,
        bytes: lay.bytes - per_step * (lay.ch - ch),
        p,
        acc,
    }
}

/// The kernels of `kernels/meet.cu`, run on the CPU by the emulation of `tests/emu`
/// (every thread a thread, barriers and warp operations emulated), against the f64
/// reference: log Z of the forward pass, and every gradient and boundary marginal of the
/// backward pass, on random problems with every optional input, ragged lengths, `-inf`
/// scores and transitions, one and two warps of labels, the ring in shared or global
/// memory, both numbers of steps a block, labels rebasing themselves within blocks; and
/// none of them is given up. The kernels compiled for a label width (the unrolled phase
/// 2) give results bitwise identical to the general kernels'. Skipped where no C++
/// compiler can be started.
#[test]
fn the_kernels_match_the_reference_under_a_cpu_emulation() {
    for (steps, own) in [(STEPS, None), (STEPS_WIDE, None), (STEPS_WIDE, Some(24))] {
        let Some(exe) = emulator(steps, own) else {
            return;
        };
        the_emulated_kernels_match_the_reference((&exe, steps));
    }
}

fn the_emulated_kernels_match_the_reference(exe: (&std::path::Path, usize)) {
    use semicrf_core::reference::Reference;
    use semicrf_core::testing::{
        GenSpec, Tolerance, TransitionKind, assert_gradients_close, random_problem, upstream,
    };
    use semicrf_core::{Engine, Gradients, Problem};
    let mut n = 0;
    for seed in 0..32u64 {
        let (b, t, k, c) = match seed % 8 {
            0 => (3, 12, 4, 3),
            1 => (2, 30, 9, 5),
            2 => (1, 1, 3, 2),
            3 => (2, 40, 25, 4),
            4 => (1, 17, 1, 6),
            5 => (2, 9, 12, 2),
            6 => (1, 21, 6, 20),
            _ => (1, 11, 5, 40),
        };
        let mut spec = GenSpec::new(b, t, k, c);
        if seed % 2 == 0 {
            spec = spec.everything();
        }
        spec.transition = TransitionKind::Static;
        spec.scale = [1.0, 3.0, 10.0][seed as usize % 3];
        spec.forbid_scores = if seed % 4 == 1 { 0.1 } else { 0.0 };
        spec.forbid_transitions = if seed % 5 == 2 && c > 1 { 0.2 } else { 0.0 };
        let owned = random_problem(500 + seed, &spec);
        let p = owned.view().unwrap();
        let problem = Problem::Structured(p.clone());
        let threads = if seed % 3 == 0 { 128 } else { 32 }.max(c.div_ceil(32) * 32);
        let ring = seed % 4 != 3;
        let acc = (ring, seed / 8 % 2 == 0);
        let tag = format!("seed {seed}: B={b} T={t} K={k} C={c}");
        let want = Reference.backward(&problem, &upstream(seed, b));
        let Ok(want) = want else { continue };
        // The general kernels, and those of the least width that holds C.
        let ct = WIDTHS.into_iter().find(|&w| c <= w).unwrap_or(0);
        let fwd = emulate(exe, &p, threads, acc, 0, None);
        let wide = emulate(exe, &p, threads, acc, ct, None);
        assert_eq!(bits(&fwd.out), bits(&wide.out), "{tag}: width {ct}");
        assert_eq!(fwd.flag, wide.flag, "{tag}: width {ct}");
        assert!(
            fwd.flag.iter().all(|&f| f == 0.0),
            "{tag}: given up {:?}",
            fwd.flag
        );
        for x in 0..b {
            assert!(
                Tolerance::F64_VALUES.ok(fwd.out[2 * x], want.log_z[x]),
                "{tag}: log Z {} vs {}",
                fwd.out[2 * x],
                want.log_z[x]
            );
        }
        let g = upstream(seed, b);
        let bwd = emulate(exe, &p, threads, acc, 0, Some(&g));
        let wide = emulate(exe, &p, threads, acc, ct, Some(&g));
        assert_eq!(bits(&bwd.out), bits(&wide.out), "{tag}: width {ct}");
        assert_eq!(bits(&bwd.rest), bits(&wide.rest), "{tag}: width {ct}");
        assert_eq!(bwd.flag, wide.flag, "{tag}: width {ct}");
        assert!(
            bwd.flag.iter().all(|&f| f == 0.0),
            "{tag}: given up {:?}",
            bwd.flag
        );
        let btc = b * t * c;
        let r = &bwd.rest;
        let arr3 = |off: usize| {
            ndarray::Array3::from_shape_vec((b, t, c), r[off..off + btc].to_vec()).unwrap()
        };
        let (bm0, pd0) = (3 * btc, 3 * btc + b * t);
        let (pt0, ps0) = (pd0 + b * 2 * k * c, pd0 + b * 2 * k * c + b * 2 * c * c);
        let pe0 = ps0 + b * c;
        let sum = |off: usize, n: usize, sides: usize| -> Vec<f64> {
            (0..n)
                .map(|i| {
                    (0..b)
                        .map(|x| {
                            g[x] * (0..sides)
                                .map(|s| r[off + (x * sides + s) * n + i])
                                .sum::<f64>()
                        })
                        .sum()
                })
                .collect()
        };
        let got = Gradients {
            scores: Some(arr3(0)),
            begin_boundary: p.begin_boundary().map(|_| arr3(btc)),
            end_boundary: p.end_boundary().map(|_| arr3(2 * btc)),
            duration: Some(ndarray::Array2::from_shape_vec((k, c), sum(pd0, k * c, 2)).unwrap()),
            transition: Some(
                ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[c, c]), sum(pt0, c * c, 2))
                    .unwrap(),
            ),
            start: Some(ndarray::Array1::from(sum(ps0, c, 1))),
            end: Some(ndarray::Array1::from(sum(pe0, c, 1))),
            edges: None,
        };
        assert_gradients_close(&tag, &got, &want.grad, Tolerance::F64_GRADS);
        for (i, w) in want.boundary_marginals.iter().enumerate() {
            assert!(
                Tolerance::F64_GRADS.ok(r[bm0 + i], *w),
                "{tag}: boundary marginal {i}: {} vs {w}",
                r[bm0 + i]
            );
        }
        n += 1;
    }
    assert!(n >= 28, "{} steps: only {n} problems compared", exe.1);
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The same emulation built with ThreadSanitizer: no shared-memory access of one thread
/// is left unordered against another's by the kernels' barriers (a missing barrier makes
/// it report, and the run fail). A forward and a backward pass on one warp of labels and
/// on two, with `-inf` scores (the general step) and without (the short one), in the
/// kernels of a label width where C allows. Skipped where no C++ compiler can be started.
#[test]
fn the_emulated_kernels_leave_no_access_unordered() {
    use semicrf_core::testing::{GenSpec, TransitionKind, random_problem, upstream};
    let mut flags = crate::kernel::shared_defines(STEPS);
    flags.extend(["-fsanitize=thread".into(), "-g".into()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let Some(exe) = build_emulator("semicrf-meet-tsan", "meet_main.cpp", &flags) else {
        return;
    };
    for (seed, (b, t, k, c)) in [(2, 20, 7, 5), (1, 12, 4, 40), (1, 14, 5, 12)]
        .into_iter()
        .enumerate()
    {
        let mut spec = GenSpec::new(b, t, k, c).everything();
        spec.transition = TransitionKind::Static;
        spec.forbid_scores = if seed == 0 { 0.1 } else { 0.0 };
        let owned = random_problem(900 + seed as u64, &spec);
        let p = owned.view().unwrap();
        let threads = 64.max(c.div_ceil(32) * 32);
        let ct = WIDTHS.into_iter().find(|&w| c <= w).unwrap_or(0);
        let e = (exe.as_path(), STEPS);
        emulate(e, &p, threads, (true, false), ct, None);
        emulate(
            e,
            &p,
            threads,
            (seed == 0, seed != 1),
            ct,
            Some(&upstream(1, b)),
        );
    }
}

#[test]
fn parameters_beyond_the_range_are_refused() {
    assert!(params(&[0.0], &[0.0], &[0.0], &[0.0], 1, 1).is_some());
    assert!(params(&[51.0], &[0.0], &[0.0], &[0.0], 1, 1).is_none());
    assert!(params(&[f64::NEG_INFINITY], &[0.0], &[0.0], &[-50.0], 1, 1).is_some());
}
