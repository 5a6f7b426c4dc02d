//! The flat weight vector: where each block of weights lives, the named sizes of the blocks,
//! the logarithmic duration bins, and the model (a layout and its weights).
//!
//! Blocks, in order: coding hexamers and trimers (one table per codon position), intron
//! hexamers and trimers, intergenic hexamers and trimers, the four signal windows, the exon
//! duration tables (one per exon type), the intron and intergenic first-piece duration
//! tables, the intron and intergenic continuation weights, the transitions.

use crate::labels::{C, ExonType, Label, PIECE};

use super::signals::Signal;

/// The content scores read the hexamer and the trimer that end at a base.
pub(super) const HEXAMER: usize = 6;
/// See [`HEXAMER`].
pub(super) const TRIMER: usize = 3;

/// Weights of a table of `k`-mers: one per `k`-mer of `ACGT` (`4^k`, the codes
/// `dna::contexts` gives) plus one for the unknown context `4^k` (the `k`-mer runs off the
/// start of the sequence or holds a base other than `ACGT`).
const fn kmer_slots(k: usize) -> usize {
    (1 << (2 * k)) + 1
}

/// `4^6 + 1` = 4097: hexamer codes and the unknown slot.
pub(super) const HEXAMER_SLOTS: usize = kmer_slots(HEXAMER);
/// `4^3 + 1` = 65: trimer codes and the unknown slot.
pub(super) const TRIMER_SLOTS: usize = kmer_slots(TRIMER);
/// Coding content has one hexamer and one trimer table per codon position.
pub(super) const CODON_POSITIONS: usize = 3;

/// Successive duration bins' durations differ by this factor.
const BIN_RATIO: f64 = 1.1;

/// The logarithmic bin of a duration: the nearest integer to `log_1.1 d`.
pub fn bin(d: usize) -> usize {
    ((d as f64).ln() / BIN_RATIO.ln()).round() as usize
}

/// Where each group of weights lives in the flat parameter vector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Longest exon, `K`.
    pub k: usize,
    /// Coding hexamers, [`CODON_POSITIONS`] tables of [`HEXAMER_SLOTS`].
    pub(super) cod6: usize,
    /// Coding trimers, [`CODON_POSITIONS`] tables of [`TRIMER_SLOTS`].
    pub(super) cod3: usize,
    /// Intron hexamers.
    pub(super) int6: usize,
    /// Intron trimers.
    pub(super) int3: usize,
    /// Intergenic hexamers.
    pub(super) ig6: usize,
    /// Intergenic trimers.
    pub(super) ig3: usize,
    /// Each signal's window weights ([`Signal::weights`]), by [`Signal`] index.
    pub(super) sig: [usize; 4],
    /// The exon duration tables, one per [`ExonType`], of `exon_bins` each.
    pub(super) dur_exon: usize,
    /// The intron first piece's duration table, `piece_bins`.
    pub(super) dur_intron: usize,
    /// The intergenic first piece's duration table, `piece_bins`.
    pub(super) dur_ig: usize,
    /// The one weight of an intron continuation piece.
    pub(super) more_intron: usize,
    /// The one weight of an intergenic continuation piece.
    pub(super) more_ig: usize,
    /// The transitions, one per name in `tr_names`.
    pub(super) tr: usize,
    /// Bins of a duration table of `K`.
    pub exon_bins: usize,
    /// Bins of a first piece's duration table (durations up to [`PIECE`]).
    pub(super) piece_bins: usize,
    /// Transition parameter of `(i, j)` (`None`: forbidden).
    pub(super) tr_param: Vec<Option<usize>>,
    /// Names of the transition parameters.
    pub tr_names: Vec<String>,
    /// Number of weights.
    pub total: usize,
}

/// The kind of a label that names its transition weights: frames share them.
fn kind(l: Label) -> String {
    match l {
        Label::Exon(s, t, _) => format!("{}{}", t.name(), s.sign()),
        Label::Intron(s, ..) => format!("intron{}", s.sign()),
        Label::IntronMore(s, _) => format!("intron{}+", s.sign()),
        other => other.name(),
    }
}

impl Layout {
    /// The layout for exons of at most `k` bases.
    pub fn new(k: usize) -> Layout {
        let mut n = 0;
        let mut take = |m: usize| {
            n += m;
            n - m
        };
        let cod6 = take(CODON_POSITIONS * HEXAMER_SLOTS);
        let cod3 = take(CODON_POSITIONS * TRIMER_SLOTS);
        let int6 = take(HEXAMER_SLOTS);
        let int3 = take(TRIMER_SLOTS);
        let ig6 = take(HEXAMER_SLOTS);
        let ig3 = take(TRIMER_SLOTS);
        let sig = Signal::ALL.map(|s| take(s.weights()));
        let exon_bins = bin(k) + 1;
        let piece_bins = bin(PIECE) + 1;
        let dur_exon = take(ExonType::ALL.len() * exon_bins);
        let dur_intron = take(piece_bins);
        let dur_ig = take(piece_bins);
        let more_intron = take(1);
        let more_ig = take(1);
        let mut names: Vec<String> = Vec::new();
        let mut tr_param = vec![None; C * C];
        for i in Label::all() {
            for j in Label::all() {
                if i.may_precede(j) {
                    let key = format!("{}>{}", kind(i), kind(j));
                    let p = names.iter().position(|x| *x == key).unwrap_or_else(|| {
                        names.push(key);
                        names.len() - 1
                    });
                    tr_param[i.index() * C + j.index()] = Some(p);
                }
            }
        }
        let tr = take(names.len());
        Layout {
            k,
            cod6,
            cod3,
            int6,
            int3,
            ig6,
            ig3,
            sig,
            dur_exon,
            dur_intron,
            dur_ig,
            more_intron,
            more_ig,
            tr,
            exon_bins,
            piece_bins,
            tr_param,
            tr_names: names,
            total: n,
        }
    }

