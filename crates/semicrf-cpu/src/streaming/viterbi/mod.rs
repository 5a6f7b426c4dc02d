//! Viterbi decoding: the max-semiring forward with backpointers, integers of the narrowest
//! width that holds them (a duration: 16 bits while `K < 2¹⁶`; a label: 8 bits while
//! `C <= 256`).
//!
//! Two drivers share one step per transition form ([`Sweep`]):
//!
//! - [`decode_full`] keeps the backpointers of every position, `O(L·C)` integers (a sequence
//!   of `2·10⁷` positions and 50 labels keeps 3 GB of them);
//! - [`decode_checkpointed`] keeps none: the forward sweep saves its exact state every `Δ`
//!   positions, and the traceback, going down, recomputes one block of `Δ` positions at a
//!   time from its checkpoint, with that block's backpointers only. Every block is
//!   recomputed at most once (the traceback only moves down), so the cost is at most two
//!   forward sweeps and the memory `O(K·C + (L/Δ)·K·C + Δ·C)`, `O(sqrt(L·K)·C)` at
//!   `Δ = sqrt(L·K)`. With a static transition a checkpoint holds only the ring entries a
//!   later window can read (per label, its last `min(K_j, p - z_j)` starts), so labels cut
//!   by `-inf` scores or with short durations cost what their windows hold. By default `Δ`
//!   starts at `K` and doubles (every other checkpoint dropped) whenever the checkpoints
//!   hold more bytes than the blocks of backpointers, so both stay balanced whatever a
//!   checkpoint holds. A restored state is bitwise the one the sweep left, so the
//!   backpointers, hence the segments (ties included), are those of [`decode_full`].
//!
//! The static sweep skips what cannot win: a window's starts closer than the label's
//! shortest finite duration; in a window with at most a quarter of its ring entries finite
//! (one bit per entry says which), the `-inf` ones (a gene model's windows hold mostly
//! `-inf` starts: a begin boundary is finite only at a splice site or a start codon); and in
//! a transition column with at most a quarter of its entries finite, the `-inf` ones. The
//! maxima and their first or last positions are those of the full scans, bitwise.

use semicrf_core::{Decoded, MaxSemiring, Scalar, Segment, decode_best};

use super::forward::Forward;
use super::input::SeqIn;
use super::params::Params;

mod sweeps;

pub(crate) use sweeps::sweep_words;
use sweeps::{DdSweep, StaticSweep};

const NEG: f64 = f64::NEG_INFINITY;

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

/// Runs `$f::<Sw, D, P, F>` with the narrowest duration type `D` for `K` and label type `P`
/// for `C`.
macro_rules! narrowest {
    ($f:ident, $sw:ident, $k:expr, $c:expr, $($arg:expr),*) => {
        match ($k <= u16::MAX as usize, $c <= 256) {
            (true, true) => $f::<$sw, u16, u8, F>($($arg),*),
            (true, false) => $f::<$sw, u16, u32, F>($($arg),*),
            (false, true) => $f::<$sw, u32, u8, F>($($arg),*),
            (false, false) => $f::<$sw, u32, u32, F>($($arg),*),
        }
    };
}

/// Viterbi of one sequence with every backpointer kept.
pub(crate) fn viterbi_full<F: Scalar>(
    seq: &SeqIn<'_, F>,
    par: &Params<MaxSemiring>,
    dd: bool,
) -> Decoded {
    if dd {
        narrowest!(decode_full, DdSweep, par.k, par.c, seq, par)
    } else {
        narrowest!(decode_full, StaticSweep, par.k, par.c, seq, par)
    }
}

/// Viterbi of one sequence with checkpoints every `delta` positions (`adaptive`: every
/// `delta · 2^m`, doubled while the checkpoints hold more than the blocks of backpointers) and
/// no backpointers beyond one block (two with `ahead`, a second reader for recomputing the
/// next block on another thread) and those of the last `tail` positions, which the sweep
/// keeps (the traceback recomputes nothing there).
pub(crate) fn viterbi_checkpointed<F: Scalar>(
    seq: &mut SeqIn<'_, F>,
    ahead: Option<&mut SeqIn<'_, F>>,
    par: &Params<MaxSemiring>,
    dd: bool,
    delta: usize,
    adaptive: bool,
    tail: usize,
) -> Decoded {
    let (k, c) = (par.k, par.c);
    if dd {
        narrowest!(
            decode_checkpointed,
            DdSweep,
            k,
            c,
            seq,
            ahead,
            par,
            delta,
            adaptive,
            tail
        )
    } else {
        narrowest!(
            decode_checkpointed,
            StaticSweep,
            k,
            c,
            seq,
            ahead,
            par,
            delta,
            adaptive,
            tail
        )
    }
}

