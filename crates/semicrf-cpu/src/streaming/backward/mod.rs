//! The checkpointed backward pass of the log semiring: marginals and gradients.
//!
//! The outside recursion mirrors the forward one: `β_L(j) = end[j]`,
//! `γ_s(j) = ⊕_d seg(s, d, j) ⊗ β_{s+d}(j)` and `β_s(i) = ⊕_j transition[i, j] ⊗ γ_s(j)`,
//! with a ring of `w_e(j) = β_e(j) + P[e, j] + end_boundary[e-1, j]`. Gradients are expected
//! counts: duration `Σ_s exp(u_s + seg + β_{s+d} - log Z)`, transition
//! `Σ_s exp(α_s(i) + transition[i, j] + γ_s(j) - log Z)`, begin boundary
//! `exp(u_s + γ_s - log Z)`, end boundary `exp(α_e + β_e - log Z)`, and the position
//! marginals (the gradient of the scores) `Σ_{s ≤ t < s+d} μ(s, d, c)`, kept as differences
//! (each segment marginal added at its last position, the marginals of the segments that
//! start at `s` subtracted at `s - 1`) and summed as suffix sums as the rows finish, `K`
//! positions behind the pass ([`emit`]), so only summation rounding remains (no drift with
//! `T`) and the rows leave in chunks, last rows first.
//!
//! With a static transition the steps run in the linear domain, like the forward: the ring
//! of `w` is a [`LinearRing`] and the transition step a dot product with the rows of a
//! [`LinearMatrix`], so the marginals are products of the same linear factors and one `exp`
//! per label. A sum below the trust thresholds (see `semicrf_semiring`'s linear operators)
//! or a scale factor above `exp(MAX_ARG)` takes the exact log-domain path.
//!
//! # Checkpoints
//!
//! The pass first runs the forward pass, saving its exact state every `Δ` positions. Then,
//! for each interval from the last to the first, it restores the checkpoint, recomputes `α`,
//! `u` and `P` inside the interval and runs `β` down through it. The last interval's values
//! are kept from the first pass. A checkpoint is an exact copy of the forward state, so the
//! recomputed intervals are bitwise those of the first pass and every result is bitwise
//! independent of `Δ`. (Saving rings normalised by a shared maximum would cost each restored
//! entry the absolute precision of that shift; the stored entries already carry their prefix
//! sums relative to a recent origin, so there is nothing to overflow that the forward pass
//! would not overflow.)

mod dd;
mod emit;
mod statics;

use semicrf_core::{ByteCount, GradientRows, LogSemiring, Result, Scalar};

use super::forward::Forward;
use super::input::SeqIn;
use super::params::Params;
use super::prefix::ANCHOR_MIN;

pub(crate) use dd::DdBwd;
use emit::Emitter;
pub(crate) use emit::Rows;
pub(crate) use statics::StaticBwd;

pub(super) const NEG: f64 = f64::NEG_INFINITY;
/// Largest argument passed to `exp` for a marginal scale factor; beyond it the exact log
/// path is used.
pub(super) const MAX_ARG: f64 = 700.0;

/// Where the per-position outputs of one sequence go: rows delivered `rows` at a time, last
/// rows first, with the boundary gradients when the input has them.
pub(crate) struct SeqOut<'o> {
    pub rows: usize,
    pub boundaries: [bool; 2],
    pub sink: &'o mut (dyn FnMut(usize, GradientRows<'_>) -> Result<()> + Send),
}

/// Shared-parameter gradients of one sequence, unscaled, in the layouts of [`Params`].
#[derive(Clone, Debug)]
pub(crate) struct Partials {
    pub tr: Vec<f64>,
    pub dur: Vec<f64>,
    pub start: Vec<f64>,
    pub end: Vec<f64>,
}

/// The recomputed forward quantities at one position.
pub(crate) struct Here<'b> {
    pub(super) s: usize,
    pub(super) alpha: &'b [f64],
    pub(super) u: &'b [f64],
    pub(super) pref: &'b [f64],
}

