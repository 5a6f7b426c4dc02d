//! The four signals: their windows, where their consensus allows an exon boundary, and the
//! weights a window reads.

use crate::dna::{self, OTHER};
use crate::labels::ExonType;

/// Weights per window offset: one per base `ACGT`.
const BASE_WEIGHTS: usize = 4;
/// Weights per adjacent pair of offsets: one per dinucleotide.
const PAIR_WEIGHTS: usize = BASE_WEIGHTS * BASE_WEIGHTS;

/// A signal window: offsets `lo..=hi` around its anchor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Anchor: the `A` of `ATG`.
    Start = 0,
    /// Anchor: the first base of the exon (after `AG`).
    Acceptor = 1,
    /// Anchor: the first base of the intron (`G` of `GT`).
    Donor = 2,
    /// Anchor: the first base of the stop codon.
    Stop = 3,
}

impl Signal {
    /// All four, in index order.
    pub const ALL: [Signal; 4] = [Signal::Start, Signal::Acceptor, Signal::Donor, Signal::Stop];
    /// Offsets of the window around the anchor.
    pub fn window(self) -> (isize, isize) {
        match self {
            Signal::Start => (-9, 5),
            Signal::Acceptor => (-22, 2),
            Signal::Donor => (-3, 5),
            Signal::Stop => (-3, 5),
        }
    }
    pub(super) fn width(self) -> usize {
        let (lo, hi) = self.window();
        (hi - lo + 1) as usize
    }
    /// Weights of its window: 4 per offset, 16 per adjacent pair.
    pub(super) fn weights(self) -> usize {
        BASE_WEIGHTS * self.width() + PAIR_WEIGHTS * (self.width() - 1)
    }
    /// A short name.
    pub fn name(self) -> &'static str {
        ["start", "acceptor", "donor", "stop"][self as usize]
    }
}

/// Where an exon of type `t` and frame `g` that begins (in its strand's reading order) at
/// base `i` of `x` has its signal: the signal and its anchor, or `None` when the consensus
/// (or the frame) does not allow a boundary there.
pub(super) fn reading_begin(x: &[u8], i: usize, t: ExonType, g: usize) -> Option<(Signal, usize)> {
    if t.starts_at_start_codon() {
        (dna::has(x, i as isize, &[0, 3, 2]) && (i + 3 - g).is_multiple_of(3))
            .then_some((Signal::Start, i))
    } else {
        dna::has(x, i as isize - 2, &[0, 2]).then_some((Signal::Acceptor, i))
    }
}

/// The same for an exon that ends (in reading order) at base `i` of `x`.
pub(super) fn reading_end(x: &[u8], i: usize, t: ExonType, g: usize) -> Option<(Signal, usize)> {
    if t.ends_at_stop_codon() {
        (dna::is_stop(x, i + 1) && (i + 1 + 3 - g).is_multiple_of(3))
            .then_some((Signal::Stop, i + 1))
    } else {
        (dna::has(x, i as isize + 1, &[2, 3]) || dna::has(x, i as isize + 1, &[2, 1]))
            .then_some((Signal::Donor, i + 1))
    }
}

/// Calls `f` with each weight a window of `s` reads at `anchor` of `x` (its index within the
/// signal's block: bases first, then dinucleotides), skipping bases beyond the sequence or
/// other than `ACGT`.
pub(super) fn signal_features(s: Signal, x: &[u8], anchor: usize, mut f: impl FnMut(usize)) {
    let (lo, _) = s.window();
    let w = s.width();
    let base = |o: usize| -> Option<usize> {
        let p = anchor as isize + lo + o as isize;
        if p < 0 || p as usize >= x.len() || x[p as usize] == OTHER {
            None
        } else {
            Some(x[p as usize] as usize)
        }
    };
    for o in 0..w {
        if let Some(b) = base(o) {
            f(BASE_WEIGHTS * o + b);
            if o + 1 < w
                && let Some(b2) = base(o + 1)
            {
                f(BASE_WEIGHTS * w + PAIR_WEIGHTS * o + BASE_WEIGHTS * b + b2);
            }
        }
    }
}
