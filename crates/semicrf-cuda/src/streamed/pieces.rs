//! One long sequence's Viterbi decoded as overlapping pieces at once
//! ([`CudaEngine::viterbi_pieces`]).
//!
//! A step of the forward sweep needs the step before it, so one sequence keeps one thread
//! block (and its helpers) on its critical path while most of the device waits. Cut into `n`
//! chunks, piece `i` covers its chunk and `overlap` rows before it, and starts there as a
//! sequence starts (the model's start scores); the pieces run as one batch.
//!
//! **Why the result is the one sweep's.** Two pieces' `u` (the best score of a path whose next
//! segment starts at a position with a label, before its begin boundary) over the rows they
//! share become *parallel*, equal up to one constant, once the best paths into those rows no
//! longer depend on where each piece began. In the max-plus algebra, states that differ by a
//! constant stay so under the recurrence, and adding a constant to every entry changes no
//! maximum's argument: from `K` consecutive parallel rows on (every window of the next step
//! holds only those starts), the two pieces' backpointers are equal. Piece 0 is the sweep
//! from the sequence's start; by induction, piece `i` is that sweep's from the first row `x_i`
//! past `K` rows parallel to piece `i − 1` where piece `i − 1` is already. The traceback reads
//! each row from the last piece verified there, and the score is the last piece's plus the
//! constants between the pieces.
//!
//! Parallel means: every label `-inf` in both pieces or finite in both, and every difference
//! within `2⁻⁴⁰·max(1, M)` of the row run's first (`M` the sequence's magnitude bound, the
//! accuracy GUARANTEES.md gives scores). So the segments are those of one sweep up to ties
//! within that accuracy, which rounding decides in any engine.
//!
//! A boundary whose pieces do not become parallel within the rows they share (the best paths
//! keep depending on the start for more than `overlap` rows: a long stretch with nothing to
//! decide it) is run again with twice its overlap, until it is verified or its piece starts at
//! row 0, where it is the one sweep itself.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use semicrf_core::{Decoded, PotentialSource, Result, Scalar, StreamedPotentials, range};

use super::trace::{MaxForward, trace_in_blocks, trace_rows};
use super::upload::upload;
use crate::call::StreamCall;
use crate::engine::CudaEngine;

/// How the last split decoding on a thread went ([`CudaEngine::take_last_split`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SplitReport {
    /// The sequence's length.
    pub len: usize,
    /// Attempts run: 1 where every piece was verified in the first.
    pub attempts: usize,
    /// Each piece of the last attempt: the row it starts at, the first row of its own share
    /// (the chunk it decodes), and the row from which it was read (where it met the piece
    /// before; row 0 for a piece that starts there).
    pub pieces: Vec<(usize, usize, usize)>,
    /// Time of all attempts spent computing and copying the pieces' potentials to the device.
    pub upload: Duration,
    /// Time of all attempts in the forward sweeps.
    pub sweep: Duration,
    /// Time of all attempts in the verification and the traceback.
    pub check: Duration,
}

thread_local! {
    static LAST: RefCell<Option<SplitReport>> = const { RefCell::new(None) };
}

/// The report of the last split decoding on this thread, taken.
pub(crate) fn take_last_split() -> Option<SplitReport> {
    LAST.with(|l| l.borrow_mut().take())
}

/// The first row of chunk `i` of `n` of a sequence of length `len`: `i·len/n`.
fn share(i: usize, n: usize, len: usize) -> usize {
    i * len / n
}

/// The overlap a piece starts with for `asked` and the longest duration `k`: at least `4·K`,
/// room for `K` parallel rows and for the paths to meet before them.
pub(crate) fn overlap(asked: usize, k: usize) -> usize {
    asked.max(4 * k)
}

/// The first and last row (exclusive) of each of `n` pieces of a sequence of length `len`:
/// chunk `i` is `[share(i), share(i + 1))`, its piece starts `overlaps[i]` rows before it
/// (at 0 at the earliest).
pub(crate) fn ranges(len: usize, overlaps: &[usize]) -> Vec<(usize, usize)> {
    let n = overlaps.len();
    (0..n)
        .map(|i| {
            let (p, q) = (share(i, n, len), share(i + 1, n, len));
            (p.saturating_sub(overlaps[i]), q)
        })
        .collect()
}

