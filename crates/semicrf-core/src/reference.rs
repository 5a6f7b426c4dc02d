//! The f64 reference: brute-force enumeration of every segmentation, and a plain sequential
//! exact forward / backward / Viterbi over edges. Every backend is tested against it.
//!
//! Nothing here is fast, and that is the point: each function is the recurrence of the
//! [model page](crate::model) written as directly as possible, in `f64`, one sequence at a
//! time.
//!
//! ```
//! # mod semicrf { pub use ::ndarray; pub use semicrf_core::*; } // the facade's paths
//! use semicrf::ndarray::Array3;
//! use semicrf::{reference, Potentials};
//!
//! let scores = Array3::<f64>::zeros((1, 3, 2));
//! let lengths = [3];
//! let p = Potentials::builder(scores.view(), &lengths, 3).build()?;
//! // All 4 compositions of 3 positions times 2 labels per segment: 2 + 2·4 + 8 = 18 paths
//! // (1 segment: 2; 2 segments: 2 splits × 4; 3 segments: 8).
//! let bf = reference::brute_force(&p, 0)?;
//! assert!((bf.log_z - 18f64.ln()).abs() < 1e-12);
//! let edges = semicrf::materialize(&p);
//! assert!((reference::forward_log(edges.view(), &lengths)[0] - bf.log_z).abs() < 1e-12);
//! # Ok::<(), semicrf::Error>(())
//! ```

use ndarray::{Array2, Array5, ArrayView5};
use semicrf_semiring::kernels::logsumexp;
use semicrf_semiring::{LogSemiring, MaxSemiring, Semiring};

use crate::{
    Algorithm, Backward, ByteCount, Decoded, Device, EdgePotentials, Engine, EngineInfo, Error,
    Gradients, Potentials, Problem, Query, Result, Scalar, Segment, Shape, check_feasible,
    check_upstream, gold_score, gold_score_edges, materialize, pull_back, trace_back,
};

/// The largest number of segmentations [`brute_force`] enumerates before refusing.
pub const BRUTE_FORCE_LIMIT: u64 = 5_000_000;

/// The result of enumerating every segmentation of one sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct BruteForce {
    /// log-sum-exp of the scores of all segmentations.
    pub log_z: f64,
    /// The Shannon entropy (nats) of the posterior over segmentations,
    /// `Σ_y p(y) (log Z - score(y))`, each term in `f64` (0 when `log_z = -inf`).
    pub entropy: f64,
    /// The best score.
    pub max: f64,
    /// A best segmentation (the first found in enumeration order); empty if `max = -inf`.
    pub argmax: Vec<Segment>,
    /// How many segmentations were enumerated.
    pub count: u64,
}

/// The number of segmentations of `len` positions with durations `1..=k` and `c` labels
/// (saturating).
pub fn count_segmentations(len: usize, k: usize, c: usize) -> u64 {
    let mut n = vec![0u64; len + 1];
    n[0] = 1;
    for t in 1..=len {
        let mut x = 0u64;
        for d in 1..=k.min(t) {
            x = x.saturating_add(n[t - d].saturating_mul(c as u64));
        }
        n[t] = x;
    }
    n[len]
}

/// Calls `f` on every segmentation of `[0, len)` with durations `1..=k` and labels `0..c`.
pub fn for_each_segmentation(len: usize, k: usize, c: usize, mut f: impl FnMut(&[Segment])) {
    fn rec(
        pos: usize,
        len: usize,
        k: usize,
        c: usize,
        cur: &mut Vec<Segment>,
        f: &mut dyn FnMut(&[Segment]),
    ) {
        if pos == len {
            f(cur);
            return;
        }
        for d in 1..=k.min(len - pos) {
            for label in 0..c {
                cur.push(Segment::new(pos, d, label));
                rec(pos + d, len, k, c, cur, f);
                cur.pop();
            }
        }
    }
    rec(0, len, k, c, &mut Vec::new(), &mut f);
}

fn enumerate(
    sequence: usize,
    shape: Shape,
    len: usize,
    mut score: impl FnMut(&[Segment]) -> f64,
) -> Result<BruteForce> {
    let count = count_segmentations(len, shape.max_duration, shape.labels);
    if count > BRUTE_FORCE_LIMIT {
        return Err(Error::Unsupported {
            backend: "reference/brute-force".into(),
            what: format!(
                "{count} segmentations of sequence {sequence} (limit {BRUTE_FORCE_LIMIT})"
            ),
        });
    }
    let mut scores = Vec::with_capacity(count as usize);
    let mut best = f64::NEG_INFINITY;
    let mut argmax = Vec::new();
    for_each_segmentation(len, shape.max_duration, shape.labels, |segs| {
        let s = score(segs);
        if s > best {
            best = s;
            argmax = segs.to_vec();
        }
        scores.push(s);
    });
    let log_z = logsumexp(&scores);
    let entropy = if log_z == f64::NEG_INFINITY {
        0.0
    } else {
        scores
            .iter()
            .filter(|s| s.is_finite())
            .map(|&s| (s - log_z).exp() * (log_z - s))
            .sum()
    };
    Ok(BruteForce {
        log_z,
        entropy,
        max: best,
        argmax,
        count,
    })
}

