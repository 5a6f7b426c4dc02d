//! Per-sequence recurrences: the forward state (one step per position), checkpoints, the
//! checkpointed backward pass and Viterbi with backpointers. Everything is `f64` inside.

use ndarray::{ArrayView2, Axis};
use semicrf_core::{Decoded, Potentials, Scalar, Segment, Transition};

use crate::kernels::{
    argmax_add, dot, exp_fast, exp_in_place, exp_shift_sum, ln_in_place, lse_add, max_of,
};

const NEG: f64 = f64::NEG_INFINITY;
/// A matrix-vector sum of factors `<= 1` is trusted when it is at least this: every term lost
/// to underflow is below `3e-308`, so with at most `C ≤ 1e20` terms the relative error they
/// cause is below `1e-8`·`1e-20`; smaller sums are recomputed exactly in the log domain.
const TAU: f64 = 1e-280;
/// A ring dot product `Σ_d lin · dlin` is trusted when it is at least `TAU_RING_PER_TERM · K`:
/// a ring entry can be up to `e^REBASE ≈ 4e260` while its duration weight underflows to 0, so
/// a lost term is below `4e260 · 3e-308 ≈ 1.1e-47`, and `K` of them stay below `1e-16` of the
/// sum (and, in the backward pass, below `1e-17` in absolute value of any marginal).
const TAU_RING_PER_TERM: f64 = 1e-30;
/// Linear ring entries stay below `exp(REBASE)` relative to their label's reference, so a
/// sum of `K` of them times weights `<= 1` cannot overflow.
const REBASE: f64 = 600.0;
/// A label's prefix sum is re-anchored (every `K` positions) only when its magnitude exceeds
/// this: below it the prefix sum adds absolute errors of at most `ulp(1024) ≈ 2.3e-13`, and
/// skipping the shift keeps the common case (moderate scores) free of its cost.
const ANCHOR_MIN: f64 = 1024.0;
/// Largest argument passed to `exp` for a marginal scale factor; beyond it the exact log
/// path is used.
const MAX_ARG: f64 = 700.0;

/// Shared parameters converted once to `f64` in the layouts the loops want.
#[derive(Debug)]
pub(crate) struct Params {
    /// `K`.
    pub k: usize,
    /// `C`.
    pub c: usize,
    /// Whether the transition is `(K, C, C)`.
    pub dd: bool,
    /// Static: `tr[i*C + j]`. Duration-dependent: `tr[i*K*C + (d-1)*C + j]`.
    pub tr: Vec<f64>,
    /// Static: `tr_t[j*C + i]`. Duration-dependent: `tr_t[(d-1)*C*C + j*C + i]`.
    pub tr_t: Vec<f64>,
    /// `dur[j*K + d-1]`.
    pub dur: Vec<f64>,
    /// `dur_rev[j*K + K-d]` (reversed over `d`, for windows that run in increasing start).
    pub dur_rev: Vec<f64>,
    /// `start[j]`.
    pub start: Vec<f64>,
    /// `end[j]`.
    pub end: Vec<f64>,
    /// `max_d duration[d-1, j]`.
    pub dmaxdur: Vec<f64>,
    /// `exp(duration[d-1, j] - dmaxdur[j])` at `[j*K + d-1]`.
    pub dlin: Vec<f64>,
    /// `dlin` reversed over `d`.
    pub dlin_rev: Vec<f64>,
    /// Static: `max_i tr[i, j]`.
    pub colmax: Vec<f64>,
    /// Static: `exp(tr[i, j] - colmax[j])` at `[j*C + i]`.
    pub elin_t: Vec<f64>,
    /// Static: `max_j tr[i, j]`.
    pub rowmax: Vec<f64>,
    /// Static: `exp(tr[i, j] - rowmax[i])` at `[i*C + j]`.
    pub elin: Vec<f64>,
    /// Smallest trusted ring dot product, `TAU_RING_PER_TERM · K`.
    pub tau_ring: f64,
}

/// `exp(x - m)`, or 0 when `m = -inf`.
fn exp_rel(x: f64, m: f64) -> f64 {
    if m == NEG { 0.0 } else { (x - m).exp() }
}

impl Params {
    /// Doubles held by the parameters (`dd`: duration-dependent transition).
    pub(crate) fn f64s(k: usize, c: usize, dd: bool) -> usize {
        let r = if dd { k * c * c } else { c * c };
        2 * r + 2 * c * c + 4 * k * c + 8 * c
    }

    pub(crate) fn new<F: Scalar>(p: &Potentials<'_, F>) -> Self {
        let sh = p.shape();
        let (k, c) = (sh.max_duration, sh.labels);
        let dd = p.has_duration_dependent_transition();
        let mut tr;
        let mut tr_t;
        match p.transition() {
            Some(Transition::DurationDependent(t)) => {
                tr = vec![0.0; k * c * c];
                tr_t = vec![0.0; k * c * c];
                for d in 0..k {
                    for i in 0..c {
                        for j in 0..c {
                            let x = t[[d, i, j]].as_f64();
                            tr[i * k * c + d * c + j] = x;
                            tr_t[d * c * c + j * c + i] = x;
                        }
                    }
                }
            }
            other => {
                tr = vec![0.0; c * c];
                tr_t = vec![0.0; c * c];
                if let Some(Transition::Static(t)) = other {
                    for i in 0..c {
                        for j in 0..c {
                            let x = t[[i, j]].as_f64();
                            tr[i * c + j] = x;
                            tr_t[j * c + i] = x;
                        }
                    }
                }
            }
        }
        let mut dur = vec![0.0; k * c];
        let mut dur_rev = vec![0.0; k * c];
        for j in 0..c {
            for d in 1..=k {
                let x = p.duration_at(d, j);
                dur[j * k + d - 1] = x;
                dur_rev[j * k + k - d] = x;
            }
        }
        let dmaxdur: Vec<f64> = (0..c).map(|j| max_of(&dur[j * k..(j + 1) * k])).collect();
        let mut dlin = vec![0.0; k * c];
        let mut dlin_rev = vec![0.0; k * c];
        for j in 0..c {
            for d in 0..k {
                let x = exp_rel(dur[j * k + d], dmaxdur[j]);
                dlin[j * k + d] = x;
                dlin_rev[j * k + k - 1 - d] = x;
            }
        }
        let (mut colmax, mut rowmax) = (vec![NEG; c], vec![NEG; c]);
        let (mut elin_t, mut elin) = (vec![0.0; c * c], vec![0.0; c * c]);
        if !dd {
            for i in 0..c {
                rowmax[i] = max_of(&tr[i * c..(i + 1) * c]);
            }
            for j in 0..c {
                colmax[j] = max_of(&tr_t[j * c..(j + 1) * c]);
            }
            for i in 0..c {
                for j in 0..c {
                    elin[i * c + j] = exp_rel(tr[i * c + j], rowmax[i]);
                    elin_t[j * c + i] = exp_rel(tr[i * c + j], colmax[j]);
                }
            }
        }
        Params {
            k,
            c,
            dd,
            tr,
            tr_t,
            dur,
            dur_rev,
            start: (0..c).map(|j| p.start_at(j)).collect(),
            end: (0..c).map(|j| p.end_at(j)).collect(),
            dmaxdur,
            dlin,
            dlin_rev,
            colmax,
            elin_t,
            rowmax,
            elin,
            tau_ring: TAU_RING_PER_TERM * k as f64,
        }
    }
}

