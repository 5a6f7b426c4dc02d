//! The numeric range: how large potentials may be for results to be trusted.
//!
//! Every engine computes in `f64` log space, where a value of magnitude `M` carries an
//! absolute rounding error of about `2⁻⁵³·M`. The quantities added and subtracted on the way
//! (prefix sums, forward and backward tables, log Z) are as large as the score of a
//! segmentation, so what matters is not one potential but the largest magnitude a
//! segmentation of the sequence can score. For sequence `b` of length `L` that is at most
//!
//! ```text
//! M_b = Σ_{t<L} ( max_c |scores[b,t,c]| + max_c |begin_boundary[b,t,c]| + max_c |end_boundary[b,t,c]| )
//!     + L · ( max |transition| + max |duration| ) + max |start| + max |end|
//! ```
//!
//! over finite entries (`-inf` forbids and never enters a sum); for edge potentials
//! `M_b = Σ_{s<L} max |edges[b, s, d-1, j, i]|` over the segments that fit. Two limits follow:
//!
//! - **finite results** ([`SCORE_LIMIT`]): every result (log Z, Viterbi, gradients) needs
//!   `M_b ≤ 10³⁰⁰`, far from `f64` overflow; [`Potentials`] and
//!   [`EdgePotentials`] refuse more when they are built. log Z and the
//!   Viterbi score are then accurate to about `2⁻⁴⁵·M_b` absolute.
//! - **probabilities** ([`PRECISE_LIMIT`]): gradients, marginals and entropies are differences
//!   of such large numbers, exponentiated. Their error grows as `2⁻⁵³·M_b·√L` (measured: with
//!   every segmentation scoring the same, the hardest case, at the limit the position
//!   marginals sum to 1 within 9·10⁻⁵ up to `L = 10⁶`). [`check_probabilities`] refuses
//!   `M_b·√L > 2³⁴`; every engine calls it before a backward pass or an entropy.
//!
//! Within both limits the promises of `GUARANTEES.md` (repository root) hold. Beyond them the
//! error ([`Error::Magnitude`]) names the sequence, its bound and its largest potential;
//! rescale the potentials, or forbid with `-inf` rather than a large negative number.

use ndarray::{ArrayView, Axis, Dimension, IntoDimension, Slice};

use crate::{EdgePotentials, Error, Potentials, Problem, Result, Scalar};

/// The largest `M_b` (see the [module](self)) any result accepts: `10³⁰⁰`.
pub const SCORE_LIMIT: f64 = 1e300;

/// The largest `M_b·√L_b` (see the [module](self)) for gradients, marginals and entropies:
/// `2³⁴ ≈ 1.7·10¹⁰` (for example `M_b ≤ 1.7·10⁷` at `L = 10⁶`, `1.7·10¹⁰` at `L = 1`).
pub const PRECISE_LIMIT: f64 = 17_179_869_184.0;

/// The largest finite potential, by magnitude, that enters a sequence's bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Largest {
    /// Name of the tensor.
    pub tensor: &'static str,
    /// Its multi-index.
    pub index: Vec<usize>,
    /// Its value.
    pub value: f64,
}

/// The magnitude bound of one sequence: no segmentation scores more than `bound` in absolute
/// value.
#[derive(Clone, Debug, PartialEq)]
pub struct Magnitude {
    /// `M_b` (see the [module](self)); `+inf` if the sum overflows.
    pub bound: f64,
    /// The largest finite potential in the bound (`None` when every entry is 0 or `-inf`).
    pub largest: Option<Largest>,
}

/// Running maximum of `|x|` over finite entries, with where it was.
#[derive(Default)]
struct Max {
    abs: f64,
    at: Option<Largest>,
}

impl Max {
    fn of<F: Scalar, D: Dimension>(tensor: &'static str, v: &ArrayView<'_, F, D>) -> Max {
        let mut m = Max::default();
        m.scan(tensor, v, &[]);
        m
    }

    /// Scans `v`, whose indices follow `prefix` in the full tensor.
    fn scan<F: Scalar, D: Dimension>(
        &mut self,
        tensor: &'static str,
        v: &ArrayView<'_, F, D>,
        prefix: &[usize],
    ) {
        // The magnitude first, in memory order; the index only when it grows.
        let best = max_abs(v);
        if best <= self.abs {
            return;
        }
        self.abs = best;
        let (idx, &x) = v
            .indexed_iter()
            .find(|(_, x)| x.as_f64().abs() == best)
            .expect("the maximum was seen in memory order");
        let mut index = prefix.to_vec();
        index.extend(idx.into_dimension().as_array_view().iter());
        self.at = Some(Largest {
            tensor,
            index,
            value: x.as_f64(),
        });
    }

