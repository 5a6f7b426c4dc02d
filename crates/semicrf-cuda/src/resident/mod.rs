//! Potentials that are already in device memory, and results left there: for frameworks
//! whose tensors live on the GPU (a PyTorch tensor's `data_ptr()`, a cudarc buffer), so that
//! the `(B, T, C)` arrays cross no bus.

use cudarc::driver::sys::{self, CUpointer_attribute};
use cudarc::driver::{LaunchConfig, PushKernelArg};
use ndarray::{ArrayView, Dimension};
use semicrf_core::range::{self, Largest, Magnitude};
use semicrf_core::{Error, Result, Shape};

use crate::call::{Model, Source};
use crate::device::{Gpu, driver, wait_for};
use crate::kernel::{CheckArgs, DevPtr, Kernel};

mod array;
mod backward;
mod shared;

pub use array::{DeviceArray, Dtype};
pub use backward::DeviceBackward;
use shared::Shared;

/// A problem whose scores and boundaries are in device memory: the position tensors as
/// [`DeviceArray`]s, the shared parameters (transition, duration, start, end, small) as
/// host arrays or [`DeviceArray`]s (read back with the checks' words), the lengths on the
/// host. Built by [`DevicePotentialsBuilder::build`], which checks it as
/// [`Potentials`](semicrf_core::Potentials) are checked, the device arrays by a kernel;
/// then used by [`crate::CudaEngine::forward_on_device`],
/// [`crate::CudaEngine::backward_on_device`], [`crate::CudaEngine::backward_into`] and
/// [`crate::CudaEngine::viterbi_on_device`].
///
/// ```no_run
/// use cudarc::driver::CudaContext;
/// use ndarray::Array2;
/// use semicrf_core::{Algorithm, LogSemiring};
/// use semicrf_cuda::{CudaEngine, DeviceArray, DevicePotentials};
///
/// let (b, t, c, k) = (2, 100, 4, 8);
/// let stream = CudaContext::new(0)?.default_stream();
/// let scores = stream.clone_htod(&vec![0.1f32; b * t * c])?; // (B, T, C), made on the GPU
/// let transition = Array2::<f64>::zeros((c, c));
/// let lengths = [100, 60];
/// let engine = CudaEngine::new(Algorithm::Streaming, 0);
/// let p = DevicePotentials::builder(DeviceArray::f32(&scores), (b, t, c), &lengths, k)
///     .transition(transition.view())
///     .build(&engine)?;
/// let log_z = engine.forward_on_device::<LogSemiring>(&p)?;
/// let grads = engine.backward_on_device(&p, &[1.0, 1.0])?;
/// // grads.scores: (B, T, C) f64 on the device; grads.transition on the host.
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DevicePotentials<'a> {
    pub(crate) model: Model,
    pub(crate) scores: DeviceArray<'a>,
    pub(crate) begin_boundary: Option<DeviceArray<'a>>,
    pub(crate) end_boundary: Option<DeviceArray<'a>>,
    pub(crate) magnitudes: Vec<Magnitude>,
    /// Whether no input holds a `-inf` (within the lengths): then every sequence has a
    /// segmentation of finite score, so a finite log Z, known before a call runs.
    pub(crate) feasible: bool,
    /// The device it was checked on.
    pub(crate) ordinal: usize,
}

