//! CUDA backends of semicrf: the streaming algorithm on NVIDIA GPUs, with kernels in CUDA C++
//! compiled at run time by NVRTC for the device's own architecture.
//!
//! [`CudaEngine`] implements the core's [`EngineInfo`] and [`Engine`] traits, so it plugs into
//! the `semicrf` facade (`Device::Cuda(n)`, the CLI's `--device cuda`) like any CPU engine.
//! The crate builds on machines with no CUDA toolkit and no GPU: the driver and NVRTC are
//! loaded when a device is first used, and a machine without them gets
//! [`Error::BackendUnavailable`] with the reason, never a panic.
//!
//! ```
//! use semicrf_core::{Algorithm, EngineInfo, Error, Form, LogSemiring, Op, Query, Shape};
//! use semicrf_cuda::CudaEngine;
//!
//! let engine = CudaEngine::new(Algorithm::Streaming, 0);
//! let query = Query {
//!     shape: Shape::new(1, 8, 3, 2),
//!     form: Form::Structured {
//!         duration_dependent_transition: false,
//!         boundaries: [false, false],
//!     },
//!     op: Op::forward::<LogSemiring>(),
//!     dtype_bytes: 4,
//!     threads: 1,
//! };
//! match engine.check(&query) {
//!     Ok(()) => println!("{} is ready", engine.name()),
//!     Err(Error::BackendUnavailable { reason, .. }) => println!("no GPU here: {reason}"),
//!     Err(e) => panic!("{e}"),
//! }
//! assert_eq!(engine.name(), "cuda:0/streaming");
//! ```
//!
//! # The streaming kernels
//!
//! The semiring (log, max, entropy) is a template parameter of the kernels; everything is
//! computed in `f64` whatever the input type, as on the CPU (model page §8). Scores and
//! boundaries are stored on the device in the caller's type (`f32` stays `f32`, widened
//! exactly as read).
//!
//! **The log semiring, static transition** (`kernels/meet.cu`, up to 64 labels): the path of
//! training and of `log Z`. Each sequence is swept from both ends at once by two thread
//! blocks, the reverse sweep running the same recurrence on the reversed sequence (whose `α`
//! is the original's `β`); they meet in the middle, where `Z` is the sum over the segments
//! covering the middle position of the two sweeps' open segments. A forward pass is two
//! half-length sweeps. For the backward pass each sweep saves its rows in its first half; in
//! its second half the other sweep's saved rows complete every marginal (begin, end,
//! duration, transition; position marginals run from the middle). A sweep runs in blocks of
//! 8 steps: the window sums over the older ring entries for all 8 steps on every thread of the
//! block, then one thread per label through the 8 steps (the transition step and the block's
//! own entries: the only sequential part), then, in a backward, the block's duration and
//! transition marginals on every thread. Values are kept in the linear domain, relative to one
//! power of two per step (the previous step's largest `α`) and a multiplier per label (ring
//! entries do not move; a label is rebased when its multiplier strays), and the parameters are
//! exponentiated once, so a step costs multiplications and sums. A sequence is rerun by the
//! log-domain kernels when a finite score, boundary or parameter lies beyond ±50 nats, when a
//! value overflows, or when values lost to underflow (tracked with a bound per label) could
//! exceed 2⁻⁶⁰ of a step's largest value or of a marginal; the answer is then the log
//! domain's. [`CudaEngine::reruns`] counts such sequences and [`CudaEngine::log_domain_only`]
//! runs every sequence in the log domain.
//!
//! For at most 8, 16 and 32 labels these kernels are also compiled for that label width
//! (NVRTC, on the first call that needs the width: a few seconds, once per process): the
//! sequential block of 8 steps unrolled, each label's column of the transition, its first
//! duration weights and its new entries in registers. They compute every value in the same
//! order as the general kernels, so results are bitwise the same (a test compares them);
//! `SEMICRF_CUDA_FAST=0` in the environment selects the general kernels, for comparison;
//! `SEMICRF_CUDA_NVRTC_FLAGS` adds options to NVRTC (`-lineinfo` lets Nsight Compute map its
//! samples to lines of the kernels).
//!
//! **Everything else** (max and entropy, `(K, C, C)` transitions, more than 64 labels, and the
//! reruns): one thread block per sequence walks the positions in order in the log domain;
//! teams of up to 32 lanes each take a label and split its `K` durations (or its `C`
//! previous labels) between their lanes, then reduce them with a butterfly of warp shuffles.
//!
//! | operation | time per sequence | device memory |
//! |---|---|---|
//! | forward, static transition | `O(T·C·(C+K))`, two half-length sweeps | inputs + `16·(K·C + 10·C + 4)` bytes per sequence (and `16·(K+16)·C` where the ring leaves shared memory) |
//! | forward, `(K, C, C)` transition | `O(T·K·C²)` | inputs + `O(K·C)` per sequence |
//! | Viterbi | the forward | + `8·(T+1)·C` bytes of backpointers per sequence |
//! | forward + backward, static | 2.2–2.9× the forward (the kernels alone 2.7–3.0×) | + `16·(T+4)·(C+1)` bytes per sequence of saved rows, the outputs |
//! | forward + backward, `(K, C, C)` | about 3× the forward | + `16·(T+1)·C` bytes per sequence, the outputs |
//!
//! [`EngineInfo::memory_required`] is an upper bound of what a call allocates (it counts the
//! boundaries the problem gives, and what a log-domain rerun of every sequence would add),
//! and [`CudaEngine::measure_memory`] measures a call: at S5 (1, 16384, 127, 4), f32, a
//! forward+backward allocates 2.78 MB against a bound of 3.32 MB (flash-semicrf 0.2.0: 3.21
//! MB). On an H100 (2026-11-25, whole calls, f32) a forward+backward takes 0.15 ms at S1,
//! 2.6 ms at S4, 9.8 ms at S5, 3.6 ms at S6 and 1.58 s at S8 (1, 100000, 1000, 24); the README
//! compares them with the CPU engine and flash-semicrf.
//!
//! **Copies.** A call's inputs go to the device in two copies (below 2 MB, from the caller's
//! own arrays) and its small results come back in one; the batch's duration and transition
//! gradients are summed on the device (`meet_sum` in `kernels/io.cu`, the host's order and
//! rounding). The kernels' own buffers are one allocation. A backward pass's results of at
//! most 4 MB in all are copied into a page-locked buffer by copies enqueued behind its
//! kernels, with one wait for all of them (`SEMICRF_CUDA_ONE_COPY_UPTO=N` moves the limit, 0
//! turns it off), and the calling thread makes the host arrays they go to ready while the
//! kernels run. Other copies of 2 MB and more run in chunks through that buffer, the host's
//! threads filling or emptying one chunk while the bus moves another (`SEMICRF_CUDA_PINNED=0`
//! turns page-locked copies off, for comparison; `SEMICRF_CUDA_DIRECT_BELOW=N` moves the
//! threshold to `N` bytes). The device's memory pool keeps what calls free for the next ones
//! ([`CudaEngine::release_memory`] returns it).
//!
//! # Potentials already on the device
//!
//! [`DevicePotentials`] holds scores and boundaries that are already in device memory
//! ([`DeviceArray`]: a cudarc buffer, or a raw address with its length, element type and the
//! stream that writes it, such as another framework's tensor), with the shared parameters
//! and lengths on the host. [`DevicePotentialsBuilder::build`] checks it as the core checks
//! host potentials (a kernel, `check_input` in `kernels/io.cu`, finds NaN and `+inf` and
//! each sequence's magnitude bound on the device), and that each address is memory of this
//! device whose allocation holds the array. [`CudaEngine::forward_on_device`],
//! [`CudaEngine::backward_on_device`] and [`CudaEngine::viterbi_on_device`] give what the
//! same potentials from the host give, bit for bit (a test checks it), with the backward's
//! `(B, T, C)` gradients and boundary marginals left on the device ([`DeviceBackward`]).
//!
//! **Determinism.** Every reduction has a fixed order (lanes and threads in index order,
//! then a fixed butterfly), every accumulator of a gradient is owned by one thread, and the
//! batch is summed on the host in ascending order: results are bitwise identical from run to
//! run. No float atomics are used.
//!
//! # The edge-form kernels (exact and scan)
//!
//! [`Algorithm::Exact`] and [`Algorithm::Scan`] run the model's edge-form recurrences over an
//! edge tensor `(B, T, K, C, C)` (`kernels/edge.cu`): edge input is copied to the device in
//! `f64`, structured input is materialised on the host first (as by the CPU's exact engine).
//! One block per sequence walks the positions, teams of lanes reduce each label's `K·C`
//! items; forward in the log, max and entropy semirings, Viterbi with backpointers, and the
//! log semiring's backward (`β`, then one thread per edge for its marginal, written over the
//! edge). Both algorithms keep the whole `(T+1, C)` tables of `α` and `β`, which are `K·C`
//! times smaller than the edges they read, so on the GPU they are the same program: scan's
//! checkpointing would save nothing that matters. They are for edge input; for structured
//! potentials the streaming kernels need a factor `K·C` less memory and are faster.
//!
//! | operation | time per sequence | device memory |
//! |---|---|---|
//! | forward | `O(T·K·C²)` | edges in `f64` + `8·(T+1)·C` bytes per sequence (×2 for entropy) |
//! | Viterbi | the forward | + `4·(T+1)·C` bytes of backpointers per sequence |
//! | forward + backward | the forward, `β` at the same cost, one thread per edge | + `8·(T+1)·C` (β) + `8·T` bytes per sequence |
//!
#![deny(missing_docs)]

