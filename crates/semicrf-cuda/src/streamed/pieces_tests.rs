//! The split decoding's host side against the f64 reference: pieces swept on the CPU with the
//! kernels' conventions (what `kernels/streaming.cu` saves: `u`, backpointers, the last `α`).

use ndarray::{Array1, Array2, Array3};
use rand::Rng;
use semicrf_core::materialize;
use semicrf_core::reference;
use semicrf_core::{Decoded, Potentials, Result};

use super::*;

/// A problem of one sequence: scores `(T, C)`, durations `(K, C)`, transition, start, end.
struct Problem {
    sc: Array2<f64>,
    dur: Array2<f64>,
    tr: Array2<f64>,
    st: Array1<f64>,
    en: Array1<f64>,
}

impl Problem {
    fn random(seed: u64, (t, k, c): (usize, usize, usize), stay: bool) -> Problem {
        let mut r = semicrf_core::testing::rng(seed);
        let mut x = move || r.random_range(-1.0..1.0);
        Problem {
            sc: Array2::from_shape_fn((t, c), |_| x()),
            dur: Array2::from_shape_fn((k, c), |_| x()),
            // `stay`: a label only ever follows itself, so the first segment's label
            // decides every later one and no two starts lead to parallel sweeps.
            tr: Array2::from_shape_fn((c, c), |(i, j)| {
                if stay && i != j {
                    f64::NEG_INFINITY
                } else {
                    x()
                }
            }),
            st: Array1::from_shape_fn(c, |_| x()),
            en: Array1::from_shape_fn(c, |_| x()),
        }
    }

    fn k(&self) -> usize {
        self.dur.nrows()
    }

    /// The scores `(1, T, C)`.
    fn scores(&self) -> Array3<f64> {
        let (t, c) = self.sc.dim();
        self.sc.clone().into_shape_with_order((1, t, c)).unwrap()
    }

    /// The potentials of the scores `sc`, of length `lengths`.
    fn potentials<'a>(&'a self, sc: &'a Array3<f64>, lengths: &'a [usize]) -> Potentials<'a, f64> {
        Potentials::builder(sc.view(), lengths, self.k())
            .transition(self.tr.view())
            .duration(self.dur.view())
            .start(self.st.view())
            .end(self.en.view())
            .build()
            .unwrap()
    }

    /// The reference's decoding.
    fn reference(&self) -> Decoded {
        let (sc, lengths) = (self.scores(), [self.sc.nrows()]);
        reference::viterbi(
            materialize(&self.potentials(&sc, &lengths)).view(),
            &lengths,
        )
        .remove(0)
    }
}

/// The max forward of rows `[lo, hi)` as a sequence of its own: `u` and backpointers
/// `(L + 1, C)` (row `L` of `u` unwritten, as on the device), the last `α`.
struct Swept {
    u: Vec<f64>,
    bpd: Vec<i32>,
    bpi: Vec<i32>,
    last: Vec<f64>,
}

fn sweep(p: &Problem, (lo, hi): (usize, usize)) -> Swept {
    let (c, k, l) = (p.sc.ncols(), p.k(), hi - lo);
    let ninf = f64::NEG_INFINITY;
    let mut s = Swept {
        u: vec![0.0; (l + 1) * c],
        bpd: vec![0; (l + 1) * c],
        bpi: vec![0; (l + 1) * c],
        last: vec![ninf; c],
    };
    s.u[..c].copy_from_slice(p.st.as_slice().unwrap());
    // Window items: the start at s extended by the scores of s .. t - 1.
    let mut ring = vec![ninf; (l + 1) * c];
    ring[..c].copy_from_slice(p.st.as_slice().unwrap());
    let mut alpha = vec![ninf; c];
    for t in 1..=l {
        for j in 0..c {
            let (mut best, mut arg) = (ninf, 0);
            for d in 1..=k.min(t) {
                let x = &mut ring[(t - d) * c + j];
                *x += p.sc[[lo + t - 1, j]];
                let v = *x + p.dur[[d - 1, j]];
                if v > best {
                    (best, arg) = (v, d);
                }
            }
            alpha[j] = best;
            s.bpd[t * c + j] = arg as i32;
        }
        if t == l {
            break;
        }
        for j in 0..c {
            let (mut best, mut arg) = (ninf, 0);
            for (i, a) in alpha.iter().enumerate() {
                let v = a + p.tr[[i, j]];
                if v > best {
                    (best, arg) = (v, i);
                }
            }
            s.u[t * c + j] = best;
            s.bpi[t * c + j] = arg as i32;
            ring[t * c + j] = best;
        }
    }
    s.last = alpha;
    s
}

struct OnCpu {
    c: usize,
    pieces: Vec<Swept>,
    /// Rows read: (piece, first, last exclusive).
    reads: std::cell::RefCell<Vec<(usize, usize, usize)>>,
}

impl Sweeps for OnCpu {
    fn u(&self, piece: usize, a: usize, b: usize) -> Result<Vec<f64>> {
        self.reads.borrow_mut().push((piece, a, b));
        Ok(self.pieces[piece].u[a * self.c..b * self.c].to_vec())
    }
    fn bp(&self, piece: usize, a: usize, b: usize) -> Result<(Vec<i32>, Vec<i32>)> {
        let s = &self.pieces[piece];
        let r = a * self.c..b * self.c;
        Ok((s.bpd[r.clone()].to_vec(), s.bpi[r].to_vec()))
    }
    fn last(&self, piece: usize) -> Result<Vec<f64>> {
        Ok(self.pieces[piece].last.clone())
    }
}