/// The per-sequence inputs of sequence `b`.
pub(crate) struct SeqIn<'a, F> {
    scores: ArrayView2<'a, F>,
    bb: Option<ArrayView2<'a, F>>,
    eb: Option<ArrayView2<'a, F>>,
    /// The same tensors as row-major slices when they are laid out so.
    scores_s: Option<&'a [F]>,
    bb_s: Option<&'a [F]>,
    eb_s: Option<&'a [F]>,
    c: usize,
    /// `L_b`.
    pub len: usize,
}

impl<'a, F: Scalar> SeqIn<'a, F> {
    pub(crate) fn new(p: &Potentials<'a, F>, b: usize) -> Self {
        let scores = (*p.scores()).index_axis_move(Axis(0), b);
        let bb = p.begin_boundary().map(|x| (*x).index_axis_move(Axis(0), b));
        let eb = p.end_boundary().map(|x| (*x).index_axis_move(Axis(0), b));
        SeqIn {
            scores_s: scores.to_slice(),
            bb_s: bb.and_then(|v| v.to_slice()),
            eb_s: eb.and_then(|v| v.to_slice()),
            c: p.shape().labels,
            scores,
            bb,
            eb,
            len: p.lengths()[b],
        }
    }
    #[inline]
    fn read(v: &ArrayView2<'a, F>, s: Option<&'a [F]>, c: usize, t: usize, out: &mut [f64]) {
        match s {
            Some(s) => {
                for (o, x) in out.iter_mut().zip(&s[t * c..(t + 1) * c]) {
                    *o = x.as_f64();
                }
            }
            None => {
                for (o, x) in out.iter_mut().zip(v.row(t).iter()) {
                    *o = x.as_f64();
                }
            }
        }
    }
    /// `scores[t, ·]`.
    #[inline]
    pub(crate) fn scores_row(&self, t: usize, out: &mut [f64]) {
        Self::read(&self.scores, self.scores_s, self.c, t, out);
    }
    /// `begin_boundary[t, ·]` (zeros when absent).
    #[inline]
    pub(crate) fn bb_row(&self, t: usize, out: &mut [f64]) {
        match &self.bb {
            Some(v) => Self::read(v, self.bb_s, self.c, t, out),
            None => out.fill(0.0),
        }
    }
    /// `end_boundary[t, ·]` (zeros when absent).
    #[inline]
    pub(crate) fn eb_row(&self, t: usize, out: &mut [f64]) {
        match &self.eb {
            Some(v) => Self::read(v, self.eb_s, self.c, t, out),
            None => out.fill(0.0),
        }
    }
}

/// The forward state of one sequence, advanced one position at a time by [`Fwd::step`].
///
/// Static transition: `ring[j*2K + slot]` holds `v_s(j) = u_s(j) + begin_boundary[s, j] -
/// P[s, j]` at `slot = s mod K` and again at `slot + K` (a doubled ring, so that the window
/// of the last `K` starts is one contiguous slice per label). Duration-dependent transition:
/// `ring[slot*C + i] = α_s(i)` and `qring[slot*C + j] = begin_boundary[s, j] - P[s, j]`.
/// Here and in `pref`, `P` is relative to each label's current origin, moved to the current
/// position after every `K` positions ([`Fwd::reanchor`]).
#[derive(Clone, Debug)]
pub(crate) struct Fwd {
    k: usize,
    c: usize,
    dd: bool,
    ring: Vec<f64>,
    qring: Vec<f64>,
    /// `P[p, ·]` relative to the current origin, finite part (`-inf` scores count as 0; `z`
    /// tracks them).
    pub pref: Vec<f64>,
    /// The first start whose segment up to `p` contains no `-inf` score, per label.
    z: Vec<usize>,
    /// `α_p`.
    pub alpha: Vec<f64>,
    /// `u_p` (static transition only).
    pub u: Vec<f64>,
    buf: Vec<f64>,
    terms: Vec<f64>,
    row: Vec<f64>,
    /// Static, log semiring: `lin[j*2K + slot] = exp(v_s(j) - rho[j])`, laid out as `ring`.
    lin: Vec<f64>,
    /// Per-label reference of `lin` (`-inf` when no entry is finite).
    rho: Vec<f64>,
    ex: Vec<f64>,
    sums: Vec<f64>,
    exact: Vec<bool>,
    /// The next position after which the prefix sums are re-anchored.
    next_anchor: usize,
}

/// Saved forward states, one per interval, exactly as the forward pass left them before the
/// interval's first position (restoring one reproduces the forward pass bitwise): the ring
/// (static: the log ring and its linear twin, each stored once instead of doubled;
/// duration-dependent: `α` and `q`), the linear references `rho` (static), the re-anchored
/// prefix sums and the last `-inf` positions. No shift is applied: a shift shared by all
/// entries would cost every entry the absolute precision of the shift.
#[derive(Clone, Debug)]
pub(crate) struct Checkpoints {
    per: usize,
    ring: Vec<f64>,
    rho: Vec<f64>,
    pref: Vec<f64>,
    z: Vec<usize>,
}

impl Checkpoints {
    pub(crate) fn new(n: usize, k: usize, c: usize, dd: bool) -> Self {
        let per = 2 * k * c;
        Checkpoints {
            per,
            ring: vec![0.0; n * per],
            rho: vec![0.0; if dd { 0 } else { n * c }],
            pref: vec![0.0; n * c],
            z: vec![0; n * c],
        }
    }
}

/// Doubles (8-byte words) held by one checkpoint.
pub(crate) fn checkpoint_f64s(k: usize, c: usize, dd: bool) -> usize {
    2 * k * c + if dd { 2 * c } else { 3 * c }
}

/// The first position `>= p` after which the prefix sums are re-anchored (the positions `q`
/// with `(q + 1) mod K = 0`).
fn anchor_from(p: usize, k: usize) -> usize {
    p + (k - 1 - p % k)
}

impl Fwd {
    pub(crate) fn new(par: &Params) -> Self {
        let (k, c) = (par.k, par.c);
        let (ring, qring) = if par.dd {
            (vec![NEG; k * c], vec![NEG; k * c])
        } else {
            (vec![NEG; 2 * k * c], Vec::new())
        };
        Fwd {
            k,
            c,
            dd: par.dd,
            ring,
            qring,
            pref: vec![0.0; c],
            z: vec![0; c],
            alpha: vec![NEG; c],
            u: vec![NEG; c],
            buf: vec![0.0; k.max(c)],
            terms: vec![0.0; k],
            row: vec![0.0; c],
            lin: if par.dd {
                Vec::new()
            } else {
                vec![0.0; 2 * k * c]
            },
            rho: vec![NEG; c],
            ex: vec![0.0; c],
            sums: vec![0.0; c],
            exact: vec![false; c],
            next_anchor: k - 1,
        }
    }

    /// Doubles held by a forward state.
    pub(crate) fn f64s(k: usize, c: usize) -> usize {
        4 * k * c + 9 * c + 2 * k.max(c)
    }

