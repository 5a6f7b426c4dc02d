//! Opening a CUDA device: driver and NVRTC checks, one context, stream and compiled module per
//! device ordinal, kept for the life of the process; the device's allocations (counted for
//! [`crate::CudaEngine::measure_memory`]) and its memory pool. NVRTC is in [`nvrtc`].

pub(crate) mod nvrtc;

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, DriverError,
    PinnedHostSlice, ValidAsZeroBits,
};
use semicrf_core::{Error, Result};

use crate::kernel::{DevPtr, Kernel, MeetKernel, Module, STEPS};
use crate::tuning::tuning;

/// The kernels of one label width and number of steps a block: compiled when first used
/// (NVRTC takes a few seconds for each), or why they could not be.
type Wide = std::result::Result<HashMap<MeetKernel, CudaFunction>, String>;

/// One opened device: its context, the stream every call runs on, and the kernels.
pub(crate) struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    _module: Arc<CudaModule>,
    functions: HashMap<Kernel, CudaFunction>,
    /// The virtual architecture the kernels are compiled for (`compute_90`, ...).
    arch: String,
    /// The kernels of each label width compiled so far.
    wide: Mutex<HashMap<(usize, usize), Wide>>,
    /// The most dynamic shared memory a block may use (bytes), opted in for every kernel.
    pub(crate) smem_limit: usize,
    /// The device's multiprocessors.
    pub(crate) sms: usize,
    /// Calls on one device are serialised: they share the stream and its buffers' order.
    pub(crate) lock: Mutex<()>,
    /// Whether allocations are being counted ([`Gpu::measure`]).
    measuring: AtomicBool,
    /// Bytes allocated since the measurement began.
    allocated: AtomicU64,
    /// The least free device memory seen at a call's high-water mark ([`Gpu::mark`]).
    low_water: AtomicU64,
    /// Page-locked host memory for large copies (`transfer/stage.rs`).
    pub(crate) stage: Stage,
    /// The device's default memory pool (where cudarc's stream-ordered allocations come
    /// from), as an integer; 0 where there is none.
    pool: usize,
}

/// The device memory a piece of work took ([`crate::CudaEngine::measure_memory`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// Bytes the engine allocated during the work, summed over every allocation (so at least
    /// the most it held at once): the counterpart of PyTorch's `max_memory_allocated`.
    pub allocated: u64,
    /// How far the device's free memory (`cuMemGetInfo`) fell below its level before the work
    /// at the calls' high-water marks (every buffer of a call allocated): what the driver
    /// really set aside, page granularity included. Another process's allocations in the
    /// meantime would count too.
    pub driver: u64,
}

