//! Potentials produced on demand: the [`PotentialSource`] trait through which an engine asks
//! for the rows of one sequence's position-wise tensors, the problem built around one
//! ([`StreamedPotentials`]) and the checks a source's rows go through ([`RowCheck`]).
//! See the model page, §11.

use ndarray::{ArrayView, ArrayView1, ArrayView2, ArrayViewD, Dimension};

use crate::checks::{check_shared_values, shared_views};
use crate::range::{self, Largest, Magnitude, SharedBound};
use crate::{Error, Potentials, Result, Scalar, Shape, Transition};

/// The shared parameters of a problem (model §2): transition, duration, start and end, with
/// `K` and `C`. Small arrays, held by every engine whole.
#[derive(Clone, Debug)]
pub struct SharedParams<'a, F> {
    pub(crate) transition: Option<Transition<'a, F>>,
    pub(crate) duration: Option<ArrayView2<'a, F>>,
    pub(crate) start: Option<ArrayView1<'a, F>>,
    pub(crate) end: Option<ArrayView1<'a, F>>,
    pub(crate) max_duration: usize,
    pub(crate) labels: usize,
}

impl<'a, F: Scalar> SharedParams<'a, F> {
    /// `K`.
    pub fn max_duration(&self) -> usize {
        self.max_duration
    }
    /// `C`.
    pub fn labels(&self) -> usize {
        self.labels
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
}

/// Rows `[t0, t0 + n)` of one sequence's position-wise tensors, row-major `(n, C)`, for a
/// [`PotentialSource`] to fill.
#[derive(Debug)]
#[non_exhaustive]
pub struct SourceRows<'r, F> {
    /// `scores[t0 .. t0 + n, ·]`.
    pub scores: &'r mut [F],
    /// `begin_boundary[t0 .. t0 + n, ·]`, present when the source has one.
    pub begin_boundary: Option<&'r mut [F]>,
    /// `end_boundary[t0 .. t0 + n, ·]`, present when the source has one.
    pub end_boundary: Option<&'r mut [F]>,
}

impl<'r, F> SourceRows<'r, F> {
    /// Rows from their slices (see the fields).
    pub fn new(
        scores: &'r mut [F],
        begin_boundary: Option<&'r mut [F]>,
        end_boundary: Option<&'r mut [F]>,
    ) -> Self {
        SourceRows {
            scores,
            begin_boundary,
            end_boundary,
        }
    }
}

/// A producer of the position-wise potentials (scores and boundaries, model §2) of a batch,
/// one chunk of rows at a time: what the streaming engines read instead of `(B, T, C)`
/// arrays, so that a problem never needs to exist in memory whole. [`Potentials`] (arrays in
/// memory) is one implementation; a model that computes its scores from the raw input (DNA,
/// text) chunk by chunk is another. Build a problem around one with
/// [`StreamedPotentials::builder`].
///
/// **Contract.** An engine calls [`PotentialSource::fill`] for chunks of its choosing, from
/// any thread, for one sequence at a time per call, in any order and *as many times as it
/// needs*: the backward pass and the checkpointed Viterbi recompute intervals from
/// checkpoints and read their rows again. A source must give bitwise the same values for a
/// row every time (a pure function of `(sequence, t, label)`); results are then bitwise
/// independent of the chunk sizes. It is asked only for rows `t < L_b`. Values follow the
/// rules of [`Potentials`]: NaN and `+inf` are refused with [`Error::NonFinite`] naming the
/// tensor and `[sequence, t, label]`, `-inf` forbids. An error the source returns (an I/O
/// failure) ends the call that asked and is passed on unchanged.
///
/// ```
/// use semicrf_core::{PotentialSource, Result, SourceRows};
///
/// /// Scores computed on the fly: label `c` scores `sin(t + c)` at position `t`.
/// struct Sines { lengths: Vec<usize> }
///
/// impl PotentialSource<f64> for Sines {
///     fn lengths(&self) -> &[usize] { &self.lengths }
///     fn labels(&self) -> usize { 3 }
///     fn fill(&self, _sequence: usize, t0: usize, rows: SourceRows<'_, f64>) -> Result<()> {
///         for (n, x) in rows.scores.iter_mut().enumerate() {
///             *x = ((t0 + n / 3 + n % 3) as f64).sin();
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait PotentialSource<F: Scalar>: Sync {
    /// `L_b` for every sequence of the batch (`B = lengths().len()`, `T` their maximum).
    fn lengths(&self) -> &[usize];
    /// `C`.
    fn labels(&self) -> usize;
    /// Whether the source gives a begin boundary (otherwise it scores 0).
    fn has_begin_boundary(&self) -> bool {
        false
    }
    /// Whether the source gives an end boundary (otherwise it scores 0).
    fn has_end_boundary(&self) -> bool {
        false
    }
    /// Writes rows `[t0, t0 + n)` of sequence `sequence` into `rows` (`n = scores.len() / C`,
    /// `t0 + n <= L_b`); the boundary slices are present exactly when the source has them.
    fn fill(&self, sequence: usize, t0: usize, rows: SourceRows<'_, F>) -> Result<()>;
}

impl<F: Scalar> PotentialSource<F> for Potentials<'_, F> {
    fn lengths(&self) -> &[usize] {
        Potentials::lengths(self)
    }
    fn labels(&self) -> usize {
        self.shape().labels
    }
    fn has_begin_boundary(&self) -> bool {
        self.begin_boundary().is_some()
    }
    fn has_end_boundary(&self) -> bool {
        self.end_boundary().is_some()
    }
    fn fill(&self, sequence: usize, t0: usize, rows: SourceRows<'_, F>) -> Result<()> {
        let c = self.shape().labels;
        let n = rows.scores.len() / c;
        let copy = |v: &ndarray::ArrayView3<'_, F>, out: &mut [F]| {
            let seq = v.index_axis(ndarray::Axis(0), sequence);
            let rows = seq.slice_axis(ndarray::Axis(0), ndarray::Slice::from(t0..t0 + n));
            for (o, x) in out.iter_mut().zip(rows.iter()) {
                *o = *x;
            }
        };
        copy(self.scores(), rows.scores);
        if let (Some(v), Some(out)) = (self.begin_boundary(), rows.begin_boundary) {
            copy(v, out);
        }
        if let (Some(v), Some(out)) = (self.end_boundary(), rows.end_boundary) {
            copy(v, out);
        }
        Ok(())
    }
}

