//! The two max-semiring sweeps of [`Sweep`](super::Sweep): the static transition's, with its
//! skips of what cannot win, and the duration-dependent one's.

use semicrf_core::{MaxSemiring, Scalar};
use semicrf_semiring::Ring;
use semicrf_semiring::kernels::{add_max, argmax_add};

use super::{NEG, Pointer, Sweep};
use crate::streaming::forward::{DdFwd, Forward, StaticFwd};
use crate::streaming::input::SeqIn;
use crate::streaming::params::Params;

/// Static transition: `dur[t][j]` is the best duration of a segment of label `j` ending at
/// `t`, `prev[s][j]` the best previous label of a segment of label `j` starting at `s`. Ties:
/// the smaller duration (windows run from the longest duration down, so the last maximum
/// wins), then the smaller previous label (the first maximum).
pub(super) struct StaticSweep {
    f: StaticFwd<MaxSemiring>,
    buf: Vec<f64>,
    /// The shortest duration of label `j` whose weight is finite (1 when none is): a window
    /// skips its latest `dmin[j] - 1` starts, whose terms are `-inf`.
    dmin: Vec<usize>,
    tr: Sources,
    finite: Finite,
    /// Per label, whether its window is scanned over its finite entries only: decided from
    /// the window's count every [`RECOUNT`] positions and after a restore (either scan gives
    /// the same maximum and position).
    sparse: Vec<bool>,
    /// Recount at the next step.
    recount: bool,
}

/// Positions between two decisions of which windows are sparse.
const RECOUNT: usize = 64;

/// Which ring entries are finite, one bit per entry laid out as the ring lays out its
/// entries (slot `q mod K` and `q mod K + K` of label `j`), so that a window's bits are one
/// contiguous range. A window with at most a quarter of its entries finite is scanned
/// over those only: a `-inf` entry's term is `-inf`, never the maximum unless every term
/// is, so the maximum and its last position are those of the full scan (with every term
/// `-inf`, `-inf` at the last position, as the full scan gives).
struct Finite {
    k: usize,
    /// Words per label ([`Finite::per`]).
    per: usize,
    bits: Vec<u64>,
}

impl Finite {
    fn new(k: usize, c: usize) -> Finite {
        let per = Finite::per(k);
        Finite {
            k,
            per,
            bits: vec![0; per * c],
        }
    }

    /// Words per label: `⌈2K / 64⌉` and a cache line more, so that the labels' bits of one
    /// position fall in different cache sets.
    fn per(k: usize) -> usize {
        (2 * k).div_ceil(64) + 8
    }

    /// `u64` words for `K` and `C`.
    fn words(k: usize, c: usize) -> usize {
        Finite::per(k) * c
    }

    /// Records the entries of position `q`, `v[j]` for label `j`.
    #[inline]
    fn push(&mut self, q: usize, v: &[f64]) {
        let slot = q % self.k;
        for (j, &x) in v.iter().enumerate() {
            let base = j * self.per;
            for b in [slot, slot + self.k] {
                let (w, m) = (base + b / 64, 1u64 << (b % 64));
                if x > NEG {
                    self.bits[w] |= m;
                } else {
                    self.bits[w] &= !m;
                }
            }
        }
    }

    /// Label `j`'s bits of the window of `m` entries from position `first`, as `(label's
    /// first word, bit offset of the window in it)`.
    #[inline]
    fn range(&self, j: usize, first: usize) -> (usize, usize) {
        (j * self.per, first % self.k)
    }

    /// The number of finite entries in the window `[lo, lo + m)` of the bits from `base`.
    #[inline]
    fn count(&self, base: usize, lo: usize, m: usize) -> usize {
        let mut n = 0;
        self.each_word(base, lo, m, |_, x| n += x.count_ones() as usize);
        n
    }

    /// Calls `f(i)` for every finite entry `i` of the window `[lo, lo + m)`, in increasing
    /// `i`.
    #[inline]
    fn each(&self, base: usize, lo: usize, m: usize, mut f: impl FnMut(usize)) {
        self.each_word(base, lo, m, |at, mut x| {
            while x != 0 {
                f(at.wrapping_add(x.trailing_zeros() as usize));
                x &= x - 1;
            }
        });
    }

    /// Calls `f(i0, word)` for the words covering bits `[lo, lo + m)`, masked to the
    /// window, `i0` the window index of the word's bit 0 (wrapping: only set bits are read).
    #[inline]
    fn each_word(&self, base: usize, lo: usize, m: usize, mut f: impl FnMut(usize, u64)) {
        if m == 0 {
            return;
        }
        let hi = lo + m;
        let (w0, w1) = (lo / 64, (hi - 1) / 64);
        for w in w0..=w1 {
            let mut x = self.bits[base + w];
            if w == w0 {
                x &= !0u64 << (lo % 64);
            }
            if w == w1 && !hi.is_multiple_of(64) {
                x &= (1u64 << (hi % 64)) - 1;
            }
            f((w * 64).wrapping_sub(lo), x);
        }
    }
}