    fn merge(&mut self, other: &Max) {
        if other.abs > self.abs {
            self.abs = other.abs;
            self.at.clone_from(&other.at);
        }
    }
}

/// The largest finite `|x|` of `v` (0 if there is none), in memory order.
fn max_abs<F: Scalar, D: Dimension>(v: &ArrayView<'_, F, D>) -> f64 {
    let fold = |m: f64, x: &F| {
        let a = x.as_f64().abs();
        if a.is_finite() { m.max(a) } else { m }
    };
    match v.as_slice_memory_order() {
        Some(s) => s.iter().fold(0.0, fold),
        None => v.iter().fold(0.0, fold),
    }
}

/// The part of every sequence's bound (see the [module](self)) that the shared parameters
/// give: `M_b = once + L_b · per_segment + Σ_t (the position tensors' largest entries)`.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedBound {
    /// `max |start| + max |end|`.
    pub once: f64,
    /// `max |transition| + max |duration|`.
    pub per_segment: f64,
    /// The largest of the parameters' finite entries (`None` when all are 0 or `-inf`).
    pub largest: Option<Largest>,
}

impl SharedBound {
    /// The magnitude of [`SharedBound::largest`] (0 without one).
    pub fn largest_abs(&self) -> f64 {
        self.largest.as_ref().map_or(0.0, |l| l.value.abs())
    }

    /// A sequence of length `len`'s bound before its position tensors.
    pub fn start(&self, len: usize) -> f64 {
        self.once + len as f64 * self.per_segment
    }
}

/// The shared parameters' part of the bounds of `p` (transition, duration, start, end):
/// with the largest entry of every position of the position tensors (scores and boundaries),
/// added in the order of [`Potentials::magnitudes`] (scores, then the begin boundary, then the
/// end boundary, each in position order), it gives each sequence's bound, as an engine
/// holding those tensors elsewhere (a GPU) computes it.
pub fn shared_bound<F: Scalar>(p: &Potentials<'_, F>) -> SharedBound {
    shared_bound_of(&p.shared())
}

/// [`shared_bound`] of shared parameters held apart from any position-wise tensor (a
/// [`StreamedPotentials`](crate::StreamedPotentials) problem).
pub fn shared_bound_of<F: Scalar>(p: &crate::SharedParams<'_, F>) -> SharedBound {
    // Shared tensors: once.
    let mut per_segment = Max::default();
    let mut per_segment_sum = 0.0;
    match p.transition() {
        Some(crate::Transition::Static(v)) => {
            let m = Max::of("transition", v);
            per_segment_sum += m.abs;
            per_segment.merge(&m);
        }
        Some(crate::Transition::DurationDependent(v)) => {
            let m = Max::of("transition", v);
            per_segment_sum += m.abs;
            per_segment.merge(&m);
        }
        None => {}
    }
    if let Some(v) = p.duration() {
        let m = Max::of("duration", v);
        per_segment_sum += m.abs;
        per_segment.merge(&m);
    }
    let mut once = Max::default();
    let mut once_sum = 0.0;
    for (name, v) in [("start", p.start()), ("end", p.end())] {
        if let Some(v) = v {
            let m = Max::of(name, v);
            once_sum += m.abs;
            once.merge(&m);
        }
    }
    once.merge(&per_segment);
    SharedBound {
        once: once_sum,
        per_segment: per_segment_sum,
        largest: once.at,
    }
}

/// Per-sequence bounds of structured potentials.
pub(crate) fn structured<F: Scalar>(p: &Potentials<'_, F>) -> Vec<Magnitude> {
    let shared = shared_bound(p);
    let once = Max {
        abs: shared.largest_abs(),
        at: shared.largest.clone(),
    };
    let tensors = [
        ("scores", Some(p.scores())),
        ("begin_boundary", p.begin_boundary()),
        ("end_boundary", p.end_boundary()),
    ];
    p.lengths()
        .iter()
        .enumerate()
        .map(|(b, &len)| {
            let mut m = Max::default();
            m.merge(&once);
            let mut bound = shared.start(len);
            for (name, v) in tensors {
                let Some(v) = v else { continue };
                let seq = v.index_axis(Axis(0), b);
                let seq = seq.slice_axis(Axis(0), Slice::from(..len));
                // One pass: each position's largest entry adds to the bound; only the row
                // holding the largest of all is searched again, for its index.
                let (mut top, mut top_row) = (0.0, 0);
                for (t, row) in seq.outer_iter().enumerate() {
                    let r = max_abs(&row);
                    bound += r;
                    if r > top {
                        (top, top_row) = (r, t);
                    }
                }
                if top > m.abs {
                    m.scan(name, &seq.index_axis(Axis(0), top_row), &[b, top_row]);
                }
            }
            Magnitude {
                bound,
                largest: m.at,
            }
        })
        .collect()
}