/// The outside recursion of one transition form.
pub(crate) trait Outside: Sized + Send {
    /// What the batch shares, prepared once.
    type Shared: Sync;
    fn shared(par: &Params<LogSemiring>) -> Self::Shared;
    /// `f64` words of the shared part.
    fn shared_words(k: usize, c: usize) -> usize;
    fn new(par: &Params<LogSemiring>, len: usize) -> Self;
    /// `f64` words held by one state.
    fn words(k: usize, c: usize) -> usize;
    /// Position `L`: `β_L = end`; end marginals.
    fn init<F: Scalar>(
        &mut self,
        at: &Here<'_>,
        seq: &SeqIn<'_, F>,
        par: &Params<LogSemiring>,
        log_z: f64,
        parts: &mut Partials,
    );
    /// A position `s < L`.
    #[allow(clippy::too_many_arguments)]
    fn step<F: Scalar>(
        &mut self,
        at: &Here<'_>,
        seq: &SeqIn<'_, F>,
        par: &Params<LogSemiring>,
        shared: &Self::Shared,
        log_z: f64,
        parts: &mut Partials,
        pos: &mut Rows,
    );
    /// After the last step (`s = 0`): anything the state still holds for the position
    /// marginals' differences goes into them.
    fn finish(&mut self, _pos: &mut Rows) {}
    fn common(&self) -> &Common;
}

/// What both forms keep: the next `-inf` score per label, where the forward pass
/// re-anchored, and the per-position marginals of the last step.
#[derive(Clone, Debug)]
pub(crate) struct Common {
    pub(super) k: usize,
    pub(super) c: usize,
    pub(super) len: usize,
    pub(super) next_neg: Vec<usize>,
    /// P(a segment of label j starts at s), last step.
    pub(super) bgn: Vec<f64>,
    /// P(a segment of label i ends at s), last step.
    pub(super) endm: Vec<f64>,
    pub(super) row: Vec<f64>,
    pub(super) row2: Vec<f64>,
    /// The next position (going down) after which the forward pass re-anchored its prefix
    /// sums; `usize::MAX` when there is none.
    pub(super) anchor_at: usize,
}

impl Common {
    pub(super) fn new(k: usize, c: usize, len: usize) -> Self {
        Common {
            k,
            c,
            len,
            next_neg: vec![len; c],
            bgn: vec![0.0; c],
            endm: vec![0.0; c],
            row: vec![0.0; c],
            row2: vec![0.0; c],
            anchor_at: (len - len % k).wrapping_sub(1),
        }
    }

    pub(super) fn words(c: usize) -> usize {
        5 * c
    }

    /// Updates the next `-inf` score per label with `scores[s]` and, where the forward pass
    /// re-anchored its prefix sums after `s`, moves the ring to the origin of `s`: the
    /// forward pass subtracted `D = P̃[s] + scores[s]` (the very same sum, so the same
    /// number) from the prefix sums of the positions after `s`, and `w = β + P̃ + eb` of those
    /// positions is `D` below its value relative to the origin of `s`.
    #[inline]
    pub(super) fn see_scores<F: Scalar>(
        &mut self,
        s: usize,
        pref: &[f64],
        seq: &SeqIn<'_, F>,
        mut shift: impl FnMut(usize, f64),
    ) {
        seq.scores_row(s, &mut self.row);
        for j in 0..self.c {
            if self.row[j] == NEG {
                self.next_neg[j] = s;
            }
        }
        if s != self.anchor_at {
            return;
        }
        self.anchor_at = s.wrapping_sub(self.k);
        for j in 0..self.c {
            let x = self.row[j];
            let d = if x == NEG { pref[j] } else { pref[j] + x };
            if d.abs() > ANCHOR_MIN {
                shift(j, d);
            }
        }
    }

    /// `β_L(j) + P + eb` of position `L` into `row2`, with the end marginals.
    pub(super) fn init<F: Scalar>(
        &mut self,
        at: &Here<'_>,
        seq: &SeqIn<'_, F>,
        par: &Params<LogSemiring>,
        log_z: f64,
        parts: &mut Partials,
    ) {
        seq.eb_row(self.len - 1, &mut self.row);
        for j in 0..self.c {
            let e = (at.alpha[j] + par.end[j] - log_z).exp();
            self.endm[j] = e;
            parts.end[j] += e;
            self.row2[j] = par.end[j] + at.pref[j] + self.row[j];
        }
    }
}