/// A problem whose position-wise potentials come from a [`PotentialSource`], with its shared
/// parameters as small arrays; validated except for the source's rows, which the engine
/// checks as it reads them ([`RowCheck`]).
///
/// ```
/// use ndarray::{Array2, Array3};
/// use semicrf_core::{Potentials, StreamedPotentials};
///
/// let scores = Array3::<f64>::zeros((1, 6, 2));
/// let transition = Array2::<f64>::zeros((2, 2));
/// let lengths = [6];
/// let arrays = Potentials::builder(scores.view(), &lengths, 3).build()?;
/// let p = StreamedPotentials::builder(&arrays, 3).transition(transition.view()).build()?;
/// assert_eq!(p.shape().len, 6);
/// # Ok::<(), semicrf_core::Error>(())
/// ```
pub struct StreamedPotentials<'a, F, P: ?Sized> {
    source: &'a P,
    shared: SharedParams<'a, F>,
    shape: Shape,
    bound: SharedBound,
}

impl<F: Clone, P: ?Sized> Clone for StreamedPotentials<'_, F, P> {
    fn clone(&self) -> Self {
        StreamedPotentials {
            source: self.source,
            shared: self.shared.clone(),
            shape: self.shape,
            bound: self.bound.clone(),
        }
    }
}

impl<F: core::fmt::Debug, P: ?Sized> core::fmt::Debug for StreamedPotentials<'_, F, P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StreamedPotentials")
            .field("shape", &self.shape)
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

/// Builder of [`StreamedPotentials`]; the shared tensors are checked in
/// [`StreamedPotentialsBuilder::build`] as [`Potentials`] checks them.
#[derive(Clone)]
pub struct StreamedPotentialsBuilder<'a, F, P: ?Sized> {
    source: &'a P,
    max_duration: usize,
    transition: Option<ArrayViewD<'a, F>>,
    duration: Option<ArrayViewD<'a, F>>,
    start: Option<ArrayViewD<'a, F>>,
    end: Option<ArrayViewD<'a, F>>,
}

impl<'a, F: Scalar, P: PotentialSource<F> + ?Sized> StreamedPotentialsBuilder<'a, F, P> {
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

    /// Validates the source's lengths and labels and the shared tensors.
    pub fn build(self) -> Result<StreamedPotentials<'a, F, P>> {
        let lengths = self.source.lengths();
        let (b, c, k) = (lengths.len(), self.source.labels(), self.max_duration);
        if b == 0 {
            return Err(Error::EmptyBatch);
        }
        if c == 0 {
            return Err(Error::NoLabels);
        }
        if k == 0 {
            return Err(Error::ZeroMaxDuration);
        }
        let t = lengths.iter().copied().max().unwrap_or(0);
        if let Some(sequence) = lengths.iter().position(|&l| l == 0) {
            return Err(Error::Length {
                sequence,
                length: 0,
                max: t,
            });
        }
        let (transition, duration, start, end) =
            shared_views(self.transition, self.duration, self.start, self.end, k, c)?;
        check_shared_values(&transition, &duration, &start, &end)?;
        let shared = SharedParams {
            transition,
            duration,
            start,
            end,
            max_duration: k,
            labels: c,
        };
        let bound = range::shared_bound_of(&shared);
        Ok(StreamedPotentials {
            source: self.source,
            shared,
            shape: Shape::new(b, t, k, c),
            bound,
        })
    }
}

