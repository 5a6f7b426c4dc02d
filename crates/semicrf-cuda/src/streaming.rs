//! The host side of the streaming kernels: inputs to the device in `f64`, launches, results
//! back.

use cudarc::driver::{
    CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use ndarray::{Array1, Array2, Array3, ArrayD, ArrayView3, IxDyn};
use semicrf_core::{
    Backward, ByteCount, Decoded, Error, Gradients, Potentials, Result, Scalar, Shape, trace_back,
};

use crate::device::{Gpu, driver};
use crate::meet;
use crate::stage;

/// The kernels' argument block (`struct Args` of `kernels/streaming.cu`, field for field).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Args {
    sc: u64,
    bb: u64,
    eb: u64,
    tr: u64,
    dur: u64,
    st: u64,
    en: u64,
    len: u64,
    lz: u64,
    up: u64,
    ring: u64,
    ringh: u64,
    ring2: u64,
    ring2h: u64,
    alpha: u64,
    u: u64,
    bpd: u64,
    bpi: u64,
    out: u64,
    last: u64,
    gsc: u64,
    gbb: u64,
    geb: u64,
    bmarg: u64,
    pdur: u64,
    ptr: u64,
    pst: u64,
    pen: u64,
    seq: u64,
    t: i64,
    k: i64,
    c: i64,
    team: i32,
    ch: i32,
    smem_ring: i32,
    smem_acc: i32,
    f32in: i32,
}

// SAFETY: a plain `repr(C)` block of integers, laid out as the kernels' `struct Args`.
unsafe impl DeviceRepr for Args {}

/// Which semiring a forward kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ring {
    Log,
    Max,
    Entropy,
}

impl Ring {
    fn suffix(self) -> &'static str {
        match self {
            Ring::Log => "log",
            Ring::Max => "max",
            Ring::Entropy => "ent",
        }
    }
}

/// Lanes per team and threads per block for `K` and `C`: a team covers about half of the
/// larger of the two loops (up to a warp), so each lane has about two items.
pub(crate) fn plan(k: usize, c: usize) -> (usize, usize) {
    plan_with(k, c, items_per_lane())
}

/// Items per lane the plan aims at: `SEMICRF_CUDA_ITEMS` (for tuning), else the default.
fn items_per_lane() -> usize {
    std::env::var("SEMICRF_CUDA_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n >= 1)
        .unwrap_or(ITEMS_PER_LANE)
}

/// The default number of items per lane. Measured on an H100 (forward, S2-S7): 2 items per
/// lane beat 4, 8, 16 and 32 (fewer butterfly levels do not pay for the longer per-lane work).
const ITEMS_PER_LANE: usize = 2;

/// [`plan`] for a given number of items per lane.
pub(crate) fn plan_with(k: usize, c: usize, items: usize) -> (usize, usize) {
    let team = k.max(c).div_ceil(items).next_power_of_two().clamp(1, 32);
    let teams = c.min(1024 / team).max(1);
    let threads = (teams * team).div_ceil(32) * 32;
    (team, threads)
}

/// A kernel's use of shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Smem {
    /// Positions staged at a time.
    pub ch: usize,
    /// Whether the rings fit in shared memory.
    pub ring: bool,
    /// Whether the backward's shared-parameter accumulators do too.
    pub acc: bool,
    /// Dynamic shared memory in bytes.
    pub bytes: usize,
}

/// Which kernel a layout is for: `(header words, stages, ring words, accumulator words)` per
/// `K`, `C`.
fn parts(kernel: &str, k: usize, c: usize) -> (usize, usize, usize, usize) {
    let kc = k * c;
    match kernel {
        "fwd_static_ent" => (2 * c, 3, 2 * kc, 0),
        "fwd_dd_ent" => (2 * c, 3, 3 * kc, 0),
        "bwd_static_log" => (2 * c, 5, kc, kc + c * c),
        "bwd_dd_log" => (2 * c, 5, 2 * kc, kc + kc * c),
        k if k.starts_with("fwd_dd") => (2 * c, 3, 2 * kc, 0),
        _ => (2 * c, 3, kc, 0),
    }
}

/// The shared-memory layout of `kernel` for `K`, `C` within `limit` bytes: staged rows
/// always, then the backward's accumulators, then the rings, each where it fits.
///
/// Accumulators before rings: each window item of the backward reads a ring entry but reads
/// and writes an accumulator, so when only one of them fits, the accumulators gain more. On an
/// H100 at S8 (1, 100000, 1000, 24), where only one fits, forward+backward took 2.38 s
/// with the accumulators in shared memory and 4.70 s with the ring there.
pub(crate) fn smem(kernel: &str, k: usize, c: usize, limit: usize) -> Smem {
    let (header, stages, ring, acc) = parts(kernel, k, c);
    let words = limit / 8;
    let ch = (1024 / c.max(1)).clamp(1, 32);
    let mut used = header + stages * ch * c;
    let acc_fits = acc > 0 && used.saturating_add(acc) <= words;
    if acc_fits {
        used += acc;
    }
    let ring_fits = used.saturating_add(ring) <= words;
    if ring_fits {
        used += ring;
    }
    Smem {
        ch,
        ring: ring_fits,
        acc: acc_fits,
        bytes: used * 8,
    }
}

