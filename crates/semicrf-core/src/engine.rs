//! Backend traits, outputs, memory estimates and selection by memory budget.
//!
//! Every algorithm on every device implements two traits:
//!
//! - [`EngineInfo`], which names no element type or semiring: before it allocates anything,
//!   an engine says whether it can run a [`Query`] at all ([`EngineInfo::check`]) and how many
//!   bytes of working memory it needs ([`EngineInfo::memory_required`], a pure function of the
//!   query, in checked arithmetic). [`select`] walks a list of them in preference order and
//!   returns the first that supports the query within the budget, with the reason.
//! - [`Engine<F>`](Engine), which runs: a forward pass in any [`Semiring`] (monomorphised;
//!   the semiring is a type parameter, never a run-time switch inside a loop), the backward
//!   pass of the log semiring (gradients and marginals) and Viterbi decoding.

use ndarray::{Array, Array1, Array2, Array3, Array5, ArrayD, ArrayViewD, Dimension};
use semicrf_semiring::{EntropySemiring, EntropyValue, Semiring, SemiringInfo};

use crate::{Error, Problem, Result, Scalar, Shape};

/// The three inference algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// Materialised edges, full `O(T·C)` DP tables; the simplest and most general.
    Exact,
    /// Materialised edges, a ring of `K·C` DP state, checkpointed backward.
    Scan,
    /// Structured potentials, edges never materialised; factorized `O(T·C·(C+K))` recurrence,
    /// checkpointed backward with `O(sqrt(T·K)·C)` memory.
    Streaming,
}

impl Algorithm {
    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Exact => "exact",
            Algorithm::Scan => "scan",
            Algorithm::Streaming => "streaming",
        }
    }

    /// The default preference order for an input form (tried first to last by auto-selection):
    /// structured input prefers streaming (least work and memory), then exact, then scan; edge
    /// input prefers exact, then scan. Exact comes before scan because it is faster (its
    /// backward pass keeps the forward table instead of recomputing it) while scan needs less
    /// memory, so scan runs where exact does not fit.
    pub fn default_preference(form: Form) -> &'static [Algorithm] {
        match form {
            Form::Structured { .. } => &[Algorithm::Streaming, Algorithm::Exact, Algorithm::Scan],
            Form::Edges => &[Algorithm::Exact, Algorithm::Scan],
        }
    }
}

impl core::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where an engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host CPU.
    Cpu,
    /// A CUDA device, by ordinal.
    Cuda(usize),
}

impl core::fmt::Display for Device {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// Whether a CPU engine uses rayon's thread pool or runs on the calling thread.
///
/// Results are bitwise identical either way: every reduction over the batch is done in a
/// fixed order after the parallel part. Ignored by device engines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Parallelism {
    /// Run on the calling thread (deterministic tests, nested parallelism).
    Sequential,
    /// Use rayon's global thread pool (over the batch, and inside a sequence where that helps).
    #[default]
    Rayon,
}

/// The input form of a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// Structured potentials.
    Structured {
        /// Whether the transition is `(K, C, C)`.
        duration_dependent_transition: bool,
        /// Whether the begin and the end boundary scores are given (`[begin, end]`): an
        /// engine that copies its inputs counts the memory of those given only.
        boundaries: [bool; 2],
    },
    /// Edge potentials `(B, T, K, C, C)`.
    Edges,
}

/// What is asked of an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A forward pass in a semiring (log Z, Viterbi scores, entropies, …), described by
    /// [`Semiring::info`]; build it with [`Op::forward`].
    Forward(SemiringInfo),
    /// Forward and backward (log semiring): log Z, gradients and marginals.
    Backward,
    /// Viterbi scores with segments.
    Viterbi,
}

impl Op {
    /// A forward pass in semiring `S`.
    pub fn forward<S: Semiring>() -> Op {
        Op::Forward(S::info())
    }
}

/// A request as the selector sees it, before any allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Query {
    /// `(B, T, K, C)`.
    pub shape: Shape,
    /// Input form.
    pub form: Form,
    /// Operation.
    pub op: Op,
    /// Bytes per input element (4 or 8).
    pub dtype_bytes: u64,
    /// The number of threads the engine will run on, which bounds how many sequences hold
    /// working memory at once. [`Query::of`] sets `usize::MAX` (as many as the batch can
    /// use), which makes every estimate an upper bound whatever the thread pool; callers that
    /// know the pool set it with [`Query::with_threads`] (the `semicrf` facade does).
    pub threads: usize,
}

