//! The edge-form recurrences of one sequence: forward in any semiring, Viterbi with
//! backpointers, and the checkpointed backward of the log semiring.

use semicrf_core::{Decoded, LogSemiring, Scalar, Semiring, trace_back};
use semicrf_semiring::kernels::exp_fast;

use super::lanes::{Dense, Lanes};

const NEG: f64 = f64::NEG_INFINITY;

/// Scratch of one forward step: the `K·C` terms of one destination label, the offsets of
/// the source rows and a lane buffer.
pub(crate) struct Step<S: Semiring, E> {
    terms: Vec<S::Value>,
    rows: Vec<usize>,
    lane: Vec<E>,
}

impl<S: Semiring, E: Scalar> Step<S, E> {
    pub(crate) fn new(k: usize, c: usize) -> Self {
        Step {
            terms: vec![S::zero(); k * c],
            rows: vec![0; k],
            lane: vec![E::default(); c],
        }
    }

    /// `α_t(j) = ⊕_{d ≤ min(K, t)} ⊕_i α_{t-d}(i) ⊗ E[t-d, d-1, j, i]` for every `j`, from the
    /// rows `α_{t-d}` found at `rows[row(t - d)·C..]`.
    ///
    /// The `C` sources of a first segment (`t - d = 0`, the virtual start) are one
    /// segmentation, so they enter as one item, `lift(weight(⊕_i lift(E[0, d-1, j, i])))`:
    /// the same value for log and max, and one path, not `C`, for the entropy.
    #[inline]
    pub(crate) fn alpha<L: Lanes<Elem = E>>(
        &mut self,
        t: usize,
        lanes: &L,
        rows: &[S::Value],
        row: impl Fn(usize) -> usize,
        out: &mut [S::Value],
    ) {
        let (k, c) = (lanes.k(), lanes.c());
        let n = k.min(t);
        // The source rows once per position, not once per label.
        for (d, r) in (1..=n).zip(self.rows.iter_mut()) {
            *r = row(t - d) * c;
        }
        for (j, o) in out[..c].iter_mut().enumerate() {
            for ((d, dst), &r) in (1..=n).zip(self.terms.chunks_exact_mut(c)).zip(&self.rows) {
                let s = t - d;
                let a = &rows[r..r + c];
                let w = lanes.lane(s, d, j, &mut self.lane);
                for ((x, &a), &w) in dst.iter_mut().zip(a).zip(w) {
                    *x = S::shift(a, w.as_f64());
                }
                if s == 0 {
                    let first = S::lift(S::weight(S::sum(dst)));
                    dst.fill(S::zero());
                    dst[0] = first;
                }
            }
            *o = S::sum(&mut self.terms[..n * c]);
        }
    }
}

/// A ring of the last `K` rows of `α` (`K·C` values), `α_0 = one` in slot 0.
fn ring<S: Semiring>(k: usize, c: usize) -> Vec<S::Value> {
    let mut ring = vec![S::zero(); k * c];
    ring[..c].fill(S::one());
    ring
}

/// `⊕_j α_L(j)`: the `⊕`-sum over every segmentation of one sequence of `len` positions.
pub(crate) fn forward<S: Semiring, L: Lanes>(lanes: &L, len: usize) -> S::Value {
    let (k, c) = (lanes.k(), lanes.c());
    let mut ring = ring::<S>(k, c);
    let mut row = vec![S::zero(); c];
    let mut step = Step::<S, L::Elem>::new(k, c);
    for t in 1..=len {
        step.alpha(t, lanes, &ring, |p| p % k, &mut row);
        ring[(t % k) * c..][..c].copy_from_slice(&row);
    }
    row.copy_from_slice(&ring[(len % k) * c..][..c]);
    S::sum(&mut row)
}