/// Device bytes a call allocates for `shape` and inputs of `dtype_bytes`: the scores and the
/// boundaries `given` (`[begin, end]`), with a `(K, C, C)` transition where `dd`. `smem_limit`
/// (bytes of shared memory a block may use) decides where the kernels of `kernels/meet.cu`
/// keep their rings and accumulators. A call that may run them counts their buffers and
/// those of the log-domain rerun of every sequence they could give up.
pub(crate) fn bytes(
    shape: Shape,
    (dd, given): (bool, [bool; 2]),
    what: What,
    dtype_bytes: usize,
    smem_limit: usize,
    meet: bool,
) -> ByteCount {
    let (b, t, k, c) = (shape.batch, shape.len, shape.max_duration, shape.labels);
    let tr = if dd {
        ByteCount::f64s(&[k, c, c])
    } else {
        ByteCount::f64s(&[c, c])
    };
    let stored = if dtype_bytes == 4 { 4 } else { 8 };
    let arrays = 1 + given.iter().filter(|&&g| g).count();
    let inputs = ByteCount::bytes(&[arrays, b, t, c, stored])
        + tr
        + ByteCount::f64s(&[k, c])
        + ByteCount::f64s(&[2, c])
        + ByteCount::bytes(&[8, b]);
    let rings = |w: usize| ByteCount::f64s(&[w, b, k, c]);
    let t1 = t.saturating_add(1);
    let lists = ByteCount::bytes(&[4, b]);
    let meet = meet && !dd && meet::fitting_plan(k, c, smem_limit).is_some();
    let work = match what {
        What::Forward(Ring::Entropy) => rings(if dd { 4 } else { 2 }) + ByteCount::f64s(&[2, b]),
        What::Forward(Ring::Log) if meet => {
            let lay = meet::layout(k, c, smem_limit, false);
            meet::bytes(shape, false, lay, true) + rings(1) + lists
        }
        What::Forward(_) => rings(if dd { 2 } else { 1 }) + ByteCount::f64s(&[2, b]),
        What::Viterbi => {
            rings(if dd { 2 } else { 1 })
                + ByteCount::f64s(&[2, b])
                + ByteCount::bytes(&[8, b, t1, c])
                + ByteCount::f64s(&[b, c])
        }
        What::Backward if meet => {
            let la = meet::layout(k, c, smem_limit, false);
            let lb = meet::layout(k, c, smem_limit, true);
            let lay = meet::Layout {
                ring: la.ring && lb.ring,
                ..lb
            };
            // The rerun reuses the saved rows (more than (B, T+1, C) each) and the outputs;
            // it needs log Z, three rings and its own duration and transition marginals.
            meet::bytes(shape, true, lay, true)
                + ByteCount::f64s(&[b])
                + rings(4)
                + ByteCount::f64s(&[b, c, c])
                + lists
                + lists
        }
        What::Backward => {
            let ptr = if dd {
                ByteCount::f64s(&[b, k, c, c])
            } else {
                ByteCount::f64s(&[b, c, c])
            };
            // The forward's rings stay allocated next to the backward's two.
            rings(if dd { 4 } else { 3 })
                + ByteCount::f64s(&[2, b])
                + ByteCount::f64s(&[2, b, t1, c])
                + ByteCount::f64s(&[if given[0] { 3 } else { 2 }, b, t, c])
                + ByteCount::f64s(&[b, t])
                + ByteCount::f64s(&[b, k, c])
                + ptr
                + ByteCount::f64s(&[2, b, c])
                + ByteCount::f64s(&[2, b])
        }
    };
    inputs + work
}

/// What a call computes (for its memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum What {
    Forward(Ring),
    Viterbi,
    Backward,
}

/// One call's buffers on the device. The inputs travel in two copies: the scores and
/// boundaries in the caller's precision, and every parameter (with the lengths and the
/// upstream gradient) in one block of 8-byte words; the fields are device addresses inside
/// them.
pub(crate) struct Call<'g> {
    pub(crate) gpu: &'g Gpu,
    pub(crate) backend: &'g str,
    pub(crate) model: &'g Model,
    pub(crate) shape: Shape,
    dd: bool,
    team: usize,
    threads: usize,
    /// Scores, then the boundaries given, in the caller's precision (`f32` stays `f32`).
    inputs: Input,
    pub(crate) sc: u64,
    /// 0 where not given.
    pub(crate) bb: u64,
    pub(crate) eb: u64,
    /// The parameters' block (kept alive for the addresses below).
    _words: CudaSlice<u64>,
    tr: u64,
    dur: u64,
    st: u64,
    en: u64,
    pub(crate) len: u64,
    /// The upstream gradient of a backward pass (0 otherwise).
    pub(crate) up: u64,
    /// The prepared parameters of `kernels/meet.cu` (`meet::params`), when the log
    /// semiring's static forward and backward may run there.
    par: Option<u64>,
    /// Their threads per block.
    pub(crate) meet_plan: Option<usize>,
}

/// A call's `(B, T, C)` inputs on the device: `f32` input as it is (the kernels widen each
/// value as they read it, exactly), anything else in `f64`; or the caller's own device
/// arrays.
pub(crate) enum Input {
    F32(CudaSlice<f32>),
    F64(CudaSlice<f64>),
    Borrowed { f32: bool },
}

/// The parts, one after the other, in a new device array of `T`, copied from where they are;
/// `None` unless `F` is `T`.
fn put<F: Scalar, T: DeviceRepr + 'static>(
    gpu: &Gpu,
    parts: &[std::borrow::Cow<'_, [F]>],
    n: usize,
) -> Option<std::result::Result<CudaSlice<T>, cudarc::driver::DriverError>> {
    if std::any::TypeId::of::<F>() != std::any::TypeId::of::<T>() {
        return None;
    }
    let copy = || {
        let mut dst = gpu.uninit::<T>(n)?;
        let mut at = 0;
        for p in parts.iter().filter(|p| !p.is_empty()) {
            // SAFETY: `F` is `T` (checked above), so the slice is the same memory read as
            // the same type.
            let p: &[T] = unsafe { std::slice::from_raw_parts(p.as_ptr().cast::<T>(), p.len()) };
            gpu.stream
                .memcpy_htod(p, &mut dst.slice_mut(at..at + p.len()))?;
            at += p.len();
        }
        Ok(dst)
    };
    Some(copy())
}

