//! k-best decoding: the `k` highest-scoring distinct segmentations of a sequence, written
//! once over a trait that gives segment scores ([`SegmentScores`]) and used by every engine
//! that implements [`KBest`] (model §7, "k best").
//!
//! The dynamic program is Viterbi's with a list instead of a number per `(t, j)`: the best
//! `k` partial segmentations of `[0, t)` whose last segment has label `j`, each with a
//! backpointer `(d, i, r)` (the duration of that segment, the label before it and the rank
//! in the list of `(t - d, i)`). Each list is the `k`-way merge of the `K·C` sorted lists it
//! extends, taken from a heap of their heads, so a position costs
//! `O(C·(K·C + k·log(K·C)))` and the table holds at most `(L + 1)·C·k` entries of 16 bytes.
//!
//! ```
//! # mod semicrf { pub use ::ndarray; pub use semicrf_core::*; } // the facade's paths
//! use semicrf::ndarray::Array3;
//! use semicrf::{kbest_sequence, Potentials, Segment, StructuredScores};
//!
//! // 2 positions, 2 labels, durations up to 2: 6 segmentations.
//! let scores = Array3::<f64>::from_shape_vec((1, 2, 2), vec![1.0, 0.0, 0.0, 2.0])?;
//! let lengths = [2];
//! let p = Potentials::builder(scores.view(), &lengths, 2).build()?;
//! let best = kbest_sequence(&mut StructuredScores::new(&p, 0), 3)?;
//! assert_eq!(best.iter().map(|d| d.score).collect::<Vec<_>>(), [3.0, 2.0, 2.0]);
//! assert_eq!(best[0].segments, [Segment::new(0, 1, 0), Segment::new(1, 1, 1)]);
//! // A tie at 2: both end with label 1; compared from the last segment backwards, the
//! // shorter last segment comes first.
//! assert_eq!(best[1].segments, [Segment::new(0, 1, 1), Segment::new(1, 1, 1)]);
//! assert_eq!(best[2].segments, [Segment::new(0, 2, 1)]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::{
    ByteCount, Decoded, EngineInfo, Error, Potentials, Problem, Query, Result, Scalar, Segment,
};

const NEG: f64 = f64::NEG_INFINITY;

/// The scores of the segments of one sequence in edge form (model §3), as k-best decoding
/// reads them: every segment that ends at a position, for each label before it.
pub trait SegmentScores {
    /// The length `L` of the sequence.
    fn len(&self) -> usize;
    /// Whether the sequence has no position (never, for a validated problem).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The longest duration the scores cover (`min(K, L)` is enough).
    fn max_duration(&self) -> usize;
    /// The number of labels `C`.
    fn labels(&self) -> usize;
    /// Fills `out[(d - 1)·C + i]`, for `d = 1..=min(max_duration, t)` and every `i`, with the
    /// score of the segment `(t - d, d, j)` after label `i`, the end score included where
    /// `t = L`. For a first segment (`d = t`) the sources `i` are the virtual start's: the
    /// segment's score is their maximum. `-inf` forbids; NaN and `+inf` never occur.
    fn ending(&mut self, t: usize, j: usize, out: &mut [f64]);
}

/// [`SegmentScores`] of sequence `b` of structured potentials, computed from the tensors
/// (model §2) without materialising edges: a segment's content is summed along its
/// positions in `f64` as the duration grows, so one call costs `O(min(K, t)·C)`.
#[derive(Clone, Debug)]
pub struct StructuredScores<'p, 'a, F> {
    p: &'p Potentials<'a, F>,
    b: usize,
}

impl<'p, 'a, F: Scalar> StructuredScores<'p, 'a, F> {
    /// The segment scores of sequence `b` of `p` (`b < B`).
    pub fn new(p: &'p Potentials<'a, F>, b: usize) -> Self {
        StructuredScores { p, b }
    }
}

