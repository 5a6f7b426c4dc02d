//! [`SourceEngine`] for [`CudaEngine`]: the rows of a [`PotentialSource`] go to the device
//! chunk by chunk (as many chunks filled at once as the rayon pool has threads, then checked
//! and sent in order) through page-locked memory (`transfer::rows`: the host fills one half
//! of the buffer while the bus moves the other), into `(B, T, C)` arrays in device memory that
//! the streaming kernels read as they read potentials already there; the backward pass's
//! position-wise results come back the same way, chunk by chunk, to a [`GradientSink`].
//!
//! The host holds a chunk of rows for each thread of the pool (64 MiB of them at most) and the
//! page-locked buffer, never a `(B, T, C)` array;
//! the device holds the whole position tensors, in the caller's precision, as for
//! [`Engine`](semicrf_core::Engine) calls.

mod pieces;

pub use pieces::SplitReport;
pub(crate) use pieces::take_last_split;

use std::cell::RefCell;

use bytemuck::Pod;
use cudarc::driver::{CudaSlice, CudaView, DeviceRepr, ValidAsZeroBits};
use rayon::prelude::*;
use semicrf_core::range::{self, Magnitude};
use semicrf_core::{
    Decoded, EngineInfo, Error, Form, GradientRows, GradientSink, Gradients, PotentialSource,
    Query, Result, RowCheck, Scalar, Scanned, Semiring, SourceEngine, SourceRows, StreamedBackward,
    StreamedPotentials, decode_best,
};

use crate::call::{Model, Source, StreamCall, Targets};
use crate::device::{Gpu, driver};
use crate::engine::CudaEngine;
use crate::kernel::SemiringId;
use crate::streaming::{self, BackwardResults};
use crate::transfer::rows::{HALF, RowDownload, RowUpload};
use crate::transfer::upload::Input;

/// A streamed problem's position tensors on the device, with what the host saw of them.
pub(crate) struct Uploaded {
    pub(crate) model: Model,
    /// Scores, then the boundaries the source gives, `(B, T, C)` each (zeros past each
    /// length).
    input: Input,
    pub(crate) magnitudes: Vec<Magnitude>,
}

impl Uploaded {
    /// Where the kernels read the position tensors.
    pub(crate) fn source(&self, gpu: &Gpu) -> Source<'static, 'static, f64> {
        let sh = self.model.shape;
        let n = sh.batch * sh.len * sh.labels;
        let (base, e) = (self.input.ptr(gpu), self.input.elem());
        let bb = self.model.has_bb.then(|| base.add(e * n));
        let eb = self
            .model
            .has_eb
            .then(|| base.add(e * n * (1 + usize::from(self.model.has_bb))));
        Source::Device {
            sc: base,
            bb,
            eb,
            f32: self.input.f32(),
        }
    }
}

/// Which rows of a source each sequence on the device holds: `(sequence, first row, rows)`,
/// in order (a sequence's pieces by their first row).
pub(crate) type Layout = [(usize, usize, usize)];

/// The rows of `p`'s source on the device, `rows` at a time, each checked as it is read
/// ([`RowCheck`]): in `f32` for `f32` input, else in `f64` (as [`Engine`] calls store them).
/// The device's sequences are those of `layout` (`None`: the source's own), each with the
/// magnitude of the source sequence it is cut from.
///
/// [`Engine`]: semicrf_core::Engine
pub(crate) fn upload<F: Scalar, P: PotentialSource<F> + ?Sized>(
    gpu: &Gpu,
    backend: &str,
    p: &StreamedPotentials<'_, F, P>,
    rows: usize,
    layout: Option<&Layout>,
) -> Result<Uploaded> {
    let own: Vec<(usize, usize, usize)>;
    let layout = match layout {
        Some(l) => l,
        None => {
            own = p
                .lengths()
                .iter()
                .enumerate()
                .map(|(b, &l)| (b, 0, l))
                .collect();
            &own
        }
    };
    let lengths: Vec<usize> = layout.iter().map(|&(_, _, n)| n).collect();
    let sh = semicrf_core::Shape {
        batch: layout.len(),
        len: lengths.iter().copied().max().unwrap_or(0),
        ..p.shape()
    };
    let src = p.source();
    let (has_bb, has_eb) = (src.has_begin_boundary(), src.has_end_boundary());
    let model = Model::of_shared(p.shared(), sh, lengths, has_bb, has_eb);
    let (input, magnitudes) = if F::BYTES == 4 {
        let (d, m) = upload_as(gpu, backend, p, (sh, layout), rows, |x: F| {
            x.as_f64() as f32
        })?;
        (Input::F32(d), m)
    } else {
        let (d, m) = upload_as(gpu, backend, p, (sh, layout), rows, |x: F| x.as_f64())?;
        (Input::F64(d), m)
    };
    Ok(Uploaded {
        model,
        input,
        magnitudes,
    })
}

