//! One call of the streaming kernels: the problem's model and position tensors on the device
//! (the inputs in two copies, `transfer::upload`), the addresses the kernels read, the launch
//! plan of the teams, and the helpers every algorithm uses to allocate, address and read
//! back its buffers.

pub(crate) mod model;
pub(crate) mod sums;

use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, ValidAsZeroBits};
use ndarray::ArrayView3;
use semicrf_core::{Error, Result, Scalar, Shape};

pub(crate) use model::{Model, Source};

use crate::device::{Gpu, driver};
use crate::kernel::DevPtr;
use crate::transfer::upload::{Input, Words};
use crate::tuning::tuning;

/// Lanes per team and threads per block for `K` and `C` (the log-domain and edge-form
/// kernels): a team covers about half of the larger of the two loops (up to a warp), so each
/// lane has about two items (`SEMICRF_CUDA_LANE_ITEMS`).
pub(crate) fn team_plan(k: usize, c: usize) -> (usize, usize) {
    team_plan_with(k, c, tuning().lane_items)
}

/// [`team_plan`] for a given number of items per lane.
pub(crate) fn team_plan_with(k: usize, c: usize, items: usize) -> (usize, usize) {
    let team = k.max(c).div_ceil(items).next_power_of_two().clamp(1, 32);
    let teams = c.min(1024 / team).max(1);
    let threads = (teams * team).div_ceil(32) * 32;
    (team, threads)
}

/// One call's buffers on the device. The inputs travel in two copies: the scores and
/// boundaries in the caller's precision, and every parameter (with the lengths and the
/// upstream gradient) in one block of 8-byte words; the fields are device addresses inside
/// them.
pub(crate) struct StreamCall<'g> {
    pub(crate) gpu: &'g Gpu,
    pub(crate) backend: &'g str,
    pub(crate) model: &'g Model,
    pub(crate) shape: Shape,
    pub(crate) dd: bool,
    pub(crate) team: usize,
    pub(crate) threads: usize,
    /// Scores, then the boundaries given, in the caller's precision (`f32` stays `f32`).
    pub(crate) inputs: Input,
    pub(crate) sc: DevPtr,
    /// 0 where not given.
    pub(crate) bb: DevPtr,
    pub(crate) eb: DevPtr,
    /// The parameters' block (kept alive for the addresses below).
    _words: CudaSlice<u64>,
    pub(crate) tr: DevPtr,
    pub(crate) dur: DevPtr,
    pub(crate) st: DevPtr,
    pub(crate) en: DevPtr,
    pub(crate) len: DevPtr,
    /// The upstream gradient of a backward pass (0 otherwise).
    pub(crate) up: DevPtr,
    /// The prepared parameters of the meet kernels (`meet::params`), when the log
    /// semiring's static forward and backward may run there.
    pub(crate) par: Option<DevPtr>,
    /// Their threads per block.
    pub(crate) meet_plan: Option<usize>,
}

