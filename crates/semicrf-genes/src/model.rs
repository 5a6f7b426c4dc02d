//! The gene model's parameters and the semi-CRF potentials they define, with the adjoint
//! that maps gradients of the potentials back onto the parameters.
//!
//! Every potential is a sum of learned weights (the model is linear in them):
//!
//! - **content** (`scores`): coding bases score the hexamer and the trimer that end at them,
//!   per codon position, read on their own strand; intron bases the same without codon
//!   position; intergenic bases both strands' hexamers and trimers (intergenic sequence has
//!   no strand). A base that ends an in-frame stop codon is `-inf` for every exon label of
//!   that frame, so no exon holds an in-frame stop (and the engine's windows stop there).
//! - **signals** (`begin_boundary`, `end_boundary`): start codon, splice acceptor, splice
//!   donor and stop codon windows score one weight per (offset, base) and per (offset,
//!   dinucleotide); a boundary without its consensus (`ATG`, `AG`, `GT`/`GC`, a stop codon
//!   in frame) is `-inf`.
//! - **durations**: one table per exon type, for intron first pieces and for intergenic
//!   first pieces, on logarithmic bins; one weight for each continuation piece.
//! - **transitions**: one weight per pair of label kinds (frames share it); `-inf` for what
//!   the gene structure forbids.

use ndarray::{Array1, Array2, Array3, ArrayView2};
use semicrf::Scalar;
use semicrf::Segment;

use crate::data::{Gene, Strand};
use crate::dna::{self, OTHER};
use crate::labels::{C, ExonType, Label, PIECE};

const NEG: f64 = f64::NEG_INFINITY;
const H6: usize = 4097;
const H3: usize = 65;

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
    fn width(self) -> usize {
        let (lo, hi) = self.window();
        (hi - lo + 1) as usize
    }
    /// Weights of its window: 4 per offset, 16 per adjacent pair.
    fn weights(self) -> usize {
        4 * self.width() + 16 * (self.width() - 1)
    }
    /// A short name.
    pub fn name(self) -> &'static str {
        ["start", "acceptor", "donor", "stop"][self as usize]
    }
}

/// Where each group of weights lives in the flat parameter vector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Longest exon, `K`.
    pub k: usize,
    cod6: usize,
    cod3: usize,
    int6: usize,
    int3: usize,
    ig6: usize,
    ig3: usize,
    sig: [usize; 4],
    dur_exon: usize,
    dur_intron: usize,
    dur_ig: usize,
    more_intron: usize,
    more_ig: usize,
    tr: usize,
    /// Bins of a duration table of `K`.
    pub exon_bins: usize,
    piece_bins: usize,
    /// Transition parameter of `(i, j)` (`None`: forbidden).
    tr_param: Vec<Option<usize>>,
    /// Names of the transition parameters.
    pub tr_names: Vec<String>,
    /// Number of weights.
    pub total: usize,
}

/// The logarithmic bin of a duration.
pub fn bin(d: usize) -> usize {
    ((d as f64).ln() / 1.1f64.ln()).round() as usize
}

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
        let cod6 = take(3 * H6);
        let cod3 = take(3 * H3);
        let int6 = take(H6);
        let int3 = take(H3);
        let ig6 = take(H6);
        let ig3 = take(H3);
        let sig = Signal::ALL.map(|s| take(s.weights()));
        let exon_bins = bin(k) + 1;
        let piece_bins = bin(PIECE) + 1;
        let dur_exon = take(4 * exon_bins);
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
            Label::Exon(_, t, _) => self.dur_exon + t as usize * self.exon_bins + bin(d),
            Label::Intron(..) => self.dur_intron + bin(d),
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
}

/// One strand's view of a sequence: its bases in reading order and their contexts.
struct Oriented {
    x: Vec<u8>,
    c6: Vec<u32>,
    c3: Vec<u32>,
}

impl Oriented {
    fn new(x: Vec<u8>) -> Oriented {
        let c6 = dna::contexts(&x, 6);
        let c3 = dna::contexts(&x, 3);
        Oriented { x, c6, c3 }
    }
}