impl<F: Scalar> SegmentScores for StructuredScores<'_, '_, F> {
    fn len(&self) -> usize {
        self.p.lengths()[self.b]
    }
    fn max_duration(&self) -> usize {
        self.p.shape().max_duration.min(self.len())
    }
    fn labels(&self) -> usize {
        self.p.shape().labels
    }
    fn ending(&mut self, t: usize, j: usize, out: &mut [f64]) {
        let (p, b, c) = (self.p, self.b, self.labels());
        let mut tail = p.end_boundary_at(b, t - 1, j);
        if t == self.len() {
            tail += p.end_at(j);
        }
        let mut content = 0.0;
        for d in 1..=self.max_duration().min(t) {
            let s = t - d;
            content += p.scores()[[b, s, j]].as_f64();
            let seg = content + p.duration_at(d, j) + p.begin_boundary_at(b, s, j) + tail;
            let row = &mut out[(d - 1) * c..d * c];
            if s == 0 {
                row.fill(NEG);
                row[0] = p.start_at(j) + seg;
            } else {
                for (i, x) in row.iter_mut().enumerate() {
                    *x = p.transition_at(d, i, j) + seg;
                }
            }
        }
    }
}

/// One entry of a list: a partial score and where it came from.
#[derive(Clone, Copy, Debug)]
struct Entry {
    score: f64,
    /// `(d - 1)·C + i`.
    back: u32,
    /// The rank in the list of `(t - d, i)`.
    rank: u32,
}

/// A candidate of a merge: the head of one sorted list, shifted by its segment's score.
/// Ordered by score, then (for equal scores) the smaller `d`, `i` and `r` first.
#[derive(Clone, Copy, Debug)]
struct Cand {
    score: f64,
    d: usize,
    i: usize,
    r: usize,
}