    /// Recomputes `rho[j]` and the linear entries of label `j` for starts `lo..=hi`.
    fn rebuild(&mut self, j: usize, lo: usize, hi: usize) {
        let k = self.k;
        let base = j * 2 * k;
        let mut m = NEG;
        for s in lo..=hi {
            let v = self.ring[base + s % k];
            if v > m {
                m = v;
            }
        }
        self.rho[j] = m;
        for s in lo..=hi {
            let x = if m == NEG {
                0.0
            } else {
                exp_fast(self.ring[base + s % k] - m)
            };
            self.lin[base + s % k] = x;
            self.lin[base + s % k + k] = x;
        }
    }

    pub(crate) fn save(&self, cp: &mut Checkpoints, n: usize) {
        let (k, c, per) = (self.k, self.c, cp.per);
        let dst = &mut cp.ring[n * per..(n + 1) * per];
        if self.dd {
            dst[..k * c].copy_from_slice(&self.ring);
            dst[k * c..].copy_from_slice(&self.qring);
        } else {
            let (log, lin) = dst.split_at_mut(k * c);
            for j in 0..c {
                log[j * k..(j + 1) * k].copy_from_slice(&self.ring[j * 2 * k..j * 2 * k + k]);
                lin[j * k..(j + 1) * k].copy_from_slice(&self.lin[j * 2 * k..j * 2 * k + k]);
            }
            cp.rho[n * c..(n + 1) * c].copy_from_slice(&self.rho);
        }
        cp.pref[n * c..(n + 1) * c].copy_from_slice(&self.pref);
        cp.z[n * c..(n + 1) * c].copy_from_slice(&self.z);
    }

    /// Restores checkpoint `n`, saved before position `p`.
    pub(crate) fn restore(&mut self, cp: &Checkpoints, n: usize, p: usize) {
        let (k, c, per) = (self.k, self.c, cp.per);
        let src = &cp.ring[n * per..(n + 1) * per];
        if self.dd {
            self.ring.copy_from_slice(&src[..k * c]);
            self.qring.copy_from_slice(&src[k * c..]);
        } else {
            let (log, lin) = src.split_at(k * c);
            for j in 0..c {
                let (a, b) = (j * 2 * k, j * k);
                self.ring[a..a + k].copy_from_slice(&log[b..b + k]);
                self.ring[a + k..a + 2 * k].copy_from_slice(&log[b..b + k]);
                self.lin[a..a + k].copy_from_slice(&lin[b..b + k]);
                self.lin[a + k..a + 2 * k].copy_from_slice(&lin[b..b + k]);
            }
            self.rho.copy_from_slice(&cp.rho[n * c..(n + 1) * c]);
        }
        self.pref.copy_from_slice(&cp.pref[n * c..(n + 1) * c]);
        self.z.copy_from_slice(&cp.z[n * c..(n + 1) * c]);
        self.next_anchor = anchor_from(p, k);
    }

    /// Processes position `p` (`0..=L`): computes `α_p` (for `p >= 1`) and, for `p < L`,
    /// `u_p`, pushes position `p` into the ring and advances `P` and `z` over `scores[p]`.
    /// `MAX` selects the max semiring.
    pub(crate) fn step<const MAX: bool, F: Scalar>(
        &mut self,
        p: usize,
        seq: &SeqIn<'_, F>,
        par: &Params,
    ) {
        if self.dd {
            return self.step_dd::<MAX, F>(p, seq, par);
        }
        if !MAX {
            return self.step_log(p, seq, par);
        }
        let (k, c) = (self.k, self.c);
        let len = seq.len;
        if p == 0 {
            self.u.copy_from_slice(&par.start);
        } else {
            seq.eb_row(p - 1, &mut self.row);
            let slot = p % k;
            for j in 0..c {
                let dmax = k.min(p - self.z[j]);
                let a = if dmax == 0 {
                    NEG
                } else {
                    let off = j * 2 * k + slot + k - dmax;
                    let w = &self.ring[off..off + dmax];
                    let dr = &par.dur_rev[j * k + k - dmax..j * k + k];
                    let buf = &mut self.buf[..dmax];
                    let x = if MAX {
                        crate::kernels::add_max(w, dr, buf)
                    } else {
                        lse_add(w, dr, buf).0
                    };
                    x + self.pref[j] + self.row[j]
                };
                self.alpha[j] = a;
            }
            if p == len {
                return;
            }
            for j in 0..c {
                let tr = &par.tr_t[j * c..(j + 1) * c];
                let buf = &mut self.buf[..c];
                self.u[j] = if MAX {
                    crate::kernels::add_max(&self.alpha, tr, buf)
                } else {
                    lse_add(&self.alpha, tr, buf).0
                };
            }
        }
        seq.bb_row(p, &mut self.row);
        let slot = p % k;
        for j in 0..c {
            let v = self.u[j] + self.row[j] - self.pref[j];
            self.ring[j * 2 * k + slot] = v;
            self.ring[j * 2 * k + slot + k] = v;
        }
        self.advance(p, seq);
    }

    /// The log-semiring step for a static transition, in the linear domain with exact
    /// fallbacks: `α_p(j) = rho_j + max dur_j + ln Σ_d lin · dlin + P + end_boundary`, exact
    /// when the sum is below `tau_ring`; `u_p(j) = m + colmax_j + ln Σ_i exp(α_p(i) - m) ·
    /// elin_t[j, i]`, exact when that sum is below [`TAU`].
    fn step_log<F: Scalar>(&mut self, p: usize, seq: &SeqIn<'_, F>, par: &Params) {
        let (k, c) = (self.k, self.c);
        if p == 0 {
            self.u.copy_from_slice(&par.start);
        } else {
            seq.eb_row(p - 1, &mut self.row);
            let slot = p % k;
            // Phase 1: the linear sums (rebuilding a label's ring when its sum is too small).
            for j in 0..c {
                let dmax = k.min(p - self.z[j]);
                self.exact[j] = false;
                self.sums[j] = 1.0;
                if dmax == 0 || par.dmaxdur[j] == NEG {
                    continue;
                }
                let off = j * 2 * k + slot + k - dmax;
                let dl = &par.dlin_rev[j * k + k - dmax..j * k + k];
                let mut sum = dot(&self.lin[off..off + dmax], dl);
                if sum < par.tau_ring {
                    self.rebuild(j, p - dmax, p - 1);
                    sum = dot(&self.lin[off..off + dmax], dl);
                }
                if sum >= par.tau_ring {
                    self.sums[j] = sum;
                } else {
                    self.exact[j] = true;
                }
            }
            // Phase 2: logarithms of all labels at once.
            ln_in_place(&mut self.sums);
            for j in 0..c {
                let dmax = k.min(p - self.z[j]);
                let x = if dmax == 0 || par.dmaxdur[j] == NEG {
                    NEG
                } else if self.exact[j] {
                    let off = j * 2 * k + slot + k - dmax;
                    let w = &self.ring[off..off + dmax];
                    let dr = &par.dur_rev[j * k + k - dmax..j * k + k];
                    lse_add(w, dr, &mut self.buf[..dmax]).0
                } else {
                    self.rho[j] + par.dmaxdur[j] + self.sums[j]
                };
                self.alpha[j] = x + self.pref[j] + self.row[j];
            }
            if p == seq.len {
                return;
            }
            let m = max_of(&self.alpha);
            if m == NEG {
                self.u.fill(NEG);
            } else {
                for (e, &a) in self.ex.iter_mut().zip(&self.alpha) {
                    *e = a - m;
                }
                exp_in_place(&mut self.ex);
                for j in 0..c {
                    let sum = dot(&self.ex, &par.elin_t[j * c..(j + 1) * c]);
                    self.exact[j] = sum < TAU;
                    self.sums[j] = if sum < TAU { 1.0 } else { sum };
                }
                ln_in_place(&mut self.sums);
                for j in 0..c {
                    self.u[j] = if par.colmax[j] == NEG {
                        NEG
                    } else if self.exact[j] {
                        let tr = &par.tr_t[j * c..(j + 1) * c];
                        lse_add(&self.alpha, tr, &mut self.buf[..c]).0
                    } else {
                        m + par.colmax[j] + self.sums[j]
                    };
                }
            }
        }
        seq.bb_row(p, &mut self.row);
        let slot = p % k;
        // New ring entries, and their linear values relative to each label's reference.
        for j in 0..c {
            let v = self.u[j] + self.row[j] - self.pref[j];
            let base = j * 2 * k;
            self.ring[base + slot] = v;
            self.ring[base + slot + k] = v;
            let x = v - self.rho[j];
            let rebase = v != NEG && (self.rho[j] == NEG || x > REBASE);
            self.exact[j] = rebase;
            self.ex[j] = if v == NEG || rebase { NEG } else { x };
        }
        exp_in_place(&mut self.ex);
        for j in 0..c {
            let base = j * 2 * k;
            if self.exact[j] {
                let lo = (p + 1).saturating_sub(k).max(self.z[j]);
                self.rebuild(j, lo, p);
            } else {
                self.lin[base + slot] = self.ex[j];
                self.lin[base + slot + k] = self.ex[j];
            }
        }
        self.advance(p, seq);
    }

