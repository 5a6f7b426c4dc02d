//! Validated inputs: structured potentials ([`Potentials`]), edge potentials
//! ([`EdgePotentials`]), and the owned form of a problem ([`OwnedPotentials`]).

use ndarray::{
    ArrayD, ArrayView, ArrayView1, ArrayView2, ArrayView3, ArrayView5, ArrayViewD, Axis, Dimension,
    Ix3,
};

use crate::checks::{
    check_lengths, check_shared_values, check_values, fixed_rank, opt_view, shared_views,
};
use crate::range::{self, Magnitude};
use crate::{Error, Result, Scalar};

/// The dimensions of a problem: `B` sequences of at most `T` positions, durations `1..=K`,
/// labels `0..C`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// `B`, the number of sequences.
    pub batch: usize,
    /// `T`, the padded length.
    pub len: usize,
    /// `K`, the maximum duration (inclusive).
    pub max_duration: usize,
    /// `C`, the number of labels.
    pub labels: usize,
}

impl Shape {
    /// A shape `(B, T, K, C)`.
    pub fn new(batch: usize, len: usize, max_duration: usize, labels: usize) -> Self {
        Shape {
            batch,
            len,
            max_duration,
            labels,
        }
    }
}

impl core::fmt::Display for Shape {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "(B, T, K, C) = ({}, {}, {}, {})",
            self.batch, self.len, self.max_duration, self.labels
        )
    }
}

/// The transition potentials: static `(C, C)` or duration-dependent `(K, C, C)`, indexed
/// `[source, destination]` (and `[d - 1, source, destination]`).
#[derive(Clone, Copy, Debug)]
pub enum Transition<'a, F> {
    /// `transition[i, j]`, shape `(C, C)`.
    Static(ArrayView2<'a, F>),
    /// `transition[d - 1, i, j]`, shape `(K, C, C)`, indexed by the duration of the new segment.
    DurationDependent(ArrayView3<'a, F>),
}

impl<F: Scalar> Transition<'_, F> {
    /// `transition[d-1, i, j]` as `f64`.
    #[inline(always)]
    pub fn get(&self, d: usize, i: usize, j: usize) -> f64 {
        match self {
            Transition::Static(t) => t[[i, j]].as_f64(),
            Transition::DurationDependent(t) => t[[d - 1, i, j]].as_f64(),
        }
    }

    /// Whether the transition depends on the duration of the new segment.
    pub fn is_duration_dependent(&self) -> bool {
        matches!(self, Transition::DurationDependent(_))
    }
}

/// Structured ("factorized") potentials of a batch, validated (model §2).
///
/// Build with [`Potentials::builder`]. Absent optional tensors score 0. Every tensor is checked
/// for shape, and every element for NaN and `+inf`; `-inf` is legal and forbids what it scores.
///
/// ```
/// # mod semicrf { pub use ::ndarray; pub use semicrf_core::*; } // the facade's paths
/// use semicrf::ndarray::{Array2, Array3};
/// use semicrf::Potentials;
///
/// let scores = Array3::<f32>::zeros((2, 5, 3)); // (B, T, C)
/// let transition = Array2::<f32>::zeros((3, 3));
/// let lengths = [5, 2];
/// let p = Potentials::builder(scores.view(), &lengths, 4)
///     .transition(transition.view())
///     .build()?;
/// assert_eq!(p.shape().max_duration, 4);
/// # Ok::<(), semicrf::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Potentials<'a, F> {
    scores: ArrayView3<'a, F>,
    transition: Option<Transition<'a, F>>,
    duration: Option<ArrayView2<'a, F>>,
    start: Option<ArrayView1<'a, F>>,
    end: Option<ArrayView1<'a, F>>,
    begin_boundary: Option<ArrayView3<'a, F>>,
    end_boundary: Option<ArrayView3<'a, F>>,
    lengths: &'a [usize],
    shape: Shape,
    magnitudes: Vec<Magnitude>,
}

/// Builder of [`Potentials`]; every tensor is taken as a view of any rank and checked in
/// [`PotentialsBuilder::build`].
#[derive(Clone, Debug)]
pub struct PotentialsBuilder<'a, F> {
    scores: ArrayViewD<'a, F>,
    lengths: &'a [usize],
    max_duration: usize,
    transition: Option<ArrayViewD<'a, F>>,
    duration: Option<ArrayViewD<'a, F>>,
    start: Option<ArrayViewD<'a, F>>,
    end: Option<ArrayViewD<'a, F>>,
    begin_boundary: Option<ArrayViewD<'a, F>>,
    end_boundary: Option<ArrayViewD<'a, F>>,
}