    /// The weight index of duration `d` of label `l`, or `None` where `l` cannot last `d`.
    pub fn duration_param(&self, l: Label, d: usize) -> Option<usize> {
        if d == 0 || d > self.k || !l.allows(d) {
            return None;
        }
        Some(match l {
            Label::Exon(_, t, _) => self.exon_duration_bin(t, bin(d)),
            Label::Intron(..) => self.intron_duration_bin(bin(d)),
            Label::Intergenic => self.dur_ig + bin(d),
            Label::IntronMore(..) => self.more_intron,
            Label::IntergenicMore => self.more_ig,
        })
    }

    /// The weight index of exon type `t`'s duration bin `b`.
    pub fn exon_duration_bin(&self, t: ExonType, b: usize) -> usize {
        self.dur_exon + t as usize * self.exon_bins + b
    }

    /// The weight index of the intron first piece's duration bin `b`.
    pub fn intron_duration_bin(&self, b: usize) -> usize {
        self.dur_intron + b
    }

    /// The weight index of the transition from label `i` to label `j`, or `None` where the
    /// gene structure forbids it.
    pub(super) fn transition_param(&self, i: usize, j: usize) -> Option<usize> {
        self.tr_param[i * C + j].map(|n| self.tr + n)
    }
}

/// The gene model: a layout and its weights.
#[derive(Clone, Debug)]
pub struct Model {
    /// Where the weights live.
    pub layout: Layout,
    /// The weights.
    pub w: Vec<f64>,
}

impl Model {
    /// A model of zero weights for exons of at most `k` bases.
    pub fn new(k: usize) -> Model {
        let layout = Layout::new(k);
        Model {
            w: vec![0.0; layout.total],
            layout,
        }
    }
}

#[cfg(test)]
impl Layout {
    /// Every table of weights, in order: its name, first index and length.
    pub(super) fn tables(&self) -> Vec<(String, usize, usize)> {
        let mut t = Vec::new();
        for cp in 0..CODON_POSITIONS {
            let name = format!("coding hexamers, codon position {cp}");
            t.push((name, self.cod6 + cp * HEXAMER_SLOTS, HEXAMER_SLOTS));
        }
        for cp in 0..CODON_POSITIONS {
            let name = format!("coding trimers, codon position {cp}");
            t.push((name, self.cod3 + cp * TRIMER_SLOTS, TRIMER_SLOTS));
        }
        t.push(("intron hexamers".into(), self.int6, HEXAMER_SLOTS));
        t.push(("intron trimers".into(), self.int3, TRIMER_SLOTS));
        t.push(("intergenic hexamers".into(), self.ig6, HEXAMER_SLOTS));
        t.push(("intergenic trimers".into(), self.ig3, TRIMER_SLOTS));
        for s in Signal::ALL {
            let name = format!("{} signal", s.name());
            t.push((name, self.sig[s as usize], s.weights()));
        }
        for ty in ExonType::ALL {
            let name = format!("{} exon durations", ty.name());
            t.push((name, self.exon_duration_bin(ty, 0), self.exon_bins));
        }
        t.push(("intron durations".into(), self.dur_intron, self.piece_bins));
        t.push(("intergenic durations".into(), self.dur_ig, self.piece_bins));
        t.push(("intron continuation".into(), self.more_intron, 1));
        t.push(("intergenic continuation".into(), self.more_ig, 1));
        t.push(("transitions".into(), self.tr, self.tr_names.len()));
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_tile_the_weight_vector_in_order() {
        let l = Layout::new(300);
        let mut at = 0;
        for (name, start, len) in l.tables() {
            assert_eq!(start, at, "{name}");
            assert!(len > 0, "{name}");
            at += len;
        }
        assert_eq!(at, l.total);
    }

    #[test]
    fn kmer_tables_hold_every_context_code() {
        assert_eq!((HEXAMER_SLOTS, TRIMER_SLOTS), (4097, 65));
        // `ACGT` k-mers, and one run short of `k` bases or through an `N`: the largest code
        // is the unknown one, the last slot.
        let x = crate::dna::encode(b"ACGTTGCANTTTTTT");
        for (k, slots) in [(HEXAMER, HEXAMER_SLOTS), (TRIMER, TRIMER_SLOTS)] {
            let c = crate::dna::contexts(&x, k);
            assert_eq!(*c.iter().max().unwrap() as usize, slots - 1);
            assert!(c.iter().filter(|&&v| v as usize != slots - 1).count() > 0);
        }
    }

    #[test]
    fn every_duration_up_to_k_has_a_bin_of_its_table() {
        let l = Layout::new(300);
        assert_eq!(bin(1), 0);
        assert_eq!(bin(300) + 1, l.exon_bins);
        assert!((1..=300).all(|d| bin(d) < l.exon_bins && bin(d) <= bin(d + 1)));
        assert!((1..=PIECE).all(|d| bin(d) < l.piece_bins));
        // Bins grow by the ratio: durations 10 and 11 share none, 100 and 101 share one.
        assert_ne!(bin(10), bin(11));
        assert_eq!(bin(100), bin(101));
    }
}
