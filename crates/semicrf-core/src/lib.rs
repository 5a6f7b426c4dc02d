//! The ground every semicrf backend stands on: validated inputs, the one [`Error`] type, the
//! backend traits [`EngineInfo`] and [`Engine`] with memory estimates and selection by memory
//! budget, gold scoring and NLL, label-run ↔ segment conversion, and the f64
//! [`reference`](mod@reference) oracle. The model itself, its conventions, recurrences and
//! interchange format are on the [`model`] page.
//!
//! Users normally depend on the `semicrf` facade, which re-exports this crate; depend on it
//! directly to write a backend.
//!
//! ```
//! use ndarray::{Array2, Array3};
//! use semicrf_core::{reference, Engine, EntropySemiring, LogSemiring, Potentials, Problem};
//!
//! let scores = Array3::<f64>::from_elem((1, 4, 2), 0.5);
//! let transition = Array2::<f64>::zeros((2, 2));
//! let lengths = [4];
//! let p: Problem<f64> = Potentials::builder(scores.view(), &lengths, 3)
//!     .transition(transition.view())
//!     .build()?
//!     .into();
//! let log_z = reference::Reference.forward::<LogSemiring>(&p)?;
//! let h = reference::Reference.forward::<EntropySemiring>(&p)?;
//! assert!(log_z[0].is_finite() && h[0].entropy > 0.0);
//! # Ok::<(), semicrf_core::Error>(())
//! ```
//!
//! # Writing a backend
//!
//! Implement [`EngineInfo`] (algorithm, device, [`EngineInfo::check`] and
//! [`EngineInfo::memory_required`], pure functions of a [`Query`] that allocate nothing and
//! count bytes with [`ByteCount`]) and [`Engine<F>`](Engine) for `f32` and `f64`: a forward
//! pass generic over the [`Semiring`] (any semiring runs through the same code, monomorphised),
//! the log semiring's backward and Viterbi. A backend that can read a problem chunk by chunk
//! from a [`PotentialSource`] ([`StreamedPotentials`]) and deliver gradients to a
//! [`GradientSink`] also implements [`SourceEngine`] (model §11). [`select`] then chooses among backends by memory
//! budget, and the conformance suite of the `semicrf` repository checks a new backend against
//! the [`reference`](mod@reference).
//!
//! # Algorithms (per sequence)
//!
//! | algorithm | input | time | working memory |
//! |---|---|---|---|
//! | exact | edges (materialised if structured) | `O(T·K·C²)` | `O(T·K·C²)` edges + `O(T·C)` tables |
//! | scan | edges (materialised if structured) | `O(T·K·C²)` | edges + `O(K·C)` ring, checkpoints |
//! | streaming | structured | `O(T·C·(C+K))` (2-D transition) | `O(K·C + sqrt(T·K)·C)` |
//!
//! # Errors
//!
//! Every bad input is a typed [`Error`]; nothing panics. Each row has a test in
//! `tests/errors.rs` of this crate.
//!
//! | condition | error |
//! |---|---|
//! | a tensor of the wrong rank (`scores` not 3-D, `transition` not 2-D or 3-D, ...) | [`Error::Rank`] |
//! | a tensor of the wrong extents (names the tensor, expected vs got) | [`Error::Shape`] |
//! | `B = 0` | [`Error::EmptyBatch`] |
//! | `C = 0` | [`Error::NoLabels`] |
//! | `K = 0` | [`Error::ZeroMaxDuration`] |
//! | `lengths` has the wrong count | [`Error::LengthsCount`] |
//! | a length of 0 or > T | [`Error::Length`] |
//! | NaN or `+inf` in any tensor (names tensor and index) | [`Error::NonFinite`] |
//! | potentials too large for the result asked ([`range`](mod@range): names sequence, tensor, index, value) | [`Error::Magnitude`] |
//! | upstream gradient of the wrong count or not finite | [`Error::Upstream`] |
//! | a gradient asked where log Z = `-inf` | [`Error::Infeasible`] |
//! | a gold segmentation that does not tile its sequence | [`Error::Segmentation`] |
//! | a label run longer than K (unless splitting is asked) | [`Error::RunTooLong`] |
//! | a memory budget too small for any backend | [`Error::MemoryBudget`] |
//! | a backend that is unavailable (no driver, not compiled in) | [`Error::BackendUnavailable`] |
//! | a backend that does not support the request | [`Error::Unsupported`] |
//!
//! # Crate features
//!
//! - `testing`: what the test suites share ([`testing`]): seeded random problems, the named
//!   edge cases, tolerances and comparison helpers.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod checks;
mod engine;
pub mod enumerate;
mod error;
mod kbest;
mod materialize;
pub mod model;
pub mod partial;
mod posterior;
mod potentials;
pub mod range;
pub mod reference;
pub mod sample;
mod scalar;
mod segments;
mod sink;
mod source;
#[cfg(feature = "testing")]
pub mod testing;

pub use engine::{
    Algorithm, Backward, ByteCount, Decoded, Device, Engine, EngineInfo, Form, Gradients, Op,
    Parallelism, Query, Segment, Selection, check_feasible, check_upstream, entropies, human_bytes,
    select, select_with,
};
pub use error::{Error, Result};
pub use kbest::{KBest, SegmentScores, StructuredScores, kbest_bytes, kbest_sequence};
pub use materialize::{
    boundary_marginals_from_edges, edge_tensor_bytes, materialize, position_marginals_from_edges,
    pull_back,
};
pub use posterior::{PosteriorProblem, posterior_decode};
pub use potentials::{
    EdgePotentials, OwnedPotentials, Potentials, PotentialsBuilder, Problem, Shape, Transition,
};
pub use sample::{ForwardBlocks, Sampler, Samples};
pub use scalar::Scalar;
pub use segments::{
    decode_best, gold_score, gold_score_edges, gold_score_pull_back, labels_from_segments,
    segments_from_labels, trace_back, validate_segmentation,
};
pub use semicrf_semiring::{
    EntropySemiring, EntropyValue, LogSemiring, MaxSemiring, Semiring, SemiringInfo,
};
pub use sink::{
    GradientArrays, GradientArraysParts, GradientRows, GradientSink, SourceEngine, StreamedBackward,
};
pub use source::{
    PotentialSource, RowCheck, Scanned, SharedParams, SourceRows, StreamedPotentials,
    StreamedPotentialsBuilder, check_magnitude,
};