/// [`upload`] into a device array of `T`, each value converted by `to`, for the device's
/// shape and layout.
fn upload_as<F, P, T>(
    gpu: &Gpu,
    backend: &str,
    p: &StreamedPotentials<'_, F, P>,
    (sh, layout): (semicrf_core::Shape, &Layout),
    rows: usize,
    to: impl Fn(F) -> T + Copy + Sync,
) -> Result<(CudaSlice<T>, Vec<Magnitude>)>
where
    F: Scalar,
    P: PotentialSource<F> + ?Sized,
    T: Pod + DeviceRepr + ValidAsZeroBits + Send,
{
    let err = |e| driver(backend, e);
    let (bn, t, c) = (sh.batch, sh.len, sh.labels);
    let src = p.source();
    let n = bn * t * c;
    let tensors = 1 + usize::from(src.has_begin_boundary()) + usize::from(src.has_end_boundary());
    let mut dst = gpu.zeros::<T>(tensors * n).map_err(err)?;
    let rho = rows.clamp(1, t.max(1));
    // Chunks filled at once, on the rayon pool's threads (a source may compute its rows, as
    // the gene finder's does from the DNA): one a thread, at most 64 MiB of them.
    let bytes = tensors * rho * c * F::BYTES as usize;
    let wave = rayon::current_num_threads().clamp(1, ((64 << 20) / bytes.max(1)).max(1));
    let chunk = || vec![F::zero(); rho * c];
    let mut bufs: Vec<Chunk<F>> = (0..wave)
        .map(|_| {
            (
                chunk(),
                src.has_begin_boundary().then(chunk),
                src.has_end_boundary().then(chunk),
            )
        })
        .collect();
    let eb_at = n * (1 + usize::from(src.has_begin_boundary()));
    let mut up = RowUpload::new(gpu).map_err(err)?;
    let mut magnitudes: Vec<Magnitude> = Vec::with_capacity(bn);
    // The checks of the source sequence being read, and the device sequences cut from it.
    let mut check: Option<(usize, RowCheck, usize)> = None;
    let done_with = |check: Option<(usize, RowCheck, usize)>, magnitudes: &mut Vec<_>| {
        if let Some((seq, chk, cut)) = check {
            let m = chk.magnitude(p.shared_bound(), p.lengths()[seq]);
            magnitudes.extend(std::iter::repeat_n(m, cut));
        }
    };
    for (b, &(seq, lo, len)) in layout.iter().enumerate() {
        if check.as_ref().is_none_or(|(s, _, _)| *s != seq) {
            done_with(check.take(), &mut magnitudes);
            check = Some((seq, RowCheck::new(seq, c), 0));
        }
        let (_, chk, cut) = check.as_mut().expect("the checks of this sequence");
        *cut += 1;
        let starts: Vec<usize> = (0..len).step_by(rho).collect();
        for group in starts.chunks(wave) {
            // Filled and checked on the pool's threads (each chunk from the rows seen before
            // the wave, or its own first row: the chunks of a wave follow one another).
            let seen = chk.seen();
            let scanner = &*chk;
            let filled: Vec<Result<Scanned>> = bufs[..group.len()]
                .par_iter_mut()
                .zip(group)
                .enumerate()
                .map(|(i, ((sc, bb, eb), &t0))| {
                    let m = rho.min(len - t0) * c;
                    src.fill(seq, lo + t0, rows_of(sc, bb, eb, m))?;
                    let from = if i == 0 { seen } else { seen.max(lo + t0) };
                    scanner.scan(from, lo + t0, &rows_of(sc, bb, eb, m))
                })
                .collect();
            // In order: the first failure is the first chunk's that failed.
            for (((sc, bb, eb), &t0), done) in bufs.iter_mut().zip(group).zip(filled) {
                chk.absorb(done?);
                let m = rho.min(len - t0) * c;
                let at = (b * t + t0) * c;
                up.put(&sc[..m], to, &mut dst, at).map_err(err)?;
                if let Some(v) = bb {
                    up.put(&v[..m], to, &mut dst, n + at).map_err(err)?;
                }
                if let Some(v) = eb {
                    up.put(&v[..m], to, &mut dst, eb_at + at).map_err(err)?;
                }
            }
        }
    }
    done_with(check, &mut magnitudes);
    up.finish().map_err(err)?;
    Ok((dst, magnitudes))
}