/// Enumerates every segmentation of sequence `b` of structured potentials, scoring each with
/// [`gold_score`] (the formula of model §2, independent of materialisation).
pub fn brute_force<F: Scalar>(p: &Potentials<'_, F>, b: usize) -> Result<BruteForce> {
    let len = p.lengths()[b];
    enumerate(b, p.shape(), len, |segs| {
        gold_score(p, b, segs).expect("enumerated segmentations are valid")
    })
}

/// Enumerates every segmentation of sequence `b` of edge potentials (first segment summed over
/// the virtual start's sources for `log_z`, maxed for `max`). The `entropy` is that of the
/// posterior over segmentations, the virtual start's sources of the first segment merged.
pub fn brute_force_edges<F: Scalar>(p: &EdgePotentials<'_, F>, b: usize) -> Result<BruteForce> {
    let len = p.lengths()[b];
    let mut bf = enumerate(b, p.shape(), len, |segs| {
        gold_score_edges::<LogSemiring, F>(p, b, segs).expect("valid")
    })?;
    let max = enumerate(b, p.shape(), len, |segs| {
        gold_score_edges::<MaxSemiring, F>(p, b, segs).expect("valid")
    })?;
    bf.max = max.max;
    bf.argmax = max.argmax;
    Ok(bf)
}

/// `α_t(j)` for `t = 0..=len` of one sequence in semiring `S`, with `α_0(i) = one` (the
/// virtual start; the sources of a first segment are merged into one item of log-weight
/// `⊕_i edges`, so that every segmentation is one item). `alpha[[t, j]]`.
fn alpha<S: Semiring>(e: &ArrayView5<'_, f64>, b: usize, len: usize) -> Array2<S::Value> {
    let (_, _, k, c, _) = e.dim();
    let mut a = Array2::from_elem((len + 1, c), S::zero());
    a.row_mut(0).fill(S::one());
    // Every term of one (t, j) goes into a single ⊕ over a slice (one rounding per cell, not
    // one per term), so the oracle stays accurate at T = 10^5 and beyond.
    let mut terms = Vec::with_capacity(k * c);
    for t in 1..=len {
        for j in 0..c {
            terms.clear();
            for d in 1..=k.min(t) {
                let from = terms.len();
                for i in 0..c {
                    terms.push(S::shift(a[[t - d, i]], e[[b, t - d, d - 1, j, i]]));
                }
                if t == d {
                    // The virtual start's sources of a first segment are one segmentation.
                    let first = S::lift(S::weight(S::sum(&mut terms[from..])));
                    terms.truncate(from);
                    terms.push(first);
                }
            }
            a[[t, j]] = S::sum(&mut terms);
        }
    }
    a
}

/// `⊕`-sum over segmentations of every sequence in semiring `S`, from an `f64` edge tensor.
pub fn forward<S: Semiring>(edges: ArrayView5<'_, f64>, lengths: &[usize]) -> Vec<S::Value> {
    lengths
        .iter()
        .enumerate()
        .map(|(b, &len)| {
            let a = alpha::<S>(&edges, b, len);
            S::sum(&mut a.row(len).to_vec())
        })
        .collect()
}

/// log Z of every sequence, from an `f64` edge tensor.
pub fn forward_log(edges: ArrayView5<'_, f64>, lengths: &[usize]) -> Vec<f64> {
    forward::<LogSemiring>(edges, lengths)
}

/// log Z and edge marginals `μ[b, s, d-1, j, i] = exp(α_s(i) + edges + β_{s+d}(j) - log Z)`
/// of every sequence (marginals of sequences with log Z = `-inf` are 0).
pub fn edge_marginals(edges: ArrayView5<'_, f64>, lengths: &[usize]) -> (Vec<f64>, Array5<f64>) {
    let (bn, t, k, c, _) = edges.dim();
    let mut mu = Array5::<f64>::zeros((bn, t, k, c, c));
    let mut log_z = Vec::with_capacity(bn);
    for (b, &len) in lengths.iter().enumerate() {
        let a = alpha::<LogSemiring>(&edges, b, len);
        let z = LogSemiring::sum(&mut a.row(len).to_vec());
        log_z.push(z);
        if z == f64::NEG_INFINITY {
            continue;
        }
        // β_s(i): log-sum over the rest of the sequence after a segment of label i ends at s.
        let mut beta = Array2::from_elem((len + 1, c), f64::NEG_INFINITY);
        beta.row_mut(len).fill(0.0);
        let mut terms = Vec::with_capacity(k * c);
        for s in (1..len).rev() {
            for i in 0..c {
                terms.clear();
                for d in 1..=k.min(len - s) {
                    for j in 0..c {
                        terms.push(edges[[b, s, d - 1, j, i]] + beta[[s + d, j]]);
                    }
                }
                beta[[s, i]] = LogSemiring::sum(&mut terms);
            }
        }
        for s in 0..len {
            for d in 1..=k.min(len - s) {
                for j in 0..c {
                    for i in 0..c {
                        let x = a[[s, i]] + edges[[b, s, d - 1, j, i]] + beta[[s + d, j]] - z;
                        mu[[b, s, d - 1, j, i]] = x.exp();
                    }
                }
            }
        }
    }
    (log_z, mu)
}

