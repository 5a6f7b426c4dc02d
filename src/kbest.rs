//! k-best and posterior decoding on [`SemiCrf`] (model §7), and [`KBest`] for
//! [`AnyEngine`].

use semicrf_core::{
    Decoded, Device, KBest, Op, PosteriorProblem, Problem, Query, Result, Scalar, Selection,
    select_with,
};

use crate::any_engine::cpu_threads;
use crate::{AnyEngine, AsProblem, SemiCrf};

// Without any backend the enum has no variants: every method is an empty match.
#[cfg_attr(not(any(feature = "cpu", feature = "cuda")), allow(unused_variables))]
impl<F: Scalar> KBest<F> for AnyEngine {
    /// Each engine's own k best: the CPU engines', and the CUDA streaming engine's kernel
    /// (`k` up to `semicrf_cuda::KBEST_MAX_K`).
    fn kbest(&self, problem: &Problem<'_, F>, k: usize) -> Result<Vec<Vec<Decoded>>> {
        match *self {
            #[cfg(feature = "cpu")]
            AnyEngine::Exact(ref e) => e.kbest(problem, k),
            #[cfg(feature = "cpu")]
            AnyEngine::Scan(ref e) => e.kbest(problem, k),
            #[cfg(feature = "cpu")]
            AnyEngine::Streaming(ref e) => e.kbest(problem, k),
            #[cfg(feature = "cuda")]
            AnyEngine::Cuda(ref e) => e.kbest(problem, k),
        }
    }
    fn kbest_memory_required(&self, query: &Query, k: usize) -> Result<u64> {
        match *self {
            #[cfg(feature = "cpu")]
            AnyEngine::Exact(ref e) => KBest::<F>::kbest_memory_required(e, query, k),
            #[cfg(feature = "cpu")]
            AnyEngine::Scan(ref e) => KBest::<F>::kbest_memory_required(e, query, k),
            #[cfg(feature = "cpu")]
            AnyEngine::Streaming(ref e) => KBest::<F>::kbest_memory_required(e, query, k),
            #[cfg(feature = "cuda")]
            AnyEngine::Cuda(ref e) => KBest::<F>::kbest_memory_required(e, query, k),
        }
    }
}

impl SemiCrf {
    /// Chooses the engine of [`SemiCrf::kbest`] with `k` on `problem`, as
    /// [`SemiCrf::select`] does for the other operations: the candidates in preference
    /// order, the first that supports k best with its
    /// [`kbest_memory_required`](KBest::kbest_memory_required) within the memory budget.
    pub fn select_kbest<'a, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
        k: usize,
    ) -> Result<Selection> {
        self.choose_kbest(&problem.as_problem(), k).map(|(s, _)| s)
    }

    // Without any backend `AnyEngine` has no values and the loop never runs.
    #[cfg_attr(
        not(any(feature = "cpu", feature = "cuda")),
        allow(unreachable_code, unused_variables, unused_mut)
    )]
    fn choose_kbest<F: Scalar>(
        &self,
        problem: &Problem<'_, F>,
        k: usize,
    ) -> Result<(Selection, AnyEngine)> {
        let threads = match self.config.get_device() {
            Device::Cpu => cpu_threads(self.config.get_parallelism()),
            Device::Cuda(_) => 1,
        };
        let query = Query::of(problem, Op::Viterbi).with_threads(threads);
        let budget = self.config.get_memory_budget();
        let mut candidates = self.candidates(query.form)?;
        let refs: Vec<&AnyEngine> = candidates.iter().collect();
        let required = |e: &AnyEngine| KBest::<F>::kbest_memory_required(e, &query, k);
        let selection = select_with(&refs, &query, budget, required, &format!(" with k = {k}"))?;
        // The index is that of one of `candidates`.
        let engine = candidates.swap_remove(selection.index);
        Ok((selection, engine))
    }

    /// The `k` highest-scoring distinct segmentations of every sequence, best first, each
    /// with its score ([`model`](crate::model) §7, "k best"): fewer where fewer have a
    /// finite score, none for an infeasible sequence. Ties (exactly equal scores) compare
    /// the segments from the last one backwards, the smaller label, then the smaller
    /// duration, so the first of each list is [`SemiCrf::viterbi`]'s decoding.
    ///
    /// Runs on the CPU engines (exact, scan, streaming; [`SemiCrf::select_kbest`] picks one
    /// within the memory budget), each holding up to `(L + 1)·C·k` entries of 16 bytes per
    /// sequence in flight, and on a CUDA device's streaming engine for structured input with
    /// `k` up to 1024 (a larger `k` is [`Error::Unsupported`](crate::Error::Unsupported)),
    /// which holds `B·T·C·k` entries of 16 bytes on the device, and gives the same lists,
    /// ties included. `k = 0` gives empty lists on every engine.
    ///
    /// ```
    /// use semicrf::ndarray::Array3;
    /// use semicrf::{Potentials, Segment, SemiCrf};
    ///
    /// let scores = Array3::<f64>::from_shape_vec((1, 2, 2), vec![1.0, 0.0, 0.0, 2.0])?;
    /// let lengths = [2];
    /// let potentials = Potentials::builder(scores.view(), &lengths, 2).build()?;
    /// let best = SemiCrf::new().kbest(&potentials, 10)?;
    /// assert_eq!(best[0].len(), 6); // all 6 segmentations, best first
    /// assert_eq!(best[0][0].score, 3.0);
    /// assert_eq!(best[0][0].segments, [Segment::new(0, 1, 0), Segment::new(1, 1, 1)]);
    /// assert!(best[0].windows(2).all(|w| w[0].score >= w[1].score));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kbest<'a, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
        k: usize,
    ) -> Result<Vec<Vec<Decoded>>> {
        let problem = problem.as_problem();
        let (_, engine) = self.choose_kbest(&problem, k)?;
        engine.kbest(&problem, k)
    }

    /// The posterior decoding of every sequence: the segmentation that maximises the
    /// expected number of correctly labelled positions under the posterior, with that
    /// expectation as its score ([`model`](crate::model) §7, "Posterior decoding").
    ///
    /// One backward pass (position marginals) and one Viterbi pass over the derived problem
    /// ([`PosteriorProblem`]), each on the engine chosen for it, on any device. Fails with
    /// [`Error::Infeasible`](crate::Error::Infeasible) when some `log Z_b = -inf` (no posterior).
    ///
    /// ```
    /// use semicrf::ndarray::Array3;
    /// use semicrf::{Potentials, Segment, SemiCrf};
    ///
    /// // Position 1 is label 0 or 1 about equally; Viterbi and posterior decoding may differ.
    /// let scores = Array3::<f64>::from_shape_vec((1, 3, 2), vec![2., 0., 0., 0.1, 2., 0.])?;
    /// let lengths = [3];
    /// let potentials = Potentials::builder(scores.view(), &lengths, 3).build()?;
    /// let best = SemiCrf::new().posterior_decode(&potentials)?;
    /// assert_eq!(best[0].segments.iter().map(|s| s.duration).sum::<usize>(), 3);
    /// assert!(best[0].score > 1.5 && best[0].score <= 3.0); // expected correct positions
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn posterior_decode<'a, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
    ) -> Result<Vec<Decoded>> {
        let problem = problem.as_problem();
        let backward = self.backward(&*problem, None)?;
        let derived = PosteriorProblem::new(&problem, &backward)?;
        self.viterbi(&derived.view()?)
    }
}
