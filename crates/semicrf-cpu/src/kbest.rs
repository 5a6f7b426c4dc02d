//! k-best decoding on the CPU engines: the core's one implementation
//! ([`kbest_sequence`]) over each engine's segment scores, parallel over the batch.
//!
//! - [`ExactEngine`] and [`ScanEngine`]: the edges of one sequence at a time (materialised
//!   from structured input as for their Viterbi, read in place for edge input), through
//!   their lanes;
//! - [`StreamingEngine`]: [`StructuredScores`], the segment scores computed from the
//!   structured tensors, so no edge is ever materialised.
//!
//! Per sequence in flight the table holds at most `(L + 1)·C·k` entries of 16 bytes
//! ([`kbest_bytes`]); the streaming engine keeps that whole table too (no checkpointed
//! traceback), so its k-best memory is `O(T·C·k)`, not `O(sqrt(T·K)·C)`.

use semicrf_core::{
    ByteCount, Decoded, Form, KBest, Problem, Query, Result, Scalar, SegmentScores,
    StructuredScores, kbest_bytes, kbest_sequence,
};

use crate::edge::lanes::{Lanes, sequence, with_lanes};
use crate::par::{in_flight, map_indexed};
use crate::streaming::edges_unsupported;
use crate::{ExactEngine, Parallelism, ScanEngine, StreamingEngine};

/// The segment scores of one sequence's edges, read a lane at a time.
struct LaneScores<'l, L: Lanes> {
    lanes: &'l L,
    len: usize,
    buf: Vec<L::Elem>,
}

impl<'l, L: Lanes> LaneScores<'l, L> {
    fn new(lanes: &'l L, len: usize) -> Self {
        let buf = vec![L::Elem::default(); lanes.c()];
        LaneScores { lanes, len, buf }
    }
}

impl<L: Lanes> SegmentScores for LaneScores<'_, L> {
    fn len(&self) -> usize {
        self.len
    }
    fn max_duration(&self) -> usize {
        self.lanes.k().min(self.len)
    }
    fn labels(&self) -> usize {
        self.lanes.c()
    }
    fn ending(&mut self, t: usize, j: usize, out: &mut [f64]) {
        let c = self.lanes.c();
        for d in 1..=self.max_duration().min(t) {
            let w = self.lanes.lane(t - d, d, j, &mut self.buf);
            for (o, &x) in out[(d - 1) * c..d * c].iter_mut().zip(w) {
                *o = x.as_f64();
            }
        }
    }
}

/// k best over the edges of every sequence (the exact and scan engines).
fn over_edges<F: Scalar>(
    par: Parallelism,
    problem: &Problem<'_, F>,
    k: usize,
) -> Result<Vec<Vec<Decoded>>> {
    let lengths = problem.lengths();
    map_indexed(par, lengths.len(), |b| -> Result<Vec<Decoded>> {
        let edges = sequence(problem, b)?;
        with_lanes!(&edges, |lanes| {
            let mut scores = LaneScores::new(&lanes, lengths[b]);
            kbest_sequence(&mut scores, k)
        })
    })
    .into_iter()
    .collect()
}

/// Bytes per sequence of the batch (result slots) and the fixed allowance.
const PER_SEQUENCE: usize = 128;
const FIXED: usize = 64 * 1024;

/// The working memory of k best on `query` with `k`: per sequence in flight, its edges
/// when `materialise` and the input is structured (`T·min(K, T)·C²` `f64`), the table
/// ([`kbest_bytes`]) and a lane; per sequence of the batch, its returned lists.
fn memory(
    backend: &str,
    query: &Query,
    k: usize,
    par: Parallelism,
    materialise: bool,
) -> Result<u64> {
    let sh = query.shape;
    let (b, t, c) = (sh.batch, sh.len, sh.labels);
    let kd = sh.max_duration.min(t);
    let edges = match query.form {
        Form::Structured { .. } if materialise => ByteCount::f64s(&[t, kd, c, c]),
        _ => ByteCount::ZERO,
    };
    let lane = ByteCount::bytes(&[usize::try_from(query.dtype_bytes).unwrap_or(usize::MAX), c]);
    let per_seq = edges + kbest_bytes(t, kd, c, k) + lane;
    let lists = ByteCount::bytes(&[k, t.saturating_add(1), 24]) + ByteCount::bytes(&[PER_SEQUENCE]);
    let p = in_flight(par, b, query.threads);
    (per_seq * p + lists * b + ByteCount::bytes(&[FIXED])).finish(backend, sh)
}

/// k best on the edge program's input: every query the engine's
/// [`check`](semicrf_core::EngineInfo::check) accepts.
impl<F: Scalar> KBest<F> for ExactEngine {
    fn kbest(&self, problem: &Problem<'_, F>, k: usize) -> Result<Vec<Vec<Decoded>>> {
        over_edges(self.parallelism, problem, k)
    }
    /// Per sequence in flight: its materialised edges (structured input), the table
    /// ([`kbest_bytes`]) and a lane; per sequence: its returned lists.
    fn kbest_memory_required(&self, query: &Query, k: usize) -> Result<u64> {
        memory("cpu/exact", query, k, self.parallelism, true)
    }
}

/// The same as the exact engine's: k best keeps no checkpoints.
impl<F: Scalar> KBest<F> for ScanEngine {
    fn kbest(&self, problem: &Problem<'_, F>, k: usize) -> Result<Vec<Vec<Decoded>>> {
        over_edges(self.parallelism, problem, k)
    }
    /// As [`ExactEngine`]'s.
    fn kbest_memory_required(&self, query: &Query, k: usize) -> Result<u64> {
        memory("cpu/scan", query, k, self.parallelism, true)
    }
}

/// Structured input only, from the tensors ([`StructuredScores`]): no edges, but the whole
/// `O(T·C·k)` table.
impl<F: Scalar> KBest<F> for StreamingEngine {
    fn kbest(&self, problem: &Problem<'_, F>, k: usize) -> Result<Vec<Vec<Decoded>>> {
        let Problem::Structured(p) = problem else {
            return Err(edges_unsupported());
        };
        map_indexed(self.parallelism, p.shape().batch, |b| {
            kbest_sequence(&mut StructuredScores::new(p, b), k)
        })
        .into_iter()
        .collect()
    }
    /// Per sequence in flight: the table ([`kbest_bytes`]); per sequence: its returned
    /// lists. Edge input is [`Error::Unsupported`](semicrf_core::Error::Unsupported).
    fn kbest_memory_required(&self, query: &Query, k: usize) -> Result<u64> {
        if query.form == Form::Edges {
            return Err(edges_unsupported());
        }
        memory("cpu/streaming", query, k, self.parallelism, false)
    }
}