/// Viterbi over an `f64` edge tensor. Ties: smaller duration, then smaller previous label;
/// the final label is the smallest best one.
pub fn viterbi(edges: ArrayView5<'_, f64>, lengths: &[usize]) -> Vec<Decoded> {
    let (_, _, k, c, _) = edges.dim();
    lengths
        .iter()
        .enumerate()
        .map(|(b, &len)| {
            let mut a = Array2::from_elem((len + 1, c), f64::NEG_INFINITY);
            let mut bp = Array2::from_elem((len + 1, c), (0usize, 0usize));
            a.row_mut(0).fill(0.0);
            for t in 1..=len {
                for j in 0..c {
                    let mut best = f64::NEG_INFINITY;
                    let mut arg = (0, 0);
                    for d in 1..=k.min(t) {
                        for i in 0..c {
                            let x = a[[t - d, i]] + edges[[b, t - d, d - 1, j, i]];
                            if x > best {
                                best = x;
                                arg = (d, i);
                            }
                        }
                    }
                    a[[t, j]] = best;
                    bp[[t, j]] = arg;
                }
            }
            let mut score = f64::NEG_INFINITY;
            let mut j = 0;
            for (jj, &x) in a.row(len).iter().enumerate() {
                if x > score {
                    score = x;
                    j = jj;
                }
            }
            if score == f64::NEG_INFINITY {
                return Decoded {
                    score,
                    segments: Vec::new(),
                };
            }
            let segments = trace_back(len, j, |t, j| bp[[t, j]]);
            Decoded { score, segments }
        })
        .collect()
}

/// The reference as an [`Engine`] (named `reference`): materialises structured input and runs
/// the plain recurrences above. Unlimited shapes in principle; meant for small problems.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reference;

fn edges_f64<F: Scalar>(p: &Problem<'_, F>) -> Array5<f64> {
    match p {
        Problem::Structured(p) => materialize(p),
        Problem::Edges(p) => p.edges().mapv(Scalar::as_f64),
    }
}

impl EngineInfo for Reference {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Exact
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn name(&self) -> String {
        "reference".into()
    }
    fn check(&self, _query: &Query) -> Result<()> {
        Ok(())
    }
    /// Twice the materialised edge tensor (edges and their marginals).
    fn memory_required(&self, query: &Query) -> Result<u64> {
        let sh = query.shape;
        (ByteCount::f64s(&[sh.batch, sh.len, sh.max_duration, sh.labels, sh.labels]) * 2)
            .finish("reference", sh)
    }
}

impl<F: Scalar> Engine<F> for Reference {
    fn forward<S: Semiring>(&self, problem: &Problem<'_, F>) -> Result<Vec<S::Value>> {
        crate::range::check_semiring::<S, F>(problem)?;
        let e = edges_f64(problem);
        Ok(forward::<S>(e.view(), problem.lengths()))
    }
    fn backward(&self, problem: &Problem<'_, F>, upstream: &[f64]) -> Result<Backward> {
        check_upstream(upstream, problem.shape().batch)?;
        crate::range::check_probabilities(problem)?;
        let e = edges_f64(problem);
        let (log_z, mut mu) = edge_marginals(e.view(), problem.lengths());
        check_feasible(&log_z)?;
        let boundary_marginals = crate::boundary_marginals_from_edges(mu.view());
        for (b, &g) in upstream.iter().enumerate() {
            mu.index_axis_mut(ndarray::Axis(0), b)
                .mapv_inplace(|x| x * g);
        }
        let grad = match problem {
            Problem::Structured(p) => pull_back(p, mu.view()),
            Problem::Edges(_) => Gradients {
                edges: Some(mu),
                ..Gradients::default()
            },
        };
        Ok(Backward {
            log_z,
            grad,
            boundary_marginals,
        })
    }
    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        let e = edges_f64(problem);
        Ok(viterbi(e.view(), problem.lengths()))
    }
}