mod device;
mod edge;
mod meet;
mod resident;
mod stage;
mod streaming;

use semicrf_core::{
    Algorithm, Backward, Decoded, Device, Engine, EngineInfo, Error, Form, Op, Potentials, Problem,
    Query, Result, Scalar, Semiring,
};

pub use cudarc;
pub use device::MemoryUse;
pub use resident::{DeviceArray, DeviceBackward, DevicePotentials, DevicePotentialsBuilder, Dtype};
use streaming::{Ring, What};

/// One algorithm on one CUDA device.
///
/// [`Algorithm::Streaming`] takes structured potentials; [`Algorithm::Exact`] and
/// [`Algorithm::Scan`] take either form (see the crate docs). The device is opened (driver
/// loaded, kernels compiled) on first use and kept for the life of the process; calls on one
/// device are serialised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CudaEngine {
    algorithm: Algorithm,
    ordinal: usize,
    linear: bool,
}

impl CudaEngine {
    /// The engine of `algorithm` on CUDA device `ordinal`.
    pub fn new(algorithm: Algorithm, ordinal: usize) -> Self {
        CudaEngine {
            algorithm,
            ordinal,
            linear: true,
        }
    }

    /// The same engine without the linear-domain kernels (`kernels/meet.cu`): the log
    /// semiring's forward and backward run in the log domain for every sequence, as they do
    /// by default only for sequences outside the linear domain's range (see the crate docs).
    /// Slower; for comparison and testing.
    pub fn log_domain_only(mut self) -> Self {
        self.linear = false;
        self
    }