/// How many pieces a sequence of length `len` is cut into, for `pieces` asked and `overlap`
/// rows before each chunk: at most one a chunk of `overlap` rows, so that the overlaps cost
/// at most the sequence again; 1 (no split) below two.
pub(crate) fn count(len: usize, pieces: usize, overlap: usize) -> usize {
    let n = pieces.min(len / overlap.max(1));
    if n < 2 { 1 } else { n }
}

/// What splitting needs of the pieces' forward sweeps, wherever they ran: rows `[a, b)` (local
/// to a piece, `C` values each) of `u` and of the backpointers, and the last `α`.
pub(crate) trait Sweeps {
    fn u(&self, piece: usize, a: usize, b: usize) -> Result<Vec<f64>>;
    fn bp(&self, piece: usize, a: usize, b: usize) -> Result<(Vec<i32>, Vec<i32>)>;
    fn last(&self, piece: usize) -> Result<Vec<f64>>;
}

/// A scan for `k` consecutive parallel rows of two pieces.
pub(crate) struct Parallel {
    k: usize,
    tol: f64,
    /// The first row of the current run of parallel rows.
    from: usize,
    /// The run's difference (its first finite one).
    delta: Option<f64>,
}

impl Parallel {
    pub(crate) fn new(k: usize, tol: f64, from: usize) -> Self {
        Parallel {
            k,
            tol,
            from,
            delta: None,
        }
    }

    /// Row `r` of both pieces (`a` − `b` is the difference): the first row past `k`
    /// consecutive parallel rows and their difference, once there are.
    pub(crate) fn row(&mut self, r: usize, a: &[f64], b: &[f64]) -> Option<(usize, f64)> {
        let parallel = a.iter().zip(b).all(|(&x, &y)| {
            if x == f64::NEG_INFINITY && y == f64::NEG_INFINITY {
                return true;
            }
            if !(x.is_finite() && y.is_finite()) {
                return false;
            }
            let d = x - y;
            match self.delta {
                None => {
                    self.delta = Some(d);
                    true
                }
                Some(delta) => (d - delta).abs() <= self.tol,
            }
        });
        if !parallel {
            self.from = r + 1;
            self.delta = None;
            return None;
        }
        (r + 1 - self.from >= self.k).then(|| (r + 1, self.delta.unwrap_or(0.0)))
    }
}

/// Where piece `i` (of `ranges`) becomes parallel to piece `i − 1`: the first row (global)
/// past `k` consecutive parallel rows among those they share, and piece `i − 1`'s values less
/// piece `i`'s there; `None` where it does not within them. Reads `rows` rows at a time.
fn meet(
    s: &dyn Sweeps,
    ranges: &[(usize, usize)],
    i: usize,
    (k, tol, rows): (usize, f64, usize),
    c: usize,
) -> Result<Option<(usize, f64)>> {
    let ((lo0, hi0), (lo1, _)) = (ranges[i - 1], ranges[i]);
    let mut scan = Parallel::new(k, tol, lo1);
    let mut r = lo1;
    while r < hi0 {
        let e = (r + rows.max(1)).min(hi0);
        let (a, b) = (s.u(i - 1, r - lo0, e - lo0)?, s.u(i, r - lo1, e - lo1)?);
        for x in r..e {
            let at = (x - r) * c..(x - r + 1) * c;
            if let Some(found) = scan.row(x, &a[at.clone()], &b[at]) {
                return Ok(Some(found));
            }
        }
        r = e;
    }
    Ok(None)
}

/// Where each piece meets the one before ([`meet`]; `None` for piece 0, for a piece that
/// starts at row 0, and where it does not meet it within the rows they share).
pub(crate) fn meets(
    s: &dyn Sweeps,
    ranges: &[(usize, usize)],
    how: (usize, f64, usize),
    c: usize,
) -> Result<Vec<Option<(usize, f64)>>> {
    (0..ranges.len())
        .map(|i| {
            if ranges[i].0 == 0 {
                Ok(None)
            } else {
                meet(s, ranges, i, how, c)
            }
        })
        .collect()
}

