//! The forward values of the streaming recurrence as backward sampling reads them, restored
//! one block at a time from checkpoints.

use semicrf_core::{ForwardBlocks, LogSemiring, Result, Scalar, Semiring};

use crate::streaming::forward::Forward;
use crate::streaming::input::SeqIn;
use crate::streaming::params::Params;

const NEG: f64 = f64::NEG_INFINITY;

/// Words per recorded position: `α_p`, `u_p`, and the rows `scores[p]`, `begin_boundary[p]`,
/// `end_boundary[p]`.
const FIELDS: usize = 5;

/// One sequence's factorised forward values, block by block.
///
/// A segment of label `j` ending in block `m` (`t` in `(mΔ, (m+1)Δ]`) starts at most `K`
/// positions before it, so the block records, for every position `p` from
/// `q_m = max(0, mΔ + 1 - K)` to the block's last end `- 1`, the forward values `α_p`, `u_p`
/// and the position's rows of scores and boundaries (`5C` words). The forward sweep saves
/// its exact state ([`Forward::save`]) before every `q_m`; [`ForwardBlocks::load`] restores it
/// and recomputes the block, bitwise the values of the sweep (the rows of the last block are
/// kept from the sweep itself). A block is recomputed at most once per sequence (sampling
/// only moves down), so sampling costs at most two forward sweeps, and holds per sequence
/// `⌈L/Δ⌉` saved states and `5·(Δ + K)·C` words of rows: `O(K·C + sqrt(L·K)·C)` at the
/// default `Δ`, never `O(L·K·C)`.
pub(crate) struct StreamBlocks<'s, 'a, Fw, F> {
    seq: &'s SeqIn<'a, F>,
    par: &'s Params<LogSemiring>,
    fw: Fw,
    len: usize,
    delta: usize,
    /// The state before `q_m`, for every block `m` with `q_m > 0`.
    saved: Vec<Option<(Vec<f64>, Vec<usize>)>>,
    /// The loaded block's positions, position `p` at row `p - first`.
    rows: Vec<f64>,
    first: usize,
    loaded: usize,
    last: Vec<f64>,
    buf: Vec<f64>,
}

impl<'s, 'a, Fw: Forward<LogSemiring>, F: Scalar> StreamBlocks<'s, 'a, Fw, F> {
    /// Runs the forward sweep of sequence `seq` with blocks of `delta` segment ends (clamped
    /// to `1..=L`).
    pub(crate) fn new(seq: &'s SeqIn<'a, F>, par: &'s Params<LogSemiring>, delta: usize) -> Self {
        let (k, c, len) = (par.k, par.c, seq.len);
        let delta = delta.clamp(1, len.max(1));
        let n = len.div_ceil(delta).max(1);
        let mut b = StreamBlocks {
            seq,
            par,
            fw: Fw::new(par),
            len,
            delta,
            saved: Vec::with_capacity(n),
            rows: vec![NEG; (delta + k) * FIELDS * c],
            first: 0,
            loaded: n - 1,
            last: vec![NEG; c],
            buf: vec![NEG; c],
        };
        b.first = b.start(n - 1);
        let words = Fw::saved_words(k, c);
        for p in 0..=len {
            while b.saved.len() < n && b.start(b.saved.len()) == p {
                let state = (p > 0).then(|| {
                    let (mut w, mut z) = (vec![0.0; words], vec![0; c]);
                    b.fw.save(&mut w, &mut z);
                    (w, z)
                });
                b.saved.push(state);
            }
            b.fw.step(p, seq, par);
            if p >= b.first && p < len {
                b.record(p);
            }
        }
        for ((o, &a), &e) in b.last.iter_mut().zip(b.fw.alpha()).zip(&par.end) {
            *o = a + e;
        }
        b
    }

    /// `q_m`: the first position block `m` records.
    fn start(&self, m: usize) -> usize {
        if m == 0 {
            0
        } else {
            (m * self.delta + 1).saturating_sub(self.par.k)
        }
    }

