//! The sampler's two halves without a GPU: the host's draws ([`DeviceRows`] and
//! [`draw_all`]) from forward values of the `f64` oracle give the CPU streaming engine's
//! samples and follow the posterior enumerated by brute force; and the kernels' saved rows
//! under the CPU emulation of `tests/emu` (`sample_main.cpp`) are the oracle's, give the
//! same samples, and leave no access unordered under ThreadSanitizer.

use super::{Rows, draw_all};
use crate::call::Model;
use crate::emu::{build_emulator, run_emulated};
use crate::kernel::{Kernel, STEPS, shared_defines};
use crate::logdomain::smem;
use semicrf_core::testing::{
    GenSpec, Tolerance, TransitionKind, random_problem, segmentation_posterior, total_variation,
};
use semicrf_core::{
    Engine, LogSemiring, OwnedPotentials, Potentials, Problem, Sampler, Segment, Semiring,
};
use semicrf_cpu::{Parallelism, StreamingEngine};

const NEG: f64 = f64::NEG_INFINITY;

/// The forward values of every sequence of `p` by their definition (model §5), in `f64`
/// from the core's accessors: `α_t(j) = ⊕_d X(t-d, d, j) ⊗ segment_score(t-d, d, j)` with
/// `X(0, d, j) = start[j]` and `X(s, d, j) = ⊕_i α_s(i) ⊗ transition[d-1, i, j]`, and for a
/// static transition `u_0 = start`, `u_s(j) = ⊕_i α_s(i) ⊗ transition[i, j]`; laid out as the
/// kernels save them, `(B, T+1, C)`, zero where they write nothing.
fn oracle_rows(p: &Potentials<'_, f64>) -> Rows {
    let sh = p.shape();
    let (t1, k, c) = (sh.len + 1, sh.max_duration, sh.labels);
    let dd = p.has_duration_dependent_transition();
    let mut alpha = vec![0.0; sh.batch * t1 * c];
    let mut u = vec![0.0; sh.batch * t1 * c];
    let lse = |v: &mut Vec<f64>| LogSemiring::sum(v);
    for b in 0..sh.batch {
        let at = |t: usize, j: usize| (b * t1 + t) * c + j;
        let len = p.lengths()[b];
        for j in 0..c {
            u[at(0, j)] = p.start_at(j);
        }
        for t in 1..=len {
            for j in 0..c {
                let mut items = Vec::new();
                for d in 1..=k.min(t) {
                    let s = t - d;
                    let x = if s == 0 {
                        p.start_at(j)
                    } else {
                        let mut v: Vec<f64> = (0..c)
                            .map(|i| alpha[at(s, i)] + p.transition_at(d, i, j))
                            .collect();
                        lse(&mut v)
                    };
                    items.push(x + p.segment_score(b, s, d, j));
                }
                alpha[at(t, j)] = lse(&mut items);
            }
            if !dd && t < len {
                for j in 0..c {
                    let mut v: Vec<f64> = (0..c)
                        .map(|i| alpha[at(t, i)] + p.transition_at(1, i, j))
                        .collect();
                    u[at(t, j)] = lse(&mut v);
                }
            }
        }
    }
    Rows {
        alpha,
        u: (!dd).then_some(u),
    }
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

/// Small problems of every kind the sampler distinguishes: every input, a `(K, C, C)`
/// transition, `-inf` scores with capped durations, ragged lengths; and larger ones with
/// more than 32 labels and more than 64 durations.
fn problems() -> Vec<(&'static str, OwnedPotentials<f64>)> {
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
    let mut wide = GenSpec::new(2, 30, 5, 40).everything();
    wide.forbid_scores = 0.05;
    let mut long = GenSpec::new(1, 90, 70, 3).everything();
    long.transition = TransitionKind::DurationDependent;
    vec![
        ("every input", feasible(1, &every)),
        ("duration-dependent transition", feasible(2, &dd)),
        (
            "-inf scores and transitions, capped durations",
            feasible(3, &cut),
        ),
        ("ragged lengths", feasible(4, &ragged)),
        ("40 labels", feasible(5, &wide)),
        ("K = 70, duration-dependent", feasible(6, &long)),
    ]
}

/// The CPU streaming engine's samples.
fn cpu_samples(p: &Potentials<'_, f64>, n: usize, seed: u64) -> semicrf_core::Samples {
    StreamingEngine::new()
        .parallelism(Parallelism::Sequential)
        .sample(&Problem::Structured(p.clone()), n, seed)
        .unwrap()
}

#[test]
fn draws_from_the_oracles_rows_are_the_cpu_streaming_engines_samples() {
    for (name, owned) in problems() {
        let p = owned.view().unwrap();
        let model = Model::of(&p);
        let got = draw_all(&p, &model, &oracle_rows(&p), 200, 2026).unwrap();
        assert_eq!(got, cpu_samples(&p, 200, 2026), "{name}");
    }
}

#[test]
fn draws_from_the_oracles_rows_follow_the_enumerated_posterior() {
    let n = 100_000;
    for (name, owned) in problems().into_iter().take(4) {
        let p = owned.view().unwrap();
        let got = draw_all(&p, &Model::of(&p), &oracle_rows(&p), n, 7).unwrap();
        for (b, samples) in got.iter().enumerate() {
            let post = segmentation_posterior(&p, b);
            let tv = total_variation(&post, samples);
            println!(
                "{name}, sequence {b}: total variation {tv:.4} ({} segmentations)",
                post.len()
            );
            // 10⁵ samples of at most a few hundred segmentations resolve it to about 0.02.
            assert!(tv < 0.03, "{name}, sequence {b}: total variation {tv}");
        }
    }
}

#[test]
fn an_infeasible_sequence_is_named_and_zero_samples_are_empty() {
    let mut owned = random_problem(9, &GenSpec::new(2, 4, 2, 2));
    for t in 0..4 {
        for c in 0..2 {
            owned.scores[[1, t, c]] = NEG;
        }
    }
    let p = owned.view().unwrap();
    let (model, rows) = (Model::of(&p), oracle_rows(&p));
    let r = draw_all(&p, &model, &rows, 3, 0);
    assert!(
        matches!(r, Err(semicrf_core::Error::Infeasible { sequence: 1 })),
        "{r:?}"
    );
    let fine = semicrf_core::testing::alone(&owned, 0);
    let p = fine.view().unwrap();
    let s = draw_all(&p, &Model::of(&p), &oracle_rows(&p), 0, 0).unwrap();
    assert_eq!(s, vec![Vec::<Vec<Segment>>::new()]);
}

/// The emulated kernels, built once per process.
fn emulator() -> Option<std::path::PathBuf> {
    static EXE: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    EXE.get_or_init(|| build("semicrf-sample-emu", &[])).clone()
}

/// The emulated kernels with the extra compiler `flags`.
fn build(name: &str, extra: &[&str]) -> Option<std::path::PathBuf> {
    // Tasks from two durations on, so that the short windows an emulation can afford are
    // split over several teams (as `logdomain`'s tests build them).
    let flags: Vec<String> = shared_defines(STEPS)
        .into_iter()
        .filter(|f| !f.starts_with("-DLD_SPAN"))
        .chain(["-DLD_SPAN=2".into()])
        .collect();
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend(extra);
    build_emulator(name, "sample_main.cpp", &flags)
}

/// The rows the emulated forward kernel saves for `p` with `team` lanes a team, `threads`
/// a block, and its rings in shared memory where `ring`.
fn emulated_rows(
    exe: &std::path::Path,
    p: &Potentials<'_, f64>,
    (team, threads): (usize, usize),
    ring: bool,
) -> Rows {
    let sh = p.shape();
    let (b, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let model = Model::of(p);
    let kernel = if model.dd {
        Kernel::FwdDdLog
    } else {
        Kernel::FwdStaticLog
    };
    let full = smem(kernel, k, c, usize::MAX / 2);
    let m = if ring {
        full
    } else {
        smem(kernel, k, c, full.bytes - 8)
    };
    assert_eq!(m.ring, ring);
    let mut buf: Vec<u8> = Vec::new();
    let header = [
        b,
        t,
        k,
        c,
        team,
        threads,
        m.ch,
        model.dd as usize,
        m.ring as usize,
        m.bytes,
    ];
    for x in header.into_iter().chain(p.lengths().iter().copied()) {
        buf.extend_from_slice(&(x as i64).to_le_bytes());
    }
    let boundary = |x: Option<&ndarray::ArrayView3<'_, f64>>| match x {
        Some(x) => x.iter().copied().collect(),
        None => vec![0.0; b * t * c],
    };
    let (bb, eb) = (boundary(p.begin_boundary()), boundary(p.end_boundary()));
    let values = p.scores().iter().copied().chain(bb).chain(eb);
    let values = values.chain(model.tr.iter().copied());
    let values = values.chain(model.dur.iter().copied());
    for x in values
        .chain(model.st.iter().copied())
        .chain(model.en.iter().copied())
    {
        buf.extend_from_slice(&x.to_le_bytes());
    }
    let out = run_emulated(exe, &buf);
    let n = b * (t + 1) * c;
    Rows {
        alpha: out[2 * b..][..n].to_vec(),
        u: (!model.dd).then(|| out[2 * b + n..][..n].to_vec()),
    }
}

/// The problems the emulation can afford: every kind, without the longest.
fn emulated_problems() -> Vec<(&'static str, OwnedPotentials<f64>)> {
    let mut v = problems();
    v.retain(|(name, _)| !name.starts_with("K = 70"));
    let mut long = GenSpec::new(1, 20, 70, 3).everything();
    long.forbid_scores = 0.05;
    v.push(("K = 70", feasible(7, &long)));
    v
}

#[test]
fn the_kernels_saved_rows_are_the_oracles_and_give_the_cpu_engines_samples() {
    let Some(exe) = emulator() else { return };
    for (x, (name, owned)) in emulated_problems().into_iter().enumerate() {
        let p = owned.view().unwrap();
        let want = oracle_rows(&p);
        let plan = if x % 2 == 0 { (4, 32) } else { (8, 64) };
        for ring in [true, false] {
            let tag = format!("{name}, rings in shared memory {ring}");
            let got = emulated_rows(&exe, &p, plan, ring);
            let sh = p.shape();
            let c = sh.labels;
            for b in 0..sh.batch {
                let len = p.lengths()[b];
                let row = |v: &[f64], t: usize| v[(b * (sh.len + 1) + t) * c..][..c].to_vec();
                let close = |a: &[f64], w: &[f64]| {
                    a.iter()
                        .zip(w)
                        .all(|(&a, &w)| (a == NEG && w == NEG) || Tolerance::F64_VALUES.ok(a, w))
                };
                for t in 1..=len {
                    let (a, w) = (row(&got.alpha, t), row(&want.alpha, t));
                    assert!(close(&a, &w), "{tag}: α_{t} of {b}: {a:?} vs {w:?}");
                }
                if let (Some(gu), Some(wu)) = (&got.u, &want.u) {
                    for s in 0..len {
                        let (a, w) = (row(gu, s), row(wu, s));
                        assert!(close(&a, &w), "{tag}: u_{s} of {b}: {a:?} vs {w:?}");
                    }
                }
            }
            let samples = draw_all(&p, &Model::of(&p), &got, 200, 31).unwrap();
            assert_eq!(samples, cpu_samples(&p, 200, 31), "{tag}: samples");
        }
    }
}

/// The same emulation built with ThreadSanitizer: the forward kernels in the mode sampling
/// uses, the duration-dependent one included, leave no access of one thread to shared
/// memory or to the rings unordered against another's (a report makes the run fail).
#[test]
fn the_saving_kernels_leave_no_access_unordered() {
    let Some(exe) = build("semicrf-sample-tsan", &["-fsanitize=thread", "-g"]) else {
        return;
    };
    let mut dd = GenSpec::new(2, 10, 4, 33).everything();
    dd.transition = TransitionKind::DurationDependent;
    dd.forbid_scores = 0.1;
    let mut fixed = GenSpec::new(2, 10, 7, 33).everything();
    fixed.forbid_scores = 0.1;
    for spec in [dd, fixed] {
        let owned = random_problem(31, &spec);
        let p = owned.view().unwrap();
        for ring in [true, false] {
            emulated_rows(&exe, &p, (4, 32), ring);
        }
    }
}

/// The sampling kernel under the emulation, built once per process.
fn draw_emulator() -> Option<std::path::PathBuf> {
    static EXE: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    EXE.get_or_init(|| build_emulator("semicrf-draw-emu", "draw_main.cpp", &[]))
        .clone()
}

/// Samples `i0 .. i0 + n` of every sequence of `p` that the emulated `sample_draw` draws
/// from `rows` with `warps` warps a block, appended to `out`.
fn emulated_draws(
    exe: &std::path::Path,
    p: &Potentials<'_, f64>,
    rows: &Rows,
    (n, i0, seed): (usize, usize, u64),
    warps: usize,
    out: &mut semicrf_core::Samples,
) -> semicrf_core::Result<()> {
    let sh = p.shape();
    let (b, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let model = Model::of(p);
    let mut buf: Vec<u8> = Vec::new();
    let header = [
        0,
        b as i64,
        t as i64,
        k as i64,
        c as i64,
        model.dd as i64,
        n as i64,
        i0 as i64,
        seed as i64,
        p.begin_boundary().is_some() as i64,
        p.end_boundary().is_some() as i64,
        warps as i64,
    ];
    let lengths = p.lengths().iter().map(|&l| l as i64);
    for x in header.into_iter().chain(lengths) {
        buf.extend_from_slice(&x.to_le_bytes());
    }
    let boundary = |x: Option<&ndarray::ArrayView3<'_, f64>>| match x {
        Some(x) => x.iter().copied().collect(),
        None => vec![0.0; b * t * c],
    };
    let (bb, eb) = (boundary(p.begin_boundary()), boundary(p.end_boundary()));
    let zeros = vec![0.0; rows.alpha.len()];
    let values = p.scores().iter().copied().chain(bb).chain(eb);
    let values = values
        .chain(model.tr.iter().copied())
        .chain(model.dur.iter().copied())
        .chain(model.st.iter().copied())
        .chain(model.en.iter().copied())
        .chain(rows.alpha.iter().copied())
        .chain(rows.u.as_ref().unwrap_or(&zeros).iter().copied());
    for x in values {
        buf.extend_from_slice(&x.to_le_bytes());
    }
    let got = run_emulated(exe, &buf);
    let words: Vec<i32> = got.iter().map(|&x| x as i32).collect();
    let (counts, packed) = words.split_at(2 * b * n + 1);
    let taken = counts[2 * b * n] as usize;
    super::draw::collect(
        "emulation",
        &counts[..2 * b * n],
        &packed[..taken],
        k,
        i0,
        out,
    )
}

/// The emulated kernel's samples `0 .. n`, in launches of `per` samples of every sequence.
fn emulated_samples(
    exe: &std::path::Path,
    p: &Potentials<'_, f64>,
    rows: &Rows,
    (n, per, seed): (usize, usize, u64),
) -> semicrf_core::Samples {
    let mut out: semicrf_core::Samples = (0..p.shape().batch).map(|_| Vec::new()).collect();
    for i0 in (0..n).step_by(per) {
        let m = per.min(n - i0);
        emulated_draws(exe, p, rows, (m, i0, seed), 1 + i0 % 3, &mut out).unwrap();
    }
    out
}

/// The kernel's generator is the host's: the first 40 uniforms (five ChaCha blocks, across
/// the end of rand_chacha's buffer of four) of several keys equal `sample_rng`'s.
#[test]
fn the_kernels_uniforms_are_the_host_generators() {
    use rand::Rng;
    let Some(exe) = draw_emulator() else { return };
    let keys: [(u64, usize, usize); 5] = [
        (0, 0, 0),
        (2026, 3, 17),
        (u64::MAX, 1 << 33, 99),
        (0x0123_4567_89ab_cdef, 7, 1 << 40),
        (1, usize::MAX, usize::MAX),
    ];
    let mut buf: Vec<u8> = Vec::new();
    let header = [1, keys.len() as i64];
    let words = keys
        .iter()
        .flat_map(|&(s, b, i)| [s as i64, b as i64, i as i64]);
    for x in header.into_iter().chain(words) {
        buf.extend_from_slice(&x.to_le_bytes());
    }
    let got = run_emulated(&exe, &buf);
    for (x, &(s, b, i)) in keys.iter().enumerate() {
        let mut rng = semicrf_core::sample::sample_rng(s, b, i);
        let want: Vec<f64> = (0..40).map(|_| rng.random::<f64>()).collect();
        assert_eq!(got[40 * x..][..40], want[..], "key ({s}, {b}, {i})");
    }
}

/// The emulated kernel draws the samples the host draws from the same rows (the oracle's,
/// and the emulated forward kernel's): bit for bit, since the emulation's `exp` and `log`
/// are the host's and every weight is formed by the same operations in the same order.
/// Every kind of problem, 40 labels, K = 70, in launches of several sizes.
#[test]
fn the_kernels_draws_are_the_hosts_from_the_same_rows() {
    let Some(exe) = draw_emulator() else { return };
    let mut v = emulated_problems();
    v.extend(
        problems()
            .into_iter()
            .filter(|(n, _)| n.starts_with("K = 70")),
    );
    for (x, (name, owned)) in v.into_iter().enumerate() {
        let p = owned.view().unwrap();
        let model = Model::of(&p);
        let rows = oracle_rows(&p);
        let (n, seed) = (60, 2026 + x as u64);
        let want = draw_all(&p, &model, &rows, n, seed).unwrap();
        for per in [n, 25] {
            let got = emulated_samples(&exe, &p, &rows, (n, per, seed));
            assert_eq!(got, want, "{name}, {per} samples a launch");
        }
        assert_eq!(want, cpu_samples(&p, n, seed), "{name}: the CPU engine");
    }
}

/// The whole device path under the emulation: the forward kernel's saved rows, then the
/// sampling kernel on them, give the CPU streaming engine's samples.
#[test]
fn the_emulated_forward_and_draws_give_the_cpu_engines_samples() {
    let (Some(fwd), Some(exe)) = (emulator(), draw_emulator()) else {
        return;
    };
    for (x, (name, owned)) in emulated_problems().into_iter().enumerate() {
        let p = owned.view().unwrap();
        let rows = emulated_rows(&fwd, &p, (4, 32), x % 2 == 0);
        let got = emulated_samples(&exe, &p, &rows, (50, 50, 9));
        assert_eq!(got, cpu_samples(&p, 50, 9), "{name}");
    }
}

/// A sample the rows cannot finish is an error naming it, not a panic: rows whose `α` is
/// `-inf` below the end leave a reached segment without a finite item.
#[test]
fn inconsistent_rows_are_an_error() {
    let Some(exe) = draw_emulator() else { return };
    let owned = feasible(1, &GenSpec::new(1, 6, 3, 2));
    let p = owned.view().unwrap();
    let mut rows = oracle_rows(&p);
    let c = p.shape().labels;
    for x in &mut rows.alpha[c..5 * c] {
        *x = NEG;
    }
    if let Some(u) = rows.u.as_mut() {
        for x in &mut u[..6 * c] {
            *x = NEG;
        }
    }
    let mut out = vec![Vec::new()];
    let r = emulated_draws(&exe, &p, &rows, (3, 0, 1), 1, &mut out);
    assert!(
        matches!(&r, Err(semicrf_core::Error::Unsupported { what, .. }) if what.contains("no finite item")),
        "{r:?}"
    );
}

/// The sampling kernel built with ThreadSanitizer: a warp's lanes leave no access to its
/// row of weights or its segments unordered against another lane's (lane 0's sums and
/// segments against the lanes' weights and copies), on both transition forms with more
/// labels and durations than lanes (a report makes the run fail).
#[test]
fn the_draws_leave_no_access_unordered() {
    let Some(exe) = build_emulator(
        "semicrf-draw-tsan",
        "draw_main.cpp",
        &["-fsanitize=thread", "-g"],
    ) else {
        return;
    };
    let mut dd = GenSpec::new(2, 8, 3, 33).everything();
    dd.transition = TransitionKind::DurationDependent;
    let mut fixed = GenSpec::new(1, 40, 35, 3).everything();
    fixed.forbid_scores = 0.05;
    for (x, spec) in [dd, fixed].into_iter().enumerate() {
        let owned = feasible(40 + x as u64, &spec);
        let p = owned.view().unwrap();
        let rows = oracle_rows(&p);
        let want = draw_all(&p, &Model::of(&p), &rows, 4, 3).unwrap();
        assert_eq!(emulated_samples(&exe, &p, &rows, (4, 4, 3)), want);
    }
}
