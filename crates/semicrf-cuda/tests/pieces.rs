//! One long sequence's Viterbi in pieces on the GPU ([`CudaEngine::viterbi_pieces`]): the
//! segments and score of one sweep on the GPU and of the CPU streaming engine, through the
//! pipelined kernels and the one-block kernels; pieces that never meet run again down to the
//! sequence's start; what is not split is left alone. Without a usable GPU each test prints
//! why and passes, unless `SEMICRF_REQUIRE_GPU=1`, which makes that a failure.

use ndarray::Array2;
use semicrf_core::testing::{Hashed, hashed};
use semicrf_core::{Decoded, Potentials, SourceEngine, StreamedPotentials, gold_score};
use semicrf_cuda::CudaEngine;

/// A long problem: `T` positions, `K`, `C`, the transition (`stay`: a label follows only
/// itself).
struct Long {
    src: Hashed,
    k: usize,
    tr: Array2<f64>,
    dur: Array2<f64>,
}

impl Long {
    fn new(t: usize, k: usize, c: usize, stay: bool) -> Long {
        Long {
            src: Hashed {
                lengths: vec![t],
                c,
                bad: None,
            },
            k,
            tr: Array2::from_shape_fn((c, c), |(i, j)| {
                if (stay && i != j) || (i + 2 * j) % 7 == 3 {
                    f64::NEG_INFINITY
                } else {
                    hashed(9, i, j, 3)
                }
            }),
            dur: Array2::from_shape_fn((k, c), |(d, j)| hashed(9, d, j, 4) - 0.01 * d as f64),
        }
    }

    fn streamed(&self) -> StreamedPotentials<'_, f64, Hashed> {
        StreamedPotentials::builder(&self.src, self.k)
            .transition(self.tr.view())
            .duration(self.dur.view())
            .build()
            .unwrap()
    }

    /// The score the reference's rules give `d`'s segments.
    fn gold(&self, d: &Decoded) -> f64 {
        let (sc, bb) = self.src.arrays();
        let p = Potentials::builder(sc.view(), &self.src.lengths, self.k)
            .begin_boundary(bb.view())
            .transition(self.tr.view())
            .duration(self.dur.view())
            .build()
            .unwrap();
        gold_score(&p, 0, &d.segments).unwrap()
    }
}

/// `got` is the decoding `want` (one sweep): the same segments, or, where two segmentations
/// tie within rounding, segments that score the optimum; the score within `1e-9` relative.
fn assert_one_sweeps(l: &Long, got: &Decoded, want: &Decoded, what: &str) {
    let tol = 1e-9 * want.score.abs().max(1.0);
    assert!(
        (got.score - want.score).abs() <= tol,
        "{what}: score {} against {}",
        got.score,
        want.score
    );
    if got.segments != want.segments {
        let gold = l.gold(got);
        assert!(
            (gold - want.score).abs() <= tol,
            "{what}: other segments ({} and {}), scoring {gold} against {}",
            got.segments.len(),
            want.segments.len(),
            want.score
        );
    }
}

#[test]
fn a_long_sequence_in_pieces_decodes_as_one_sweep_on_the_gpu_and_the_cpu() {
    let Some(cuda) = CudaEngine::usable_or_skip(0) else {
        return;
    };
    // K = 512: the pipelined kernels; K = 40: one block a sequence.
    for (t, k, c, pieces, overlap) in [(200_000, 512, 6, 5, 4096), (60_000, 40, 9, 4, 600)] {
        let l = Long::new(t, k, c, false);
        let s = l.streamed();
        let what = format!("T {t} K {k} C {c}, {pieces} pieces");
        let one = cuda.viterbi_streamed(&s).unwrap().remove(0);
        assert!(CudaEngine::take_last_split().is_none(), "{what}");
        let split = cuda.viterbi_pieces(pieces, overlap);
        let got = split.viterbi_streamed(&s).unwrap().remove(0);
        assert_one_sweeps(&l, &got, &one, &what);
        let cpu = SourceEngine::<f64>::viterbi_streamed(&semicrf_cpu::StreamingEngine::new(), &s)
            .unwrap()
            .remove(0);
        assert_one_sweeps(&l, &got, &cpu, &format!("{what}, against the CPU"));
        let r = CudaEngine::take_last_split().expect("a split decoding");
        assert_eq!(
            (r.len, r.attempts, r.pieces.len()),
            (t, 1, pieces),
            "{what}"
        );
        for (i, &(lo, share, from)) in r.pieces.iter().enumerate().skip(1) {
            assert!(
                lo < share && lo < from && from <= share,
                "{what}: piece {i} {r:?}"
            );
        }
        // Taken: nothing left.
        assert!(CudaEngine::take_last_split().is_none());
    }
}

#[test]
fn pieces_that_never_meet_on_the_gpu_run_again_down_to_the_start() {
    let Some(cuda) = CudaEngine::usable_or_skip(0) else {
        return;
    };
    // A label follows only itself: the first segment's label decides every later one, so no
    // piece that starts later meets the one before; each attempt doubles the overlaps.
    let l = Long::new(20_000, 30, 4, true);
    let s = l.streamed();
    let one = cuda.viterbi_streamed(&s).unwrap().remove(0);
    let got = cuda
        .viterbi_pieces(4, 200)
        .viterbi_streamed(&s)
        .unwrap()
        .remove(0);
    assert_one_sweeps(&l, &got, &one, "stay");
    let r = CudaEngine::take_last_split().expect("a split decoding");
    assert!(r.attempts > 2, "{r:?}");
    assert!(
        r.pieces.iter().all(|&(lo, _, from)| lo == 0 && from == 0),
        "{r:?}"
    );
}

#[test]
fn what_cannot_be_split_runs_as_one_sweep() {
    let Some(cuda) = CudaEngine::usable_or_skip(0) else {
        return;
    };
    let split = cuda.viterbi_pieces(4, 1000);
    // Two sequences; one shorter than two overlaps.
    let two = Hashed {
        lengths: vec![9000, 8000],
        c: 3,
        bad: None,
    };
    let l = Long::new(1500, 20, 3, false);
    let tr = l.tr.clone();
    let s2 = StreamedPotentials::builder(&two, 20)
        .transition(tr.view())
        .build()
        .unwrap();
    for s in [&s2, &l.streamed()] {
        let got = split.viterbi_streamed(s).unwrap();
        assert_eq!(got, cuda.viterbi_streamed(s).unwrap());
        assert!(CudaEngine::take_last_split().is_none());
    }
}
