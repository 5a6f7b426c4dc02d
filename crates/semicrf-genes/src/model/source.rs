//! The potentials of a sequence as a [`PotentialSource`]: each chunk of rows computed from the
//! prepared sequence when the engine asks for it, so that no `(T, C)` array exists. The values
//! are those of [`Model::potentials`], from the same loops ([`Model::for_scores`],
//! [`Model::for_boundaries`]) restricted to the rows asked.

use semicrf::{PotentialSource, Result, Scalar, SourceRows};

use crate::labels::C;

use super::layout::Model;
use super::prepared::Prepared;

/// One prepared sequence's position-wise potentials, computed on demand.
pub struct Source<'a> {
    model: &'a Model,
    prepared: &'a Prepared,
    lengths: [usize; 1],
}

impl<'a> Source<'a> {
    /// The source of `prepared`'s potentials under `model` (a batch of one).
    pub fn new(model: &'a Model, prepared: &'a Prepared) -> Self {
        Source {
            model,
            prepared,
            lengths: [prepared.len()],
        }
    }
}

impl<F: Scalar> PotentialSource<F> for Source<'_> {
    fn lengths(&self) -> &[usize] {
        &self.lengths
    }
    fn labels(&self) -> usize {
        C
    }
    fn has_begin_boundary(&self) -> bool {
        true
    }
    fn has_end_boundary(&self) -> bool {
        true
    }
    fn fill(&self, _sequence: usize, t0: usize, rows: SourceRows<'_, F>) -> Result<()> {
        let (m, p) = (self.model, self.prepared);
        let lift = F::from_f64_lossy;
        let n = rows.scores.len() / C;
        let scores = rows.scores;
        scores.fill(F::zero());
        m.for_scores(p, t0..t0 + n, |t, c, v| scores[(t - t0) * C + c] = lift(v));
        if let (Some(bb), Some(eb)) = (rows.begin_boundary, rows.end_boundary) {
            bb.fill(F::zero());
            eb.fill(F::zero());
            m.for_boundary_values(p, t0..t0 + n, |t, c, b, e| {
                bb[(t - t0) * C + c] = lift(b);
                eb[(t - t0) * C + c] = lift(e);
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use semicrf::{Problem, StreamedPotentials};

    use super::*;
    use crate::labels::PIECE;
    use crate::model::engine;

    fn model_and_sequence(seed: u64, t: usize) -> (Model, Prepared) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut model = Model::new(PIECE + 30);
        for w in model.w.iter_mut() {
            *w = rng.random_range(-1.0..1.0);
        }
        let x: Vec<u8> = (0..t)
            .map(|_| {
                if rng.random_bool(0.02) {
                    crate::dna::OTHER
                } else {
                    rng.random_range(0..4)
                }
            })
            .collect();
        (model, Prepared::new(&x))
    }

    #[test]
    fn the_source_gives_the_materialised_potentials_bitwise_for_any_chunk() {
        let (model, p) = model_and_sequence(31, 500);
        let want = model.potentials::<f32>(&p);
        let src = Source::new(&model, &p);
        for n in [1, 7, 64, 500] {
            let (mut s, mut b, mut e) = (vec![1.0f32; n * C], vec![1.0; n * C], vec![1.0; n * C]);
            for t0 in (0..500 - n + 1).step_by(n.max(37)) {
                let rows = SourceRows::new(&mut s, Some(&mut b), Some(&mut e));
                src.fill(0, t0, rows).unwrap();
                for (got, arr) in [
                    (&s, &want.scores),
                    (&b, &want.begin_boundary),
                    (&e, &want.end_boundary),
                ] {
                    let arr = arr.as_slice().unwrap();
                    let w = &arr[t0 * C..(t0 + n) * C];
                    assert!(
                        got.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "chunk {n} at {t0}"
                    );
                }
            }
        }
    }

    #[test]
    fn lean_and_tabulated_contexts_give_the_same_potentials_bitwise() {
        let (model, p) = model_and_sequence(33, 700);
        let x = p.strand(crate::data::Strand::Plus).x.clone();
        let lean = Prepared::lean(&x);
        let (a, b) = (model.potentials::<f64>(&p), model.potentials::<f64>(&lean));
        for (u, v) in [
            (&a.scores, &b.scores),
            (&a.begin_boundary, &b.begin_boundary),
            (&a.end_boundary, &b.end_boundary),
        ] {
            assert!(
                u.iter()
                    .zip(v.iter())
                    .all(|(u, v)| u.to_bits() == v.to_bits())
            );
        }
    }

    #[test]
    fn decoding_from_the_source_gives_the_segments_of_the_materialised_potentials() {
        for seed in 0..3 {
            let (model, p) = model_and_sequence(40 + seed, 3000);
            let arrays = model.potentials::<f32>(&p);
            let problem: Problem<f32> = arrays.view().unwrap().into();
            let crf = engine(1 << 30);
            let want = crf.viterbi(&problem).unwrap();
            let shared = model.shared::<f32>();
            let src = Source::new(&model, &p);
            let streamed = StreamedPotentials::builder(&src, shared.duration.nrows())
                .transition(shared.transition.view())
                .duration(shared.duration.view())
                .start(shared.start.view())
                .end(shared.end.view())
                .build()
                .unwrap();
            assert_eq!(
                crf.viterbi_streamed(&streamed).unwrap(),
                want,
                "seed {seed}"
            );
        }
    }
}
