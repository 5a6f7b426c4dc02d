//! [`SemiCrf`] on problems whose position-wise potentials come from a [`PotentialSource`]
//! ([`StreamedPotentials`]): the streaming algorithm reads them chunk by chunk and never
//! holds a `(B, T, C)` array in host memory (model §11). On the CPU (the default device)
//! nothing of size `T·C` is held at all; with `Device::Cuda(n)` (feature `cuda`) the rows go
//! to the GPU chunk by chunk and the device holds the whole position tensors, as for arrays.

use semicrf_core::{
    Decoded, EntropySemiring, Error, GradientSink, LogSemiring, Op, PotentialSource, Result,
    Scalar, Semiring, StreamedBackward, StreamedPotentials, entropies,
};

#[cfg(any(feature = "cpu", feature = "cuda"))]
use semicrf_core::SourceEngine;

use crate::{Backend, Device, SemiCrf};

/// The engine that takes a streamed problem: the streaming algorithm on the CPU or on a CUDA
/// device (without either backend the enum has no variants, so no value of it exists).
enum SourceChoice {
    #[cfg(feature = "cpu")]
    Cpu(semicrf_cpu::StreamingEngine),
    #[cfg(feature = "cuda")]
    Cuda(semicrf_cuda::CudaEngine),
}

/// Evaluates `$body` with `$e` bound to the engine inside a [`SourceChoice`].
#[cfg(any(feature = "cpu", feature = "cuda"))]
macro_rules! on_source {
    ($chosen:expr, |$e:ident| $body:expr) => {
        match $chosen {
            #[cfg(feature = "cpu")]
            SourceChoice::Cpu($e) => $body,
            #[cfg(feature = "cuda")]
            SourceChoice::Cuda($e) => $body,
        }
    };
}

#[cfg(not(any(feature = "cpu", feature = "cuda")))]
macro_rules! on_source {
    ($chosen:expr, |$e:ident| $body:expr) => {
        match *$chosen {}
    };
}

#[cfg_attr(
    not(any(feature = "cpu", feature = "cuda")),
    allow(unused_variables, clippy::needless_pass_by_ref_mut)
)]
impl SourceChoice {
    fn forward_streamed<S: Semiring, F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<S::Value>> {
        on_source!(self, |e| e.forward_streamed::<S, P>(problem))
    }

    fn viterbi_streamed<F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<Decoded>> {
        on_source!(self, |e| e.viterbi_streamed(problem))
    }

    fn backward_streamed<F: Scalar, P: PotentialSource<F> + ?Sized, G: GradientSink + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
        upstream: &[f64],
        sink: &G,
    ) -> Result<StreamedBackward> {
        on_source!(self, |e| e.backward_streamed(problem, upstream, sink))
    }
}