impl<'a, F: Scalar, P: PotentialSource<F> + ?Sized> StreamedPotentials<'a, F, P> {
    /// Starts a builder from a source and the maximum duration `K` (inclusive).
    pub fn builder(source: &'a P, max_duration: usize) -> StreamedPotentialsBuilder<'a, F, P> {
        StreamedPotentialsBuilder {
            source,
            max_duration,
            transition: None,
            duration: None,
            start: None,
            end: None,
        }
    }
    /// `(B, T, K, C)`, `T` the longest sequence.
    pub fn shape(&self) -> Shape {
        self.shape
    }
    /// The source of the position-wise potentials.
    pub fn source(&self) -> &'a P {
        self.source
    }
    /// Per-sequence lengths `L_b`.
    pub fn lengths(&self) -> &'a [usize] {
        self.source.lengths()
    }
    /// The shared parameters.
    pub fn shared(&self) -> &SharedParams<'a, F> {
        &self.shared
    }
    /// The shared parameters' part of every sequence's magnitude bound ([`range`]).
    pub fn shared_bound(&self) -> &SharedBound {
        &self.bound
    }
    /// The input form, as the selector sees it.
    pub fn form(&self) -> crate::Form {
        crate::Form::Structured {
            duration_dependent_transition: self.shared.has_duration_dependent_transition(),
            boundaries: [
                self.source.has_begin_boundary(),
                self.source.has_end_boundary(),
            ],
        }
    }
}

impl<'a, F: Scalar> StreamedPotentials<'a, F, Potentials<'a, F>> {
    /// Arrays in memory as a source, with their shared parameters: the same problem as `p`
    /// (same shape, padded length included), read chunk by chunk.
    pub fn of(p: &'a Potentials<'a, F>) -> Self {
        StreamedPotentials {
            source: p,
            shared: p.shared(),
            shape: p.shape(),
            bound: range::shared_bound(p),
        }
    }
}

/// The checks of a sequence's rows as an engine reads them from a [`PotentialSource`]: NaN
/// and `+inf` are [`Error::NonFinite`] (index `[sequence, t, label]`), and each row's
/// largest finite entries add up to the sequence's magnitude bound ([`range`]), which
/// [`RowCheck::magnitude`] completes with the shared parameters' part. Rows are counted once,
/// the first time they are seen, however often they are read again.
#[derive(Clone, Debug)]
pub struct RowCheck {
    sequence: usize,
    labels: usize,
    /// Rows `< seen` have been checked.
    seen: usize,
    bound: f64,
    largest: Option<Largest>,
}

/// The checks of some rows ([`RowCheck::scan`]), to be absorbed in order.
#[derive(Clone, Debug)]
pub struct Scanned {
    /// The first row scanned and the row after the last (`usize::MAX`: nothing to absorb).
    start: usize,
    from: usize,
    /// The largest `|x|` of each row and tensor, in order.
    tops: Vec<f64>,
    largest: Option<Largest>,
}

impl RowCheck {
    /// The checks of sequence `sequence` with `labels` labels, before any row.
    pub fn new(sequence: usize, labels: usize) -> Self {
        RowCheck {
            sequence,
            labels,
            seen: 0,
            bound: 0.0,
            largest: None,
        }
    }

    /// Checks the rows `[t0, t0 + n)` just read (only those past every row seen so far: a
    /// source reads rows in order the first time, as the forward pass does).
    pub fn rows<F: Scalar>(&mut self, t0: usize, rows: &SourceRows<'_, F>) -> Result<()> {
        let mut bound = self.bound;
        let (start, end, largest) = self.checks(self.seen, t0, rows, &mut |top| bound += top)?;
        if start != usize::MAX {
            self.bound = bound;
            self.take_largest(largest);
            self.seen = end;
        }
        Ok(())
    }