/// A chunk's buffers: scores, and the boundaries the source gives.
type Chunk<F> = (Vec<F>, Option<Vec<F>>, Option<Vec<F>>);

/// The first `m` elements of each chunk buffer, as a source fills them.
fn rows_of<'r, F>(
    sc: &'r mut [F],
    bb: &'r mut Option<Vec<F>>,
    eb: &'r mut Option<Vec<F>>,
    m: usize,
) -> SourceRows<'r, F> {
    SourceRows::new(
        &mut sc[..m],
        bb.as_deref_mut().map(|v| &mut v[..m]),
        eb.as_deref_mut().map(|v| &mut v[..m]),
    )
}

/// The rows of a backward pass's position-wise results to `sink`, each sequence from its
/// last rows to its first, at most `rows` at a time: the copies of the next chunk run while
/// the sink takes this one.
fn deliver<G: GradientSink + ?Sized>(
    call: &StreamCall<'_>,
    res: &BackwardResults<'_>,
    rows: usize,
    sink: &G,
) -> Result<()> {
    let sh = call.shape;
    let (t, c) = (sh.len, sh.labels);
    let backend = call.backend;
    let sc = res.gsc.view(backend)?;
    let bb = res.gbb.as_ref().map(|b| b.view(backend)).transpose()?;
    let eb = res.geb.as_ref().map(|b| b.view(backend)).transpose()?;
    let bm = res.bmarg.view(backend)?;
    let tau = 1 + usize::from(bb.is_some()) + usize::from(eb.is_some());
    // Every array of a chunk in one half of the page-locked buffer.
    let fit = (HALF - 64) / (8 * (tau * c + 1));
    if fit == 0 {
        return Err(Error::Unsupported {
            backend: backend.into(),
            what: format!("{c} labels (one row of gradients exceeds {HALF} bytes)"),
        });
    }
    let rho = rows.clamp(1, fit);
    let mut pieces = Vec::new();
    for (b, &len) in call.model.lengths.iter().enumerate() {
        let mut end = len;
        while end > 0 {
            let t0 = end.saturating_sub(rho);
            pieces.push((b, t0, end - t0));
            end = t0;
        }
    }
    let views = |&(b, t0, n): &(usize, usize, usize)| -> Vec<CudaView<'_, f64>> {
        let r = (b * t + t0) * c..(b * t + t0 + n) * c;
        let mut v = vec![sc.slice(r.clone())];
        v.extend(bb.iter().map(|x| x.slice(r.clone())));
        v.extend(eb.iter().map(|x| x.slice(r.clone())));
        v.push(bm.slice(b * t + t0..b * t + t0 + n));
        v
    };
    let mut down = RowDownload::new(call.gpu).map_err(|e| call.err(e))?;
    if let Some(first) = pieces.first() {
        down.fetch(0, &views(first)).map_err(|e| call.err(e))?;
    }
    for (i, piece) in pieces.iter().enumerate() {
        if let Some(next) = pieces.get(i + 1) {
            down.fetch((i + 1) % 2, &views(next))
                .map_err(|e| call.err(e))?;
        }
        let parts = down.take(i % 2).map_err(|e| call.err(e))?;
        let mut it = parts.into_iter();
        let mut next = || it.next().unwrap_or(&[]);
        let g_sc = next();
        let g_bb = bb.is_some().then(&mut next);
        let g_eb = eb.is_some().then(&mut next);
        let g_bm = next();
        sink.put(piece.0, piece.1, GradientRows::new(g_sc, g_bb, g_eb, g_bm))?;
    }
    Ok(())
}

