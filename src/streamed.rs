//! [`SemiCrf`] on problems whose position-wise potentials come from a [`PotentialSource`]
//! ([`StreamedPotentials`]): the streaming algorithm reads them chunk by chunk and never
//! holds a `(B, T, C)` array (model §11).

use semicrf_core::{
    Decoded, EntropySemiring, Error, GradientSink, LogSemiring, Op, PotentialSource, Result,
    Scalar, Semiring, StreamedBackward, StreamedPotentials, entropies,
};

#[cfg(feature = "cpu")]
use semicrf_core::SourceEngine;

use crate::SemiCrf;

impl SemiCrf {
    /// The engine for a streamed problem: the streaming algorithm on the CPU, within the
    /// memory budget ([`semicrf_core::SourceEngine::memory_required_streamed`]).
    #[cfg(feature = "cpu")]
    fn source_engine<F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
        op: Op,
    ) -> Result<semicrf_cpu::StreamingEngine> {
        use crate::{Backend, Device};
        let c = &self.config;
        match (c.get_device(), c.get_backend()) {
            (Device::Cpu, Backend::Auto | Backend::Streaming) => {}
            (Device::Cpu, b) => {
                return Err(Error::Unsupported {
                    backend: format!("cpu/{}", b.name()),
                    what: "a potentials source (only streaming reads one)".into(),
                });
            }
            (Device::Cuda(_), _) => {
                return Err(Error::Unsupported {
                    backend: "cuda/streaming".into(),
                    what: "a potentials source (on the CPU only, for now)".into(),
                });
            }
        }
        let engine = semicrf_cpu::StreamingEngine::new().parallelism(c.get_parallelism());
        let query = semicrf_core::Query {
            shape: problem.shape(),
            form: problem.form(),
            op,
            dtype_bytes: F::BYTES,
            threads: semicrf_cpu::threads(c.get_parallelism()),
        };
        let required = <semicrf_cpu::StreamingEngine as SourceEngine<F>>::memory_required_streamed(
            &engine, &query,
        )?;
        if required > c.get_memory_budget() {
            return Err(Error::MemoryBudget {
                required,
                budget: c.get_memory_budget(),
                algorithm: "streaming".into(),
            });
        }
        Ok(engine)
    }

    #[cfg(not(feature = "cpu"))]
    fn source_engine<F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        _problem: &StreamedPotentials<'_, F, P>,
        _op: Op,
    ) -> Result<Unavailable<F>> {
        Err(Error::BackendUnavailable {
            backend: "cpu/streaming".into(),
            reason: "semicrf was built without the `cpu` feature".into(),
        })
    }

    /// [`SemiCrf::forward`] on a streamed problem: the rows are asked of the source chunk by
    /// chunk, in `O(K·C)` memory per sequence.
    pub fn forward_streamed<S: Semiring, F: Scalar, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<S::Value>> {
        self.source_engine(problem, Op::forward::<S>())?
            .forward_streamed::<S, P>(problem)
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

/// What `SemiCrf::source_engine` returns without a CPU backend: nothing runs.
#[cfg(not(feature = "cpu"))]
struct Unavailable<F>(core::convert::Infallible, core::marker::PhantomData<F>);

#[cfg(not(feature = "cpu"))]
impl<F: Scalar> Unavailable<F> {
    fn forward_streamed<S: Semiring, P: ?Sized>(
        &self,
        _: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<S::Value>> {
        match self.0 {}
    }
    fn viterbi_streamed<P: ?Sized>(
        &self,
        _: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<Decoded>> {
        match self.0 {}
    }
    fn backward_streamed<P: ?Sized, G: ?Sized>(
        &self,
        _: &StreamedPotentials<'_, F, P>,
        _: &[f64],
        _: &G,
    ) -> Result<StreamedBackward> {
        match self.0 {}
    }
}