    /// The streaming engine on device `ordinal` if it can run here. Otherwise the reason is
    /// printed on stderr and the answer is `None`, unless the environment sets
    /// `SEMICRF_REQUIRE_GPU=1`, which turns that into a panic: how test suites and benches
    /// skip GPU work on machines without one, and fail where a GPU is expected.
    pub fn usable_or_skip(ordinal: usize) -> Option<CudaEngine> {
        let e = CudaEngine::new(Algorithm::Streaming, ordinal);
        match e.available() {
            Ok(()) => Some(e),
            Err(err) if std::env::var("SEMICRF_REQUIRE_GPU").as_deref() == Ok("1") => {
                panic!("SEMICRF_REQUIRE_GPU=1 but the GPU is unusable: {err}")
            }
            Err(err) => {
                eprintln!("skipped (no usable GPU): {err}");
                None
            }
        }
    }

    /// Runs `work` (calls on this engine's device) and reports the device memory they took:
    /// the bytes the engine allocated, and how far the device's free memory fell at the
    /// calls' high-water marks. Calls from other threads meanwhile are counted too.
    ///
    /// ```no_run
    /// # use semicrf_core::{Algorithm, Engine, LogSemiring, Problem};
    /// # fn demo(p: &Problem<'_, f32>) -> semicrf_core::Result<()> {
    /// let engine = semicrf_cuda::CudaEngine::new(Algorithm::Streaming, 0);
    /// let (z, used) = engine.measure_memory(|| engine.forward::<LogSemiring>(p))?;
    /// println!("log Z {:?}: {} bytes allocated", z?, used.allocated);
    /// # Ok(()) }
    /// ```
    pub fn measure_memory<R>(&self, work: impl FnOnce() -> R) -> Result<(R, MemoryUse)> {
        let gpu = self.gpu()?;
        gpu.measure(work)
            .map_err(|e| device::driver(&self.backend(), e))
    }