/// Rows `[lo, lo + ρ)` of a sequence's backpointers: `lo`, the durations, the labels.
type Block = (usize, Vec<i32>, Vec<i32>);

/// Viterbi decodings as `streaming::viterbi` computes them (the same kernel, the same
/// backpointers on the device), traced back on the host from blocks of `rows` rows of
/// backpointers read from the device as the traceback reaches them, instead of all of them.
fn viterbi(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, f64>,
    rows: usize,
) -> Result<Vec<Decoded>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = StreamCall::new(gpu, backend, model, src, &[], None)?;
    let f = MaxForward::run(&call, false)?;
    let last = call.back(&f.last)?;
    let (t, c) = (model.shape.len, model.shape.labels);
    (0..model.shape.batch)
        .map(|b| {
            let fetch = |lo: usize, hi: usize| f.rows(&call, b, lo, hi);
            let rows = trace_rows(rows, c);
            let finals = |j: usize| last[b * c + j] + model.en[j];
            trace_in_blocks(model.lengths[b], t, c, model.dd, rows, finals, fetch)
        })
        .collect()
}

/// Rows of backpointers a traceback reads at a time: at least `rows`, and 16 MiB of them
/// (`c` labels) so that few copies move them.
pub(crate) fn trace_rows(rows: usize, c: usize) -> usize {
    rows.max((16 << 20) / (8 * c.max(1)))
}

/// The device buffers of a max-semiring forward: backpointers `(B, T + 1, C)` (durations,
/// labels), the last `α` of each sequence, and, where asked, every `u` `(B, T + 1, C)`.
pub(crate) struct MaxForward {
    pub(crate) bpd: CudaSlice<i32>,
    pub(crate) bpi: CudaSlice<i32>,
    pub(crate) last: CudaSlice<f64>,
    pub(crate) u: Option<CudaSlice<f64>>,
}

impl MaxForward {
    /// The max-semiring forward of `call`'s sequences (their `u` too where `save_u`).
    pub(crate) fn run(call: &StreamCall<'_>, save_u: bool) -> Result<MaxForward> {
        let sh = call.shape;
        let n = sh.batch * (sh.len + 1) * sh.labels;
        let f = MaxForward {
            bpd: call.zeros::<i32>(n)?,
            bpi: call.zeros::<i32>(n)?,
            last: call.zeros::<f64>(sh.batch * sh.labels)?,
            u: if save_u {
                Some(call.zeros::<f64>(n)?)
            } else {
                None
            },
        };
        call.log_forward(SemiringId::Max, None, None, |a| {
            a.bpd = call.ptr(&f.bpd);
            a.bpi = call.ptr(&f.bpi);
            a.last = call.ptr(&f.last);
            a.u = call.opt(&f.u);
        })?;
        call.gpu.mark();
        Ok(f)
    }

    /// Rows `[lo, hi)` of sequence `b`'s backpointers on the host: durations, labels.
    pub(crate) fn rows(
        &self,
        call: &StreamCall<'_>,
        b: usize,
        lo: usize,
        hi: usize,
    ) -> Result<(Vec<i32>, Vec<i32>)> {
        let c = call.shape.labels;
        let at = b * (call.shape.len + 1) * c;
        let r = at + lo * c..at + hi * c;
        Ok((
            call.back_all_of(&self.bpd.slice(r.clone()))?,
            call.back_all_of(&self.bpi.slice(r))?,
        ))
    }
}