impl Gpu {
    /// `n` zeroed elements on the device.
    pub(crate) fn zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        n: usize,
    ) -> std::result::Result<CudaSlice<T>, DriverError> {
        let n = n.max(1);
        self.count::<T>(n);
        self.stream.alloc_zeros::<T>(n)
    }

    /// `n` elements on the device, not initialised: for arrays that are written whole before
    /// they are read.
    pub(crate) fn uninit<T: DeviceRepr>(
        &self,
        n: usize,
    ) -> std::result::Result<CudaSlice<T>, DriverError> {
        let n = n.max(1);
        self.count::<T>(n);
        // SAFETY: the callers write every element before any is read.
        unsafe { self.stream.alloc::<T>(n) }
    }

    /// A copy of `v` on the device.
    pub(crate) fn upload<T: DeviceRepr>(
        &self,
        v: &[T],
    ) -> std::result::Result<CudaSlice<T>, DriverError> {
        self.count::<T>(v.len());
        self.stream.clone_htod(v)
    }

    fn count<T>(&self, n: usize) {
        if self.measuring.load(Ordering::Relaxed) {
            let bytes = (n as u64).saturating_mul(std::mem::size_of::<T>() as u64);
            self.allocated.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// A call's high-water mark: every buffer it uses is allocated. While measuring, records
    /// the free device memory.
    pub(crate) fn mark(&self) {
        if self.measuring.load(Ordering::Relaxed)
            && let Ok((free, _)) = self.ctx.mem_get_info()
        {
            self.low_water.fetch_min(free as u64, Ordering::Relaxed);
        }
    }

    /// Runs `work` with allocations counted and free memory sampled at its calls'
    /// high-water marks.
    pub(crate) fn measure<R>(
        &self,
        work: impl FnOnce() -> R,
    ) -> std::result::Result<(R, MemoryUse), DriverError> {
        self.stream.synchronize()?;
        self.trim()?;
        let (before, _) = self.ctx.mem_get_info()?;
        self.allocated.store(0, Ordering::Relaxed);
        self.low_water.store(before as u64, Ordering::Relaxed);
        self.measuring.store(true, Ordering::Relaxed);
        let r = work();
        self.measuring.store(false, Ordering::Relaxed);
        let low = self.low_water.load(Ordering::Relaxed);
        Ok((
            r,
            MemoryUse {
                allocated: self.allocated.load(Ordering::Relaxed),
                driver: (before as u64).saturating_sub(low),
            },
        ))
    }

    /// Returns the memory the pool keeps to the driver.
    pub(crate) fn trim(&self) -> std::result::Result<(), DriverError> {
        if self.pool == 0 {
            return Ok(());
        }
        self.stream.synchronize()?;
        // SAFETY: `pool` is the device's default pool, which lives as long as the device.
        unsafe { cudarc::driver::sys::cuMemPoolTrimTo(self.pool as _, 0) }.result()
    }

    pub(crate) fn function(&self, k: Kernel) -> &CudaFunction {
        match self.functions.get(&k) {
            Some(f) => f,
            None => unreachable!("kernel {} is in Kernel::ALL and was loaded", k.name()),
        }
    }

    /// A meet kernel compiled for `p` steps a block: of the general module (width 0, for
    /// [`STEPS`] alone) or of its label width's, compiled and loaded with the rest of that
    /// module on first use.
    pub(crate) fn meet_function(
        &self,
        k: MeetKernel,
        p: usize,
    ) -> std::result::Result<CudaFunction, String> {
        if k.width == 0 {
            if p != STEPS {
                return Err(format!("the general kernels take no {p} steps a block"));
            }
            return Ok(self.function(k.general()).clone());
        }
        let mut wide = self.wide.lock().unwrap_or_else(|p| p.into_inner());
        let set = wide.entry((k.width, p)).or_insert_with(|| {
            let module = Module::Meet {
                width: k.width,
                steps: p,
            };
            let ptx = nvrtc::compile(module, &self.arch)?;
            let names = MeetKernel::of_width(k.width)
                .into_iter()
                .map(|m| (m, m.name()));
            nvrtc::load(&self.ctx, ptx, names, self.smem_limit as i32).map(|(_, f)| f)
        });
        match set {
            Ok(f) => f
                .get(&k)
                .cloned()
                .ok_or_else(|| format!("no kernel {} of {p} steps a block", k.name())),
            Err(e) => Err(e.clone()),
        }
    }

    /// The address of `s` as the kernels on this device's stream see it.
    pub(crate) fn ptr<T>(&self, s: &CudaSlice<T>) -> DevPtr {
        DevPtr::of(s, &self.stream)
    }
}

/// The page-locked buffer of a device for large copies (`transfer/stage.rs`), allocated on
/// the first one.
#[derive(Default)]
pub(crate) struct Stage(pub(crate) Mutex<Option<PinnedHostSlice<u8>>>);

/// Makes stream `waiter` wait for the work queued so far on stream `producer` (an event;
/// both `CUstream`s as integers, 0 the legacy default stream), without blocking the host.
pub(crate) fn join(producer: usize, waiter: usize) -> std::result::Result<(), DriverError> {
    use cudarc::driver::{result::event, result::stream, sys};
    let e = event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
    // SAFETY: `e` was just created; both streams are live (the engine's, a caller's or a
    // cudarc buffer's, which the caller keeps alive through the call).
    let r = unsafe {
        event::record(e, producer as sys::CUstream).and_then(|_| {
            stream::wait_event(
                waiter as sys::CUstream,
                e,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        })
    };
    // SAFETY: destroying an event whose wait is queued releases it once it completes.
    let d = unsafe { event::destroy(e) };
    r.and(d)
}

/// Makes `gpu`'s stream wait for the work queued so far on each of `streams` (`CUstream`s
/// as integers), once each.
pub(crate) fn wait_for(
    gpu: &Gpu,
    backend: &str,
    streams: impl Iterator<Item = usize>,
) -> Result<()> {
    gpu.ctx.bind_to_thread().map_err(|e| driver(backend, e))?;
    let mut seen = Vec::new();
    for s in streams {
        if !seen.contains(&s) {
            seen.push(s);
            join(s, gpu.stream.cu_stream() as usize).map_err(|e| driver(backend, e))?;
        }
    }
    Ok(())
}

/// A driver error as this crate's [`Error::Device`].
pub(crate) fn driver(backend: &str, e: DriverError) -> Error {
    Error::Device {
        backend: backend.into(),
        message: format!("{e:?}"),
    }
}

type Opened = std::result::Result<Arc<Gpu>, String>;

fn cache() -> &'static Mutex<HashMap<usize, Opened>> {
    static GPUS: OnceLock<Mutex<HashMap<usize, Opened>>> = OnceLock::new();
    GPUS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The device of `ordinal`, opened on first use; [`Error::BackendUnavailable`] (naming
/// `backend`) when this machine has no CUDA driver, no NVRTC, or no such device.
pub(crate) fn gpu(ordinal: usize, backend: &str) -> Result<Arc<Gpu>> {
    let mut map = cache().lock().unwrap_or_else(|p| p.into_inner());
    let opened = map
        .entry(ordinal)
        .or_insert_with(|| {
            catch_unwind(AssertUnwindSafe(|| open(ordinal)))
                .unwrap_or_else(|_| Err("the CUDA driver library could not be used".into()))
        })
        .clone();
    opened.map_err(|reason| Error::BackendUnavailable {
        backend: backend.into(),
        reason,
    })
}

/// Makes the device's default memory pool keep the memory that calls free (by default it
/// returns it to the driver at every synchronisation, and the next call's allocations map it
/// again: on an H100 at S6, 6.05 against 5.38 ms of a forward+backward by CUDA events); the
/// pool's handle.
/// `SEMICRF_CUDA_POOL=release` keeps the driver's default.
fn keep_freed_memory(ctx: &Arc<CudaContext>) -> std::result::Result<usize, String> {
    use cudarc::driver::sys;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: writes the handle of the device's default pool into `pool`.
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }
        .result()
        .map_err(|e| format!("default memory pool: {e:?}"))?;
    if tuning().keep_freed_memory {
        let mut keep = u64::MAX;
        // SAFETY: the release threshold is a u64, read from `keep`.
        unsafe {
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut keep as *mut u64).cast(),
            )
        }
        .result()
        .map_err(|e| format!("memory pool threshold: {e:?}"))?;
    }
    Ok(pool as usize)
}