/// `α`, `u` and `P` of the positions of one interval, `[(p - p0)*C + j]`.
struct IntervalBufs {
    ab: Vec<f64>,
    ub: Vec<f64>,
    pb: Vec<f64>,
}

impl IntervalBufs {
    fn new(n: usize, with_u: bool) -> Self {
        IntervalBufs {
            ab: vec![0.0; n],
            ub: vec![0.0; if with_u { n } else { 0 }],
            pb: vec![0.0; n],
        }
    }

    /// Records the forward state of position `p` (`r = (p - p0)·C`): `P` before the step,
    /// then `α` and `u` after it.
    #[inline]
    fn record<Fw: Forward<LogSemiring>, F: Scalar>(
        &mut self,
        r: usize,
        f: &mut Fw,
        p: usize,
        seq: &SeqIn<'_, F>,
        par: &Params<LogSemiring>,
    ) {
        let c = par.c;
        self.pb[r..r + c].copy_from_slice(f.pref());
        f.step(p, seq, par);
        self.ab[r..r + c].copy_from_slice(f.alpha());
        if !self.ub.is_empty() {
            self.ub[r..r + c].copy_from_slice(f.u());
        }
    }
}

/// Saved forward states, one per interval, exactly as the forward pass left them before the
/// interval's first position.
struct Checkpoints {
    words: Vec<f64>,
    z: Vec<usize>,
}

/// The checkpoint interval actually used for a sequence of length `len`.
pub(crate) fn interval(delta: usize, len: usize) -> usize {
    delta.clamp(1, len.saturating_add(1))
}

/// Bytes of the checkpointed backward of one sequence of padded length `t` with interval
/// `delta`, besides the forward state: checkpoints, interval buffers (twice with
/// `pipeline`), the outside state, the ring of unfinished output rows, an output chunk of
/// `rows` rows of `tensors` position tensors, and `partials` words of partial sums. Terms in
/// `K` and `C` alone are plain products (the caller has bounded them); those with `T` are
/// checked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn bytes<Fw: Forward<LogSemiring>, Bw: Outside>(
    k: usize,
    c: usize,
    t: usize,
    delta: usize,
    pipeline: bool,
    partials: usize,
    rows: usize,
    tensors: usize,
) -> ByteCount {
    let delta = interval(delta, t);
    let n = t.saturating_add(1).div_ceil(delta);
    let checkpoints = ByteCount::f64s(&[n, Fw::saved_words(k, c) + c]);
    let bufs = ByteCount::f64s(&[if pipeline { 6 } else { 3 }, delta, c]);
    let out =
        ByteCount::f64s(&[Rows::words(k, c) + Emitter::words(rows.min(t.max(1)), c, tensors)]);
    checkpoints + bufs + out + ByteCount::f64s(&[Bw::words(k, c) + partials + k * c + 2 * c])
}