impl<'g> StreamCall<'g> {
    /// A call on `model` with its position tensors from `src` and `upstream` (a backward
    /// pass's upstream gradient; empty otherwise) on the device, and where `meet` is given,
    /// the meet kernels' threads a block and prepared parameters (`meet::params`).
    pub(crate) fn new<F: Scalar>(
        gpu: &'g Gpu,
        backend: &'g str,
        model: &'g Model,
        src: Source<'_, '_, F>,
        upstream: &[f64],
        meet: Option<(usize, Vec<f64>)>,
    ) -> Result<Self> {
        let shape = model.shape;
        let (k, c) = (shape.max_duration, shape.labels);
        let dd = model.dd;
        let (team, threads) = team_plan(k, c);
        let (meet_plan, par) = match meet {
            Some((threads, par)) => (Some(threads), Some(par)),
            None => (None, None),
        };
        let mut w = Words::default();
        let o_tr = w.f64s(model.tr.iter().copied());
        let o_dur = w.f64s(model.dur.iter().copied());
        let o_st = w.f64s(model.st.iter().copied());
        let o_en = w.f64s(model.en.iter().copied());
        let o_len = w.i64s(model.lengths.iter().map(|&l| l as i64));
        let o_up = w.f64s(upstream.iter().copied());
        let o_par = par.map(|v| w.f64s(v));
        let words = gpu.upload(&w.0).map_err(|e| driver(backend, e))?;
        let base = gpu.ptr(&words);
        let at = |o: usize| base.words(o);
        let (inputs, sc, bb, eb) = match src {
            Source::Host(p) => {
                let parts: Vec<&ArrayView3<'_, F>> = std::iter::once(p.scores())
                    .chain(p.begin_boundary())
                    .chain(p.end_boundary())
                    .collect();
                let inputs = Input::new(gpu, backend, &parts)?;
                let (ib, n) = (inputs.ptr(gpu), p.scores().len());
                let e = inputs.elem();
                let (has_bb, has_eb) = (model.has_bb, model.has_eb);
                let bb = if has_bb { ib.add(e * n) } else { DevPtr::NULL };
                let eb = match (has_bb, has_eb) {
                    (_, false) => DevPtr::NULL,
                    (false, true) => ib.add(e * n),
                    (true, true) => ib.add(2 * e * n),
                };
                (inputs, ib, bb, eb)
            }
            Source::Device { sc, bb, eb, f32 } => (
                Input::Borrowed { f32 },
                sc,
                bb.unwrap_or(DevPtr::NULL),
                eb.unwrap_or(DevPtr::NULL),
            ),
        };
        Ok(StreamCall {
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
            up: if upstream.is_empty() {
                DevPtr::NULL
            } else {
                at(o_up)
            },
        })
    }

    pub(crate) fn err(&self, e: cudarc::driver::DriverError) -> Error {
        driver(self.backend, e)
    }

    /// A result array that could not be shaped (a bug) as this crate's error.
    pub(crate) fn shape_err(&self, e: ndarray::ShapeError) -> Error {
        Error::Device {
            backend: self.backend.into(),
            message: e.to_string(),
        }
    }

    pub(crate) fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        self.gpu.zeros::<T>(n).map_err(|e| self.err(e))
    }

    pub(crate) fn ptr<T>(&self, s: &CudaSlice<T>) -> DevPtr {
        self.gpu.ptr(s)
    }

    /// The address of an optional buffer, null where absent.
    pub(crate) fn opt<T>(&self, s: &Option<CudaSlice<T>>) -> DevPtr {
        s.as_ref().map_or(DevPtr::NULL, |s| self.ptr(s))
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

    /// [`StreamCall::back_all`] of a part of an array.
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

    /// A list of sequences, on the host and on the device.
    pub(crate) fn seq(&self, host: Vec<usize>) -> Result<Seq> {
        if host.is_empty() {
            return Ok(Seq {
                blocks: 0,
                dev: DevPtr::NULL,
                _own: None,
            });
        }
        let v: Vec<i32> = host.iter().map(|&b| b as i32).collect();
        let own = self.gpu.upload(&v).map_err(|e| self.err(e))?;
        Ok(Seq {
            blocks: host.len(),
            dev: self.ptr(&own),
            _own: Some(own),
        })
    }

    /// Zeroed buffers of `parts` words each (`f64` words; none for a part of 0), carved out
    /// of one allocation: one allocation, one memset and one free instead of one of each a
    /// buffer, a few microseconds each on the host. The parts are whole `f64` words, so each
    /// is aligned for `f64`, `i64` and `i32` (the kernels make no wider accesses); the bytes
    /// are those of separate buffers, as `memory_required` counts them.
    pub(crate) fn arena<const N: usize>(&self, parts: [usize; N]) -> Result<(Arena, [DevPtr; N])> {
        let mem = self.zeros::<f64>(parts.iter().sum())?;
        let mut at = [DevPtr::NULL; N];
        let mut next = self.ptr(&mem);
        for (a, &n) in at.iter_mut().zip(&parts) {
            if n > 0 {
                *a = next;
                next = next.words(n);
            }
        }
        Ok((Arena { _mem: mem }, at))
    }
}

