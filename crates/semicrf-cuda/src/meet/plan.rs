//! The meet kernels' plan: threads a block, label width, steps a block, where shared memory
//! holds what (their layout), the prepared parameters and the device memory they need.

use semicrf_core::{ByteCount, Shape};

use crate::kernel::{MeetKernel, MeetPass, RANGE, STEPS, STEPS_WIDE, WIDTHS, max_threads};
use crate::tuning::tuning;

/// The most labels the kernels take (one thread a label in phase 2, and their shared memory
/// holds the C×C transition); more labels run in the log domain.
pub(crate) const MAX_LABELS: usize = 64;

/// Threads per block for `K`, `C`, or `None` beyond [`MAX_LABELS`]: enough that phases 1
/// and 3 (p·K·C window terms a block of `p` steps) give each thread about
/// `SEMICRF_CUDA_MEET_ITEMS` of them, at least one thread a label (whole warps), at most
/// [`max_threads`].
pub(crate) fn plan(k: usize, c: usize, p: usize) -> Option<usize> {
    plan_with(k, c, tuning().meet_items, p)
}

/// The [`plan`] of the kernels for `K`, `C` on a device of `limit` bytes of shared memory a
/// block ([`steps`] a block), or `None` where [`plan`] has none or either kernel of a
/// backward pass (and so the forward's) does not fit.
pub(crate) fn fitting_plan(k: usize, c: usize, limit: usize) -> Option<usize> {
    let fits = |marg| layout(k, c, limit, marg).bytes <= limit;
    plan(k, c, steps(k, c, limit, width(c))).filter(|_| fits(false) && fits(true))
}

/// [`plan`] for a given number of window terms per thread.
pub(crate) fn plan_with(k: usize, c: usize, items: usize, p: usize) -> Option<usize> {
    if c == 0 || c > MAX_LABELS {
        return None;
    }
    let labels = c.div_ceil(32) * 32;
    let want = (p * k * c).div_ceil(items).next_power_of_two();
    Some(want.clamp(32, max_threads(p)).max(labels))
}

/// The width of the kernels that run `C` labels: the least of [`WIDTHS`] that holds them, or
/// 0 (the general kernels) beyond them or where the environment sets `SEMICRF_CUDA_FAST=0`
/// (for comparison).
pub(crate) fn width(c: usize) -> usize {
    if !tuning().wide_kernels {
        return 0;
    }
    WIDTHS.into_iter().find(|&w| c <= w).unwrap_or(0)
}

/// Where a launch keeps what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The kernels' label width ([`width`]; 0: the general kernels).
    pub ct: usize,
    /// Steps staged at a time.
    pub ch: usize,
    /// Whether the ring is in shared memory (else in a global buffer).
    pub ring: bool,
    /// Dynamic shared memory, bytes.
    pub bytes: usize,
    /// Steps a block ([`steps`]).
    pub p: usize,
    /// Whether the second halves accumulate the duration and transition marginals in shared
    /// memory (else in their global outputs, a read and a write a block of steps).
    pub acc: bool,
}

/// The shared-memory layout for `K`, `C` within `limit` bytes (`marg`: the second halves,
/// which also stage the other sweep's rows): the most staged steps (64 down to one block of
/// steps) that keep the ring in shared memory, with the accumulators of the second halves
/// where they fit too; else the most without them.
pub(crate) fn layout(k: usize, c: usize, limit: usize, marg: bool) -> Layout {
    let ct = width(c);
    layout_with(k, c, limit, marg, (true, marg), ct, steps(k, c, limit, ct))
}

/// Steps a block of the kernels of width `ct` for `K`, `C` within `limit` bytes of shared
/// memory ([`STEPS`]): the same for both kernels of a backward pass, which share the state.
pub(crate) fn steps(k: usize, c: usize, limit: usize, ct: usize) -> usize {
    let wide = ct > 0 && layout_with(k, c, limit, true, (true, false), ct, STEPS_WIDE).ring;
    if wide { STEPS_WIDE } else { STEPS }
}

/// [`layout`], with the ring kept out of shared memory unless `ring` and the accumulators
/// unless `acc`, for the kernels of width `ct` and `p` steps a block (for tests).
pub(crate) fn layout_with(
    k: usize,
    c: usize,
    limit: usize,
    marg: bool,
    (ring, acc): (bool, bool),
    ct: usize,
    p: usize,
) -> Layout {
    let words = limit / 8;
    let ring_words = (k + p) * c;
    // The kernels' header (`Sweep`): α̃ rows and bounds (C rounded up to 4, or to the
    // kernels' width), four arrays of the block's steps, Tl (rows padded likewise), the first
    // P+1 weights, the rebase factors, the steps' exponents, then the int words (row flags,
    // window starts, rebase exponents, general steps, flags). The second halves also keep two
    // more arrays of the block's steps and two copies of the running marginals.
    let c4 = if ct > 0 { ct } else { c.div_ceil(4) * 4 };
    let header = 2 * (p + 1) * c4
        + 4 * p * c
        + c4 * c
        + (p + 1) * c
        + c
        + (p + 1)
        + (3 * p + 4 + p * c + 3 * c) / 2;
    let base = |ch: usize| {
        header
            + 4 * ch * c
            + if marg {
                2 * ch * c + 4 * ch + 2 * p * c + 4 * c
            } else {
                0
            }
    };
    let top = (4096 / c.max(1)).clamp(p, 64);
    let chs: Vec<usize> = (0..4)
        .map(|i| 64 >> i)
        .filter(|&ch| ch <= top && ch >= p)
        .collect();
    let acc_words = k * c + c * c;
    let acc = acc && marg;
    for (ring, acc) in [(ring, acc), (ring, false), (false, acc), (false, false)] {
        for &ch in &chs {
            let w = base(ch) + if ring { ring_words } else { 0 } + if acc { acc_words } else { 0 };
            if w <= words {
                return Layout {
                    ct,
                    ch,
                    ring,
                    bytes: 8 * w,
                    p,
                    acc,
                };
            }
        }
    }
    Layout {
        ct,
        ch: p,
        ring: false,
        bytes: 8 * base(p),
        p,
        acc: false,
    }
}

