//! A backward pass's results written into buffers the caller allocated on the device
//! ([`DeviceOutputs`], [`crate::CudaEngine::backward_into`]): their checks, the order of the
//! engine's work against the callers' streams, and the conversion of `f32` results.

use std::marker::PhantomData;

use cudarc::driver::sys::CUstream;
use cudarc::driver::{CudaSlice, DevicePtrMut, DeviceRepr, LaunchConfig, PushKernelArg};
use ndarray::{Array1, Array2, ArrayD};
use semicrf_core::{Error, Result, Shape};

use crate::call::sums::grid_stride;
use crate::call::{StreamCall, Targets};
use crate::device::{Gpu, join, wait_for};
use crate::kernel::args::{CopyArgs, OUT_ITEMS};
use crate::kernel::{DevPtr, Kernel};
use crate::resident::{DeviceArray, DevicePotentials, Dtype, check_address};
use crate::streaming::{BackwardResults, Queued};

/// A writable array in device memory (a backward pass's output), row-major and contiguous,
/// borrowed mutably for `'a`: the counterpart of [`DeviceArray`], from a cudarc buffer or
/// from a raw device address with the stream whose work uses it (another framework's
/// tensor).
///
/// A call writing it first makes the engine's stream wait for the work queued so far on
/// that stream, and before it returns makes that stream wait (an event) for the writes, so
/// work queued there afterwards sees the results.
#[derive(Debug)]
pub struct DeviceArrayMut<'a> {
    ptr: u64,
    len: usize,
    dtype: Dtype,
    /// The owner's stream (`CUstream` as an integer; 0 is the legacy default stream).
    stream: usize,
    _borrow: PhantomData<&'a mut ()>,
}

impl<'a> DeviceArrayMut<'a> {
    /// A cudarc buffer of `f32`.
    pub fn f32(s: &'a mut CudaSlice<f32>) -> Self {
        Self::of(s, Dtype::F32)
    }

    /// A cudarc buffer of `f64`.
    pub fn f64(s: &'a mut CudaSlice<f64>) -> Self {
        Self::of(s, Dtype::F64)
    }

    fn of<T: DeviceRepr>(s: &'a mut CudaSlice<T>, dtype: Dtype) -> Self {
        let stream = s.stream().clone();
        let len = s.len();
        let ptr = s.device_ptr_mut(&stream).0;
        DeviceArrayMut {
            ptr,
            len,
            dtype,
            stream: stream.cu_stream() as usize,
            _borrow: PhantomData,
        }
    }

    /// `len` elements of `dtype` at device address `ptr`, allocated by or ordered after work
    /// queued on `stream` (null for the legacy default stream): a PyTorch tensor's
    /// `data_ptr()` with `torch.cuda.current_stream().cuda_stream`, for example. The
    /// address must be in memory of the device the engine runs on, in its primary context;
    /// a call checks that and that the allocation holds the `len` elements.
    ///
    /// # Safety
    ///
    /// The memory must stay allocated until the work queued on `stream` after the call
    /// (which waits for the call's writes) is done, and must be neither read nor written by
    /// other work while the call writes it; `stream` must be a live stream of that context.
    pub unsafe fn from_raw(ptr: u64, len: usize, dtype: Dtype, stream: CUstream) -> Self {
        DeviceArrayMut {
            ptr,
            len,
            dtype,
            stream: stream as usize,
            _borrow: PhantomData,
        }
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn bytes(&self) -> u64 {
        (self.len * self.dtype.bytes()) as u64
    }
}

/// Where [`crate::CudaEngine::backward_into`] writes a backward pass's results on the
/// device: the gradient of the scores `(B, T, C)` (weighted by the upstream gradient, as
/// every gradient), the gradients of the begin and end boundaries `(B, T, C)` (given exactly
/// when the problem has that boundary), and optionally the boundary marginals `(B, T)` (not
/// weighted), log Z `(B,)` and the shared parameters' gradients (as [`HostBackward`] has
/// them: summed over the batch in ascending order, weighted; copied from the host's values,
/// so bit for bit those). Every array has the potentials' element type, but the shared
/// parameters' gradients, which may have either (rounded as `as f32` for `f32`).
///
/// The kernels compute in `f64`. For `f64` potentials they write straight into these
/// buffers. For `f32` potentials the engine writes each result into an `f64` buffer of its
/// own first (one `(B, T, C)` or `(B, T)` scratch per result, freed when the call
/// returns) and a kernel rounds it into the `f32` buffer (`narrow_f32` in `kernels/io.cu`,
/// round to nearest as `as f32`): the values are those of
/// [`crate::CudaEngine::backward_on_device`] (rounded to `f32`), bit for bit.
///
/// ```no_run
/// use cudarc::driver::CudaContext;
/// use semicrf_core::Algorithm;
/// use semicrf_cuda::{CudaEngine, DeviceArray, DeviceArrayMut, DeviceOutputs, DevicePotentials};
///
/// let (b, t, c, k) = (2, 100, 4, 8);
/// let stream = CudaContext::new(0)?.default_stream();
/// let scores = stream.clone_htod(&vec![0.1f32; b * t * c])?;
/// let mut grad = stream.alloc_zeros::<f32>(b * t * c)?;
/// let mut log_z = stream.alloc_zeros::<f32>(b)?;
/// let lengths = [100, 60];
/// let engine = CudaEngine::new(Algorithm::Streaming, 0);
/// let p = DevicePotentials::builder(DeviceArray::f32(&scores), (b, t, c), &lengths, k)
///     .build(&engine)?;
/// let out = DeviceOutputs::new(DeviceArrayMut::f32(&mut grad))
///     .log_z(DeviceArrayMut::f32(&mut log_z));
/// let host = engine.backward_into(&p, &[1.0, 1.0], out)?;
/// // grad and log_z: written on the device; host.log_z, host.transition, ...: on the host.
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DeviceOutputs<'a> {
    scores: DeviceArrayMut<'a>,
    begin_boundary: Option<DeviceArrayMut<'a>>,
    end_boundary: Option<DeviceArrayMut<'a>>,
    boundary: Option<DeviceArrayMut<'a>>,
    log_z: Option<DeviceArrayMut<'a>>,
    /// The shared parameters' gradients: transition, duration, start, end.
    shared: [Option<DeviceArrayMut<'a>>; 4],
}

impl<'a> DeviceOutputs<'a> {
    /// Outputs with the scores' gradient `(B, T, C)` going to `scores`.
    pub fn new(scores: DeviceArrayMut<'a>) -> Self {
        DeviceOutputs {
            scores,
            begin_boundary: None,
            end_boundary: None,
            boundary: None,
            log_z: None,
            shared: Default::default(),
        }
    }