impl<'a, F: Scalar> PotentialsBuilder<'a, F> {
    /// Transition scores, `(C, C)` or `(K, C, C)`; default 0.
    pub fn transition<D: Dimension>(mut self, t: ArrayView<'a, F, D>) -> Self {
        self.transition = Some(t.into_dyn());
        self
    }
    /// Duration scores `(K, C)`; default 0.
    pub fn duration<D: Dimension>(mut self, t: ArrayView<'a, F, D>) -> Self {
        self.duration = Some(t.into_dyn());
        self
    }
    /// Score of the first segment's label, `(C)`; default 0.
    pub fn start<D: Dimension>(mut self, t: ArrayView<'a, F, D>) -> Self {
        self.start = Some(t.into_dyn());
        self
    }
    /// Score of the last segment's label, `(C)`; default 0.
    pub fn end<D: Dimension>(mut self, t: ArrayView<'a, F, D>) -> Self {
        self.end = Some(t.into_dyn());
        self
    }
    /// Score of a segment of label `c` starting at `t`, `(B, T, C)`; default 0.
    pub fn begin_boundary<D: Dimension>(mut self, t: ArrayView<'a, F, D>) -> Self {
        self.begin_boundary = Some(t.into_dyn());
        self
    }
    /// Score of a segment of label `c` whose last position is `t`, `(B, T, C)`; default 0.
    pub fn end_boundary<D: Dimension>(mut self, t: ArrayView<'a, F, D>) -> Self {
        self.end_boundary = Some(t.into_dyn());
        self
    }

    /// Validates shapes, lengths and values.
    pub fn build(self) -> Result<Potentials<'a, F>> {
        let scores: ArrayView3<'a, F> = fixed_rank(self.scores, "scores", "3")?;
        let (b, t, c) = scores.dim();
        if b == 0 {
            return Err(Error::EmptyBatch);
        }
        if c == 0 {
            return Err(Error::NoLabels);
        }
        let k = self.max_duration;
        if k == 0 {
            return Err(Error::ZeroMaxDuration);
        }
        check_lengths(self.lengths, b, t)?;
        let shape = Shape::new(b, t, k, c);
        let (transition, duration, start, end) =
            shared_views(self.transition, self.duration, self.start, self.end, k, c)?;
        let begin_boundary = opt_view::<Ix3, F>(
            self.begin_boundary,
            "begin_boundary",
            "3",
            &[b, t, c],
            "(B, T, C)",
        )?;
        let end_boundary = opt_view::<Ix3, F>(
            self.end_boundary,
            "end_boundary",
            "3",
            &[b, t, c],
            "(B, T, C)",
        )?;

        check_values("scores", &scores)?;
        check_shared_values(&transition, &duration, &start, &end)?;
        if let Some(v) = &begin_boundary {
            check_values("begin_boundary", v)?;
        }
        if let Some(v) = &end_boundary {
            check_values("end_boundary", v)?;
        }
        let mut p = Potentials {
            scores,
            transition,
            duration,
            start,
            end,
            begin_boundary,
            end_boundary,
            lengths: self.lengths,
            shape,
            magnitudes: Vec::new(),
        };
        p.magnitudes = range::structured(&p);
        range::check_finite_results(&p.magnitudes, p.lengths)?;
        Ok(p)
    }
}