    /// Runs `work` (calls on this engine's device) between two CUDA events recorded on the
    /// engine's stream and returns its result with the time between them, as the device's
    /// clock measures it (microsecond resolution). The calls of this crate return when their
    /// results are back on the host, so this is the time from the first copy in to the last
    /// copy out; it leaves out the host's time before the first and after the last.
    ///
    /// ```no_run
    /// # use semicrf_core::{Algorithm, Engine, LogSemiring, Problem};
    /// # fn demo(p: &Problem<'_, f32>) -> semicrf_core::Result<()> {
    /// let engine = semicrf_cuda::CudaEngine::new(Algorithm::Streaming, 0);
    /// let (z, took) = engine.time(|| engine.forward::<LogSemiring>(p))?;
    /// println!("log Z {:?} in {:.3} ms", z?, took.as_secs_f64() * 1e3);
    /// # Ok(()) }
    /// ```
    pub fn time<R>(&self, work: impl FnOnce() -> R) -> Result<(R, std::time::Duration)> {
        let gpu = self.gpu()?;
        let err = |e| device::driver(&self.backend(), e);
        let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = gpu.stream.record_event(timed).map_err(err)?;
        let r = work();
        let end = gpu.stream.record_event(timed).map_err(err)?;
        let ms = start.elapsed_ms(&end).map_err(err)?;
        Ok((r, std::time::Duration::from_secs_f64(f64::from(ms) / 1e3)))
    }

    /// Returns to the driver the device memory that earlier calls freed. The device's
    /// default memory pool (which every stream-ordered allocation of the process draws on,
    /// cudarc's included) keeps it for the next calls, as the engine sets it when the device
    /// is opened (`SEMICRF_CUDA_POOL=release` in the environment keeps the driver's default,
    /// which returns it at every synchronisation); other users of the device, such as a
    /// framework's own allocator, see it as taken until this runs. [`EngineInfo::check`]
    /// does it itself when free memory falls short.
    pub fn release_memory(&self) -> Result<()> {
        let gpu = self.gpu()?;
        gpu.trim().map_err(|e| device::driver(&self.backend(), e))
    }

    /// Free and total memory of the device, in bytes (`cuMemGetInfo`).
    pub fn memory_info(&self) -> Result<(u64, u64)> {
        let gpu = self.gpu()?;
        let (free, total) = gpu
            .ctx
            .mem_get_info()
            .map_err(|e| device::driver(&self.backend(), e))?;
        Ok((free as u64, total as u64))
    }