impl Input {
    /// `parts` one after the other, in one copy.
    fn new<F: Scalar>(gpu: &Gpu, backend: &str, parts: &[&ArrayView3<'_, F>]) -> Result<Input> {
        // Each part as one slice in memory order (a copy only for a part that is not one).
        let flat: Vec<std::borrow::Cow<'_, [F]>> = parts
            .iter()
            .map(|a| match a.as_slice() {
                Some(s) => std::borrow::Cow::Borrowed(s),
                None => std::borrow::Cow::Owned(a.iter().copied().collect()),
            })
            .collect();
        let n = flat.iter().map(|s| s.len()).sum();
        // Elements `i..i + out.len()` of the parts, converted.
        fn fill<F: Scalar, T>(
            flat: &[std::borrow::Cow<'_, [F]>],
            i: usize,
            out: &mut [T],
            to: impl Fn(F) -> T,
        ) {
            let (mut i, mut out) = (i, out);
            for s in flat {
                if out.is_empty() {
                    return;
                }
                if i >= s.len() {
                    i -= s.len();
                    continue;
                }
                let m = out.len().min(s.len() - i);
                let (now, rest) = out.split_at_mut(m);
                for (o, &x) in now.iter_mut().zip(&s[i..i + m]) {
                    *o = to(x);
                }
                (i, out) = (0, rest);
            }
        }
        // Below the staging threshold the parts go to the device from where they are: the
        // input's element type is the device's (`f32` stays `f32`, `f64` is `f64`).
        if crate::stage::direct(n * F::BYTES as usize) {
            let r = if F::BYTES == 4 {
                put::<F, f32>(gpu, &flat, n).map(|r| r.map(Input::F32))
            } else {
                put::<F, f64>(gpu, &flat, n).map(|r| r.map(Input::F64))
            };
            if let Some(r) = r {
                return r.map_err(|e| driver(backend, e));
            }
        }
        let r = if F::BYTES == 4 {
            gpu.upload_with(n, |i, out: &mut [f32]| {
                fill(&flat, i, out, |x| x.as_f64() as f32)
            })
            .map(Input::F32)
        } else {
            gpu.upload_with(n, |i, out: &mut [f64]| fill(&flat, i, out, |x| x.as_f64()))
                .map(Input::F64)
        };
        r.map_err(|e| driver(backend, e))
    }

    fn ptr(&self, stream: &std::sync::Arc<cudarc::driver::CudaStream>) -> u64 {
        match self {
            Input::F32(s) => s.device_ptr(stream).0,
            Input::F64(s) => s.device_ptr(stream).0,
            Input::Borrowed { .. } => 0,
        }
    }

    fn elem(&self) -> u64 {
        if self.f32() { 4 } else { 8 }
    }

    fn f32(&self) -> bool {
        matches!(self, Input::F32(_) | Input::Borrowed { f32: true })
    }
}

/// Arrays of 8-byte words packed for one copy to the device: `push` returns an array's
/// offset in words.
#[derive(Default)]
struct Words(Vec<u64>);

impl Words {
    fn f64s(&mut self, v: impl IntoIterator<Item = f64>) -> usize {
        let at = self.0.len();
        self.0.extend(v.into_iter().map(f64::to_bits));
        at
    }

    fn i64s(&mut self, v: impl IntoIterator<Item = i64>) -> usize {
        let at = self.0.len();
        self.0.extend(v.into_iter().map(|x| x as u64));
        at
    }
}

/// What a call needs of a problem besides its position tensors (scores and boundaries):
/// the shape, the shared parameters in `f64` and the lengths.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    pub(crate) shape: Shape,
    /// Whether the transition is `(K, C, C)`.
    pub(crate) dd: bool,
    /// `(C, C)` or `(K, C, C)`, row-major.
    tr: Vec<f64>,
    /// `(K, C)`.
    dur: Vec<f64>,
    st: Vec<f64>,
    pub(crate) en: Vec<f64>,
    pub(crate) lengths: Vec<usize>,
    pub(crate) has_bb: bool,
    pub(crate) has_eb: bool,
}

impl Model {
    /// The model of a problem held on the host.
    pub(crate) fn of<F: Scalar>(p: &Potentials<'_, F>) -> Model {
        Model::with(
            p,
            p.shape(),
            p.lengths().to_vec(),
            p.begin_boundary().is_some(),
            p.end_boundary().is_some(),
        )
    }

    /// The shared parameters of `p` with another problem's shape, lengths and boundaries
    /// (`p`'s own scores are not used).
    pub(crate) fn with<F: Scalar>(
        p: &Potentials<'_, F>,
        shape: Shape,
        lengths: Vec<usize>,
        has_bb: bool,
        has_eb: bool,
    ) -> Model {
        let (k, c) = (shape.max_duration, shape.labels);
        let dd = p.has_duration_dependent_transition();
        let tr: Vec<f64> = if dd {
            let mut v = Vec::with_capacity(k * c * c);
            for d in 0..k {
                for i in 0..c {
                    for j in 0..c {
                        v.push(p.transition_at(d + 1, i, j));
                    }
                }
            }
            v
        } else {
            (0..c * c)
                .map(|x| p.transition_at(1, x / c, x % c))
                .collect()
        };
        Model {
            shape,
            dd,
            tr,
            dur: (0..k * c)
                .map(|x| p.duration_at(x / c + 1, x % c))
                .collect(),
            st: (0..c).map(|j| p.start_at(j)).collect(),
            en: (0..c).map(|j| p.end_at(j)).collect(),
            lengths,
            has_bb,
            has_eb,
        }
    }
}

/// Where a call's scores and boundaries come from.
pub(crate) enum Source<'x, 'a, F> {
    /// Host arrays, copied to the device.
    Host(&'x Potentials<'a, F>),
    /// Device addresses of `(B, T, C)` arrays, `f32` or `f64`, used where they are.
    Device {
        sc: u64,
        bb: Option<u64>,
        eb: Option<u64>,
        f32: bool,
    },
}

impl<'g> Call<'g> {
    /// A call on `model` with its position tensors from `src` and `upstream` (a backward
    /// pass's upstream gradient; empty otherwise) on the device.
    fn new<F: Scalar>(
        gpu: &'g Gpu,
        backend: &'g str,
        model: &'g Model,
        src: Source<'_, '_, F>,
        meet: bool,
        upstream: &[f64],
    ) -> Result<Self> {
        let shape = model.shape;
        let (k, c) = (shape.max_duration, shape.labels);
        let dd = model.dd;
        let (team, threads) = plan(k, c);
        // The kernels of `kernels/meet.cu` where their shared memory fits this device.
        let meet_plan = meet::fitting_plan(k, c, gpu.smem_limit).filter(|_| meet && !dd);
        let par =
            meet_plan.and_then(|_| meet::params(&model.tr, &model.dur, &model.st, &model.en, k, c));
        let mut w = Words::default();
        let o_tr = w.f64s(model.tr.iter().copied());
        let o_dur = w.f64s(model.dur.iter().copied());
        let o_st = w.f64s(model.st.iter().copied());
        let o_en = w.f64s(model.en.iter().copied());
        let o_len = w.i64s(model.lengths.iter().map(|&l| l as i64));
        let o_up = w.f64s(upstream.iter().copied());
        let o_par = par.map(|v| w.f64s(v));
        let words = gpu.upload(&w.0).map_err(|e| driver(backend, e))?;
        let base = words.device_ptr(&gpu.stream).0;
        let at = |o: usize| base + 8 * o as u64;
        let (inputs, sc, bb, eb) = match src {
            Source::Host(p) => {
                let parts: Vec<&ArrayView3<'_, F>> = std::iter::once(p.scores())
                    .chain(p.begin_boundary())
                    .chain(p.end_boundary())
                    .collect();
                let inputs = Input::new(gpu, backend, &parts)?;
                let (ib, n) = (inputs.ptr(&gpu.stream), p.scores().len() as u64);
                let e = inputs.elem();
                let (has_bb, has_eb) = (model.has_bb, model.has_eb);
                let bb = if has_bb { ib + e * n } else { 0 };
                let eb = match (has_bb, has_eb) {
                    (_, false) => 0,
                    (false, true) => ib + e * n,
                    (true, true) => ib + 2 * e * n,
                };
                (inputs, ib, bb, eb)
            }
            Source::Device { sc, bb, eb, f32 } => (
                Input::Borrowed { f32 },
                sc,
                bb.unwrap_or(0),
                eb.unwrap_or(0),
            ),
        };
        Ok(Call {
            meet_plan: o_par.and(meet_plan),
            par: o_par.map(at),
            gpu,
            backend,
            model,
            shape,
            dd,
            team,
            threads,
            sc,
            bb,
            eb,
            inputs,
            _words: words,
            tr: at(o_tr),
            dur: at(o_dur),
            st: at(o_st),
            en: at(o_en),
            len: at(o_len),
            up: if upstream.is_empty() { 0 } else { at(o_up) },
        })
    }

