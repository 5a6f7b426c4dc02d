//! [`CudaEngine`]: the core's engine traits on a CUDA device, and the calls on potentials
//! already in device memory.

use semicrf_core::{
    Algorithm, Backward, Decoded, Device, Engine, EngineInfo, Error, Form, Op, Potentials, Problem,
    Query, Result, Scalar, Semiring,
};

use crate::call::{Model, Source, StreamCall, Targets};
use crate::device::{self, MemoryUse};
use crate::edge;
use crate::kernel::{SemiringId, What};
use crate::logdomain::spread;
use crate::outputs::{DeviceOutputs, HostBackward};
use crate::resident::{DeviceBackward, DevicePotentials, DevicePotentialsBuilder};
use crate::streaming::{self, BackwardResults};
use crate::tuning::tuning;

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
    chunk_rows: Option<usize>,
    pieces: usize,
    piece_overlap: usize,
}

/// The rows each piece of [`CudaEngine::viterbi_pieces`] starts before its share of the
/// sequence, by default: 2²⁰ (a million positions).
pub const DEFAULT_PIECE_OVERLAP: usize = 1 << 20;

impl CudaEngine {
    /// The engine of `algorithm` on CUDA device `ordinal`.
    pub fn new(algorithm: Algorithm, ordinal: usize) -> Self {
        CudaEngine {
            algorithm,
            ordinal,
            linear: true,
            chunk_rows: None,
            pieces: 1,
            piece_overlap: DEFAULT_PIECE_OVERLAP,
        }
    }

    /// Decodes the Viterbi segmentation of one long sequence (a streamed problem of one
    /// sequence, static transition: [`SourceEngine::viterbi_streamed`]) as up to `pieces`
    /// overlapping pieces at once instead of one sweep: each starts `overlap` rows before
    /// its share of the sequence, they run as one batch, and each is used only from where its
    /// forward values are verified parallel to the piece before it (equal up to one constant
    /// over `K` consecutive rows, within the accuracy GUARANTEES.md gives scores), from where
    /// its backpointers are those of one sweep. A piece not verified within its overlap is
    /// run again with twice the overlap, down to the sequence's start. The segments are the
    /// one sweep's up to ties within that accuracy, the score within it; see
    /// `docs/cuda.md` ("One long sequence in pieces").
    ///
    /// One sweep keeps one thread block (and its helpers) busy per step; pieces fill more of
    /// the device. Default 1 (one sweep). A sequence shorter than two overlaps, a batch of
    /// several sequences and every other operation run as before; so does a split whose
    /// pieces would not fit in the device's free memory.
    ///
    /// [`SourceEngine::viterbi_streamed`]: semicrf_core::SourceEngine::viterbi_streamed
    pub fn viterbi_pieces(mut self, pieces: usize, overlap: usize) -> Self {
        self.pieces = pieces.max(1);
        self.piece_overlap = overlap.max(1);
        self
    }

    /// The pieces and overlap of [`CudaEngine::viterbi_pieces`].
    pub fn get_viterbi_pieces(&self) -> (usize, usize) {
        (self.pieces, self.piece_overlap)
    }

    /// Sets the rows asked of a [`PotentialSource`](semicrf_core::PotentialSource) at a
    /// time, and delivered to a [`GradientSink`](semicrf_core::GradientSink) at a time
    /// (`None`: about 1 MiB of rows, see [`CudaEngine::rows_per_chunk`]). Any value `>= 1`
    /// gives the same results bitwise.
    pub fn chunk_rows(mut self, rows: Option<usize>) -> Self {
        self.chunk_rows = rows;
        self
    }