impl SemiCrf {
    /// The engine for a streamed problem: the streaming algorithm on the configured device
    /// (the CPU, or `Device::Cuda(n)` with the `cuda` feature), within the memory budget
    /// ([`semicrf_core::SourceEngine::memory_required_streamed`]: host bytes on the CPU,
    /// device bytes on CUDA).
    fn source_engine<F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
        op: Op,
    ) -> Result<SourceChoice> {
        let c = &self.config;
        let device = c.get_device();
        match c.get_backend() {
            Backend::Auto | Backend::Streaming => {}
            b => {
                let on = match device {
                    Device::Cpu => "cpu".to_string(),
                    Device::Cuda(_) => "cuda".to_string(),
                };
                return Err(Error::Unsupported {
                    backend: format!("{on}/{}", b.name()),
                    what: "a potentials source (only streaming reads one)".into(),
                });
            }
        }
        let query = semicrf_core::Query {
            shape: problem.shape(),
            form: problem.form(),
            op,
            dtype_bytes: F::BYTES,
            threads: match device {
                Device::Cpu => crate::any_engine::cpu_threads(c.get_parallelism()),
                Device::Cuda(_) => 1,
            },
        };
        let budget = |required: u64| {
            if required > c.get_memory_budget() {
                return Err(Error::MemoryBudget {
                    required,
                    budget: c.get_memory_budget(),
                    algorithm: "streaming".into(),
                });
            }
            Ok(())
        };
        match device {
            Device::Cpu => cpu_source::<F>(c.get_parallelism(), &query, budget),
            Device::Cuda(ordinal) => {
                cuda_source::<F>(ordinal, c.get_viterbi_pieces(), &query, budget)
            }
        }
    }

    /// [`SemiCrf::forward`] on a streamed problem: the rows are asked of the source chunk by
    /// chunk, in `O(K·C)` memory per sequence on the CPU (on CUDA, `O(chunk)` on the host and
    /// the position tensors on the device).
    pub fn forward_streamed<S: Semiring, F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<S::Value>> {
        self.source_engine(problem, Op::forward::<S>())?
            .forward_streamed::<S, F, P>(problem)
    }

    /// `log Z_b` of every sequence of a streamed problem ([`SemiCrf::log_partition`]).
    ///
    /// ```
    /// use semicrf::{PotentialSource, Result, SemiCrf, SourceRows, StreamedPotentials};
    ///
    /// /// 200 000 positions, scored on the fly: no `(T, C)` array is ever built.
    /// struct Wave;
    ///
    /// impl PotentialSource<f32> for Wave {
    ///     fn lengths(&self) -> &[usize] { &[200_000] }
    ///     fn labels(&self) -> usize { 2 }
    ///     fn fill(&self, _b: usize, t0: usize, rows: SourceRows<'_, f32>) -> Result<()> {
    ///         for (n, x) in rows.scores.iter_mut().enumerate() {
    ///             let (t, c) = (t0 + n / 2, n % 2);
    ///             *x = if (t / 1000 + c) % 2 == 0 { 1.0 } else { -1.0 };
    ///         }
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let problem = StreamedPotentials::builder(&Wave, 8).build()?;
    /// let crf = SemiCrf::new();
    /// let log_z = crf.log_partition_streamed(&problem)?;
    /// let best = crf.viterbi_streamed(&problem)?;
    /// assert!(best[0].score <= log_z[0]);
    /// assert_eq!(best[0].segments.last().map(|s| s.start + s.duration), Some(200_000));
    /// # Ok::<(), semicrf::Error>(())
    /// ```
    pub fn log_partition_streamed<F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<f64>> {
        self.forward_streamed::<LogSemiring, F, P>(problem)
    }

    /// The posterior entropy of every sequence of a streamed problem ([`SemiCrf::entropy`]).
    pub fn entropy_streamed<F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<f64>> {
        entropies(&self.forward_streamed::<EntropySemiring, F, P>(problem)?)
    }

    /// The best segmentation of every sequence of a streamed problem ([`SemiCrf::viterbi`]),
    /// with checkpoints instead of backpointers: `O(K·C + sqrt(T·K)·C)` memory per
    /// sequence besides the segments returned, and the same segments as
    /// [`SemiCrf::viterbi`] on the same values, ties included.
    pub fn viterbi_streamed<F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<Decoded>> {
        self.source_engine(problem, Op::Viterbi)?
            .viterbi_streamed(problem)
    }

    /// log Z and the gradients of `Σ_b upstream[b] · log Z_b` of a streamed problem
    /// ([`SemiCrf::backward`]): the shared parameters' gradients are returned, the
    /// position-wise ones (and the boundary marginals) are delivered to `sink` chunk by chunk,
    /// last rows first ([`GradientArrays`](crate::GradientArrays) collects them into
    /// arrays).
    ///
    /// ```
    /// use semicrf::ndarray::Array3;
    /// use semicrf::{GradientArrays, PotentialSource, Potentials, SemiCrf, StreamedPotentials};
    ///
    /// let scores = Array3::<f64>::from_elem((1, 50, 3), 0.5);
    /// let lengths = [50];
    /// let arrays = Potentials::builder(scores.view(), &lengths, 6).build()?;
    /// let problem = StreamedPotentials::of(&arrays);
    /// let sink = GradientArrays::new(problem.shape(), false, false);
    /// let crf = SemiCrf::new();
    /// let bw = crf.backward_streamed(&problem, &[1.0], &sink)?;
    /// let (position, _, _, boundary) = sink.into_arrays();
    /// assert_eq!(bw.log_z, crf.log_partition(&arrays)?);
    /// assert!((position.sum() - 50.0).abs() < 1e-9); // one label per position
    /// assert!((boundary[[0, 0]] - 1.0).abs() < 1e-12);
    /// # Ok::<(), semicrf::Error>(())
    /// ```
    pub fn backward_streamed<
        F: Scalar,
        P: PotentialSource<F> + ?Sized,
        G: GradientSink + ?Sized,
    >(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
        upstream: &[f64],
        sink: &G,
    ) -> Result<StreamedBackward> {
        self.source_engine(problem, Op::Backward)?
            .backward_streamed(problem, upstream, sink)
    }
}

/// The CPU streaming engine for `query`, within `budget`.
#[cfg(feature = "cpu")]
fn cpu_source<F: Scalar>(
    parallelism: semicrf_core::Parallelism,
    query: &semicrf_core::Query,
    budget: impl Fn(u64) -> Result<()>,
) -> Result<SourceChoice> {
    let engine = semicrf_cpu::StreamingEngine::new().parallelism(parallelism);
    budget(SourceEngine::<F>::memory_required_streamed(&engine, query)?)?;
    Ok(SourceChoice::Cpu(engine))
}

/// The same signature as with the feature, so that one call serves both.
#[cfg(not(feature = "cpu"))]
#[allow(clippy::extra_unused_type_parameters)]
fn cpu_source<F: Scalar>(
    _parallelism: semicrf_core::Parallelism,
    _query: &semicrf_core::Query,
    _budget: impl Fn(u64) -> Result<()>,
) -> Result<SourceChoice> {
    Err(Error::BackendUnavailable {
        backend: "cpu/streaming".into(),
        reason: "semicrf was built without the `cpu` feature".into(),
    })
}

/// The CUDA streaming engine on device `ordinal` for `query`, within `budget` and the
/// device's free memory.
#[cfg(feature = "cuda")]
fn cuda_source<F: Scalar>(
    ordinal: usize,
    pieces: Option<(usize, usize)>,
    query: &semicrf_core::Query,
    budget: impl Fn(u64) -> Result<()>,
) -> Result<SourceChoice> {
    use semicrf_core::EngineInfo;
    let mut engine = semicrf_cuda::CudaEngine::new(semicrf_core::Algorithm::Streaming, ordinal);
    if let Some((n, overlap)) = pieces {
        engine = engine.viterbi_pieces(n, overlap);
    }
    budget(SourceEngine::<F>::memory_required_streamed(&engine, query)?)?;
    engine.check(query)?;
    Ok(SourceChoice::Cuda(engine))
}

/// The same signature as with the feature, so that one call serves both.
#[cfg(not(feature = "cuda"))]
#[allow(clippy::extra_unused_type_parameters)]
fn cuda_source<F: Scalar>(
    _ordinal: usize,
    _pieces: Option<(usize, usize)>,
    _query: &semicrf_core::Query,
    _budget: impl Fn(u64) -> Result<()>,
) -> Result<SourceChoice> {
    Err(Error::BackendUnavailable {
        backend: "cuda/streaming".into(),
        reason: "semicrf was built without the `cuda` feature".into(),
    })
}