    pub(crate) fn err(&self, e: cudarc::driver::DriverError) -> Error {
        driver(self.backend, e)
    }

    /// A result array that could not be shaped (a bug) as this crate's error.
    fn shape_err(&self, e: ndarray::ShapeError) -> Error {
        Error::Device {
            backend: self.backend.into(),
            message: e.to_string(),
        }
    }

    pub(crate) fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        self.gpu.zeros::<T>(n).map_err(|e| self.err(e))
    }

    pub(crate) fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        s.device_ptr(&self.gpu.stream).0
    }

    pub(crate) fn opt<T>(&self, s: &Option<CudaSlice<T>>) -> u64 {
        s.as_ref().map_or(0, |s| self.ptr(s))
    }

    /// A device array (or a part of one, a `CudaView`) on the host.
    pub(crate) fn back<T: DeviceRepr, S: DevicePtr<T>>(&self, s: &S) -> Result<Vec<T>> {
        self.gpu.stream.clone_dtoh(s).map_err(|e| self.err(e))
    }

    /// A whole device array on the host, the large ones through page-locked memory.
    pub(crate) fn back_all<T: bytemuck::Pod + DeviceRepr + Send + Sync>(
        &self,
        s: &CudaSlice<T>,
    ) -> Result<Vec<T>> {
        self.back_all_of(&s.slice(..))
    }

    /// [`Call::back_all`] of a part of an array.
    pub(crate) fn back_all_of<T: bytemuck::Pod + DeviceRepr + Send + Sync>(
        &self,
        s: &cudarc::driver::CudaView<'_, T>,
    ) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); s.len()];
        self.gpu.download(s, &mut v).map_err(|e| self.err(e))?;
        Ok(v)
    }

    /// Whether the scores and boundaries are stored as `f32`.
    pub(crate) fn f32in(&self) -> bool {
        self.inputs.f32()
    }

    /// The argument block with the inputs filled in.
    fn args(&self) -> Args {
        let sh = self.shape;
        Args {
            sc: self.sc,
            bb: self.bb,
            eb: self.eb,
            f32in: self.f32in() as i32,
            tr: self.tr,
            dur: self.dur,
            st: self.st,
            en: self.en,
            len: self.len,
            t: sh.len as i64,
            k: sh.max_duration as i64,
            c: sh.labels as i64,
            team: self.team as i32,
            ..Args::default()
        }
    }

    fn launch(&self, kernel: &str, args: &Args) -> Result<()> {
        self.launch_on(kernel, args, None)
    }

    /// Launches `kernel` on the sequences of `seq` (one block each), or on all of them.
    fn launch_on(&self, kernel: &str, args: &Args, seq: Option<&Seq>) -> Result<()> {
        let sh = self.shape;
        let m = smem(kernel, sh.max_duration, sh.labels, self.gpu.smem_limit);
        let f = self.gpu.function(kernel);
        if m.bytes > self.gpu.smem_limit {
            return Err(Error::Unsupported {
                backend: self.backend.into(),
                what: format!(
                    "{} labels: the kernel's {} bytes of shared memory exceed the device's {}",
                    sh.labels, m.bytes, self.gpu.smem_limit
                ),
            });
        }
        let mut args = *args;
        args.ch = m.ch as i32;
        args.smem_ring = m.ring as i32;
        args.smem_acc = m.acc as i32;
        let blocks = match seq {
            Some(q) => {
                args.seq = self.opt(&q.dev);
                q.host.len()
            }
            None => sh.batch,
        };
        if blocks == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (self.threads as u32, 1, 1),
            shared_mem_bytes: m.bytes as u32,
        };
        let mut b = self.gpu.stream.launch_builder(f);
        b.arg(&args);
        // SAFETY: `args` matches the kernel's `struct Args`, every pointer in it is a live
        // allocation of this call sized for the shape (or null where the kernel checks), and
        // the grid has one block per sequence (of `seq`, whose entries are below the batch).
        unsafe { b.launch(cfg) }.map_err(|e| self.err(e))?;
        Ok(())
    }

    /// A list of sequences, on the host and on the device.
    fn seq(&self, host: Vec<usize>) -> Result<Seq> {
        if host.is_empty() {
            return Ok(Seq { host, dev: None });
        }
        let v: Vec<i32> = host.iter().map(|&b| b as i32).collect();
        let dev = self.gpu.upload(&v).map_err(|e| self.err(e))?;
        Ok(Seq {
            host,
            dev: Some(dev),
        })
    }

    /// Runs a log-domain forward kernel on the sequences of `seq` (all of them for `None`).
    /// `extra` fills the optional outputs (saved tables, backpointers); `out` is the result
    /// buffer, allocated when `None`.
    fn forward(
        &self,
        ring: Ring,
        seq: Option<&Seq>,
        out: Option<u64>,
        extra: impl Fn(&mut Args),
    ) -> Result<Fwd> {
        let sh = self.shape;
        let n = sh.batch * sh.max_duration * sh.labels;
        let ent = ring == Ring::Entropy;
        let opt = |on: bool| -> Result<Option<CudaSlice<f64>>> {
            if on {
                Ok(Some(self.zeros::<f64>(n)?))
            } else {
                Ok(None)
            }
        };
        let r1 = self.zeros::<f64>(n)?;
        let r1h = opt(ent)?;
        let r2 = opt(self.dd)?;
        let r2h = opt(self.dd && ent)?;
        let own = match out {
            Some(_) => None,
            None => Some(self.zeros::<f64>(2 * sh.batch)?),
        };
        let mut a = self.args();
        a.ring = self.ptr(&r1);
        a.ringh = self.opt(&r1h);
        a.ring2 = self.opt(&r2);
        a.ring2h = self.opt(&r2h);
        a.out = match (out, &own) {
            (Some(at), _) => at,
            (None, Some(own)) => self.ptr(own),
            (None, None) => unreachable!("an output buffer is allocated where none is given"),
        };
        extra(&mut a);
        let form = if self.dd { "dd" } else { "static" };
        let kernel = format!("fwd_{form}_{}", ring.suffix());
        self.launch_on(&kernel, &a, seq)?;
        Ok(Fwd {
            out: own,
            _rings: [Some(r1), r1h, r2, r2h],
        })
    }
}

