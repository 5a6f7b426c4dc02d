//! Viterbi decoding: the max-semiring forward with backpointers, `O(L·C)` integers of the
//! narrowest width that holds them (a duration: 16 bits while `K < 2¹⁶`; a label: 8 bits
//! while `C <= 256`), so that a sequence of `2·10⁷` positions and 50 labels keeps 3 GB of
//! backpointers, not 8.

use semicrf_core::{Decoded, MaxSemiring, Scalar, decode_best};
use semicrf_semiring::kernels::argmax_add;

use super::forward::{DdFwd, Forward, StaticFwd};
use super::input::SeqIn;
use super::params::Params;

const NEG: f64 = f64::NEG_INFINITY;

/// The decoding from the final `α_L` and the end scores ([`decode_best`]), given the
/// backpointer lookup of [`semicrf_core::trace_back`].
fn decode(
    alpha: &[f64],
    par: &Params<MaxSemiring>,
    len: usize,
    best: impl Fn(usize, usize) -> (usize, usize),
) -> Decoded {
    decode_best(len, par.c, |j| alpha[j] + par.end[j], best)
}

/// A backpointer: a duration or a label, stored in `Self`.
trait Pointer: Copy + Default + Send {
    fn put(x: usize) -> Self;
    fn get(self) -> usize;
}

macro_rules! pointer {
    ($($t:ty),*) => {$(
        impl Pointer for $t {
            #[inline]
            fn put(x: usize) -> Self {
                debug_assert!(x <= <$t>::MAX as usize);
                x as $t
            }
            #[inline]
            fn get(self) -> usize {
                self as usize
            }
        }
    )*};
}
pointer!(u8, u16, u32);

/// Runs `$f::<D, P>` with the narrowest duration type `D` for `K` and label type `P` for `C`.
macro_rules! narrowest {
    ($f:ident, $k:expr, $c:expr, $($arg:expr),*) => {
        match ($k <= u16::MAX as usize, $c <= 256) {
            (true, true) => $f::<u16, u8, F>($($arg),*),
            (true, false) => $f::<u16, u32, F>($($arg),*),
            (false, true) => $f::<u32, u8, F>($($arg),*),
            (false, false) => $f::<u32, u32, F>($($arg),*),
        }
    };
}

/// Static transition (see [`static_with`]).
pub(crate) fn viterbi_static<F: Scalar>(seq: &SeqIn<'_, F>, par: &Params<MaxSemiring>) -> Decoded {
    narrowest!(static_with, par.k, par.c, seq, par)
}

/// Duration-dependent transition (see [`dd_with`]).
pub(crate) fn viterbi_dd<F: Scalar>(seq: &SeqIn<'_, F>, par: &Params<MaxSemiring>) -> Decoded {
    narrowest!(dd_with, par.k, par.c, seq, par)
}

/// Static transition: `bp_dur[t*C + j]` is the best duration of a segment of label `j` ending
/// at `t`, `bp_prev[s*C + j]` the best previous label of a segment of label `j` starting at
/// `s`. Ties: the smaller duration (windows run from the longest duration down, so the last
/// maximum wins), then the smaller previous label (the first maximum).
fn static_with<D: Pointer, P: Pointer, F: Scalar>(
    seq: &SeqIn<'_, F>,
    par: &Params<MaxSemiring>,
) -> Decoded {
    let (k, c, len) = (par.k, par.c, seq.len);
    let mut bp_dur = vec![D::default(); (len + 1) * c];
    let mut bp_prev = vec![P::default(); (len + 1) * c];
    let mut buf = vec![0.0; k.max(c)];
    let mut f = StaticFwd::<MaxSemiring>::new(par);
    for p in 0..=len {
        if p == 0 {
            f.u.copy_from_slice(&par.start);
        } else {
            seq.eb_row(p - 1, &mut f.row);
            f.windows(p);
            for j in 0..c {
                let n = f.len[j];
                if n == 0 {
                    f.alpha[j] = NEG;
                    continue;
                }
                let w = f.ring.window(j, f.first[j], n);
                let (best, e) = argmax_add(w, par.weights.window(j, n), true, &mut buf);
                // As the forward's `α ⊗ lift(P + eb)`, so the score is the max forward's.
                f.alpha[j] = best + (f.prefix.pref[j] + f.row[j]);
                bp_dur[p * c + j] = D::put(n - e);
            }
            if p == len {
                break;
            }
            for j in 0..c {
                let (best, i) = argmax_add(&f.alpha, par.matrix.column(j), false, &mut buf);
                f.u[j] = best;
                bp_prev[p * c + j] = P::put(i);
            }
        }
        f.push(p, seq);
    }
    decode(&f.alpha, par, len, |t, j| {
        let d = bp_dur[t * c + j].get();
        let s = t - d;
        (d, if s == 0 { 0 } else { bp_prev[s * c + j].get() })
    })
}

/// Duration-dependent transition: `bp_dur[t*C + j]` and `bp_prev[t*C + j]` are the best
/// duration and previous label of a segment of label `j` ending at `t`, read off the ring
/// before each step.
fn dd_with<D: Pointer, P: Pointer, F: Scalar>(
    seq: &SeqIn<'_, F>,
    par: &Params<MaxSemiring>,
) -> Decoded {
    let (k, c, len) = (par.k, par.c, seq.len);
    let mut bp_dur = vec![D::default(); (len + 1) * c];
    let mut bp_prev = vec![P::default(); (len + 1) * c];
    let mut buf = vec![0.0; c];
    let mut f = DdFwd::<MaxSemiring>::new(par);
    for p in 0..=len {
        if p >= 1 {
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
                            &mut buf,
                        )
                    };
                    let x = inner + (f.q[slot * c + j] + par.dur[j * k + d - 1]);
                    if x > best {
                        best = x;
                        bd = d;
                        bi = i;
                    }
                }
                bp_dur[p * c + j] = D::put(bd);
                bp_prev[p * c + j] = P::put(bi);
            }
        }
        f.step(p, seq, par);
    }
    decode(&f.alpha, par, len, |t, j| {
        (bp_dur[t * c + j].get(), bp_prev[t * c + j].get())
    })
}
