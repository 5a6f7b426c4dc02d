//! Accuracy as gene finders report it: exon level (an exon counts only when both ends and
//! the strand match exactly, the terminal exon including its stop codon), coding-nucleotide
//! level, and gene level (every exon of the gene exactly right).

use std::collections::{HashMap, HashSet};

use crate::data::{Gene, Record, Strand};

/// True positives against the annotated and the predicted totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Predicted and annotated.
    pub tp: usize,
    /// Annotated.
    pub annotated: usize,
    /// Predicted.
    pub predicted: usize,
}

impl Counts {
    /// Sensitivity, `tp / annotated` (the field's name for recall).
    pub fn sensitivity(&self) -> f64 {
        ratio(self.tp, self.annotated)
    }
    /// Specificity, `tp / predicted` (the field's name for precision).
    pub fn specificity(&self) -> f64 {
        ratio(self.tp, self.predicted)
    }
    /// Harmonic mean of the two.
    pub fn f1(&self) -> f64 {
        let (a, b) = (self.sensitivity(), self.specificity());
        if a + b == 0.0 {
            0.0
        } else {
            2.0 * a * b / (a + b)
        }
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The three levels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Exon level.
    pub exon: Counts,
    /// Coding-nucleotide level (strand-aware).
    pub nucleotide: Counts,
    /// Gene level.
    pub gene: Counts,
}

/// One gene as scored: its sequence, strand and exons with the stop codon included.
pub type Scored = (String, Strand, Vec<(usize, usize)>);

/// Genes of records (or predictions) in the scored form.
pub fn scored<'a>(genes: impl IntoIterator<Item = (&'a str, &'a Gene)>) -> Vec<Scored> {
    genes
        .into_iter()
        .map(|(n, g)| (n.to_string(), g.strand, g.exons_with_stop()))
        .collect()
}

/// Compares predicted genes with annotated ones.
pub fn compare(annotated: &[Scored], predicted: &[Scored]) -> Metrics {
    fn exons(genes: &[Scored]) -> HashSet<(&str, Strand, usize, usize)> {
        genes
            .iter()
            .flat_map(|(n, s, e)| e.iter().map(move |&(a, b)| (n.as_str(), *s, a, b)))
            .collect()
    }
    let (ea, ep) = (exons(annotated), exons(predicted));
    let bases = |genes: &[Scored]| -> HashMap<(String, Strand), HashSet<usize>> {
        let mut m: HashMap<(String, Strand), HashSet<usize>> = HashMap::new();
        for (n, s, e) in genes {
            let set = m.entry((n.clone(), *s)).or_default();
            for &(a, b) in e {
                set.extend(a..=b);
            }
        }
        m
    };
    let (ba, bp) = (bases(annotated), bases(predicted));
    let size = |m: &HashMap<(String, Strand), HashSet<usize>>| m.values().map(|s| s.len()).sum();
    let nuc_tp = ba
        .iter()
        .map(|(k, s)| bp.get(k).map_or(0, |p| s.intersection(p).count()))
        .sum();
    let ga: HashSet<&Scored> = annotated.iter().collect();
    let gene_tp = predicted.iter().filter(|g| ga.contains(g)).count();
    Metrics {
        exon: Counts {
            tp: ea.intersection(&ep).count(),
            annotated: ea.len(),
            predicted: ep.len(),
        },
        nucleotide: Counts {
            tp: nuc_tp,
            annotated: size(&ba),
            predicted: size(&bp),
        },
        gene: Counts {
            tp: gene_tp,
            annotated: annotated.len(),
            predicted: predicted.len(),
        },
    }
}

/// Compares predictions (per record name) with the records' annotations.
pub fn evaluate(records: &[Record], predicted: &[(String, Vec<Gene>)]) -> Metrics {
    let a = scored(
        records
            .iter()
            .flat_map(|r| r.genes.iter().map(move |g| (r.name.as_str(), g))),
    );
    let p = scored(
        predicted
            .iter()
            .flat_map(|(n, gs)| gs.iter().map(move |g| (n.as_str(), g))),
    );
    compare(&a, &p)
}

impl std::fmt::Display for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (name, c) in [
            ("exon", self.exon),
            ("nucleotide", self.nucleotide),
            ("gene", self.gene),
        ] {
            writeln!(
                f,
                "{name:<10}  sensitivity {:.3}  specificity {:.3}  F1 {:.3}  ({} of {} annotated, {} predicted)",
                c.sensitivity(),
                c.specificity(),
                c.f1(),
                c.tp,
                c.annotated,
                c.predicted
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_ends_and_strand_are_required() {
        let a = vec![("r".to_string(), Strand::Plus, vec![(10, 20), (30, 44)])];
        let p = vec![("r".to_string(), Strand::Plus, vec![(10, 20), (31, 44)])];
        let m = compare(&a, &p);
        assert_eq!((m.exon.tp, m.exon.annotated, m.exon.predicted), (1, 2, 2));
        assert_eq!((m.nucleotide.tp, m.nucleotide.annotated), (25, 26));
        assert_eq!(m.gene.tp, 0);
        let q = vec![("r".to_string(), Strand::Minus, vec![(10, 20), (30, 44)])];
        assert_eq!(compare(&a, &q).exon.tp, 0);
        assert_eq!(compare(&a, &a).gene.f1(), 1.0);
    }
}
