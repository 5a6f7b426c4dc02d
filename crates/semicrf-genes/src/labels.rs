//! The label set of the gene model and the structure it imposes: which segment may follow
//! which, which durations each label may take, and where its signals must sit.
//!
//! Coordinates are those of the given sequence `S` (left to right). A gene on the minus
//! strand reads right to left, so its exon types are named by reading order (its *initial*
//! exon is its rightmost) and its signals are found on the reverse complement.
//!
//! **Frames.** An exon label carries the frame `f` that fixes the codon position of every
//! base it covers: `(t - f) mod 3` on the plus strand and `(f - t) mod 3` on the minus
//! strand (codon positions count in reading order). An intron between an exon of frame `a`
//! (left) and one of frame `b` (right) has a length `≡ b - a (mod 3)` on either strand, so
//! its first piece carries both frames (`I[a→b]`, with durations of that residue only) and
//! the frame stays consistent across every intron of a gene.
//!
//! **Long introns and intergenic stretches** are chained: a first piece of any length up to
//! [`PIECE`] bases, then pieces of exactly `PIECE` bases (`J[b]`, `Nc`). The split of a
//! stretch into pieces is therefore unique, and no piece checks a signal: the splice
//! signals sit on the exons' boundaries.

use crate::data::Strand;

/// The length of an intron or intergenic continuation piece (a multiple of 3), and the
/// longest first piece.
pub const PIECE: usize = 120;

/// The four exon types, in reading order of their gene.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExonType {
    /// From the start codon to a splice donor.
    Initial = 0,
    /// From a splice acceptor to a splice donor.
    Internal = 1,
    /// From a splice acceptor to the base before the stop codon.
    Terminal = 2,
    /// From the start codon to the base before the stop codon (a gene of one exon).
    Single = 3,
}

impl ExonType {
    /// All four, in index order.
    pub const ALL: [ExonType; 4] = [
        ExonType::Initial,
        ExonType::Internal,
        ExonType::Terminal,
        ExonType::Single,
    ];
    /// Whether its reading start is the start codon (else a splice acceptor).
    pub fn starts_at_start_codon(self) -> bool {
        matches!(self, ExonType::Initial | ExonType::Single)
    }
    /// Whether it is followed, in reading order, by the stop codon (else a splice donor).
    pub fn ends_at_stop_codon(self) -> bool {
        matches!(self, ExonType::Terminal | ExonType::Single)
    }
    /// A short name.
    pub fn name(self) -> &'static str {
        ["initial", "internal", "terminal", "single"][self as usize]
    }
    /// The type of the `i`-th of `n` exons in reading order.
    pub fn of(i: usize, n: usize) -> ExonType {
        match (i, n) {
            (_, 1) => ExonType::Single,
            (0, _) => ExonType::Initial,
            (i, n) if i + 1 == n => ExonType::Terminal,
            _ => ExonType::Internal,
        }
    }
}

/// What a label stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Label {
    /// The first piece of an intergenic stretch (`1..=PIECE` bases).
    Intergenic,
    /// A further piece of an intergenic stretch (exactly `PIECE` bases).
    IntergenicMore,
    /// A coding exon of a type, strand and frame.
    Exon(Strand, ExonType, u8),
    /// The first piece of an intron between a left exon of frame `a` and a right exon of
    /// frame `b` (`1..=PIECE` bases, length `≡ b - a mod 3`).
    Intron(Strand, u8, u8),
    /// A further piece of an intron whose right exon has frame `b` (exactly `PIECE` bases).
    IntronMore(Strand, u8),
}

/// `C`: two intergenic labels and 24 per strand.
pub const C: usize = 50;

fn strand_offset(s: Strand) -> usize {
    match s {
        Strand::Plus => 2,
        Strand::Minus => 26,
    }
}

impl Label {
    /// Its index in `0..C`.
    pub fn index(self) -> usize {
        match self {
            Label::Intergenic => 0,
            Label::IntergenicMore => 1,
            Label::Exon(s, t, f) => strand_offset(s) + 3 * t as usize + f as usize,
            Label::Intron(s, a, b) => strand_offset(s) + 12 + 3 * a as usize + b as usize,
            Label::IntronMore(s, b) => strand_offset(s) + 21 + b as usize,
        }
    }

