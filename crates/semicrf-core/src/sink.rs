//! The other end of streamed problems: the gradients of the position-wise tensors delivered
//! chunk by chunk to a [`GradientSink`], and the engine trait that takes a
//! [`PotentialSource`] ([`SourceEngine`]). See the model page, §11.

use std::sync::Mutex;

use ndarray::{Array2, Array3, Axis, Slice};

use crate::{
    Decoded, EngineInfo, Gradients, PotentialSource, Query, Result, Scalar, Semiring, Shape,
    StreamedPotentials,
};

/// Rows `[t0, t0 + n)` of one sequence's position-wise gradients, row-major, as an engine
/// delivers them to a [`GradientSink`].
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct GradientRows<'r> {
    /// `(n, C)`: `g_b ×` the position marginals (the gradient of the scores).
    pub scores: &'r [f64],
    /// `(n, C)`: `g_b ×` P(a segment of label `c` starts at `t`), when the source has a
    /// begin boundary.
    pub begin_boundary: Option<&'r [f64]>,
    /// `(n, C)`: `g_b ×` P(a segment of label `c` ends at `t`), when the source has an end
    /// boundary.
    pub end_boundary: Option<&'r [f64]>,
    /// `(n)`: P(a segment starts at `t`), not scaled.
    pub boundary_marginals: &'r [f64],
}

/// Where a streamed backward pass puts the gradients of the position-wise tensors, chunk by
/// chunk, instead of `(B, T, C)` arrays.
///
/// **Contract.** [`GradientSink::put`] is called from any thread (one sequence at a time per
/// call, several sequences at once), for every row `t < L_b` of every sequence exactly once,
/// in chunks of the engine's choosing; a sequence's chunks come from its last rows to its
/// first. An error returned ends the pass and is passed on. [`GradientArrays`] fills arrays.
pub trait GradientSink: Sync {
    /// Takes rows `[t0, t0 + n)` of sequence `sequence`.
    fn put(&self, sequence: usize, t0: usize, rows: GradientRows<'_>) -> Result<()>;
}

/// A [`GradientSink`] that fills `(B, T, C)` and `(B, T)` arrays (zeros past each length),
/// the layout of [`Backward`](crate::Backward).
///
/// ```
/// use semicrf_core::{GradientArrays, GradientRows, GradientSink, Shape};
///
/// let sink = GradientArrays::new(Shape::new(1, 2, 2, 1), false, false);
/// let rows = GradientRows::new(&[0.25], None, None, &[1.0]);
/// sink.put(0, 1, rows)?;
/// let (scores, _, _, bm) = sink.into_arrays();
/// assert_eq!((scores[[0, 1, 0]], bm[[0, 1]]), (0.25, 1.0));
/// # Ok::<(), semicrf_core::Error>(())
/// ```
#[derive(Debug)]
pub struct GradientArrays {
    inner: Mutex<Arrays>,
}

#[derive(Debug)]
struct Arrays {
    scores: Array3<f64>,
    begin_boundary: Option<Array3<f64>>,
    end_boundary: Option<Array3<f64>>,
    boundary_marginals: Array2<f64>,
}

/// The gradient arrays of a batch: scores, begin and end boundaries (when asked) and the
/// boundary marginals.
pub type GradientArraysParts = (
    Array3<f64>,
    Option<Array3<f64>>,
    Option<Array3<f64>>,
    Array2<f64>,
);

impl<'r> GradientRows<'r> {
    /// Rows from their slices (see the fields).
    pub fn new(
        scores: &'r [f64],
        begin_boundary: Option<&'r [f64]>,
        end_boundary: Option<&'r [f64]>,
        boundary_marginals: &'r [f64],
    ) -> Self {
        GradientRows {
            scores,
            begin_boundary,
            end_boundary,
            boundary_marginals,
        }
    }
}

impl GradientArrays {
    /// Zeroed arrays for `shape`, with begin and end boundaries when asked.
    pub fn new(shape: Shape, begin_boundary: bool, end_boundary: bool) -> Self {
        let (b, t, c) = (shape.batch, shape.len, shape.labels);
        let z = || Array3::<f64>::zeros((b, t, c));
        GradientArrays {
            inner: Mutex::new(Arrays {
                scores: z(),
                begin_boundary: begin_boundary.then(z),
                end_boundary: end_boundary.then(z),
                boundary_marginals: Array2::zeros((b, t)),
            }),
        }
    }