    /// The rows per chunk of a streamed problem with `labels` labels: the configured number
    /// (at least 1), or as many rows of one position tensor as fill 1 MiB in `f64`.
    pub fn rows_per_chunk(&self, labels: usize) -> usize {
        self.chunk_rows.unwrap_or((1 << 17) / labels.max(1)).max(1)
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
            Err(err) if tuning().require_gpu => {
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
        let ring = self.semiring::<S>()?;
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
        let then = |call: &StreamCall<'_>, out: BackwardResults<'_>, _| {
            call.gpu.stream.synchronize().map_err(|e| call.err(e))?;
            DeviceBackward::new(out, shape, call.backend)
        };
        let none = Targets::default();
        let linear = self.linear;
        streaming::backward(
            &gpu, &backend, &p.model, src, upstream, linear, false, &none, then,
        )
    }

    /// Forward and backward on potentials in device memory, the `(B, T, C)` gradients, the
    /// boundary marginals and log Z written into the caller's device arrays `out` (see
    /// [`DeviceOutputs`]: of the potentials' element type; for `f32` through an `f64`
    /// scratch of each result, for `f64` by the kernels themselves); log Z and the shared
    /// parameters' gradients are returned on the host too, and written into their outputs
    /// where given. The values are those of [`CudaEngine::backward_on_device`], bit for bit
    /// (rounded to `f32` for `f32`). The streaming algorithm only.
    ///
    /// Order: the engine's stream first waits for the work queued so far on the streams of
    /// the inputs and of the outputs; before returning, each output's stream is made to
    /// wait (an event) for the writes, so work queued there afterwards sees them. Where log
    /// Z has an output and every input's stream is an output's stream, the call returns once
    /// its work is queued (its last kernels, the `f32` conversions and the copies of the
    /// small results, may still run; its buffers are freed in stream order); otherwise it
    /// returns when its work is done. The call still waits inside for what decides the
    /// kernels it runs (log Z's feasibility and the linear-domain kernels' fallbacks).
    ///
    /// The outputs are checked first ([`Error::Shape`] for a wrong length,
    /// [`Error::Unsupported`] for another element type, a boundary output missing where the
    /// problem has that boundary or given where it has not, arrays that overlap, or an
    /// address not in this device's memory or whose allocation is too short).
    pub fn backward_into(
        &self,
        p: &DevicePotentials<'_>,
        upstream: &[f64],
        out: DeviceOutputs<'_>,
    ) -> Result<HostBackward> {
        let (gpu, backend, joined) = self.start_into(p, upstream, &out)?;
        let wait = !out.has_log_z() || !joined;
        let then = |call: &StreamCall<'_>, res: BackwardResults<'_>, _| out.finish(call, res, wait);
        let (src, to, linear) = (p.source(), out.targets(), self.linear);
        streaming::backward(
            &gpu, &backend, &p.model, src, upstream, linear, false, &to, then,
        )
    }

    /// [`CudaEngine::backward_into`] queued: the same results, bit for bit, written into
    /// `out` (which must include log Z), and nothing returned on the host, so that the call
    /// can return once its work is queued, before the device has done it. It does where the
    /// potentials hold no `-inf` (within the lengths; then every sequence has a finite log Z,
    /// known before the call) and every input is on one of the outputs' streams. Otherwise
    /// it waits as [`CudaEngine::backward_into`] does, which also reports a sequence without
    /// a segmentation ([`Error::Infeasible`]).
    ///
    /// Queued, the decisions the other calls make on the host from results read back are
    /// made on the device: log Z goes to the backward pass there, the sequences the
    /// linear-domain kernels give up are listed and rerun there (not counted by
    /// [`CudaEngine::reruns`]), and the shared parameters' gradients are summed there in the
    /// host's order and rounding. A training loop then has the host prepare the next step
    /// while the device runs this one. The only wait left is the input checks' read-back
    /// when the potentials are built ([`DevicePotentialsBuilder::build`]).
    ///
    /// [`DevicePotentialsBuilder::build`]: crate::DevicePotentialsBuilder::build
    pub fn backward_into_queued(
        &self,
        p: &DevicePotentials<'_>,
        upstream: &[f64],
        out: DeviceOutputs<'_>,
    ) -> Result<()> {
        if !out.has_log_z() {
            return Err(Error::Unsupported {
                backend: self.backend(),
                what: "a queued backward pass without an output for log Z (DeviceOutputs::log_z)"
                    .into(),
            });
        }
        if !p.feasible {
            return self.backward_into(p, upstream, out).map(|_| ());
        }
        let (gpu, backend, joined) = self.start_into(p, upstream, &out)?;
        let then = |call: &StreamCall<'_>, q| out.finish_queued(call, q, !joined);
        let (src, to, linear) = (p.source(), out.targets(), self.linear);
        streaming::backward_queued(&gpu, &backend, &p.model, src, upstream, linear, &to, then)
    }

    /// The checks of a backward pass into `out` (the upstream gradient, the outputs, the
    /// magnitudes), then the engine's stream made to wait for the inputs' and outputs'
    /// writers: the device, the backend's name, and whether every input is on one of the
    /// outputs' streams (then the call may return without waiting: the caller's later work
    /// on the inputs is ordered after it).
    fn start_into(
        &self,
        p: &DevicePotentials<'_>,
        upstream: &[f64],
        out: &DeviceOutputs<'_>,
    ) -> Result<(std::sync::Arc<device::Gpu>, String, bool)> {
        let gpu = self.resident(p)?;
        semicrf_core::check_upstream(upstream, p.shape().batch)?;
        let backend = self.backend();
        out.check_on(&gpu, &backend, p)?;
        semicrf_core::range::check_probabilities_of(p.magnitudes(), p.lengths())?;
        out.wait_for_owners(&gpu, &backend, p)?;
        let streams: Vec<usize> = out.streams().collect();
        let joined = p.streams().all(|s| streams.contains(&s));
        Ok((gpu, backend, joined))
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

    /// Whether the log semiring's static form may run in the linear-domain kernels.
    pub(crate) fn linear(&self) -> bool {
        self.linear
    }

    pub(crate) fn backend(&self) -> String {
        format!("cuda/{}", self.algorithm)
    }

    pub(crate) fn gpu(&self) -> Result<std::sync::Arc<device::Gpu>> {
        device::gpu(self.ordinal, &self.backend())
    }

    /// Whether this engine runs the edge-form kernels.
    pub(crate) fn edge_form(&self) -> bool {
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

    pub(crate) fn semiring<S: Semiring>(&self) -> Result<SemiringId> {
        match S::NAME {
            "log" => Ok(SemiringId::Log),
            "max" => Ok(SemiringId::Max),
            "entropy" => Ok(SemiringId::Entropy),
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
            Op::Forward(info) if info.name == "entropy" => What::Forward(SemiringId::Entropy),
            // The max semiring runs in the log-domain kernels only.
            Op::Forward(info) if info.name == "max" => What::Forward(SemiringId::Max),
            Op::Forward(_) => What::Forward(SemiringId::Log),
            Op::Backward => What::Backward,
            Op::Viterbi => What::Viterbi,
        };
        let bytes = if self.edge_form() {
            edge::bytes(query.shape, what)
        } else {
            // Where the kernels keep their rings depends on the device's shared memory, and
            // whether a sequence is spread over several blocks on its multiprocessors.
            let gpu = self.gpu().ok();
            let smem = gpu.as_ref().map_or(48 * 1024, |g| g.smem_limit);
            let sh = query.shape;
            let (b, k, c) = (sh.batch, sh.max_duration, sh.labels);
            let spread = match gpu {
                Some(g) if !dd => spread::backward_copies(b, k, c, g.sms, g.smem_limit),
                _ => 0,
            };
            let spreads = spread > 0 && k * c >= crate::tuning::SPREAD_OVER_MEET;
            let dtype = query.dtype_bytes as usize;
            let how = (self.linear && !spreads, spread);
            streaming::memory::bytes(query.shape, (dd, given), what, dtype, smem, how)
        };
        bytes.finish(&self.backend(), query.shape)
    }
}

impl<F: Scalar> Engine<F> for CudaEngine {
    fn forward<S: Semiring>(&self, problem: &Problem<'_, F>) -> Result<Vec<S::Value>> {
        let gpu = self.gpu()?;
        semicrf_core::range::check_semiring::<S, F>(problem)?;
        let ring = self.semiring::<S>()?;
        let out = if self.edge_form() {
            edge::forward(&gpu, &self.backend(), problem, ring)?
        } else {
            let p = self.structured(problem)?;
            let model = Model::of(p);
            let src = Source::Host(p);
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
        let model = Model::of(p);
        let src = Source::Host(p);
        let (backend, linear) = (self.backend(), self.linear);
        let then =
            |call: &StreamCall<'_>, out: BackwardResults<'_>, ready| out.into_host(call, ready);
        let none = Targets::default();
        streaming::backward(
            &gpu, &backend, &model, src, upstream, linear, true, &none, then,
        )
    }
    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        let gpu = self.gpu()?;
        if self.edge_form() {
            return edge::viterbi(&gpu, &self.backend(), problem);
        }
        let p = self.structured(problem)?;
        let model = Model::of(p);
        streaming::viterbi(&gpu, &self.backend(), &model, Source::Host(p))
    }
}

impl<'a> DevicePotentialsBuilder<'a> {
    /// Checks everything as [`semicrf_core::PotentialsBuilder::build`] does (shapes,
    /// lengths, no NaN or `+inf`, magnitudes within [`semicrf_core::range::SCORE_LIMIT`]),
    /// the device arrays on `engine`'s device by a kernel, whose scratch (16 bytes per
    /// position) is freed before this returns. The arrays must also be in that device's
    /// memory and hold the `B·T·C` elements, all of one element type.
    pub fn build(self, engine: &CudaEngine) -> Result<DevicePotentials<'a>> {
        self.build_on(engine.ordinal(), engine.backend(), || engine.gpu())
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
                let (team, threads) = crate::call::team_plan(k, c);
                assert!(team.is_power_of_two() && team <= 32, "{k} {c}");
                assert_eq!(threads % 32, 0);
                assert!((32..=1024).contains(&threads));
                assert!(threads / team >= 1);
            }
        }
    }
}