impl<'a, F: Scalar> Potentials<'a, F> {
    /// Starts a builder from the emission scores `(B, T, C)`, the per-sequence lengths and the
    /// maximum duration `K` (inclusive).
    pub fn builder<D: Dimension>(
        scores: ArrayView<'a, F, D>,
        lengths: &'a [usize],
        max_duration: usize,
    ) -> PotentialsBuilder<'a, F> {
        PotentialsBuilder {
            scores: scores.into_dyn(),
            lengths,
            max_duration,
            transition: None,
            duration: None,
            start: None,
            end: None,
            begin_boundary: None,
            end_boundary: None,
        }
    }

    /// `(B, T, K, C)`.
    pub fn shape(&self) -> Shape {
        self.shape
    }
    /// Per-sequence lengths `L_b`.
    pub fn lengths(&self) -> &'a [usize] {
        self.lengths
    }
    /// Per-sequence bounds on the magnitude of a segmentation's score ([`range`]).
    pub fn magnitudes(&self) -> &[Magnitude] {
        &self.magnitudes
    }
    /// Emission scores `(B, T, C)`.
    pub fn scores(&self) -> &ArrayView3<'a, F> {
        &self.scores
    }
    /// Transition scores, if given.
    pub fn transition(&self) -> Option<&Transition<'a, F>> {
        self.transition.as_ref()
    }
    /// Whether the transition is given in its duration-dependent `(K, C, C)` form.
    pub fn has_duration_dependent_transition(&self) -> bool {
        self.transition
            .as_ref()
            .is_some_and(Transition::is_duration_dependent)
    }
    /// Duration scores `(K, C)`, if given.
    pub fn duration(&self) -> Option<&ArrayView2<'a, F>> {
        self.duration.as_ref()
    }
    /// Start scores `(C)`, if given.
    pub fn start(&self) -> Option<&ArrayView1<'a, F>> {
        self.start.as_ref()
    }
    /// End scores `(C)`, if given.
    pub fn end(&self) -> Option<&ArrayView1<'a, F>> {
        self.end.as_ref()
    }
    /// Begin-boundary scores `(B, T, C)`, if given.
    pub fn begin_boundary(&self) -> Option<&ArrayView3<'a, F>> {
        self.begin_boundary.as_ref()
    }
    /// End-boundary scores `(B, T, C)`, if given.
    pub fn end_boundary(&self) -> Option<&ArrayView3<'a, F>> {
        self.end_boundary.as_ref()
    }

    /// `transition[d-1, i, j]` as `f64` (0 when absent).
    #[inline]
    pub fn transition_at(&self, d: usize, i: usize, j: usize) -> f64 {
        self.transition.as_ref().map_or(0.0, |t| t.get(d, i, j))
    }
    /// `duration[d-1, c]` as `f64` (0 when absent).
    #[inline]
    pub fn duration_at(&self, d: usize, c: usize) -> f64 {
        self.duration
            .as_ref()
            .map_or(0.0, |t| t[[d - 1, c]].as_f64())
    }
    /// `start[c]` as `f64` (0 when absent).
    #[inline]
    pub fn start_at(&self, c: usize) -> f64 {
        self.start.as_ref().map_or(0.0, |t| t[c].as_f64())
    }
    /// `end[c]` as `f64` (0 when absent).
    #[inline]
    pub fn end_at(&self, c: usize) -> f64 {
        self.end.as_ref().map_or(0.0, |t| t[c].as_f64())
    }
    /// `begin_boundary[b, t, c]` as `f64` (0 when absent).
    #[inline]
    pub fn begin_boundary_at(&self, b: usize, t: usize, c: usize) -> f64 {
        self.begin_boundary
            .as_ref()
            .map_or(0.0, |x| x[[b, t, c]].as_f64())
    }
    /// `end_boundary[b, t, c]` as `f64` (0 when absent).
    #[inline]
    pub fn end_boundary_at(&self, b: usize, t: usize, c: usize) -> f64 {
        self.end_boundary
            .as_ref()
            .map_or(0.0, |x| x[[b, t, c]].as_f64())
    }
    /// Score of one segment `(s, d, c)` of sequence `b` without transition, start or end:
    /// `Σ scores[s..s+d, c] + duration[d-1, c] + begin_boundary[s, c] + end_boundary[s+d-1, c]`,
    /// summed directly in `f64`.
    pub fn segment_score(&self, b: usize, s: usize, d: usize, c: usize) -> f64 {
        let mut x = 0.0;
        for t in s..s + d {
            x += self.scores[[b, t, c]].as_f64();
        }
        x + self.duration_at(d, c)
            + self.begin_boundary_at(b, s, c)
            + self.end_boundary_at(b, s + d - 1, c)
    }
}

/// Edge potentials `(B, T, K, C, C)`, destination label first (model §3), validated.
///
/// `edges[b, s, d-1, j, i]` scores a segment that starts at `s`, lasts `d`, has label `j` and
/// follows label `i`. The first segment (`s = 0`) follows a *virtual start*: every source `i`
/// is allowed with weight one, so its edges are summed (log) or maxed (Viterbi) over `i`.
/// Segments with `s + d > L_b` are ignored.
#[derive(Clone, Debug)]
pub struct EdgePotentials<'a, F> {
    edges: ArrayView5<'a, F>,
    lengths: &'a [usize],
    shape: Shape,
    magnitudes: Vec<Magnitude>,
}