/// From which row (global) each piece is the one sweep's, and the constant to add to its
/// values (`None` where not verified): a piece that starts at row 0 (piece 0 among them)
/// from row 0, every other from where it meets the one before if that one is verified.
pub(crate) fn verify(
    ranges: &[(usize, usize)],
    meets: &[Option<(usize, f64)>],
) -> Vec<Option<(usize, f64)>> {
    let mut out: Vec<Option<(usize, f64)>> = Vec::with_capacity(ranges.len());
    for (i, &(lo, _)) in ranges.iter().enumerate() {
        out.push(if lo == 0 {
            Some((0, 0.0))
        } else {
            match (out[i - 1], meets[i]) {
                (Some((x0, off0)), Some((y, d))) => Some((x0.max(y), off0 + d)),
                _ => None,
            }
        });
    }
    out
}

/// The Viterbi decoding of the sequence of length `len` from verified pieces (`from`: the
/// first row each is read at, increasing but for pieces from row 0; `off`: the constant of
/// the last), its backpointers read `rows` rows at a time; `en`: the end scores.
pub(crate) fn decode(
    s: &dyn Sweeps,
    ranges: &[(usize, usize)],
    verified: &[(usize, f64)],
    (len, c, rows): (usize, usize, usize),
    en: &[f64],
) -> Result<Decoded> {
    let owner = |r: usize| -> usize {
        verified
            .iter()
            .rposition(|&(x, _)| x <= r)
            .expect("piece 0 is read from row 0")
    };
    let fetch = |lo: usize, hi: usize| -> Result<(Vec<i32>, Vec<i32>)> {
        let mut d = Vec::with_capacity((hi - lo) * c);
        let mut l = Vec::with_capacity((hi - lo) * c);
        let mut r = lo;
        while r < hi {
            let p = owner(r);
            // The piece's rows up to the next piece read after it.
            let end = verified[p + 1..]
                .iter()
                .map(|&(x, _)| x)
                .filter(|&x| x > r)
                .min()
                .unwrap_or(hi)
                .min(hi);
            let lo_p = ranges[p].0;
            let (a, b) = s.bp(p, r - lo_p, end - lo_p)?;
            d.extend(a);
            l.extend(b);
            r = end;
        }
        Ok((d, l))
    };
    let n = ranges.len();
    let last = s.last(n - 1)?;
    let finals = |j: usize| last[j] + en[j];
    let mut best = trace_in_blocks(len, len, c, false, rows, finals, fetch)?;
    best.score += verified[n - 1].1;
    Ok(best)
}

/// The device's sweeps of a batch of pieces.
struct OnDevice<'c, 'g> {
    call: &'c StreamCall<'g>,
    f: &'c MaxForward,
}

impl Sweeps for OnDevice<'_, '_> {
    fn u(&self, piece: usize, a: usize, b: usize) -> Result<Vec<f64>> {
        let (t, c) = (self.call.shape.len, self.call.shape.labels);
        let u = self.f.u.as_ref().expect("the pieces' sweep saves u");
        let at = piece * (t + 1) * c;
        self.call.back_all_of(&u.slice(at + a * c..at + b * c))
    }
    fn bp(&self, piece: usize, a: usize, b: usize) -> Result<(Vec<i32>, Vec<i32>)> {
        self.f.rows(self.call, piece, a, b)
    }
    fn last(&self, piece: usize) -> Result<Vec<f64>> {
        let c = self.call.shape.labels;
        self.call
            .back(&self.f.last.slice(piece * c..(piece + 1) * c))
    }
}

/// Bytes of device memory the pieces of `ranges` take: the position tensors (`tensors` of
/// `bytes` a value), `u` and the backpointers.
pub(crate) fn device_bytes(
    ranges: &[(usize, usize)],
    c: usize,
    tensors: usize,
    bytes: usize,
) -> u64 {
    let t = ranges.iter().map(|&(lo, hi)| hi - lo).max().unwrap_or(0) as u64;
    let n = ranges.len() as u64 * (t + 1) * c as u64;
    n * (tensors * bytes) as u64 + n * 8 + n * 8
}

/// An attempt's outcome: the decoding and the row each piece is read from, or which pieces
/// did not meet the one before.
pub(crate) type Outcome<D> = std::result::Result<D, Vec<bool>>;