/// Bytes of the checkpointed Viterbi of one sequence of padded length `t` besides the
/// forward state: checkpoints of at most `saved` words (and `C` first-admissible starts)
/// every `delta` positions (`adaptive`: at most [`adaptive_interval`], and then at most as
/// many bytes as the blocks plus two checkpoints), and one block of backpointers, or with
/// `ahead` two blocks and a second forward state of `fwd` words; and the backpointers of the
/// last `tail` positions.
pub(crate) fn checkpointed_bytes(
    k: usize,
    c: usize,
    t: usize,
    delta: usize,
    adaptive: bool,
    saved: usize,
    ahead: Option<usize>,
    tail: usize,
) -> semicrf_core::ByteCount {
    use semicrf_core::ByteCount;
    let delta0 = super::backward::interval(delta, t);
    let n0 = t.saturating_add(1).div_ceil(delta0);
    let width = if k <= u16::MAX as usize { 2 } else { 4 } + if c <= 256 { 1 } else { 4 };
    let blocks = if ahead.is_some() { 2 } else { 1 };
    // A checkpoint: the state, at most `saved + C` words, and `C` starts, in two vectors of
    // their own (3 words of header each).
    let one = saved + 2 * c + 6;
    let (delta, states) = if adaptive {
        let per_position = blocks * width * c;
        let d = adaptive_interval(delta0, t, per_position, one.saturating_mul(8));
        // The states and their list hold at most the blocks' bytes plus two states, each at
        // least `2C + 6` words; the list, grown by doubling, holds at most three times its
        // states' headers while it moves.
        let held = per_position.saturating_mul(d).saturating_add(16 * one);
        let most = held / (8 * (2 * c + 6)) + 1;
        (d, ByteCount::bytes(&[held]) + ByteCount::f64s(&[18, most]))
    } else {
        // The list is reserved for the `n0` states (two vector headers each).
        (delta0, ByteCount::f64s(&[n0, one + 6]))
    };
    states
        + ByteCount::f64s(&[c])
        + ByteCount::bytes(&[blocks * width, delta, c])
        + ByteCount::bytes(&[width, tail.min(t.saturating_add(1)), c])
        + ByteCount::f64s(&[ahead.unwrap_or(0)])
}

/// One position of the max-semiring sweep of a transition form, recording the backpointers
/// of that position when asked.
trait Sweep: Sized + Send {
    type Fw: Forward<MaxSemiring>;
    /// Whether the previous label of a segment is kept at its start (static) or at its end
    /// (duration-dependent).
    const PREV_AT_START: bool;
    fn new(par: &Params<MaxSemiring>) -> Self;
    fn fw(&mut self) -> &mut Self::Fw;
    fn alpha(&self) -> &[f64];
    /// Saves the state before position `p` into `out` (empty) and `z`: what a restore needs
    /// for the steps from `p` on to be bitwise those of the sweep. By default the whole
    /// forward state ([`Forward::save`]).
    fn save(&mut self, _p: usize, par: &Params<MaxSemiring>, out: &mut Vec<f64>, z: &mut [usize]) {
        out.resize(
            <Self::Fw as Forward<MaxSemiring>>::saved_words(par.k, par.c),
            0.0,
        );
        self.fw().save(out, z);
    }
    /// Restores a state saved with [`Sweep::save`] before position `p`.
    fn restore(&mut self, p: usize, _par: &Params<MaxSemiring>, from: &[f64], z: &[usize]) {
        self.fw().restore(from, z, p);
    }
    /// Step `p`; `bp` the backpointer rows of position `p` (durations, labels).
    fn step<D: Pointer, P: Pointer, F: Scalar>(
        &mut self,
        p: usize,
        seq: &SeqIn<'_, F>,
        par: &Params<MaxSemiring>,
        bp: Option<(&mut [D], &mut [P])>,
    );
}

/// The best segment ending at `t` (for the label the caller's `rows` reads): its duration
/// and the previous label, from the backpointer rows of `t` and, for the static form, of the
/// segment's start `t - d`.
#[inline]
fn lookup<Sw: Sweep, D: Pointer, P: Pointer>(
    t: usize,
    mut rows: impl FnMut(usize) -> (D, P),
) -> (usize, usize) {
    let (d, prev_here) = rows(t);
    let d = d.get();
    let s = t - d;
    let before = if s == 0 {
        0
    } else if Sw::PREV_AT_START {
        rows(s).1.get()
    } else {
        prev_here.get()
    };
    (d, before)
}