    /// How many sequences the linear-domain kernels gave up and the log-domain kernels
    /// reran (see the crate docs), in calls made on the calling thread since it started.
    /// Ordinary problems have none; a test can compare the count before and after a call.
    pub fn reruns() -> u64 {
        streaming::reruns()
    }

    /// The CUDA device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Whether this machine can run this engine, with the reason when it cannot: a CUDA
    /// driver, NVRTC and the device are there and the kernels compiled.
    pub fn available(&self) -> Result<()> {
        self.gpu().map(|_| ())
    }

    /// The forward pass of semiring `S` on potentials in device memory (see
    /// [`DevicePotentials`]): as [`Engine::forward`], without copying the scores and
    /// boundaries. The streaming algorithm only.
    pub fn forward_on_device<S: Semiring>(
        &self,
        p: &DevicePotentials<'_>,
    ) -> Result<Vec<S::Value>> {
        let gpu = self.resident(p)?;
        semicrf_core::range::check_semiring_of::<S>(p.magnitudes(), p.lengths())?;
        let ring = self.ring::<S>()?;
        let backend = self.backend();
        p.wait_for_producers(&gpu, &backend)?;
        let out = streaming::forward(&gpu, &backend, &p.model, p.source(), ring, self.linear)?;
        Ok(out.iter().map(|w| S::from_words(&w[..S::WIDTH])).collect())
    }

    /// Forward and backward on potentials in device memory: as [`Engine::backward`], with
    /// the gradients of the scores and boundaries and the boundary marginals left on the
    /// device ([`DeviceBackward`]; [`DeviceBackward::to_host`] reads them). The streaming
    /// algorithm only.
    pub fn backward_on_device(
        &self,
        p: &DevicePotentials<'_>,
        upstream: &[f64],
    ) -> Result<DeviceBackward> {
        let gpu = self.resident(p)?;
        semicrf_core::check_upstream(upstream, p.shape().batch)?;
        semicrf_core::range::check_probabilities_of(p.magnitudes(), p.lengths())?;
        let backend = self.backend();
        p.wait_for_producers(&gpu, &backend)?;
        let shape = p.shape();
        let src = p.source();
        let then = |call: &streaming::Call<'_>, out: streaming::Outputs<'_>, _| {
            call.gpu.stream.synchronize().map_err(|e| call.err(e))?;
            Ok(DeviceBackward::new(out, shape))
        };
        streaming::backward(
            &gpu,
            &backend,
            &p.model,
            src,
            upstream,
            self.linear,
            false,
            then,
        )
    }

    /// Viterbi decodings of potentials in device memory, as [`Engine::viterbi`]. The
    /// streaming algorithm only.
    pub fn viterbi_on_device(&self, p: &DevicePotentials<'_>) -> Result<Vec<Decoded>> {
        let gpu = self.resident(p)?;
        let backend = self.backend();
        p.wait_for_producers(&gpu, &backend)?;
        streaming::viterbi(&gpu, &backend, &p.model, p.source())
    }

    /// The device of a call on `p`, which must have been checked on this engine's device.
    fn resident(&self, p: &DevicePotentials<'_>) -> Result<std::sync::Arc<device::Gpu>> {
        let gpu = self.gpu()?;
        if self.edge_form() {
            return Err(Error::Unsupported {
                backend: self.backend(),
                what: "potentials in device memory (the streaming algorithm takes them)".into(),
            });
        }
        if p.ordinal != self.ordinal {
            return Err(Error::Unsupported {
                backend: self.backend(),
                what: format!(
                    "potentials checked on device {} (this engine runs on device {})",
                    p.ordinal, self.ordinal
                ),
            });
        }
        Ok(gpu)
    }

