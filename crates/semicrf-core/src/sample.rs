//! Exact samples from the posterior over segmentations: forward filtering, backward sampling
//! (model §12).
//!
//! An engine runs its forward pass and exposes the forward values of one sequence block by
//! block through [`ForwardBlocks`]; [`sample_sequence`] draws every sample from them, going
//! down from the end of the sequence. The sampling itself is written once, here, for every
//! engine: an engine only says how it restores a block of forward values (from a full table,
//! or from checkpoints) and how a segment's weight is read off them.
//!
//! **Reproducibility.** Sample `i` of sequence `b` draws its uniforms from its own generator,
//! [`sample_rng`]`(seed, b, i)` (ChaCha8 keyed by the three numbers), so a sample depends on
//! the seed, its sequence's potentials and its indices only: the same samples for the same
//! seed whatever the number of threads, the batch the sequence is in, or how many samples are
//! drawn after it.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Engine, Error, Problem, Result, Scalar, Segment};

/// Samples of a batch: `samples[b][i]` is the `i`-th segmentation drawn for sequence `b`,
/// its segments in order.
pub type Samples = Vec<Vec<Vec<Segment>>>;

/// The forward values of one sequence, as backward sampling reads them.
///
/// A segment *ends at* `t` when its last position is `t - 1`. Positions are grouped in
/// blocks of [`ForwardBlocks::interval`] `Δ` segment ends: block `m` holds the ends
/// `t` in `(mΔ, min((m+1)Δ, L)]`, and after [`ForwardBlocks::load`]`(m)` the weights of every
/// segment that ends in block `m` can be read. [`sample_sequence`] loads blocks from the last
/// down, each at most once.
///
/// Every weight is a log-weight (`-inf` for what is forbidden) of an item of a `⊕` of the
/// forward recurrence, so that the items of one `⊕` are proportional to the posterior
/// probabilities of the choices they stand for:
///
/// - [`ForwardBlocks::last`]: the label of the last segment, `α_L(j) ⊗ end[j]`;
/// - [`ForwardBlocks::durations`]: the duration of the segment of label `j` that ends at `t`,
///   the items of `α_t(j)`'s `⊕` over `d` (each already summed over the previous label);
/// - [`ForwardBlocks::sources`]: the previous label of that segment once its duration is
///   known.
pub trait ForwardBlocks {
    /// `L`, the length of the sequence.
    fn len(&self) -> usize;
    /// Whether the sequence is empty (never, for a validated problem).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `Δ >= 1`: segment ends per block.
    fn interval(&self) -> usize;
    /// Makes block `m` readable (recomputing it from a checkpoint where needed).
    fn load(&mut self, m: usize) -> Result<()>;
    /// `out[j]`: the log-weight that the last segment has label `j` (`C` values).
    fn last(&mut self, out: &mut Vec<f64>);
    /// `out[d - 1]` for `d = 1..=min(K, t)`: the log-weight that the segment of label `j`
    /// ending at `t` lasts `d` (durations an engine does not store may be left out).
    fn durations(&mut self, t: usize, j: usize, out: &mut Vec<f64>);
    /// `out[i]`: the log-weight that the segment `(s, d, j)`, `s >= 1`, follows a segment of
    /// label `i` (`C` values).
    fn sources(&mut self, s: usize, d: usize, j: usize, out: &mut Vec<f64>);
}

/// The generator of sample `sample` of sequence `sequence` under `seed`: ChaCha8 keyed by
/// the three numbers (little-endian, `seed`, `sequence`, `sample`, then 8 zero bytes).
pub fn sample_rng(seed: u64, sequence: usize, sample: usize) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&(sequence as u64).to_le_bytes());
    key[16..24].copy_from_slice(&(sample as u64).to_le_bytes());
    ChaCha8Rng::from_seed(key)
}

/// The index drawn from the categorical distribution of the log-weights `w` with the uniform
/// `u` in `[0, 1)`: the first `i` whose cumulative weight exceeds `u` times the total
/// (relative to the largest weight, so nothing overflows), or `None` when every weight is
/// `-inf`. Items of weight `-inf` are never drawn.
pub fn draw(w: &[f64], u: f64) -> Option<usize> {
    let m = w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return None;
    }
    let total: f64 = w.iter().map(|&x| (x - m).exp()).sum();
    let target = u * total;
    let mut acc = 0.0;
    let mut last = None;
    for (i, &x) in w.iter().enumerate() {
        if x == f64::NEG_INFINITY {
            continue;
        }
        acc += (x - m).exp();
        last = Some(i);
        if acc > target {
            return last;
        }
    }
    // Rounding left the cumulative sum just below `u · total`: the last possible item.
    last
}

/// A sample in progress: the end of the segment still to draw, its label, the segments
/// drawn (last first) and the generator.
struct Walk {
    t: usize,
    j: usize,
    segments: Vec<Segment>,
    rng: ChaCha8Rng,
}

