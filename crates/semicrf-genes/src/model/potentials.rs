//! The potentials of a sequence, computed from the weights, and their adjoint: the map from
//! a gradient with respect to the potentials to the gradient with respect to the weights.
//!
//! The two are written by hand side by side: `for_scores` and `pull_back`'s content loop
//! read the same contexts, and `for_boundaries` serves both. A unit test checks the adjoint
//! against central finite differences of the potentials.

use std::ops::Range;

use ndarray::{Array1, Array2, Array3, ArrayView2, ArrayViewMut2, Axis};
use semicrf::Scalar;

use crate::data::Strand;
use crate::dna;
use crate::labels::{C, ExonType, Label};

use super::layout::{CODON_POSITIONS, HEXAMER_SLOTS, Model, TRIMER_SLOTS};
use super::prepared::{Oriented, Prepared};
use super::signals::{Signal, reading_begin, reading_end, signal_features};

/// A forbidden potential.
pub(super) const NEG: f64 = f64::NEG_INFINITY;

/// The codon position of a stop codon's last base: a base there that ends a stop codon is
/// forbidden to every exon label of that frame.
const STOP_END: usize = CODON_POSITIONS - 1;

/// The shared parameters of the potentials, in element type `F`.
pub struct Shared<F> {
    /// `(C, C)`.
    pub transition: Array2<F>,
    /// `(K, C)`.
    pub duration: Array2<F>,
    /// `(C)`.
    pub start: Array1<F>,
    /// `(C)`.
    pub end: Array1<F>,
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

/// The frame, seen from the reverse complement of a sequence of `t` bases, of a minus-strand
/// exon label of frame `f` (in the sequence's own coordinates).
fn minus_frame(t: usize, f: usize) -> usize {
    ((t - 1) % 3 + 3 - f) % 3
}

/// The codon position at base `t` (of the sequence) of an exon of frame `fr` on strand `s`.
pub(super) fn codon_position(s: Strand, t: usize, fr: usize) -> usize {
    match s {
        Strand::Plus => (t + 3 - fr) % 3,
        Strand::Minus => (fr + 3 - t % 3) % 3,
    }
}

/// Whether the base at `pos` of `o` (reading order) ends a stop codon.
fn ends_stop(o: &Oriented, pos: usize) -> bool {
    pos >= 2 && dna::is_stop(&o.x, pos - 2)
}

impl Model {
    /// The score of a window of `s` at `anchor` of `x`.
    fn signal(&self, s: Signal, x: &[u8], anchor: usize) -> f64 {
        let off = self.layout.sig[s as usize];
        let mut acc = 0.0;
        signal_features(s, x, anchor, |n| acc += self.w[off + n]);
        acc
    }

    /// Calls `f(t, c, value)` for every content score of the bases `rows`, `value` `-inf` for
    /// a forbidden one. Its adjoint is the content loop of [`Model::pull_back`].
    pub(super) fn for_scores(
        &self,
        p: &Prepared,
        rows: Range<usize>,
        mut f: impl FnMut(usize, usize, f64),
    ) {
        let l = &self.layout;
        let t_len = p.t;
        for t in rows {
            let i = t_len - 1 - t;
            // Each strand's contexts at this base, read once; `content(s, start6, start3)`:
            // strand `s`'s weights in the hexamer table at `start6` and the trimer table at
            // `start3`.
            let ctx = [(p.plus.c6(t), p.plus.c3(t)), (p.minus.c6(i), p.minus.c3(i))];
            let content = |s: usize, start6: usize, start3: usize| {
                self.w[start6 + ctx[s].0 as usize] + self.w[start3 + ctx[s].1 as usize]
            };
            let ig = content(0, l.ig6, l.ig3) + content(1, l.ig6, l.ig3);
            f(t, Label::Intergenic.index(), ig);
            f(t, Label::IntergenicMore.index(), ig);
            for (si, (s, o, pos)) in [(Strand::Plus, &p.plus, t), (Strand::Minus, &p.minus, i)]
                .into_iter()
                .enumerate()
            {
                let intr = content(si, l.int6, l.int3);
                for a in 0..3u8 {
                    for b in 0..3u8 {
                        f(t, Label::Intron(s, a, b).index(), intr);
                    }
                    f(t, Label::IntronMore(s, a).index(), intr);
                }
                let stop_ends_here = ends_stop(o, pos);
                for fr in 0..3usize {
                    let cp = codon_position(s, t, fr);
                    let v = if cp == STOP_END && stop_ends_here {
                        NEG
                    } else {
                        content(si, l.cod6 + cp * HEXAMER_SLOTS, l.cod3 + cp * TRIMER_SLOTS)
                    };
                    for ty in ExonType::ALL {
                        f(t, Label::Exon(s, ty, fr as u8).index(), v);
                    }
                }
            }
        }
    }