    fn backend(&self) -> String {
        format!("cuda/{}", self.algorithm)
    }

    fn gpu(&self) -> Result<std::sync::Arc<device::Gpu>> {
        device::gpu(self.ordinal, &self.backend())
    }

    /// Whether this engine runs the edge-form kernels.
    fn edge_form(&self) -> bool {
        self.algorithm != Algorithm::Streaming
    }

    fn structured<'p, 'a, F>(&self, problem: &'p Problem<'a, F>) -> Result<&'p Potentials<'a, F>> {
        match problem {
            Problem::Structured(p) => Ok(p),
            Problem::Edges(_) => Err(self.edges_unsupported()),
        }
    }

    fn edges_unsupported(&self) -> Error {
        Error::Unsupported {
            backend: self.backend(),
            what: "edge input (the streaming algorithm takes structured potentials)".into(),
        }
    }

    fn ring<S: Semiring>(&self) -> Result<Ring> {
        match S::NAME {
            "log" => Ok(Ring::Log),
            "max" => Ok(Ring::Max),
            "entropy" => Ok(Ring::Entropy),
            other => Err(Error::Unsupported {
                backend: self.backend(),
                what: format!("the {other} semiring (log, max and entropy have kernels)"),
            }),
        }
    }
}

impl EngineInfo for CudaEngine {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }
    /// The log, max and entropy semirings; structured input only for streaming; the device
    /// must be usable and have the free memory the call needs.
    fn check(&self, query: &Query) -> Result<()> {
        let gpu = self.gpu()?;
        if query.form == Form::Edges && !self.edge_form() {
            return Err(self.edges_unsupported());
        }
        if let Op::Forward(info) = query.op
            && !["log", "max", "entropy"].contains(&info.name)
        {
            return Err(Error::Unsupported {
                backend: self.backend(),
                what: format!("the {} semiring", info.name),
            });
        }
        let need = self.memory_required(query)?;
        let err = |e| device::driver(&self.backend(), e);
        let (mut free, _) = gpu.ctx.mem_get_info().map_err(err)?;
        if need > free as u64 {
            // What earlier calls freed may still be held by the memory pool.
            gpu.trim().map_err(err)?;
            free = gpu.ctx.mem_get_info().map_err(err)?.0;
        }
        if need > free as u64 {
            return Err(Error::Unsupported {
                backend: self.backend(),
                what: format!(
                    "{} (it needs {need} bytes of device memory, {free} are free)",
                    query.shape
                ),
            });
        }
        Ok(())
    }
    /// Device bytes the call allocates: the scores and the boundaries given (as `f32` for
    /// `f32` input, else `f64`; for exact and scan the materialised edges in `f64`), the
    /// rings or tables, and for the backward pass the saved tables and the outputs.
    fn memory_required(&self, query: &Query) -> Result<u64> {
        let (dd, given) = match query.form {
            Form::Structured {
                duration_dependent_transition,
                boundaries,
            } => (duration_dependent_transition, boundaries),
            Form::Edges => (false, [false; 2]),
        };
        let what = match query.op {
            Op::Forward(info) if info.name == "entropy" => What::Forward(Ring::Entropy),
            // The max semiring runs in the log-domain kernels only.
            Op::Forward(info) if info.name == "max" => What::Forward(Ring::Max),
            Op::Forward(_) => What::Forward(Ring::Log),
            Op::Backward => What::Backward,
            Op::Viterbi => What::Viterbi,
        };
        let bytes = if self.edge_form() {
            edge::bytes(query.shape, what)
        } else {
            // Where the kernels keep their rings depends on the device's shared memory.
            let smem = self.gpu().map_or(48 * 1024, |g| g.smem_limit);
            let dtype = query.dtype_bytes as usize;
            streaming::bytes(query.shape, (dd, given), what, dtype, smem, self.linear)
        };
        bytes.finish(&self.backend(), query.shape)
    }
}