impl<'a, F: Scalar> EdgePotentials<'a, F> {
    /// Validates an edge tensor `(B, T, K, C, C)` and lengths.
    pub fn new<D: Dimension>(edges: ArrayView<'a, F, D>, lengths: &'a [usize]) -> Result<Self> {
        let edges: ArrayView5<'a, F> = fixed_rank(edges.into_dyn(), "edges", "5")?;
        let (b, t, k, c, c2) = edges.dim();
        if b == 0 {
            return Err(Error::EmptyBatch);
        }
        if k == 0 {
            return Err(Error::ZeroMaxDuration);
        }
        if c == 0 || c2 == 0 {
            return Err(Error::NoLabels);
        }
        if c2 != c {
            return Err(Error::Shape {
                tensor: "edges",
                expected: format!("(B, T, K, C, C) with C = {c}"),
                got: edges.shape().to_vec(),
            });
        }
        check_lengths(lengths, b, t)?;
        check_values("edges", &edges)?;
        let mut p = EdgePotentials {
            edges,
            lengths,
            shape: Shape::new(b, t, k, c),
            magnitudes: Vec::new(),
        };
        p.magnitudes = range::edges(&p);
        range::check_finite_results(&p.magnitudes, lengths)?;
        Ok(p)
    }
    /// Per-sequence bounds on the magnitude of a segmentation's score ([`range`]).
    pub fn magnitudes(&self) -> &[Magnitude] {
        &self.magnitudes
    }
    /// `(B, T, K, C)`.
    pub fn shape(&self) -> Shape {
        self.shape
    }
    /// Per-sequence lengths.
    pub fn lengths(&self) -> &'a [usize] {
        self.lengths
    }
    /// The edge tensor `(B, T, K, C, C)`.
    pub fn edges(&self) -> &ArrayView5<'a, F> {
        &self.edges
    }
}

/// The input of an engine: structured or edge potentials.
// Problems are borrowed views passed by reference, never stored in bulk: boxing the larger
// variant would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Problem<'a, F> {
    /// Structured potentials (the main input).
    Structured(Potentials<'a, F>),
    /// Edge potentials (exact and scan backends).
    Edges(EdgePotentials<'a, F>),
}

impl<'a, F: Scalar> Problem<'a, F> {
    /// `(B, T, K, C)`.
    pub fn shape(&self) -> Shape {
        match self {
            Problem::Structured(p) => p.shape(),
            Problem::Edges(p) => p.shape(),
        }
    }
    /// Per-sequence lengths.
    pub fn lengths(&self) -> &'a [usize] {
        match self {
            Problem::Structured(p) => p.lengths(),
            Problem::Edges(p) => p.lengths(),
        }
    }
    /// Per-sequence bounds on the magnitude of a segmentation's score ([`range`]).
    pub fn magnitudes(&self) -> &[Magnitude] {
        match self {
            Problem::Structured(p) => p.magnitudes(),
            Problem::Edges(p) => p.magnitudes(),
        }
    }
    /// The input form, as the selector sees it.
    pub fn form(&self) -> crate::Form {
        match self {
            Problem::Structured(p) => crate::Form::Structured {
                duration_dependent_transition: p.has_duration_dependent_transition(),
                boundaries: [p.begin_boundary().is_some(), p.end_boundary().is_some()],
            },
            Problem::Edges(_) => crate::Form::Edges,
        }
    }
}

impl<'a, F> From<Potentials<'a, F>> for Problem<'a, F> {
    fn from(p: Potentials<'a, F>) -> Self {
        Problem::Structured(p)
    }
}

impl<'a, F> From<EdgePotentials<'a, F>> for Problem<'a, F> {
    fn from(p: EdgePotentials<'a, F>) -> Self {
        Problem::Edges(p)
    }
}

/// An owned problem in structured form, as read from a file or made by a generator; tensors of
/// any rank, checked when viewed with [`OwnedPotentials::view`].
#[derive(Clone, Debug, PartialEq)]
pub struct OwnedPotentials<F> {
    /// `(B, T, C)`.
    pub scores: ArrayD<F>,
    /// `(C, C)` or `(K, C, C)`.
    pub transition: Option<ArrayD<F>>,
    /// `(K, C)`.
    pub duration: Option<ArrayD<F>>,
    /// `(C)`.
    pub start: Option<ArrayD<F>>,
    /// `(C)`.
    pub end: Option<ArrayD<F>>,
    /// `(B, T, C)`.
    pub begin_boundary: Option<ArrayD<F>>,
    /// `(B, T, C)`.
    pub end_boundary: Option<ArrayD<F>>,
    /// `(B)`.
    pub lengths: Vec<usize>,
    /// `K`.
    pub max_duration: usize,
}

