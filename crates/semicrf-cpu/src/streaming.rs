//! The streaming algorithm on the CPU: structured potentials, edges never materialised.
//!
//! # Recurrences (SPEC §3–§5)
//!
//! With `P[t, c] = Σ_{u<t} scores[u, c]` (prefix sums in `f64`) and
//! `seg(s, d, j) = P[s+d, j] - P[s, j] + duration[d-1, j] + begin_boundary[s, j]
//! + end_boundary[s+d-1, j]`, the forward pass for a static `(C, C)` transition is
//!
//! ```text
//! u_0(j) = start[j],        u_s(j) = ⊕_i α_s(i) ⊗ transition[i, j]          (s ≥ 1)
//! α_t(j) = ⊕_{d=1..min(K,t)} u_{t-d}(j) ⊗ seg(t-d, d, j)
//! log Z  = ⊕_j α_L(j) ⊗ end[j]
//! ```
//!
//! The ring holds, per label and for the last `K` starts, `v_s(j) = u_s(j) +
//! begin_boundary[s, j] - P[s, j]`, so that `α_t(j) = P[t, j] + end_boundary[t-1, j] +
//! ⊕_d (v_{t-d}(j) ⊗ duration[d-1, j])`: a log-sum-exp of two contiguous slices (the ring is
//! stored twice over, so the window of the last `K` starts never wraps).
//!
//! The prefix sums are re-anchored after every `K` positions (each label whose `|P|` exceeds
//! 1024; below that its rounding is negligible): the label's `P` restarts from 0 and its
//! ring entries (and the reference `ρ_j` of their linear twins) take the
//! difference on board, so that `|P|` in every stored value stays below `1024 + 2K · max
//! |score|`. Differences `P[t] - P[s]` of the global prefix sums would carry an
//! absolute error of about `ulp(T · max |score|)` (large scores compensated by durations
//! make `log Z` small while `P` grows with `T`); relative to a recent origin the error is
//! about `ulp(K · max |score|)`, next to `ulp(|α|)` from the recurrence itself. The backward
//! pass moves its ring back to the earlier origin at the same positions by the same amounts.
//!
//! `-inf` scores are legal and forbid a label at a position. The prefix sums keep only the
//! finite part; instead of differencing infinities (`-inf - -inf` is NaN) each label tracks the
//! last position with a `-inf` score, and the window of admissible durations ends there.
//!
//! With a duration-dependent `(K, C, C)` transition the factorization does not apply: the
//! ring holds `α_s` and `α_t(j) = ⊕_{d} ⊕_i α_{t-d}(i) ⊗ transition[d-1, i, j] ⊗ seg(t-d, d, j)`
//! (with `start[j]` in place of the inner sum when `t-d = 0`).
//!
//! The backward pass mirrors it: `β_L(j) = end[j]`,
//! `γ_s(j) = ⊕_d seg(s, d, j) ⊗ β_{s+d}(j)` and `β_s(i) = ⊕_j transition[i, j] ⊗ γ_s(j)`,
//! with a ring of `β_e(j) + P[e, j] + end_boundary[e-1, j]`. Gradients are expected counts:
//! duration `Σ_s exp(u_s + seg + β_{s+d} - log Z)`, transition
//! `Σ_s exp(α_s(i) + transition[i, j] + γ_s(j) - log Z)`, begin boundary `exp(u_s + γ_s -
//! log Z)`, end boundary `exp(α_e + β_e - log Z)`, and the position marginals (the gradient of
//! the scores) `Σ_{s ≤ t < s+d} μ(s, d, c)`, kept as differences in the output (each segment
//! marginal added at its start and subtracted, as the very same number, after its end) and
//! summed once at the end, so only summation rounding remains (no drift with `T`). Shared parameters are summed per sequence and then
//! over the batch in ascending order, so results are bitwise identical for every thread
//! count.
//!
//! Viterbi runs the max semiring and keeps, per position and label, the best duration of a
//! segment ending there and the best previous label of a segment starting there (`O(T·C)`
//! 32-bit integers). Ties: the smaller duration, then the smaller previous label; the final
//! label is the smallest best index.
//!
//! # Checkpoints
//!
//! The backward pass first runs the forward pass, saving the forward state (ring and, for the
//! log semiring, its linear twin and references; re-anchored prefix sums; last `-inf`
//! positions) every `Δ` positions. Then, for each interval from the last to the first, it
//! restores the checkpoint, recomputes `α`, `u` and `P` inside the interval (`O(Δ·C)`) and
//! runs `β` down through it with its own ring. `Δ` is [`StreamingEngine::checkpoint_interval`]
//! or, by default, `max(K, ⌈sqrt(T·K)⌉)`.
//!
//! A checkpoint is an exact copy of the forward state, so the recomputed intervals are
//! bitwise those of the first pass and every result is bitwise independent of `Δ`. SPEC §4
//! asks for saved rings normalised by a running maximum with the shift kept apart; that is
//! not done here, deliberately: a shift shared by all entries costs each restored entry an
//! absolute error of about `ulp(|shift|)` (a label with very large entries then degrades the
//! others), and a per-label shift still rounds `(v - m) + m`. The stored entries are `f64`,
//! the values of the forward state itself, and their `P`-part is already relative to a
//! recent origin (re-anchoring above), so there is nothing to overflow that the forward pass
//! would not overflow.
//!
//! # Cost per sequence
//!
//! | | time | working memory |
//! |---|---|---|
//! | forward, static transition | `O(T·C·(C+K))` | `O(K·C)` |
//! | forward, `(K, C, C)` transition | `O(T·K·C²)` | `O(K·C)` |
//! | forward + backward | about 3× the forward (`O(T·C·(C+K))`) | `O(K·C + (T/Δ)·K·C + Δ·C)`, `O(sqrt(T·K)·C)` at the default `Δ` |
//! | Viterbi | the forward | `O(K·C)` + `8·T·C` bytes of backpointers |
//!
//! [`StreamingEngine::memory_bytes`] gives the exact formula used by
//! [`Engine::memory_required`].
//!
//! # Numerics
//!
//! Everything inside is `f64`, whatever the input type. The log-semiring loops with a static
//! transition run in the linear domain, which needs far fewer `exp` and `ln` evaluations
//! than a log-sum-exp per term (`4C` per position instead of `C² + K·C`):
//!
//! - each ring (forward `v`, backward `w`) has a linear twin `exp(x - ρ_j)` with a reference
//!   `ρ_j` per label, so the duration step is a dot product with `exp(duration - max_d
//!   duration)`; a new entry more than `e^600` above `ρ_j` re-bases the label (its window is
//!   recomputed from the log ring), so no sum can overflow;
//! - the transition step is a matrix-vector product of `exp(α - max α)` with
//!   `exp(transition - column max)`;
//! - marginals are products of the same linear factors and one `exp` per label.
//!
//! Soundness does not depend on the input range. A matrix-vector sum (factors `<= 1`) is
//! used only when it is at least `1e-280`, so every term lost to underflow (each below
//! `3e-308`) is negligible; a ring dot product only when it is at least `1e-30·K`, because a
//! ring entry may be up to `e^600` while its duration weight underflows (a lost term is then
//! below `1.1e-47`); a marginal scale factor only when its exponent is at most 700. Otherwise
//! the label is re-based and, if that is not enough, the value is computed exactly in the log
//! domain (a log-sum-exp that
//! subtracts its maximum and returns `-inf` when the maximum is `-inf`). The max semiring,
//! Viterbi and the duration-dependent transition always run in the log domain. No value is
//! ever clamped; `exp` and `ln` are branch-free polynomials that vectorise (relative error
//! about `2e-15` and `1e-16`).
//!
//! The gradient of the scores adds and subtracts identical segment marginals, so its error
//! is that of a running sum of numbers below 1, not of `exp` of large log-values.