    /// The max-semiring step for a static transition that also records the backpointers of
    /// `α_p` (best duration) and `u_p` (best previous label).
    fn step_viterbi<F: Scalar>(
        &mut self,
        p: usize,
        seq: &SeqIn<'_, F>,
        par: &Params,
        bp_dur: &mut [u32],
        bp_prev: &mut [u32],
    ) {
        let (k, c) = (self.k, self.c);
        if p == 0 {
            self.u.copy_from_slice(&par.start);
        } else {
            seq.eb_row(p - 1, &mut self.row);
            let slot = p % k;
            for j in 0..c {
                let dmax = k.min(p - self.z[j]);
                if dmax == 0 {
                    self.alpha[j] = NEG;
                    continue;
                }
                let off = j * 2 * k + slot + k - dmax;
                let w = &self.ring[off..off + dmax];
                let dr = &par.dur_rev[j * k + k - dmax..j * k + k];
                // The window runs from duration dmax down to 1: the last maximum is the
                // smallest duration.
                let (best, e) = argmax_add(w, dr, true, &mut self.buf);
                self.alpha[j] = best + self.pref[j] + self.row[j];
                bp_dur[p * c + j] = (dmax - e) as u32;
            }
            if p == seq.len {
                return;
            }
            for j in 0..c {
                let (best, i) = argmax_add(
                    &self.alpha,
                    &par.tr_t[j * c..(j + 1) * c],
                    false,
                    &mut self.buf,
                );
                self.u[j] = best;
                bp_prev[p * c + j] = i as u32;
            }
        }
        seq.bb_row(p, &mut self.row);
        let slot = p % k;
        for j in 0..c {
            let v = self.u[j] + self.row[j] - self.pref[j];
            self.ring[j * 2 * k + slot] = v;
            self.ring[j * 2 * k + slot + k] = v;
        }
        self.advance(p, seq);
    }

    #[inline]
    fn advance<F: Scalar>(&mut self, p: usize, seq: &SeqIn<'_, F>) {
        seq.scores_row(p, &mut self.row);
        for j in 0..self.c {
            let x = self.row[j];
            if x == NEG {
                self.z[j] = p + 1;
            } else {
                self.pref[j] += x;
            }
        }
        if p == self.next_anchor {
            self.reanchor();
            self.next_anchor += self.k;
        }
    }

    /// Moves the origin of each label whose prefix sum exceeds [`ANCHOR_MIN`] in magnitude to
    /// the current position: `P[·, j]` becomes 0 and the `P`-part of the label's ring entries
    /// (and its linear reference, so the linear entries stay valid) is shifted by the same
    /// amount. Called after every `K` positions, so `|P|` in every ring entry stays below
    /// `ANCHOR_MIN + 2K · max |score|` and no value carries the size of `P` over the whole
    /// sequence.
    fn reanchor(&mut self) {
        let (k, c) = (self.k, self.c);
        for j in 0..c {
            let d = self.pref[j];
            if d.abs() <= ANCHOR_MIN {
                continue;
            }
            self.pref[j] = 0.0;
            if self.dd {
                for slot in 0..k {
                    self.qring[slot * c + j] += d;
                }
            } else {
                for x in &mut self.ring[j * 2 * k..(j + 1) * 2 * k] {
                    *x += d;
                }
                self.rho[j] += d;
            }
        }
    }

    fn step_dd<const MAX: bool, F: Scalar>(&mut self, p: usize, seq: &SeqIn<'_, F>, par: &Params) {
        let (k, c) = (self.k, self.c);
        if p >= 1 {
            seq.eb_row(p - 1, &mut self.row);
            for j in 0..c {
                let dmax = k.min(p - self.z[j]);
                for d in 1..=dmax {
                    let s = p - d;
                    let slot = s % k;
                    let inner = if s == 0 {
                        par.start[j]
                    } else {
                        let a = &self.ring[slot * c..(slot + 1) * c];
                        let tr = &par.tr_t[(d - 1) * c * c + j * c..(d - 1) * c * c + (j + 1) * c];
                        let buf = &mut self.buf[..c];
                        if MAX {
                            crate::kernels::add_max(a, tr, buf)
                        } else {
                            lse_add(a, tr, buf).0
                        }
                    };
                    self.terms[d - 1] = inner + self.qring[slot * c + j] + par.dur[j * k + d - 1];
                }
                let t = &mut self.terms[..dmax];
                let m = max_of(t);
                let x = if MAX || m == NEG {
                    m
                } else {
                    m + exp_shift_sum(t, m).ln()
                };
                self.alpha[j] = x + self.pref[j] + self.row[j];
            }
            if p == seq.len {
                return;
            }
            let slot = p % k;
            self.ring[slot * c..(slot + 1) * c].copy_from_slice(&self.alpha);
        }
        seq.bb_row(p, &mut self.row);
        let slot = p % k;
        for j in 0..c {
            self.qring[slot * c + j] = self.row[j] - self.pref[j];
        }
        self.advance(p, seq);
    }

    /// `⊕_j α_L(j) ⊗ end[j]` after step `L`.
    pub(crate) fn total<const MAX: bool>(&mut self, par: &Params) -> f64 {
        let c = self.c;
        let buf = &mut self.buf[..c];
        if MAX {
            crate::kernels::add_max(&self.alpha, &par.end, buf)
        } else {
            lse_add(&self.alpha, &par.end, buf).0
        }
    }
}