/// Viterbi decoding of one sequence. Per `(t, j)` the best `(d, i)` is packed into a `u32`
/// `(d-1)·C + i`; candidates are visited in increasing `d`, then `i`, and only a strictly
/// greater score replaces the best, so ties go to the smaller duration, then the smaller
/// previous label; the final label is the smallest best index.
pub(crate) fn viterbi<L: Lanes>(lanes: &L, len: usize) -> Decoded {
    let (k, c) = (lanes.k(), lanes.c());
    let mut ring = vec![NEG; k * c];
    ring[..c].fill(0.0);
    let mut row = vec![NEG; c];
    let mut lane = vec![L::Elem::default(); c];
    // bp[(t-1)·C + j] for t = 1..=len.
    let mut bp = vec![0u32; len * c];
    for t in 1..=len {
        let n = k.min(t);
        for j in 0..c {
            let (mut best, mut arg) = (NEG, 0u32);
            for d in 1..=n {
                let s = t - d;
                let a = &ring[(s % k) * c..][..c];
                let w = lanes.lane(s, d, j, &mut lane);
                for (i, (&a, &w)) in a.iter().zip(w).enumerate() {
                    let x = a + w.as_f64();
                    if x > best {
                        best = x;
                        arg = ((d - 1) * c + i) as u32;
                    }
                }
            }
            row[j] = best;
            bp[(t - 1) * c + j] = arg;
        }
        ring[(t % k) * c..][..c].copy_from_slice(&row);
    }
    let last = &ring[(len % k) * c..][..c];
    let (mut score, mut label) = (NEG, 0);
    for (j, &x) in last.iter().enumerate() {
        if x > score {
            score = x;
            label = j;
        }
    }
    if score == NEG {
        return Decoded {
            score,
            segments: Vec::new(),
        };
    }
    let segments = trace_back(len, label, |t, j| {
        let packed = bp[(t - 1) * c + j] as usize;
        (packed / c + 1, packed % c)
    });
    Decoded { score, segments }
}

/// Where the edge marginals of one sequence go, and where its edges are read from.
pub(crate) trait Sink {
    /// The element type of the edges read.
    type Elem: Scalar;
    /// The edge reader.
    type Lanes<'a>: Lanes<Elem = Self::Elem>
    where
        Self: 'a;
    /// The sequence's edges.
    fn lanes(&self) -> Self::Lanes<'_>;
    /// Stores `g · mu` (one start position's `(K, C, C)` marginals) for start `s`. Called for
    /// `s` from the last position down to 0; the edges of start `s` are never read again
    /// after it.
    fn emit(&mut self, s: usize, mu: &[f64], g: f64);
    /// Called once after the last `emit`.
    fn finish(&mut self, len: usize);
}

/// Reads the input edges and writes the marginals to a separate output block.
pub(crate) struct Separate<'o, L> {
    pub lanes: L,
    pub out: &'o mut [f64],
}

impl<L: Lanes> Sink for Separate<'_, L> {
    type Elem = L::Elem;
    type Lanes<'a>
        = &'a L
    where
        Self: 'a;
    fn lanes(&self) -> &L {
        &self.lanes
    }
    fn emit(&mut self, s: usize, mu: &[f64], g: f64) {
        let kcc = mu.len();
        for (o, &m) in self.out[s * kcc..][..kcc].iter_mut().zip(mu) {
            *o = g * m;
        }
    }
    fn finish(&mut self, _len: usize) {}
}

/// Overwrites materialised `f64` edges `(L, K, C, C)` with their marginals, one start
/// position at a time.
pub(crate) struct InPlace<'o> {
    pub buf: &'o mut [f64],
    pub k: usize,
    pub c: usize,
}

impl Sink for InPlace<'_> {
    type Elem = f64;
    type Lanes<'a>
        = Dense<'a, f64>
    where
        Self: 'a;
    fn lanes(&self) -> Dense<'_, f64> {
        Dense {
            data: self.buf,
            k: self.k,
            c: self.c,
        }
    }
    fn emit(&mut self, s: usize, mu: &[f64], g: f64) {
        let kcc = mu.len();
        for (o, &m) in self.buf[s * kcc..][..kcc].iter_mut().zip(mu) {
            *o = g * m;
        }
    }
    fn finish(&mut self, len: usize) {
        let kcc = self.k * self.c * self.c;
        self.buf[len * kcc..].fill(0.0);
    }
}