mod seq;

use ndarray::{Array1, Array2, Array3, ArrayD, IxDyn};
use rayon::prelude::*;
use semicrf_core::{
    Algorithm, Backward, Decoded, Device, Engine, Error, Form, Gradients, Op, Potentials, Problem,
    Query, Result, Scalar, SemiringKind, Shape, check_feasible, check_upstream,
};

use crate::{Parallelism, map_indexed};
use seq::{Fwd, Params, Partials, SeqIn, SeqOut};

/// The streaming engine on the CPU: the factorized `O(T·C·(C+K))` recurrence over structured
/// potentials, with a checkpointed backward pass in `O(sqrt(T·K)·C)` memory per sequence.
///
/// ```
/// use ndarray::{Array2, Array3};
/// use semicrf_core::{Engine, Potentials, Problem, SemiringKind};
/// use semicrf_cpu::StreamingEngine;
///
/// let scores = Array3::<f32>::from_elem((2, 50, 4), 0.1);
/// let transition = Array2::<f32>::zeros((4, 4));
/// let lengths = [50, 20];
/// let p: Problem<f32> = Potentials::builder(scores.view(), &lengths, 6)
///     .transition(transition.view())
///     .build()?
///     .into();
/// let engine = StreamingEngine::new().checkpoint_interval(Some(16));
/// let log_z = engine.forward(&p, SemiringKind::Log)?;
/// let bw = engine.backward(&p, &[1.0, 1.0])?;
/// assert!((bw.log_z[0] - log_z[0]).abs() < 1e-9);
/// # Ok::<(), semicrf_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct StreamingEngine {
    /// Threading: over the sequences of the batch.
    pub parallelism: Parallelism,
    /// Positions between saved forward states in the backward pass; `None` picks
    /// `max(K, ⌈sqrt(T·K)⌉)`, which minimises memory. Any value `>= 1` gives the same results
    /// up to rounding.
    pub checkpoint_interval: Option<usize>,
}