/// The forward pass of one sequence: log Z (`MAX = false`) or the Viterbi score.
pub(crate) fn forward<const MAX: bool, F: Scalar>(seq: &SeqIn<'_, F>, par: &Params) -> f64 {
    let mut f = Fwd::new(par);
    for p in 0..=seq.len {
        f.step::<MAX, F>(p, seq, par);
    }
    f.total::<MAX>(par)
}

/// The checkpoint interval actually used for a sequence of length `len`.
pub(crate) fn interval(delta: usize, len: usize) -> usize {
    delta.clamp(1, len + 1)
}

/// Per-sequence gradient outputs (rows of the batch outputs) and shared-parameter partials.
pub(crate) struct SeqOut<'o> {
    /// `(T, C)` rows: `g ×` position marginals.
    pub scores: &'o mut [f64],
    /// `(T, C)` rows: `g ×` P(segment of label c starts at t), if wanted.
    pub bb: Option<&'o mut [f64]>,
    /// `(T, C)` rows: `g ×` P(segment of label c ends at t), if wanted.
    pub eb: Option<&'o mut [f64]>,
    /// `(T)`: unscaled boundary marginals.
    pub bm: &'o mut [f64],
}

/// Shared-parameter gradients of one sequence, unscaled, in internal layouts.
#[derive(Clone, Debug)]
pub(crate) struct Partials {
    /// As `Params::tr`.
    pub tr: Vec<f64>,
    /// As `Params::dur`.
    pub dur: Vec<f64>,
    pub start: Vec<f64>,
    pub end: Vec<f64>,
}

/// Doubles held by the backward state besides the forward state and checkpoints:
/// the `β` ring, recomputed interval buffers and small per-label vectors.
pub(crate) fn backward_f64s(k: usize, c: usize, dd: bool, delta: usize, pipeline: bool) -> usize {
    let ring = if dd { k * c } else { 2 * k * c };
    let ybuf = if dd { 2 * k * c } else { 0 };
    let lin = if dd { 0 } else { 2 * k * c };
    let cover = if dd { k * c } else { 0 };
    let bufs = if pipeline { 6 } else { 3 } * delta * c;
    ring + lin + ybuf + cover + bufs + 16 * c + k.max(c)
}

/// Forward and backward of one sequence with checkpoints every `delta` positions; writes the
/// per-sequence outputs (scaled by `g`) and returns `(log Z, partials)`; partials are not
/// scaled. With `pipeline`, the recomputation of each interval runs on another thread while
/// `β` runs through the interval after it. Returns `log Z = -inf` and zero partials without touching the outputs when the
/// sequence is infeasible.
pub(crate) fn backward<F: Scalar>(
    seq: &SeqIn<'_, F>,
    par: &Params,
    delta: usize,
    g: f64,
    out: SeqOut<'_>,
    pipeline: bool,
) -> (f64, Partials) {
    let (k, c, dd) = (par.k, par.c, par.dd);
    let len = seq.len;
    let delta = interval(delta, len);
    let n_int = (len + 1).div_ceil(delta);
    let mut parts = Partials {
        tr: vec![0.0; par.tr.len()],
        dur: vec![0.0; k * c],
        start: vec![0.0; c],
        end: vec![0.0; c],
    };
    // Pass 1: forward, saving a checkpoint at the start of every interval.
    // The last interval's α, u and P are kept from this pass (it is the first one needed).
    let mut cps = Checkpoints::new(n_int, k, c, dd);
    let mut f = Fwd::new(par);
    let mut ab = vec![0.0; delta * c];
    let mut ub = vec![0.0; delta * c];
    let mut pb = vec![0.0; delta * c];
    let last0 = (n_int - 1) * delta;
    for p in 0..=len {
        if p % delta == 0 {
            f.save(&mut cps, p / delta);
        }
        if p >= last0 {
            let r = (p - last0) * c;
            pb[r..r + c].copy_from_slice(&f.pref);
            f.step::<false, F>(p, seq, par);
            ab[r..r + c].copy_from_slice(&f.alpha);
            ub[r..r + c].copy_from_slice(&f.u);
        } else {
            f.step::<false, F>(p, seq, par);
        }
    }
    let log_z = f.total::<false>(par);
    if log_z == NEG {
        return (log_z, parts);
    }
    // Pass 2: intervals from last to first: β runs down through interval n while the forward
    // quantities of interval n-1 are recomputed from its checkpoint (concurrently when
    // `pipeline`, which needs a second set of interval buffers; the results are the same).
    let mut bw = Bwd::new(par, len);
    let SeqOut {
        scores: pos_out,
        mut bb,
        mut eb,
        bm,
    } = out;
    let mut cur = IntervalBufs { ab, ub, pb };
    let mut next = if pipeline && n_int > 1 {
        IntervalBufs::new(delta * c)
    } else {
        IntervalBufs::new(0)
    };
    for n in (0..n_int).rev() {
        let p0 = n * delta;
        let p1 = ((n + 1) * delta).min(len + 1);
        let mut run_beta = |bufs: &IntervalBufs| {
            for s in (p0..p1).rev() {
                let r = (s - p0) * c;
                let at = Here {
                    s,
                    alpha: &bufs.ab[r..r + c],
                    u: &bufs.ub[r..r + c],
                    pref: &bufs.pb[r..r + c],
                };
                if s == len {
                    bw.init(&at, seq, par, log_z, &mut parts);
                    if let Some(eb) = eb.as_deref_mut() {
                        for j in 0..c {
                            eb[(len - 1) * c + j] = g * bw.endm[j];
                        }
                    }
                    continue;
                }
                if dd {
                    bw.step_dd(&at, seq, par, log_z, &mut parts, pos_out);
                } else {
                    bw.step(&at, seq, par, log_z, &mut parts, pos_out);
                }
                let mut total = 0.0;
                for j in 0..c {
                    total += bw.bgn[j];
                }
                bm[s] = total;
                if let Some(bb) = bb.as_deref_mut() {
                    for j in 0..c {
                        bb[s * c + j] = g * bw.bgn[j];
                    }
                }
                if let (true, Some(eb)) = (s > 0, eb.as_deref_mut()) {
                    for j in 0..c {
                        eb[(s - 1) * c + j] = g * bw.endm[j];
                    }
                }
            }
        };
        if n == 0 {
            run_beta(&cur);
        } else if pipeline {
            let (f, cps) = (&mut f, &cps);
            let next_ref = &mut next;
            rayon::join(
                || recompute(f, cps, n - 1, delta, seq, par, next_ref),
                || run_beta(&cur),
            );
            std::mem::swap(&mut cur, &mut next);
        } else {
            run_beta(&cur);
            recompute(&mut f, &cps, n - 1, delta, seq, par, &mut cur);
        }
    }
    // Position marginals: prefix sums of the differences, scaled by g.
    let mut run = vec![0.0; c];
    for t in 0..len {
        let row = &mut pos_out[t * c..(t + 1) * c];
        for j in 0..c {
            run[j] += row[j];
            row[j] = g * run[j];
        }
    }
    (log_z, parts)
}

/// `α`, `u` and `P` of the positions of one interval, `[(p - p0)*C + j]`.
struct IntervalBufs {
    ab: Vec<f64>,
    ub: Vec<f64>,
    pb: Vec<f64>,
}

impl IntervalBufs {
    fn new(n: usize) -> Self {
        IntervalBufs {
            ab: vec![0.0; n],
            ub: vec![0.0; n],
            pb: vec![0.0; n],
        }
    }
}

