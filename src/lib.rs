//! Semi-Markov conditional random fields (semi-CRFs): log partition, gradients, marginals,
//! Viterbi segmentations and the negative log-likelihood of gold segmentations, with three
//! algorithms (exact, scan, streaming) chosen automatically by memory budget.
//!
//! A semi-CRF scores *segmentations*: a sequence of `L` positions is tiled by segments
//! `(start, duration, label)` with durations `1..=K`, and every segment pays its emission
//! scores, a duration score, a transition from the previous label and optional boundary
//! scores (see [`Potentials`] and the model section below). This crate is the entry point:
//! configure a [`SemiCrf`] once (backend, device, memory budget) and call it on problems.
//!
//! # When not to use it
//!
//! - Segments are all of length one: a linear-chain CRF library is simpler and faster
//!   (a semi-CRF with `K = 1` is one, but pays for generality).
//! - You need training loops, feature extraction or automatic differentiation through a
//!   larger model: semicrf computes log Z and its exact gradients with respect to the
//!   potentials; plug those into your own optimiser or autodiff framework.
//!
//! # Example
//!
//! ```
//! use semicrf::ndarray::{array, Array3};
//! use semicrf::{Potentials, SemiCrf, Segment};
//!
//! // One sequence of 4 positions, 2 labels, segments of at most 3 positions.
//! let scores = Array3::from_shape_vec(
//!     (1, 4, 2),
//!     vec![2.0, 0.0, 2.0, 0.0, 0.0, 1.0, 0.0, 1.0],
//! )?;
//! let transition = array![[-1.0, 0.5], [0.5, -1.0]];
//! let lengths = [4];
//! let potentials = Potentials::builder(scores.view(), &lengths, 3)
//!     .transition(transition.view())
//!     .build()?;
//!
//! let crf = SemiCrf::new();
//! let log_z = crf.log_partition(&potentials)?;
//! let best = crf.viterbi(&potentials)?;
//! assert_eq!(best[0].segments, [Segment::new(0, 2, 0), Segment::new(2, 2, 1)]);
//! assert!(best[0].score <= log_z[0]);
//!
//! // P(position t has label c), and P(a segment starts at t).
//! let m = crf.marginals(&potentials)?;
//! assert!((m.position[[0, 1, 0]] + m.position[[0, 1, 1]] - 1.0).abs() < 1e-12);
//! assert!((m.boundary[[0, 0]] - 1.0).abs() < 1e-12); // a segment always starts at 0
//!
//! // Negative log-likelihood of a gold segmentation: log Z - its score, never negative.
//! let nll = crf.nll(&potentials, &[best[0].segments.clone()])?;
//! assert!(nll[0] >= 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The model
//!
//! For a segmentation `(s_1, d_1, c_1), …, (s_n, d_n, c_n)` of sequence `b`, the score is
//!
//! ```text
//! start[c_1] + Σ_i ( Σ_{t=s_i}^{s_i+d_i-1} scores[b, t, c_i] + duration[d_i-1, c_i]
//!                    + begin_boundary[b, s_i, c_i] + end_boundary[b, s_i+d_i-1, c_i] )
//!            + Σ_{i≥2} transition[c_{i-1}, c_i]      (or transition[d_i-1, c_{i-1}, c_i])
//!            + end[c_n]
//! ```
//!
//! and `log Z_b` is the log-sum-exp of the scores of all segmentations. A `-inf` potential
//! forbids what it scores; NaN and `+inf` are rejected with [`Error::NonFinite`]. The general
//! *edge* form ([`EdgePotentials`], `(B, T, K, C, C)`, destination label first) is accepted
//! by the exact and scan algorithms.
//!
//! # Algorithms
//!
//! Per sequence of length `T`, with maximum duration `K` and `C` labels:
//!
//! | algorithm | input | time | working memory |
//! |---|---|---|---|
//! | [`Backend::Exact`] | edges (materialised if structured) | `O(T·K·C²)` | `O(T·K·C²)` edges + `O(T·C)` tables |
//! | [`Backend::Scan`] | edges (materialised if structured) | `O(T·K·C²)` | edges + `O(K·C)` ring, checkpoints |
//! | [`Backend::Streaming`] | structured only | `O(T·C·(C+K))` with a `(C, C)` transition, `O(T·K·C²)` with `(K, C, C)` | `O(K·C + sqrt(T·K)·C)` |
//!
//! With [`Backend::Auto`] (the default) the candidates are tried in
//! [`Algorithm::default_preference`] order — streaming, exact, scan for structured input;
//! exact, scan for edges — and the first one that supports the request and fits the memory
//! budget ([`DEFAULT_MEMORY_BUDGET`] unless configured) runs it. [`SemiCrf::select`] tells
//! which one and why, without running anything.
//!
//! # Errors
//!
//! Every method returns [`Result`]; bad input never panics. The usual errors are
//! [`Error::Shape`] / [`Error::Rank`] (a tensor of the wrong shape), [`Error::Length`],
//! [`Error::NonFinite`] (a NaN or `+inf` potential), [`Error::Infeasible`] (gradients asked
//! where no segmentation has a finite score), [`Error::MemoryBudget`] (no candidate fits the
//! budget), [`Error::BackendUnavailable`] (a device or backend that is not compiled in or not
//! implemented) and [`Error::Unsupported`] (a backend that cannot take the request, e.g.
//! streaming with edge input).
//!
//! # Crate features
//!
//! - `cpu` (default): the CPU engines of `semicrf-cpu` (rayon).
//! - `cuda`: the CUDA engines of `semicrf-cuda` for [`Device::Cuda`], all three algorithms:
//!   streaming for structured potentials, exact and scan for either form (edge-form kernels;
//!   structured input is materialised to edges on the host first, so for structured
//!   potentials [`Backend::Auto`] prefers streaming there too). Kernels are compiled by NVRTC
//!   at first use; a machine without a CUDA driver gets [`Error::BackendUnavailable`] with
//!   the reason, and so does a CUDA device in a build without this feature. The crate itself
//!   is re-exported as `semicrf::cuda`, for what only a GPU has: potentials already in device
//!   memory (`cuda::DevicePotentials`), CUDA-event timing, device memory measurement.
//! - `json`: [`interchange`], the reader and writer of the JSON interchange format of the
//!   specification (adds `serde_json`).
//!
//! The `semicrf` command-line tool (`semicrf eval --input problem.json`), which reads and
//! writes that format, is the separate package `semicrf-cli`, so that a library user does not
//! build its argument parser.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod any_engine;
mod as_problem;
mod config;
#[cfg(feature = "json")]
pub mod interchange;
mod kbest;
mod partial_labels;
mod sampling;
mod streamed;