    /// Records position `p` (after its forward step) in the loaded block.
    fn record(&mut self, p: usize) {
        let c = self.par.c;
        let row = &mut self.rows[(p - self.first) * FIELDS * c..][..FIELDS * c];
        let (alpha, rest) = row.split_at_mut(c);
        let (u, rest) = rest.split_at_mut(c);
        let (sc, rest) = rest.split_at_mut(c);
        let (bb, eb) = rest.split_at_mut(c);
        if p >= 1 {
            alpha.copy_from_slice(self.fw.alpha());
        } else {
            alpha.fill(NEG);
        }
        if Fw::HAS_U {
            u.copy_from_slice(self.fw.u());
        } else {
            u.fill(NEG);
        }
        self.seq.scores_row(p, sc);
        self.seq.bb_row(p, bb);
        self.seq.eb_row(p, eb);
    }

    /// Field `f` (0: `α`, 1: `u`, 2: scores, 3: begin, 4: end boundary) of position `p`.
    #[inline]
    fn field(&self, p: usize, f: usize) -> &[f64] {
        let c = self.par.c;
        &self.rows[((p - self.first) * FIELDS + f) * c..][..c]
    }
}

impl<Fw: Forward<LogSemiring>, F: Scalar> ForwardBlocks for StreamBlocks<'_, '_, Fw, F> {
    fn len(&self) -> usize {
        self.len
    }

    fn interval(&self) -> usize {
        self.delta
    }

    fn load(&mut self, m: usize) -> Result<()> {
        if self.loaded == m {
            return Ok(());
        }
        let q = self.start(m);
        let end = ((m + 1) * self.delta).min(self.len);
        match &self.saved[m] {
            Some((w, z)) => self.fw.restore(w, z, q),
            None => self.fw = Fw::new(self.par),
        }
        self.first = q;
        for p in q..end {
            self.fw.step(p, self.seq, self.par);
            self.record(p);
        }
        self.loaded = m;
        Ok(())
    }

    fn last(&mut self, out: &mut Vec<f64>) {
        out.clear();
        out.extend_from_slice(&self.last);
    }

    /// `u_s(j) ⊗ seg(s, d, j)` with `s = t - d` (static transition), or
    /// `(⊕_i α_s(i) ⊗ transition[d-1, i, j]) ⊗ seg(s, d, j)` (`start[j]` for `s = 0`), the
    /// segment's content summed directly from the recorded rows (a `-inf` score makes it
    /// `-inf`; nothing is differenced).
    fn durations(&mut self, t: usize, j: usize, out: &mut Vec<f64>) {
        let (k, c) = (self.par.k, self.par.c);
        out.clear();
        let eb = self.field(t - 1, 4)[j];
        let mut content = 0.0;
        for d in 1..=k.min(t) {
            let s = t - d;
            content += self.field(s, 2)[j];
            let seg = content + self.par.dur[j * k + d - 1] + self.field(s, 3)[j] + eb;
            let inner = if Fw::HAS_U {
                self.field(s, 1)[j]
            } else if s == 0 {
                self.par.start[j]
            } else {
                let tr = &self.par.tr_t[(d - 1) * c * c + j * c..][..c];
                let alpha = &self.rows[(s - self.first) * FIELDS * c..][..c];
                for ((x, &a), &w) in self.buf.iter_mut().zip(alpha).zip(tr) {
                    *x = a + w;
                }
                LogSemiring::sum(&mut self.buf)
            };
            out.push(inner + seg);
        }
    }

    /// `α_s(i) ⊗ transition[i, j]` (or `transition[d-1, i, j]`).
    fn sources(&mut self, s: usize, d: usize, j: usize, out: &mut Vec<f64>) {
        let c = self.par.c;
        out.clear();
        let alpha = self.field(s, 0);
        if Fw::HAS_U {
            out.extend((0..c).map(|i| alpha[i] + self.par.tr[i * c + j]));
        } else {
            let tr = &self.par.tr_t[(d - 1) * c * c + j * c..][..c];
            out.extend(alpha.iter().zip(tr).map(|(&a, &w)| a + w));
        }
    }
}