impl<'a> DevicePotentials<'a> {
    /// Starts a builder from the scores on the device, their `(B, T, C)`, the lengths and
    /// the maximum duration `K`.
    pub fn builder(
        scores: DeviceArray<'a>,
        (batch, len, labels): (usize, usize, usize),
        lengths: &'a [usize],
        max_duration: usize,
    ) -> DevicePotentialsBuilder<'a> {
        DevicePotentialsBuilder {
            scores,
            dims: (batch, len, labels),
            lengths,
            max_duration,
            shared: Default::default(),
            begin_boundary: None,
            end_boundary: None,
        }
    }

    /// `(B, T, K, C)`.
    pub fn shape(&self) -> Shape {
        self.model.shape
    }

    /// The lengths.
    pub fn lengths(&self) -> &[usize] {
        &self.model.lengths
    }

    /// Each sequence's magnitude bound (see [`semicrf_core::range`]).
    pub fn magnitudes(&self) -> &[Magnitude] {
        &self.magnitudes
    }

    /// Whether no input holds a `-inf` within the lengths, as the checks found: every
    /// sequence then has a segmentation of finite score, hence a finite log Z, known before
    /// a call runs (where [`crate::CudaEngine::backward_into_queued`] need not wait).
    pub fn sure_feasible(&self) -> bool {
        self.feasible
    }

    /// The element type of the scores and boundaries.
    pub fn dtype(&self) -> Dtype {
        self.scores.dtype
    }

    /// Where the kernels read the position tensors.
    pub(crate) fn source(&self) -> Source<'static, 'static, f64> {
        Source::Device {
            sc: DevPtr::at(self.scores.ptr),
            bb: self.begin_boundary.map(|a| DevPtr::at(a.ptr)),
            eb: self.end_boundary.map(|a| DevPtr::at(a.ptr)),
            f32: self.scores.dtype == Dtype::F32,
        }
    }

    /// The given position tensors with their names, in the order of the checks.
    fn arrays(&self) -> impl Iterator<Item = (&'static str, DeviceArray<'a>)> {
        [
            ("scores", Some(self.scores)),
            ("begin_boundary", self.begin_boundary),
            ("end_boundary", self.end_boundary),
        ]
        .into_iter()
        .filter_map(|(n, a)| a.map(|a| (n, a)))
    }

    /// Makes `gpu`'s stream wait for the work queued so far on the streams that write the
    /// arrays.
    pub(crate) fn wait_for_producers(&self, gpu: &Gpu, backend: &str) -> Result<()> {
        wait_for(gpu, backend, self.streams())
    }

    /// The streams that write the arrays (`CUstream`s as integers).
    pub(crate) fn streams(&self) -> impl Iterator<Item = usize> {
        self.arrays().map(|(_, a)| a.stream)
    }

    /// Each given position tensor's name, device address and bytes.
    pub(crate) fn extents(&self) -> impl Iterator<Item = (&'static str, u64, u64)> {
        self.arrays()
            .map(|(n, a)| (n, a.ptr, (a.len * a.dtype.bytes()) as u64))
    }
}

/// Builder of [`DevicePotentials`]; the shared parameters are host arrays of `f64` or
/// device arrays of `f32` or `f64` (`*_on_device`; a parameter given twice keeps the last).
#[derive(Clone, Debug)]
pub struct DevicePotentialsBuilder<'a> {
    scores: DeviceArray<'a>,
    dims: (usize, usize, usize),
    lengths: &'a [usize],
    max_duration: usize,
    /// Transition, duration, start, end.
    shared: [Option<Shared<'a>>; 4],
    begin_boundary: Option<DeviceArray<'a>>,
    end_boundary: Option<DeviceArray<'a>>,
}