use ndarray::{Array2, Array3, Array5};

pub use any_engine::AnyEngine;
use any_engine::cpu_threads;
pub use as_problem::AsProblem;
pub use config::{Backend, Config};
pub use partial_labels::PartialBackward;

pub use ndarray;
pub use semicrf_core::{
    Algorithm, Backward, ByteCount, Decoded, Device, EdgePotentials, Engine, EngineInfo,
    EntropySemiring, EntropyValue, Error, Form, Gradients, LogSemiring, MaxSemiring, Op,
    OwnedPotentials, Parallelism, Potentials, PotentialsBuilder, Problem, Query, Result, Scalar,
    Segment, Selection, Semiring, SemiringInfo, Shape, Transition, entropies, gold_score,
    gold_score_edges, gold_score_pull_back, human_bytes, labels_from_segments, materialize, model,
    position_marginals_from_edges, pull_back, segments_from_labels, select, trace_back,
    validate_segmentation,
};
pub use semicrf_core::{ForwardBlocks, Sampler, Samples, partial, sample};
pub use semicrf_core::{
    GradientArrays, GradientArraysParts, GradientRows, GradientSink, PotentialSource, RowCheck,
    SharedParams, SourceEngine, SourceRows, StreamedBackward, StreamedPotentials,
    StreamedPotentialsBuilder, check_magnitude,
};
pub use semicrf_core::{
    KBest, PosteriorProblem, SegmentScores, StructuredScores, enumerate, kbest_bytes,
    kbest_sequence, posterior_decode,
};
pub use semicrf_core::{range, reference};
/// The CUDA engines and what only they offer (see the `cuda` feature).
#[cfg(feature = "cuda")]
pub use semicrf_cuda as cuda;