impl Query {
    /// The query for running `op` on `problem`, planning for any number of threads.
    pub fn of<F: Scalar>(problem: &Problem<'_, F>, op: Op) -> Query {
        Query {
            shape: problem.shape(),
            form: problem.form(),
            op,
            dtype_bytes: F::BYTES,
            threads: usize::MAX,
        }
    }

    /// The same query planned for `threads` threads (at least 1).
    pub fn with_threads(mut self, threads: usize) -> Query {
        self.threads = threads.max(1);
        self
    }
}

/// One segment `(start, duration, label)` of a segmentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Segment {
    /// First position.
    pub start: usize,
    /// Number of positions, `1..=K`.
    pub duration: usize,
    /// Label, `0..C`.
    pub label: usize,
}

impl Segment {
    /// `(start, duration, label)`.
    pub fn new(start: usize, duration: usize, label: usize) -> Self {
        Segment {
            start,
            duration,
            label,
        }
    }
    /// One past the last position.
    pub fn end(&self) -> usize {
        self.start + self.duration
    }
}

/// The Viterbi decoding of one sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    /// The best score; `-inf` when no segmentation has a finite score (then `segments` is
    /// empty).
    pub score: f64,
    /// The best segmentation, in order.
    pub segments: Vec<Segment>,
}

/// Gradients of `Σ_b g_b · log Z_b` with respect to the inputs, in `f64`.
///
/// For structured input, `scores`, `transition`, `duration`, `start` and `end` are always
/// present (absent inputs are zeros and have gradients too); `begin_boundary` and
/// `end_boundary` are present when those inputs were given. For edge input only `edges` is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gradients {
    /// `(B, T, C)`: `g_b` × the position marginals.
    pub scores: Option<Array3<f64>>,
    /// `(C, C)` or `(K, C, C)`, the shape of the input (`(C, C)` when absent).
    pub transition: Option<ArrayD<f64>>,
    /// `(K, C)`.
    pub duration: Option<Array2<f64>>,
    /// `(C)`.
    pub start: Option<Array1<f64>>,
    /// `(C)`.
    pub end: Option<Array1<f64>>,
    /// `(B, T, C)`.
    pub begin_boundary: Option<Array3<f64>>,
    /// `(B, T, C)`.
    pub end_boundary: Option<Array3<f64>>,
    /// `(B, T, K, C, C)`: `g_b` × the edge marginals.
    pub edges: Option<Array5<f64>>,
}

impl Gradients {
    /// Every field by its input's name (`scores`, `transition`, `duration`, `start`, `end`,
    /// `begin_boundary`, `end_boundary`, `edges`), as dynamic-rank views, in that order.
    pub fn fields(&self) -> [(&'static str, Option<ArrayViewD<'_, f64>>); 8] {
        fn v<D: Dimension>(a: &Option<Array<f64, D>>) -> Option<ArrayViewD<'_, f64>> {
            a.as_ref().map(|a| a.view().into_dyn())
        }
        [
            ("scores", v(&self.scores)),
            ("transition", v(&self.transition)),
            ("duration", v(&self.duration)),
            ("start", v(&self.start)),
            ("end", v(&self.end)),
            ("begin_boundary", v(&self.begin_boundary)),
            ("end_boundary", v(&self.end_boundary)),
            ("edges", v(&self.edges)),
        ]
    }
}

/// The result of a forward and backward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Backward {
    /// `log Z_b`, `(B)`.
    pub log_z: Vec<f64>,
    /// Gradients scaled by the upstream gradient.
    pub grad: Gradients,
    /// `(B, T)`: P(a segment starts at `t`), 0 beyond the length; not scaled.
    pub boundary_marginals: Array2<f64>,
}

/// What an engine says about itself before it runs: the part of an engine that names no
/// element type and no semiring, so selection can hold engines of any kind as
/// `&dyn EngineInfo`.
///
/// Implementations must not allocate in [`EngineInfo::check`] or
/// [`EngineInfo::memory_required`], and must return typed errors (never panic) for anything
/// they do not support, overflowing sizes included.
pub trait EngineInfo: Send + Sync {
    /// The algorithm.
    fn algorithm(&self) -> Algorithm;
    /// The device.
    fn device(&self) -> Device;
    /// `device/algorithm`, e.g. `cpu/streaming`.
    fn name(&self) -> String {
        format!("{}/{}", self.device(), self.algorithm())
    }
    /// `Ok` if the engine can run `query` at all, regardless of memory;
    /// otherwise [`Error::Unsupported`] or [`Error::BackendUnavailable`].
    fn check(&self, query: &Query) -> Result<()>;
    /// Upper bound of the working memory, in bytes, the engine allocates for `query`, beyond
    /// the inputs and the outputs it returns: a pure function of the query (its thread count
    /// included) and the engine's settings, computed in checked arithmetic. A size that
    /// overflows `u64` is an [`Error::Unsupported`] ([`ByteCount::finish`]).
    fn memory_required(&self, query: &Query) -> Result<u64>;
}