/// Sequences to run a kernel on.
struct Seq {
    host: Vec<usize>,
    /// `None` for an empty list.
    dev: Option<CudaSlice<i32>>,
}

/// A log-domain forward pass's own result buffer (`(x, h)` per sequence) and its rings.
struct Fwd {
    out: Option<CudaSlice<f64>>,
    _rings: [Option<CudaSlice<f64>>; 4],
}

thread_local! {
    static RERUNS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Sequences the kernels of `kernels/meet.cu` gave up and the log-domain kernels reran, on
/// the calling thread, since it started ([`crate::CudaEngine::reruns`]).
pub(crate) fn reruns() -> u64 {
    RERUNS.with(|r| r.get())
}

/// The sequences whose flag is set.
fn given_up(flags: &[i32]) -> Vec<usize> {
    let v: Vec<usize> = (0..flags.len()).filter(|&b| flags[b] != 0).collect();
    RERUNS.with(|r| r.set(r.get() + v.len() as u64));
    v
}

/// A forward pass: `(log-weight, entropy)` per sequence. The log semiring's static form runs
/// in `kernels/meet.cu` where it can (`meet`), and the sequences it gives up again in the
/// log domain.
pub(crate) fn forward<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, F>,
    ring: Ring,
    meet: bool,
) -> Result<Vec<[f64; 2]>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = Call::new(gpu, backend, model, src, meet && ring == Ring::Log, &[])?;
    let out = match &call.par {
        Some(par) => {
            let (bufs, small) = call.meet_forward(*par)?;
            let redo = given_up(&small.flags);
            gpu.mark();
            if redo.is_empty() {
                small.out
            } else {
                let at = bufs.small.out();
                let _rerun = call.forward(Ring::Log, Some(&call.seq(redo)?), Some(at), |_| {})?;
                gpu.mark();
                bufs.read_out(&call)?
            }
        }
        None => {
            let fwd = call.forward(ring, None, None, |_| {})?;
            gpu.mark();
            call.back(fwd.out.as_ref().expect("its own output"))?
        }
    };
    Ok(out.chunks(2).map(|w| [w[0], w[1]]).collect())
}

/// Viterbi decodings.
pub(crate) fn viterbi<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, F>,
) -> Result<Vec<Decoded>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = Call::new(gpu, backend, model, src, false, &[])?;
    let sh = model.shape;
    let (t, c) = (sh.len, sh.labels);
    let n = sh.batch * (t + 1) * c;
    let bpd = call.zeros::<i32>(n)?;
    let bpi = call.zeros::<i32>(n)?;
    let last = call.zeros::<f64>(sh.batch * c)?;
    call.forward(Ring::Max, None, None, |a| {
        a.bpd = call.ptr(&bpd);
        a.bpi = call.ptr(&bpi);
        a.last = call.ptr(&last);
    })?;
    gpu.mark();
    let (bpd, bpi, last) = (
        call.back_all(&bpd)?,
        call.back_all(&bpi)?,
        call.back(&last)?,
    );
    let dd = call.dd;
    Ok((0..sh.batch)
        .map(|b| {
            let len = model.lengths[b];
            // Final label: the smallest index attaining the maximum.
            let (mut score, mut best) = (f64::NEG_INFINITY, 0);
            for j in 0..c {
                let x = last[b * c + j] + model.en[j];
                if x > score {
                    score = x;
                    best = j;
                }
            }
            if score == f64::NEG_INFINITY {
                return Decoded {
                    score,
                    segments: Vec::new(),
                };
            }
            let at = |x: usize, j: usize| (b * (t + 1) + x) * c + j;
            let segments = trace_back(len, best, |x, j| {
                let d = bpd[at(x, j)] as usize;
                let prev = if dd {
                    bpi[at(x, j)] as usize
                } else if x == d {
                    0
                } else {
                    bpi[at(x - d, j)] as usize
                };
                (d, prev)
            });
            Decoded { score, segments }
        })
        .collect())
}

/// Forward and backward: log Z, gradients scaled by `upstream`, boundary marginals, the
/// large ones left on the device. The static form runs in `kernels/meet.cu` where it can
/// (`meet`). `then` is given them (and the call, to read them) before the device is free
/// for the next call; where `host` (the caller reads them back), with the host arrays of
/// [`ready_outputs`], and small results already on their way back ([`Outputs::into_host`]).
pub(crate) fn backward<F: Scalar, R>(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, F>,
    upstream: &[f64],
    meet: bool,
    host: bool,
    then: impl FnOnce(&Call<'_>, Outputs<'_>, Option<[Vec<f64>; 4]>) -> Result<R>,
) -> Result<R> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = Call::new(gpu, backend, model, src, meet, upstream)?;
    let (g, arrays) = match call.par {
        Some(par) => meet_backward(&call, par, upstream, host)?,
        None => log_backward(&call, upstream, host)?,
    };
    then(&call, g, arrays)
}