/// The split decoding of `p` on the CPU, with the attempts' splits.
fn split(
    p: &Problem,
    n: usize,
    overlap: usize,
    rows: usize,
) -> (Decoded, Vec<Vec<(usize, usize)>>) {
    let (t, c) = p.sc.dim();
    let mut tried = Vec::new();
    let d = in_pieces((t, p.k()), n, overlap, |ranges| {
        tried.push(ranges.to_vec());
        let s = OnCpu {
            c,
            pieces: ranges.iter().map(|&r| sweep(p, r)).collect(),
            reads: Default::default(),
        };
        let out = attempt(
            &s,
            ranges,
            (t, p.k(), c),
            (1e-9, rows),
            p.en.as_slice().unwrap(),
        );
        // Only rows each piece has were read, and only u rows it wrote.
        for &(i, a, b) in s.reads.borrow().iter() {
            assert!(a <= b && b <= ranges[i].1 - ranges[i].0, "{i} {a} {b}");
        }
        out.map(|r| r.map(|(d, _)| d))
    })
    .unwrap();
    (d, tried)
}

/// `got` is an optimal segmentation: its score and the score the reference gives its
/// segments are the optimum's within a relative `1e-9` (segments may differ from the
/// reference's only where two segmentations tie within rounding).
fn assert_optimal(p: &Problem, got: &Decoded, want: &Decoded, what: &str) {
    let tol = 1e-9 * want.score.abs().max(1.0);
    let (sc, lengths) = (p.scores(), [p.sc.nrows()]);
    let gold = semicrf_core::gold_score(&p.potentials(&sc, &lengths), 0, &got.segments).unwrap();
    assert!(
        (got.score - want.score).abs() <= tol && (gold - want.score).abs() <= tol,
        "{what}: score {} and its segments' {gold} against the optimum {}",
        got.score,
        want.score
    );
}

#[test]
fn pieces_that_meet_give_the_reference_segments_and_score() {
    for (seed, shape, n, overlap, rows) in [
        (1, (2000, 5, 4), 4, 40, 7),
        (2, (3000, 8, 3), 6, 64, 1000),
        (3, (777, 3, 6), 3, 12, 1),
        (4, (1500, 1, 2), 5, 4, 16),
    ] {
        let p = Problem::random(seed, shape, false);
        let want = p.reference();
        let (one, _) = split(&p, 1, overlap, rows);
        assert_optimal(&p, &one, &want, &format!("seed {seed}, one piece"));
        let (got, tried) = split(&p, n, overlap, rows);
        assert_optimal(&p, &got, &want, &format!("seed {seed}"));
        // The pieces ran at once, each from before its chunk.
        assert_eq!(tried[0].len(), n, "seed {seed}");
        assert!(tried[0][1..].iter().all(|&(lo, _)| lo > 0), "seed {seed}");
    }
}

#[test]
fn pieces_that_never_meet_are_run_again_down_to_the_start() {
    // A label follows only itself: no piece ever meets the one before, so each attempt
    // doubles every overlap until every piece starts at row 0.
    let p = Problem::random(5, (600, 4, 3), true);
    let want = p.reference();
    let (got, tried) = split(&p, 3, 16, 50);
    assert_eq!(got.segments, want.segments);
    assert!((got.score - want.score).abs() <= 1e-9 * want.score.abs().max(1.0));
    let last = tried.last().unwrap();
    assert!(last.iter().all(|&(lo, _)| lo == 0), "{tried:?}");
    assert!(tried.len() > 2, "{tried:?}");
    // Each attempt started earlier than the one before.
    for w in tried.windows(2) {
        assert!(w[1][2].0 < w[0][2].0 || w[1][2].0 == 0, "{tried:?}");
    }
}

#[test]
fn a_row_is_parallel_only_with_minus_infinity_in_the_same_places_and_one_difference() {
    let ninf = f64::NEG_INFINITY;
    let mut s = Parallel::new(2, 1e-6, 10);
    assert_eq!(s.row(10, &[1.0, ninf], &[0.5, ninf]), None);
    // The second row: K = 2 rows, parallel with difference 0.5.
    assert_eq!(s.row(11, &[3.0, 2.0], &[2.5, 1.5]), Some((12, 0.5)));
    // A difference off by more than the tolerance, -inf in one only, NaN: not parallel.
    for (a, b) in [
        ([1.0, 2.0], [0.5, 1.0]),
        ([1.0, ninf], [0.5, 0.0]),
        ([f64::NAN, 1.0], [f64::NAN, 0.5]),
    ] {
        let mut s = Parallel::new(2, 1e-6, 0);
        assert_eq!(s.row(0, &[1.0, 1.0], &[0.5, 0.5]), None);
        assert_eq!(s.row(1, &a, &b), None, "{a:?} {b:?}");
        // The run starts again after it.
        assert_eq!(s.row(2, &[1.0, 1.0], &[0.0, 0.0]), None);
        assert_eq!(s.row(3, &[2.0, 1.0], &[1.0, 0.0]), Some((4, 1.0)));
    }
}

#[test]
fn a_sequence_is_cut_into_chunks_with_overlaps_and_at_most_one_piece_an_overlap() {
    assert_eq!(
        ranges(100, &[7, 7, 7, 7]),
        vec![(0, 25), (18, 50), (43, 75), (68, 100)]
    );
    assert_eq!(ranges(10, &[5, 50]), vec![(0, 5), (0, 10)]);
    assert_eq!(count(21_000_000, 6, 1 << 20), 6);
    assert_eq!(count(3_000_000, 6, 1 << 20), 2);
    assert_eq!(count(1_500_000, 6, 1 << 20), 1);
    assert_eq!(count(100, 1, 10), 1);
    assert_eq!(count(100, 4, 0), 4);
}
