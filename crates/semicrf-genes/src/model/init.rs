//! Starting weights read off the annotation: the model as a generative semi-Markov model
//! (content as fifth-order Markov chains, signals as position weight matrices, durations
//! as smoothed length densities, transitions as frequencies), which training then refines.
//!
//! Every weight is a log-probability (or a log-odds against uniform bases for the signals),
//! so the starting model already decodes genes, and the L2 penalty of training pulls
//! towards these weights rather than towards zero: where the data say little (a duration
//! that never occurs, a rare k-mer), the weights stay where the counts put them.

use semicrf::Segment;

use crate::data::Strand;
use crate::labels::{C, ExonType, Label, PIECE};

use super::layout::{CODON_POSITIONS, HEXAMER_SLOTS, Model, TRIMER_SLOTS, bin};
use super::potentials::codon_position;
use super::prepared::Prepared;
use super::signals::{Signal, signal_features};

/// Weight of the lower order's estimate in a k-mer's conditional probability, in counts.
const INTERPOLATION: f64 = 8.0;
/// Width of the Gaussian kernel that smooths length densities, in natural log of the length.
pub const LENGTH_BANDWIDTH: f64 = 0.12;
/// The share of the length density spread uniformly over every allowed length.
const LENGTH_FLOOR: f64 = 1e-5;

/// Counts of one content class: hexamers and trimers by their codes.
struct Kmers {
    six: Vec<f64>,
    three: Vec<f64>,
}

impl Kmers {
    fn new() -> Kmers {
        Kmers {
            six: vec![0.0; HEXAMER_SLOTS],
            three: vec![0.0; TRIMER_SLOTS],
        }
    }

    /// The weights of the hexamer table: `ln P(last base | the five before)`, the counts
    /// interpolated with the second-order chain of the trimers; the trimer table stays zero.
    fn log_probabilities(&self) -> Vec<f64> {
        let ctx3 = |c: usize| -> f64 { (0..4).map(|b| self.three[(c << 2) | b]).sum() };
        let p3 = |code: usize| (self.three[code] + 1.0) / (ctx3(code >> 2) + 4.0);
        let mut w = vec![0.25f64.ln(); HEXAMER_SLOTS];
        for ctx in 0..(HEXAMER_SLOTS - 1) / 4 {
            let n: f64 = (0..4).map(|b| self.six[(ctx << 2) | b]).sum();
            for b in 0..4 {
                let code = (ctx << 2) | b;
                let lower = p3(((ctx & 15) << 2) | b);
                let a = INTERPOLATION;
                w[code] = ((self.six[code] + a * lower) / (n + a)).ln();
            }
        }
        w
    }
}

/// Counts of a signal's windows at annotated boundaries: bases by offset.
struct Windows {
    bases: Vec<f64>,
}

/// A length density: `ln` of a Gaussian-kernel estimate in log length of the observed
/// `lengths`, mixed with a uniform floor, over `1..=max` (`allowed` lengths only), averaged
/// over each logarithmic bin.
pub fn log_length_density(lengths: &[usize], max: usize) -> Vec<f64> {
    let nbins = bin(max) + 1;
    if lengths.is_empty() {
        return vec![-(max as f64).ln(); nbins];
    }
    // Density per unit log length at `x = ln d`, then per base: divide by `d`.
    let logs: Vec<f64> = lengths.iter().map(|&d| (d as f64).ln()).collect();
    let h = LENGTH_BANDWIDTH;
    let norm = 1.0 / (logs.len() as f64 * h * (2.0 * std::f64::consts::PI).sqrt());
    let f: Vec<f64> = (1..=max)
        .map(|d| {
            let x = (d as f64).ln();
            let s: f64 = logs
                .iter()
                .map(|&l| (-0.5 * ((x - l) / h).powi(2)).exp())
                .sum();
            s * norm / d as f64
        })
        .collect();
    let total: f64 = f.iter().sum();
    let mut sums = vec![0.0; nbins];
    let mut counts = vec![0usize; nbins];
    for (i, v) in f.iter().enumerate() {
        let b = bin(i + 1);
        sums[b] += (1.0 - LENGTH_FLOOR) * v / total + LENGTH_FLOOR / max as f64;
        counts[b] += 1;
    }
    sums.iter()
        .zip(&counts)
        .map(|(&s, &n)| if n == 0 { 0.0 } else { (s / n as f64).ln() })
        .collect()
}