/// Restores checkpoint `n` and recomputes the forward quantities of interval `n` into `bufs`.
fn recompute<F: Scalar>(
    f: &mut Fwd,
    cps: &Checkpoints,
    n: usize,
    delta: usize,
    seq: &SeqIn<'_, F>,
    par: &Params,
    bufs: &mut IntervalBufs,
) {
    let c = par.c;
    let p0 = n * delta;
    let p1 = ((n + 1) * delta).min(seq.len + 1);
    f.restore(cps, n, p0);
    for p in p0..p1 {
        let r = (p - p0) * c;
        bufs.pb[r..r + c].copy_from_slice(&f.pref);
        f.step::<false, F>(p, seq, par);
        bufs.ab[r..r + c].copy_from_slice(&f.alpha);
        bufs.ub[r..r + c].copy_from_slice(&f.u);
    }
}

/// The recomputed forward quantities at one position.
struct Here<'b> {
    s: usize,
    alpha: &'b [f64],
    u: &'b [f64],
    pref: &'b [f64],
}

/// The backward state: a ring of `w_e(j) = β_e(j) + P[e, j] + end_boundary[e-1, j]` (static:
/// doubled, `wring[j*2K + e mod K]`; duration-dependent: `wring[(e mod K)*C + j]`), the next
/// `-inf` score per label, and the per-position marginals of the last step. `P` is relative
/// to the origin the forward pass used at the position being processed (the ring is moved
/// back to the earlier origin where the forward pass re-anchored).
struct Bwd {
    k: usize,
    c: usize,
    len: usize,
    wring: Vec<f64>,
    next_neg: Vec<usize>,
    gamma: Vec<f64>,
    /// P(a segment of label j starts at s), last step.
    bgn: Vec<f64>,
    /// P(a segment of label i ends at s), last step.
    endm: Vec<f64>,
    /// The position of the step being processed.
    s: usize,
    /// Duration-dependent: `μ(s, d, j)` of the current step at `[(d-1)*C + j]`.
    cover: Vec<f64>,
    /// The largest duration of the current step.
    maxd: usize,
    buf: Vec<f64>,
    ybuf: Vec<f64>,
    row: Vec<f64>,
    row2: Vec<f64>,
    /// Static: `lin[j*2K + slot] = exp(w_e(j) - sigma[j])`, laid out as `wring`.
    lin: Vec<f64>,
    sigma: Vec<f64>,
    gx: Vec<f64>,
    sums: Vec<f64>,
    lns: Vec<f64>,
    fx: Vec<f64>,
    exact: Vec<bool>,
    dmax: Vec<usize>,
    /// The next position (going down) after which the forward pass re-anchored its prefix
    /// sums; `usize::MAX` when there is none.
    anchor_at: usize,
}

impl Bwd {
    fn new(par: &Params, len: usize) -> Self {
        let (k, c) = (par.k, par.c);
        Bwd {
            k,
            c,
            len,
            wring: vec![NEG; if par.dd { k * c } else { 2 * k * c }],
            next_neg: vec![len; c],
            gamma: vec![NEG; c],
            bgn: vec![0.0; c],
            endm: vec![0.0; c],
            s: len,
            cover: vec![0.0; if par.dd { k * c } else { 0 }],
            maxd: 0,
            buf: vec![0.0; if par.dd { k * c } else { k.max(c) }],
            ybuf: vec![NEG; if par.dd { k * c } else { 0 }],
            row: vec![0.0; c],
            row2: vec![0.0; c],
            lin: if par.dd {
                Vec::new()
            } else {
                vec![0.0; 2 * k * c]
            },
            sigma: vec![NEG; c],
            gx: vec![0.0; c],
            sums: vec![0.0; c],
            lns: vec![0.0; c],
            fx: vec![0.0; c],
            exact: vec![false; c],
            dmax: vec![0; c],
            anchor_at: (len - len % k).wrapping_sub(1),
        }
    }

    /// Recomputes `sigma[j]` and the linear entries of label `j` for ends `lo..=hi`.
    fn rebuild(&mut self, j: usize, lo: usize, hi: usize) {
        let k = self.k;
        let base = j * 2 * k;
        let mut m = NEG;
        for e in lo..=hi {
            let v = self.wring[base + e % k];
            if v > m {
                m = v;
            }
        }
        self.sigma[j] = m;
        for e in lo..=hi {
            let x = if m == NEG {
                0.0
            } else {
                exp_fast(self.wring[base + e % k] - m)
            };
            self.lin[base + e % k] = x;
            self.lin[base + e % k + k] = x;
        }
    }

    #[inline]
    fn push_w(&mut self, e: usize, beta_plus: &[f64], dd: bool) {
        let (k, c) = (self.k, self.c);
        let slot = e % k;
        if dd {
            self.wring[slot * c..(slot + 1) * c].copy_from_slice(&beta_plus[..c]);
            return;
        }
        for j in 0..c {
            let w = beta_plus[j];
            let base = j * 2 * k;
            self.wring[base + slot] = w;
            self.wring[base + slot + k] = w;
            let x = w - self.sigma[j];
            let rebase = w != NEG && (self.sigma[j] == NEG || x > REBASE);
            self.exact[j] = rebase;
            self.gx[j] = if w == NEG || rebase { NEG } else { x };
        }
        exp_in_place(&mut self.gx);
        for j in 0..c {
            if self.exact[j] {
                let hi = (e + k - 1).min(self.len).min(self.next_neg[j]).max(e);
                self.rebuild(j, e, hi);
            } else {
                let base = j * 2 * k;
                self.lin[base + slot] = self.gx[j];
                self.lin[base + slot + k] = self.gx[j];
            }
        }
    }

    /// Position `L`: `β_L = end`; end marginals.
    fn init<F: Scalar>(
        &mut self,
        at: &Here<'_>,
        seq: &SeqIn<'_, F>,
        par: &Params,
        log_z: f64,
        parts: &mut Partials,
    ) {
        let c = self.c;
        seq.eb_row(self.len - 1, &mut self.row);
        for j in 0..c {
            let e = (at.alpha[j] + par.end[j] - log_z).exp();
            self.endm[j] = e;
            parts.end[j] += e;
            self.row2[j] = par.end[j] + at.pref[j] + self.row[j];
        }
        let bp = std::mem::take(&mut self.row2);
        self.push_w(self.len, &bp, par.dd);
        self.row2 = bp;
    }

    /// Updates the next `-inf` score per label with `scores[s]` and, where the forward pass
    /// re-anchored its prefix sums after `s`, moves the ring to the origin of `s`: the
    /// forward pass subtracted `D = P̃[s] + scores[s]` (the very same sum, so the same
    /// number) from the prefix sums of the positions after `s`, and `w = β + P̃ + eb` of those
    /// positions is `D` below its value relative to the origin of `s`.
    #[inline]
    fn see_scores<F: Scalar>(&mut self, s: usize, pref: &[f64], seq: &SeqIn<'_, F>, dd: bool) {
        let (k, c) = (self.k, self.c);
        seq.scores_row(s, &mut self.row);
        for j in 0..c {
            if self.row[j] == NEG {
                self.next_neg[j] = s;
            }
        }
        if s != self.anchor_at {
            return;
        }
        self.anchor_at = s.wrapping_sub(k);
        for j in 0..c {
            let x = self.row[j];
            let d = if x == NEG { pref[j] } else { pref[j] + x };
            if d.abs() <= ANCHOR_MIN {
                continue;
            }
            if dd {
                for slot in 0..k {
                    self.wring[slot * c + j] += d;
                }
            } else {
                for w in &mut self.wring[j * 2 * k..(j + 1) * 2 * k] {
                    *w += d;
                }
                self.sigma[j] += d;
            }
        }
    }