/// The finite entries of each column of a static transition, for the columns that are
/// sparse: `u_s(j)` is then a max over those sources only. The values are the column's own,
/// in increasing `i`, so the maximum and its first position are bitwise those of the dense
/// scan (a `-inf` term is never the maximum unless every term is, and then both give
/// `(-inf, 0)`).
struct Sources {
    /// Column `j`'s sources are `from[at[j]..at[j + 1]]`, or `None` when it is dense.
    at: Vec<Option<(usize, usize)>>,
    from: Vec<usize>,
    w: Vec<f64>,
}

/// `f64` words of a static sweep's own lists besides its forward state, for `C` labels.
pub(crate) fn sweep_words(k: usize, c: usize) -> usize {
    Sources::words(c) + c + 3 + Finite::words(k, c) + 3
}

impl Sources {
    /// A column is taken as sparse when at most a quarter of its entries are finite.
    fn new(par: &Params<MaxSemiring>) -> Sources {
        let c = par.c;
        let (mut at, mut from, mut w) = (Vec::with_capacity(c), Vec::new(), Vec::new());
        for j in 0..c {
            let col = par.matrix.column(j);
            let finite = col.iter().filter(|&&x| x > NEG).count();
            if 4 * finite <= c {
                let a = from.len();
                for (i, &x) in col.iter().enumerate().filter(|&(_, &x)| x > NEG) {
                    from.push(i);
                    w.push(x);
                }
                at.push(Some((a, from.len())));
            } else {
                at.push(None);
            }
        }
        Sources { at, from, w }
    }

    /// `f64` words of the lists for `C` labels at most (three vectors: a pair of bounds per
    /// column, at most `C²` sources and their values).
    fn words(c: usize) -> usize {
        2 * c * c + 3 * c + 9
    }
}

impl Sweep for StaticSweep {
    type Fw = StaticFwd<MaxSemiring>;
    const PREV_AT_START: bool = true;
    /// Only the ring entries a later window can read: for label `j`, the last
    /// `min(K_j, p - z_j)` starts (`K_j` its longest finite duration, `z_j` its first
    /// admissible start), after the prefix sums. Labels cut by `-inf` scores or with short
    /// durations cost what their windows hold.
    fn save(&mut self, p: usize, par: &Params<MaxSemiring>, out: &mut Vec<f64>, z: &mut [usize]) {
        let f = &self.f;
        let live = |j: usize| par.kmax[j].min(p - f.prefix.z[j]);
        let n: usize = (0..par.c).map(live).sum();
        out.reserve_exact(par.c + n);
        out.extend_from_slice(&f.prefix.pref);
        for j in 0..par.c {
            out.extend((p - live(j)..p).map(|q| f.ring.get(j, q)));
        }
        z.copy_from_slice(&f.prefix.z);
    }
    /// Pushes the saved entries back, position by position (`-inf` where a label holds
    /// none: no window reads there).
    fn restore(&mut self, p: usize, par: &Params<MaxSemiring>, from: &[f64], z: &[usize]) {
        let c = par.c;
        let live = |j: usize| par.kmax[j].min(p - z[j]);
        let most = (0..c).map(live).max().unwrap_or(0);
        let mut offs = Vec::with_capacity(c);
        let mut o = c;
        for j in 0..c {
            offs.push(o);
            o += live(j);
        }
        let row = &mut self.f.row;
        for q in p - most..p {
            for j in 0..c {
                let first = p - live(j);
                row[j] = if q >= first {
                    from[offs[j] + q - first]
                } else {
                    NEG
                };
            }
            self.f.ring.push(q, row);
            self.finite.push(q, row);
        }
        self.recount = true;
        self.f.prefix.restore(&from[..c], z, p);
    }
    fn new(par: &Params<MaxSemiring>) -> Self {
        let (k, c) = (par.k, par.c);
        let dmin = (0..c)
            .map(|j| {
                (1..=par.kmax[j])
                    .find(|&d| par.dur[j * k + d - 1] > NEG)
                    .unwrap_or(1)
            })
            .collect();
        StaticSweep {
            f: StaticFwd::new(par),
            buf: vec![0.0; k.max(c)],
            dmin,
            tr: Sources::new(par),
            finite: Finite::new(k, c),
            sparse: vec![false; c],
            recount: true,
        }
    }
    fn fw(&mut self) -> &mut Self::Fw {
        &mut self.f
    }
    fn alpha(&self) -> &[f64] {
        &self.f.alpha
    }
    #[inline]
    fn step<D: Pointer, P: Pointer, F: Scalar>(
        &mut self,
        p: usize,
        seq: &SeqIn<'_, F>,
        par: &Params<MaxSemiring>,
        mut bp: Option<(&mut [D], &mut [P])>,
    ) {
        let (f, buf, c) = (&mut self.f, &mut self.buf, par.c);
        if p == 0 {
            f.u.copy_from_slice(&par.start);
        } else {
            seq.eb_row(p - 1, &mut f.row);
            f.windows(p);
            let recount = std::mem::take(&mut self.recount) || p.is_multiple_of(RECOUNT);
            for j in 0..c {
                let n = f.len[j];
                // The window's entries of durations `n` down to `dmin[j]` (the rest are -inf).
                let m = (n + 1).saturating_sub(self.dmin[j]);
                if m == 0 {
                    f.alpha[j] = NEG;
                    if let Some((d, _)) = bp.as_mut() {
                        d[j] = D::default();
                    }
                    continue;
                }
                let (w, wt) = (
                    &f.ring.window(j, f.first[j], n)[..m],
                    &par.weights.window(j, n)[..m],
                );
                let (base, lo) = self.finite.range(j, f.first[j]);
                if recount {
                    self.sparse[j] = 4 * self.finite.count(base, lo, m) <= m;
                }
                let sparse = self.sparse[j];
                // Without backpointers to record, the maximum alone (the same value).
                let (best, e) = match (sparse, bp.is_some()) {
                    (false, true) => argmax_add(w, wt, true, buf),
                    (false, false) => (add_max(w, wt, &mut buf[..m]), 0),
                    (true, true) => {
                        // The last maximum; `m - 1` when every term is -inf.
                        let (mut best, mut e) = (NEG, m - 1);
                        self.finite.each(base, lo, m, |i| {
                            let x = w[i] + wt[i];
                            // Selects, not a branch: which term wins is unpredictable.
                            let take = x >= best && x > NEG;
                            best = if take { x } else { best };
                            e = if take { i } else { e };
                        });
                        (best, e)
                    }
                    (true, false) => {
                        let mut best = NEG;
                        self.finite.each(base, lo, m, |i| {
                            let x = w[i] + wt[i];
                            if x > best {
                                best = x;
                            }
                        });
                        (best, 0)
                    }
                };
                // As the forward's `α ⊗ lift(P + eb)`, so the score is the max forward's.
                f.alpha[j] = best + (f.prefix.pref[j] + f.row[j]);
                if let Some((d, _)) = bp.as_mut() {
                    d[j] = D::put(n - e);
                }
            }
            if p == seq.len {
                return;
            }
            for j in 0..c {
                let (best, i) = match self.tr.at[j] {
                    Some((a, b)) => {
                        let (mut best, mut arg) = (NEG, 0);
                        for (&i, &x) in self.tr.from[a..b].iter().zip(&self.tr.w[a..b]) {
                            let y = f.alpha[i] + x;
                            if y > best {
                                (best, arg) = (y, i);
                            }
                        }
                        (best, arg)
                    }
                    None if bp.is_some() => argmax_add(&f.alpha, par.matrix.column(j), false, buf),
                    None => (add_max(&f.alpha, par.matrix.column(j), &mut buf[..c]), 0),
                };
                f.u[j] = best;
                if let Some((_, l)) = bp.as_mut() {
                    l[j] = P::put(i);
                }
            }
        }
        f.push(p, seq);
        self.finite.push(p, &f.v);
    }
}