/// One algorithm on one device, running on inputs of element type `F` (`f32` or `f64`).
///
/// ```
/// # mod semicrf { pub use ::ndarray; pub use semicrf_core::*; } // the facade's paths
/// use semicrf::ndarray::Array3;
/// use semicrf::{Engine, LogSemiring, MaxSemiring, Potentials, Problem, reference::Reference};
///
/// let scores = Array3::<f32>::zeros((1, 3, 2));
/// let lengths = [3];
/// let p: Problem<f32> = Potentials::builder(scores.view(), &lengths, 3).build()?.into();
/// let log_z = Reference.forward::<LogSemiring>(&p)?;
/// let best = Reference.forward::<MaxSemiring>(&p)?;
/// assert!((log_z[0] - 18f64.ln()).abs() < 1e-12); // 18 segmentations, all of score 0
/// assert_eq!(best[0], 0.0);
/// # Ok::<(), semicrf::Error>(())
/// ```
pub trait Engine<F: Scalar>: EngineInfo {
    /// The `⊕`-sum over all segmentations of each sequence in semiring `S`: log Z
    /// ([`LogSemiring`](crate::LogSemiring)), the Viterbi score
    /// ([`MaxSemiring`](crate::MaxSemiring)), log Z with the posterior's entropy
    /// ([`EntropySemiring`], see [`entropies`]). A sequence with no finite segmentation gets
    /// `S::zero()`.
    fn forward<S: Semiring>(&self, problem: &Problem<'_, F>) -> Result<Vec<S::Value>>;
    /// log Z, gradients of `Σ_b upstream[b] · log Z_b` and boundary marginals.
    /// Fails with [`Error::Infeasible`] if some `log Z_b = -inf`.
    fn backward(&self, problem: &Problem<'_, F>, upstream: &[f64]) -> Result<Backward>;
    /// The best segmentation of each sequence.
    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>>;
}

/// The entropies of the entropy-semiring results of a forward pass, one per sequence; fails
/// with [`Error::Infeasible`] naming the first sequence whose log Z is `-inf` (it has no
/// posterior, hence no entropy), as its gradients would.
pub fn entropies(values: &[EntropyValue]) -> Result<Vec<f64>> {
    match values
        .iter()
        .position(|v| EntropySemiring::weight(*v) == f64::NEG_INFINITY)
    {
        Some(sequence) => Err(Error::Infeasible { sequence }),
        None => Ok(values.iter().map(|v| v.entropy).collect()),
    }
}

/// A byte count for memory estimates, in checked arithmetic: any overflow poisons it, and
/// [`ByteCount::finish`] turns a poisoned count into an [`Error::Unsupported`].
///
/// ```
/// # mod semicrf { pub use ::ndarray; pub use semicrf_core::*; } // the facade's paths
/// use semicrf::{ByteCount, Shape};
///
/// let shape = Shape::new(2, 10, 3, 4);
/// let n = ByteCount::f64s(&[2, 10, 4]) + ByteCount::bytes(&[64]);
/// assert_eq!(n.finish("cpu/example", shape)?, 8 * 80 + 64);
/// assert!(ByteCount::f64s(&[usize::MAX, 2]).finish("cpu/example", shape).is_err());
/// # Ok::<(), semicrf::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteCount(Option<u64>);

impl ByteCount {
    /// No bytes.
    pub const ZERO: ByteCount = ByteCount(Some(0));

    /// The product of `factors`, in bytes.
    pub fn bytes(factors: &[usize]) -> ByteCount {
        ByteCount(
            factors
                .iter()
                .try_fold(1u64, |acc, &x| acc.checked_mul(u64::try_from(x).ok()?)),
        )
    }
    /// The product of `factors` counted in `f64` words (8 bytes each).
    pub fn f64s(factors: &[usize]) -> ByteCount {
        ByteCount::bytes(factors) * 8
    }
    /// The count, or `None` after an overflow.
    pub fn get(self) -> Option<u64> {
        self.0
    }
    /// The count, or [`Error::Unsupported`] naming `backend` and `shape` after an overflow.
    pub fn finish(self, backend: &str, shape: Shape) -> Result<u64> {
        self.0.ok_or_else(|| Error::Unsupported {
            backend: backend.into(),
            what: format!("{shape}: its working memory overflows 64-bit byte counts"),
        })
    }
}

impl core::ops::Add for ByteCount {
    type Output = ByteCount;
    fn add(self, other: ByteCount) -> ByteCount {
        ByteCount(self.0.zip(other.0).and_then(|(a, b)| a.checked_add(b)))
    }
}

impl core::ops::Mul<usize> for ByteCount {
    type Output = ByteCount;
    fn mul(self, n: usize) -> ByteCount {
        ByteCount(
            self.0
                .zip(u64::try_from(n).ok())
                .and_then(|(a, b)| a.checked_mul(b)),
        )
    }
}

impl core::iter::Sum for ByteCount {
    fn sum<I: Iterator<Item = ByteCount>>(iter: I) -> ByteCount {
        iter.fold(ByteCount::ZERO, |a, b| a + b)
    }
}

/// Checks an upstream gradient: one finite value per sequence.
pub fn check_upstream(upstream: &[f64], batch: usize) -> Result<()> {
    if upstream.len() != batch {
        return Err(Error::Upstream {
            reason: format!(
                "{} values, expected one per sequence (B = {batch})",
                upstream.len()
            ),
        });
    }
    if let Some((i, v)) = upstream.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(Error::Upstream {
            reason: format!("value {v} at index {i} is not finite"),
        });
    }
    Ok(())
}

/// Fails with [`Error::Infeasible`] naming the first sequence whose log Z is `-inf`.
pub fn check_feasible(log_z: &[f64]) -> Result<()> {
    match log_z.iter().position(|&z| z == f64::NEG_INFINITY) {
        Some(sequence) => Err(Error::Infeasible { sequence }),
        None => Ok(()),
    }
}

/// The outcome of [`select`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// Index of the chosen engine in the candidate list.
    pub index: usize,
    /// Its algorithm.
    pub algorithm: Algorithm,
    /// Its device.
    pub device: Device,
    /// Its memory requirement in bytes.
    pub required: u64,
    /// Why it was chosen (and why the ones before it were not).
    pub reason: String,
}

