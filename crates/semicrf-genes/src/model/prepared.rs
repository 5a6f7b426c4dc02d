//! A sequence as the model reads it: both strands' bases and the k-mer contexts that end at
//! each of them.

use crate::data::Strand;
use crate::dna;

use super::layout::{HEXAMER, TRIMER};

/// One strand's view of a sequence: its bases in reading order and their contexts.
pub(super) struct Oriented {
    /// Coded bases, in this strand's reading order.
    pub(super) x: Vec<u8>,
    /// The code of the hexamer ending at each base (`dna::contexts`).
    pub(super) c6: Vec<u32>,
    /// The code of the trimer ending at each base.
    pub(super) c3: Vec<u32>,
}

impl Oriented {
    fn new(x: Vec<u8>) -> Oriented {
        let c6 = dna::contexts(&x, HEXAMER);
        let c3 = dna::contexts(&x, TRIMER);
        Oriented { x, c6, c3 }
    }
}

/// A sequence prepared for the model: both strands' contexts.
pub struct Prepared {
    /// `T`.
    pub(super) t: usize,
    /// The sequence as given.
    pub(super) plus: Oriented,
    /// Its reverse complement: base `i` here is base `T - 1 - i` of the sequence.
    pub(super) minus: Oriented,
}

impl Prepared {
    /// Prepares coded bases.
    pub fn new(seq: &[u8]) -> Prepared {
        Prepared {
            t: seq.len(),
            plus: Oriented::new(seq.to_vec()),
            minus: Oriented::new(dna::reverse_complement(seq)),
        }
    }
    /// `T`.
    pub fn len(&self) -> usize {
        self.t
    }
    /// Whether it has no base.
    pub fn is_empty(&self) -> bool {
        self.t == 0
    }
    /// The view of a strand.
    pub(super) fn strand(&self, s: Strand) -> &Oriented {
        match s {
            Strand::Plus => &self.plus,
            Strand::Minus => &self.minus,
        }
    }
}