/// Duration-dependent transition: `dur[t][j]` and `prev[t][j]` are the best duration and
/// previous label of a segment of label `j` ending at `t`, read off the ring before each
/// step.
pub(super) struct DdSweep {
    f: DdFwd<MaxSemiring>,
    buf: Vec<f64>,
}

impl Sweep for DdSweep {
    type Fw = DdFwd<MaxSemiring>;
    const PREV_AT_START: bool = false;
    fn new(par: &Params<MaxSemiring>) -> Self {
        DdSweep {
            f: DdFwd::new(par),
            buf: vec![0.0; par.c],
        }
    }
    fn fw(&mut self) -> &mut Self::Fw {
        &mut self.f
    }
    fn alpha(&self) -> &[f64] {
        &self.f.alpha
    }
    #[inline]
    fn step<D: Pointer, P: Pointer, F: Scalar>(
        &mut self,
        p: usize,
        seq: &SeqIn<'_, F>,
        par: &Params<MaxSemiring>,
        bp: Option<(&mut [D], &mut [P])>,
    ) {
        let (k, c) = (par.k, par.c);
        let (f, buf) = (&mut self.f, &mut self.buf);
        if let (true, Some((bd_row, bi_row))) = (p >= 1, bp) {
            for j in 0..c {
                let n = par.kmax[j].min(p - f.prefix.z[j]);
                let mut best = NEG;
                let (mut bd, mut bi) = (1usize, 0usize);
                for d in 1..=n {
                    let s = p - d;
                    let slot = s % k;
                    let (inner, i) = if s == 0 {
                        (par.start[j], 0)
                    } else {
                        let o = (d - 1) * c * c + j * c;
                        argmax_add(
                            &f.ring[slot * c..(slot + 1) * c],
                            &par.tr_t[o..o + c],
                            false,
                            buf,
                        )
                    };
                    let x = inner + (f.q[slot * c + j] + par.dur[j * k + d - 1]);
                    if x > best {
                        best = x;
                        bd = d;
                        bi = i;
                    }
                }
                bd_row[j] = D::put(bd);
                bi_row[j] = P::put(bi);
            }
        }
        f.step(p, seq, par);
    }
}