/// `n` independent samples from the posterior over the segmentations of one sequence (index
/// `sequence` of its batch, which keys the generators): forward filtering (the engine's
/// forward values in `blocks`), backward sampling.
///
/// Each sample draws the label of its last segment, then, going down, the duration of the
/// segment that ends at `t` and the label of the one before it, until a segment starts at 0;
/// each draw is the categorical distribution of the items of one `⊕` of the forward
/// recurrence, so a segmentation `y` is drawn with probability `exp(score(y) - log Z)`.
/// Blocks are loaded from the last down, only where a sample needs one.
///
/// Fails with [`Error::Infeasible`] when no segmentation of the sequence has a finite score
/// (there is no posterior to sample from).
pub fn sample_sequence<B: ForwardBlocks + ?Sized>(
    blocks: &mut B,
    sequence: usize,
    n: usize,
    seed: u64,
) -> Result<Vec<Vec<Segment>>> {
    let len = blocks.len();
    let delta = blocks.interval().max(1);
    let mut w = Vec::new();
    blocks.last(&mut w);
    if w.iter().all(|&x| x == f64::NEG_INFINITY) {
        return Err(Error::Infeasible { sequence });
    }
    let mut walks: Vec<Walk> = (0..n)
        .map(|i| {
            let mut rng = sample_rng(seed, sequence, i);
            let j = draw(&w, rng.random::<f64>()).unwrap_or(0);
            Walk {
                t: len,
                j,
                segments: Vec::new(),
                rng,
            }
        })
        .collect();
    if n == 0 || len == 0 {
        return Ok(walks.into_iter().map(|_| Vec::new()).collect());
    }
    for m in (0..len.div_ceil(delta)).rev() {
        let base = m * delta;
        if !walks.iter().any(|s| s.t > base) {
            continue;
        }
        blocks.load(m)?;
        for walk in walks.iter_mut() {
            while walk.t > base {
                let (t, j) = (walk.t, walk.j);
                blocks.durations(t, j, &mut w);
                let d = 1 + draw(&w, walk.rng.random::<f64>()).ok_or_else(|| broken(t, j))?;
                let s = t - d;
                walk.segments.push(Segment::new(s, d, j));
                walk.t = s;
                if s == 0 {
                    break;
                }
                blocks.sources(s, d, j, &mut w);
                walk.j = draw(&w, walk.rng.random::<f64>()).ok_or_else(|| broken(t, j))?;
            }
        }
    }
    Ok(walks
        .into_iter()
        .map(|mut s| {
            s.segments.reverse();
            s.segments
        })
        .collect())
}

/// A state reached by sampling always has a finite weight, hence some finite item: a
/// violation is a bug of the engine's [`ForwardBlocks`], reported rather than panicking.
fn broken(t: usize, j: usize) -> Error {
    Error::Unsupported {
        backend: "sampler".into(),
        what: format!(
            "a segment of label {j} ending at {t} that was reached with positive \
             probability but has no finite item (inconsistent forward values)"
        ),
    }
}

/// An engine that draws exact samples from the posterior over segmentations.
///
/// ```
/// # mod semicrf { pub use ::ndarray; pub use semicrf_core::*; } // the facade's paths
/// use semicrf::sample::sample_rng;
/// use rand::Rng;
///
/// // The generators are keyed by (seed, sequence, sample): reproducible, independent.
/// let a: f64 = sample_rng(7, 0, 1).random();
/// let b: f64 = sample_rng(7, 0, 1).random();
/// let c: f64 = sample_rng(7, 1, 1).random();
/// assert_eq!(a, b);
/// assert_ne!(a, c);
/// ```
pub trait Sampler<F: Scalar>: Engine<F> {
    /// `n` samples per sequence from the posterior `p(y) = exp(score(y) - log Z_b)`,
    /// reproducible from `seed` ([`sample_rng`]). Fails with [`Error::Infeasible`] naming the
    /// first sequence without a finite segmentation, and with [`Error::Magnitude`] where
    /// probabilities would not be accurate (as gradients would).
    fn sample(&self, problem: &Problem<'_, F>, n: usize, seed: u64) -> Result<Samples>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draw_follows_the_weights_and_never_picks_a_forbidden_item() {
        let ninf = f64::NEG_INFINITY;
        let w = [ninf, 0.0, 2f64.ln(), ninf];
        assert_eq!(draw(&w, 0.0), Some(1));
        assert_eq!(draw(&w, 0.33), Some(1));
        assert_eq!(draw(&w, 0.34), Some(2));
        assert_eq!(draw(&w, 0.999_999_999), Some(2));
        assert_eq!(draw(&[ninf, ninf], 0.5), None);
        assert_eq!(draw(&[1e300, 1e300 - 1.0], 0.1), Some(0));
    }

    #[test]
    fn generators_differ_by_seed_sequence_and_sample() {
        let x = |s, b, i| sample_rng(s, b, i).random::<u64>();
        assert_eq!(x(1, 2, 3), x(1, 2, 3));
        assert_ne!(x(1, 2, 3), x(2, 2, 3));
        assert_ne!(x(1, 2, 3), x(1, 3, 3));
        assert_ne!(x(1, 2, 3), x(1, 2, 4));
    }
}
