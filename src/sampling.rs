//! Exact samples from the posterior over segmentations ([`model`](crate::model) §12).

use semicrf_core::{Error, Op, Problem, Result, Sampler, Samples, Scalar};

use crate::{AnyEngine, AsProblem, SemiCrf};

/// Every engine samples: the CPU engines, and the CUDA streaming engine (forward values on
/// the device, draws on the host).
#[cfg_attr(not(any(feature = "cpu", feature = "cuda")), allow(unused_variables))]
impl<F: Scalar> Sampler<F> for AnyEngine {
    fn sample(&self, problem: &Problem<'_, F>, n: usize, seed: u64) -> Result<Samples> {
        match self {
            #[cfg(feature = "cpu")]
            AnyEngine::Exact(e) => e.sample(problem, n, seed),
            #[cfg(feature = "cpu")]
            AnyEngine::Scan(e) => e.sample(problem, n, seed),
            #[cfg(feature = "cpu")]
            AnyEngine::Streaming(e) => e.sample(problem, n, seed),
            #[cfg(feature = "cuda")]
            AnyEngine::Cuda(e) => e.sample(problem, n, seed),
            #[allow(unreachable_patterns)]
            _ => Err(Error::BackendUnavailable {
                backend: "sampler".into(),
                reason: "no engine is compiled in".into(),
            }),
        }
    }
}

impl SemiCrf {
    /// `n` exact, independent samples from the posterior over the segmentations of every
    /// sequence, `p(y) = exp(score(y) - log Z_b)` (forward filtering, backward sampling):
    /// `samples[b][i]` is the `i`-th segmentation of sequence `b`, its segments in order.
    ///
    /// Reproducible: the same `seed` gives the same samples on any number of threads
    /// (sample `i` of sequence `b` draws from its own generator keyed by `(seed, b, i)`,
    /// [`sample_rng`](crate::sample::sample_rng)); exact and scan give the same samples, and
    /// so do streaming and CUDA except where rounding decides between two choices. The
    /// engine is chosen as for a backward pass, whose memory is of the same order (the
    /// streaming engine recomputes one block of forward values at a time from checkpoints,
    /// `O(K·C + sqrt(T·K)·C)` per sequence; on a CUDA device the forward values of every
    /// position, `16·(T+1)·C` bytes per sequence on the device and the host:
    /// [`model`](crate::model) §12). Fails with [`Error::Infeasible`] naming a sequence
    /// without a finite segmentation.
    ///
    /// ```
    /// use semicrf::ndarray::{array, Array3};
    /// use semicrf::{Potentials, SemiCrf};
    ///
    /// let scores = Array3::from_shape_vec((1, 4, 2), vec![2.0, 0.0, 2.0, 0.0, 0.0, 1.0, 0.0, 1.0])?;
    /// let lengths = [4];
    /// let potentials = Potentials::builder(scores.view(), &lengths, 3).build()?;
    /// let crf = SemiCrf::new();
    /// let samples = crf.sample(&potentials, 100, 42)?;
    /// assert_eq!(samples[0].len(), 100);
    /// // Every sample tiles the sequence, and the seed reproduces them.
    /// assert!(samples[0].iter().all(|y| y.iter().map(|s| s.duration).sum::<usize>() == 4));
    /// assert_eq!(crf.sample(&potentials, 100, 42)?, samples);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample<'a, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
        n: usize,
        seed: u64,
    ) -> Result<Samples> {
        let problem = problem.as_problem();
        let (_, engine) = self.choose_for(&problem, Op::Backward)?;
        engine.sample(&problem, n, seed)
    }
}