    /// The label of an index in `0..C`.
    pub fn of(index: usize) -> Label {
        match index {
            0 => Label::Intergenic,
            1 => Label::IntergenicMore,
            _ => {
                let (s, r) = if index < 26 {
                    (Strand::Plus, index - 2)
                } else {
                    (Strand::Minus, index - 26)
                };
                match r {
                    0..12 => Label::Exon(s, ExonType::ALL[r / 3], (r % 3) as u8),
                    12..21 => Label::Intron(s, ((r - 12) / 3) as u8, ((r - 12) % 3) as u8),
                    _ => Label::IntronMore(s, (r - 21) as u8),
                }
            }
        }
    }

    /// Every label, in index order.
    pub fn all() -> impl Iterator<Item = Label> {
        (0..C).map(Label::of)
    }

    /// Its strand (none for intergenic labels).
    pub fn strand(self) -> Option<Strand> {
        match self {
            Label::Exon(s, ..) | Label::Intron(s, ..) | Label::IntronMore(s, _) => Some(s),
            _ => None,
        }
    }

    /// Whether its left end (in `S`) touches an intron (else intergenic sequence).
    fn left_is_intron(t: ExonType, s: Strand) -> bool {
        match s {
            Strand::Plus => !t.starts_at_start_codon(),
            Strand::Minus => !t.ends_at_stop_codon(),
        }
    }

    /// Whether its right end (in `S`) touches an intron.
    fn right_is_intron(t: ExonType, s: Strand) -> bool {
        match s {
            Strand::Plus => !t.ends_at_stop_codon(),
            Strand::Minus => !t.starts_at_start_codon(),
        }
    }

    /// Whether a segment of `next` may follow one of `self` (left to right in `S`).
    pub fn may_precede(self, next: Label) -> bool {
        use Label::*;
        match (self, next) {
            (Intergenic | IntergenicMore, IntergenicMore) => true,
            (Intergenic | IntergenicMore, Exon(s, t, _)) => !Label::left_is_intron(t, s),
            (Exon(s, t, _), Intergenic) => !Label::right_is_intron(t, s),
            (Exon(s, t, f), Intron(s2, a, _)) => s == s2 && f == a && Label::right_is_intron(t, s),
            (Intron(s, _, b), IntronMore(s2, b2)) | (IntronMore(s, b), IntronMore(s2, b2)) => {
                s == s2 && b == b2
            }
            (Intron(s, _, b) | IntronMore(s, b), Exon(s2, t, f)) => {
                s == s2 && b == f && Label::left_is_intron(t, s)
            }
            _ => false,
        }
    }

    /// Whether a segment of this label may last `d` bases (before the learned table).
    pub fn allows(self, d: usize) -> bool {
        match self {
            Label::Intergenic => d <= PIECE,
            Label::IntergenicMore | Label::IntronMore(..) => d == PIECE,
            Label::Intron(_, a, b) => d <= PIECE && d % 3 == (3 + b as usize - a as usize) % 3,
            Label::Exon(..) => true,
        }
    }

    /// A short name, as the pictures and the model file show it.
    pub fn name(self) -> String {
        let sign = |s: Strand| s.sign();
        match self {
            Label::Intergenic => "N".into(),
            Label::IntergenicMore => "N+".into(),
            Label::Exon(s, t, f) => format!("{}{}{f}", t.name(), sign(s)),
            Label::Intron(s, a, b) => format!("intron{}{a}{b}", sign(s)),
            Label::IntronMore(s, b) => format!("intron+{}{b}", sign(s)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_round_trip_and_every_label_is_reachable_and_can_be_left() {
        for c in 0..C {
            assert_eq!(Label::of(c).index(), c);
        }
        for l in Label::all() {
            let preds = Label::all().filter(|p| p.may_precede(l)).count();
            let succs = Label::all().filter(|n| l.may_precede(*n)).count();
            assert!(
                preds > 0 && succs > 0,
                "{l:?}: {preds} predecessors, {succs} successors"
            );
        }
    }
}
