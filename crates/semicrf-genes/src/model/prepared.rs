//! A sequence as the model reads it: both strands' bases and the k-mer contexts that end at
//! each of them.

use crate::data::Strand;
use crate::dna;

use super::layout::{HEXAMER, TRIMER};

/// One strand's view of a sequence: its bases in reading order and their contexts.
pub(super) struct Oriented {
    /// Coded bases, in this strand's reading order.
    pub(super) x: Vec<u8>,
    /// The code of the hexamer ending at each base (`dna::contexts`); empty when they are
    /// computed as they are read ([`Prepared::lean`]).
    c6: Vec<u32>,
    /// The code of the trimer ending at each base; empty likewise.
    c3: Vec<u32>,
}

impl Oriented {
    fn new(x: Vec<u8>, lean: bool) -> Oriented {
        let (c6, c3) = if lean {
            (Vec::new(), Vec::new())
        } else {
            (dna::contexts(&x, HEXAMER), dna::contexts(&x, TRIMER))
        };
        Oriented { x, c6, c3 }
    }

    /// The code of the hexamer ending at base `i`.
    #[inline]
    pub(super) fn c6(&self, i: usize) -> u32 {
        match self.c6.get(i) {
            Some(&c) => c,
            None => dna::context_at(&self.x, i, HEXAMER),
        }
    }

    /// The code of the trimer ending at base `i`.
    #[inline]
    pub(super) fn c3(&self, i: usize) -> u32 {
        match self.c3.get(i) {
            Some(&c) => c,
            None => dna::context_at(&self.x, i, TRIMER),
        }
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
    /// Prepares coded bases, with every base's contexts tabulated (18 bytes a base: for
    /// training, which reads them over and over).
    pub fn new(seq: &[u8]) -> Prepared {
        Prepared {
            t: seq.len(),
            plus: Oriented::new(seq.to_vec(), false),
            minus: Oriented::new(dna::reverse_complement(seq), false),
        }
    }

    /// Prepares coded bases with their contexts computed as they are read (2 bytes a base:
    /// for decoding long sequences); the potentials are bitwise those of [`Prepared::new`].
    pub fn lean(seq: &[u8]) -> Prepared {
        Prepared {
            t: seq.len(),
            plus: Oriented::new(seq.to_vec(), true),
            minus: Oriented::new(dna::reverse_complement(seq), true),
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