/// A sequence prepared for the model: both strands' contexts.
pub struct Prepared {
    t: usize,
    plus: Oriented,
    minus: Oriented,
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
}

/// Where an exon's boundary sits in its strand's reading order: the signal, its anchor, or
/// `None` when the consensus (or the frame) does not allow a boundary there.
fn reading_begin(x: &[u8], i: usize, t: ExonType, g: usize) -> Option<(Signal, usize)> {
    if t.starts_at_start_codon() {
        (dna::has(x, i as isize, &[0, 3, 2]) && (i + 3 - g).is_multiple_of(3))
            .then_some((Signal::Start, i))
    } else {
        dna::has(x, i as isize - 2, &[0, 2]).then_some((Signal::Acceptor, i))
    }
}

fn reading_end(x: &[u8], i: usize, t: ExonType, g: usize) -> Option<(Signal, usize)> {
    if t.ends_at_stop_codon() {
        (dna::is_stop(x, i + 1) && (i + 1 + 3 - g).is_multiple_of(3))
            .then_some((Signal::Stop, i + 1))
    } else {
        (dna::has(x, i as isize + 1, &[2, 3]) || dna::has(x, i as isize + 1, &[2, 1]))
            .then_some((Signal::Donor, i + 1))
    }
}

/// The weights a signal window reads at `anchor`: `(index, offset)` pairs (offset within
/// the signal's block), skipping bases beyond the sequence or other than `ACGT`.
fn signal_features(s: Signal, x: &[u8], anchor: usize, mut f: impl FnMut(usize)) {
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
            f(4 * o + b);
            if o + 1 < w
                && let Some(b2) = base(o + 1)
            {
                f(4 * w + 16 * o + 4 * b + b2);
            }
        }
    }
}

/// The potentials of one sequence, batch of one, in element type `F`.
pub struct Potentials<F> {
    /// `(1, T, C)`.
    pub scores: Array3<F>,
    /// `(1, T, C)`.
    pub begin_boundary: Array3<F>,
    /// `(1, T, C)`.
    pub end_boundary: Array3<F>,
    /// `(C, C)`.
    pub transition: Array2<F>,
    /// `(K, C)`.
    pub duration: Array2<F>,
    /// `(C)`.
    pub start: Array1<F>,
    /// `(C)`.
    pub end: Array1<F>,
    /// `[T]`.
    pub lengths: [usize; 1],
}

impl<F: Scalar> Potentials<F> {
    /// The library's validated view of these tensors (`K` = `duration`'s first axis).
    pub fn view(&self) -> Result<semicrf::Potentials<'_, F>, semicrf::Error> {
        semicrf::Potentials::builder(self.scores.view(), &self.lengths, self.duration.nrows())
            .transition(self.transition.view())
            .duration(self.duration.view())
            .start(self.start.view())
            .end(self.end.view())
            .begin_boundary(self.begin_boundary.view())
            .end_boundary(self.end_boundary.view())
            .build()
    }
}

/// The engine every gene-model call runs on: streaming, one sequence per call on the
/// calling thread (the callers spread sequences over threads themselves).
pub fn engine(memory_budget: u64) -> semicrf::SemiCrf {
    semicrf::SemiCrf::with_config(
        semicrf::Config::new()
            .backend(semicrf::Backend::Streaming)
            .parallelism(semicrf::Parallelism::Sequential)
            .memory_budget(memory_budget),
    )
}

/// The gene model: a layout and its weights.
#[derive(Clone, Debug)]
pub struct Model {
    /// Where the weights live.
    pub layout: Layout,
    /// The weights.
    pub w: Vec<f64>,
}