/// Forward and backward of one sequence with checkpoints every `delta` positions; delivers
/// the per-position outputs (scaled by `g`) to `out` and returns `(log Z, partials)`;
/// partials are not scaled. `up` reads the first pass (and checks the rows, for a source)
/// and the recomputed intervals, `down` the outside pass. With `pipeline`, the
/// recomputation of each interval runs on another thread while `β` runs through the
/// interval after it. Returns `log Z = -inf` and zero partials without delivering anything
/// when the sequence is infeasible.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward<Fw: Forward<LogSemiring>, Bw: Outside, F: Scalar>(
    mut up: SeqIn<'_, F>,
    mut down: SeqIn<'_, F>,
    par: &Params<LogSemiring>,
    shared: &Bw::Shared,
    delta: usize,
    g: f64,
    out: SeqOut<'_>,
    pipeline: bool,
) -> Result<(f64, Partials)> {
    let (k, c) = (par.k, par.c);
    let len = up.len;
    let delta = interval(delta, len);
    let n_int = (len + 1).div_ceil(delta);
    let mut parts = Partials {
        tr: vec![0.0; par.tr.len()],
        dur: vec![0.0; k * c],
        start: vec![0.0; c],
        end: vec![0.0; c],
    };
    let with_u = Fw::HAS_U;
    // Pass 1: forward, saving a checkpoint at the start of every interval.
    // The last interval's α, u and P are kept from this pass (it is the first one needed).
    let per = Fw::saved_words(k, c);
    let mut cps = Checkpoints {
        words: vec![0.0; n_int * per],
        z: vec![0; n_int * c],
    };
    let mut f = Fw::new(par);
    let mut cur = IntervalBufs::new(delta * c, with_u);
    let last0 = (n_int - 1) * delta;
    for p in 0..=len {
        if p % delta == 0 {
            let n = p / delta;
            f.save(
                &mut cps.words[n * per..(n + 1) * per],
                &mut cps.z[n * c..(n + 1) * c],
            );
        }
        if p >= last0 {
            cur.record((p - last0) * c, &mut f, p, &up, par);
        } else {
            f.step(p, &up, par);
        }
    }
    up.verify(true)?;
    let log_z = f.total(par);
    if log_z == NEG {
        return Ok((log_z, parts));
    }
    // Pass 2: intervals from last to first: β runs down through interval n while the forward
    // quantities of interval n-1 are recomputed from its checkpoint (concurrently when
    // `pipeline`, which needs a second set of interval buffers; the results are the same).
    let mut bw = Bw::new(par, len);
    let mut rows = Rows::new(k, c);
    let mut emit = Emitter::new(c, g, out.rows.min(len), out.boundaries, out.sink);
    let mut next = IntervalBufs::new(if pipeline && n_int > 1 { delta * c } else { 0 }, with_u);
    let recompute = |f: &mut Fw, seq: &SeqIn<'_, F>, n: usize, bufs: &mut IntervalBufs| {
        let p0 = n * delta;
        let p1 = ((n + 1) * delta).min(len + 1);
        f.restore(
            &cps.words[n * per..(n + 1) * per],
            &cps.z[n * c..(n + 1) * c],
            p0,
        );
        for p in p0..p1 {
            bufs.record((p - p0) * c, f, p, seq, par);
        }
    };
    for n in (0..n_int).rev() {
        let p0 = n * delta;
        let p1 = ((n + 1) * delta).min(len + 1);
        let mut run_beta = |bufs: &IntervalBufs, seq: &SeqIn<'_, F>| {
            for s in (p0..p1).rev() {
                let r = (s - p0) * c;
                let at = Here {
                    s,
                    alpha: &bufs.ab[r..r + c],
                    u: if bufs.ub.is_empty() {
                        &[]
                    } else {
                        &bufs.ub[r..r + c]
                    },
                    pref: &bufs.pb[r..r + c],
                };
                if s == len {
                    bw.init(&at, seq, par, log_z, &mut parts);
                    rows.set_end(len - 1, &bw.common().endm);
                    continue;
                }
                bw.step(&at, seq, par, shared, log_z, &mut parts, &mut rows);
                let cm = bw.common();
                rows.set_begin(s, &cm.bgn);
                if s > 0 {
                    rows.set_end(s - 1, &cm.endm);
                }
                if s + k < len {
                    emit.take(s + k, &mut rows);
                }
            }
        };
        if n == 0 {
            run_beta(&cur, &down);
        } else if pipeline {
            let (fref, next_ref, upr, downr) = (&mut f, &mut next, &mut up, &mut down);
            let (cur_ref, rc, rb) = (&cur, &recompute, &mut run_beta);
            // `move`: each side owns its reader (`&mut`), which is not shared across threads.
            rayon::join(
                move || rc(fref, upr, n - 1, next_ref),
                move || rb(cur_ref, downr),
            );
            std::mem::swap(&mut cur, &mut next);
        } else {
            run_beta(&cur, &down);
            recompute(&mut f, &up, n - 1, &mut cur);
        }
    }
    bw.finish(&mut rows);
    for e in (0..len.min(k)).rev() {
        emit.take(e, &mut rows);
    }
    up.verify(false)?;
    down.verify(false)?;
    emit.finish()?;
    Ok((log_z, parts))
}