/// The log-domain backward of every sequence, with the host arrays of [`ready_outputs`]
/// where `host`.
fn log_backward<'g>(
    call: &Call<'g>,
    upstream: &[f64],
    host: bool,
) -> Result<(Outputs<'g>, Option<[Vec<f64>; 4]>)> {
    let sh = call.shape;
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let dd = call.dd;
    let saved = bn * (t + 1) * c;
    let alpha = call.zeros::<f64>(saved)?;
    let u = if dd {
        None
    } else {
        Some(call.zeros::<f64>(saved)?)
    };
    let fwd = call.forward(Ring::Log, None, None, |a| {
        a.alpha = call.ptr(&alpha);
        a.u = call.opt(&u);
    })?;
    let arrays = host.then(|| ready_outputs(call.model));
    let out = fwd.out.as_ref().expect("its own output");
    let log_z: Vec<f64> = call.back(out)?.chunks(2).map(|w| w[0]).collect();
    semicrf_core::check_feasible(&log_z)?;
    let o = Outs::new(call, call.model.has_bb)?;
    let mut a = call.args();
    let _bufs = o.fill(call, &mut a, &log_z, call.ptr(&alpha), call.opt(&u))?;
    let kernel = if dd { "bwd_dd_log" } else { "bwd_static_log" };
    call.launch(kernel, &a)?;
    call.gpu.mark();
    let ntr = if dd { k * c * c } else { c * c };
    let sum = |v: Vec<f64>, n: usize| weighted(upstream, bn, &v, n, |_| false, &[]);
    let tr = sum(call.back(part(&o.ptr, call)?)?, ntr);
    let dur = sum(call.back(part(&o.pdur, call)?)?, k * c);
    Ok((
        o.finish(call, log_z, tr, dur, upstream, None, None)?,
        arrays,
    ))
}

/// Σ_b g_b · (per-sequence marginals `v`, `n` each), in ascending b; the sequences for which
/// `two` holds have two rows (the two sweeps of `kernels/meet.cu`, added first) in `two_v`
/// at their `2·b` and `2·b + 1`, the others one row in `v`.
fn weighted(
    upstream: &[f64],
    bn: usize,
    v: &[f64],
    n: usize,
    two: impl Fn(usize) -> bool,
    two_v: &[f64],
) -> Vec<f64> {
    let mut acc = vec![0.0; n];
    for b in 0..bn {
        if two(b) {
            let (f, r) = (
                &two_v[2 * b * n..(2 * b + 1) * n],
                &two_v[(2 * b + 1) * n..(2 * b + 2) * n],
            );
            for ((x, &y), &z) in acc.iter_mut().zip(f).zip(r) {
                *x += upstream[b] * (y + z);
            }
        } else {
            for (x, &y) in acc.iter_mut().zip(&v[b * n..(b + 1) * n]) {
                *x += upstream[b] * y;
            }
        }
    }
    acc
}

/// One of the buffers a log-domain backward writes ([`Outs`]).
fn part<'s>(s: &'s Option<CudaSlice<f64>>, call: &Call<'_>) -> Result<&'s CudaSlice<f64>> {
    s.as_ref().ok_or_else(|| Error::Device {
        backend: call.backend.into(),
        message: "a buffer of the log-domain backward was not allocated".into(),
    })
}

/// The log-domain backward's outputs: position, begin and end marginals, boundary
/// marginals, per-sequence duration, transition, start and end marginals.
struct Outs {
    gsc: CudaSlice<f64>,
    /// `None`: begin marginals are kept in `gsc` (the kernels' `bwd_tail`).
    gbb: Option<CudaSlice<f64>>,
    /// `None` where neither the end boundary nor a rerun needs it (as the next two where no
    /// sequence of `kernels/meet.cu` is rerun).
    geb: Option<CudaSlice<f64>>,
    bmarg: CudaSlice<f64>,
    pdur: Option<CudaSlice<f64>>,
    ptr: Option<CudaSlice<f64>>,
    /// Start and end marginals: addresses of `bn·c` values each (in `own` or in the
    /// small outputs of `kernels/meet.cu`).
    pst: u64,
    pen: u64,
    /// The start and end marginals' own buffers (a log-domain backward's).
    own: Option<[CudaSlice<f64>; 2]>,
}

impl Outs {
    fn new(call: &Call<'_>, gbb: bool) -> Result<Outs> {
        let sh = call.shape;
        let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
        let btc = bn * t * c;
        let ntr = if call.dd { k * c * c } else { c * c };
        let z = |n: usize| call.zeros::<f64>(n);
        let (pst, pen) = (z(bn * c)?, z(bn * c)?);
        Ok(Outs {
            gsc: z(btc)?,
            gbb: if gbb { Some(z(btc)?) } else { None },
            geb: Some(z(btc)?),
            bmarg: z(bn * t)?,
            pdur: Some(z(bn * k * c)?),
            ptr: Some(z(bn * ntr)?),
            pst: call.ptr(&pst),
            pen: call.ptr(&pen),
            own: Some([pst, pen]),
        })
    }

    /// Fills the backward's arguments (the rings and `log_z` on the device are returned to
    /// be kept alive until the launch is done).
    fn fill(
        &self,
        call: &Call<'_>,
        a: &mut Args,
        log_z: &[f64],
        alpha: u64,
        u: u64,
    ) -> Result<[CudaSlice<f64>; 3]> {
        let sh = call.shape;
        let n = sh.batch * sh.max_duration * sh.labels;
        let ring = call.zeros::<f64>(n)?;
        let ring2 = call.zeros::<f64>(n)?;
        let lz = call.gpu.upload(log_z).map_err(|e| call.err(e))?;
        a.up = call.up;
        a.lz = call.ptr(&lz);
        a.ring = call.ptr(&ring);
        a.ring2 = call.ptr(&ring2);
        a.alpha = alpha;
        a.u = u;
        a.gsc = call.ptr(&self.gsc);
        a.gbb = self.gbb.as_ref().map_or(a.gsc, |g| call.ptr(g));
        a.geb = call.ptr(part(&self.geb, call)?);
        a.bmarg = call.ptr(&self.bmarg);
        a.pdur = call.ptr(part(&self.pdur, call)?);
        a.ptr = call.ptr(part(&self.ptr, call)?);
        a.pst = self.pst;
        a.pen = self.pen;
        Ok([ring, ring2, lz])
    }