impl<'a> DevicePotentialsBuilder<'a> {
    /// Transition scores, `(C, C)` or `(K, C, C)`; default 0.
    pub fn transition<D: Dimension>(mut self, t: ArrayView<'a, f64, D>) -> Self {
        self.shared[0] = Some(Shared::Host(t.into_dyn()));
        self
    }
    /// Duration scores `(K, C)`; default 0.
    pub fn duration<D: Dimension>(mut self, t: ArrayView<'a, f64, D>) -> Self {
        self.shared[1] = Some(Shared::Host(t.into_dyn()));
        self
    }
    /// Score of the first segment's label, `(C)`; default 0.
    pub fn start<D: Dimension>(mut self, t: ArrayView<'a, f64, D>) -> Self {
        self.shared[2] = Some(Shared::Host(t.into_dyn()));
        self
    }
    /// Score of the last segment's label, `(C)`; default 0.
    pub fn end<D: Dimension>(mut self, t: ArrayView<'a, f64, D>) -> Self {
        self.shared[3] = Some(Shared::Host(t.into_dyn()));
        self
    }
    /// The transition scores on the device, `f32` or `f64`, of `shape` `[C, C]` or
    /// `[K, C, C]` (row-major, contiguous). The checks' kernel widens them to `f64` and they
    /// come to the host in the checks' one read-back, where they are checked as
    /// [`DevicePotentialsBuilder::transition`]'s are: a call gives the same results, bit for
    /// bit, as with the same values on the host. Wrong shapes are refused before any device
    /// work, NaN and `+inf` after the read-back, with the host's errors.
    pub fn transition_on_device(mut self, a: DeviceArray<'a>, shape: &[usize]) -> Self {
        self.shared[0] = Some(Shared::Device(a, shape.to_vec()));
        self
    }
    /// The duration scores on the device, of `shape` `[K, C]` (see
    /// [`DevicePotentialsBuilder::transition_on_device`]).
    pub fn duration_on_device(mut self, a: DeviceArray<'a>, shape: &[usize]) -> Self {
        self.shared[1] = Some(Shared::Device(a, shape.to_vec()));
        self
    }
    /// The start scores on the device, of `shape` `[C]` (see
    /// [`DevicePotentialsBuilder::transition_on_device`]).
    pub fn start_on_device(mut self, a: DeviceArray<'a>, shape: &[usize]) -> Self {
        self.shared[2] = Some(Shared::Device(a, shape.to_vec()));
        self
    }
    /// The end scores on the device, of `shape` `[C]` (see
    /// [`DevicePotentialsBuilder::transition_on_device`]).
    pub fn end_on_device(mut self, a: DeviceArray<'a>, shape: &[usize]) -> Self {
        self.shared[3] = Some(Shared::Device(a, shape.to_vec()));
        self
    }
    /// Score of a segment of label `c` starting at `t`, `(B, T, C)` on the device, of the
    /// scores' element type; default 0.
    pub fn begin_boundary(mut self, a: DeviceArray<'a>) -> Self {
        self.begin_boundary = Some(a);
        self
    }
    /// Score of a segment of label `c` whose last position is `t`, `(B, T, C)` on the
    /// device, of the scores' element type; default 0.
    pub fn end_boundary(mut self, a: DeviceArray<'a>) -> Self {
        self.end_boundary = Some(a);
        self
    }