const F64: u64 = 8;
/// Allowance for allocator bookkeeping and small vectors per sequence.
const PER_SEQUENCE_SLACK: u64 = 512;
/// Allowance for the batch-level vectors of results and the thread pool's job queue.
const CONSTANT_SLACK: u64 = 4096;

impl StreamingEngine {
    /// An engine with default settings (rayon, automatic checkpoint interval).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the threading mode.
    pub fn parallelism(mut self, parallelism: Parallelism) -> Self {
        self.parallelism = parallelism;
        self
    }

    /// Sets the checkpoint interval `Δ` of the backward pass (`None`: automatic).
    pub fn checkpoint_interval(mut self, delta: Option<usize>) -> Self {
        self.checkpoint_interval = delta;
        self
    }

    /// The checkpoint interval used for `shape`: the configured one (at least 1) or
    /// `max(K, ⌈sqrt(T·K)⌉)`.
    pub fn delta(&self, shape: Shape) -> usize {
        match self.checkpoint_interval {
            Some(d) => d.max(1),
            None => {
                let tk = (shape.len as f64) * (shape.max_duration as f64);
                (tk.sqrt().ceil() as usize).max(shape.max_duration).max(1)
            }
        }
    }

    /// Whether the backward pass of each sequence recomputes the next interval on a second
    /// thread while `β` runs through the current one: with rayon, when the batch has fewer
    /// sequences than the thread pool has threads (otherwise the batch keeps them busy).
    pub fn pipelines(&self, shape: Shape) -> bool {
        self.parallelism == Parallelism::Rayon && shape.batch < rayon::current_num_threads()
    }

