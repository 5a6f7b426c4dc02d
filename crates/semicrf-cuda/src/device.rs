//! Opening a CUDA device: driver and NVRTC checks, one context, stream and compiled module per
//! device ordinal, kept for the life of the process.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, DriverError,
    ValidAsZeroBits,
};
use cudarc::nvrtc::{CompileOptions, Ptx, compile_ptx_with_opts};
use semicrf_core::{Error, Result};

/// The kernel sources, compiled together by NVRTC.
const SOURCES: [&str; 5] = [
    include_str!("../kernels/semiring.cuh"),
    include_str!("../kernels/streaming.cu"),
    include_str!("../kernels/edge.cu"),
    include_str!("../kernels/meet.cu"),
    include_str!("../kernels/io.cu"),
];

/// The kernels the module exports.
pub(crate) const KERNELS: [&str; 23] = [
    "fwd_static_log",
    "fwd_static_max",
    "fwd_static_ent",
    "fwd_dd_log",
    "fwd_dd_max",
    "fwd_dd_ent",
    "bwd_static_log",
    "bwd_dd_log",
    "edge_fwd_log",
    "edge_fwd_max",
    "edge_fwd_ent",
    "edge_bwd_log",
    "edge_marg",
    "edge_bm",
    "meet_fwd_log",
    "meet_fwd_log_r",
    "meet_save_log",
    "meet_save_log_r",
    "meet_z_log",
    "meet_bwd_log",
    "meet_bwd_log_r",
    "check_input",
    "meet_sum",
];

/// The kernels of `kernels/meet.cu` that are also compiled for each label width of
/// [`crate::meet::WIDTHS`], named with `_cN` after these (and before the `_r` of a ring in
/// shared memory).
const WIDE_KERNELS: [&str; 3] = ["meet_fwd_log", "meet_save_log", "meet_bwd_log"];

/// The kernels of label width `ct` (and the module's own `meet_z_log`).
pub(crate) fn wide_kernels(ct: usize) -> Vec<String> {
    WIDE_KERNELS
        .iter()
        .flat_map(|k| [format!("{k}_c{ct}"), format!("{k}_c{ct}_r")])
        .chain(["meet_z_log".to_string()])
        .collect()
}

/// The kernels of one label width and number of steps a block: compiled when first used
/// (NVRTC takes a few seconds for each), or why they could not be.
type Wide = std::result::Result<HashMap<String, CudaFunction>, String>;

/// One opened device: its context, the stream every call runs on, and the kernels.
pub(crate) struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    _module: Arc<CudaModule>,
    functions: HashMap<&'static str, CudaFunction>,
    /// The virtual architecture the kernels are compiled for (`compute_90`, ...).
    arch: String,
    /// The kernels of each label width compiled so far.
    wide: Mutex<HashMap<(usize, usize), Wide>>,
    /// The most dynamic shared memory a block may use (bytes), opted in for every kernel.
    pub(crate) smem_limit: usize,
    /// Calls on one device are serialised: they share the stream and its buffers' order.
    pub(crate) lock: Mutex<()>,
    /// Whether allocations are being counted ([`Gpu::measure`]).
    measuring: AtomicBool,
    /// Bytes allocated since the measurement began.
    allocated: AtomicU64,
    /// The least free device memory seen at a call's high-water mark ([`Gpu::mark`]).
    low_water: AtomicU64,
    /// Page-locked host memory for large copies (`stage.rs`).
    pub(crate) stage: crate::stage::Stage,
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

    pub(crate) fn function(&self, name: &str) -> &CudaFunction {
        match self.functions.get(name) {
            Some(f) => f,
            None => unreachable!("kernel {name} is in KERNELS and was loaded"),
        }
    }

    /// A kernel of [`KERNELS`] (`ct` 0, compiled for [`crate::meet::STEPS`] steps a block)
    /// or of [`wide_kernels`]`(ct)` for `p` steps a block, the latter compiled and loaded
    /// with the rest of their module on first use.
    pub(crate) fn function_or_wide(
        &self,
        name: &str,
        ct: usize,
        p: usize,
    ) -> std::result::Result<CudaFunction, String> {
        if ct == 0 {
            if p != crate::meet::STEPS {
                return Err(format!("the general kernels take no {p} steps a block"));
            }
            return Ok(self.function(name).clone());
        }
        let mut wide = self.wide.lock().unwrap_or_else(|p| p.into_inner());
        let set = wide.entry((ct, p)).or_insert_with(|| {
            let ptx = compile_wide(&self.arch, ct, p)?;
            load(&self.ctx, ptx, wide_kernels(ct), self.smem_limit as i32).map(|(_, f)| f)
        });
        match set {
            Ok(f) => f
                .get(name)
                .cloned()
                .ok_or_else(|| format!("no kernel {name} of width {ct}, {p} steps a block")),
            Err(e) => Err(e.clone()),
        }
    }
}