    /// The checks of rows `[t0, t0 + n)` from row `from` on, without this check's state
    /// (so that chunks read at once are scanned on as many threads, `from` being the rows
    /// seen before the first of them, or the chunk's own first row for the next ones), for
    /// [`RowCheck::absorb`] in order: nothing where `from` leaves a gap before `t0`.
    pub fn scan<F: Scalar>(
        &self,
        from: usize,
        t0: usize,
        rows: &SourceRows<'_, F>,
    ) -> Result<Scanned> {
        let mut tops = Vec::new();
        let (start, from, largest) = self.checks(from, t0, rows, &mut |top| tops.push(top))?;
        Ok(Scanned {
            start,
            from,
            tops,
            largest,
        })
    }

    /// The checks of rows `[t0, t0 + n)` from row `from` on: each row and tensor's largest
    /// `|x|` to `top` in order, then the first and after-last rows checked
    /// (`usize::MAX` for none: nothing new, or a gap) and the largest entry.
    fn checks<F: Scalar>(
        &self,
        from: usize,
        t0: usize,
        rows: &SourceRows<'_, F>,
        top_of: &mut dyn FnMut(f64),
    ) -> Result<(usize, usize, Option<Largest>)> {
        let c = self.labels;
        let n = rows.scores.len() / c;
        let start = from.max(t0);
        if start >= t0 + n || start > from {
            // Either nothing new, or a gap: rows past `seen` are counted only in order.
            return Ok((usize::MAX, usize::MAX, None));
        }
        let tensors: [(&'static str, Option<&[F]>); 3] = [
            ("scores", Some(&*rows.scores)),
            ("begin_boundary", rows.begin_boundary.as_deref()),
            ("end_boundary", rows.end_boundary.as_deref()),
        ];
        let (mut largest, mut top_abs) = (None, 0.0f64);
        for t in start..t0 + n {
            let r = (t - t0) * c;
            for (name, v) in tensors {
                let Some(v) = v else { continue };
                let mut top = 0.0f64;
                let mut at = 0;
                for (j, &x) in v[r..r + c].iter().enumerate() {
                    if x.is_nan() || x == F::infinity() {
                        return Err(Error::NonFinite {
                            tensor: name,
                            index: vec![self.sequence, t, j],
                            value: x.as_f64(),
                        });
                    }
                    let a = x.as_f64().abs();
                    if a.is_finite() && a > top {
                        (top, at) = (a, j);
                    }
                }
                top_of(top);
                if top > top_abs {
                    top_abs = top;
                    largest = Some(Largest {
                        tensor: name,
                        index: vec![self.sequence, t, at],
                        value: v[r + at].as_f64(),
                    });
                }
            }
        }
        Ok((start, t0 + n, largest))
    }

    /// `l` as the largest entry where it is larger than the one so far.
    fn take_largest(&mut self, l: Option<Largest>) {
        if let Some(l) = l
            && l.value.abs() > self.largest.as_ref().map_or(0.0, |m| m.value.abs())
        {
            self.largest = Some(l);
        }
    }

    /// Takes the rows of a [`RowCheck::scan`] that start at the rows seen so far (scans
    /// absorbed in the order of their rows give the same bound and largest entry as
    /// [`RowCheck::rows`] on each in turn; any other is ignored).
    pub fn absorb(&mut self, scanned: Scanned) {
        if scanned.from == usize::MAX || scanned.start != self.seen {
            return;
        }
        for top in scanned.tops {
            self.bound += top;
        }
        self.take_largest(scanned.largest);
        self.seen = scanned.from;
    }

    /// Rows checked so far (`[0, seen)`).
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// The magnitude bound of the sequence (length `len`) from the rows seen and the shared
    /// parameters' part.
    pub fn magnitude(&self, shared: &SharedBound, len: usize) -> Magnitude {
        let mut largest = shared.largest.clone();
        if let Some(l) = &self.largest
            && l.value.abs() > shared.largest_abs()
        {
            largest = Some(l.clone());
        }
        Magnitude {
            bound: shared.start(len) + self.bound,
            largest,
        }
    }
}

impl<'a, F: Scalar> Potentials<'a, F> {
    /// The shared parameters (transition, duration, start, end) with `K` and `C`.
    pub fn shared(&self) -> SharedParams<'a, F> {
        SharedParams {
            transition: self.transition().copied(),
            duration: self.duration().copied(),
            start: self.start().copied(),
            end: self.end().copied(),
            max_duration: self.shape().max_duration,
            labels: self.shape().labels,
        }
    }
}

/// Fails with `err` re-numbered to sequence `b` (checks run on one sequence at a time name
/// sequence 0).
pub(crate) fn renumber(err: Error, b: usize) -> Error {
    match err {
        Error::Magnitude {
            bound,
            limit,
            what,
            tensor,
            index,
            value,
            ..
        } => Error::Magnitude {
            sequence: b,
            bound,
            limit,
            what,
            tensor,
            index,
            value,
        },
        e => e,
    }
}