    /// A position `s < L`, static transition: `γ_s` from the linear `β` ring and `β_s` as a
    /// matrix-vector product, with the marginals as products of the same linear factors;
    /// every sum below its threshold (`tau_ring`, [`TAU`]) or scale factor above `exp(MAX_ARG)` takes the exact log path.
    fn step<F: Scalar>(
        &mut self,
        at: &Here<'_>,
        seq: &SeqIn<'_, F>,
        par: &Params,
        log_z: f64,
        parts: &mut Partials,
        pos: &mut [f64],
    ) {
        let (k, c, len, s) = (self.k, self.c, self.len, at.s);
        self.s = s;
        self.see_scores(s, at.pref, seq, par.dd);
        seq.bb_row(s, &mut self.row);
        let slot = (s + 1) % k;
        // Phase 1: linear sums per label (rebuilding a label's ring when its sum is too small)
        // and the arguments of the marginal scale factors.
        for j in 0..c {
            let dmax = k.min(len - s).min(self.next_neg[j] - s);
            self.dmax[j] = dmax;
            self.gamma[j] = NEG;
            self.bgn[j] = 0.0;
            self.sums[j] = 1.0;
            self.fx[j] = NEG;
            self.exact[j] = false;
            if dmax == 0 || par.dmaxdur[j] == NEG {
                self.dmax[j] = 0;
                continue;
            }
            let off = j * 2 * k + slot;
            let dl = &par.dlin[j * k..j * k + dmax];
            let mut sum = dot(&self.lin[off..off + dmax], dl);
            if sum < par.tau_ring {
                self.rebuild(j, s + 1, s + dmax);
                sum = dot(&self.lin[off..off + dmax], dl);
            }
            let q = self.row[j] - at.pref[j];
            let farg = at.u[j] + q + self.sigma[j] + par.dmaxdur[j] - log_z;
            if sum >= par.tau_ring && farg <= MAX_ARG {
                self.sums[j] = sum;
                self.fx[j] = farg;
            } else {
                self.exact[j] = true;
            }
        }
        // Phase 2: logarithms and exponentials of all labels at once.
        self.lns.copy_from_slice(&self.sums);
        ln_in_place(&mut self.lns);
        exp_in_place(&mut self.fx);
        for j in 0..c {
            let dmax = self.dmax[j];
            if dmax == 0 {
                continue;
            }
            let off = j * 2 * k + slot;
            let q = self.row[j] - at.pref[j];
            if self.exact[j] {
                self.gamma_exact(j, dmax, off, q, at.u[j], par, log_z, parts, pos);
                continue;
            }
            self.gamma[j] = self.sigma[j] + par.dmaxdur[j] + self.lns[j] + q;
            let f = self.fx[j];
            if f > 0.0 {
                let dl = &par.dlin[j * k..j * k + dmax];
                let dg = &mut parts.dur[j * k..j * k + dmax];
                let w = &self.lin[off..off + dmax];
                // A segment of duration d+1 covers s..s+d+1: it leaves the position
                // marginals (kept as differences until the end) at s+d+1.
                let mu = &mut self.buf[..dmax];
                for d in 0..dmax {
                    mu[d] = f * (w[d] * dl[d]);
                    dg[d] += mu[d];
                }
                let n = dmax.min(len - s - 1);
                if n > 0 {
                    let tail = &mut pos[(s + 1) * c + j..];
                    for (p, &m) in tail.iter_mut().step_by(c).zip(&mu[..n]) {
                        *p -= m;
                    }
                }
                self.bgn[j] = f * self.sums[j];
            }
        }
        for j in 0..c {
            pos[s * c + j] += self.bgn[j];
        }
        if s == 0 {
            for j in 0..c {
                parts.start[j] += self.bgn[j];
            }
            return;
        }
        // β_s(i) = ⊕_j tr[i, j] ⊗ γ_s(j); transition and end marginals.
        seq.eb_row(s - 1, &mut self.row);
        let m = max_of(&self.gamma);
        if m == NEG {
            self.endm.fill(0.0);
            self.row2.fill(NEG);
        } else {
            for (g, &x) in self.gx.iter_mut().zip(&self.gamma) {
                *g = x - m;
            }
            exp_in_place(&mut self.gx);
            for i in 0..c {
                let sum = dot(&par.elin[i * c..(i + 1) * c], &self.gx);
                let harg = at.alpha[i] + par.rowmax[i] + m - log_z;
                let ok = sum >= TAU && harg <= MAX_ARG;
                self.exact[i] = !ok;
                self.sums[i] = if ok { sum } else { 1.0 };
                self.fx[i] = if ok { harg } else { NEG };
            }
            self.lns.copy_from_slice(&self.sums);
            ln_in_place(&mut self.lns);
            exp_in_place(&mut self.fx);
            for i in 0..c {
                self.endm[i] = 0.0;
                let beta = if par.rowmax[i] == NEG {
                    NEG
                } else if self.exact[i] {
                    self.beta_exact(i, at.alpha[i], par, log_z, parts)
                } else {
                    let h = self.fx[i];
                    if h > 0.0 {
                        let e = &par.elin[i * c..(i + 1) * c];
                        let tg = &mut parts.tr[i * c..(i + 1) * c];
                        for j in 0..c {
                            tg[j] += h * (e[j] * self.gx[j]);
                        }
                        self.endm[i] = h * self.sums[i];
                    }
                    m + par.rowmax[i] + self.lns[i]
                };
                self.row2[i] = beta + at.pref[i] + self.row[i];
            }
        }
        let bp = std::mem::take(&mut self.row2);
        self.push_w(s, &bp, false);
        self.row2 = bp;
    }

    /// `γ_s(j)`, its duration marginals and `bgn[j]`, exactly in the log domain.
    fn gamma_exact(
        &mut self,
        j: usize,
        dmax: usize,
        off: usize,
        q: f64,
        u: f64,
        par: &Params,
        log_z: f64,
        parts: &mut Partials,
        pos: &mut [f64],
    ) {
        let (k, c, s) = (self.k, self.c, self.s);
        let buf = &mut self.buf[..dmax];
        let (l, m, sum) = lse_add(
            &self.wring[off..off + dmax],
            &par.dur[j * k..j * k + dmax],
            buf,
        );
        if m == NEG {
            return;
        }
        self.gamma[j] = l + q;
        let scale = (u + q + m - log_z).exp();
        if scale > 0.0 {
            let dg = &mut parts.dur[j * k..j * k + dmax];
            let mut tot = 0.0;
            for d in 0..dmax {
                let mu = buf[d] * scale;
                dg[d] += mu;
                tot += mu;
                if s + d + 1 < self.len {
                    pos[(s + d + 1) * c + j] -= mu;
                }
            }
            self.bgn[j] = tot;
        }
        let _ = sum;
    }