impl Ord for Cand {
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| (o.d, o.i, o.r).cmp(&(self.d, self.i, self.r)))
    }
}
impl PartialOrd for Cand {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Cand {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Cand {}

/// The lists of every `(t, j)`, `t = 1..=L`, stored one after another.
struct Table {
    c: usize,
    entries: Vec<Entry>,
    /// `offsets[(t - 1)·C + j]..offsets[(t - 1)·C + j + 1]`: the list of `(t, j)`.
    offsets: Vec<usize>,
}

impl Table {
    fn list(&self, t: usize, j: usize) -> &[Entry] {
        let n = (t - 1) * self.c + j;
        &self.entries[self.offsets[n]..self.offsets[n + 1]]
    }
}

/// The `k` highest-scoring segmentations of one sequence with a finite score, best first
/// (fewer when fewer exist; none when `k = 0` or no segmentation is finite).
///
/// **Ties** (exactly equal scores) are ordered as Viterbi breaks them, extended to the whole
/// list: the two segmentations are compared from their last segment backwards, the smaller
/// label first, then the smaller duration, then the segment before. So the first of the
/// list is the Viterbi decoding of every engine (model §7).
///
/// Errors: [`Error::Unsupported`] when `K·C` or `k` exceed `2³²` (the table's indices are
/// 32-bit).
pub fn kbest_sequence(scores: &mut impl SegmentScores, k: usize) -> Result<Vec<Decoded>> {
    let (len, kd, c) = (scores.len(), scores.max_duration(), scores.labels());
    if (kd as u128) * (c as u128) > u32::MAX as u128 || k as u128 > u32::MAX as u128 {
        return Err(Error::Unsupported {
            backend: "k-best".into(),
            what: format!("K·C = {kd}·{c} or k = {k} above 2^32"),
        });
    }
    if k == 0 || len == 0 {
        return Ok(Vec::new());
    }
    let mut table = Table {
        c,
        entries: Vec::new(),
        offsets: Vec::with_capacity(len * c + 1),
    };
    table.offsets.push(0);
    let mut lane = vec![NEG; kd * c];
    let mut heap = BinaryHeap::with_capacity(kd * c);
    for t in 1..=len {
        let n = kd.min(t);
        for j in 0..c {
            scores.ending(t, j, &mut lane);
            heap.clear();
            for d in 1..=n {
                let row = &lane[(d - 1) * c..d * c];
                if d == t {
                    let w = row.iter().copied().fold(NEG, f64::max);
                    if w > NEG {
                        heap.push(Cand {
                            score: w,
                            d,
                            i: 0,
                            r: 0,
                        });
                    }
                    continue;
                }
                for (i, &w) in row.iter().enumerate() {
                    if let (true, Some(head)) = (w > NEG, table.list(t - d, i).first()) {
                        heap.push(Cand {
                            score: head.score + w,
                            d,
                            i,
                            r: 0,
                        });
                    }
                }
            }
            let mut taken = 0;
            while taken < k {
                let Some(x) = heap.pop() else { break };
                table.entries.push(Entry {
                    score: x.score,
                    back: ((x.d - 1) * c + x.i) as u32,
                    rank: x.r as u32,
                });
                taken += 1;
                // A first segment (d = t) is one candidate; any other extends a list.
                let next = (x.d < t).then(|| table.list(t - x.d, x.i).get(x.r + 1));
                if let Some(Some(next)) = next {
                    let w = lane[(x.d - 1) * c + x.i];
                    heap.push(Cand {
                        score: next.score + w,
                        r: x.r + 1,
                        ..x
                    });
                }
            }
            table.offsets.push(table.entries.len());
        }
    }
    // The final merge over the last label: ties to the smaller label, then the smaller rank.
    heap.clear();
    for j in 0..c {
        if let Some(head) = table.list(len, j).first() {
            heap.push(Cand {
                score: head.score,
                d: 0,
                i: j,
                r: 0,
            });
        }
    }
    let mut out = Vec::new();
    while out.len() < k {
        let Some(x) = heap.pop() else { break };
        out.push(Decoded {
            score: x.score,
            segments: trace(&table, len, x.i, x.r),
        });
        if let Some(next) = table.list(len, x.i).get(x.r + 1) {
            heap.push(Cand {
                score: next.score,
                r: x.r + 1,
                ..x
            });
        }
    }
    Ok(out)
}

/// The segmentation of rank `r` in the list of `(len, last)`.
fn trace(table: &Table, len: usize, last: usize, r: usize) -> Vec<Segment> {
    let (c, mut t, mut j, mut r) = (table.c, len, last, r);
    let mut segments = Vec::new();
    while t > 0 {
        let e = table.list(t, j)[r];
        let (d, i) = (e.back as usize / c + 1, e.back as usize % c);
        segments.push(Segment::new(t - d, d, j));
        t -= d;
        j = i;
        r = e.rank as usize;
    }
    segments.reverse();
    segments
}

/// Bytes [`kbest_sequence`] allocates for a sequence of `len` positions with durations up
/// to `kd`, `c` labels and `k` best, at most: the table of at most `len·C·k` entries of 16
/// bytes (counted twice: its vector grows by doubling) and its `len·C + 1` offsets, the lane
/// of `kd·C` scores, the heap of `kd·C` candidates, and the result's `k` segmentations of at
/// most `len` segments (24 bytes each).
pub fn kbest_bytes(len: usize, kd: usize, c: usize, k: usize) -> ByteCount {
    ByteCount::bytes(&[len, c, k, 32])
        + ByteCount::bytes(&[len.saturating_mul(c).saturating_add(1), 8])
        + ByteCount::f64s(&[kd, c])
        + ByteCount::bytes(&[kd, c, 32])
        + ByteCount::bytes(&[k, len.saturating_add(1), 24])
}

/// An engine that finds the `k` best segmentations of each sequence (model §7, "k best").
///
/// Implementations run [`kbest_sequence`] on their own [`SegmentScores`] of each sequence,
/// so every engine gives the same lists, ties included.
pub trait KBest<F: Scalar>: EngineInfo {
    /// The `k` highest-scoring segmentations of every sequence with a finite score, best
    /// first (fewer when fewer exist; none for a sequence with no finite segmentation or
    /// for `k = 0`); ties as [`kbest_sequence`] says.
    fn kbest(&self, problem: &Problem<'_, F>, k: usize) -> Result<Vec<Vec<Decoded>>>;
    /// Upper bound of the working memory in bytes of [`KBest::kbest`] with `k` on
    /// `query`'s shape, form and threads (its operation is not read), the returned lists
    /// included; an overflow is [`Error::Unsupported`].
    fn kbest_memory_required(&self, query: &Query, k: usize) -> Result<u64>;
}
