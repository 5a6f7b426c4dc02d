//! A streamed problem's rows on the device: the source's chunks filled and checked on the
//! rayon pool's threads, then sent in order through the page-locked buffer
//! (`transfer::rows`), into `(B, T, C)` arrays laid out as the source's sequences or as
//! pieces of them ([`Layout`]).

use bytemuck::Pod;
use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use rayon::prelude::*;
use semicrf_core::range::Magnitude;
use semicrf_core::{
    PotentialSource, Result, RowCheck, Scalar, Scanned, SourceRows, StreamedPotentials,
};

use crate::call::{Model, Source};
use crate::device::{Gpu, driver};
use crate::transfer::rows::RowUpload;
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