/// Fails with [`Error::Magnitude`] when sequence `b`'s bound `m` exceeds what every result
/// needs ([`range::check_finite_results`]), or, with `probabilities`, what gradients,
/// marginals and entropies need ([`range::check_probabilities_of`]).
pub fn check_magnitude(m: &Magnitude, b: usize, len: usize, probabilities: bool) -> Result<()> {
    let ms = core::slice::from_ref(m);
    let r = if probabilities {
        range::check_probabilities_of(ms, &[len])
    } else {
        range::check_finite_results(ms, &[len])
    };
    r.map_err(|e| renumber(e, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::SharedBound;

    /// Chunks scanned a wave at a time and absorbed in order give the magnitude, the rows
    /// seen and the first error of checking each chunk in turn, rows read again included.
    #[test]
    fn scans_absorbed_in_order_are_the_checks_of_the_rows_in_turn() {
        let c = 3;
        let value = |t: usize, j: usize, salt: usize| -> f64 {
            let x = ((t * 31 + j * 7 + salt * 13) % 17) as f64 - 8.0;
            if x == -8.0 {
                f64::NEG_INFINITY
            } else {
                x * 0.37
            }
        };
        let shared = SharedBound {
            once: 0.5,
            per_segment: 0.25,
            largest: None,
        };
        // Chunks (first row, rows) of two pieces of a sequence, each read in order: the second
        // starts 9 rows before the first one's end.
        let pieces: [&[(usize, usize)]; 2] =
            [&[(0, 7), (7, 7), (14, 7), (21, 4)], &[(16, 7), (23, 7)]];
        let chunks: Vec<(usize, usize)> = pieces.concat();
        for bad in [None, Some((18, 1)), Some((27, 2))] {
            let rows_at = |t0: usize, n: usize| {
                let mut sc = vec![0.0f64; n * c];
                let mut bb = vec![0.0f64; n * c];
                for i in 0..n * c {
                    let (t, j) = (t0 + i / c, i % c);
                    sc[i] = if bad == Some((t, j)) {
                        f64::NAN
                    } else {
                        value(t, j, 1)
                    };
                    bb[i] = value(t, j, 2);
                }
                (sc, bb)
            };
            // Each row counted once: the largest |x| of each row and tensor, summed in order.
            let mut tops = 0.0;
            for t in 0..30 {
                for salt in [1, 2] {
                    let top = (0..c)
                        .map(|j| value(t, j, salt).abs())
                        .filter(|a| a.is_finite())
                        .fold(0.0, f64::max);
                    tops += top;
                }
            }
            let none = RowCheck::new(4, c).magnitude(&shared, 30).bound;
            let mut one = RowCheck::new(4, c);
            let mut want_err = None;
            for &(t0, n) in &chunks {
                let (mut sc, mut bb) = rows_at(t0, n);
                if let Err(e) = one.rows(t0, &SourceRows::new(&mut sc, Some(&mut bb), None)) {
                    want_err = Some(e.to_string());
                    break;
                }
            }
            if want_err.is_none() {
                assert_eq!(one.magnitude(&shared, 30).bound, none + tops);
            } else {
                let (t, j) = bad.unwrap();
                assert!(
                    want_err
                        .as_deref()
                        .unwrap()
                        .contains(&format!("[4, {t}, {j}]"))
                );
            }
            for wave in [1, 2, 3] {
                let mut many = RowCheck::new(4, c);
                let mut got_err = None;
                let waves = pieces.iter().flat_map(|p| p.chunks(wave));
                'waves: for group in waves {
                    let seen = many.seen();
                    let scans: Vec<Result<Scanned>> = group
                        .iter()
                        .enumerate()
                        .map(|(i, &(t0, n))| {
                            let (mut sc, mut bb) = rows_at(t0, n);
                            let from = if i == 0 { seen } else { seen.max(t0) };
                            many.scan(from, t0, &SourceRows::new(&mut sc, Some(&mut bb), None))
                        })
                        .collect();
                    for s in scans {
                        match s {
                            Ok(s) => many.absorb(s),
                            Err(e) => {
                                got_err = Some(e.to_string());
                                break 'waves;
                            }
                        }
                    }
                }
                assert_eq!(got_err, want_err, "bad {bad:?}, waves of {wave}");
                if want_err.is_none() {
                    assert_eq!(many.seen(), 30, "waves of {wave}");
                    assert_eq!(many.magnitude(&shared, 30), one.magnitude(&shared, 30));
                }
            }
        }
    }
}