/// One attempt on pieces `ranges` whose sweeps `s` ran: the decoding where every piece is
/// verified (with the row each is read from), else which pieces did not meet the one before.
pub(crate) fn attempt(
    s: &dyn Sweeps,
    ranges: &[(usize, usize)],
    (len, k, c): (usize, usize, usize),
    (tol, rows): (f64, usize),
    en: &[f64],
) -> Result<Outcome<(Decoded, Vec<usize>)>> {
    let meets = meets(s, ranges, (k, tol, rows), c)?;
    let verified = verify(ranges, &meets);
    if verified.iter().all(Option::is_some) {
        let verified: Vec<(usize, f64)> = verified.into_iter().flatten().collect();
        let from = verified.iter().map(|&(x, _)| x).collect();
        return Ok(Ok((
            decode(s, ranges, &verified, (len, c, rows), en)?,
            from,
        )));
    }
    Ok(Err(meets
        .iter()
        .zip(ranges)
        .map(|(m, &(lo, _))| m.is_none() && lo > 0)
        .collect()))
}

/// Attempts ([`attempt`], through `run` on each split) from `overlap` rows before each of
/// `n` chunks of a sequence of length `len` (at least [`overlap`]'s), each again with twice the
/// overlap before the pieces that did not meet: a piece that starts at row 0 is verified,
/// so this ends.
pub(crate) fn in_pieces(
    (len, k): (usize, usize),
    n: usize,
    overlap: usize,
    mut run: impl FnMut(&[(usize, usize)]) -> Result<Outcome<Decoded>>,
) -> Result<Decoded> {
    let mut overlaps = vec![self::overlap(overlap, k); n];
    loop {
        match run(&ranges(len, &overlaps))? {
            Ok(d) => return Ok(d),
            Err(failed) => {
                for (o, f) in overlaps.iter_mut().zip(failed) {
                    if f {
                        *o = o.saturating_mul(2);
                    }
                }
            }
        }
    }
}

/// The decoding of `p` (one sequence, a static transition) in `n >= 2` pieces of `overlap`
/// rows before each chunk: see the module.
pub(crate) fn viterbi<F: Scalar, P: PotentialSource<F> + ?Sized>(
    engine: &CudaEngine,
    p: &StreamedPotentials<'_, F, P>,
    n: usize,
    overlap: usize,
) -> Result<Decoded> {
    let sh = p.shape();
    let (len, k, c) = (p.lengths()[0], sh.max_duration, sh.labels);
    let rows = engine.rows_per_chunk(c);
    // The verification and the traceback read larger blocks than the upload's chunks.
    let blocks = trace_rows(rows, c);
    let gpu = engine.gpu()?;
    let backend = engine.backend();
    let mut report = SplitReport {
        len,
        ..SplitReport::default()
    };
    LAST.with(|l| *l.borrow_mut() = None);
    let d = in_pieces((len, k), n, overlap, |ranges| {
        let clock = Instant::now();
        let layout: Vec<(usize, usize, usize)> =
            ranges.iter().map(|&(lo, hi)| (0, lo, hi - lo)).collect();
        let up = upload(&gpu, &backend, p, rows, Some(&layout))?;
        range::check_finite_results(&up.magnitudes, &up.model.lengths)?;
        let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
        let call = StreamCall::new(&gpu, &backend, &up.model, up.source(&gpu), &[], None)?;
        report.upload += clock.elapsed();
        let clock = Instant::now();
        let f = MaxForward::run(&call, true)?;
        gpu.stream.synchronize().map_err(|e| call.err(e))?;
        report.sweep += clock.elapsed();
        let clock = Instant::now();
        let s = OnDevice { call: &call, f: &f };
        let tol = 2f64.powi(-40) * up.magnitudes[0].bound.max(1.0);
        let out = attempt(&s, ranges, (len, k, c), (tol, blocks), &up.model.en);
        report.check += clock.elapsed();
        report.attempts += 1;
        let shares = (0..ranges.len()).map(|i| share(i, ranges.len(), len));
        report.pieces = ranges
            .iter()
            .zip(shares)
            .map(|(&(lo, _), p)| (lo, p, 0))
            .collect();
        if let Ok(Ok((_, from))) = &out {
            for (piece, x) in report.pieces.iter_mut().zip(from) {
                piece.2 = *x;
            }
        }
        out.map(|r| r.map(|(d, _)| d))
    })?;
    LAST.with(|l| *l.borrow_mut() = Some(report));
    Ok(d)
}

#[cfg(test)]
#[path = "pieces_tests.rs"]
mod tests;
