//! Partially labelled sequences ([`model`](crate::model) §13): `log Z` over the segmentations
//! that agree with an annotation, and the partial NLL with its gradients.

use ndarray::ArrayView2;
use semicrf_core::partial::{gradient_difference, partial_nll, restrict, restricted_problem};
use semicrf_core::{Gradients, Result, Scalar};

use crate::{AsProblem, SemiCrf};

/// The partial NLL of a batch and its gradients ([`SemiCrf::partial_nll_backward`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PartialBackward {
    /// `NLL_partial_b = log Z_b - log Z_partial_b`, `(B)`.
    pub nll: Vec<f64>,
    /// `log Z_b`, `(B)`.
    pub log_z: Vec<f64>,
    /// `log Z_partial_b`, `(B)`.
    pub log_z_partial: Vec<f64>,
    /// The gradients of `Σ_b upstream[b] · NLL_partial_b` with respect to every input (the
    /// fields of [`SemiCrf::backward`]'s).
    pub grad: Gradients,
}

impl SemiCrf {
    /// `log Z_partial_b`, `(B)`: the log-sum-exp of the scores of the segmentations of
    /// sequence `b` that agree with the annotation `partial_labels` `(B, T)` (a label index,
    /// or `-1` for unknown, per position; entries past a sequence's length are ignored).
    /// `-inf` where no agreeing segmentation has a finite score.
    ///
    /// The restricted problem is the same problem with `-inf` scores at every annotated
    /// position for every other label (for edge input, `-inf` edges for every segment that
    /// covers such a position), run on whichever engine is chosen for it. A bad annotation
    /// (wrong shape, an entry below `-1` or `>= C`) is [`Error::Shape`](crate::Error::Shape) or
    /// [`Error::Segmentation`](crate::Error::Segmentation).
    ///
    /// ```
    /// use semicrf::ndarray::{array, Array3};
    /// use semicrf::{Potentials, SemiCrf};
    ///
    /// // 3 positions, 2 labels, durations up to 3, all scores 0: 18 segmentations.
    /// let scores = Array3::<f64>::zeros((1, 3, 2));
    /// let lengths = [3];
    /// let potentials = Potentials::builder(scores.view(), &lengths, 3).build()?;
    /// let crf = SemiCrf::new();
    /// // Position 0 has label 1, the others are unknown: 9 segmentations agree.
    /// let annotation = array![[1i64, -1, -1]];
    /// let z = crf.log_partition_partial(&potentials, annotation.view())?;
    /// assert!((z[0] - 9f64.ln()).abs() < 1e-12);
    /// // Every position annotated: the runs 1, 0, 0 can be cut in 2 ways.
    /// let full = array![[1i64, 0, 0]];
    /// let z = crf.log_partition_partial(&potentials, full.view())?;
    /// assert!((z[0] - 2f64.ln()).abs() < 1e-12);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn log_partition_partial<'a, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
        partial_labels: ArrayView2<'_, i64>,
    ) -> Result<Vec<f64>> {
        let problem = problem.as_problem();
        let restricted = restrict(&problem, partial_labels)?;
        self.log_partition(&restricted_problem(&problem, &restricted)?)
    }

    /// The NLL of partially labelled sequences, `log Z_b - log Z_partial_b`, `(B)`: never
    /// negative (up to rounding), 0 when the annotation admits every segmentation, `+inf`
    /// where no agreeing segmentation has a finite score (`log Z_partial = -inf`). Fails with
    /// [`Error::Infeasible`](crate::Error::Infeasible) where `log Z = -inf` itself (no
    /// posterior at all).
    ///
    /// ```
    /// use semicrf::ndarray::{array, Array3};
    /// use semicrf::{Potentials, SemiCrf};
    ///
    /// let scores = Array3::<f64>::zeros((1, 3, 2));
    /// let lengths = [3];
    /// let potentials = Potentials::builder(scores.view(), &lengths, 3).build()?;
    /// let nll = SemiCrf::new().partial_nll(&potentials, array![[1i64, -1, -1]].view())?;
    /// assert!((nll[0] - 2f64.ln()).abs() < 1e-12); // 18 segmentations, 9 agree
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn partial_nll<'a, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
        partial_labels: ArrayView2<'_, i64>,
    ) -> Result<Vec<f64>> {
        let problem = problem.as_problem();
        let restricted = restrict(&problem, partial_labels)?;
        let log_z_partial = self.log_partition(&restricted_problem(&problem, &restricted)?)?;
        let log_z = self.log_partition(&*problem)?;
        partial_nll(&log_z, &log_z_partial)
    }

    /// The partial NLL and the gradients of `Σ_b upstream[b] · NLL_partial_b` with respect to
    /// every input: the expected counts under the posterior minus those under the posterior
    /// restricted to the agreeing segmentations (two backward passes). `upstream` defaults
    /// to ones. Gradients are undefined where `log Z_partial = -inf` (the NLL is `+inf`):
    /// that is [`Error::Infeasible`](crate::Error::Infeasible) naming the sequence.
    ///
    /// ```
    /// use semicrf::ndarray::{array, Array3};
    /// use semicrf::{Potentials, SemiCrf};
    ///
    /// let scores = Array3::<f64>::zeros((1, 3, 2));
    /// let lengths = [3];
    /// let potentials = Potentials::builder(scores.view(), &lengths, 3).build()?;
    /// let out = SemiCrf::new()
    ///     .partial_nll_backward(&potentials, array![[1i64, -1, -1]].view(), None)?;
    /// let g = out.grad.scores.unwrap();
    /// // Raising the annotated label's score at position 0 lowers the NLL.
    /// assert!(g[[0, 0, 1]] < 0.0 && g[[0, 0, 0]] > 0.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn partial_nll_backward<'a, F: Scalar>(
        &self,
        problem: &impl AsProblem<'a, F>,
        partial_labels: ArrayView2<'_, i64>,
        upstream: Option<&[f64]>,
    ) -> Result<PartialBackward> {
        let problem = problem.as_problem();
        let restricted = restrict(&problem, partial_labels)?;
        let part = self.backward(&restricted_problem(&problem, &restricted)?, upstream)?;
        let full = self.backward(&*problem, upstream)?;
        Ok(PartialBackward {
            nll: partial_nll(&full.log_z, &part.log_z)?,
            grad: gradient_difference(&full.grad, &part.grad),
            log_z: full.log_z,
            log_z_partial: part.log_z,
        })
    }
}