    /// Calls `f(t, c, begin, end, strand)` for every exon label's boundaries at the bases
    /// `rows`, as `(signal, anchor)` on that strand's reading order or `None` for `-inf`.
    #[allow(clippy::type_complexity)]
    pub(super) fn for_boundaries(
        &self,
        p: &Prepared,
        rows: Range<usize>,
        mut f: impl FnMut(usize, usize, Option<(Signal, usize)>, Option<(Signal, usize)>, Strand),
    ) {
        let t_len = p.t;
        for t in rows {
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
                    // A minus-strand exon begins (in `S`) where its reading ends.
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

    /// The shared parameters of every sequence's potentials.
    pub fn shared<F: Scalar>(&self) -> Shared<F> {
        let lift = F::from_f64_lossy;
        let l = &self.layout;
        let transition = Array2::from_shape_fn((C, C), |(i, j)| {
            lift(l.transition_param(i, j).map_or(NEG, |n| self.w[n]))
        });
        let duration = Array2::from_shape_fn((l.k, C), |(d, c)| {
            lift(
                l.duration_param(Label::of(c), d + 1)
                    .map_or(NEG, |n| self.w[n]),
            )
        });
        // Every sequence begins with an intergenic first piece and ends with intergenic
        // sequence.
        let start = Array1::from_shape_fn(C, |c| {
            lift(if c == Label::Intergenic.index() {
                0.0
            } else {
                NEG
            })
        });
        let end = Array1::from_shape_fn(C, |c| {
            lift(match Label::of(c) {
                Label::Intergenic | Label::IntergenicMore => 0.0,
                _ => NEG,
            })
        });
        Shared {
            transition,
            duration,
            start,
            end,
        }
    }

    /// Calls `f(t, c, begin, end)` with every exon label's boundary potentials at the bases
    /// `rows` (`-inf` without a signal): [`Model::for_boundaries`] with each window scored
    /// once per base (the frames of a type, and the types that share a signal, read the same
    /// window).
    pub(super) fn for_boundary_values(
        &self,
        p: &Prepared,
        rows: Range<usize>,
        mut f: impl FnMut(usize, usize, f64, f64),
    ) {
        // The windows scored at base `at`: (strand, signal, anchor, score).
        let mut memo: Vec<(Strand, Signal, usize, f64)> = Vec::with_capacity(8);
        let mut at = usize::MAX;
        self.for_boundaries(p, rows, |t, c, b, e, s| {
            if t != at {
                memo.clear();
                at = t;
            }
            let mut score = |w: Option<(Signal, usize)>| match w {
                None => NEG,
                Some((sig, a)) => match memo.iter().find(|m| (m.0, m.1, m.2) == (s, sig, a)) {
                    Some(m) => m.3,
                    None => {
                        let v = self.signal(sig, &p.strand(s).x, a);
                        memo.push((s, sig, a, v));
                        v
                    }
                },
            };
            let begin = score(b);
            let end = score(e);
            f(t, c, begin, end);
        });
    }

    /// The potentials of a prepared sequence.
    pub fn potentials<F: Scalar>(&self, p: &Prepared) -> Potentials<F> {
        let t_len = p.len();
        let mut scores = Array3::<F>::zeros((1, t_len, C));
        let mut bb = Array3::<F>::zeros((1, t_len, C));
        let mut eb = Array3::<F>::zeros((1, t_len, C));
        self.fill_rows(
            p,
            scores.index_axis_mut(Axis(0), 0),
            bb.index_axis_mut(Axis(0), 0),
            eb.index_axis_mut(Axis(0), 0),
        );
        let Shared {
            transition,
            duration,
            start,
            end,
        } = self.shared();
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

    /// Writes the content scores and the begin and end boundaries of a prepared sequence
    /// into the first `T` rows of `(T', C)` arrays (`T' ≥ T`; rows past `T` are left as
    /// they are): one sequence of a padded batch, or [`Model::potentials`]'s only one.
    pub fn fill_rows<F: Scalar>(
        &self,
        p: &Prepared,
        mut scores: ArrayViewMut2<'_, F>,
        mut begin: ArrayViewMut2<'_, F>,
        mut end: ArrayViewMut2<'_, F>,
    ) {
        let t_len = p.len();
        let lift = F::from_f64_lossy;
        self.for_scores(p, 0..t_len, |t, c, v| scores[[t, c]] = lift(v));
        self.for_boundary_values(p, 0..t_len, |t, c, b, e| {
            begin[[t, c]] = lift(b);
            end[[t, c]] = lift(e);
        });
    }

    /// Adds to `out` the gradient of a loss with respect to the weights, given its gradient
    /// with respect to the potentials (`(T, C)` for content and boundaries; `(C, C)`
    /// transition; `(K, C)` duration). Entries at `-inf` potentials are ignored: no weight
    /// moves them, and the engine's gradient there is zero only up to rounding.
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
            let g = row[Label::Intergenic.index()] + row[Label::IntergenicMore.index()];
            if g != 0.0 {
                out[l.ig6 + p.plus.c6(t) as usize] += g;
                out[l.ig3 + p.plus.c3(t) as usize] += g;
                out[l.ig6 + p.minus.c6(i) as usize] += g;
                out[l.ig3 + p.minus.c3(i) as usize] += g;
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
                    out[l.int6 + o.c6(pos) as usize] += g;
                    out[l.int3 + o.c3(pos) as usize] += g;
                }
                let stop_ends_here = ends_stop(o, pos);
                for fr in 0..3usize {
                    let cp = codon_position(s, t, fr);
                    if cp == STOP_END && stop_ends_here {
                        // `-inf` for every exon label of this frame (see `for_scores`).
                        continue;
                    }
                    let g: f64 = ExonType::ALL
                        .iter()
                        .map(|&ty| row[Label::Exon(s, ty, fr as u8).index()])
                        .sum();
                    if g != 0.0 {
                        out[l.cod6 + cp * HEXAMER_SLOTS + o.c6(pos) as usize] += g;
                        out[l.cod3 + cp * TRIMER_SLOTS + o.c3(pos) as usize] += g;
                    }
                }
            }
        }
        self.for_boundaries(p, 0..t_len, |t, c, b, e, s| {
            let x = &p.strand(s).x;
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
                if let Some(n) = l.transition_param(i, j) {
                    out[n] += d_tr[[i, j]];
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

#[cfg(test)]
mod tests {
    use ndarray::Array2;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::labels::PIECE;

    /// Random bases with about one `N` in fifty: every signal's consensus occurs many times
    /// on both strands, and unknown contexts occur too.
    fn sequence(rng: &mut ChaCha8Rng, t: usize) -> Vec<u8> {
        (0..t)
            .map(|_| {
                if rng.random_bool(0.02) {
                    dna::OTHER
                } else {
                    rng.random_range(0..4)
                }
            })
            .collect()
    }

    fn uniform(rng: &mut ChaCha8Rng, shape: (usize, usize)) -> Array2<f64> {
        Array2::from_shape_simple_fn(shape, || rng.random_range(-1.0..1.0))
    }

    /// Every potential of `p` as `(tensor, its upstream gradient)` pairs, flattened.
    fn pairs(p: &Potentials<f64>, g: &[Array2<f64>; 5]) -> Vec<(f64, f64)> {
        let parts = [
            p.scores.as_slice(),
            p.begin_boundary.as_slice(),
            p.end_boundary.as_slice(),
            p.transition.as_slice(),
            p.duration.as_slice(),
        ];
        parts
            .into_iter()
            .zip(g)
            .flat_map(|(v, g)| {
                let v = v.expect("potentials in standard layout");
                assert_eq!(v.len(), g.len());
                v.iter().copied().zip(g.iter().copied())
            })
            .collect()
    }

    /// `<g, (P(w + h e_i) - P(w - h e_i)) / 2h>` over the finite potentials (a `-inf` one is
    /// `-inf` whatever the weights).
    fn central_difference(
        model: &Model,
        p: &Prepared,
        g: &[Array2<f64>; 5],
        i: usize,
        h: f64,
    ) -> f64 {
        let mut m = model.clone();
        m.w[i] = model.w[i] + h;
        let up = m.potentials::<f64>(p);
        m.w[i] = model.w[i] - h;
        let down = m.potentials::<f64>(p);
        let (up, down) = (pairs(&up, g), pairs(&down, g));
        let mut sum = 0.0;
        for (&(u, g), &(d, _)) in up.iter().zip(&down) {
            assert_eq!(
                u.is_finite(),
                d.is_finite(),
                "weight {i} moved a -inf potential"
            );
            if u.is_finite() {
                sum += g * (u - d);
            }
        }
        sum / (2.0 * h)
    }

    #[test]
    fn the_adjoint_matches_central_differences_of_the_potentials_in_every_table() {
        let mut rng = ChaCha8Rng::seed_from_u64(25);
        let t_len = 400;
        // Longer than a continuation piece, so that continuation durations are allowed.
        let k = PIECE + 30;
        let mut model = Model::new(k);
        for w in model.w.iter_mut() {
            *w = rng.random_range(-1.0..1.0);
        }
        let p = Prepared::new(&sequence(&mut rng, t_len));
        // Random upstream gradients, `-inf` potentials included, except the content scores
        // that are `-inf` (the adjoint expects zero there).
        let mut d_scores = uniform(&mut rng, (t_len, C));
        let forbidden = model.potentials::<f64>(&p).scores;
        d_scores.zip_mut_with(&forbidden.slice(ndarray::s![0, .., ..]), |g, &v| {
            if v == NEG {
                *g = 0.0;
            }
        });
        let g = [
            d_scores,
            uniform(&mut rng, (t_len, C)),
            uniform(&mut rng, (t_len, C)),
            uniform(&mut rng, (C, C)),
            uniform(&mut rng, (k, C)),
        ];
        let mut adjoint = vec![0.0; model.layout.total];
        model.pull_back(
            &p,
            g[0].view(),
            g[1].view(),
            g[2].view(),
            g[3].view(),
            g[4].view(),
            &mut adjoint,
        );
        // The potentials are linear in the weights, so the central difference is exact up
        // to rounding at any step; a step of 1/4 keeps the rounding small.
        let h = 0.25;
        for (name, start, len) in model.layout.tables() {
            // In a k-mer table, the contexts the sequence holds (most codes do not occur), its
            // unknown slot and two random codes; elsewhere every weight or a random dozen.
            let mut sample: Vec<usize> = if len == HEXAMER_SLOTS || len == TRIMER_SLOTS {
                let mut s: Vec<usize> = (0..6)
                    .map(|_| {
                        let o = [&p.plus, &p.minus][rng.random_range(0..2)];
                        let at = rng.random_range(0..t_len);
                        (if len == HEXAMER_SLOTS {
                            o.c6(at)
                        } else {
                            o.c3(at)
                        }) as usize
                    })
                    .collect();
                s.push(len - 1);
                s.extend((0..2).map(|_| rng.random_range(0..len)));
                s
            } else if len <= 12 {
                (0..len).collect()
            } else {
                (0..12).map(|_| rng.random_range(0..len)).collect()
            };
            sample.sort_unstable();
            sample.dedup();
            let mut moved = 0;
            for o in sample {
                let i = start + o;
                let fd = central_difference(&model, &p, &g, i, h);
                assert!(
                    (fd - adjoint[i]).abs() <= 1e-9 * (1.0 + fd.abs()),
                    "{name}, weight {o} (index {i}): adjoint {} vs central difference {fd}",
                    adjoint[i]
                );
                moved += usize::from(fd != 0.0);
            }
            assert!(moved > 0, "{name}: no sampled weight moves a potential");
        }
    }

    #[test]
    fn gradients_at_minus_inf_content_scores_move_no_weight() {
        let mut rng = ChaCha8Rng::seed_from_u64(27);
        let t_len = 500;
        let model = Model::new(PIECE + 30);
        let p = Prepared::new(&sequence(&mut rng, t_len));
        let scores = model.potentials::<f64>(&p).scores;
        // Rounding noise where the content score is `-inf`, zero everywhere else.
        let mut d_scores = Array2::zeros((t_len, C));
        let mut noisy = 0;
        for ((t, c), g) in d_scores.indexed_iter_mut() {
            if scores[[0, t, c]] == NEG {
                *g = rng.random_range(-1e-12..1e-12);
                noisy += 1;
            }
        }
        assert!(noisy > 100, "{noisy} forbidden scores");
        let zeros = |shape| Array2::<f64>::zeros(shape);
        let mut adjoint = vec![0.0; model.layout.total];
        model.pull_back(
            &p,
            d_scores.view(),
            zeros((t_len, C)).view(),
            zeros((t_len, C)).view(),
            zeros((C, C)).view(),
            zeros((PIECE + 30, C)).view(),
            &mut adjoint,
        );
        let moved: Vec<usize> = (0..adjoint.len()).filter(|&i| adjoint[i] != 0.0).collect();
        assert!(moved.is_empty(), "weights {moved:?} moved");
    }

    #[test]
    fn content_scores_are_minus_inf_exactly_at_the_last_base_of_every_in_frame_stop_codon() {
        let mut rng = ChaCha8Rng::seed_from_u64(26);
        let t_len = 600;
        let x = sequence(&mut rng, t_len);
        let model = Model::new(PIECE + 30);
        let scores = model.potentials::<f64>(&Prepared::new(&x)).scores;
        // Translated by hand: a plus-strand exon of frame `f` reads codons from the bases
        // `p ≡ f (mod 3)`, and a stop codon `TAA`, `TAG` or `TGA` there forbids its last base
        // `p + 2`; a minus-strand exon of frame `f` reads codons whose leftmost base is
        // `p ≡ f + 1 (mod 3)` (its last base in reading order), and there the stop codon
        // reads `TTA`, `CTA` or `TCA` from the left.
        let (plus_stops, minus_stops) = (["TAA", "TAG", "TGA"], ["TTA", "CTA", "TCA"]);
        let mut expected = vec![false; t_len * C];
        for p in 0..t_len - 2 {
            let codon: String = x[p..p + 3]
                .iter()
                .map(|&b| dna::LETTERS[b as usize] as char)
                .collect();
            for ty in ExonType::ALL {
                if plus_stops.contains(&codon.as_str()) {
                    let c = Label::Exon(Strand::Plus, ty, (p % 3) as u8).index();
                    expected[(p + 2) * C + c] = true;
                }
                if minus_stops.contains(&codon.as_str()) {
                    let c = Label::Exon(Strand::Minus, ty, ((p + 2) % 3) as u8).index();
                    expected[p * C + c] = true;
                }
            }
        }
        let mut forbidden = 0;
        for t in 0..t_len {
            for c in 0..C {
                let v = scores[[0, t, c]];
                assert_eq!(
                    v == NEG,
                    expected[t * C + c],
                    "base {t}, label {}",
                    Label::of(c).name()
                );
                assert!(v == NEG || v.is_finite());
                forbidden += usize::from(v == NEG);
            }
        }
        assert!(forbidden > 100, "{forbidden} forbidden scores");
    }
}