    /// `β_s(i)`, its transition marginals and `endm[i]`, exactly in the log domain.
    fn beta_exact(
        &mut self,
        i: usize,
        alpha: f64,
        par: &Params,
        log_z: f64,
        parts: &mut Partials,
    ) -> f64 {
        let c = self.c;
        let buf = &mut self.buf[..c];
        let (l, m, sum) = lse_add(&par.tr[i * c..(i + 1) * c], &self.gamma, buf);
        if m != NEG {
            let scale = (alpha + m - log_z).exp();
            if scale > 0.0 {
                let tg = &mut parts.tr[i * c..(i + 1) * c];
                for (g, &x) in tg.iter_mut().zip(buf.iter()) {
                    *g += x * scale;
                }
                self.endm[i] = sum * scale;
            }
        }
        l
    }

    /// Duration-dependent: from `cover[(d-1)*C + j] = μ(s, d, j)` (summed over the previous
    /// label; zero for `d > maxd`), records the segments starting at `s` in the position
    /// marginals' differences (`+` at `s`, `-` at `s+d`) and sets `bgn`.
    fn cover_positions(&mut self, pos: &mut [f64]) {
        let (c, s, len) = (self.c, self.s, self.len);
        self.bgn.fill(0.0);
        for d in 0..self.maxd {
            let mu = &self.cover[d * c..(d + 1) * c];
            for j in 0..c {
                self.bgn[j] += mu[j];
            }
            if s + d + 1 < len {
                let out = &mut pos[(s + d + 1) * c..(s + d + 2) * c];
                for j in 0..c {
                    out[j] -= mu[j];
                }
            }
        }
        for j in 0..c {
            pos[s * c + j] += self.bgn[j];
        }
    }

    /// A position `s < L`, duration-dependent transition.
    fn step_dd<F: Scalar>(
        &mut self,
        at: &Here<'_>,
        seq: &SeqIn<'_, F>,
        par: &Params,
        log_z: f64,
        parts: &mut Partials,
        pos: &mut [f64],
    ) {
        let (k, c, len, s) = (self.k, self.c, self.len, at.s);
        self.s = s;
        self.see_scores(s, at.pref, seq, par.dd);
        seq.bb_row(s, &mut self.row);
        // y[(d-1)*C + j] = w_{s+d}(j) + dur[d-1, j] + bb[s, j] - P[s, j] (seg ⊗ β_{s+d}).
        for j in 0..c {
            let dmax = k.min(len - s).min(self.next_neg[j] - s);
            let q = self.row[j] - at.pref[j];
            for d in 1..=k {
                self.ybuf[(d - 1) * c + j] = if d <= dmax {
                    self.wring[((s + d) % k) * c + j] + par.dur[j * k + d - 1] + q
                } else {
                    NEG
                };
            }
            self.bgn[j] = 0.0;
        }
        self.maxd = k.min(len - s);
        self.cover.fill(0.0);
        if s == 0 {
            for j in 0..c {
                for d in 1..=k {
                    let mu = (par.start[j] + self.ybuf[(d - 1) * c + j] - log_z).exp();
                    parts.dur[j * k + d - 1] += mu;
                    self.cover[(d - 1) * c + j] = mu;
                }
            }
            self.cover_positions(pos);
            for j in 0..c {
                parts.start[j] += self.bgn[j];
            }
            return;
        }
        seq.eb_row(s - 1, &mut self.row);
        for i in 0..c {
            let tr = &par.tr[i * k * c..(i + 1) * k * c];
            let buf = &mut self.buf[..k * c];
            let (l, m, sum) = lse_add(tr, &self.ybuf, buf);
            self.endm[i] = 0.0;
            if m != NEG {
                let scale = (at.alpha[i] + m - log_z).exp();
                if scale > 0.0 {
                    let tg = &mut parts.tr[i * k * c..(i + 1) * k * c];
                    for (g, x) in tg.iter_mut().zip(buf.iter_mut()) {
                        *x *= scale;
                        *g += *x;
                    }
                    for d in 0..k {
                        for j in 0..c {
                            let mu = buf[d * c + j];
                            parts.dur[j * k + d] += mu;
                            self.cover[d * c + j] += mu;
                        }
                    }
                    self.endm[i] = sum * scale;
                }
            }
            self.row2[i] = l + at.pref[i] + self.row[i];
        }
        self.cover_positions(pos);
        let bp = std::mem::take(&mut self.row2);
        self.push_w(s, &bp, true);
        self.row2 = bp;
    }
}

/// Viterbi of one sequence with `O(L·C)` backpointers; `bp_dur[t*C + j]` is the best duration
/// of a segment of label `j` ending at `t`, `bp_prev[s*C + j]` the best previous label of a
/// segment of label `j` starting at `s` (duration-dependent transition: of the best segment
/// ending at `t`).
pub(crate) fn viterbi<F: Scalar>(seq: &SeqIn<'_, F>, par: &Params) -> Decoded {
    let (k, c) = (par.k, par.c);
    let len = seq.len;
    let mut bp_dur = vec![0u32; (len + 1) * c];
    let mut bp_prev = vec![0u32; (len + 1) * c];
    let mut f = Fwd::new(par);
    for p in 0..=len {
        if !par.dd {
            f.step_viterbi(p, seq, par, &mut bp_dur, &mut bp_prev);
            continue;
        }
        if p >= 1 {
            // Backpointers of α_p from the ring as it stands before the step.
            for j in 0..c {
                let dmax = k.min(p - f.z[j]);
                if dmax == 0 {
                    continue;
                }
                let mut best = NEG;
                let (mut bd, mut bi) = (1usize, 0usize);
                for d in 1..=dmax {
                    let s = p - d;
                    let slot = s % k;
                    let (inner, i) = if s == 0 {
                        (par.start[j], 0)
                    } else {
                        let a = &f.ring[slot * c..(slot + 1) * c];
                        let o = (d - 1) * c * c + j * c;
                        argmax_add(a, &par.tr_t[o..o + c], false, &mut f.buf)
                    };
                    let x = inner + f.qring[slot * c + j] + par.dur[j * k + d - 1];
                    if x > best {
                        best = x;
                        bd = d;
                        bi = i;
                    }
                }
                bp_dur[p * c + j] = bd as u32;
                bp_prev[p * c + j] = bi as u32;
            }
        }
        f.step::<true, F>(p, seq, par);
    }
    // Final label: the smallest index attaining the maximum.
    let (score, j) = argmax_add(&f.alpha, &par.end, false, &mut f.buf);
    if score == NEG {
        return Decoded {
            score,
            segments: Vec::new(),
        };
    }
    // Trace back twice: once to count the segments, once to fill an exact allocation.
    let back = |mut j: usize, mut visit: Box<dyn FnMut(Segment) + '_>| {
        let mut t = len;
        while t > 0 {
            let d = bp_dur[t * c + j] as usize;
            let s = t - d;
            visit(Segment::new(s, d, j));
            if s == 0 {
                break;
            }
            j = if par.dd {
                bp_prev[t * c + j] as usize
            } else {
                bp_prev[s * c + j] as usize
            };
            t = s;
        }
    };
    let mut n = 0usize;
    back(j, Box::new(|_| n += 1));
    let mut segments = Vec::with_capacity(n);
    back(j, Box::new(|seg| segments.push(seg)));
    segments.reverse();
    Decoded { score, segments }
}