impl<L: Lanes> Lanes for &L {
    type Elem = L::Elem;
    #[inline(always)]
    fn k(&self) -> usize {
        (**self).k()
    }
    #[inline(always)]
    fn c(&self) -> usize {
        (**self).c()
    }
    #[inline(always)]
    fn lane<'b>(&'b self, s: usize, d: usize, j: usize, buf: &'b mut [L::Elem]) -> &'b [L::Elem] {
        (**self).lane(s, d, j, buf)
    }
}

/// Forward with checkpoints, then the interval-by-interval backward of one sequence (log
/// semiring). Writes `g · μ` through `sink` and the unscaled boundary marginals into
/// `boundary[..len]`; returns log Z (and emits nothing when it is `-inf`).
///
/// The forward saves its ring at `t = mΔ` for every interval `[mΔ, min((m+1)Δ, L))` but the
/// last, and keeps the rows of the last interval as it computes them. The backward walks the
/// intervals from last to first: it recomputes `α` inside an interval from its checkpoint
/// (bitwise the values of the forward; the last interval's are already there) and runs `β`
/// down through it with a ring of its own, emitting the marginals of one start position at a
/// time: with `m_i = max_{d,j}(E[s, d-1, j, i] + β_{s+d}(j))`,
/// `β_s(i) = m_i + ln Σ exp(E + β - m_i)` and `μ = exp(E + β - m_i) · exp(α_s(i) + m_i - log Z)`,
/// both factors at most 1 (up to rounding). With `Δ ≥ L` there is one interval and no
/// recomputation: the exact algorithm.
pub(crate) fn backward<M: Sink>(
    sink: &mut M,
    len: usize,
    delta: usize,
    g: f64,
    boundary: &mut [f64],
) -> f64 {
    let (k, c) = {
        let l = sink.lanes();
        (l.k(), l.c())
    };
    let (cc, kcc) = (c * c, k * c * c);
    let delta = delta.clamp(1, len);
    let n_int = len.div_ceil(delta);
    let last = (n_int - 1) * delta;
    // Rows of the interval starting at `base`: position p at row p + K - 1 - base.
    let mut interval = vec![NEG; (delta + k) * c];
    let row_at = |base: usize| move |p: usize| p + k - 1 - base;

    // Forward, saving the ring at t = mΔ for the intervals 1..n-1 (interval 0 starts from
    // α_0, the last one keeps its rows as they are computed).
    let mut ring = ring::<LogSemiring>(k, c);
    let mut row = vec![0.0; c];
    let mut step = Step::<LogSemiring, M::Elem>::new(k, c);
    let mut checkpoints = vec![NEG; n_int.saturating_sub(2) * k * c];
    {
        let lanes = sink.lanes();
        // The last interval needs the rows last+1-K ..= len-1.
        let keep = |p: usize| p + k > last;
        if keep(0) {
            interval[row_at(last)(0) * c..][..c].fill(0.0);
        }
        for t in 1..=len {
            step.alpha(t, &lanes, &ring, |p| p % k, &mut row);
            ring[(t % k) * c..][..c].copy_from_slice(&row);
            if t % delta == 0 && t < last {
                checkpoints[(t / delta - 1) * k * c..][..k * c].copy_from_slice(&ring);
            }
            if t < len && keep(t) {
                interval[row_at(last)(t) * c..][..c].copy_from_slice(&row);
            }
        }
    }
    row.copy_from_slice(&ring[(len % k) * c..][..c]);
    let log_z = LogSemiring::sum(&mut row);
    if log_z == NEG {
        return log_z;
    }
    drop(ring);

    // Backward.
    let mut beta = vec![NEG; k * c];
    beta[(len % k) * c..][..c].fill(0.0);
    let mut mu = vec![0.0; kcc];
    let mut mx = vec![0.0; c];
    let mut shift = vec![0.0; c];
    let mut acc = vec![0.0; c];
    let mut factor = vec![0.0; c];
    let mut new_beta = vec![0.0; c];
    let mut lane_buf = vec![M::Elem::default(); c];
    for m in (0..n_int).rev() {
        let base = m * delta;
        let end = (base + delta).min(len);
        let row = row_at(base);
        if m < n_int - 1 {
            // Restore the rows base+1-K..=base (only α_0 for the first interval; rows before
            // position 0 are never read) and recompute the interval.
            if m == 0 {
                interval[row(0) * c..][..c].fill(0.0);
            } else {
                let cp = &checkpoints[(m - 1) * k * c..][..k * c];
                for p in (base + 1).saturating_sub(k)..=base {
                    interval[row(p) * c..][..c].copy_from_slice(&cp[(p % k) * c..][..c]);
                }
            }
            let lanes = sink.lanes();
            for t in base + 1..end {
                let (src, rest) = interval.split_at_mut(row(t) * c);
                step.alpha(t, &lanes, src, row, &mut rest[..c]);
            }
        }
        for s in (base..end).rev() {
            let alpha_s = &interval[row(s) * c..][..c];
            let nd = k.min(len - s);
            {
                let lanes = sink.lanes();
                // Pass 1: x = E + β_{s+d}(j) into `mu`, and per source label i the max over
                // (d, j) of x (a lane after β = -inf holds -inf: it contributes nothing).
                mx.fill(NEG);
                for d in 1..=nd {
                    let b_row = &beta[((s + d) % k) * c..][..c];
                    for (j, &bj) in b_row.iter().enumerate() {
                        let out = &mut mu[(d - 1) * cc + j * c..][..c];
                        if bj == NEG {
                            out.fill(NEG);
                            continue;
                        }
                        let w = lanes.lane(s, d, j, &mut lane_buf);
                        for ((o, m), &x) in out.iter_mut().zip(mx.iter_mut()).zip(w) {
                            let x = x.as_f64() + bj;
                            *o = x;
                            if x > *m {
                                *m = x;
                            }
                        }
                    }
                }
                mu[nd * cc..].fill(0.0);
            }
            // The shift keeps exp(x - shift) finite, and exactly zero where every term is
            // -inf (no `-inf - -inf`).
            for (sh, &m) in shift.iter_mut().zip(&mx) {
                *sh = if m == NEG { 0.0 } else { m };
            }
            // Pass 2: exp(x - max) in place, summed into `acc`.
            acc.fill(0.0);
            for block in mu[..nd * cc].chunks_exact_mut(c) {
                for i in 0..c {
                    let v = exp_fast(block[i] - shift[i]);
                    block[i] = v;
                    acc[i] += v;
                }
            }
            // β_s(i) = max_i + ln Σ, and μ = exp(x - max_i) · exp(α_s(i) + max_i - log Z).
            for i in 0..c {
                if mx[i] == NEG {
                    new_beta[i] = NEG;
                    factor[i] = 0.0;
                } else {
                    new_beta[i] = mx[i] + acc[i].ln();
                    factor[i] = exp_fast(alpha_s[i] + mx[i] - log_z);
                }
            }
            let mut total = 0.0;
            for block in mu[..nd * cc].chunks_exact_mut(c) {
                for i in 0..c {
                    block[i] *= factor[i];
                }
                for &v in block.iter() {
                    total += v;
                }
            }
            boundary[s] = total;
            // Slot s % K held β_{s+K}, read above for d = K; it is free now.
            beta[(s % k) * c..][..c].copy_from_slice(&new_beta);
            sink.emit(s, &mu, g);
        }
    }
    sink.finish(len);
    log_z
}