impl Model {
    /// Sets the weights to the generative estimates of the annotated `examples`
    /// (prepared sequences with their gold segmentations).
    pub fn initialise<'a>(
        &mut self,
        examples: impl IntoIterator<Item = (&'a Prepared, &'a [Segment])>,
    ) {
        let examples: Vec<(&Prepared, &[Segment])> = examples.into_iter().collect();
        self.init_content(&examples);
        self.init_signals(&examples);
        self.init_durations(&examples);
        self.init_transitions(&examples);
    }

    fn init_content(&mut self, examples: &[(&Prepared, &[Segment])]) {
        let mut coding: Vec<Kmers> = (0..CODON_POSITIONS).map(|_| Kmers::new()).collect();
        let (mut intron, mut intergenic) = (Kmers::new(), Kmers::new());
        for &(p, segs) in examples {
            let t_len = p.len();
            for sg in segs {
                for t in sg.start..sg.start + sg.duration {
                    let i = t_len - 1 - t;
                    let count = |k: &mut Kmers, s: Strand| {
                        let (o, pos) = match s {
                            Strand::Plus => (&p.plus, t),
                            Strand::Minus => (&p.minus, i),
                        };
                        k.six[o.c6(pos) as usize] += 1.0;
                        k.three[o.c3(pos) as usize] += 1.0;
                    };
                    match Label::of(sg.label) {
                        Label::Exon(s, _, fr) => {
                            count(&mut coding[codon_position(s, t, fr as usize)], s)
                        }
                        Label::Intron(s, ..) | Label::IntronMore(s, _) => count(&mut intron, s),
                        Label::Intergenic | Label::IntergenicMore => {
                            count(&mut intergenic, Strand::Plus);
                            count(&mut intergenic, Strand::Minus);
                        }
                    }
                }
            }
        }
        let l = self.layout.clone();
        let mut set = |six: usize, three: usize, k: &Kmers, scale: f64| {
            for (q, v) in k.log_probabilities().into_iter().enumerate() {
                self.w[six + q] = scale * v;
            }
            self.w[three..three + TRIMER_SLOTS].fill(0.0);
        };
        for (cp, k) in coding.iter().enumerate() {
            set(
                l.cod6 + cp * HEXAMER_SLOTS,
                l.cod3 + cp * TRIMER_SLOTS,
                k,
                1.0,
            );
        }
        set(l.int6, l.int3, &intron, 1.0);
        // Intergenic bases read both strands' k-mers: each gets half of the log-probability.
        set(l.ig6, l.ig3, &intergenic, 0.5);
    }

    fn init_signals(&mut self, examples: &[(&Prepared, &[Segment])]) {
        let mut windows: Vec<Windows> = Signal::ALL
            .iter()
            .map(|s| Windows {
                bases: vec![0.0; s.weights()],
            })
            .collect();
        for &(p, segs) in examples {
            for sg in segs {
                if !matches!(Label::of(sg.label), Label::Exon(..)) {
                    continue;
                }
                let (first, last) = (sg.start, sg.start + sg.duration - 1);
                let mut take = |w: Option<(Signal, usize)>, s: Strand| {
                    if let Some((sig, a)) = w {
                        let win = &mut windows[sig as usize];
                        let bases = 4 * sig.width();
                        signal_features(sig, &p.strand(s).x, a, |n| {
                            if n < bases {
                                win.bases[n] += 1.0;
                            }
                        });
                    }
                };
                self.for_boundaries(p, first..first + 1, |_, c, b, _, s| {
                    if c == sg.label {
                        take(b, s);
                    }
                });
                self.for_boundaries(p, last..last + 1, |_, c, _, e, s| {
                    if c == sg.label {
                        take(e, s);
                    }
                });
            }
        }
        for (sig, win) in Signal::ALL.iter().zip(&windows) {
            let off = self.layout.sig[*sig as usize];
            let bases = 4 * sig.width();
            let p1 = |n: usize| {
                let at = n - n % 4;
                let seen: f64 = win.bases[at..at + 4].iter().sum();
                (win.bases[n] + 0.5) / (seen + 2.0)
            };
            for n in 0..bases {
                self.w[off + n] = (p1(n) / 0.25).ln();
            }
            // Adjacent pairs start at zero (tried: a first-order chain along the window
            // did no better on held-out genes); training sets them.
            self.w[off + bases..off + sig.weights()].fill(0.0);
        }
    }

    fn init_durations(&mut self, examples: &[(&Prepared, &[Segment])]) {
        let mut exon: Vec<Vec<usize>> = vec![Vec::new(); ExonType::ALL.len()];
        let (mut intron, mut intergenic) = (Vec::new(), Vec::new());
        for &(_, segs) in examples {
            for sg in segs {
                match Label::of(sg.label) {
                    Label::Exon(_, t, _) => exon[t as usize].push(sg.duration),
                    Label::Intron(..) => intron.push(sg.duration),
                    Label::Intergenic => intergenic.push(sg.duration),
                    _ => {}
                }
            }
        }
        let l = self.layout.clone();
        for (t, lengths) in ExonType::ALL.iter().zip(&exon) {
            let w = log_length_density(lengths, l.k);
            for (b, v) in w.into_iter().enumerate() {
                self.w[l.exon_duration_bin(*t, b)] = v;
            }
        }
        for (at, lengths) in [(l.dur_intron, &intron), (l.dur_ig, &intergenic)] {
            for (b, v) in log_length_density(lengths, PIECE).into_iter().enumerate() {
                self.w[at + b] = v;
            }
        }
        self.w[l.more_intron] = 0.0;
        self.w[l.more_ig] = 0.0;
    }

    fn init_transitions(&mut self, examples: &[(&Prepared, &[Segment])]) {
        let mut pairs = vec![0.0; C * C];
        for &(_, segs) in examples {
            for w in segs.windows(2) {
                pairs[w[0].label * C + w[1].label] += 1.0;
            }
        }
        let leaving: Vec<f64> = (0..C)
            .map(|i| pairs[i * C..(i + 1) * C].iter().sum())
            .collect();
        let l = self.layout.clone();
        let n = l.tr_names.len();
        // Per parameter: transitions taken, transitions out of its source labels, its pairs
        // and its distinct source labels.
        let (mut taken, mut out, mut npairs) = (vec![0.0; n], vec![0.0; n], vec![0usize; n]);
        let mut sources: Vec<Vec<usize>> = vec![Vec::new(); n];
        for i in 0..C {
            for j in 0..C {
                if let Some(q) = l.tr_param[i * C + j] {
                    taken[q] += pairs[i * C + j];
                    npairs[q] += 1;
                    if !sources[q].contains(&i) {
                        sources[q].push(i);
                        out[q] += leaving[i];
                    }
                }
            }
        }
        for q in 0..n {
            // The probability of this kind of step from its source, shared by its targets.
            let targets = npairs[q] as f64 / sources[q].len() as f64;
            self.w[l.tr + q] = ((taken[q] + 0.5) / (out[q] + 1.0) / targets).ln();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_densities_sum_to_one_and_fall_away_from_the_data() {
        let lengths = [100, 110, 120, 130, 500];
        let max = 2000;
        let w = log_length_density(&lengths, max);
        let total: f64 = (1..=max).map(|d| w[bin(d)].exp()).sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        // Near the data far above the far tails, and 2 bases at the floor.
        assert!(w[bin(115)] > w[bin(40)] + 5.0);
        assert!(w[bin(115)] > w[bin(1500)] + 5.0);
        assert!((w[bin(2)] - (LENGTH_FLOOR / max as f64).ln()).abs() < 1e-6);
    }
}
