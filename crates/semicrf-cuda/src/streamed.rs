//! [`SourceEngine`] for [`CudaEngine`]: the rows of a [`PotentialSource`] go to the device
//! chunk by chunk through page-locked memory (`transfer::rows`: the host fills one half of
//! the buffer while the bus moves the other), into `(B, T, C)` arrays in device memory that
//! the streaming kernels read as they read potentials already there; the backward pass's
//! position-wise results come back the same way, chunk by chunk, to a [`GradientSink`].
//!
//! The host holds one chunk of rows and the page-locked buffer, never a `(B, T, C)` array;
//! the device holds the whole position tensors, in the caller's precision, as for
//! [`Engine`](semicrf_core::Engine) calls.

use bytemuck::Pod;
use cudarc::driver::{CudaSlice, CudaView, DeviceRepr, ValidAsZeroBits};
use semicrf_core::range::{self, Magnitude};
use semicrf_core::{
    Decoded, EngineInfo, Error, Form, GradientRows, GradientSink, Gradients, PotentialSource,
    Query, Result, RowCheck, Scalar, Semiring, SourceEngine, SourceRows, StreamedBackward,
    StreamedPotentials,
};

use crate::call::{Model, Source, StreamCall, Targets};
use crate::device::{Gpu, driver};
use crate::engine::CudaEngine;
use crate::streaming::{self, BackwardResults};
use crate::transfer::rows::{HALF, RowDownload, RowUpload};
use crate::transfer::upload::Input;

/// A streamed problem's position tensors on the device, with what the host saw of them.
struct Uploaded {
    model: Model,
    /// Scores, then the boundaries the source gives, `(B, T, C)` each (zeros past each
    /// length).
    input: Input,
    magnitudes: Vec<Magnitude>,
}

impl Uploaded {
    /// Where the kernels read the position tensors.
    fn source(&self, gpu: &Gpu) -> Source<'static, 'static, f64> {
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

/// The rows of `p`'s source on the device, `rows` at a time, each checked as it is read
/// ([`RowCheck`]): in `f32` for `f32` input, else in `f64` (as [`Engine`] calls store them).
///
/// [`Engine`]: semicrf_core::Engine
fn upload<F: Scalar, P: PotentialSource<F> + ?Sized>(
    gpu: &Gpu,
    backend: &str,
    p: &StreamedPotentials<'_, F, P>,
    rows: usize,
) -> Result<Uploaded> {
    let sh = p.shape();
    let src = p.source();
    let (has_bb, has_eb) = (src.has_begin_boundary(), src.has_end_boundary());
    let model = Model::of_shared(p.shared(), sh, p.lengths().to_vec(), has_bb, has_eb);
    let (input, magnitudes) = if F::BYTES == 4 {
        let (d, m) = upload_as(gpu, backend, p, rows, |x: F| x.as_f64() as f32)?;
        (Input::F32(d), m)
    } else {
        let (d, m) = upload_as(gpu, backend, p, rows, |x: F| x.as_f64())?;
        (Input::F64(d), m)
    };
    Ok(Uploaded {
        model,
        input,
        magnitudes,
    })
}

/// [`upload`] into a device array of `T`, each value converted by `to`.
fn upload_as<F, P, T>(
    gpu: &Gpu,
    backend: &str,
    p: &StreamedPotentials<'_, F, P>,
    rows: usize,
    to: impl Fn(F) -> T + Copy,
) -> Result<(CudaSlice<T>, Vec<Magnitude>)>
where
    F: Scalar,
    P: PotentialSource<F> + ?Sized,
    T: Pod + DeviceRepr + ValidAsZeroBits,
{
    let err = |e| driver(backend, e);
    let sh = p.shape();
    let (bn, t, c) = (sh.batch, sh.len, sh.labels);
    let src = p.source();
    let n = bn * t * c;
    let tensors = 1 + usize::from(src.has_begin_boundary()) + usize::from(src.has_end_boundary());
    let mut dst = gpu.zeros::<T>(tensors * n).map_err(err)?;
    let rho = rows.clamp(1, t.max(1));
    let chunk = || vec![F::zero(); rho * c];
    let mut sc = chunk();
    let mut bb = src.has_begin_boundary().then(chunk);
    let mut eb = src.has_end_boundary().then(chunk);
    let eb_at = n * (1 + usize::from(bb.is_some()));
    let mut up = RowUpload::new(gpu).map_err(err)?;
    let mut magnitudes = Vec::with_capacity(bn);
    for (b, &len) in p.lengths().iter().enumerate() {
        let mut check = RowCheck::new(b, c);
        for t0 in (0..len).step_by(rho) {
            let m = rho.min(len - t0) * c;
            src.fill(b, t0, rows_of(&mut sc, &mut bb, &mut eb, m))?;
            check.rows(t0, &rows_of(&mut sc, &mut bb, &mut eb, m))?;
            let at = (b * t + t0) * c;
            up.put(&sc[..m], to, &mut dst, at).map_err(err)?;
            if let Some(v) = &bb {
                up.put(&v[..m], to, &mut dst, n + at).map_err(err)?;
            }
            if let Some(v) = &eb {
                up.put(&v[..m], to, &mut dst, eb_at + at).map_err(err)?;
            }
        }
        magnitudes.push(check.magnitude(p.shared_bound(), len));
    }
    up.finish().map_err(err)?;
    Ok((dst, magnitudes))
}

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

impl CudaEngine {
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
        let up = upload(&gpu, &self.backend(), p, rows)?;
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
        let (gpu, up) = self.streamed(problem)?;
        streaming::viterbi(&gpu, &self.backend(), &up.model, up.source(&gpu))
    }

    /// The device bytes of [`EngineInfo::memory_required`] for the same query: the device
    /// holds the whole `(B, T, C)` position tensors, in the caller's precision, as for
    /// arrays (about 4 GB for one sequence of 21·10⁶ positions and 50 labels in `f32`). The
    /// host holds one chunk of rows per position tensor (`ρ·C·τ·β` bytes, `ρ` the rows per
    /// chunk) and the process's page-locked buffer of 32 MiB, never a `(B, T, C)` array.
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