/// The default memory budget: 2 GiB of working memory per call.
pub const DEFAULT_MEMORY_BUDGET: u64 = 2 << 30;

/// Posterior marginals of a batch, from one forward-backward pass.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Marginals {
    /// `log Z_b`, `(B)`.
    pub log_z: Vec<f64>,
    /// `(B, T, C)`: P(position `t` lies in a segment of label `c`). For every `t < L_b` the
    /// labels sum to 1; positions beyond the length are 0.
    pub position: Array3<f64>,
    /// `(B, T)`: P(a segment starts at `t`); 1 at `t = 0`, 0 beyond the length.
    pub boundary: Array2<f64>,
    /// `(B, T, K, C, C)`: the edge (segment) marginals, for edge input only.
    pub edges: Option<Array5<f64>>,
}

/// A configured semi-CRF: the one entry point of the library.
///
/// Every method takes validated potentials ([`Potentials`], [`EdgePotentials`], or a
/// [`Problem`] holding either: see [`AsProblem`]; `f32` or `f64`, every tensor of one problem
/// of the same type), picks an engine for the operation as configured ([`SemiCrf::select`])
/// and returns `f64` results.
///
/// ```
/// use semicrf::ndarray::Array3;
/// use semicrf::{Backend, Config, Potentials, SemiCrf};
///
/// let scores = Array3::<f32>::zeros((2, 6, 3));
/// let lengths = [6, 4];
/// let potentials = Potentials::builder(scores.view(), &lengths, 4).build()?;
/// let crf = SemiCrf::with_config(Config::new().backend(Backend::Exact));
/// let log_z = crf.log_partition(&potentials)?;
/// assert!(log_z[0] > log_z[1]); // more positions, more segmentations
/// # Ok::<(), semicrf::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SemiCrf {
    config: Config,
}

impl From<Config> for SemiCrf {
    fn from(config: Config) -> Self {
        SemiCrf { config }
    }
}

impl SemiCrf {
    /// A semi-CRF with the default [`Config`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A semi-CRF with the given configuration.
    pub fn with_config(config: Config) -> Self {
        SemiCrf { config }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The engines `select` chooses from, in preference order.
    fn candidates(&self, form: Form) -> Result<Vec<AnyEngine>> {
        let algorithms: Vec<Algorithm> = match self.config.get_backend().algorithm() {
            Some(a) => vec![a],
            None => Algorithm::default_preference(form).to_vec(),
        };
        algorithms
            .into_iter()
            .map(|a| AnyEngine::new(self.config.get_device(), a, self.config.get_parallelism()))
            .collect()
    }

    /// Chooses the engine for `op` on `problem` and says why, without running anything.
    ///
    /// With [`Backend::Auto`] the candidates are the algorithms of
    /// [`Algorithm::default_preference`] for the problem's form, tried in order; a forced
    /// backend is the only candidate. Either way a candidate must support the request and
    /// need at most the memory budget, planned for the threads it will run on. Errors:
    /// [`Error::MemoryBudget`] when some candidate supports the request but none fits,
    /// otherwise the first candidate's own error ([`Error::Unsupported`],
    /// [`Error::BackendUnavailable`]).
    ///
    /// ```
    /// use semicrf::ndarray::Array3;
    /// use semicrf::{Config, Error, Op, Potentials, SemiCrf};
    ///
    /// let scores = Array3::<f64>::zeros((1, 100, 4));
    /// let lengths = [100];
    /// let potentials = Potentials::builder(scores.view(), &lengths, 10).build()?;
    /// let selection = SemiCrf::new().select(&potentials, Op::Backward)?;
    /// println!("{}/{}: {}", selection.device, selection.algorithm, selection.reason);
    ///
    /// let tiny = SemiCrf::with_config(Config::new().memory_budget(16));
    /// assert!(matches!(tiny.select(&potentials, Op::Backward), Err(Error::MemoryBudget { .. })));
    /// # Ok::<(), semicrf::Error>(())
    /// ```
    pub fn select<'a, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
        op: Op,
    ) -> Result<Selection> {
        self.choose(&problem.as_problem(), op).map(|(s, _)| s)
    }