    /// The gradients from the position, begin, end and boundary marginals on the device and
    /// the shared parameters' sums.
    #[allow(clippy::too_many_arguments)]
    fn finish<'g>(
        self,
        call: &Call<'g>,
        log_z: Vec<f64>,
        tr: Vec<f64>,
        dur: Vec<f64>,
        upstream: &[f64],
        known: Option<(Vec<f64>, Vec<f64>)>,
        staged: Option<StagedOutputs<'g>>,
    ) -> Result<Outputs<'g>> {
        let sh = call.shape;
        let (bn, k, c) = (sh.batch, sh.max_duration, sh.labels);
        let one = |v: Vec<f64>| weighted(upstream, bn, &v, c, |_| false, &[]);
        let (st, en) = match (known, &self.own) {
            (Some(se), _) => se,
            (None, Some([st, en])) => (call.back(st)?, call.back(en)?),
            (None, None) => {
                return Err(Error::Device {
                    backend: call.backend.into(),
                    message: "the start and end marginals were not read back".into(),
                });
            }
        };
        let (start, end) = (one(st), one(en));
        let transition = if call.dd {
            ArrayD::from_shape_vec(IxDyn(&[k, c, c]), tr)
        } else {
            ArrayD::from_shape_vec(IxDyn(&[c, c]), tr)
        }
        .map_err(|e| call.shape_err(e))?;
        let duration = Array2::from_shape_fn((k, c), |(d, j)| dur[d * c + j]);
        let m = call.model;
        Ok(Outputs {
            log_z,
            gsc: self.gsc,
            gbb: self.gbb.filter(|_| m.has_bb),
            geb: self.geb.filter(|_| m.has_eb),
            bmarg: self.bmarg,
            transition,
            duration,
            start: Array1::from(start),
            end: Array1::from(end),
            staged,
        })
    }
}

/// A backward pass's large results on their way into page-locked memory
/// ([`crate::stage::Staged`]): which of its arrays each is.
pub(crate) struct StagedOutputs<'g> {
    copies: stage::Staged<'g>,
    sc: usize,
    bb: Option<usize>,
    eb: Option<usize>,
    bm: usize,
}

/// A backward pass's results: the `(B, T, C)` and `(B, T)` ones on the device (and where
/// `staged`, on their way to the host), the shared parameters' gradients (summed over the
/// batch) on the host.
pub(crate) struct Outputs<'g> {
    pub(crate) log_z: Vec<f64>,
    pub(crate) gsc: CudaSlice<f64>,
    pub(crate) gbb: Option<CudaSlice<f64>>,
    pub(crate) geb: Option<CudaSlice<f64>>,
    pub(crate) bmarg: CudaSlice<f64>,
    pub(crate) transition: ArrayD<f64>,
    pub(crate) duration: Array2<f64>,
    pub(crate) start: Array1<f64>,
    pub(crate) end: Array1<f64>,
    pub(crate) staged: Option<StagedOutputs<'g>>,
}

/// Host arrays for a backward pass's results of `model` (scores' gradient, the boundaries'
/// where given, boundary marginals), with every page written once: made by the calling
/// thread while the kernels run (the thread that then copies into them, on its own memory
/// node), so that the copies back do not wait for the operating system to map fresh memory
/// (at S6, 12 MB of gradient: about 0.4 ms).
pub(crate) fn ready_outputs(model: &Model) -> [Vec<f64>; 4] {
    use rayon::prelude::*;
    let sh = model.shape;
    let (btc, bt) = (sh.batch * sh.len * sh.labels, sh.batch * sh.len);
    let touched = |n: usize| {
        let mut v = vec![0.0f64; n];
        // One write per 4 KiB page; rayon's threads for large arrays only (handing them
        // work costs more than a few hundred pages).
        // Volatile: a compiler may know that fresh zeroed memory holds zeros already.
        let page = |c: &mut [f64]| {
            c.iter_mut()
                .step_by(512)
                // SAFETY: `x` is a valid, aligned element of the array.
                .for_each(|x| unsafe { std::ptr::write_volatile(x, 0.0) })
        };
        if n > 1 << 19 {
            v.par_chunks_mut(1 << 15).for_each(page);
        } else {
            page(&mut v);
        }
        v
    };
    [
        touched(btc),
        if model.has_bb {
            touched(btc)
        } else {
            Vec::new()
        },
        if model.has_eb {
            touched(btc)
        } else {
            Vec::new()
        },
        touched(bt),
    ]
}