/// Per-sequence bounds of edge potentials.
pub(crate) fn edges<F: Scalar>(p: &EdgePotentials<'_, F>) -> Vec<Magnitude> {
    let k = p.shape().max_duration;
    p.lengths()
        .iter()
        .enumerate()
        .map(|(b, &len)| {
            let seq = p.edges().index_axis(Axis(0), b);
            let mut m = Max::default();
            let mut bound = 0.0;
            for s in 0..len {
                // Only the segments that fit: `s + d ≤ L`.
                let fits = seq.index_axis(Axis(0), s);
                let fits = fits.slice_axis(Axis(0), Slice::from(..k.min(len - s)));
                let top = max_abs(&fits);
                bound += top;
                if top > m.abs {
                    m.scan("edges", &fits, &[b, s]);
                }
            }
            Magnitude {
                bound,
                largest: m.at,
            }
        })
        .collect()
}

/// Refuses a sequence whose bound exceeds `limit_of(length)`.
fn check(
    magnitudes: &[Magnitude],
    lengths: &[usize],
    limit_of: impl Fn(usize) -> f64,
    what: &'static str,
) -> Result<()> {
    for (sequence, (m, &len)) in magnitudes.iter().zip(lengths).enumerate() {
        let limit = limit_of(len);
        // A NaN bound (which finite inputs cannot make) is refused too.
        if m.bound > limit || m.bound.is_nan() {
            let at = m.largest.clone().unwrap_or(Largest {
                tensor: "scores",
                index: vec![sequence],
                value: 0.0,
            });
            return Err(Error::Magnitude {
                sequence,
                bound: m.bound,
                limit,
                what,
                tensor: at.tensor,
                index: at.index,
                value: at.value,
            });
        }
    }
    Ok(())
}

/// Fails with [`Error::Magnitude`] naming the first sequence whose bound exceeds
/// [`SCORE_LIMIT`] (called when potentials are built).
pub fn check_finite_results(magnitudes: &[Magnitude], lengths: &[usize]) -> Result<()> {
    check(
        magnitudes,
        lengths,
        |_| SCORE_LIMIT,
        "any result stays finite",
    )
}

/// The largest bound `M_b` for which gradients, marginals and entropies of a sequence of
/// length `len` are promised: `PRECISE_LIMIT / √len`.
pub fn probability_limit(len: usize) -> f64 {
    PRECISE_LIMIT / (len.max(1) as f64).sqrt()
}

/// [`check_probabilities`] where semiring `S` computes an entropy (the log and max semirings'
/// forward passes need only [`SCORE_LIMIT`], checked when the potentials were built).
pub fn check_semiring<S: crate::Semiring, F: Scalar>(problem: &Problem<'_, F>) -> Result<()> {
    check_semiring_of::<S>(problem.magnitudes(), problem.lengths())
}

/// [`check_semiring`] for bounds computed elsewhere (for potentials held on a GPU).
pub fn check_semiring_of<S: crate::Semiring>(
    magnitudes: &[Magnitude],
    lengths: &[usize],
) -> Result<()> {
    if S::NAME == <crate::EntropySemiring as crate::Semiring>::NAME {
        check_probabilities_of(magnitudes, lengths)
    } else {
        Ok(())
    }
}

/// Fails with [`Error::Magnitude`] naming the first sequence whose bound exceeds
/// [`probability_limit`]: its gradients, marginals and entropy would not keep their accuracy
/// (see the [module](self)). Every engine calls this before a backward pass or an entropy.
pub fn check_probabilities<F: Scalar>(problem: &Problem<'_, F>) -> Result<()> {
    check_probabilities_of(problem.magnitudes(), problem.lengths())
}

/// [`check_probabilities`] for bounds computed elsewhere (for potentials held on a GPU).
pub fn check_probabilities_of(magnitudes: &[Magnitude], lengths: &[usize]) -> Result<()> {
    check(
        magnitudes,
        lengths,
        probability_limit,
        "gradients, marginals and entropies keep their accuracy",
    )
}