/// [`decode_best`] of one sequence of length `len` whose backpointers, `(T + 1, C)` durations
/// and labels (`dd`: the previous label; else the label read at the segment's start, as
/// the max kernels write them), are read `rows` rows at a time by `fetch(lo, hi)` (rows
/// `[lo, hi)`), as the traceback reaches them.
pub(crate) fn trace_in_blocks(
    len: usize,
    t: usize,
    c: usize,
    dd: bool,
    rows: usize,
    finals: impl Fn(usize) -> f64,
    fetch: impl Fn(usize, usize) -> Result<(Vec<i32>, Vec<i32>)>,
) -> Result<Decoded> {
    let rho = rows.clamp(1, t + 1);
    let block: RefCell<Option<Block>> = RefCell::new(None);
    let failed: RefCell<Option<Error>> = RefCell::new(None);
    let at = |x: usize, j: usize| -> (i32, i32) {
        let mut blk = block.borrow_mut();
        if !blk
            .as_ref()
            .is_some_and(|(lo, _, _)| (*lo..*lo + rho).contains(&x))
        {
            let lo = (x + 1).saturating_sub(rho);
            match fetch(lo, (lo + rho).min(t + 1)) {
                Ok((d, i)) => *blk = Some((lo, d, i)),
                Err(e) => {
                    failed.borrow_mut().get_or_insert(e);
                    return (1, 0);
                }
            }
        }
        match blk.as_ref() {
            Some((lo, d, i)) => (d[(x - lo) * c + j], i[(x - lo) * c + j]),
            None => (1, 0),
        }
    };
    let d = decode_best(len, c, finals, |x, j| {
        let (d, i) = at(x, j);
        let d = (d as usize).clamp(1, x);
        let prev = if dd {
            i as usize
        } else if x == d {
            0
        } else {
            at(x - d, j).1 as usize
        };
        (d, prev.min(c - 1))
    });
    match failed.into_inner() {
        Some(e) => Err(e),
        None => Ok(d),
    }
}

impl CudaEngine {
    /// The pieces `problem`'s Viterbi runs in ([`CudaEngine::viterbi_pieces`]), where it is
    /// split: one sequence, a static transition, long enough, and room on the device.
    fn pieces_of<F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Option<usize>> {
        let (asked, overlap) = self.get_viterbi_pieces();
        let [len] = problem.lengths() else {
            return Ok(None);
        };
        let sh = problem.shape();
        let overlap = overlap.max(4 * sh.max_duration);
        let n = pieces::count(*len, asked, overlap);
        if n < 2 || problem.shared().has_duration_dependent_transition() || self.edge_form() {
            return Ok(None);
        }
        let src = problem.source();
        let tensors =
            1 + usize::from(src.has_begin_boundary()) + usize::from(src.has_end_boundary());
        let ranges = pieces::ranges(*len, &vec![overlap; n]);
        let need = pieces::device_bytes(&ranges, sh.labels, tensors, F::BYTES.min(8) as usize);
        let (free, _) = self.memory_info()?;
        Ok((need < free / 10 * 9).then_some(n))
    }

    /// The device of a call on a streamed problem, and its position tensors there.
    fn streamed<F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        p: &StreamedPotentials<'_, F, P>,
    ) -> Result<(std::sync::Arc<Gpu>, Uploaded)> {
        if self.edge_form() {
            return Err(Error::Unsupported {
                backend: self.backend(),
                what: "a potentials source (the streaming algorithm reads one)".into(),
            });
        }
        let gpu = self.gpu()?;
        let rows = self.rows_per_chunk(p.shape().labels);
        let up = upload(&gpu, &self.backend(), p, rows, None)?;
        range::check_finite_results(&up.magnitudes, &up.model.lengths)?;
        Ok((gpu, up))
    }
}

impl<F: Scalar> SourceEngine<F> for CudaEngine {
    fn forward_streamed<S: Semiring, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<S::Value>> {
        let ring = self.semiring::<S>()?;
        let (gpu, up) = self.streamed(problem)?;
        range::check_semiring_of::<S>(&up.magnitudes, &up.model.lengths)?;
        let backend = self.backend();
        let src = up.source(&gpu);
        let out = streaming::forward(&gpu, &backend, &up.model, src, ring, self.linear())?;
        Ok(out.iter().map(|w| S::from_words(&w[..S::WIDTH])).collect())
    }