/// The allocation of [`StreamCall::arena`]'s buffers, kept until their work is queued (it
/// is freed in stream order).
pub(crate) struct Arena {
    _mem: CudaSlice<f64>,
}

/// The caller's `f64` device buffers a backward pass writes its large results into, where
/// given (else the engine allocates its own): the scores' gradient `(B, T, C)`, the
/// boundaries' (given only where the problem has that boundary) and the boundary marginals
/// `(B, T)`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Targets {
    pub(crate) sc: Option<DevPtr>,
    pub(crate) bb: Option<DevPtr>,
    pub(crate) eb: Option<DevPtr>,
    pub(crate) bm: Option<DevPtr>,
    /// Those of the above that are zeroed already (the call's own, out of an [`Arena`]).
    pub(crate) fresh: [DevPtr; 4],
}

/// A large result of a backward pass on the device: in the engine's own buffer, or in the
/// caller's ([`Targets`]).
pub(crate) enum Buf {
    Own(CudaSlice<f64>),
    Given(DevPtr),
}

impl Buf {
    /// Its address.
    pub(crate) fn ptr(&self, call: &StreamCall<'_>) -> DevPtr {
        match self {
            Buf::Own(s) => call.ptr(s),
            Buf::Given(p) => *p,
        }
    }

    /// The engine's own buffer (a call whose results are read back has no other).
    pub(crate) fn own(&self, backend: &str) -> Result<&CudaSlice<f64>> {
        match self {
            Buf::Own(s) => Ok(s),
            Buf::Given(_) => Err(not_own(backend)),
        }
    }

    /// [`Buf::own`], whole.
    pub(crate) fn view<'s>(&'s self, backend: &str) -> Result<cudarc::driver::CudaView<'s, f64>> {
        Ok(self.own(backend)?.slice(..))
    }

    /// [`Buf::own`], by value.
    pub(crate) fn into_own(self, backend: &str) -> Result<CudaSlice<f64>> {
        match self {
            Buf::Own(s) => Ok(s),
            Buf::Given(_) => Err(not_own(backend)),
        }
    }
}

fn not_own(backend: &str) -> Error {
    Error::Device {
        backend: backend.into(),
        message: "a result written into the caller's buffer was to be read back".into(),
    }
}

impl StreamCall<'_> {
    /// A result buffer of `n` values, zeroed on the call's stream (the kernels write only
    /// the positions within each sequence's length, and accumulate some marginals in
    /// place): the caller's where `given`, else the engine's own.
    /// A given buffer among `to`'s fresh ones (zeroed already, [`Targets::fresh`]) is
    /// taken as it is.
    pub(crate) fn result_buf(&self, given: Option<DevPtr>, n: usize, to: &Targets) -> Result<Buf> {
        match given {
            Some(p) if to.fresh.contains(&p) => Ok(Buf::Given(p)),
            Some(p) => {
                // SAFETY: `p` holds `n` f64 of this device (checked by the caller of the
                // call, `outputs::DeviceOutputs`); the memset is ordered on the call's stream.
                unsafe {
                    cudarc::driver::result::memset_d8_async(
                        p.addr(),
                        0,
                        n * 8,
                        self.gpu.stream.cu_stream(),
                    )
                }
                .map_err(|e| self.err(e))?;
                Ok(Buf::Given(p))
            }
            None => Ok(Buf::Own(self.zeros::<f64>(n)?)),
        }
    }
}

/// Sequences to run a kernel on: one block each, block `i` on sequence `dev[i]`; a block
/// whose entry is negative returns at once (a list made on the device, `rerun_list` in
/// `kernels/io.cu`, padded to `blocks` entries with -1).
pub(crate) struct Seq {
    pub(crate) blocks: usize,
    /// The list (`blocks` `i32`s), null for an empty one.
    pub(crate) dev: DevPtr,
    /// Its own allocation, where it has one.
    pub(crate) _own: Option<CudaSlice<i32>>,
}
