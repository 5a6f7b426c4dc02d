//! The outside pass for a duration-dependent `(K, C, C)` transition, in the log domain.

use semicrf_core::{LogSemiring, Scalar};
use semicrf_semiring::kernels::lse_add;

use super::{Common, Here, NEG, Outside, Partials, Rows};
use crate::streaming::input::SeqIn;
use crate::streaming::params::Params;

/// Duration-dependent transition, in the log domain.
pub(crate) struct DdBwd {
    cm: Common,
    /// `wring[(e mod K)*C + j]`.
    wring: Vec<f64>,
    /// `μ(s, d, j)` of the current step at `[(d-1)*C + j]`, summed over the previous label.
    cover: Vec<f64>,
    /// `y[(d-1)*C + j] = w_{s+d}(j) + dur[d-1, j] + bb[s, j] - P[s, j]` (seg ⊗ β_{s+d}).
    y: Vec<f64>,
    buf: Vec<f64>,
}

impl DdBwd {
    /// From `cover` (zero for `d > maxd`), records the segments starting at `s` in the
    /// position marginals' differences (`+` at their last position `s+d-1`, `-` at `s-1`,
    /// see [`super::emit`]) and sets `bgn`.
    fn cover_positions(&mut self, s: usize, maxd: usize, pos: &mut Rows) {
        let c = self.cm.c;
        self.cm.bgn.fill(0.0);
        for d in 0..maxd {
            let mu = &self.cover[d * c..(d + 1) * c];
            let out = pos.diff(s + d);
            for j in 0..c {
                self.cm.bgn[j] += mu[j];
                out[j] += mu[j];
            }
        }
        if s > 0 {
            let out = pos.diff(s - 1);
            for j in 0..c {
                out[j] -= self.cm.bgn[j];
            }
        }
    }
}

impl Outside for DdBwd {
    type Shared = ();

    fn shared(_par: &Params<LogSemiring>) -> Self::Shared {}
    fn shared_words(_k: usize, _c: usize) -> usize {
        0
    }

    fn new(par: &Params<LogSemiring>, len: usize) -> Self {
        let (k, c) = (par.k, par.c);
        DdBwd {
            cm: Common::new(k, c, len),
            wring: vec![NEG; k * c],
            cover: vec![0.0; k * c],
            y: vec![NEG; k * c],
            buf: vec![0.0; k * c],
        }
    }
    fn words(k: usize, c: usize) -> usize {
        Common::words(c) + 4 * k * c
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
        let (k, c) = (self.cm.k, self.cm.c);
        let slot = self.cm.len % k;
        self.wring[slot * c..(slot + 1) * c].copy_from_slice(&self.cm.row2);
    }

    fn step<F: Scalar>(
        &mut self,
        at: &Here<'_>,
        seq: &SeqIn<'_, F>,
        par: &Params<LogSemiring>,
        _shared: &(),
        log_z: f64,
        parts: &mut Partials,
        pos: &mut Rows,
    ) {
        let (k, c, len, s) = (self.cm.k, self.cm.c, self.cm.len, at.s);
        let wring = &mut self.wring;
        self.cm.see_scores(s, at.pref, seq, |j, d| {
            for slot in 0..k {
                wring[slot * c + j] += d;
            }
        });
        seq.bb_row(s, &mut self.cm.row);
        for j in 0..c {
            let n = par.kmax[j].min(len - s).min(self.cm.next_neg[j] - s);
            let q = self.cm.row[j] - at.pref[j];
            for d in 1..=k {
                self.y[(d - 1) * c + j] = if d <= n {
                    self.wring[((s + d) % k) * c + j] + par.dur[j * k + d - 1] + q
                } else {
                    NEG
                };
            }
        }
        let maxd = k.min(len - s);
        self.cover.fill(0.0);
        if s == 0 {
            for j in 0..c {
                for d in 1..=k {
                    let mu = (par.start[j] + self.y[(d - 1) * c + j] - log_z).exp();
                    parts.dur[j * k + d - 1] += mu;
                    self.cover[(d - 1) * c + j] = mu;
                }
            }
            self.cover_positions(s, maxd, pos);
            for j in 0..c {
                parts.start[j] += self.cm.bgn[j];
            }
            return;
        }
        seq.eb_row(s - 1, &mut self.cm.row);
        for i in 0..c {
            let tr = &par.tr[i * k * c..(i + 1) * k * c];
            let buf = &mut self.buf[..k * c];
            let (l, m, sum) = lse_add(tr, &self.y, buf);
            self.cm.endm[i] = 0.0;
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
                    self.cm.endm[i] = sum * scale;
                }
            }
            self.cm.row2[i] = l + at.pref[i] + self.cm.row[i];
        }
        self.cover_positions(s, maxd, pos);
        let slot = s % k;
        self.wring[slot * c..(slot + 1) * c].copy_from_slice(&self.cm.row2);
    }

    fn common(&self) -> &Common {
        &self.cm
    }
}
