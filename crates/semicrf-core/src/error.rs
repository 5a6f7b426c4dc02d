//! The one error type of semicrf.

/// Everything that can go wrong in semicrf. Messages are lowercase, without a trailing period,
/// and name the tensor, index or figures involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tensor has the wrong number of dimensions.
    #[error("tensor `{tensor}` has rank {got}, expected rank {expected}")]
    Rank {
        /// Name of the tensor (`scores`, `transition`, ...).
        tensor: &'static str,
        /// The accepted rank(s), written out (`"3"`, `"2 or 3"`).
        expected: String,
        /// The rank that was given.
        got: usize,
    },
    /// A tensor has the right rank but the wrong extents.
    #[error("tensor `{tensor}` has shape {got:?}, expected {expected}")]
    Shape {
        /// Name of the tensor.
        tensor: &'static str,
        /// The expected shape, with its symbols (`"(B, T, C) = (2, 5, 3)"`).
        expected: String,
        /// The shape that was given.
        got: Vec<usize>,
    },
    /// The batch is empty (`B = 0`).
    #[error("the batch is empty (B = 0)")]
    EmptyBatch,
    /// There are no labels (`C = 0`).
    #[error("there are no labels (C = 0)")]
    NoLabels,
    /// The maximum duration is zero (`K = 0`).
    #[error("the maximum duration K must be at least 1, got 0")]
    ZeroMaxDuration,
    /// `lengths` holds a different number of entries than the batch has sequences.
    #[error("`lengths` has {got} entries, expected one per sequence (B = {expected})")]
    LengthsCount {
        /// `B`.
        expected: usize,
        /// The number of lengths given.
        got: usize,
    },
    /// A sequence length is 0 or larger than `T`.
    #[error("`lengths[{sequence}]` = {length} is out of range 1..={max}")]
    Length {
        /// Index of the sequence.
        sequence: usize,
        /// The length given.
        length: usize,
        /// `T`.
        max: usize,
    },
    /// A potential is NaN or `+inf` (`-inf` is legal: it forbids).
    #[error(
        "tensor `{tensor}` holds {value} at index {index:?}; potentials must be finite or -inf"
    )]
    NonFinite {
        /// Name of the tensor.
        tensor: &'static str,
        /// Multi-index of the first bad value (row-major order).
        index: Vec<usize>,
        /// The bad value (NaN or `+inf`).
        value: f64,
    },
    /// A sequence's potentials are too large in magnitude for the result asked to be trusted
    /// (see [`range`](crate::range)).
    #[error(
        "sequence {sequence}: a segmentation can score up to {bound:.3e} in magnitude, beyond \
         {limit:.3e}, the most at which {what}; the largest potential is `{tensor}` at \
         {index:?} = {value:e}: rescale the potentials, or forbid with -inf rather than a large \
         negative number"
    )]
    Magnitude {
        /// Index of the sequence.
        sequence: usize,
        /// Its bound `M_b` on the magnitude of a segmentation's score.
        bound: f64,
        /// The limit it exceeds.
        limit: f64,
        /// What the limit protects.
        what: &'static str,
        /// The tensor of the largest finite potential in the bound.
        tensor: &'static str,
        /// Its multi-index.
        index: Vec<usize>,
        /// Its value.
        value: f64,
    },
    /// Upstream gradients are malformed.
    #[error("upstream gradient: {reason}")]
    Upstream {
        /// What is wrong (count, NaN, infinity).
        reason: String,
    },
    /// No segmentation of a sequence has a finite score, so its gradient is undefined.
    #[error("sequence {sequence} has no segmentation with a finite score (log Z = -inf)")]
    Infeasible {
        /// Index of the sequence.
        sequence: usize,
    },
    /// A segmentation given by the caller is not a valid tiling of its sequence.
    #[error("segmentation of sequence {sequence}: {reason}")]
    Segmentation {
        /// Index of the sequence.
        sequence: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A run of equal labels is longer than the maximum duration.
    #[error(
        "label run of label {label} at positions {start}..{end} has length {} > K = {max_duration}; \
         ask for long runs to be split to chain segments",
        end - start
    )]
    RunTooLong {
        /// Label of the run.
        label: usize,
        /// First position of the run.
        start: usize,
        /// One past the last position of the run.
        end: usize,
        /// `K`.
        max_duration: usize,
    },
    /// No backend can run the request within the memory budget.
    #[error(
        "memory budget of {budget} bytes is too small for any backend: \
         the smallest candidate ({algorithm}) needs {required} bytes"
    )]
    MemoryBudget {
        /// The smallest requirement among the candidates that support the request.
        required: u64,
        /// The configured budget.
        budget: u64,
        /// The algorithm that would need `required` bytes.
        algorithm: String,
    },
    /// The requested backend cannot run here (no driver, not compiled in, no device).
    #[error("backend {backend} is unavailable: {reason}")]
    BackendUnavailable {
        /// The backend (`cuda/streaming`, ...).
        backend: String,
        /// Why.
        reason: String,
    },
    /// The backend exists but does not support this request (input form, semiring, shape).
    #[error("backend {backend} does not support {what}")]
    Unsupported {
        /// The backend.
        backend: String,
        /// What it does not support.
        what: String,
    },
    /// A failure inside a device backend (driver error, kernel compile error).
    #[error("device error in {backend}: {message}")]
    Device {
        /// The backend.
        backend: String,
        /// The driver's or compiler's message.
        message: String,
    },
}

/// `Result<T, semicrf_core::Error>`.
pub type Result<T, E = Error> = core::result::Result<T, E>;
