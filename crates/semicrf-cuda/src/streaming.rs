//! The host side of the streaming kernels: inputs to the device in `f64`, launches, results
//! back.

use cudarc::driver::{
    CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use ndarray::{Array1, Array2, Array3, ArrayD, IxDyn};
use semicrf_core::{
    Backward, ByteCount, Decoded, Error, Gradients, Potentials, Result, Scalar, Shape, trace_back,
};

use crate::device::{Gpu, driver};

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
    flag: u64,
    ex: u64,
    zl: u64,
    lin: u64,
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
    // The linear-domain kernels' header: five per-label rows (two double-buffered, λ), the
    // flag and 32 exponents; the backward stages one more row of α.
    let lin = 5 * c + 34;
    match kernel {
        "fwd_lin_log" => (lin, 3, kc, 0),
        "bwd_lin_log" => (lin + c, 5, kc, kc + c * c),
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

/// The kernel that runs `kernel` with layout `m`: the linear-domain kernels come in one
/// variant per placement of the ring (`_r`: shared memory) and of the backward's accumulators
/// (`_a`), so that they address shared memory directly.
pub(crate) fn placed(kernel: &str, m: Smem) -> String {
    let suffix = match (kernel, m.ring, m.acc) {
        ("fwd_lin_log", true, _) | ("bwd_lin_log", true, false) => "_r",
        ("bwd_lin_log", false, true) => "_a",
        ("bwd_lin_log", true, true) => "_ra",
        _ => "",
    };
    format!("{kernel}{suffix}")
}

/// Device bytes a call allocates for `shape` and inputs of `dtype_bytes` (scores and both
/// boundaries counted, and the begin boundary's gradient, so an upper bound).
pub(crate) fn bytes(shape: Shape, dd: bool, what: What, dtype_bytes: usize) -> ByteCount {
    let (b, t, k, c) = (shape.batch, shape.len, shape.max_duration, shape.labels);
    let tr = if dd {
        ByteCount::f64s(&[k, c, c])
    } else {
        ByteCount::f64s(&[c, c])
    };
    let stored = if dtype_bytes == 4 { 4 } else { 8 };
    let inputs = ByteCount::bytes(&[3, b, t, c, stored])
        + tr
        + ByteCount::f64s(&[k, c])
        + ByteCount::f64s(&[2, c])
        + ByteCount::f64s(&[b]);
    let rings = |w: usize| ByteCount::f64s(&[w, b, k, c]);
    let t1 = t.saturating_add(1);
    // The linear-domain path: prepared parameters, 4-byte flags and sequence lists (a flag
    // and a list in a forward; two flags and four lists in a backward), the backward's
    // exponents and Z.
    let linear = ByteCount::f64s(&[k, c])
        + ByteCount::f64s(&[2, c, c])
        + ByteCount::f64s(&[5, c])
        + match what {
            What::Backward => {
                ByteCount::bytes(&[24, b]) + ByteCount::bytes(&[8, b, t1]) + ByteCount::f64s(&[b])
            }
            _ => ByteCount::bytes(&[8, b]),
        };
    let fwd = ByteCount::f64s(&[2, b]) + linear;
    let work = match what {
        What::Forward(Ring::Entropy) => rings(if dd { 4 } else { 2 }),
        What::Forward(_) => rings(if dd { 2 } else { 1 }),
        What::Viterbi => {
            rings(if dd { 2 } else { 1 })
                + ByteCount::bytes(&[8, b, t1, c])
                + ByteCount::f64s(&[b, c])
        }
        What::Backward => {
            let ptr = if dd {
                ByteCount::f64s(&[b, k, c, c])
            } else {
                ByteCount::f64s(&[b, c, c])
            };
            // The forward's rings stay allocated next to the backward's two.
            rings(if dd { 4 } else { 3 })
                + ByteCount::f64s(&[2, b, t1, c])
                + ByteCount::f64s(&[3, b, t, c])
                + ByteCount::f64s(&[b, t])
                + ByteCount::f64s(&[b, k, c])
                + ptr
                + ByteCount::f64s(&[2, b, c])
                + ByteCount::f64s(&[2, b])
        }
    };
    inputs + fwd + work
}

/// What a call computes (for its memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum What {
    Forward(Ring),
    Viterbi,
    Backward,
}

/// One call's buffers on the device.
struct Call<'g> {
    gpu: &'g Gpu,
    backend: &'g str,
    shape: Shape,
    dd: bool,
    team: usize,
    threads: usize,
    /// Scores and boundaries in the caller's precision (`f32` stays `f32`).
    sc: Input,
    bb: Option<Input>,
    eb: Option<Input>,
    tr: CudaSlice<f64>,
    dur: CudaSlice<f64>,
    st: CudaSlice<f64>,
    en: CudaSlice<f64>,
    len: CudaSlice<i64>,
    /// The prepared linear-domain parameters (`Lin` of `kernels/linear.cu`), when the log
    /// semiring's kernels may run in the linear domain.
    lin: Option<CudaSlice<f64>>,
}