    fn backward_streamed<P: PotentialSource<F> + ?Sized, G: GradientSink + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
        upstream: &[f64],
        sink: &G,
    ) -> Result<StreamedBackward> {
        semicrf_core::check_upstream(upstream, problem.shape().batch)?;
        let (gpu, up) = self.streamed(problem)?;
        range::check_probabilities_of(&up.magnitudes, &up.model.lengths)?;
        let backend = self.backend();
        let rows = self.rows_per_chunk(problem.shape().labels);
        let then = |call: &StreamCall<'_>, res: BackwardResults<'_>, _| {
            deliver(call, &res, rows, sink)?;
            Ok(StreamedBackward {
                log_z: res.log_z,
                grad: Gradients {
                    scores: None,
                    transition: Some(res.transition),
                    duration: Some(res.duration),
                    start: Some(res.start),
                    end: Some(res.end),
                    begin_boundary: None,
                    end_boundary: None,
                    edges: None,
                },
            })
        };
        let none = Targets::default();
        let src = up.source(&gpu);
        streaming::backward(
            &gpu,
            &backend,
            &up.model,
            src,
            upstream,
            self.linear(),
            false,
            &none,
            then,
        )
    }

    fn viterbi_streamed<P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<Decoded>> {
        if let Some(n) = self.pieces_of(problem)? {
            let overlap = self.get_viterbi_pieces().1;
            return Ok(vec![pieces::viterbi(self, problem, n, overlap)?]);
        }
        let (gpu, up) = self.streamed(problem)?;
        let rows = self.rows_per_chunk(problem.shape().labels);
        viterbi(&gpu, &self.backend(), &up.model, up.source(&gpu), rows)
    }

    /// The device bytes of [`EngineInfo::memory_required`] for the same query: the device
    /// holds the whole `(B, T, C)` position tensors, in the caller's precision, as for
    /// arrays (about 4 GB for one sequence of 21·10⁶ positions and 50 labels in `f32`). The
    /// host holds one chunk of rows per position tensor for each thread of the rayon pool
    /// (`ρ·C·τ·β` bytes each, `ρ` the rows per chunk; 64 MiB in all at most) and the
    /// process's page-locked buffer of 32 MiB, never a `(B, T, C)` array.
    fn memory_required_streamed(&self, query: &Query) -> Result<u64> {
        if query.form == Form::Edges || self.edge_form() {
            return Err(Error::Unsupported {
                backend: self.backend(),
                what: "a potentials source with edge input (streaming reads structured rows)"
                    .into(),
            });
        }
        self.memory_required(query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The traceback from blocks of backpointers gives the segments of the traceback from
    /// all of them (as `streaming::viterbi` reads them), for every block size, both
    /// transition forms; a failed read is the call's error.
    #[test]
    fn the_traceback_in_blocks_is_the_traceback_of_all_the_backpointers() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for (t, c, k) in [(1, 1, 1), (9, 3, 4), (40, 5, 7), (33, 2, 33)] {
            // Valid backpointers at every position 1..=T: durations within K and x.
            let mut bpd = vec![0i32; (t + 1) * c];
            let mut bpi = vec![0i32; (t + 1) * c];
            for xx in 1..=t {
                for j in 0..c {
                    bpd[xx * c + j] = (1 + next(k.min(xx))) as i32;
                    bpi[xx * c + j] = next(c) as i32;
                }
            }
            let finals: Vec<f64> = (0..c).map(|_| next(100) as f64).collect();
            for dd in [false, true] {
                let len = t - t / 3;
                let want = decode_best(
                    len,
                    c,
                    |j| finals[j],
                    |xx, j| {
                        let d = bpd[xx * c + j] as usize;
                        let prev = if dd {
                            bpi[xx * c + j] as usize
                        } else if xx == d {
                            0
                        } else {
                            bpi[(xx - d) * c + j] as usize
                        };
                        (d, prev)
                    },
                );
                for rows in [1, 2, 3, 7, t + 5] {
                    let fetch = |lo: usize, hi: usize| {
                        assert!(lo < hi && hi <= t + 1 && hi - lo <= rows.max(1));
                        Ok((bpd[lo * c..hi * c].to_vec(), bpi[lo * c..hi * c].to_vec()))
                    };
                    let got = trace_in_blocks(len, t, c, dd, rows, |j| finals[j], fetch).unwrap();
                    assert_eq!(got, want, "T {t} C {c} K {k} dd {dd} rows {rows}");
                }
                let fail = |_: usize, _: usize| {
                    Err(Error::Device {
                        backend: "test".into(),
                        message: "read failed".into(),
                    })
                };
                let got = trace_in_blocks(len, t, c, dd, 4, |j| finals[j], fail);
                assert!(matches!(got, Err(Error::Device { .. })), "{got:?}");
            }
        }
    }
}
