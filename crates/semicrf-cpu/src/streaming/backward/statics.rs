//! The outside pass for a static `(C, C)` transition, in the linear domain: the ring of `w`
//! is a [`LinearRing`] and the transition step a dot product with the rows of a
//! [`LinearMatrix`], so the marginals are products of the same linear factors.

use semicrf_core::{LogSemiring, Scalar};
use semicrf_semiring::kernels::{dot, exp_in_place, ln_in_place, lse_add, max_of};
use semicrf_semiring::{Lag, LinearMatrix, LinearRing, LinearWeights, Matrix, Ring};

use super::{Common, Here, MAX_ARG, NEG, Outside, Partials, Rows};
use crate::streaming::input::SeqIn;
use crate::streaming::params::Params;

/// Static transition, in the linear domain (see the module docs).
pub(crate) struct StaticBwd {
    cm: Common,
    ring: LinearRing,
    /// Pending sums for the position marginals' differences at segments' last positions,
    /// label-major and doubled like a ring (`ends[j*2K + e mod K]` and `+ K`): the segments
    /// that start at `s` end at `s ..= s+K-1`, one contiguous slice per label; a position is
    /// flushed into the differences once no later step can reach it (see
    /// [`StaticBwd::flush`]).
    ends: Vec<f64>,
    gamma: Vec<f64>,
    first: Vec<usize>,
    n: Vec<usize>,
    gx: Vec<f64>,
    sums: Vec<f64>,
    lns: Vec<f64>,
    fx: Vec<f64>,
    exact: Vec<bool>,
    buf: Vec<f64>,
}

impl StaticBwd {
    /// Moves the pending sums of position `e` (both copies of its slot) into the position
    /// marginals' differences.
    fn flush(&mut self, e: usize, pos: &mut Rows) {
        let (k, c) = (self.cm.k, self.cm.c);
        if e >= self.cm.len {
            return;
        }
        let slot = e % k;
        let row = pos.diff(e);
        for j in 0..c {
            let a = j * 2 * k + slot;
            let v = self.ends[a] + self.ends[a + k];
            self.ends[a] = 0.0;
            self.ends[a + k] = 0.0;
            row[j] += v;
        }
    }

    /// `γ_s(j)`, its duration marginals and `bgn[j]`, exactly in the log domain.
    #[allow(clippy::too_many_arguments)]
    fn gamma_exact(
        &mut self,
        j: usize,
        s: usize,
        eslot: usize,
        n: usize,
        q: f64,
        u: f64,
        w: &LinearWeights,
        log_z: f64,
        parts: &mut Partials,
    ) {
        let k = self.cm.k;
        let buf = &mut self.buf[..n];
        let (l, m, _) = lse_add(self.ring.log_window(j, s + 1, n), w.raw(j, n), buf);
        if m == NEG {
            return;
        }
        self.gamma[j] = l + q;
        let scale = (u + q + m - log_z).exp();
        if scale > 0.0 {
            let dg = &mut parts.dur[j * k..j * k + n];
            let off = j * 2 * k + eslot;
            let mut tot = 0.0;
            for d in 0..n {
                let mu = buf[d] * scale;
                dg[d] += mu;
                tot += mu;
                self.ends[off + d] += mu;
            }
            self.cm.bgn[j] = tot;
        }
    }

    /// `β_s(i)`, its transition marginals and `endm[i]`, exactly in the log domain.
    fn beta_exact(
        &mut self,
        i: usize,
        alpha: f64,
        raw: &[f64],
        log_z: f64,
        parts: &mut Partials,
    ) -> f64 {
        let c = self.cm.c;
        let buf = &mut self.buf[..c];
        let (l, m, sum) = lse_add(raw, &self.gamma, buf);
        if m != NEG {
            let scale = (alpha + m - log_z).exp();
            if scale > 0.0 {
                let tg = &mut parts.tr[i * c..(i + 1) * c];
                for (g, &x) in tg.iter_mut().zip(buf.iter()) {
                    *g += x * scale;
                }
                self.cm.endm[i] = sum * scale;
            }
        }
        l
    }
}

impl Outside for StaticBwd {
    /// The duration weights for windows of ends after a start, and the transition's rows.
    type Shared = (LinearWeights, LinearMatrix);

    fn shared(par: &Params<LogSemiring>) -> Self::Shared {
        let (k, c) = (par.k, par.c);
        let mut rows = vec![0.0; c * c];
        for i in 0..c {
            for j in 0..c {
                rows[j * c + i] = par.tr[i * c + j];
            }
        }
        (
            LinearRing::weights(&par.dur, k, c, Lag::FromStart),
            LinearMatrix::new(&rows, c),
        )
    }
    fn shared_words(k: usize, c: usize) -> usize {
        LinearRing::weight_words(k, c) + 2 * c * c + c + c * c
    }

    fn new(par: &Params<LogSemiring>, len: usize) -> Self {
        let (k, c) = (par.k, par.c);
        StaticBwd {
            cm: Common::new(k, c, len),
            ring: LinearRing::new(k, c),
            ends: vec![0.0; 2 * k * c],
            gamma: vec![NEG; c],
            first: vec![0; c],
            n: vec![0; c],
            gx: vec![0.0; c],
            sums: vec![0.0; c],
            lns: vec![0.0; c],
            fx: vec![0.0; c],
            exact: vec![false; c],
            buf: vec![0.0; k.max(c)],
        }
    }
    fn words(k: usize, c: usize) -> usize {
        Common::words(c) + LinearRing::words(k, c) + 2 * k * c + 8 * c + k.max(c)
    }