/// The largest magnitude of a finite parameter the linear-domain kernels take (nats; the
/// kernels check scores and boundaries against the same `LIN_RANGE`).
const LIN_RANGE: f64 = 50.0;

/// The linear-domain parameters of a static transition `tr` (C, C) and durations `dur`
/// (K, C): `Wl`, `Tl`, `Tr`, `Md`, `Mt`, `Mr` as `kernels/linear.cu` describes them, or
/// `None` when a finite parameter is beyond [`LIN_RANGE`].
fn linear_params(
    tr: &[f64],
    dur: &[f64],
    st: &[f64],
    en: &[f64],
    k: usize,
    c: usize,
) -> Option<Vec<f64>> {
    let all = tr.iter().chain(dur).chain(st).chain(en);
    if all
        .clone()
        .any(|&x| x != f64::NEG_INFINITY && x.abs() > LIN_RANGE)
    {
        return None;
    }
    // A maximum over -inf only is taken as 0: every weight is then -inf (-0.0).
    let max = |it: &mut dyn Iterator<Item = f64>| {
        let m = it.fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY { 0.0 } else { m }
    };
    let rel = |x: f64, m: f64| {
        if x == f64::NEG_INFINITY {
            -0.0
        } else {
            (x - m).exp()
        }
    };
    let md: Vec<f64> = (0..c)
        .map(|j| max(&mut (0..k).map(|d| dur[d * c + j])))
        .collect();
    let mt: Vec<f64> = (0..c)
        .map(|j| max(&mut (0..c).map(|i| tr[i * c + j])))
        .collect();
    let mr: Vec<f64> = (0..c)
        .map(|i| max(&mut (0..c).map(|j| tr[i * c + j])))
        .collect();
    let mut v = Vec::with_capacity(k * c + 2 * c * c + 5 * c);
    // Label-major: Wl[j·K + d-1].
    v.extend((0..k * c).map(|x| rel(dur[(x % k) * c + x / k], md[x / k])));
    v.extend((0..c * c).map(|x| rel(tr[x], mt[x % c])));
    v.extend((0..c * c).map(|x| rel(tr[x], mr[x / c])));
    let (emt, emr): (Vec<f64>, Vec<f64>) = (
        mt.iter().map(|x| x.exp()).collect(),
        mr.iter().map(|x| x.exp()).collect(),
    );
    v.extend(md);
    v.extend(mt);
    v.extend(mr);
    v.extend(emt);
    v.extend(emr);
    Some(v)
}

/// A `(B, T, C)` input on the device: `f32` input as it is (the kernels widen each value
/// as they read it, exactly), anything else in `f64`.
enum Input {
    F32(CudaSlice<f32>),
    F64(CudaSlice<f64>),
}

impl Input {
    fn new<F: Scalar>(gpu: &Gpu, backend: &str, it: impl Iterator<Item = F>) -> Result<Input> {
        let r = if F::BYTES == 4 {
            let v: Vec<f32> = it.map(|x| x.as_f64() as f32).collect();
            gpu.upload(&v).map(Input::F32)
        } else {
            let v: Vec<f64> = it.map(|x| x.as_f64()).collect();
            gpu.upload(&v).map(Input::F64)
        };
        r.map_err(|e| driver(backend, e))
    }

    fn ptr(&self, stream: &std::sync::Arc<cudarc::driver::CudaStream>) -> u64 {
        match self {
            Input::F32(s) => s.device_ptr(stream).0,
            Input::F64(s) => s.device_ptr(stream).0,
        }
    }
}