fn decode_full<Sw: Sweep, D: Pointer, P: Pointer, F: Scalar>(
    seq: &SeqIn<'_, F>,
    par: &Params<MaxSemiring>,
) -> Decoded {
    let (c, len) = (par.c, seq.len);
    let mut bp_dur = vec![D::default(); (len + 1) * c];
    let mut bp_prev = vec![P::default(); (len + 1) * c];
    let mut sw = Sw::new(par);
    for p in 0..=len {
        let rows = (
            &mut bp_dur[p * c..(p + 1) * c],
            &mut bp_prev[p * c..(p + 1) * c],
        );
        sw.step(p, seq, par, Some(rows));
    }
    let alpha = sw.alpha();
    decode_best(
        len,
        c,
        |j| alpha[j] + par.end[j],
        |t, j| lookup::<Sw, D, P>(t, |u| (bp_dur[u * c + j], bp_prev[u * c + j])),
    )
}

/// One block of recomputed backpointers: positions `[p0, p1)`.
struct Block<D, P> {
    n: usize,
    p0: usize,
    dur: Vec<D>,
    prev: Vec<P>,
}

/// The forward states saved before every block ([`Sweep::save`]).
struct Saved {
    /// Each state with its `C` first-admissible starts.
    states: Vec<(Vec<f64>, Vec<usize>)>,
    c: usize,
    delta: usize,
    /// The first position whose backpointers the sweep kept: blocks end there.
    stop: usize,
}

impl Saved {
    /// Bytes held by the saved states, their list (two vector headers a state) included.
    fn bytes(&self) -> usize {
        let words: usize = self.states.iter().map(|s| s.0.capacity() + self.c).sum();
        8 * (words + 6 * self.states.capacity())
    }

    /// Doubles `Δ`, keeping the states before the multiples of the new one.
    fn thin(&mut self) {
        let mut n = 0;
        self.states.retain(|_| {
            n += 1;
            n % 2 == 1
        });
        self.states.shrink_to_fit();
        self.delta *= 2;
    }
}

/// The checkpoint interval that a sweep starting at `delta` reaches when it doubles the
/// interval whenever its checkpoints hold more bytes than its blocks of backpointers
/// (`block_bytes` a position), each checkpoint of at most `ckpt_bytes`: the smallest
/// `delta · 2^m` at which all `⌈(len+1)/Δ⌉` checkpoints fit, or at which doubling would pass
/// `len + 1`.
pub(crate) fn adaptive_interval(
    delta: usize,
    len: usize,
    block_bytes: usize,
    ckpt_bytes: usize,
) -> usize {
    let mut d = super::backward::interval(delta, len);
    while (len + 1).div_ceil(d).saturating_mul(ckpt_bytes) > d.saturating_mul(block_bytes)
        && d.saturating_mul(2) <= len + 1
    {
        d *= 2;
    }
    d
}

/// What recomputes blocks: a sweep, its reader and the block it fills.
struct Worker<'r, 'a, Sw, D, P, F> {
    sw: Sw,
    seq: &'r mut SeqIn<'a, F>,
    blk: Block<D, P>,
}

impl<Sw: Sweep, D: Pointer, P: Pointer, F: Scalar> Worker<'_, '_, Sw, D, P, F> {
    /// Recomputes block `n` from its checkpoint, with its backpointers.
    fn fill(&mut self, n: usize, saved: &Saved, par: &Params<MaxSemiring>) {
        let (c, delta) = (saved.c, saved.delta);
        let p0 = n * delta;
        let p1 = ((n + 1) * delta).min(saved.stop);
        let (state, z) = &saved.states[n];
        self.sw.restore(p0, par, state, z);
        for p in p0..p1 {
            let r = (p - p0) * c..(p - p0 + 1) * c;
            let rows = (&mut self.blk.dur[r.clone()], &mut self.blk.prev[r]);
            self.sw.step(p, &*self.seq, par, Some(rows));
        }
        (self.blk.n, self.blk.p0) = (n, p0);
    }
}