    /// The begin boundary's gradient `(B, T, C)`: required when the problem has a begin
    /// boundary, refused otherwise.
    pub fn begin_boundary(mut self, a: DeviceArrayMut<'a>) -> Self {
        self.begin_boundary = Some(a);
        self
    }

    /// The end boundary's gradient `(B, T, C)`: required when the problem has an end
    /// boundary, refused otherwise.
    pub fn end_boundary(mut self, a: DeviceArrayMut<'a>) -> Self {
        self.end_boundary = Some(a);
        self
    }

    /// The boundary marginals `(B, T)`: the probability that a segment starts at each
    /// position (not weighted by the upstream gradient).
    pub fn boundary(mut self, a: DeviceArrayMut<'a>) -> Self {
        self.boundary = Some(a);
        self
    }

    /// log Z per sequence, `(B,)` (also returned on the host).
    pub fn log_z(mut self, a: DeviceArrayMut<'a>) -> Self {
        self.log_z = Some(a);
        self
    }

    /// The transition's gradient, `(C, C)` or `(K, C, C)` as the potentials' transition (a
    /// problem without one has a `(C, C)` transition of zeros).
    pub fn transition(mut self, a: DeviceArrayMut<'a>) -> Self {
        self.shared[0] = Some(a);
        self
    }

    /// The duration scores' gradient, `(K, C)`.
    pub fn duration(mut self, a: DeviceArrayMut<'a>) -> Self {
        self.shared[1] = Some(a);
        self
    }

    /// The start scores' gradient, `(C)`.
    pub fn start(mut self, a: DeviceArrayMut<'a>) -> Self {
        self.shared[2] = Some(a);
        self
    }

    /// The end scores' gradient, `(C)`.
    pub fn end(mut self, a: DeviceArrayMut<'a>) -> Self {
        self.shared[3] = Some(a);
        self
    }

    /// Whether log Z has an output: then nothing the call returns needs its work to be done,
    /// and where the inputs' streams are the outputs' ones it returns without waiting for
    /// it (see [`crate::CudaEngine::backward_into`]).
    pub(crate) fn has_log_z(&self) -> bool {
        self.log_z.is_some()
    }

    /// The outputs' streams.
    pub(crate) fn streams(&self) -> impl Iterator<Item = usize> + '_ {
        self.arrays().map(|(_, a)| a.stream)
    }