    /// The arrays: scores, begin boundary, end boundary, boundary marginals.
    pub fn into_arrays(self) -> GradientArraysParts {
        let a = self
            .inner
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (
            a.scores,
            a.begin_boundary,
            a.end_boundary,
            a.boundary_marginals,
        )
    }
}

impl GradientSink for GradientArrays {
    fn put(&self, sequence: usize, t0: usize, rows: GradientRows<'_>) -> Result<()> {
        let mut a = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = rows.boundary_marginals.len();
        let copy = |dst: &mut Array3<f64>, src: &[f64]| {
            let mut seq = dst.index_axis_mut(Axis(0), sequence);
            let mut v = seq.slice_axis_mut(Axis(0), Slice::from(t0..t0 + n));
            for (d, &s) in v.iter_mut().zip(src) {
                *d = s;
            }
        };
        copy(&mut a.scores, rows.scores);
        if let (Some(dst), Some(src)) = (a.begin_boundary.as_mut(), rows.begin_boundary) {
            copy(dst, src);
        }
        if let (Some(dst), Some(src)) = (a.end_boundary.as_mut(), rows.end_boundary) {
            copy(dst, src);
        }
        let mut bm = a.boundary_marginals.index_axis_mut(Axis(0), sequence);
        let mut bm = bm.slice_axis_mut(Axis(0), Slice::from(t0..t0 + n));
        for (d, &s) in bm.iter_mut().zip(rows.boundary_marginals) {
            *d = s;
        }
        Ok(())
    }
}

/// The result of a streamed backward pass besides what went to the sink: `log Z` and the
/// gradients of the shared parameters (`transition`, `duration`, `start`, `end`; the
/// position-wise fields of [`Gradients`] are `None`).
#[derive(Clone, Debug)]
pub struct StreamedBackward {
    /// `log Z_b`, `(B)`.
    pub log_z: Vec<f64>,
    /// The shared parameters' gradients, scaled by the upstream gradient and summed over the
    /// batch in a fixed order.
    pub grad: Gradients,
}

/// An engine that reads its input from a [`PotentialSource`] chunk by chunk
/// ([`StreamedPotentials`]) and delivers position-wise gradients to a [`GradientSink`].
/// Results equal those of [`Engine`](crate::Engine) on the same values in arrays.
pub trait SourceEngine<F: Scalar>: EngineInfo {
    /// As [`Engine::forward`](crate::Engine::forward).
    fn forward_streamed<S: Semiring, P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<S::Value>>;
    /// log Z and the shared parameters' gradients of `Σ_b upstream[b] · log Z_b`; the
    /// position-wise gradients and boundary marginals go to `sink`. Fails with
    /// [`Error::Infeasible`](crate::Error::Infeasible) if some `log Z_b = -inf`.
    fn backward_streamed<P: PotentialSource<F> + ?Sized, G: GradientSink + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
        upstream: &[f64],
        sink: &G,
    ) -> Result<StreamedBackward>;
    /// As [`Engine::viterbi`](crate::Engine::viterbi).
    fn viterbi_streamed<P: PotentialSource<F> + ?Sized>(
        &self,
        problem: &StreamedPotentials<'_, F, P>,
    ) -> Result<Vec<Decoded>>;
    /// Upper bound of the working memory, in bytes, of `query` run on a streamed problem
    /// (as [`EngineInfo::memory_required`]; nothing of size `T·C` is held).
    fn memory_required_streamed(&self, query: &Query) -> Result<u64>;
}
