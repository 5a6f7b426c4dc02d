//! Between genes and segmentations: the segmentation that annotates a set of genes, why a
//! segmentation is impossible under the model, and the genes a decoded segmentation holds.

use semicrf::Segment;

use crate::data::{Gene, Strand};
use crate::labels::{ExonType, Label, PIECE};

use super::layout::Model;
use super::potentials::NEG;
use super::prepared::Prepared;

/// The segmentation that annotates `genes` on a sequence of `len` bases, or why there is
/// none (an exon longer than `k`, a gene at the very edge, overlapping genes).
pub fn gold_segments(genes: &[Gene], len: usize, k: usize) -> Result<Vec<Segment>, String> {
    let mut segs = Vec::new();
    let mut at = 0usize;
    let push_run = |segs: &mut Vec<Segment>, from: usize, to: usize, first: Label, more: Label| {
        // `from..to`: a first piece then pieces of exactly PIECE.
        let n = to - from;
        let m = (n - 1) / PIECE;
        let r = n - m * PIECE;
        segs.push(Segment::new(from, r, first.index()));
        for q in 0..m {
            segs.push(Segment::new(from + r + q * PIECE, PIECE, more.index()));
        }
    };
    for g in genes {
        // The exons proper: a stop codon is part of the intergenic run beside its gene.
        let (lo, hi) = (g.exons[0].0, g.exons[g.exons.len() - 1].1);
        if lo <= at || hi + 1 >= len {
            return Err(format!(
                "gene at {}..{} leaves no intergenic base before or after it",
                lo + 1,
                hi + 1
            ));
        }
        push_run(&mut segs, at, lo, Label::Intergenic, Label::IntergenicMore);
        let n = g.exons.len();
        // Frames left to right.
        let mut frames = vec![0usize; n];
        match g.strand {
            Strand::Plus => {
                frames[0] = g.exons[0].0 % 3;
                for k in 1..n {
                    let intron = g.exons[k].0 - g.exons[k - 1].1 - 1;
                    frames[k] = (frames[k - 1] + intron) % 3;
                }
            }
            Strand::Minus => {
                frames[n - 1] = g.exons[n - 1].1 % 3;
                for k in (0..n - 1).rev() {
                    let intron = g.exons[k + 1].0 - g.exons[k].1 - 1;
                    frames[k] = (frames[k + 1] + 3 - intron % 3) % 3;
                }
            }
        }
        for (q, &(a, b)) in g.exons.iter().enumerate() {
            let reading = match g.strand {
                Strand::Plus => q,
                Strand::Minus => n - 1 - q,
            };
            let ty = ExonType::of(reading, n);
            if b - a + 1 > k {
                return Err(format!(
                    "exon {}..{} is longer than the longest exon modelled ({k} bases)",
                    a + 1,
                    b + 1
                ));
            }
            segs.push(Segment::new(
                a,
                b - a + 1,
                Label::Exon(g.strand, ty, frames[q] as u8).index(),
            ));
            if q + 1 < n {
                let (from, to) = (b + 1, g.exons[q + 1].0);
                let first = Label::Intron(g.strand, frames[q] as u8, frames[q + 1] as u8);
                push_run(
                    &mut segs,
                    from,
                    to,
                    first,
                    Label::IntronMore(g.strand, frames[q + 1] as u8),
                );
            }
        }
        at = g.exons[n - 1].1 + 1;
    }
    push_run(&mut segs, at, len, Label::Intergenic, Label::IntergenicMore);
    Ok(segs)
}

/// Why a segmentation is impossible under the model's structure (a segment on a `-inf`
/// potential: an in-frame stop codon inside an exon, a missing splice or start/stop
/// consensus, a forbidden duration or transition), or `None` when it is possible.
pub fn why_impossible(model: &Model, p: &Prepared, segs: &[Segment]) -> Option<String> {
    let pot = model.potentials::<f64>(p);
    let mut prev: Option<usize> = None;
    for sg in segs {
        let (a, d, c) = (sg.start, sg.duration, sg.label);
        let name = Label::of(c).name();
        let at = format!("{name} segment at {}..{}", a + 1, a + d);
        if let Some(t) = (a..a + d).find(|&t| pot.scores[[0, t, c]] == NEG) {
            return Some(format!("{at}: base {} ends an in-frame stop codon", t + 1));
        }
        if pot.begin_boundary[[0, a, c]] == NEG {
            return Some(format!(
                "{at}: no start codon or splice acceptor where it begins"
            ));
        }
        if pot.end_boundary[[0, a + d - 1, c]] == NEG {
            return Some(format!("{at}: no stop codon or splice donor where it ends"));
        }
        if d > model.layout.k || pot.duration[[d - 1, c]] == NEG {
            return Some(format!("{at}: duration {d} not allowed"));
        }
        match prev {
            None if pot.start[c] == NEG => return Some(format!("{at}: cannot begin a sequence")),
            Some(i) if pot.transition[[i, c]] == NEG => {
                return Some(format!("{at}: cannot follow {}", Label::of(i).name()));
            }
            _ => {}
        }
        prev = Some(c);
    }
    match prev {
        Some(c) if pot.end[c] == NEG => {
            Some(format!("{} cannot end a sequence", Label::of(c).name()))
        }
        _ => None,
    }
}

/// The genes of a segmentation (the inverse of [`gold_segments`]).
pub fn genes_of(segments: &[Segment]) -> Vec<Gene> {
    let mut genes = Vec::new();
    let mut cur: Option<Gene> = None;
    for s in segments {
        match Label::of(s.label) {
            Label::Exon(strand, ..) => {
                let g = cur.get_or_insert_with(|| Gene {
                    strand,
                    exons: Vec::new(),
                });
                g.exons.push((s.start, s.start + s.duration - 1));
            }
            Label::Intergenic | Label::IntergenicMore => {
                if let Some(g) = cur.take() {
                    genes.push(g);
                }
            }
            _ => {}
        }
    }
    genes.extend(cur);
    genes
}