/// Viterbi with checkpoints; with a second reader (`ahead`), each time the traceback needs a
/// block it does not hold, that block and the one below it are recomputed at once on two
/// threads (the traceback only moves down, so the one below is the next one it needs).
fn decode_checkpointed<Sw: Sweep, D: Pointer, P: Pointer, F: Scalar>(
    seq: &mut SeqIn<'_, F>,
    ahead: Option<&mut SeqIn<'_, F>>,
    par: &Params<MaxSemiring>,
    delta: usize,
    adaptive: bool,
    tail: usize,
) -> Decoded {
    let (c, len) = (par.c, seq.len);
    let delta = super::backward::interval(delta, len);
    // The sweep keeps the backpointers of positions `stop..=len`; checkpoints only below.
    let stop = (len + 1).saturating_sub(tail);
    let n_blk = stop.div_ceil(delta);
    let mut saved = Saved {
        // Reserved only for a fixed interval: an adaptive one keeps far fewer.
        states: Vec::with_capacity(if adaptive { 0 } else { n_blk }),
        c,
        delta,
        stop,
    };
    let mut kept = Block {
        n: usize::MAX,
        p0: stop,
        dur: vec![D::default(); (len + 1 - stop) * c],
        prev: vec![P::default(); (len + 1 - stop) * c],
    };
    // Bytes of backpointers a position, over the blocks the traceback holds.
    let per_position = if ahead.is_some() { 2 } else { 1 } * c * (size_of::<D>() + size_of::<P>());
    let mut sw = Sw::new(par);
    for p in 0..=len {
        if p >= stop {
            let r = (p - stop) * c..(p - stop + 1) * c;
            let rows = (&mut kept.dur[r.clone()], &mut kept.prev[r]);
            sw.step(p, &*seq, par, Some(rows));
            continue;
        }
        if p.is_multiple_of(saved.delta) {
            let (mut state, mut z) = (Vec::new(), vec![0; c]);
            sw.save(p, par, &mut state, &mut z);
            saved.states.push((state, z));
            // Checkpoints that hold more than the blocks: half of them go, so both stay
            // balanced at `O(sqrt(T·S·C))` for checkpoints of `S` words, whatever `S` is.
            while adaptive
                && saved.bytes() > saved.delta * per_position
                && 2 * saved.delta <= len + 1
            {
                saved.thin();
            }
        }
        sw.step::<D, P, F>(p, &*seq, par, None);
    }
    let delta = saved.delta;
    let (mut score, mut last) = (NEG, 0);
    for (j, (&a, &e)) in sw.alpha().iter().zip(&par.end).enumerate() {
        let x = a + e;
        if x > score {
            score = x;
            last = j;
        }
    }
    if score == NEG {
        return Decoded {
            score,
            segments: Vec::new(),
        };
    }
    let block = || Block {
        n: usize::MAX,
        p0: 0,
        dur: vec![D::default(); delta * c],
        prev: vec![P::default(); delta * c],
    };
    let mut main = Worker {
        sw,
        seq,
        blk: block(),
    };
    let mut second = ahead.map(|seq| Worker {
        sw: Sw::new(par),
        seq,
        blk: block(),
    });
    // Makes `main.blk` the block of position `t`.
    let mut load = |main: &mut Worker<'_, '_, Sw, D, P, F>, t: usize| {
        let n = t / delta;
        if main.blk.n == n {
            return;
        }
        match second.as_mut() {
            Some(w) if w.blk.n == n => std::mem::swap(&mut main.blk, &mut w.blk),
            Some(w) if n >= 1 => {
                let saved = &saved;
                rayon::join(|| main.fill(n, saved, par), || w.fill(n - 1, saved, par));
            }
            _ => main.fill(n, &saved, par),
        }
    };
    // The segments come last first; they are kept in chunks of exact capacity and copied
    // once into the result, so the decoding is held at most twice (no doubling growth).
    let mut chunks: Vec<Vec<Segment>> = Vec::new();
    let (mut t, mut j) = (len, last);
    while t > 0 {
        let (d, before) = lookup::<Sw, D, P>(t, |u| {
            if u >= stop {
                let r = (u - stop) * c + j;
                return (kept.dur[r], kept.prev[r]);
            }
            load(&mut main, u);
            let r = (u - main.blk.p0) * c + j;
            (main.blk.dur[r], main.blk.prev[r])
        });
        assert!(
            (1..=t).contains(&d),
            "backpointer of duration {d} at position {t}, label {j}"
        );
        match chunks.last_mut() {
            Some(ch) if ch.len() < SEGMENT_CHUNK => ch.push(Segment::new(t - d, d, j)),
            _ => {
                let mut ch = Vec::with_capacity(SEGMENT_CHUNK);
                ch.push(Segment::new(t - d, d, j));
                chunks.push(ch);
            }
        }
        t -= d;
        j = before;
    }
    drop((main, load));
    let mut segments = Vec::with_capacity(chunks.iter().map(Vec::len).sum());
    for ch in chunks.into_iter().rev() {
        segments.extend(ch.into_iter().rev());
    }
    Decoded { score, segments }
}

/// Segments per chunk of a traceback in progress.
const SEGMENT_CHUNK: usize = 1024;
