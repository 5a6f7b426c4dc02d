//! Posterior decoding (model §7, "Posterior decoding"): the segmentation that maximises the
//! expected number of correctly labelled positions under the posterior, as the Viterbi
//! decoding of a derived problem, on any [`Engine`].
//!
//! Under the posterior `p(y)`, the expected number of positions `t` whose label in `y` is
//! the true one is `Σ_t p(y_t = c_t)`, a sum of position marginals along `y`. So it is the
//! score of `y` in a derived problem whose position scores are the marginals and whose
//! other potentials keep only what is forbidden: every `-inf` stays `-inf` (a segmentation
//! the model forbids stays forbidden), every finite value becomes 0. One backward pass
//! gives the marginals and one Viterbi pass the decoding, on whichever engine runs them.

use ndarray::{Array3, Array5, ArrayD, ArrayView, Axis, Dimension};

use crate::{
    Backward, Decoded, EdgePotentials, Engine, Error, OwnedPotentials, Potentials, Problem, Result,
    Scalar, Transition, position_marginals_from_edges,
};

const NEG: f64 = f64::NEG_INFINITY;

/// The derived problem of posterior decoding, owned: structured potentials for structured
/// input, edges for edge input, in `f64`.
#[derive(Clone, Debug, PartialEq)]
pub enum PosteriorProblem {
    /// Position scores `p(y_t = c)` (`-inf` where the input's score is `-inf`), the other
    /// tensors 0 or `-inf`.
    Structured(Box<OwnedPotentials<f64>>),
    /// `edges'[b, s, d-1, j, i] = Σ_{t = s}^{s+d-1} p(y_t = j)`, `-inf` where the input's
    /// edge is `-inf`.
    Edges {
        /// `(B, T, K, C, C)`.
        edges: Array5<f64>,
        /// `(B)`.
        lengths: Vec<usize>,
    },
}

impl PosteriorProblem {
    /// The derived problem of `problem` from its backward pass with an upstream of ones
    /// (`backward.grad.scores` for structured input, `backward.grad.edges` for edges).
    /// [`Error::Unsupported`] if the gradient it needs is missing.
    pub fn new<F: Scalar>(problem: &Problem<'_, F>, backward: &Backward) -> Result<Self> {
        let missing = |what: &str| Error::Unsupported {
            backend: "posterior decoding".into(),
            what: format!("a backward pass without {what}"),
        };
        match problem {
            Problem::Structured(p) => {
                let position = backward
                    .grad
                    .scores
                    .as_ref()
                    .ok_or_else(|| missing("position marginals"))?;
                Ok(PosteriorProblem::Structured(Box::new(structured(
                    p, position,
                ))))
            }
            Problem::Edges(e) => {
                let mu = backward
                    .grad
                    .edges
                    .as_ref()
                    .ok_or_else(|| missing("edge marginals"))?;
                let position = position_marginals_from_edges(mu.view());
                Ok(PosteriorProblem::Edges {
                    edges: edges(e, &position),
                    lengths: e.lengths().to_vec(),
                })
            }
        }
    }

    /// The derived problem as a validated [`Problem`].
    pub fn view(&self) -> Result<Problem<'_, f64>> {
        Ok(match self {
            PosteriorProblem::Structured(p) => p.view()?.into(),
            PosteriorProblem::Edges { edges, lengths } => {
                EdgePotentials::new(edges.view(), lengths)?.into()
            }
        })
    }
}

/// 0 for a finite value, `-inf` for `-inf`.
fn feasibility<F: Scalar, D: Dimension>(a: &ArrayView<'_, F, D>) -> ArrayD<f64> {
    a.mapv(|x| if x.as_f64() == NEG { NEG } else { 0.0 })
        .into_dyn()
}

fn structured<F: Scalar>(p: &Potentials<'_, F>, position: &Array3<f64>) -> OwnedPotentials<f64> {
    let sh = p.shape();
    let scores = Array3::from_shape_fn((sh.batch, sh.len, sh.labels), |(b, t, c)| {
        if t >= p.lengths()[b] {
            0.0
        } else if p.scores()[[b, t, c]].as_f64() == NEG {
            NEG
        } else {
            position[[b, t, c]]
        }
    });
    let mut out = OwnedPotentials::new(scores.into_dyn(), p.lengths().to_vec(), sh.max_duration);
    out.transition = p.transition().map(|t| match t {
        Transition::Static(m) => feasibility(m),
        Transition::DurationDependent(m) => feasibility(m),
    });
    out.duration = p.duration().map(feasibility);
    out.start = p.start().map(feasibility);
    out.end = p.end().map(feasibility);
    out.begin_boundary = p.begin_boundary().map(feasibility);
    out.end_boundary = p.end_boundary().map(feasibility);
    out
}

fn edges<F: Scalar>(e: &EdgePotentials<'_, F>, position: &Array3<f64>) -> Array5<f64> {
    let src = e.edges();
    let (bn, t, k, c, _) = src.dim();
    let mut out = Array5::<f64>::from_elem((bn, t, k, c, c), NEG);
    for b in 0..bn {
        let len = e.lengths()[b];
        let mut prefix = vec![0.0; (len + 1) * c];
        for u in 0..len {
            for j in 0..c {
                prefix[(u + 1) * c + j] = prefix[u * c + j] + position[[b, u, j]];
            }
        }
        let mut seq = out.index_axis_mut(Axis(0), b);
        for s in 0..len {
            for d in 1..=k.min(len - s) {
                for j in 0..c {
                    let content = prefix[(s + d) * c + j] - prefix[s * c + j];
                    for i in 0..c {
                        if src[[b, s, d - 1, j, i]].as_f64() != NEG {
                            seq[[s, d - 1, j, i]] = content;
                        }
                    }
                }
            }
        }
    }
    out
}

/// The posterior decoding of every sequence on `engine`: one backward pass of `problem`
/// (upstream ones) and one Viterbi pass of its [`PosteriorProblem`]. Each decoding's score
/// is its expected number of correctly labelled positions. Fails with
/// [`Error::Infeasible`] when some `log Z_b = -inf` (no posterior), as the backward does.
///
/// ```
/// # mod semicrf { pub use ::ndarray; pub use semicrf_core::*; } // the facade's paths
/// use semicrf::ndarray::Array3;
/// use semicrf::{posterior_decode, reference::Reference, Potentials, Problem};
///
/// let scores = Array3::<f64>::from_shape_vec((1, 3, 2), vec![2., 0., 0., 1., 2., 0.])?;
/// let lengths = [3];
/// let p: Problem<f64> = Potentials::builder(scores.view(), &lengths, 2).build()?.into();
/// let best = posterior_decode(&Reference, &p)?;
/// assert!(best[0].score > 1.5 && best[0].score <= 3.0); // expected correct positions
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn posterior_decode<F: Scalar, E: Engine<F> + Engine<f64>>(
    engine: &E,
    problem: &Problem<'_, F>,
) -> Result<Vec<Decoded>> {
    let ones = vec![1.0; problem.shape().batch];
    let backward = Engine::<F>::backward(engine, problem, &ones)?;
    let derived = PosteriorProblem::new(problem, &backward)?;
    Engine::<f64>::viterbi(engine, &derived.view()?)
}