    /// [`DevicePotentialsBuilder::build`] on device `ordinal`, opened by `gpu` once the host's
    /// checks have passed; errors name `backend`.
    pub(crate) fn build_on(
        self,
        ordinal: usize,
        backend: String,
        gpu: impl FnOnce() -> Result<std::sync::Arc<Gpu>>,
    ) -> Result<DevicePotentials<'a>> {
        let (b, t, c) = self.dims;
        if b == 0 {
            return Err(Error::EmptyBatch);
        }
        if self.lengths.len() != b {
            return Err(Error::LengthsCount {
                expected: b,
                got: self.lengths.len(),
            });
        }
        for (i, &l) in self.lengths.iter().enumerate() {
            if l == 0 || l > t {
                return Err(Error::Length {
                    sequence: i,
                    length: l,
                    max: t,
                });
            }
        }
        // The shared parameters, checked by the core's builder on one position of zeros
        // (those on the device: their shapes now, their values after the read-back).
        let shape = Shape::new(b, t, self.max_duration, c);
        let (has_bb, has_eb) = (self.begin_boundary.is_some(), self.end_boundary.is_some());
        let (model, shared) = shared::with_params(
            &self.shared,
            None,
            (c, self.max_duration),
            &backend,
            |params| {
                let m = Model::with(params, shape, self.lengths.to_vec(), has_bb, has_eb);
                (m, range::shared_bound(params))
            },
        )?;
        let mut p = DevicePotentials {
            model,
            scores: self.scores,
            begin_boundary: self.begin_boundary,
            end_boundary: self.end_boundary,
            magnitudes: Vec::new(),
            feasible: false,
            ordinal,
        };
        let gpu = gpu()?;
        let n = b * t * c;
        for (name, a) in p.arrays() {
            if a.len != n {
                return Err(Error::Shape {
                    tensor: name,
                    expected: format!("(B, T, C) = ({b}, {t}, {c}): {n} elements"),
                    got: vec![a.len],
                });
            }
            if a.dtype != p.scores.dtype {
                return Err(Error::Unsupported {
                    backend: backend.clone(),
                    what: format!(
                        "{name} of {:?} with scores of {:?} (give them one element type)",
                        a.dtype, p.scores.dtype
                    ),
                });
            }
            check_address(&gpu, &backend, ordinal, name, a)?;
        }
        let device: Vec<(usize, DeviceArray<'_>)> = shared::on_device(&self.shared).collect();
        for &(i, a) in &device {
            check_address(&gpu, &backend, ordinal, shared::NAMES[i], a)?;
        }
        let words = check_values(&gpu, &backend, &p, &shared, &self.shared)?;
        let shared = if device.is_empty() {
            shared
        } else {
            // The parameters' values and bounds follow the checks' words.
            let at = b + p.arrays().count() * b * OUT;
            let (values, bounds) = shared::parse(&self.shared, &words[at..]);
            let (model, shared) =
                shared::model_of(&self.shared, Some(&values), &p.model, &backend)?;
            shared::same_bounds(&backend, &bounds, &shared, &model.lengths)?;
            p.model = model;
            shared
        };
        p.magnitudes = magnitudes(&gpu, &backend, &p, &words, &shared)?;
        range::check_finite_results(&p.magnitudes, &p.model.lengths)?;
        let m = &p.model;
        let params = m.tr.iter().chain(&m.dur).chain(&m.st).chain(&m.en);
        p.feasible = !params.into_iter().any(|&x| x == f64::NEG_INFINITY)
            && !any_neg_inf(&words, b, p.arrays().count());
        Ok(p)
    }
}

/// Refuses an array that is not in device `ordinal`'s memory or whose allocation does not
/// hold it.
pub(crate) fn check_address(
    gpu: &Gpu,
    backend: &str,
    ordinal: usize,
    name: &str,
    a: DeviceArray<'_>,
) -> Result<()> {
    let refuse = |why: String| Error::Unsupported {
        backend: backend.into(),
        what: format!("{name} at device address {:#x}: {why}", a.ptr),
    };
    gpu.ctx.bind_to_thread().map_err(|e| driver(backend, e))?;
    // cuPointerGetAttributes (unlike the singular call) answers for any address: memory
    // the driver does not know has memory type 0.
    let mut kind: u32 = 0;
    let mut dev: i32 = -1;
    let (mut start, mut size): (u64, u64) = (0, 0);
    let mut attrs = [
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let mut data: [*mut std::ffi::c_void; 4] = [
        (&mut kind as *mut u32).cast(),
        (&mut dev as *mut i32).cast(),
        (&mut start as *mut u64).cast(),
        (&mut size as *mut u64).cast(),
    ];
    // SAFETY: each attribute's value has the size of the variable it is written to (the
    // memory type and ordinal 4 bytes, the range's start and size 8).
    unsafe {
        sys::cuPointerGetAttributes(
            attrs.len() as u32,
            attrs.as_mut_ptr(),
            data.as_mut_ptr(),
            a.ptr as sys::CUdeviceptr,
        )
    }
    .result()
    .map_err(|e| refuse(format!("its attributes: {e:?}")))?;
    if kind != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
        return Err(refuse("not device memory".into()));
    }
    if dev < 0 || dev as usize != ordinal {
        return Err(refuse(format!(
            "memory of device {dev}, not of device {ordinal}"
        )));
    }
    let bytes = (a.len * a.dtype.bytes()) as u64;
    if !a.ptr.is_multiple_of(a.dtype.bytes() as u64) || a.ptr + bytes > start + size {
        return Err(refuse(format!(
            "{} elements of {:?} do not fit its allocation ({size} bytes from {start:#x}) \
             aligned",
            a.len, a.dtype
        )));
    }
    Ok(())
}