impl<'g> Call<'g> {
    fn new<F: Scalar>(
        gpu: &'g Gpu,
        backend: &'g str,
        p: &Potentials<'_, F>,
        linear: bool,
    ) -> Result<Self> {
        let shape = p.shape();
        let (k, c) = (shape.max_duration, shape.labels);
        let dd = p.has_duration_dependent_transition();
        let up = |v: &[f64]| gpu.upload(v).map_err(|e| driver(backend, e));
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
        let dur: Vec<f64> = (0..k * c)
            .map(|x| p.duration_at(x / c + 1, x % c))
            .collect();
        let st: Vec<f64> = (0..c).map(|j| p.start_at(j)).collect();
        let en: Vec<f64> = (0..c).map(|j| p.end_at(j)).collect();
        let len: Vec<i64> = p.lengths().iter().map(|&l| l as i64).collect();
        let (team, threads) = plan(k, c);
        let lin = match linear && !dd {
            true => match linear_params(&tr, &dur, &st, &en, k, c) {
                Some(v) => Some(up(&v)?),
                None => None,
            },
            false => None,
        };
        Ok(Call {
            lin,
            gpu,
            backend,
            shape,
            dd,
            team,
            threads,
            sc: Input::new(gpu, backend, p.scores().iter().copied())?,
            bb: match p.begin_boundary() {
                Some(a) => Some(Input::new(gpu, backend, a.iter().copied())?),
                None => None,
            },
            eb: match p.end_boundary() {
                Some(a) => Some(Input::new(gpu, backend, a.iter().copied())?),
                None => None,
            },
            tr: up(&tr)?,
            dur: up(&dur)?,
            st: up(&st)?,
            en: up(&en)?,
            len: gpu.upload(&len).map_err(|e| driver(backend, e))?,
        })
    }

    fn err(&self, e: cudarc::driver::DriverError) -> Error {
        driver(self.backend, e)
    }

    fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        self.gpu.zeros::<T>(n).map_err(|e| self.err(e))
    }

    fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        s.device_ptr(&self.gpu.stream).0
    }

    fn opt<T>(&self, s: &Option<CudaSlice<T>>) -> u64 {
        s.as_ref().map_or(0, |s| self.ptr(s))
    }

    fn back<T: DeviceRepr>(&self, s: &CudaSlice<T>) -> Result<Vec<T>> {
        self.gpu.stream.clone_dtoh(s).map_err(|e| self.err(e))
    }

    /// The argument block with the inputs filled in.
    fn args(&self) -> Args {
        let sh = self.shape;
        Args {
            sc: self.sc.ptr(&self.gpu.stream),
            bb: self.bb.as_ref().map_or(0, |x| x.ptr(&self.gpu.stream)),
            eb: self.eb.as_ref().map_or(0, |x| x.ptr(&self.gpu.stream)),
            f32in: matches!(self.sc, Input::F32(_)) as i32,
            tr: self.ptr(&self.tr),
            dur: self.ptr(&self.dur),
            st: self.ptr(&self.st),
            en: self.ptr(&self.en),
            len: self.ptr(&self.len),
            lin: self.opt(&self.lin),
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
        let f = self.gpu.function(&placed(kernel, m));
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

    /// Runs a forward kernel. `extra` fills the optional outputs (saved tables,
    /// backpointers). The log semiring's static form runs in the linear domain where it can,
    /// then in the log domain for the sequences it gave up.
    fn forward(&self, ring: Ring, extra: impl Fn(&mut Args)) -> Result<Fwd> {
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
        let out = self.zeros::<f64>(2 * sh.batch)?;
        let mut a = self.args();
        a.ring = self.ptr(&r1);
        a.ringh = self.opt(&r1h);
        a.ring2 = self.opt(&r2);
        a.ring2h = self.opt(&r2h);
        a.out = self.ptr(&out);
        extra(&mut a);
        let form = if self.dd { "dd" } else { "static" };
        let kernel = format!("fwd_{form}_{}", ring.suffix());
        let mut logd: Vec<usize> = (0..sh.batch).collect();
        if ring == Ring::Log && self.lin.is_some() {
            let flag = self.zeros::<i32>(sh.batch)?;
            let mut al = a;
            al.flag = self.ptr(&flag);
            self.launch("fwd_lin_log", &al)?;
            let flags = self.back(&flag)?;
            logd.retain(|&b| flags[b] != 0);
            self.launch_on(&kernel, &a, Some(&self.seq(logd.clone())?))?;
        } else {
            self.launch(&kernel, &a)?;
        }
        Ok(Fwd {
            out,
            args: a,
            kernel,
            logd,
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

/// A forward pass's results and what a rerun needs.
struct Fwd {
    /// `(x, h)` per sequence.
    out: CudaSlice<f64>,
    args: Args,
    /// The log-domain kernel.
    kernel: String,
    /// The sequences the log-domain kernel ran (every one but those of the linear domain).
    logd: Vec<usize>,
    _rings: [Option<CudaSlice<f64>>; 4],
}

/// A forward pass: `(log-weight, entropy)` per sequence.
pub(crate) fn forward<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    p: &Potentials<'_, F>,
    ring: Ring,
    linear: bool,
) -> Result<Vec<[f64; 2]>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = Call::new(gpu, backend, p, linear)?;
    let fwd = call.forward(ring, |_| {})?;
    gpu.mark();
    let out = call.back(&fwd.out)?;
    Ok(out.chunks(2).map(|w| [w[0], w[1]]).collect())
}

/// Viterbi decodings.
pub(crate) fn viterbi<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    p: &Potentials<'_, F>,
) -> Result<Vec<Decoded>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = Call::new(gpu, backend, p, false)?;
    let sh = p.shape();
    let (t, c) = (sh.len, sh.labels);
    let n = sh.batch * (t + 1) * c;
    let bpd = call.zeros::<i32>(n)?;
    let bpi = call.zeros::<i32>(n)?;
    let last = call.zeros::<f64>(sh.batch * c)?;
    call.forward(Ring::Max, |a| {
        a.bpd = call.ptr(&bpd);
        a.bpi = call.ptr(&bpi);
        a.last = call.ptr(&last);
    })?;
    gpu.mark();
    let (bpd, bpi, last) = (call.back(&bpd)?, call.back(&bpi)?, call.back(&last)?);
    let dd = call.dd;
    Ok((0..sh.batch)
        .map(|b| {
            let len = p.lengths()[b];
            // Final label: the smallest index attaining the maximum.
            let (mut score, mut best) = (f64::NEG_INFINITY, 0);
            for j in 0..c {
                let x = last[b * c + j] + p.end_at(j);
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

/// Forward and backward: log Z, gradients scaled by `upstream`, boundary marginals.
pub(crate) fn backward<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    p: &Potentials<'_, F>,
    upstream: &[f64],
    linear: bool,
) -> Result<Backward> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = Call::new(gpu, backend, p, linear)?;
    let sh = p.shape();
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let dd = call.dd;
    let saved = bn * (t + 1) * c;
    let alpha = call.zeros::<f64>(saved)?;
    let u = if dd {
        None
    } else {
        Some(call.zeros::<f64>(saved)?)
    };
    let lin = call.lin.is_some();
    let ex = call.zeros::<i64>(if lin { bn * (t + 1) } else { 1 })?;
    let zl = call.zeros::<f64>(bn)?;
    let fwd = call.forward(Ring::Log, |a| {
        a.alpha = call.ptr(&alpha);
        a.u = call.opt(&u);
        a.ex = call.ptr(&ex);
        a.zl = call.ptr(&zl);
    })?;
    let log_z = |out: &[f64]| -> Vec<f64> { out.chunks(2).map(|w| w[0]).collect() };
    semicrf_core::check_feasible(&log_z(&call.back(&fwd.out)?))?;
    let ring = call.zeros::<f64>(bn * k * c)?;
    let ring2 = call.zeros::<f64>(bn * k * c)?;
    let upd = call.gpu.upload(upstream).map_err(|e| call.err(e))?;
    let btc = bn * t * c;
    let gsc = call.zeros::<f64>(btc)?;
    // Without a begin boundary its marginals are kept in `gsc` (the kernels' `bwd_tail`).
    let gbb = match p.begin_boundary() {
        Some(_) => Some(call.zeros::<f64>(btc)?),
        None => None,
    };
    let geb = call.zeros::<f64>(btc)?;
    let bmarg = call.zeros::<f64>(bn * t)?;
    let pdur = call.zeros::<f64>(bn * k * c)?;
    let ntr = if dd { k * c * c } else { c * c };
    let ptr = call.zeros::<f64>(bn * ntr)?;
    let pst = call.zeros::<f64>(bn * c)?;
    let pen = call.zeros::<f64>(bn * c)?;
    let mut a = call.args();
    a.up = call.ptr(&upd);
    a.ring = call.ptr(&ring);
    a.ring2 = call.ptr(&ring2);
    a.alpha = call.ptr(&alpha);
    a.u = call.opt(&u);
    a.ex = call.ptr(&ex);
    a.zl = call.ptr(&zl);
    a.gsc = call.ptr(&gsc);
    a.gbb = gbb.as_ref().map_or(a.gsc, |g| call.ptr(g));
    a.geb = call.ptr(&geb);
    a.bmarg = call.ptr(&bmarg);
    a.pdur = call.ptr(&pdur);
    a.ptr = call.ptr(&ptr);
    a.pst = call.ptr(&pst);
    a.pen = call.ptr(&pen);
    // The sequences the log-domain backward runs: those its forward ran, and those the
    // linear-domain backward gives up (their forward is rerun in the log domain first).
    let mut logd = fwd.logd.clone();
    if lin {
        let mut linear: Vec<usize> = (0..bn).collect();
        linear.retain(|b| logd.binary_search(b).is_err());
        let flag = call.zeros::<i32>(bn)?;
        a.flag = call.ptr(&flag);
        call.launch_on("bwd_lin_log", &a, Some(&call.seq(linear.clone())?))?;
        let flags = call.back(&flag)?;
        linear.retain(|&b| flags[b] != 0);
        call.launch_on(&fwd.kernel, &fwd.args, Some(&call.seq(linear.clone())?))?;
        logd.extend(linear);
        logd.sort_unstable();
        a.flag = 0;
    }
    let log_z = log_z(&call.back(&fwd.out)?);
    let lz = call.gpu.upload(&log_z).map_err(|e| call.err(e))?;
    a.lz = call.ptr(&lz);
    let kernel = if dd { "bwd_dd_log" } else { "bwd_static_log" };
    call.launch_on(kernel, &a, Some(&call.seq(logd)?))?;
    gpu.mark();
    let to3 = |v: Vec<f64>| {
        Array3::from_shape_vec((bn, t, c), v).map_err(|e| Error::Device {
            backend: backend.into(),
            message: e.to_string(),
        })
    };
    let scores = to3(call.back(&gsc)?)?;
    let bb = match &gbb {
        Some(g) => Some(to3(call.back(g)?)?),
        None => None,
    };
    let eb = match p.end_boundary() {
        Some(_) => Some(to3(call.back(&geb)?)?),
        None => None,
    };
    let bm = Array2::from_shape_vec((bn, t), call.back(&bmarg)?).map_err(|e| Error::Device {
        backend: backend.into(),
        message: e.to_string(),
    })?;
    // Shared parameters: Σ_b g_b · (per-sequence marginals), in ascending b.
    let sum = |v: Vec<f64>, n: usize| {
        let mut acc = vec![0.0; n];
        for (b, chunk) in v.chunks(n.max(1)).enumerate().take(bn) {
            for (x, &y) in acc.iter_mut().zip(chunk) {
                *x += upstream[b] * y;
            }
        }
        acc
    };
    let tr = sum(call.back(&ptr)?, ntr);
    let dur = sum(call.back(&pdur)?, k * c);
    let start = sum(call.back(&pst)?, c);
    let end = sum(call.back(&pen)?, c);
    let transition = if dd {
        ArrayD::from_shape_vec(IxDyn(&[k, c, c]), tr)
    } else {
        ArrayD::from_shape_vec(IxDyn(&[c, c]), tr)
    }
    .map_err(|e| Error::Device {
        backend: backend.into(),
        message: e.to_string(),
    })?;
    let duration = Array2::from_shape_fn((k, c), |(d, j)| dur[d * c + j]);
    Ok(Backward {
        log_z,
        grad: Gradients {
            scores: Some(scores),
            transition: Some(transition),
            duration: Some(duration),
            start: Some(Array1::from(start)),
            end: Some(Array1::from(end)),
            begin_boundary: bb,
            end_boundary: eb,
            edges: None,
        },
        boundary_marginals: bm,
    })
}