    /// Working bytes of `op` on `shape` beyond inputs and returned outputs, with `dd` for a
    /// `(K, C, C)` transition. With `f = 8` bytes, `n = ⌈(T+1)/Δ'⌉` checkpoints,
    /// `Δ' = min(Δ, T+1)`, `R = C²` (static) or `K·C²` (duration-dependent):
    ///
    /// - parameters: `f·(2R + 2C² + 4K·C + 8C)` (the transition and duration in two layouts,
    ///   their linear-domain twins, start, end and per-label maxima);
    /// - forward state per sequence: `f·(4K·C + 9C + 2·max(K, C))`;
    /// - forward: parameters + `B ×` forward state;
    /// - Viterbi: forward + `B × 8(T+1)·C` bytes of backpointers;
    /// - backward, per sequence: forward state + `n` checkpoints of `f·(2K·C + 3C)`
    ///   (`f·(2K·C + 2C)` for duration-dependent) + recomputed interval `f·3Δ'·C` (twice
    ///   that when [`StreamingEngine::pipelines`]) + backward state `f·(4K·C + 16C +
    ///   max(K, C))` + shared-parameter partials `f·(R + K·C + 2C)`; plus, once, the batch
    ///   sums `f·(R + K·C)`;
    ///
    /// plus 512 bytes per sequence and 4 KiB for bookkeeping. The formula counts the state of
    /// every sequence as alive at once (with `P` threads at most `P` are) and every sequence
    /// as `T` long. Every term is linear in `B`; the forward is flat in `T`, the backward grows
    /// like `sqrt(T·K)·C` at the default `Δ`.
    pub fn memory_bytes(&self, shape: Shape, dd: bool, op: Op) -> u64 {
        let (b, t, k, c) = (
            shape.batch as u64,
            shape.len as u64,
            shape.max_duration as u64,
            shape.labels as u64,
        );
        let r = if dd { k * c * c } else { c * c };
        let params = F64 * Params::f64s(shape.max_duration, shape.labels, dd) as u64;
        let fwd = F64 * Fwd::f64s(k as usize, c as usize) as u64;
        let per_seq = match op {
            Op::Forward(_) => fwd,
            Op::Viterbi => fwd + 8 * (t + 1) * c,
            Op::Backward => {
                let delta = seq::interval(self.delta(shape), shape.len) as u64;
                let n = (t + 1).div_ceil(delta);
                let cp = F64 * seq::checkpoint_f64s(shape.max_duration, shape.labels, dd) as u64;
                let bwd = F64
                    * seq::backward_f64s(
                        shape.max_duration,
                        shape.labels,
                        dd,
                        delta as usize,
                        self.pipelines(shape),
                    ) as u64;
                let partials = F64 * (r + k * c + 2 * c);
                fwd + n * cp + bwd + partials
            }
        };
        // The backward's batch sums of the transition and duration gradients.
        let sums = match op {
            Op::Backward => F64 * (r + k * c),
            _ => 0,
        };
        params
            .saturating_add(sums)
            .saturating_add(b.saturating_mul(per_seq + PER_SEQUENCE_SLACK))
            .saturating_add(CONSTANT_SLACK)
    }
}

fn structured<'p, 'a, F>(problem: &'p Problem<'a, F>) -> Result<&'p Potentials<'a, F>> {
    match problem {
        Problem::Structured(p) => Ok(p),
        Problem::Edges(_) => Err(edges_unsupported()),
    }
}

fn edges_unsupported() -> Error {
    Error::Unsupported {
        backend: "cpu/streaming".into(),
        what: "edge potentials (streaming needs structured potentials)".into(),
    }
}