/// Picks the first candidate that supports `query` and fits `budget` bytes.
///
/// A pure function: candidates are tried in the order given (the caller puts them in
/// preference order, e.g. [`Algorithm::default_preference`]); each one that does not support
/// the query or needs more than the budget is skipped and the skip is written in the reason.
/// With no candidate left the error is [`Error::MemoryBudget`] (some candidate supported the
/// query but none fit) or the first candidate's own error.
pub fn select(candidates: &[&dyn EngineInfo], query: &Query, budget: u64) -> Result<Selection> {
    select_with(candidates, query, budget, |e| e.memory_required(query), "")
}

/// [`select`] with the memory requirement of each candidate given by `required` (for an
/// operation other than [`EngineInfo::memory_required`]'s, e.g. k best), `detail` appended
/// to the chosen candidate's reason.
pub fn select_with<E: EngineInfo + ?Sized>(
    candidates: &[&E],
    query: &Query,
    budget: u64,
    required: impl Fn(&E) -> Result<u64>,
    detail: &str,
) -> Result<Selection> {
    let mut skipped: Vec<String> = Vec::new();
    let mut first_err: Option<Error> = None;
    let mut smallest: Option<(u64, String)> = None;
    for (index, e) in candidates.iter().enumerate() {
        let required = match e.check(query).and_then(|()| required(*e)) {
            Ok(r) => r,
            Err(err) => {
                skipped.push(format!("{} skipped ({err})", e.name()));
                first_err.get_or_insert(err);
                continue;
            }
        };
        if required > budget {
            skipped.push(format!(
                "{} skipped (needs {} > budget {})",
                e.name(),
                human_bytes(required),
                human_bytes(budget)
            ));
            if smallest.as_ref().is_none_or(|(r, _)| required < *r) {
                smallest = Some((required, e.name()));
            }
            continue;
        }
        let mut reason = format!(
            "{} needs {} of the {} budget for {}{detail}",
            e.name(),
            human_bytes(required),
            human_bytes(budget),
            query.shape
        );
        if !skipped.is_empty() {
            reason = format!("{}; {}", skipped.join("; "), reason);
        }
        return Ok(Selection {
            index,
            algorithm: e.algorithm(),
            device: e.device(),
            required,
            reason,
        });
    }
    if let Some((required, algorithm)) = smallest {
        return Err(Error::MemoryBudget {
            required,
            budget,
            algorithm,
        });
    }
    Err(first_err.unwrap_or_else(|| Error::BackendUnavailable {
        backend: "auto".into(),
        reason: "no backend was offered to the selector".into(),
    }))
}

/// `1.5 GiB`, `12.0 KiB`, `512 B`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}
