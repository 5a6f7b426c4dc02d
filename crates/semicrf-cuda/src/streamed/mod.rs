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
//! [`Engine`](semicrf_core::Engine) calls. The rows' upload is [`upload`], the Viterbi
//! traceback [`trace`], one long sequence's Viterbi in pieces [`pieces`].

mod pieces;
mod trace;
mod upload;

pub use pieces::SplitReport;

use cudarc::driver::CudaView;
use semicrf_core::range;
use semicrf_core::{
    Decoded, EngineInfo, Error, Form, GradientRows, GradientSink, Gradients, PotentialSource,
    Query, Result, Scalar, Semiring, SourceEngine, StreamedBackward, StreamedPotentials,
};

use crate::call::{StreamCall, Targets};
use crate::device::Gpu;
use crate::engine::CudaEngine;
use crate::streaming::{self, BackwardResults};
use crate::transfer::rows::{HALF, RowDownload};
use trace::viterbi;
use upload::{Uploaded, upload};

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

impl CudaEngine {
    /// How the last split decoding ([`CudaEngine::viterbi_pieces`]) on the calling thread
    /// went: its attempts, where each piece met the one before, and where the time went.
    /// Taken: `None` after it, and where no decoding on this thread was split since.
    pub fn take_last_split() -> Option<SplitReport> {
        pieces::take_last_split()
    }

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
        let overlap = pieces::overlap(overlap, sh.max_duration);
        let n = pieces::count(*len, asked, overlap);
        if n < 2 || problem.shared().has_duration_dependent_transition() || self.edge_form() {
            return Ok(None);
        }
        let src = problem.source();
        let tensors =
            1 + usize::from(src.has_begin_boundary()) + usize::from(src.has_end_boundary());
        let ranges = pieces::ranges(*len, &vec![overlap; n]);
        let need = pieces::device_bytes(&ranges, sh.labels, tensors, F::BYTES as usize);
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
