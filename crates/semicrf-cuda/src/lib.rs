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
//! **The log semiring, static transition** (`kernels/meet.cu` and its headers, up to 64
//! labels): the path of
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
//! order as the general kernels, so results are bitwise the same (a test compares them). The
//! environment can select the general kernels for comparison, or add options to NVRTC (see
//! "Settings" below).
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
//! | k best (`kernels/kbest.cu`, `k` ≤ [`KBEST_MAX_K`]) | `O(T·C·k·K·C/32)` on one block | + `16·T·C·k + 4·T·C` bytes of lists and `8·k·T` of results per sequence; the lists are the CPU engines', bit for bit |
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
//! gradients are summed on the device (`shared_sum` in `kernels/io.cu`, the host's order and
//! rounding). The kernels' own buffers are one allocation. A backward pass's results of at
//! most 4 MB in all are copied into a page-locked buffer by copies enqueued behind its
//! kernels, with one wait for all of them, and the calling thread makes the host arrays they
//! go to ready while the kernels run. Other copies of 2 MB and more run in chunks through
//! that buffer, the host's threads filling or emptying one chunk while the bus moves another.
//! The device's memory pool keeps what calls free for the next ones
//! ([`CudaEngine::release_memory`] returns it).
//!
//! # Potentials already on the device
//!
//! [`DevicePotentials`] holds scores and boundaries that are already in device memory
//! ([`DeviceArray`]: a cudarc buffer, or a raw address with its length, element type and the
//! stream that writes it, such as another framework's tensor), with the lengths on the host
//! and the shared parameters on the host or on the device (read back with the checks' words,
//! `shared_check`). [`DevicePotentialsBuilder::build`] checks it as the core checks
//! host potentials (a kernel, `check_input` in `kernels/io.cu`, finds NaN and `+inf` and
//! each sequence's magnitude bound on the device), and that each address is memory of this
//! device whose allocation holds the array. [`CudaEngine::forward_on_device`],
//! [`CudaEngine::backward_on_device`] and [`CudaEngine::viterbi_on_device`] give what the
//! same potentials from the host give, bit for bit (a test checks it), with the backward's
//! `(B, T, C)` gradients and boundary marginals left on the device ([`DeviceBackward`]).
//! [`CudaEngine::backward_into`] writes them, log Z and the shared parameters' gradients
//! where asked into arrays the caller allocated
//! instead ([`DeviceOutputs`] of [`DeviceArrayMut`]s, such as tensors a framework allocated
//! for the gradients), ordered before later work on their streams: by the kernels
//! themselves for `f64`, through an `f64` scratch of each result and a rounding kernel
//! (`narrow_f32` in `kernels/io.cu`) for `f32`. [`CudaEngine::backward_into_queued`] gives
//! the same results without waiting for them: log Z, the reruns of the sequences the
//! linear-domain kernels give up and the shared parameters' sums stay on the device
//! (`streaming/queued.rs`), so a training loop's host prepares the next step while the
//! device runs this one.
//!
//! **Determinism.** Every reduction has a fixed order (lanes and threads in index order,
//! then a fixed butterfly), every accumulator of a gradient is owned by one thread, and the
//! batch is summed in ascending order (on the host, or by one thread an item on the device,
//! `shared_sum`, with the host's rounding): results are bitwise identical from run to run.
//! No float atomics are used.
//!
//! # Potentials from a source
//!
//! [`CudaEngine`] also implements [`SourceEngine`]: a problem whose scores and boundaries
//! come from a [`PotentialSource`](semicrf_core::PotentialSource) chunk by chunk
//! ([`StreamedPotentials`](semicrf_core::StreamedPotentials)). The rows are asked of the
//! source [`CudaEngine::rows_per_chunk`] at a time, checked as the core checks them, and
//! copied to the device through the two halves of the page-locked buffer (the host fills
//! one while the bus moves the other); the backward pass's position-wise results come back
//! the same way, chunk by chunk, to a [`GradientSink`](semicrf_core::GradientSink), each
//! sequence's last rows first; a Viterbi's traceback reads the backpointers from the device
//! the same number of rows at a time. The host never holds a `(B, T, C)` array; the device holds
//! the whole position tensors, as for arrays, and runs the same kernels on them, so the
//! results are those of the same values given as arrays, bit for bit, for any chunk size
//! (a test checks it), and [`SourceEngine::memory_required_streamed`] is
//! [`EngineInfo::memory_required`] (model page §11).
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
//! # Posterior samples
//!
//! [`CudaEngine`] with [`Algorithm::Streaming`] implements the core's [`Sampler`] (model page
//! §12): the log-domain forward kernel (`kernels/streaming.cu`) runs once over the batch in its
//! mode that saves `α_t(j)` at every position, and `u_s(j)` for a static transition; then
//! `sample_draw` (`kernels/sample.cu`) draws every sample from those rows on the device, one
//! warp per (sequence, sample), walking it down from the end as the core's one sampler
//! ([`sample_sequence`](semicrf_core::sample::sample_sequence)) does, with the host's
//! generators ([`sample_rng`](semicrf_core::sample::sample_rng)) and each segment's weight
//! computed as the CPU streaming engine computes it. Only the samples come back (4 bytes a
//! segment, packed on the device). Memory: `16·(T+1)·C` bytes per sequence (`8·(T+1)·C` for a
//! `(K, C, C)` transition) of rows and `8·max(K, C) + 8·T + 8` bytes per sample (at most
//! 128 MiB a launch) on the device, besides the inputs; never a `(T, K, C)` table. The same
//! seed gives the same samples, and the CPU streaming engine's except where rounding decides
//! between two choices (the device's `α`, `exp` and `log` differ from the CPU's in the last
//! bits). Structured potentials from the host only (not [`DevicePotentials`], nor a
//! potentials source).
//!
//! # Settings
//!
//! A few environment variables tune the engine or switch an optimisation off for
//! comparison; each is read once, when first needed. `docs/configuration.md` at the
//! repository's root lists every one with its meaning, default and when to touch it.
//!
//! # The crate's map
//!
//! Each module uses only those above it in this table (a test checks it: no module cycle).
//!
//! | module | what |
//! |---|---|
//! | `tuning` | the environment's settings, read once |
//! | `kernel` | the contract with the kernels: sources, kernel ids, argument blocks and their layouts, shared constants |
//! | `device` | a device opened: context, stream, NVRTC, loaded kernels, allocations, memory pool |
//! | `transfer` | a call's inputs to the device; large copies through page-locked memory |
//! | `call` | one call of the streaming kernels: its model and inputs on the device, the teams' plan; the small kernels around its results (`call/sums.rs`) |
//! | `logdomain` | the log-domain kernels (`kernels/streaming.cu`): every semiring and form |
//! | `meet` | the meet kernels (`kernels/meet.cu`): the log semiring's linear-domain sweeps |
//! | `streaming` | the streaming algorithm: meet where it can, log domain otherwise and for reruns; results, memory; the queued backward |
//! | `edge` | the edge-form kernels (`kernels/edge.cu`): exact and scan |
//! | `resident` | potentials in device memory and results left there; their checks (`kernels/io.cu`) |
//! | `outputs` | a backward pass's results written into the caller's device arrays; their checks, streams and `f32` conversion |
//! | `engine` | [`CudaEngine`] |
//! | `kbest` | k best on the device (`kernels/kbest.cu`): [`KBest`](semicrf_core::KBest) for [`CudaEngine`] |
//! | `streamed` | [`CudaEngine`] on a potentials source ([`SourceEngine`]): rows uploaded chunk by chunk, gradients delivered chunk by chunk |
//! | `sample` | [`CudaEngine`] as a [`Sampler`]: the forward values saved on the device, the draws there too |
#![deny(missing_docs)]

mod call;
mod device;
mod edge;
#[cfg(test)]
mod emu;
mod engine;
mod kbest;
mod kernel;
mod logdomain;
mod meet;
mod outputs;
mod resident;
mod sample;
mod streamed;
mod streaming;
mod transfer;
mod tuning;

pub use cudarc;
pub use device::MemoryUse;
pub use engine::{CudaEngine, DEFAULT_PIECE_OVERLAP};
pub use kbest::KBEST_MAX_K;
pub use outputs::{DeviceArrayMut, DeviceOutputs, HostBackward};
pub use resident::{DeviceArray, DeviceBackward, DevicePotentials, DevicePotentialsBuilder, Dtype};
#[cfg(doc)]
use semicrf_core::{Algorithm, Engine, EngineInfo, Error, Sampler, SourceEngine};
pub use streamed::SplitReport;

#[cfg(test)]
mod layering;
