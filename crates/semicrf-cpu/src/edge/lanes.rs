//! Reading the edges of one sequence, one source-label lane at a time, without copying the
//! caller's tensor; and the per-sequence materialisation of structured input.

use ndarray::{Array5, ArrayView3, ArrayView4, Axis, Slice};
use semicrf_core::{Potentials, Problem, Result, Scalar, Transition, materialize};

/// Read access to the edges `E[s, d-1, j, i]` of one sequence, one lane `E[s, d-1, j, ·]` at
/// a time.
pub(crate) trait Lanes {
    /// The element type (the caller's `F`, or `f64` for materialised edges).
    type Elem: Scalar;
    /// Durations stored per start position.
    fn k(&self) -> usize;
    /// Labels `C`.
    fn c(&self) -> usize;
    /// The lane `E[s, d-1, j, 0..C]`, borrowed or copied into `buf` (`C` elements).
    fn lane<'b>(
        &'b self,
        s: usize,
        d: usize,
        j: usize,
        buf: &'b mut [Self::Elem],
    ) -> &'b [Self::Elem];
}

/// Edges in standard layout: lanes are sub-slices.
pub(crate) struct Dense<'a, E> {
    pub data: &'a [E],
    pub k: usize,
    pub c: usize,
}

impl<E: Scalar> Lanes for Dense<'_, E> {
    type Elem = E;
    #[inline(always)]
    fn k(&self) -> usize {
        self.k
    }
    #[inline(always)]
    fn c(&self) -> usize {
        self.c
    }
    #[inline(always)]
    fn lane<'b>(&'b self, s: usize, d: usize, j: usize, _buf: &'b mut [E]) -> &'b [E] {
        let off = ((s * self.k + d - 1) * self.c + j) * self.c;
        &self.data[off..off + self.c]
    }
}

/// Edges in any other layout: each lane is copied into the buffer.
pub(crate) struct Strided<'a, E>(pub ArrayView4<'a, E>);

impl<E: Scalar> Lanes for Strided<'_, E> {
    type Elem = E;
    fn k(&self) -> usize {
        self.0.dim().1
    }
    fn c(&self) -> usize {
        self.0.dim().2
    }
    fn lane<'b>(&'b self, s: usize, d: usize, j: usize, buf: &'b mut [E]) -> &'b [E] {
        for (o, &x) in buf.iter_mut().zip(
            self.0
                .index_axis(Axis(0), s)
                .index_axis_move(Axis(0), d - 1)
                .index_axis_move(Axis(0), j),
        ) {
            *o = x;
        }
        buf
    }
}

/// The edges of one sequence, `(L, K', C, C)`.
pub(crate) enum SeqEdges<'a, F> {
    /// Materialised from structured potentials: `(1, L, min(K, L), C, C)`, `f64`.
    Materialized(Array5<f64>),
    /// The caller's edge tensor, restricted to the sequence and its first `L` positions.
    View(ArrayView4<'a, F>),
}

/// Binds `$lanes` to the fastest [`Lanes`] reader of `$edges` (a `&SeqEdges`) and evaluates
/// `$body` with it (the body is compiled once per reader type).
macro_rules! with_lanes {
    ($edges:expr, |$lanes:ident| $body:expr) => {{
        use $crate::edge::lanes::{Dense, SeqEdges, Strided};
        match $edges {
            SeqEdges::Materialized(e) => {
                let v = e.view().index_axis_move(ndarray::Axis(0), 0);
                match v.to_slice() {
                    Some(data) => {
                        let (_, k, c, _) = v.dim();
                        let $lanes = Dense { data, k, c };
                        $body
                    }
                    None => {
                        let $lanes = Strided(v);
                        $body
                    }
                }
            }
            SeqEdges::View(v) => match v.to_slice() {
                Some(data) => {
                    let (_, k, c, _) = v.dim();
                    let $lanes = Dense { data, k, c };
                    $body
                }
                None => {
                    let $lanes = Strided(v.clone());
                    $body
                }
            },
        }
    }};
}
pub(crate) use with_lanes;

/// The edges of sequence `b` of `problem`: materialised for structured input, a view of the
/// caller's tensor for edge input.
pub(crate) fn sequence<'p, F: Scalar>(
    problem: &'p Problem<'_, F>,
    b: usize,
) -> Result<SeqEdges<'p, F>> {
    Ok(match problem {
        Problem::Structured(p) => SeqEdges::Materialized(materialize(&one_sequence(p, b)?)),
        Problem::Edges(e) => SeqEdges::View(
            e.edges()
                .view()
                .index_axis_move(Axis(0), b)
                .slice_axis_move(Axis(0), Slice::from(..e.lengths()[b])),
        ),
    })
}

/// Rows `b..=b` and positions `..len` of a `(B, T, C)` tensor (the `s!` macro is avoided: it
/// expands to an `allow(unsafe_code)` that this crate's `forbid` rejects).
fn sequence_rows<'v, F>(x: &'v ArrayView3<'_, F>, b: usize, len: usize) -> ArrayView3<'v, F> {
    x.slice_axis(Axis(0), Slice::from(b..b + 1))
        .slice_axis_move(Axis(1), Slice::from(..len))
}

/// The structured potentials of sequence `b` alone: its first `L_b` positions, durations
/// `1..=min(K, L_b)` (the only ones a segmentation of `L_b` positions can use).
pub(crate) fn one_sequence<'p, F: Scalar>(
    p: &'p Potentials<'_, F>,
    b: usize,
) -> Result<Potentials<'p, F>> {
    let len = p.lengths()[b];
    let k = p.shape().max_duration.min(len);
    let mut builder =
        Potentials::builder(sequence_rows(p.scores(), b, len), &p.lengths()[b..=b], k);
    match p.transition() {
        Some(Transition::Static(t)) => builder = builder.transition(t.view()),
        Some(Transition::DurationDependent(t)) => {
            builder = builder.transition(t.slice_axis(Axis(0), Slice::from(..k)))
        }
        None => {}
    }
    if let Some(t) = p.duration() {
        builder = builder.duration(t.slice_axis(Axis(0), Slice::from(..k)));
    }
    if let Some(t) = p.start() {
        builder = builder.start(t.view());
    }
    if let Some(t) = p.end() {
        builder = builder.end(t.view());
    }
    if let Some(t) = p.begin_boundary() {
        builder = builder.begin_boundary(sequence_rows(t, b, len));
    }
    if let Some(t) = p.end_boundary() {
        builder = builder.end_boundary(sequence_rows(t, b, len));
    }
    builder.build()
}