    /// [`SemiCrf::select`]'s choice with the engine itself, for the operations defined in
    /// other files of this crate.
    pub(crate) fn choose_for<F: Scalar>(
        &self,
        problem: &Problem<'_, F>,
        op: Op,
    ) -> Result<(Selection, AnyEngine)> {
        self.choose(problem, op)
    }

    // Without any backend `AnyEngine` has no values: what follows the candidate's removal
    // is unreachable, which is right.
    #[cfg_attr(
        not(any(feature = "cpu", feature = "cuda")),
        allow(unreachable_code, unused_variables)
    )]
    fn choose<F: Scalar>(
        &self,
        problem: &Problem<'_, F>,
        op: Op,
    ) -> Result<(Selection, AnyEngine)> {
        let threads = match self.config.get_device() {
            Device::Cpu => cpu_threads(self.config.get_parallelism()),
            Device::Cuda(_) => 1,
        };
        let query = Query::of(problem, op).with_threads(threads);
        let mut engines = self.candidates(query.form)?;
        let refs: Vec<&dyn EngineInfo> = engines.iter().map(|e| e as &dyn EngineInfo).collect();
        let selection = semicrf_core::select(&refs, &query, self.config.get_memory_budget())?;
        let engine = engines.swap_remove(selection.index);
        Ok((selection, engine))
    }

    /// The `⊕`-sum over all segmentations of every sequence in semiring `S`, `(B)`: the one
    /// generic entry point behind [`SemiCrf::log_partition`] ([`LogSemiring`]) and
    /// [`SemiCrf::entropy`] ([`EntropySemiring`]); the [`MaxSemiring`] gives the Viterbi
    /// scores. A semiring of your own runs here too. A sequence with no finite segmentation
    /// gets `S::zero()`.
    ///
    /// ```
    /// use semicrf::ndarray::Array3;
    /// use semicrf::{MaxSemiring, Potentials, SemiCrf};
    ///
    /// let scores = Array3::<f64>::from_shape_vec((1, 2, 2), vec![1.0, 0.0, 0.0, 3.0])?;
    /// let lengths = [2];
    /// let potentials = Potentials::builder(scores.view(), &lengths, 2).build()?;
    /// assert_eq!(SemiCrf::new().forward::<MaxSemiring, _>(&potentials)?, [4.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forward<'a, S: Semiring, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
    ) -> Result<Vec<S::Value>> {
        let problem = problem.as_problem();
        let (_, engine) = self.choose(&*problem, Op::forward::<S>())?;
        engine.forward::<S>(&*problem)
    }

    /// `log Z_b` of every sequence, `(B)`; `-inf` where no segmentation has a finite score.
    pub fn log_partition<'a, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
    ) -> Result<Vec<f64>> {
        self.forward::<LogSemiring, F>(problem)
    }

    /// The Shannon entropy (in nats) of the posterior distribution over segmentations of
    /// every sequence, `H_b = -Σ_y p(y) log p(y)`, `(B)`: 0 when one segmentation takes all
    /// the mass, `log N` when `N` segmentations are equally likely.
    ///
    /// One forward pass in the [`EntropySemiring`], on whichever engine is chosen. Fails
    /// with [`Error::Infeasible`] naming the first sequence whose log Z is `-inf` (no
    /// segmentation has a finite score, so there is no posterior), as its gradients would.
    ///
    /// ```
    /// use semicrf::ndarray::Array3;
    /// use semicrf::{Potentials, SemiCrf};
    ///
    /// // 3 positions, 2 labels, durations up to 3, all scores equal: 18 segmentations.
    /// let scores = Array3::<f64>::zeros((1, 3, 2));
    /// let lengths = [3];
    /// let potentials = Potentials::builder(scores.view(), &lengths, 3).build()?;
    /// let h = SemiCrf::new().entropy(&potentials)?;
    /// assert!((h[0] - 18f64.ln()).abs() < 1e-12);
    /// # Ok::<(), semicrf::Error>(())
    /// ```
    pub fn entropy<'a, F: Scalar>(&self, problem: &impl AsProblem<'a, F>) -> Result<Vec<f64>> {
        entropies(&self.forward::<EntropySemiring, F>(problem)?)
    }

    /// The best segmentation of every sequence and its score ([`model`] §7; ties prefer the
    /// smaller duration, then the smaller previous label). A sequence without any finite
    /// segmentation gets score `-inf` and no segments.
    pub fn viterbi<'a, F: Scalar>(&self, problem: &impl AsProblem<'a, F>) -> Result<Vec<Decoded>> {
        let problem = problem.as_problem();
        let (_, engine) = self.choose(&*problem, Op::Viterbi)?;
        engine.viterbi(&*problem)
    }

    /// One forward-backward pass: `log Z`, the gradients of `Σ_b upstream[b] · log Z_b` with
    /// respect to every input, and the boundary marginals.
    ///
    /// `upstream` defaults to all ones (the gradient of `Σ_b log Z_b`, i.e. expected counts;
    /// then `grad.scores` holds the position marginals). Fails with [`Error::Upstream`] for an
    /// upstream of the wrong length or with a non-finite value, and [`Error::Infeasible`] when
    /// some `log Z_b = -inf`.
    ///
    /// ```
    /// use semicrf::ndarray::{Array2, Array3};
    /// use semicrf::{Potentials, SemiCrf};
    ///
    /// let scores = Array3::<f64>::zeros((2, 5, 3));
    /// let transition = Array2::<f64>::zeros((3, 3));
    /// let lengths = [5, 3];
    /// let potentials = Potentials::builder(scores.view(), &lengths, 2)
    ///     .transition(transition.view())
    ///     .build()?;
    /// let out = SemiCrf::new().backward(&potentials, Some(&[1.0, 0.0]))?;
    /// let grad_scores = out.grad.scores.unwrap();
    /// assert!(grad_scores.index_axis(semicrf::ndarray::Axis(0), 1).iter().all(|&g| g == 0.0));
    /// # Ok::<(), semicrf::Error>(())
    /// ```
    pub fn backward<'a, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
        upstream: Option<&[f64]>,
    ) -> Result<Backward> {
        let problem = problem.as_problem();
        let batch = problem.shape().batch;
        let ones;
        let upstream = match upstream {
            Some(u) => u,
            None => {
                ones = vec![1.0; batch];
                &ones
            }
        };
        semicrf_core::check_upstream(upstream, batch)?;
        let (_, engine) = self.choose(&*problem, Op::Backward)?;
        engine.backward(&*problem, upstream)
    }

    /// The gradients of `Σ_b log Z_b` with respect to every input (expected counts); the
    /// same as [`SemiCrf::backward`] with no upstream, keeping only the gradients.
    pub fn gradients<'a, F: Scalar>(&self, problem: &impl AsProblem<'a, F>) -> Result<Gradients> {
        self.backward(problem, None).map(|b| b.grad)
    }

    /// Position marginals `(B, T, C)` and boundary marginals `(B, T)` (and, for edge input,
    /// the edge marginals), from one forward-backward pass. For edge input the position
    /// marginals are summed from the edge marginals. Fails with [`Error::Infeasible`] when
    /// some `log Z_b = -inf`.
    pub fn marginals<'a, F: Scalar>(&self, problem: &impl AsProblem<'a, F>) -> Result<Marginals> {
        let problem = problem.as_problem();
        let (selection, engine) = self.choose(&*problem, Op::Backward)?;
        let batch = problem.shape().batch;
        let out = engine.backward(&*problem, &vec![1.0; batch])?;
        let missing = |what: &str| Error::Unsupported {
            backend: format!("{}/{}", selection.device, selection.algorithm),
            what: format!("{what} (its backward returned none)"),
        };
        let (position, edges) = match &*problem {
            Problem::Structured(_) => {
                let position = out
                    .grad
                    .scores
                    .ok_or_else(|| missing("position marginals"))?;
                (position, None)
            }
            Problem::Edges(_) => {
                let edges = out.grad.edges.ok_or_else(|| missing("edge marginals"))?;
                (position_marginals_from_edges(edges.view()), Some(edges))
            }
        };
        Ok(Marginals {
            log_z: out.log_z,
            position,
            boundary: out.boundary_marginals,
            edges,
        })
    }

    /// The negative log-likelihood `log Z_b - score(gold_b)` of one gold segmentation per
    /// sequence, `(B)`.
    ///
    /// Never negative (up to rounding); `+inf` when the gold segmentation has score `-inf`
    /// (it uses something a `-inf` potential forbids). For edge input the gold score of the
    /// first segment sums over the virtual start's sources, as log Z does. Fails with
    /// [`Error::Segmentation`] when `gold` does not hold one valid tiling per sequence.
    ///
    /// ```
    /// use semicrf::ndarray::Array3;
    /// use semicrf::{Potentials, Segment, SemiCrf};
    ///
    /// let scores = Array3::<f64>::zeros((1, 3, 2));
    /// let lengths = [3];
    /// let potentials = Potentials::builder(scores.view(), &lengths, 3).build()?;
    /// // 18 segmentations, all with score 0: NLL = ln 18.
    /// let gold = vec![vec![Segment::new(0, 1, 0), Segment::new(1, 2, 1)]];
    /// let nll = SemiCrf::new().nll(&potentials, &gold)?;
    /// assert!((nll[0] - 18f64.ln()).abs() < 1e-12);
    /// # Ok::<(), semicrf::Error>(())
    /// ```
    pub fn nll<'a, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
        gold: &[Vec<Segment>],
    ) -> Result<Vec<f64>> {
        let problem = problem.as_problem();
        let batch = problem.shape().batch;
        if gold.len() != batch {
            return Err(Error::Segmentation {
                sequence: gold.len().min(batch),
                reason: format!(
                    "{} gold segmentations given, expected one per sequence (B = {batch})",
                    gold.len()
                ),
            });
        }
        let gold_scores = gold
            .iter()
            .enumerate()
            .map(|(b, segs)| match &*problem {
                Problem::Structured(p) => gold_score(p, b, segs),
                Problem::Edges(p) => gold_score_edges::<semicrf_core::LogSemiring, F>(p, b, segs),
            })
            .collect::<Result<Vec<f64>>>()?;
        let log_z = self.log_partition(&*problem)?;
        Ok(log_z
            .iter()
            .zip(&gold_scores)
            .map(|(&z, &g)| {
                if g == f64::NEG_INFINITY {
                    f64::INFINITY
                } else {
                    z - g
                }
            })
            .collect())
    }
}