/// The exon frame `f` (in `S`) of a label seen from the reverse complement, where its frame
/// is `g`.
fn minus_frame(t: usize, f: usize) -> usize {
    ((t - 1) % 3 + 3 - f) % 3
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

    fn content(&self, o: &Oriented, i: usize, start6: usize, start3: usize) -> f64 {
        self.w[start6 + o.c6[i] as usize] + self.w[start3 + o.c3[i] as usize]
    }

    fn signal(&self, s: Signal, x: &[u8], anchor: usize) -> f64 {
        let off = self.layout.sig[s as usize];
        let mut acc = 0.0;
        signal_features(s, x, anchor, |n| acc += self.w[off + n]);
        acc
    }

    /// Calls `f(t, c, value)` for every content score, `value` `-inf` for a forbidden one.
    fn for_scores(&self, p: &Prepared, mut f: impl FnMut(usize, usize, f64)) {
        let l = &self.layout;
        let t_len = p.t;
        for t in 0..t_len {
            let i = t_len - 1 - t;
            let ig =
                self.content(&p.plus, t, l.ig6, l.ig3) + self.content(&p.minus, i, l.ig6, l.ig3);
            f(t, 0, ig);
            f(t, 1, ig);
            for (s, o, pos) in [(Strand::Plus, &p.plus, t), (Strand::Minus, &p.minus, i)] {
                let intr = self.content(o, pos, l.int6, l.int3);
                for a in 0..3u8 {
                    for b in 0..3u8 {
                        f(t, Label::Intron(s, a, b).index(), intr);
                    }
                    f(t, Label::IntronMore(s, a).index(), intr);
                }
                let stop_ends_here = pos >= 2 && dna::is_stop(&o.x, pos - 2);
                for fr in 0..3usize {
                    let cp = match s {
                        Strand::Plus => (t + 3 - fr) % 3,
                        Strand::Minus => (fr + 3 - t % 3) % 3,
                    };
                    let v = if cp == 2 && stop_ends_here {
                        NEG
                    } else {
                        self.content(o, pos, l.cod6 + cp * H6, l.cod3 + cp * H3)
                    };
                    for ty in ExonType::ALL {
                        f(t, Label::Exon(s, ty, fr as u8).index(), v);
                    }
                }
            }
        }
    }

    /// Calls `f(t, c, begin, end)` for every exon label's boundaries, as `(signal, anchor,
    /// strand)` or `None` for `-inf`.
    #[allow(clippy::type_complexity)]
    fn for_boundaries(
        &self,
        p: &Prepared,
        mut f: impl FnMut(usize, usize, Option<(Signal, usize)>, Option<(Signal, usize)>, Strand),
    ) {
        let t_len = p.t;
        for t in 0..t_len {
            let i = t_len - 1 - t;
            for ty in ExonType::ALL {
                for fr in 0..3usize {
                    let c = Label::Exon(Strand::Plus, ty, fr as u8).index();
                    let x = &p.plus.x;
                    f(
                        t,
                        c,
                        reading_begin(x, t, ty, fr),
                        reading_end(x, t, ty, fr),
                        Strand::Plus,
                    );
                    let c = Label::Exon(Strand::Minus, ty, fr as u8).index();
                    let x = &p.minus.x;
                    let g = minus_frame(t_len, fr);
                    f(
                        t,
                        c,
                        reading_end(x, i, ty, g),
                        reading_begin(x, i, ty, g),
                        Strand::Minus,
                    );
                }
            }
        }
    }

    /// The potentials of a prepared sequence.
    pub fn potentials<F: Scalar>(&self, p: &Prepared) -> Potentials<F> {
        let t_len = p.len();
        let lift = F::from_f64_lossy;
        let mut scores = Array3::<F>::zeros((1, t_len, C));
        self.for_scores(p, |t, c, v| scores[[0, t, c]] = lift(v));
        let mut bb = Array3::<F>::zeros((1, t_len, C));
        let mut eb = Array3::<F>::zeros((1, t_len, C));
        self.for_boundaries(p, |t, c, b, e, s| {
            let x = match s {
                Strand::Plus => &p.plus.x,
                Strand::Minus => &p.minus.x,
            };
            bb[[0, t, c]] = lift(b.map_or(NEG, |(sig, a)| self.signal(sig, x, a)));
            eb[[0, t, c]] = lift(e.map_or(NEG, |(sig, a)| self.signal(sig, x, a)));
        });
        let l = &self.layout;
        let transition = Array2::from_shape_fn((C, C), |(i, j)| {
            lift(l.tr_param[i * C + j].map_or(NEG, |n| self.w[l.tr + n]))
        });
        let duration = Array2::from_shape_fn((l.k, C), |(d, c)| {
            lift(
                l.duration_param(Label::of(c), d + 1)
                    .map_or(NEG, |n| self.w[n]),
            )
        });
        let start = Array1::from_shape_fn(C, |c| lift(if c == 0 { 0.0 } else { NEG }));
        let end = Array1::from_shape_fn(C, |c| lift(if c <= 1 { 0.0 } else { NEG }));
        Potentials {
            scores,
            begin_boundary: bb,
            end_boundary: eb,
            transition,
            duration,
            start,
            end,
            lengths: [t_len],
        }
    }

    /// Adds to `out` the gradient of a loss with respect to the weights, given its gradient
    /// with respect to the potentials (`(T, C)` for content and boundaries; `(C, C)`
    /// transition; `(K, C)` duration). Entries at `-inf` potentials are ignored.
    pub fn pull_back(
        &self,
        p: &Prepared,
        d_scores: ArrayView2<'_, f64>,
        d_begin: ArrayView2<'_, f64>,
        d_end: ArrayView2<'_, f64>,
        d_tr: ArrayView2<'_, f64>,
        d_dur: ArrayView2<'_, f64>,
        out: &mut [f64],
    ) {
        let l = &self.layout;
        let t_len = p.t;
        for t in 0..t_len {
            let i = t_len - 1 - t;
            let row = d_scores.row(t);
            let g = row[0] + row[1];
            if g != 0.0 {
                out[l.ig6 + p.plus.c6[t] as usize] += g;
                out[l.ig3 + p.plus.c3[t] as usize] += g;
                out[l.ig6 + p.minus.c6[i] as usize] += g;
                out[l.ig3 + p.minus.c3[i] as usize] += g;
            }
            for (s, o, pos) in [(Strand::Plus, &p.plus, t), (Strand::Minus, &p.minus, i)] {
                let mut g = 0.0;
                for a in 0..3u8 {
                    for b in 0..3u8 {
                        g += row[Label::Intron(s, a, b).index()];
                    }
                    g += row[Label::IntronMore(s, a).index()];
                }
                if g != 0.0 {
                    out[l.int6 + o.c6[pos] as usize] += g;
                    out[l.int3 + o.c3[pos] as usize] += g;
                }
                for fr in 0..3usize {
                    let cp = match s {
                        Strand::Plus => (t + 3 - fr) % 3,
                        Strand::Minus => (fr + 3 - t % 3) % 3,
                    };
                    let g: f64 = ExonType::ALL
                        .iter()
                        .map(|&ty| row[Label::Exon(s, ty, fr as u8).index()])
                        .sum();
                    if g != 0.0 && g.is_finite() {
                        out[l.cod6 + cp * H6 + o.c6[pos] as usize] += g;
                        out[l.cod3 + cp * H3 + o.c3[pos] as usize] += g;
                    }
                }
            }
        }
        self.for_boundaries(p, |t, c, b, e, s| {
            let x = match s {
                Strand::Plus => &p.plus.x,
                Strand::Minus => &p.minus.x,
            };
            for (sig, g) in [(b, d_begin[[t, c]]), (e, d_end[[t, c]])] {
                if let Some((sig, a)) = sig
                    && g != 0.0
                {
                    let off = l.sig[sig as usize];
                    signal_features(sig, x, a, |n| out[off + n] += g);
                }
            }
        });
        for i in 0..C {
            for j in 0..C {
                if let Some(n) = l.tr_param[i * C + j] {
                    out[l.tr + n] += d_tr[[i, j]];
                }
            }
        }
        for c in 0..C {
            let lab = Label::of(c);
            for d in 1..=l.k {
                if let Some(n) = l.duration_param(lab, d) {
                    out[n] += d_dur[[d - 1, c]];
                }
            }
        }
    }
}

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