    /// The arrays given, with their names in errors.
    fn arrays(&self) -> impl Iterator<Item = (&'static str, &DeviceArrayMut<'a>)> {
        [
            ("scores output", Some(&self.scores)),
            ("begin_boundary output", self.begin_boundary.as_ref()),
            ("end_boundary output", self.end_boundary.as_ref()),
            ("boundary output", self.boundary.as_ref()),
            ("log_z output", self.log_z.as_ref()),
            ("transition output", self.shared[0].as_ref()),
            ("duration output", self.shared[1].as_ref()),
            ("start output", self.shared[2].as_ref()),
            ("end output", self.shared[3].as_ref()),
        ]
        .into_iter()
        .filter_map(|(n, a)| a.map(|a| (n, a)))
    }

    /// The checks that need no device: the outputs fit a problem of `shape` whose arrays
    /// are of `dtype` and which has the boundaries of `has` (begin, end) and a `(K, C, C)`
    /// transition where `dd`, and none overlaps another or one of the problem's arrays
    /// (`inputs`: name, address, bytes).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check(
        &self,
        backend: &str,
        shape: Shape,
        dtype: Dtype,
        has: [bool; 2],
        dd: bool,
        inputs: &[(&'static str, u64, u64)],
    ) -> Result<()> {
        let refuse = |what: String| Error::Unsupported {
            backend: backend.into(),
            what,
        };
        let given = [self.begin_boundary.is_some(), self.end_boundary.is_some()];
        for (i, side) in ["begin", "end"].into_iter().enumerate() {
            match (has[i], given[i]) {
                (true, false) => {
                    return Err(refuse(format!(
                        "a problem with a {side} boundary without an output for its gradient \
                         (DeviceOutputs::{side}_boundary)"
                    )));
                }
                (false, true) => {
                    return Err(refuse(format!(
                        "an output for the {side} boundary's gradient on a problem without \
                         that boundary"
                    )));
                }
                _ => {}
            }
        }
        let (b, t, c, k) = (shape.batch, shape.len, shape.labels, shape.max_duration);
        for (name, a) in self.arrays() {
            let shared = matches!(
                name,
                "transition output" | "duration output" | "start output" | "end output"
            );
            let (n, expected) = match name {
                "boundary output" => (b * t, format!("(B, T) = ({b}, {t}): {} elements", b * t)),
                "log_z output" => (b, format!("(B,) = ({b},): {b} elements")),
                "transition output" if dd => (
                    k * c * c,
                    format!("(K, C, C) = ({k}, {c}, {c}): {} elements", k * c * c),
                ),
                "transition output" => (c * c, format!("(C, C) = ({c}, {c}): {} elements", c * c)),
                "duration output" => (k * c, format!("(K, C) = ({k}, {c}): {} elements", k * c)),
                "start output" | "end output" => (c, format!("(C,) = ({c},): {c} elements")),
                _ => (
                    b * t * c,
                    format!("(B, T, C) = ({b}, {t}, {c}): {} elements", b * t * c),
                ),
            };
            if a.len != n {
                return Err(Error::Shape {
                    tensor: name,
                    expected,
                    got: vec![a.len],
                });
            }
            if a.dtype != dtype && !shared {
                return Err(refuse(format!(
                    "{name} of {:?} for potentials of {dtype:?} (give them one element type)",
                    a.dtype
                )));
            }
        }
        let all: Vec<(&'static str, u64, u64)> = self
            .arrays()
            .map(|(n, a)| (n, a.ptr, a.bytes()))
            .chain(inputs.iter().copied())
            .collect();
        for (i, &(n1, p1, b1)) in all.iter().enumerate() {
            for &(n2, p2, b2) in &all[i + 1..] {
                if p1 < p2.saturating_add(b2) && p2 < p1.saturating_add(b1) {
                    return Err(refuse(format!("{n1} overlapping {n2} in device memory")));
                }
            }
        }
        Ok(())
    }

    /// [`DeviceOutputs::check`], then each address on the device: memory of device
    /// `ordinal` whose allocation holds the array.
    pub(crate) fn check_on(
        &self,
        gpu: &Gpu,
        backend: &str,
        p: &DevicePotentials<'_>,
    ) -> Result<()> {
        let has = [p.model.has_bb, p.model.has_eb];
        let inputs: Vec<_> = p.extents().collect();
        self.check(backend, p.shape(), p.dtype(), has, p.model.dd, &inputs)?;
        for (name, a) in self.arrays() {
            let view = DeviceArray::at(a.ptr, a.len, a.dtype, a.stream);
            check_address(gpu, backend, p.ordinal, name, view)?;
        }
        Ok(())
    }

    /// Makes the engine's stream wait for the work queued so far on the streams of `p`'s
    /// arrays and of the outputs, once each.
    pub(crate) fn wait_for_owners(
        &self,
        gpu: &Gpu,
        backend: &str,
        p: &DevicePotentials<'_>,
    ) -> Result<()> {
        let outputs = self.arrays().map(|(_, a)| a.stream);
        wait_for(gpu, backend, p.streams().chain(outputs))
    }

    /// Where the kernels write the large results themselves: the `f64` outputs (none for
    /// `f32`, whose results the engine narrows).
    pub(crate) fn targets(&self) -> Targets {
        if self.scores.dtype != Dtype::F64 {
            return Targets::default();
        }
        let at = |a: &Option<DeviceArrayMut<'_>>| a.as_ref().map(|a| DevPtr::at(a.ptr));
        Targets {
            sc: Some(DevPtr::at(self.scores.ptr)),
            bb: at(&self.begin_boundary),
            eb: at(&self.end_boundary),
            bm: at(&self.boundary),
            fresh: [DevPtr::NULL; 4],
        }
    }

    /// After the kernels: the `f32` outputs from the engine's buffers, log Z and the shared
    /// parameters' gradients, then every output's stream made to wait for the writes, and
    /// the host's part of the results. Where `wait`, the call's work is done when this
    /// returns; else it may still run (the engine's buffers are freed in stream order).
    pub(crate) fn finish(
        &self,
        call: &StreamCall<'_>,
        out: BackwardResults<'_>,
        wait: bool,
    ) -> Result<HostBackward> {
        let gpu = call.gpu;
        let err = |e| call.err(e);
        if self.scores.dtype == Dtype::F32 {
            let pairs = [
                (Some(&out.gsc), Some(&self.scores)),
                (out.gbb.as_ref(), self.begin_boundary.as_ref()),
                (out.geb.as_ref(), self.end_boundary.as_ref()),
                (Some(&out.bmarg), self.boundary.as_ref()),
            ];
            for (src, dst) in pairs {
                if let (Some(src), Some(dst)) = (src, dst) {
                    narrow(call, src.ptr(call), dst)?;
                }
            }
        }
        let small = [
            (self.log_z.as_ref(), out.log_z.as_slice()),
            (self.shared[0].as_ref(), slice(&out.transition)),
            (self.shared[1].as_ref(), slice(&out.duration)),
            (self.shared[2].as_ref(), slice(&out.start)),
            (self.shared[3].as_ref(), slice(&out.end)),
        ];
        for (dst, v) in small {
            if let Some(dst) = dst {
                let cu = gpu.stream.cu_stream();
                // SAFETY: `dst` holds `v.len()` elements of its type (checked); from pageable
                // host memory the copy returns once the values are staged.
                unsafe {
                    match dst.dtype {
                        Dtype::F64 => cudarc::driver::result::memcpy_htod_async(dst.ptr, v, cu),
                        Dtype::F32 => {
                            let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                            cudarc::driver::result::memcpy_htod_async(dst.ptr, &v, cu)
                        }
                    }
                }
                .map_err(err)?;
            }
        }
        self.release(call, wait)?;
        Ok(HostBackward {
            log_z: out.log_z,
            transition: out.transition,
            duration: out.duration,
            start: out.start,
            end: out.end,
        })
    }
}

impl DeviceOutputs<'_> {
    /// Every output's stream made to wait for the call's writes (queued on the engine's
    /// stream), and where `wait`, the call's work done.
    fn release(&self, call: &StreamCall<'_>, wait: bool) -> Result<()> {
        let gpu = call.gpu;
        let err = |e| call.err(e);
        let mut seen = Vec::new();
        for (_, a) in self.arrays() {
            if !seen.contains(&a.stream) {
                seen.push(a.stream);
                join(gpu.stream.cu_stream() as usize, a.stream).map_err(err)?;
            }
        }
        // The inputs may be written again once the call returns: by work on the outputs'
        // streams (ordered after the call's) without waiting, else only once it is done.
        if wait {
            gpu.stream.synchronize().map_err(err)?;
        }
        Ok(())
    }

    /// After a queued pass's kernels ([`crate::streaming::Queued`]): the `f32` outputs from
    /// the engine's buffers, log Z and the shared parameters' gradients copied (or rounded)
    /// on the device from the pass's results, then every output's stream made to wait for
    /// the writes. Where `wait`, the call's work is done when this returns.
    pub(crate) fn finish_queued(&self, call: &StreamCall<'_>, q: Queued, wait: bool) -> Result<()> {
        let sh = call.shape;
        let (b, k, c) = (sh.batch, sh.max_duration, sh.labels);
        // Every copy in one launch of `copy_out`: (from, to, values, stride).
        let mut items: Vec<(DevPtr, &DeviceArrayMut<'_>, usize, i32)> = Vec::new();
        if self.scores.dtype == Dtype::F32 {
            let pairs = [
                (Some(&q.gsc), Some(&self.scores)),
                (q.gbb.as_ref(), self.begin_boundary.as_ref()),
                (q.geb.as_ref(), self.end_boundary.as_ref()),
                (Some(&q.bmarg), self.boundary.as_ref()),
            ];
            for (src, dst) in pairs {
                if let (Some(src), Some(dst)) = (src, dst) {
                    items.push((src.ptr(call), dst, dst.len, 1));
                }
            }
        }
        if let Some(lz) = &self.log_z {
            items.push((q.pairs, lz, b, 2));
        }
        // Where each sum lies among `q.red`'s words: duration, transition, start, end.
        let (kc, ntr) = (k * c, q.ntr);
        let at = [kc, 0, kc + ntr, kc + ntr + c];
        for (dst, words) in self.shared.iter().zip(at) {
            if let Some(dst) = dst {
                items.push((q.red.words(words), dst, dst.len, 1));
            }
        }
        copy_out(call, &items)?;
        self.release(call, wait)
    }
}

/// Launches `copy_out` (`kernels/io.cu`): each item's `f64` values (every `stride`-th from
/// its source) into the caller's array, rounded to `f32` where that is the array's type.
fn copy_out(
    call: &StreamCall<'_>,
    items: &[(DevPtr, &DeviceArrayMut<'_>, usize, i32)],
) -> Result<()> {
    for chunk in items.chunks(OUT_ITEMS) {
        let mut a = CopyArgs {
            count: chunk.len() as i32,
            ..CopyArgs::default()
        };
        for (i, &(src, dst, n, stride)) in chunk.iter().enumerate() {
            a.src[i] = src;
            a.dst[i] = DevPtr::at(dst.ptr);
            a.n[i] = n as i64;
            a.stride[i] = stride;
            a.f32[i] = (dst.dtype == Dtype::F32) as i32;
        }
        let most = chunk.iter().map(|x| x.2).max().unwrap_or(1);
        let per = grid_stride(most).grid_dim.0.min(4096);
        let cfg = LaunchConfig {
            grid_dim: (per * chunk.len() as u32, 1, 1),
            ..grid_stride(most)
        };
        let mut l = call
            .gpu
            .stream
            .launch_builder(call.gpu.function(Kernel::CopyOut));
        l.arg(&a);
        // SAFETY: `a` is `struct OArgs` (its layout asserted at compile time); each source
        // holds `stride · n` f64 of the call's results and each destination `n` values of
        // its type on this device (checked); a grid-stride loop over each item's `n`.
        unsafe { l.launch(cfg) }.map_err(|e| call.err(e))?;
    }
    Ok(())
}

/// The values of a host result in memory order (the engine's arrays are standard layout).
fn slice<D: ndarray::Dimension>(a: &ndarray::Array<f64, D>) -> &[f64] {
    a.as_slice_memory_order().unwrap_or(&[])
}

/// `narrow_f32` of the engine's result at `from` into the caller's `f32` array `dst`.
fn narrow(call: &StreamCall<'_>, from: DevPtr, dst: &DeviceArrayMut<'_>) -> Result<()> {
    let n = dst.len as i64;
    let to = DevPtr::at(dst.ptr);
    let cfg = grid_stride(dst.len);
    let mut l = call
        .gpu
        .stream
        .launch_builder(call.gpu.function(Kernel::NarrowF32));
    l.arg(&from).arg(&to).arg(&n);
    // SAFETY: `src` holds at least `n` f64 (the engine's result of the same shape), `dst`
    // `n` f32 of this device (checked); a grid-stride loop over `n`.
    unsafe { l.launch(cfg) }.map_err(|e| call.err(e))?;
    Ok(())
}

/// What [`crate::CudaEngine::backward_into`] returns on the host: log Z and the shared
/// parameters' gradients (summed over the batch, weighted by the upstream gradient), as in
/// [`crate::DeviceBackward`].
#[derive(Clone, Debug, PartialEq)]
pub struct HostBackward {
    /// log Z per sequence.
    pub log_z: Vec<f64>,
    /// Gradient of the transition, `(C, C)` or `(K, C, C)`.
    pub transition: ArrayD<f64>,
    /// Gradient of the duration scores, `(K, C)`.
    pub duration: Array2<f64>,
    /// Gradient of the start scores, `(C)`.
    pub start: Array1<f64>,
    /// Gradient of the end scores, `(C)`.
    pub end: Array1<f64>,
}

#[cfg(test)]
mod tests;
