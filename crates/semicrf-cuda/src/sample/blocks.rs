//! One sequence's forward values, saved by the device, as backward sampling reads them.

use semicrf_core::{ForwardBlocks, LogSemiring, Potentials, Result, Scalar, Semiring};

use crate::call::Model;

/// A batch's saved forward values, `(B, T+1, C)` each: `α_t(j)` (row 0 unused) and, for a
/// static transition, `u_s(j)` (`u_0 = start`; row `L` unused).
pub(crate) struct Rows {
    pub(crate) alpha: Vec<f64>,
    pub(crate) u: Option<Vec<f64>>,
}

/// The forward values of sequence `b`: its rows of `α` and `u` from the device (the whole
/// sequence, one block: `Δ = L`, nothing recomputed) and the problem's scores, boundaries
/// and shared parameters on the host. A segment's weight is computed as the CPU streaming
/// engine computes it (`semicrf-cpu`'s `StreamBlocks`), the content summed directly from the
/// scores, going down from its end (a `-inf` score makes it `-inf`; nothing is differenced),
/// so that the same forward values give the same samples.
pub(crate) struct DeviceRows<'r, 'p, 'a, F> {
    p: &'p Potentials<'a, F>,
    model: &'r Model,
    b: usize,
    len: usize,
    /// `α_t` at `t·C` (`t = 1..=L`).
    alpha: &'r [f64],
    /// `u_s` at `s·C` (`s = 0..L`), static transition only.
    u: Option<&'r [f64]>,
    buf: Vec<f64>,
}

impl<'r, 'p, 'a, F: Scalar> DeviceRows<'r, 'p, 'a, F> {
    /// Sequence `b` of `rows` (saved for the batch of `p`).
    pub(crate) fn new(
        p: &'p Potentials<'a, F>,
        model: &'r Model,
        rows: &'r Rows,
        b: usize,
    ) -> Self {
        let sh = model.shape;
        let n = (sh.len + 1) * sh.labels;
        DeviceRows {
            p,
            model,
            b,
            len: p.lengths()[b],
            alpha: &rows.alpha[b * n..][..n],
            u: rows.u.as_ref().map(|u| &u[b * n..][..n]),
            buf: vec![f64::NEG_INFINITY; sh.labels],
        }
    }

    #[inline]
    fn alpha(&self, t: usize) -> &[f64] {
        let c = self.model.shape.labels;
        &self.alpha[t * c..][..c]
    }

    /// `transition[d-1, i, j]` (`(C, C)`: any `d`) for `i = 0..C`.
    #[inline]
    fn tr(&self, d: usize, i: usize, j: usize) -> f64 {
        let c = self.model.shape.labels;
        if self.model.dd {
            self.model.tr[((d - 1) * c + i) * c + j]
        } else {
            self.model.tr[i * c + j]
        }
    }
}

impl<F: Scalar> ForwardBlocks for DeviceRows<'_, '_, '_, F> {
    fn len(&self) -> usize {
        self.len
    }

    fn interval(&self) -> usize {
        self.len.max(1)
    }

    fn load(&mut self, _m: usize) -> Result<()> {
        Ok(())
    }

    /// `α_L(j) ⊗ end[j]`.
    fn last(&mut self, out: &mut Vec<f64>) {
        out.clear();
        let al = self.alpha(self.len);
        out.extend(al.iter().zip(&self.model.en).map(|(&a, &e)| a + e));
    }

    /// `u_s(j) ⊗ seg(s, d, j)` with `s = t - d` (static transition), or
    /// `(⊕_i α_s(i) ⊗ transition[d-1, i, j]) ⊗ seg(s, d, j)` (`start[j]` for `s = 0`).
    fn durations(&mut self, t: usize, j: usize, out: &mut Vec<f64>) {
        let (p, b, sh) = (self.p, self.b, self.model.shape);
        let (k, c) = (sh.max_duration, sh.labels);
        out.clear();
        let eb = p.end_boundary_at(b, t - 1, j);
        let scores = p.scores();
        let mut content = 0.0;
        for d in 1..=k.min(t) {
            let s = t - d;
            content += scores[[b, s, j]].as_f64();
            let seg = content + self.model.dur[(d - 1) * c + j] + p.begin_boundary_at(b, s, j) + eb;
            let inner = match self.u {
                Some(u) => u[s * c + j],
                None if s == 0 => self.model.st[j],
                None => {
                    for i in 0..c {
                        self.buf[i] = self.alpha[s * c + i] + self.tr(d, i, j);
                    }
                    LogSemiring::sum(&mut self.buf)
                }
            };
            out.push(inner + seg);
        }
    }

    /// `α_s(i) ⊗ transition[i, j]` (or `transition[d-1, i, j]`).
    fn sources(&mut self, s: usize, d: usize, j: usize, out: &mut Vec<f64>) {
        let c = self.model.shape.labels;
        out.clear();
        out.extend((0..c).map(|i| self.alpha[s * c + i] + self.tr(d, i, j)));
    }
}