impl<F: Scalar> Engine<F> for CudaEngine {
    fn forward<S: Semiring>(&self, problem: &Problem<'_, F>) -> Result<Vec<S::Value>> {
        let gpu = self.gpu()?;
        semicrf_core::range::check_semiring::<S, F>(problem)?;
        let ring = self.ring::<S>()?;
        let out = if self.edge_form() {
            edge::forward(&gpu, &self.backend(), problem, ring)?
        } else {
            let p = self.structured(problem)?;
            let model = streaming::Model::of(p);
            let src = streaming::Source::Host(p);
            streaming::forward(&gpu, &self.backend(), &model, src, ring, self.linear)?
        };
        Ok(out.iter().map(|w| S::from_words(&w[..S::WIDTH])).collect())
    }
    fn backward(&self, problem: &Problem<'_, F>, upstream: &[f64]) -> Result<Backward> {
        let gpu = self.gpu()?;
        semicrf_core::check_upstream(upstream, problem.shape().batch)?;
        semicrf_core::range::check_probabilities(problem)?;
        if self.edge_form() {
            return edge::backward(&gpu, &self.backend(), problem, upstream);
        }
        let p = self.structured(problem)?;
        let model = streaming::Model::of(p);
        let src = streaming::Source::Host(p);
        let (backend, linear) = (self.backend(), self.linear);
        let then = |call: &streaming::Call<'_>, out: streaming::Outputs<'_>, ready| {
            out.into_host(call, ready)
        };
        streaming::backward(&gpu, &backend, &model, src, upstream, linear, true, then)
    }
    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        let gpu = self.gpu()?;
        if self.edge_form() {
            return edge::viterbi(&gpu, &self.backend(), problem);
        }
        let p = self.structured(problem)?;
        let model = streaming::Model::of(p);
        streaming::viterbi(&gpu, &self.backend(), &model, streaming::Source::Host(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use semicrf_core::Shape;

    fn query(op: Op) -> Query {
        Query {
            shape: Shape::new(2, 5, 3, 4),
            form: Form::Edges,
            op,
            dtype_bytes: 8,
            threads: 1,
        }
    }

    #[test]
    fn streaming_refuses_edge_input_and_exact_and_scan_take_it() {
        let e = CudaEngine::new(Algorithm::Streaming, 1);
        // Without a device the answer is BackendUnavailable; with one, Unsupported.
        match e.check(&query(Op::Backward)) {
            Err(Error::Unsupported { what, .. }) => assert!(what.contains("edge input"), "{what}"),
            Err(Error::BackendUnavailable { backend, .. }) => assert_eq!(backend, "cuda/streaming"),
            other => panic!("{other:?}"),
        }
        for a in [Algorithm::Exact, Algorithm::Scan] {
            let e = CudaEngine::new(a, 1);
            assert_eq!(e.device(), Device::Cuda(1));
            let q = query(Op::Backward);
            // (2·5·3·4·4 edges + 2·6·4 for each of α and β + 2·5 boundary) f64s, 4 f64s of
            // log Z and upstream, 2 per sequence of results and the 8-byte lengths.
            let f64s = 2 * 5 * 3 * 16 + 2 * (2 * 6 * 4) + 2 * 5 + 4 + 4;
            assert_eq!(e.memory_required(&q).unwrap(), (f64s * 8 + 2 * 8) as u64);
        }
    }

    #[test]
    fn the_plan_covers_every_label_with_whole_warps() {
        for k in [1, 2, 3, 7, 63, 64, 127, 1000] {
            for c in [1, 3, 5, 24, 33, 100] {
                let (team, threads) = streaming::plan(k, c);
                assert!(team.is_power_of_two() && team <= 32, "{k} {c}");
                assert_eq!(threads % 32, 0);
                assert!((32..=1024).contains(&threads));
                assert!(threads / team >= 1);
            }
        }
    }
}