impl<F: Scalar> OwnedPotentials<F> {
    /// A problem of emission scores only (every optional tensor absent, scoring 0); set the
    /// others as fields.
    pub fn new(scores: ArrayD<F>, lengths: Vec<usize>, max_duration: usize) -> Self {
        OwnedPotentials {
            scores,
            transition: None,
            duration: None,
            start: None,
            end: None,
            begin_boundary: None,
            end_boundary: None,
            lengths,
            max_duration,
        }
    }

    /// Validated borrowed potentials.
    pub fn view(&self) -> Result<Potentials<'_, F>> {
        let mut b = Potentials::builder(self.scores.view(), &self.lengths, self.max_duration);
        if let Some(t) = &self.transition {
            b = b.transition(t.view());
        }
        if let Some(t) = &self.duration {
            b = b.duration(t.view());
        }
        if let Some(t) = &self.start {
            b = b.start(t.view());
        }
        if let Some(t) = &self.end {
            b = b.end(t.view());
        }
        if let Some(t) = &self.begin_boundary {
            b = b.begin_boundary(t.view());
        }
        if let Some(t) = &self.end_boundary {
            b = b.end_boundary(t.view());
        }
        b.build()
    }

    /// Sequence `b` alone, as a batch of one (`None` if `b` is not a sequence of the batch):
    /// the per-sequence tensors' row `b` and the shared tensors unchanged.
    pub fn sequence(&self, b: usize) -> Option<OwnedPotentials<F>> {
        let length = *self.lengths.get(b)?;
        let row = |a: &ArrayD<F>| {
            (a.ndim() > 0 && b < a.shape()[0])
                .then(|| a.index_axis(Axis(0), b).insert_axis(Axis(0)).to_owned())
        };
        let opt_row = |a: &Option<ArrayD<F>>| match a {
            Some(a) => row(a).map(Some),
            None => Some(None),
        };
        Some(OwnedPotentials {
            scores: row(&self.scores)?,
            begin_boundary: opt_row(&self.begin_boundary)?,
            end_boundary: opt_row(&self.end_boundary)?,
            lengths: vec![length],
            ..self.clone()
        })
    }

    /// The same problem with every tensor converted element-wise (e.g. to `f32`).
    pub fn cast<G: Scalar>(&self) -> OwnedPotentials<G> {
        let c = |a: &ArrayD<F>| a.mapv(|x| G::from_f64_lossy(x.as_f64()));
        OwnedPotentials {
            scores: c(&self.scores),
            transition: self.transition.as_ref().map(c),
            duration: self.duration.as_ref().map(c),
            start: self.start.as_ref().map(c),
            end: self.end.as_ref().map(c),
            begin_boundary: self.begin_boundary.as_ref().map(c),
            end_boundary: self.end_boundary.as_ref().map(c),
            lengths: self.lengths.clone(),
            max_duration: self.max_duration,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{GenSpec, TransitionKind, random_problem};
    use crate::{Form, Problem};

    /// The form names the transition's kind and which boundaries are given, so that engines
    /// that copy their inputs can count those alone.
    #[test]
    fn the_form_names_the_transition_and_the_boundaries_given() {
        for (boundaries, dd) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut spec = GenSpec::new(2, 6, 3, 2).everything();
            spec.boundaries = boundaries;
            if dd {
                spec.transition = TransitionKind::DurationDependent;
            }
            let owned = random_problem(7, &spec);
            let form = Problem::Structured(owned.view().unwrap()).form();
            assert_eq!(
                form,
                Form::Structured {
                    duration_dependent_transition: dd,
                    boundaries: [boundaries, boundaries],
                }
            );
        }
        let mut owned = random_problem(7, &GenSpec::new(2, 6, 3, 2));
        owned.end_boundary = Some(ndarray::ArrayD::zeros(ndarray::IxDyn(&[2, 6, 2])));
        let form = Problem::Structured(owned.view().unwrap()).form();
        assert!(matches!(
            form,
            Form::Structured {
                boundaries: [false, true],
                ..
            }
        ));
    }
}