/// The README's Rust examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_parse_back() {
        for b in Backend::ALL {
            assert_eq!(b.name().parse::<Backend>().unwrap(), b);
        }
        assert!(matches!(
            "fast".parse::<Backend>(),
            Err(Error::BackendUnavailable { .. })
        ));
    }

    #[cfg(not(feature = "cpu"))]
    #[test]
    fn without_the_cpu_feature_a_cpu_request_is_unavailable_not_a_panic() {
        let scores = ndarray::Array3::<f64>::zeros((1, 3, 2));
        let lengths = [3];
        let problem: Problem<f64> = Potentials::builder(scores.view(), &lengths, 2)
            .build()
            .unwrap()
            .into();
        for backend in Backend::ALL {
            let crf = SemiCrf::with_config(Config::new().backend(backend));
            match crf.log_partition(&problem) {
                Err(Error::BackendUnavailable { backend, reason }) => {
                    assert!(backend.starts_with("cpu/"), "{backend}");
                    assert!(reason.contains("without the `cpu` feature"), "{reason}");
                }
                other => panic!("{backend:?}: {other:?}"),
            }
            assert!(crf.entropy(&problem).is_err());
        }
    }

    #[test]
    fn the_default_config_is_auto_on_the_cpu_with_two_gib() {
        let c = Config::default();
        assert_eq!(c.get_backend(), Backend::Auto);
        assert_eq!(c.get_device(), Device::Cpu);
        assert_eq!(c.get_memory_budget(), 2 * 1024 * 1024 * 1024);
        assert_eq!(c.get_parallelism(), Parallelism::Rayon);
    }
}
