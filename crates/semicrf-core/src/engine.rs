//! Backend traits, outputs, memory estimates and selection by memory budget.
//!
//! Every algorithm on every device implements [`Engine`]. Before it allocates anything, an
//! engine answers two questions about a [`Query`]: can it run it at all ([`Engine::check`]),
//! and how many bytes of working memory it needs ([`Engine::memory_required`], a pure function
//! of the query). [`select`] walks a list of engines in preference order and returns the first
//! that supports the query within the budget, with the reason.

use ndarray::{Array, Array1, Array2, Array3, Array5, ArrayD, ArrayViewD, Dimension};

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
    /// input prefers exact, then scan.
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

/// The semiring of a forward pass, chosen at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SemiringKind {
    /// Log-sum-exp: the log partition function.
    Log,
    /// Max: the Viterbi score.
    Max,
}

/// The input form of a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// Structured potentials.
    Structured {
        /// Whether the transition is `(K, C, C)`.
        duration_dependent_transition: bool,
    },
    /// Edge potentials `(B, T, K, C, C)`.
    Edges,
}

/// What is asked of an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A forward pass in a semiring: log Z or Viterbi scores.
    Forward(SemiringKind),
    /// Forward and backward (log semiring): log Z, gradients and marginals.
    Backward,
    /// Viterbi scores with segments.
    Viterbi,
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
}

impl Query {
    /// The query for running `op` on `problem`.
    pub fn of<F: Scalar>(problem: &Problem<'_, F>, op: Op) -> Query {
        Query {
            shape: problem.shape(),
            form: problem.form(),
            op,
            dtype_bytes: F::BYTES,
        }
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

/// One algorithm on one device.
///
/// Implementations must not allocate in [`Engine::check`] or [`Engine::memory_required`], and
/// must return typed errors (never panic) for anything they do not support.
pub trait Engine<F: Scalar>: Send + Sync {
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
    /// the inputs and the outputs it returns.
    fn memory_required(&self, query: &Query) -> u64;
    /// `⊕`-sum over all segmentations, per sequence (log Z for Log, the Viterbi score for Max).
    fn forward(&self, problem: &Problem<'_, F>, semiring: SemiringKind) -> Result<Vec<f64>>;
    /// log Z, gradients of `Σ_b upstream[b] · log Z_b` and boundary marginals.
    /// Fails with [`Error::Infeasible`] if some `log Z_b = -inf`.
    fn backward(&self, problem: &Problem<'_, F>, upstream: &[f64]) -> Result<Backward>;
    /// The best segmentation of each sequence.
    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>>;
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
pub fn select<F: Scalar>(
    candidates: &[&dyn Engine<F>],
    query: &Query,
    budget: u64,
) -> Result<Selection> {
    let mut skipped: Vec<String> = Vec::new();
    let mut first_err: Option<Error> = None;
    let mut smallest: Option<(u64, String)> = None;
    for (index, e) in candidates.iter().enumerate() {
        if let Err(err) = e.check(query) {
            skipped.push(format!("{} skipped ({err})", e.name()));
            first_err.get_or_insert(err);
            continue;
        }
        let required = e.memory_required(query);
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
            "{} needs {} of the {} budget for {}",
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