/// Loads `ptx` and the kernels `names` of it, each allowed `smem_limit` bytes of dynamic
/// shared memory.
fn load<N: AsRef<str> + Eq + std::hash::Hash>(
    ctx: &Arc<CudaContext>,
    ptx: Ptx,
    names: impl IntoIterator<Item = N>,
    smem_limit: i32,
) -> std::result::Result<(Arc<CudaModule>, HashMap<N, CudaFunction>), String> {
    use cudarc::driver::sys::CUfunction_attribute;
    let module = ctx
        .load_module(ptx)
        .map_err(|e| format!("loading the kernels: {e:?}"))?;
    let mut functions = HashMap::new();
    for name in names {
        let n = name.as_ref();
        let f = module
            .load_function(n)
            .map_err(|e| format!("kernel {n}: {e:?}"))?;
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem_limit,
        )
        .map_err(|e| format!("kernel {n}: shared memory: {e:?}"))?;
        functions.insert(name, f);
    }
    Ok((module, functions))
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

/// The kernels compiled by NVRTC for a virtual architecture (`compute_90`, ...), as PTX the
/// driver finishes for the device.
pub(crate) fn compile(arch: &str) -> std::result::Result<Ptx, String> {
    nvrtc(arch, SOURCES.concat(), "semicrf_streaming.cu", Vec::new())
        .map_err(|e| format!("NVRTC could not compile the kernels: {e}"))
}

/// The kernels of `kernels/meet.cu` of label width `ct` and `p` steps a block
/// ([`wide_kernels`]), as [`compile`].
pub(crate) fn compile_wide(arch: &str, ct: usize, p: usize) -> std::result::Result<Ptx, String> {
    let src = [SOURCES[0], SOURCES[3]].concat();
    nvrtc(
        arch,
        src,
        &format!("semicrf_meet_c{ct}_p{p}.cu"),
        vec![format!("-DMT_CT={ct}"), format!("-DMT_P={p}")],
    )
    .map_err(|e| format!("NVRTC could not compile the kernels of width {ct}, {p} steps: {e}"))
}

/// `src` (named `name` in NVRTC's messages) compiled for `arch`, with the options `extra` and
/// those of `SEMICRF_CUDA_NVRTC_FLAGS` (whitespace-separated; for profiling, `-lineinfo` maps
/// Nsight Compute's samples to lines of `name`).
fn nvrtc(
    arch: &str,
    src: String,
    name: &str,
    extra: Vec<String>,
) -> std::result::Result<Ptx, String> {
    let env = std::env::var("SEMICRF_CUDA_NVRTC_FLAGS").unwrap_or_default();
    let opts = CompileOptions {
        options: [format!("--gpu-architecture={arch}"), "-std=c++17".into()]
            .into_iter()
            .chain(extra)
            .chain(env.split_whitespace().map(String::from))
            .collect(),
        name: Some(name.into()),
        ..Default::default()
    };
    compile_ptx_with_opts(src, opts).map_err(|e| format!("{e:?}"))
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
    if std::env::var("SEMICRF_CUDA_POOL").as_deref() != Ok("release") {
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
    let ptx = compile(&arch)?;
    use cudarc::driver::sys::CUdevice_attribute;
    let smem_limit = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .map_err(|e| format!("shared memory limit: {e:?}"))?
        .max(48 * 1024);
    let (module, functions) = load(&ctx, ptx, KERNELS, smem_limit)?;
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
        lock: Mutex::new(()),
        measuring: AtomicBool::new(false),
        allocated: AtomicU64::new(0),
        low_water: AtomicU64::new(u64::MAX),
        stage: Default::default(),
        pool,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVRTC alone (no driver or GPU needed) compiles every kernel for the H100's and the
    /// oldest supported architecture; skipped with the reason where NVRTC is missing.
    #[test]
    fn the_kernels_compile_with_nvrtc() {
        // SAFETY: only tries to load the library by name.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!("skipped: no NVRTC library (libnvrtc) on this machine");
            return;
        }
        for arch in ["compute_75", "compute_90"] {
            let ptx = match compile(arch) {
                Ok(p) => p.to_src(),
                Err(e) => panic!("{arch}: {e}"),
            };
            for k in KERNELS {
                assert!(
                    ptx.contains(&format!(".entry {k}(")),
                    "{arch}: no kernel {k}"
                );
            }
            for ct in crate::meet::WIDTHS {
                let p = crate::meet::STEPS_WIDE;
                let ptx = match compile_wide(arch, ct, p) {
                    Ok(p) => p.to_src(),
                    Err(e) => panic!("{arch}: {e}"),
                };
                for k in wide_kernels(ct) {
                    assert!(
                        ptx.contains(&format!(".entry {k}(")),
                        "{arch}: no kernel {k}"
                    );
                }
            }
        }
    }
}
