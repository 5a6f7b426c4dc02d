//! `check_input` of `kernels/io.cu` under the CPU emulation, against the core's checks.

use super::*;
use semicrf_core::OwnedPotentials;
use semicrf_core::testing::{GenSpec, random_problem};

const NAMES: [&str; 3] = ["scores", "begin_boundary", "end_boundary"];

/// Whether a position tensor of `p` holds a `-inf` within a sequence's length.
fn has_neg_inf(p: &OwnedPotentials<f64>) -> bool {
    let arrays = [
        &p.scores,
        p.begin_boundary.as_ref().unwrap(),
        p.end_boundary.as_ref().unwrap(),
    ];
    arrays.iter().any(|a| {
        a.indexed_iter()
            .any(|(i, &x)| i[1] < p.lengths[i[0]] && x == f64::NEG_INFINITY)
    })
}

/// Runs `check_input` of `kernels/io.cu` under the CPU emulation of `tests/emu` on the
/// scores and both boundaries of `p` in turn (`f32`: as `f32`), with `threads` per block
/// and the bounds starting from `start`: the kernel's words.
fn emulate(
    exe: &std::path::Path,
    p: &OwnedPotentials<f64>,
    start: &[f64],
    f32: bool,
    threads: usize,
) -> Vec<f64> {
    let sh = p.scores.shape();
    let (b, t, c) = (sh[0], sh[1], sh[2]);
    let arrays = [
        &p.scores,
        p.begin_boundary.as_ref().unwrap(),
        p.end_boundary.as_ref().unwrap(),
    ];
    let mut buf = Vec::new();
    for x in [b, t, c, f32 as usize, threads, arrays.len()] {
        buf.extend_from_slice(&(x as i64).to_le_bytes());
    }
    for &l in &p.lengths {
        buf.extend_from_slice(&(l as i64).to_le_bytes());
    }
    for x in start {
        buf.extend_from_slice(&x.to_le_bytes());
    }
    for a in arrays {
        for &x in a.iter() {
            if f32 {
                buf.extend_from_slice(&(x as f32).to_le_bytes());
            } else {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        }
    }
    crate::emu::run_emulated(exe, &buf)
}

/// The kernel's words, assembled on the host, give the core's own bounds (bit for bit)
/// and the core's first NaN or `+inf`: random problems with boundaries, ragged lengths
/// and `-inf` entries, both element types, blocks of fewer and more threads than `T`.
#[test]
fn the_check_kernel_finds_what_the_core_finds() {
    let exe = crate::emu::build_emulator("semicrf-check-emu", "check_main.cpp", &[]);
    let Some(exe) = exe else { return };
    // T = 2500: the ordered walk over three tiles of `CK_TILE` positions, the last partial.
    for (seed, (b, t, k, c)) in [
        (3, 40, 5, 4),
        (2, 300, 9, 7),
        (4, 17, 3, 33),
        (2, 2500, 4, 3),
    ]
    .into_iter()
    .enumerate()
    {
        let owned = random_problem(900 + seed as u64, &GenSpec::new(b, t, k, c).everything());
        for f32 in [false, true] {
            // f32: the same values as the kernel reads, parameters too.
            let owned = if f32 {
                owned.cast::<f32>().cast::<f64>()
            } else {
                owned.clone()
            };
            let p = owned.view().unwrap();
            let shared = range::shared_bound(&p);
            let start: Vec<f64> = owned.lengths.iter().map(|&l| shared.start(l)).collect();
            let what = format!("B{b} T{t} C{c} f32={f32}");
            for threads in [32, 256] {
                let words = emulate(&exe, &owned, &start, f32, threads);
                let got = assemble(&words, b, &NAMES, &shared);
                assert_eq!(got, Checked::Bounds(p.magnitudes().to_vec()), "{what}");
                assert_eq!(any_neg_inf(&words, b, 3), has_neg_inf(&owned), "{what}");
            }
            // A -inf beyond a length is not flagged; one within it is.
            let mut cut = owned.clone();
            let last = cut.lengths[b - 1];
            if last < t {
                cut.end_boundary.as_mut().unwrap()[[b - 1, last, 0]] = f64::NEG_INFINITY;
                let words = emulate(&exe, &cut, &start, f32, 64);
                assert!(!any_neg_inf(&words, b, 3), "{what}: beyond the length");
            }
            cut.scores[[b - 1, last - 1, c - 1]] = f64::NEG_INFINITY;
            let words = emulate(&exe, &cut, &start, f32, 64);
            assert!(any_neg_inf(&words, b, 3), "{what}: within the length");
            // NaN in the end boundary (one beyond sequence 1's length), NaN and +inf in one
            // row of the begin boundary, later in memory order: the core names the begin
            // boundary's first.
            let mut bad = owned.clone();
            let l1 = bad.lengths[1];
            let eb = bad.end_boundary.as_mut().unwrap();
            eb[[1, l1.min(t - 1), 0]] = f64::NAN;
            eb[[0, t - 1, c - 1]] = f64::NAN;
            let bb = bad.begin_boundary.as_mut().unwrap();
            bb[[1, t - 1, c - 1]] = f64::INFINITY;
            bb[[1, t - 1, 1]] = f64::NAN;
            let want = match bad.view() {
                Err(Error::NonFinite { tensor, index, .. }) => (tensor, index),
                other => panic!("{what}: {other:?}"),
            };
            let words = emulate(&exe, &bad, &start, f32, 64);
            match assemble(&words, b, &NAMES, &shared) {
                Checked::Bad(i, index) => {
                    assert_eq!((NAMES[i], index.to_vec()), want, "{what}")
                }
                other => panic!("{what}: {other:?}"),
            }
        }
    }
}

/// The check kernel under ThreadSanitizer: thread 0 reads what the block's threads wrote
/// only after the barrier, and the block rewrites a tile of the ordered walk only after
/// thread 0 has read it (T = 2100: three tiles); a missing barrier is a reported race,
/// which fails the run.
#[test]
fn the_check_kernel_has_no_data_race() {
    let exe = crate::emu::build_emulator(
        "semicrf-check-tsan",
        "check_main.cpp",
        &["-fsanitize=thread", "-g"],
    );
    let Some(exe) = exe else { return };
    let owned = random_problem(77, &GenSpec::new(2, 2100, 4, 5).everything());
    let p = owned.view().unwrap();
    let shared = range::shared_bound(&p);
    let start: Vec<f64> = owned.lengths.iter().map(|&l| shared.start(l)).collect();
    let words = emulate(&exe, &owned, &start, false, 64);
    let got = assemble(&words, 2, &NAMES, &shared);
    assert_eq!(got, Checked::Bounds(p.magnitudes().to_vec()));
}