/// The prepared parameters (`Par` of `kernels/meet_common.cuh`) of a static transition `tr` (C, C),
/// durations `dur` (K, C), `start` and `end`, or `None` when a finite one is beyond
/// ±[`RANGE`].
pub(crate) fn params(
    tr: &[f64],
    dur: &[f64],
    st: &[f64],
    en: &[f64],
    k: usize,
    c: usize,
) -> Option<Vec<f64>> {
    let all = tr.iter().chain(dur).chain(st).chain(en);
    if all
        .clone()
        .any(|&x| x != f64::NEG_INFINITY && x.abs() > RANGE)
    {
        return None;
    }
    // A maximum over -inf only is taken as 0: every weight is then 0 (-inf).
    let max = |it: &mut dyn Iterator<Item = f64>| {
        let m = it.fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY { 0.0 } else { m }
    };
    let lin = |x: f64| {
        if x == f64::NEG_INFINITY { 0.0 } else { x.exp() }
    };
    let md: Vec<f64> = (0..c)
        .map(|j| max(&mut (0..k).map(|d| dur[d * c + j])))
        .collect();
    let mut v = Vec::with_capacity(k * c + 2 * (c * c + 3 * c) + 2 * c);
    // Wl, label-major: Wl[j·K + d-1].
    v.extend((0..k * c).map(|x| lin(dur[(x % k) * c + x / k] - md[x / k])));
    for side in 0..2 {
        // The side's own transition: the reverse sweep's is the transpose.
        let at = |i: usize, j: usize| {
            if side == 0 {
                tr[i * c + j]
            } else {
                tr[j * c + i]
            }
        };
        let first = if side == 0 { st } else { en };
        let mt: Vec<f64> = (0..c).map(|j| max(&mut (0..c).map(|i| at(i, j)))).collect();
        v.extend((0..c * c).map(|x| lin(at(x / c, x % c) - mt[x % c])));
        v.extend(mt.iter().copied());
        v.extend(mt.iter().map(|x| x.exp()));
        v.extend((0..c).map(|j| lin(first[j] - mt[j])));
    }
    v.extend(md.iter().copied());
    v.extend(md.iter().map(|x| x.exp()));
    Some(v)
}

/// Rows of saved α̃ and ũ each sweep keeps per sequence: the forward sweep saves rows
/// 0..=m, the reverse one 0..=L-m+1, with m = max(1, (L+1)/2).
pub(crate) fn rows(t: usize) -> usize {
    t / 2 + 2
}

/// Words of a sweep's saved state (`state_len` of the kernels): the ring's last `K` entries
/// of every label and ten words a label besides.
pub(crate) fn state_words(k: usize, c: usize) -> usize {
    k * c + 10 * c + 4
}

/// Device bytes of the kernels' own buffers for `shape` (`backward`: with the saved rows and
/// the outputs), with the ring in global memory where `lay` does not keep it in shared
/// memory.
pub(crate) fn bytes(shape: Shape, backward: bool, lay: Layout, eb: bool) -> ByteCount {
    let (b, t, k, c) = (shape.batch, shape.len, shape.max_duration, shape.labels);
    let h = rows(t);
    let params = ByteCount::f64s(&[k * c + 2 * (c * c + 3 * c) + 2 * c]);
    let mut n = params
        + ByteCount::f64s(&[b, 2, state_words(k, c)])
        + ByteCount::f64s(&[2, b])
        + ByteCount::f64s(&[b.div_ceil(2)]);
    if !lay.ring {
        n = n + ByteCount::f64s(&[b, 2, k + lay.p, c]);
    }
    if backward {
        n = n
            + ByteCount::f64s(&[2, b, 2, h, c])
            + ByteCount::bytes(&[8, b, 2, h])
            + ByteCount::f64s(&[b, 2, h])
            + ByteCount::f64s(&[b])
            + ByteCount::f64s(&[if eb { 3 } else { 2 }, b, t, c])
            + ByteCount::f64s(&[b, t])
            + ByteCount::f64s(&[b, 2, k, c])
            + ByteCount::f64s(&[b, 2, c, c])
            + ByteCount::f64s(&[2, b, c])
            + ByteCount::f64s(&[k * c + c * c]);
    }
    n
}

/// The kernel of `pass` with layout `lay`: its label width's (0: the general kernels), with
/// the ring where the layout keeps it; `meet_z_log` has one variant a module (whose shared
/// memory is laid out as its sweeps').
pub(crate) fn placed(pass: MeetPass, lay: Layout) -> MeetKernel {
    MeetKernel {
        pass,
        width: lay.ct,
        ring: lay.ring && pass != MeetPass::Z,
    }
}