impl<F: Scalar> Engine<F> for StreamingEngine {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Streaming
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn check(&self, query: &Query) -> Result<()> {
        match query.form {
            Form::Structured { .. } => Ok(()),
            Form::Edges => Err(edges_unsupported()),
        }
    }
    fn memory_required(&self, query: &Query) -> u64 {
        let dd = matches!(
            query.form,
            Form::Structured {
                duration_dependent_transition: true
            }
        );
        self.memory_bytes(query.shape, dd, query.op)
    }
    fn forward(&self, problem: &Problem<'_, F>, semiring: SemiringKind) -> Result<Vec<f64>> {
        let p = structured(problem)?;
        let par = Params::new(p);
        let n = p.shape().batch;
        Ok(map_indexed(self.parallelism, n, |b| {
            let s = SeqIn::new(p, b);
            match semiring {
                SemiringKind::Log => seq::forward::<false, F>(&s, &par),
                SemiringKind::Max => seq::forward::<true, F>(&s, &par),
            }
        }))
    }
    fn backward(&self, problem: &Problem<'_, F>, upstream: &[f64]) -> Result<Backward> {
        let p = structured(problem)?;
        let sh = p.shape();
        check_upstream(upstream, sh.batch)?;
        let par = Params::new(p);
        let delta = self.delta(sh);
        let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
        let mut scores = Array3::<f64>::zeros((bn, t, c));
        let mut bb = p.begin_boundary().map(|_| Array3::<f64>::zeros((bn, t, c)));
        let mut eb = p.end_boundary().map(|_| Array3::<f64>::zeros((bn, t, c)));
        let mut bm = Array2::<f64>::zeros((bn, t));
        let chunk = (t * c).max(1);
        let mut bb_chunks = bb
            .as_mut()
            .map(|a| a.as_slice_mut().expect("standard layout").chunks_mut(chunk));
        let mut eb_chunks = eb
            .as_mut()
            .map(|a| a.as_slice_mut().expect("standard layout").chunks_mut(chunk));
        let jobs: Vec<(usize, SeqOut<'_>)> = scores
            .as_slice_mut()
            .expect("standard layout")
            .chunks_mut(chunk)
            .zip(
                bm.as_slice_mut()
                    .expect("standard layout")
                    .chunks_mut(t.max(1)),
            )
            .enumerate()
            .map(|(b, (sc, bmr))| {
                let out = SeqOut {
                    scores: sc,
                    bb: bb_chunks.as_mut().and_then(Iterator::next),
                    eb: eb_chunks.as_mut().and_then(Iterator::next),
                    bm: bmr,
                };
                (b, out)
            })
            .collect();
        let pipeline = self.pipelines(sh);
        let run = |(b, out): (usize, SeqOut<'_>)| -> (f64, Partials) {
            let s = SeqIn::new(p, b);
            seq::backward(&s, &par, delta, upstream[b], out, pipeline)
        };
        let results: Vec<(f64, Partials)> = match self.parallelism {
            Parallelism::Sequential => jobs.into_iter().map(run).collect(),
            Parallelism::Rayon => jobs.into_par_iter().map(run).collect(),
        };
        let log_z: Vec<f64> = results.iter().map(|r| r.0).collect();
        check_feasible(&log_z)?;
        // Shared parameters: sum over the batch in ascending order.
        let mut tr = vec![0.0; par.tr.len()];
        let mut dur = vec![0.0; k * c];
        let mut start = vec![0.0; c];
        let mut end = vec![0.0; c];
        for (b, (_, pt)) in results.iter().enumerate() {
            let g = upstream[b];
            for (dst, src) in [
                (&mut tr, &pt.tr),
                (&mut dur, &pt.dur),
                (&mut start, &pt.start),
                (&mut end, &pt.end),
            ] {
                for (d, &s) in dst.iter_mut().zip(src.iter()) {
                    *d += g * s;
                }
            }
        }
        let transition = if par.dd {
            ArrayD::from_shape_fn(IxDyn(&[k, c, c]), |ix| {
                tr[ix[1] * k * c + ix[0] * c + ix[2]]
            })
        } else {
            ArrayD::from_shape_fn(IxDyn(&[c, c]), |ix| tr[ix[0] * c + ix[1]])
        };
        let duration = Array2::from_shape_fn((k, c), |(d, j)| dur[j * k + d]);
        Ok(Backward {
            log_z,
            grad: Gradients {
                scores: Some(scores),
                transition: Some(transition),
                duration: Some(duration),
                start: Some(Array1::from(start)),
                end: Some(Array1::from(end)),
                begin_boundary: bb,
                end_boundary: eb,
                edges: None,
            },
            boundary_marginals: bm,
        })
    }
    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        let p = structured(problem)?;
        let par = Params::new(p);
        Ok(map_indexed(self.parallelism, p.shape().batch, |b| {
            seq::viterbi(&SeqIn::new(p, b), &par)
        }))
    }
}