fn open(ordinal: usize) -> Opened {
    // cudarc panics when it cannot load a library: look for them first.
    // SAFETY: these only try to load the shared libraries by name.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no CUDA driver (libcuda) on this machine".into());
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("no NVRTC library (libnvrtc) on this machine".into());
    }
    let count = CudaContext::device_count().map_err(|e| format!("cuDeviceGetCount: {e:?}"))?;
    if ordinal >= count.max(0) as usize {
        return Err(format!(
            "no CUDA device {ordinal} (this machine has {count})"
        ));
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| format!("cuCtxCreate: {e:?}"))?;
    // One stream per device and calls serialised on it: the slices need no event tracking.
    // SAFETY: every slice of this crate is used on this context's one stream only.
    unsafe { ctx.disable_event_tracking() };
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| format!("compute capability: {e:?}"))?;
    let arch = format!("compute_{major}{minor}");
    let ptx = nvrtc::compile(Module::General, &arch)?;
    use cudarc::driver::sys::CUdevice_attribute;
    let smem_limit = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .map_err(|e| format!("shared memory limit: {e:?}"))?
        .max(48 * 1024);
    let sms = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(|e| format!("multiprocessors: {e:?}"))?
        .max(1) as usize;
    let names = Kernel::ALL.iter().map(|&k| (k, k.name().to_string()));
    let (module, functions) = nvrtc::load(&ctx, ptx, names, smem_limit)?;
    let stream = ctx.default_stream();
    let pool = if ctx.has_async_alloc() {
        keep_freed_memory(&ctx)?
    } else {
        0
    };
    Ok(Arc::new(Gpu {
        ctx,
        stream,
        _module: module,
        functions,
        arch,
        wide: Mutex::new(HashMap::new()),
        smem_limit: smem_limit as usize,
        sms,
        lock: Mutex::new(()),
        measuring: AtomicBool::new(false),
        allocated: AtomicU64::new(0),
        low_water: AtomicU64::new(u64::MAX),
        stage: Default::default(),
        pool,
    }))
}