    fn init<F: Scalar>(
        &mut self,
        at: &Here<'_>,
        seq: &SeqIn<'_, F>,
        par: &Params<LogSemiring>,
        log_z: f64,
        parts: &mut Partials,
    ) {
        self.cm.init(at, seq, par, log_z, parts);
        self.ring.push(self.cm.len, &self.cm.row2);
    }

    fn step<F: Scalar>(
        &mut self,
        at: &Here<'_>,
        seq: &SeqIn<'_, F>,
        par: &Params<LogSemiring>,
        shared: &Self::Shared,
        log_z: f64,
        parts: &mut Partials,
        pos: &mut Rows,
    ) {
        let (k, c, len, s) = (self.cm.k, self.cm.c, self.cm.len, at.s);
        let (w, rows) = shared;
        // The slot of position s in the ring of pending position-marginal sums.
        let eslot = s % k;
        // No step from here down reaches position s+K any more.
        self.flush(s + k, pos);
        let ring = &mut self.ring;
        self.cm.see_scores(s, at.pref, seq, |j, d| ring.shift(j, d));
        seq.bb_row(s, &mut self.cm.row);
        // Phase 1: linear window sums of every label (rebuilding a label's twins where
        // needed) and the arguments of the marginal scale factors.
        for j in 0..c {
            let n = par.kmax[j].min(len - s).min(self.cm.next_neg[j] - s);
            self.n[j] = if w.max(j) == NEG { 0 } else { n };
            self.first[j] = s + 1;
        }
        self.ring
            .linear_sums(&self.first, &self.n, w, &mut self.sums, &mut self.exact);
        for j in 0..c {
            self.gamma[j] = NEG;
            self.cm.bgn[j] = 0.0;
            self.fx[j] = NEG;
            if self.n[j] == 0 || self.exact[j] {
                continue;
            }
            let q = self.cm.row[j] - at.pref[j];
            let farg = at.u[j] + q + self.ring.reference(j) + w.max(j) - log_z;
            if farg <= MAX_ARG {
                self.fx[j] = farg;
            } else {
                self.exact[j] = true;
                self.sums[j] = 1.0;
            }
        }
        // Phase 2: logarithms and exponentials of all labels at once.
        self.lns.copy_from_slice(&self.sums);
        ln_in_place(&mut self.lns);
        exp_in_place(&mut self.fx);
        for j in 0..c {
            let n = self.n[j];
            if n == 0 {
                continue;
            }
            let q = self.cm.row[j] - at.pref[j];
            if self.exact[j] {
                self.gamma_exact(j, s, eslot, n, q, at.u[j], w, log_z, parts);
                continue;
            }
            self.gamma[j] = self.ring.reference(j) + w.max(j) + self.lns[j] + q;
            let f = self.fx[j];
            if f > 0.0 {
                let dl = w.linear(j, n);
                let lin = self.ring.linear_window(j, s + 1, n);
                let dg = &mut parts.dur[j * k..j * k + n];
                // A segment of duration d+1 covers s..=s+d: its marginal enters the position
                // marginals' differences at its last position s+d, through the ring.
                let off = j * 2 * k + eslot;
                let ends = &mut self.ends[off..off + n];
                for d in 0..n {
                    let mu = f * (lin[d] * dl[d]);
                    dg[d] += mu;
                    ends[d] += mu;
                }
                self.cm.bgn[j] = f * self.sums[j];
            }
        }
        if s > 0 {
            let row = pos.diff(s - 1);
            for j in 0..c {
                row[j] -= self.cm.bgn[j];
            }
        }
        if s == 0 {
            for j in 0..c {
                parts.start[j] += self.cm.bgn[j];
            }
            return;
        }
        // β_s(i) = ⊕_j tr[i, j] ⊗ γ_s(j); transition and end marginals.
        seq.eb_row(s - 1, &mut self.cm.row);
        let m = max_of(&self.gamma);
        if m == NEG {
            self.cm.endm.fill(0.0);
            self.cm.row2.fill(NEG);
        } else {
            for (g, &x) in self.gx.iter_mut().zip(&self.gamma) {
                *g = x - m;
            }
            exp_in_place(&mut self.gx);
            for i in 0..c {
                let (_, lin, rowmax) = rows.column(i);
                let sum = dot(lin, &self.gx);
                let harg = at.alpha[i] + rowmax + m - log_z;
                let ok = sum >= LinearMatrix::MIN_SUM && harg <= MAX_ARG;
                self.exact[i] = !ok;
                self.sums[i] = if ok { sum } else { 1.0 };
                self.fx[i] = if ok { harg } else { NEG };
            }
            self.lns.copy_from_slice(&self.sums);
            ln_in_place(&mut self.lns);
            exp_in_place(&mut self.fx);
            for i in 0..c {
                self.cm.endm[i] = 0.0;
                let (raw, lin, rowmax) = rows.column(i);
                let beta = if rowmax == NEG {
                    NEG
                } else if self.exact[i] {
                    self.beta_exact(i, at.alpha[i], raw, log_z, parts)
                } else {
                    let h = self.fx[i];
                    if h > 0.0 {
                        let tg = &mut parts.tr[i * c..(i + 1) * c];
                        for j in 0..c {
                            tg[j] += h * (lin[j] * self.gx[j]);
                        }
                        self.cm.endm[i] = h * self.sums[i];
                    }
                    m + rowmax + self.lns[i]
                };
                self.cm.row2[i] = beta + at.pref[i] + self.cm.row[i];
            }
        }
        self.ring.push(s, &self.cm.row2);
    }

    fn finish(&mut self, pos: &mut Rows) {
        for e in 0..self.cm.k {
            self.flush(e, pos);
        }
    }

    fn common(&self) -> &Common {
        &self.cm
    }
}