impl Outputs<'_> {
    /// Everything on the host, in `ready` (from [`ready_outputs`]) where given: from the
    /// page-locked buffer where the results were staged, else copied now.
    pub(crate) fn into_host(
        self,
        call: &Call<'_>,
        ready: Option<[Vec<f64>; 4]>,
    ) -> Result<Backward> {
        let sh = call.shape;
        let (bn, t, c) = (sh.batch, sh.len, sh.labels);
        let [r_sc, r_bb, r_eb, r_bm] = ready.unwrap_or_default();
        let staged = self.staged.as_ref();
        // `part`: the array's place among the staged ones.
        let back = |s: &CudaSlice<f64>, part: Option<usize>, mut v: Vec<f64>| -> Result<Vec<f64>> {
            match (staged, part) {
                (Some(st), Some(i)) => {
                    let src = st.copies.part(i).map_err(|e| call.err(e))?;
                    if v.len() == src.len() {
                        v.copy_from_slice(src);
                        return Ok(v);
                    }
                    return Ok(src.to_vec());
                }
                // The staged copies hold the page-locked buffer a large copy would wait for.
                (Some(_), None) => {
                    return Err(Error::Device {
                        backend: call.backend.into(),
                        message: "a result of a staged backward pass was not staged".into(),
                    });
                }
                (None, _) => {}
            }
            if v.len() != s.len() {
                return call.back_all(s);
            }
            call.gpu
                .download(&s.slice(..), &mut v)
                .map_err(|e| call.err(e))?;
            Ok(v)
        };
        let to3 = |s: &CudaSlice<f64>, part, v| {
            Array3::from_shape_vec((bn, t, c), back(s, part, v)?).map_err(|e| call.shape_err(e))
        };
        let opt3 =
            |s: &Option<CudaSlice<f64>>, part, v| s.as_ref().map(|s| to3(s, part, v)).transpose();
        let bm = Array2::from_shape_vec((bn, t), back(&self.bmarg, staged.map(|s| s.bm), r_bm)?)
            .map_err(|e| call.shape_err(e))?;
        Ok(Backward {
            log_z: self.log_z,
            grad: Gradients {
                scores: Some(to3(&self.gsc, staged.map(|s| s.sc), r_sc)?),
                transition: Some(self.transition),
                duration: Some(self.duration),
                start: Some(self.start),
                end: Some(self.end),
                begin_boundary: opt3(&self.gbb, staged.and_then(|s| s.bb), r_bb)?,
                end_boundary: opt3(&self.geb, staged.and_then(|s| s.eb), r_eb)?,
                edges: None,
            },
            boundary_marginals: bm,
        })
    }
}
/// The backward of `kernels/meet.cu`, with the sequences it gives up rerun in the log
/// domain: their forward into the same log Z buffer and the saved rows' memory, their
/// backward into the same marginal buffers and their own duration and transition marginals.
/// Where `host`, the results are staged for the host behind the kernels
/// ([`Gpu::stage_all`](crate::device::Gpu)) when they are small enough, and their host
/// arrays ([`ready_outputs`]) made while the kernels run.
fn meet_backward<'g>(
    call: &Call<'g>,
    par: u64,
    upstream: &[f64],
    host: bool,
) -> Result<(Outputs<'g>, Option<[Vec<f64>; 4]>)> {
    let sh = call.shape;
    let (bn, k, c) = (sh.batch, sh.max_duration, sh.labels);
    let m = call.model;
    let (bufs, g) = call.meet_backward(par, m.has_eb)?;
    let mut staged = if host {
        // The small outputs, then the large ones the caller gets.
        let mut srcs = vec![bufs.small_part(), g.gsc.slice(..)];
        let bb = m.has_bb.then(|| {
            srcs.push(g.gbb.slice(..));
            srcs.len() - 1
        });
        let eb = match g.geb.as_ref().filter(|_| m.has_eb) {
            Some(x) => {
                srcs.push(x.slice(..));
                Some(srcs.len() - 1)
            }
            None => None,
        };
        srcs.push(g.bmarg.slice(..));
        let bm = srcs.len() - 1;
        call.gpu
            .stage_all(&srcs)
            .map_err(|e| call.err(e))?
            .map(|copies| StagedOutputs {
                copies,
                sc: 1,
                bb,
                eb,
                bm,
            })
    } else {
        None
    };
    let arrays = host.then(|| ready_outputs(m));
    let mut small = match &staged {
        Some(st) => {
            st.copies.wait().map_err(|e| call.err(e))?;
            bufs.small
                .parse(st.copies.part(0).map_err(|e| call.err(e))?)
        }
        None => bufs.read(call)?,
    };
    let redo = given_up(&small.flags);
    // A rerun's backward writes every output and its own duration and transition marginals.
    let rerun = |n: usize| -> Result<Option<CudaSlice<f64>>> {
        (!redo.is_empty()).then(|| call.zeros::<f64>(n)).transpose()
    };
    let o = Outs {
        gsc: g.gsc,
        gbb: Some(g.gbb),
        geb: match g.geb {
            Some(x) => Some(x),
            None => rerun(bn * sh.len * c)?,
        },
        bmarg: g.bmarg,
        pdur: rerun(bn * k * c)?,
        ptr: rerun(bn * c * c)?,
        pst: bufs.small.pst(),
        pen: bufs.small.pen(),
        own: None,
    };
    let mut keep = Vec::new();
    if !redo.is_empty() {
        // What was staged is not the final results.
        staged = None;
        // The log-domain forward of the sequences given up, saving α and u in the (larger)
        // buffers of the saved rows, then their backward.
        let seq = call.seq(redo.clone())?;
        let out = bufs.small.out();
        let fwd = call.forward(Ring::Log, Some(&seq), Some(out), |a| {
            a.alpha = bufs.alpha;
            a.u = bufs.u;
        })?;
        let log_z: Vec<f64> = bufs.read_out(call)?.chunks(2).map(|w| w[0]).collect();
        semicrf_core::check_feasible(&log_z)?;
        let mut a = call.args();
        keep.push(o.fill(call, &mut a, &log_z, bufs.alpha, bufs.u)?);
        call.launch_on("bwd_static_log", &a, Some(&seq))?;
        drop(fwd);
        // Log Z and the start and end marginals of the sequences rerun.
        let again = bufs.read(call)?;
        (small.out, small.pst, small.pen) = (again.out, again.pst, again.pen);
    }
    call.gpu.mark();
    let log_z: Vec<f64> = small.out.chunks(2).map(|w| w[0]).collect();
    semicrf_core::check_feasible(&log_z)?;
    let again = |b: usize| redo.binary_search(&b).is_err();
    let (tr, dur) = if redo.is_empty() {
        // Summed on the device (`meet_sum`), as `weighted` sums them.
        (
            std::mem::take(&mut small.tr),
            std::mem::take(&mut small.dur),
        )
    } else {
        let (pdur2, ptr2) = bufs.read_sweeps(call)?;
        (
            weighted(
                upstream,
                bn,
                &call.back(part(&o.ptr, call)?)?,
                c * c,
                again,
                &ptr2,
            ),
            weighted(
                upstream,
                bn,
                &call.back(part(&o.pdur, call)?)?,
                k * c,
                again,
                &pdur2,
            ),
        )
    };
    let known = Some((small.pst, small.pen));
    let out = o.finish(call, log_z, tr, dur, upstream, known, staged)?;
    Ok((out, arrays))
}

#[cfg(test)]
mod tests {
    use super::weighted;

    /// `meet_sum` (`kernels/io.cu`), run on the CPU, sums the per-sweep marginals exactly as
    /// the host's `weighted` does, bit for bit, in shapes of one and several thread blocks.
    #[test]
    fn meet_sum_is_the_hosts_weighted_sum() {
        let exe = crate::meet::tests::build_emulator("semicrf-sum-emu", "sum_main.cpp", &[]);
        let Some(exe) = exe else { return };
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 0.5
        };
        for (b, kc, cc) in [(1, 7, 9), (5, 300, 64), (3, 2400, 576)] {
            let pdur: Vec<f64> = (0..b * 2 * kc).map(|_| next()).collect();
            let ptr: Vec<f64> = (0..b * 2 * cc).map(|_| next()).collect();
            let up: Vec<f64> = (0..b).map(|_| next() * 3.0).collect();
            let mut buf = Vec::new();
            for v in [b, kc, cc] {
                buf.extend_from_slice(&(v as i64).to_le_bytes());
            }
            for v in pdur.iter().chain(&ptr).chain(&up) {
                buf.extend_from_slice(&v.to_le_bytes());
            }
            let red = crate::meet::tests::run_emulated(&exe, &buf);
            let want: Vec<f64> = weighted(&up, b, &[], kc, |_| true, &pdur)
                .into_iter()
                .chain(weighted(&up, b, &[], cc, |_| true, &ptr))
                .collect();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&red), bits(&want), "B {b}, K·C {kc}, C·C {cc}");
        }
    }
}