/// Words per sequence and array that the kernel writes.
const OUT: usize = 7;

/// Whether `check_input` found a `-inf` within a sequence's length in one of `arrays`
/// arrays of `b` sequences (its words after the `b` bounds).
fn any_neg_inf(words: &[f64], b: usize, arrays: usize) -> bool {
    (0..arrays * b).any(|s| words[b + s * OUT + 6] != 0.0)
}

/// The checks' words, computed on the device and read back in one copy: each sequence's
/// bound, then per array the words of `check_input` (NaN and `+inf`, and what the magnitude
/// bound needs, as the host computes them for [`Potentials`](semicrf_core::Potentials));
/// where shared parameters are on the device (`slots`), their values and the bounds they
/// give (`shared_check`) after them, and the bounds start from those instead of `shared`'s.
fn check_values(
    gpu: &Gpu,
    backend: &str,
    p: &DevicePotentials<'_>,
    shared: &range::SharedBound,
    slots: &[Option<Shared<'_>>; 4],
) -> Result<Vec<f64>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let params = shared::on_device(slots).map(|(_, a)| a.stream);
    wait_for(gpu, backend, p.streams().chain(params))?;
    let sh = p.shape();
    let (b, t, c) = (sh.batch, sh.len, sh.labels);
    let err = |e| driver(backend, e);
    let arrays: Vec<(&'static str, DeviceArray<'_>)> = p.arrays().collect();
    let lens: Vec<i64> = p.model.lengths.iter().map(|&l| l as i64).collect();
    // Bounds first, then OUT words per sequence and array.
    let mut words: Vec<f64> = p.model.lengths.iter().map(|&l| shared.start(l)).collect();
    let checks = b + arrays.len() * b * OUT;
    let extra: usize = shared::on_device(slots).map(|(_, a)| a.len).sum();
    let has_device = shared::on_device(slots).next().is_some();
    words.resize(checks + if has_device { extra + b } else { 0 }, 0.0);
    // One allocation: the words, the lengths (`i64`), and the kernel's scratch (the rows'
    // largest magnitude, `f64`, their arguments and flags, `i32`), the first two uploaded in
    // one copy.
    let nw = words.len();
    let (rows, half) = (b * t, (b * t).div_ceil(2));
    let mut host = words;
    host.extend(lens.iter().map(|&l| f64::from_bits(l as u64)));
    let mut buf = gpu.uninit::<f64>(nw + b + rows + 2 * half).map_err(err)?;
    gpu.stream
        .memcpy_htod(&host, &mut buf.slice_mut(0..nw + b))
        .map_err(err)?;
    let base = gpu.ptr(&buf);
    let len_at = base.words(nw);
    if has_device {
        shared::launch(gpu, backend, slots, (len_at, b), base, base.words(checks))?;
    }
    let f = gpu.function(Kernel::CheckInput);
    let rowmax_at = len_at.words(b);
    let (rowarg_at, rowbad_at) = (rowmax_at.words(rows), rowmax_at.words(rows + half));
    for (i, (_, a)) in arrays.iter().enumerate() {
        let args = CheckArgs {
            x: DevPtr::at(a.ptr),
            len: len_at,
            rowmax: rowmax_at,
            rowarg: rowarg_at,
            rowbad: rowbad_at,
            bound: base,
            out: base.words(b + i * b * OUT),
            t: t as i64,
            c: c as i64,
            f32in: (a.dtype == Dtype::F32) as i32,
        };
        let cfg = LaunchConfig {
            grid_dim: (b as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = gpu.stream.launch_builder(f);
        l.arg(&args);
        // SAFETY: `args` is `struct CArgs` (its layout asserted at compile time); `x` holds
        // B·T·C elements of its type (checked above), the scratch B·T each, `out` at least
        // B + 3·B·OUT words; one block per sequence.
        unsafe { l.launch(cfg) }.map_err(err)?;
    }
    gpu.mark();
    gpu.stream.clone_dtoh(&buf.slice(0..nw)).map_err(err)
}

/// Each sequence's magnitude bound from the checks' words, or the first NaN or `+inf` of the
/// position tensors ([`Error::NonFinite`]).
fn magnitudes(
    gpu: &Gpu,
    backend: &str,
    p: &DevicePotentials<'_>,
    words: &[f64],
    shared: &range::SharedBound,
) -> Result<Vec<Magnitude>> {
    let (b, t, c) = (p.shape().batch, p.shape().len, p.shape().labels);
    let arrays: Vec<(&'static str, DeviceArray<'_>)> = p.arrays().collect();
    let names: Vec<&'static str> = arrays.iter().map(|(n, _)| *n).collect();
    match assemble(words, b, &names, shared) {
        Checked::Bounds(m) => Ok(m),
        Checked::Bad(i, index) => {
            let value = read_one(
                gpu,
                backend,
                arrays[i].1,
                (index[0] * t + index[1]) * c + index[2],
            )?;
            Err(Error::NonFinite {
                tensor: names[i],
                index: index.to_vec(),
                value,
            })
        }
    }
}

/// What the check kernel's words say.
#[derive(Debug, PartialEq)]
enum Checked {
    /// Every sequence's bound.
    Bounds(Vec<Magnitude>),
    /// The first NaN or `+inf`, in the order of the core's checks: the array (of `names`) and
    /// its `[b, t, c]`.
    Bad(usize, [usize; 3]),
}

/// Each sequence's bound from the words of `check_input` (the bounds, then `OUT` words per
/// sequence for each array of `names` in turn) and the shared parameters' part.
fn assemble(
    words: &[f64],
    b: usize,
    names: &[&'static str],
    shared: &range::SharedBound,
) -> Checked {
    for i in 0..names.len() {
        let o = &words[b + i * b * OUT..b + (i + 1) * b * OUT];
        if let Some(s) = (0..b).find(|&s| o[s * OUT + 4] >= 0.0) {
            return Checked::Bad(i, [s, o[s * OUT + 4] as usize, o[s * OUT + 5] as usize]);
        }
    }
    Checked::Bounds(
        (0..b)
            .map(|s| {
                let mut largest: Option<Largest> = shared.largest.clone();
                let mut abs = shared.largest_abs();
                for (i, name) in names.iter().enumerate() {
                    let o = &words[b + (i * b + s) * OUT..b + (i * b + s + 1) * OUT];
                    if o[0] > abs {
                        abs = o[0];
                        largest = Some(Largest {
                            tensor: name,
                            index: vec![s, o[1] as usize, o[2] as usize],
                            value: o[3],
                        });
                    }
                }
                Magnitude {
                    bound: words[s],
                    largest,
                }
            })
            .collect(),
    )
}

/// Element `i` of a device array, as `f64`.
fn read_one(gpu: &Gpu, backend: &str, a: DeviceArray<'_>, i: usize) -> Result<f64> {
    let at = a.ptr + (i * a.dtype.bytes()) as u64;
    let err = |e| driver(backend, e);
    gpu.stream.synchronize().map_err(err)?;
    // SAFETY: `i` is below the array's checked length; the copy is synchronous.
    unsafe {
        match a.dtype {
            Dtype::F32 => {
                let mut v = [0f32];
                cudarc::driver::result::memcpy_dtoh_sync(&mut v, at).map_err(err)?;
                Ok(f64::from(v[0]))
            }
            Dtype::F64 => {
                let mut v = [0f64];
                cudarc::driver::result::memcpy_dtoh_sync(&mut v, at).map_err(err)?;
                Ok(v[0])
            }
        }
    }
}

#[cfg(test)]
mod tests;
