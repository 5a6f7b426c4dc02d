//! What the test suites of every crate share (feature `testing`): seeded random problems,
//! the case list every engine is checked on, tolerances, and the helpers that compare results.
//!
//! - [`random_spec`] draws a small problem description spanning the edge cases of the model
//!   page's test list (T = 1, K = 1, K ≥ T, K > T, C = 1, C not a power of two, ragged lengths
//!   including 1, `-inf` transitions that forbid most paths, an unreachable label, 2-D and 3-D
//!   transitions, boundary scores, start and end); [`random_problem`] draws the tensors;
//!   [`named_cases`] and [`cases`] list them; [`wide_spec`] draws longer ones for property
//!   tests.
//! - [`Tolerance`] and its constants are the accuracy targets; [`assert_gradients_close`]
//!   compares every gradient field; [`Worst`] records the worst error a test saw.
//! - [`alone`] cuts one sequence out of a batch, [`upstream`] and [`positive_upstream`] draw
//!   per-sequence upstream gradients, [`with_all_inputs`] fills absent inputs with zeros.
//! - [`Hashed`] is a potentials source computed on the fly ([`hashed`] values), with the same
//!   values in arrays.

use core::cell::Cell;

use ndarray::{Array, ArrayD, IxDyn};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Gradients, OwnedPotentials, PotentialSource, Result, Segment, SourceRows};

/// The form of the transition tensor a generator draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransitionKind {
    /// No transition tensor (zeros).
    Absent,
    /// `(C, C)`.
    Static,
    /// `(K, C, C)`.
    DurationDependent,
}

/// What [`random_problem`] draws.
#[derive(Clone, Debug, PartialEq)]
pub struct GenSpec {
    /// `B`.
    pub batch: usize,
    /// `T`.
    pub len: usize,
    /// `K`.
    pub max_duration: usize,
    /// `C`.
    pub labels: usize,
    /// Draw lengths in `1..=T` (the first sequence keeps `T`, the last has length 1 when
    /// `B > 2`) instead of all `T`.
    pub ragged: bool,
    /// Transition form.
    pub transition: TransitionKind,
    /// Draw duration scores.
    pub duration: bool,
    /// Draw start scores.
    pub start: bool,
    /// Draw end scores.
    pub end: bool,
    /// Draw begin and end boundary scores.
    pub boundaries: bool,
    /// Scores are uniform in `[-scale, scale]`.
    pub scale: f64,
    /// Fraction of transition entries set to `-inf`.
    pub forbid_transitions: f64,
    /// Fraction of emission scores set to `-inf`.
    pub forbid_scores: f64,
    /// Make the last label unreachable (`-inf` transitions into it and `-inf` start).
    pub unreachable_label: bool,
    /// Cut every label's duration table at its own drawn maximum (`-inf` beyond it; a
    /// label may get no finite duration at all), as tables of labels with their own
    /// maximum durations are.
    pub capped_durations: bool,
}

impl GenSpec {
    /// A plain problem of shape `(B, T, K, C)` with a static transition and duration scores.
    pub fn new(batch: usize, len: usize, max_duration: usize, labels: usize) -> Self {
        GenSpec {
            batch,
            len,
            max_duration,
            labels,
            ragged: false,
            transition: TransitionKind::Static,
            duration: true,
            start: false,
            end: false,
            boundaries: false,
            scale: 1.0,
            forbid_transitions: 0.0,
            forbid_scores: 0.0,
            unreachable_label: false,
            capped_durations: false,
        }
    }
}

impl GenSpec {
    /// The same description with every optional input drawn and ragged lengths: begin and
    /// end boundaries, start and end scores.
    pub fn everything(mut self) -> Self {
        self.ragged = true;
        self.boundaries = true;
        self.start = true;
        self.end = true;
        self
    }
}

/// A seeded generator (ChaCha8, reproducible across platforms).
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// A small random problem description for brute-force comparisons: at most a few thousand
/// segmentations per sequence, spanning the edge cases listed in the module docs.
pub fn random_spec(seed: u64) -> GenSpec {
    let mut r = rng(seed ^ 0x5eed_5eed);
    let len = *pick(&mut r, &[1, 1, 2, 3, 4, 5, 6, 7]);
    let labels = *pick(&mut r, &[1, 2, 3, 3, 5]);
    let max_duration = *pick(&mut r, &[1, 2, 3, len, len + 2]);
    // Keep brute force affordable.
    let (len, max_duration) =
        if crate::reference::count_segmentations(len, max_duration, labels) > 20_000 {
            (len.min(4), max_duration.min(4))
        } else {
            (len, max_duration)
        };
    let transition = *pick(
        &mut r,
        &[
            TransitionKind::Static,
            TransitionKind::Static,
            TransitionKind::DurationDependent,
            TransitionKind::Absent,
        ],
    );
    GenSpec {
        batch: *pick(&mut r, &[1, 2, 3, 4]),
        len,
        max_duration,
        labels,
        ragged: r.random_bool(0.5),
        transition,
        duration: r.random_bool(0.8),
        start: r.random_bool(0.5),
        end: r.random_bool(0.5),
        boundaries: r.random_bool(0.4),
        scale: *pick(&mut r, &[0.5, 1.0, 2.0, 5.0]),
        forbid_transitions: *pick(&mut r, &[0.0, 0.0, 0.3, 0.8]),
        forbid_scores: *pick(&mut r, &[0.0, 0.0, 0.0, 0.2]),
        unreachable_label: labels > 1 && r.random_bool(0.15),
        capped_durations: r.random_bool(0.2),
    }
}

/// A problem description for property tests, beyond what brute force can enumerate:
/// [`random_spec`] pushed to longer sequences (`T` up to 40, `K` in `{1, 3, 8, T, T + 5}`),
/// up to 6 labels and scores up to `1e4` in magnitude, with its `-inf` transitions, lengths
/// of 1 and unreachable labels.
pub fn wide_spec(seed: u64) -> GenSpec {
    let mut g = random_spec(seed);
    let r = |k: u64| (seed.wrapping_mul(6364136223846793005).wrapping_add(k) >> 33) as usize;
    g.len = [1, 2, 5, 17, 40][r(1) % 5];
    g.max_duration = [1, 3, 8, g.len, g.len + 5][r(2) % 5];
    g.labels = [1, 2, 3, 6][r(3) % 4];
    g.scale = [1.0, 50.0, 1e3, 1e4][r(4) % 4];
    g.unreachable_label &= g.labels > 1;
    g
}

fn pick<'a, T>(r: &mut impl RngCore, xs: &'a [T]) -> &'a T {
    &xs[r.random_range(0..xs.len())]
}

/// Draws the tensors of `spec` from `seed`.
pub fn random_problem(seed: u64, spec: &GenSpec) -> OwnedPotentials<f64> {
    let mut r = rng(seed);
    let (b, t, k, c) = (spec.batch, spec.len, spec.max_duration, spec.labels);
    let uniform = |r: &mut ChaCha8Rng, shape: &[usize], forbid: f64| -> ArrayD<f64> {
        Array::from_shape_fn(IxDyn(shape), |_| {
            if forbid > 0.0 && r.random_bool(forbid) {
                f64::NEG_INFINITY
            } else {
                r.random_range(-spec.scale..=spec.scale)
            }
        })
    };
    let scores = uniform(&mut r, &[b, t, c], spec.forbid_scores);
    let mut transition = match spec.transition {
        TransitionKind::Absent => None,
        TransitionKind::Static => Some(uniform(&mut r, &[c, c], spec.forbid_transitions)),
        TransitionKind::DurationDependent => {
            Some(uniform(&mut r, &[k, c, c], spec.forbid_transitions))
        }
    };
    let mut duration = spec.duration.then(|| uniform(&mut r, &[k, c], 0.0));
    let mut start = spec.start.then(|| uniform(&mut r, &[c], 0.0));
    let end = spec.end.then(|| uniform(&mut r, &[c], 0.0));
    let (begin_boundary, end_boundary) = if spec.boundaries {
        (
            Some(uniform(&mut r, &[b, t, c], 0.0)),
            Some(uniform(&mut r, &[b, t, c], 0.0)),
        )
    } else {
        (None, None)
    };
    if spec.unreachable_label && c > 1 {
        let last = c - 1;
        let tr = transition.get_or_insert_with(|| ArrayD::zeros(IxDyn(&[c, c])));
        let nd = tr.ndim();
        for (idx, x) in tr.indexed_iter_mut() {
            if idx[nd - 1] == last {
                *x = f64::NEG_INFINITY;
            }
        }
        start.get_or_insert_with(|| ArrayD::zeros(IxDyn(&[c])))[last] = f64::NEG_INFINITY;
    }
    let lengths = (0..b)
        .map(|i| {
            if !spec.ragged || i == 0 {
                t
            } else if i == b - 1 && b > 2 {
                1
            } else {
                r.random_range(1..=t)
            }
        })
        .collect();
    if spec.capped_durations {
        let dur = duration.get_or_insert_with(|| ArrayD::zeros(IxDyn(&[k, c])));
        for j in 0..c {
            // Label 0 keeps at least one duration so that most problems stay feasible.
            let cap = r.random_range(usize::from(j == 0)..=k);
            for d in cap..k {
                dur[[d, j]] = f64::NEG_INFINITY;
            }
        }
    }
    OwnedPotentials {
        scores,
        transition,
        duration,
        start,
        end,
        begin_boundary,
        end_boundary,
        lengths,
        max_duration: k,
    }
}

/// A uniformly drawn valid segmentation of `len` positions (durations `1..=k`, labels `0..c`).
pub fn random_segmentation(seed: u64, len: usize, k: usize, c: usize) -> Vec<Segment> {
    let mut r = rng(seed);
    let mut out = Vec::new();
    let mut s = 0;
    while s < len {
        let d = r.random_range(1..=k.min(len - s));
        out.push(Segment::new(s, d, r.random_range(0..c)));
        s += d;
    }
    out
}

/// Named hand-picked edge cases (small enough for brute force).
pub fn named_cases() -> Vec<(&'static str, GenSpec)> {
    let base = GenSpec::new;
    let with = |mut g: GenSpec, f: &dyn Fn(&mut GenSpec)| {
        f(&mut g);
        g
    };
    vec![
        ("t_equals_1", base(2, 1, 3, 3)),
        ("k_equals_1_linear_chain", base(2, 6, 1, 3)),
        ("k_equals_t", base(1, 5, 5, 2)),
        ("k_greater_than_t", base(2, 4, 7, 3)),
        ("one_label", base(3, 6, 3, 1)),
        ("five_labels", base(1, 4, 3, 5)),
        (
            "ragged_lengths_with_a_length_of_one",
            with(base(4, 6, 3, 3), &|g| g.ragged = true),
        ),
        (
            "neg_inf_transitions_forbid_most_paths",
            with(base(2, 6, 3, 3), &|g| g.forbid_transitions = 0.7),
        ),
        (
            "unreachable_label",
            with(base(2, 5, 3, 3), &|g| g.unreachable_label = true),
        ),
        (
            "duration_dependent_transition",
            with(base(2, 5, 3, 3), &|g| {
                g.transition = TransitionKind::DurationDependent
            }),
        ),
        (
            "boundary_start_and_end_scores",
            with(base(2, 5, 3, 3), &|g| {
                g.boundaries = true;
                g.start = true;
                g.end = true;
            }),
        ),
        (
            "large_magnitude_scores",
            with(base(2, 6, 3, 3), &|g| g.scale = 1e4),
        ),
        (
            "neg_inf_scores",
            with(base(2, 6, 3, 3), &|g| g.forbid_scores = 0.3),
        ),
        (
            "labels_with_their_own_maximum_durations",
            with(base(2, 7, 5, 4), &|g| {
                g.capped_durations = true;
                g.forbid_scores = 0.1;
                g.boundaries = true;
            }),
        ),
    ]
}

/// The case list every engine is checked on: the [`named_cases`] (drawn from seeds
/// `base, base + 1, …`) followed by `random` problems of [`random_spec`] (seeds `0..random`).
pub fn cases(base: u64, random: u64) -> Vec<(String, OwnedPotentials<f64>)> {
    let mut v: Vec<_> = named_cases()
        .into_iter()
        .enumerate()
        .map(|(i, (name, g))| (name.to_string(), random_problem(base + i as u64, &g)))
        .collect();
    for seed in 0..random {
        v.push((
            format!("seed {seed}"),
            random_problem(seed, &random_spec(seed)),
        ));
    }
    v
}

/// Sequence `b` of a batch as a problem of its own (same padded length `T`).
pub fn alone<F: crate::Scalar>(p: &OwnedPotentials<F>, b: usize) -> OwnedPotentials<F> {
    p.sequence(b).expect("a sequence of the batch")
}

/// Per-sequence upstream gradients in `±[0.25, 2)` with a 30% chance of a negative sign, and
/// an exact 0 for every fifth sequence.
pub fn upstream(seed: u64, batch: usize) -> Vec<f64> {
    let mut r = rng(seed ^ 0xabcd);
    (0..batch)
        .map(|b| {
            let g: f64 = r.random_range(0.25..2.0);
            if b % 5 == 4 {
                0.0
            } else if r.random_bool(0.3) {
                -g
            } else {
                g
            }
        })
        .collect()
}

/// Per-sequence upstream gradients in `[0.5, 1.5]`: for comparisons whose tolerance is
/// relative to the result itself, which mixed signs would defeat (a shared-parameter
/// gradient `Σ_b g_b · count_b` cancels when the `g_b` differ in sign, while its rounding
/// error does not).
pub fn positive_upstream(seed: u64, batch: usize) -> Vec<f64> {
    let mut r = rng(seed ^ 0x9051);
    (0..batch).map(|_| r.random_range(0.5..=1.5)).collect()
}

/// The same problem with absent transition, duration, start and end filled with zeros, so
/// that every input has entries to perturb (the gradients of absent inputs are those of
/// zeros).
pub fn with_all_inputs(owned: &OwnedPotentials<f64>) -> OwnedPotentials<f64> {
    let (c, k) = (owned.scores.shape()[2], owned.max_duration);
    let mut o = owned.clone();
    o.transition
        .get_or_insert_with(|| ArrayD::zeros(IxDyn(&[c, c])));
    o.duration
        .get_or_insert_with(|| ArrayD::zeros(IxDyn(&[k, c])));
    o.start.get_or_insert_with(|| ArrayD::zeros(IxDyn(&[c])));
    o.end.get_or_insert_with(|| ArrayD::zeros(IxDyn(&[c])));
    o
}

/// Absolute and relative tolerance: `|a - b| <= abs + rel · max(|a|, |b|)`; equal values
/// (equal infinities included) always pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Absolute part.
    pub abs: f64,
    /// Relative part.
    pub rel: f64,
}

impl Tolerance {
    /// `f64` inputs: log Z, Viterbi and entropy values against the oracle.
    pub const F64_VALUES: Tolerance = Tolerance {
        abs: 0.0,
        rel: 1e-10,
    };
    /// `f64` inputs: gradients and marginals against the oracle.
    pub const F64_GRADS: Tolerance = Tolerance {
        abs: 1e-10,
        rel: 1e-10,
    };
    /// `f32` inputs with `|scores| <= 5`: log Z against the `f64` oracle on the same values.
    pub const F32_LOG_Z: Tolerance = Tolerance {
        abs: 1e-5,
        rel: 1e-5,
    };
    /// `f32` inputs with `|scores| <= 5`: gradients and marginals.
    pub const F32_GRADS: Tolerance = Tolerance {
        abs: 1e-4,
        rel: 0.0,
    };

    /// Whether `a` and `b` agree; NaN never does.
    pub fn ok(self, a: f64, b: f64) -> bool {
        if a == b {
            return true;
        }
        (a - b).abs() <= self.abs + self.rel * a.abs().max(b.abs())
    }
}

/// Asserts that two gradients have the same fields, shapes and values within `tol`.
pub fn assert_gradients_close(what: &str, got: &Gradients, want: &Gradients, tol: Tolerance) {
    for ((field, a), (_, b)) in got.fields().into_iter().zip(want.fields()) {
        match (a, b) {
            (None, None) => {}
            (Some(a), Some(b)) => {
                assert_eq!(a.shape(), b.shape(), "{what}: shape of grad.{field}");
                for ((idx, &x), &y) in a.indexed_iter().zip(b.iter()) {
                    assert!(
                        tol.ok(x, y),
                        "{what}: grad.{field}{idx:?} = {x}, expected {y}"
                    );
                }
            }
            (a, b) => panic!(
                "{what}: grad.{field} present {} vs {}",
                a.is_some(),
                b.is_some()
            ),
        }
    }
}

/// The worst error a test saw, printed when it ends (`cargo test -- --nocapture`), with the
/// number of comparisons behind it.
#[derive(Debug)]
pub struct Worst {
    name: String,
    err: Cell<f64>,
    count: Cell<usize>,
}

impl Worst {
    /// A tracker named after what it measures.
    pub fn new(name: impl Into<String>) -> Self {
        Worst {
            name: name.into(),
            err: Cell::new(0.0),
            count: Cell::new(0),
        }
    }
    /// Records one error.
    pub fn see(&self, err: f64) {
        assert!(!err.is_nan(), "{}: NaN error", self.name);
        self.err.set(self.err.get().max(err));
        self.count.set(self.count.get() + 1);
    }
    /// The worst error so far.
    pub fn get(&self) -> f64 {
        self.err.get()
    }
    /// The number of errors recorded.
    pub fn count(&self) -> usize {
        self.count.get()
    }
}

impl Drop for Worst {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            println!(
                "{}: {} comparisons, worst error {:.2e}",
                self.name,
                self.count.get(),
                self.err.get()
            );
        }
    }
}

/// The posterior over the segmentations of sequence `b`, enumerated by brute force: every
/// segmentation of finite score ([`gold_score`](crate::gold_score)) and its probability. For
/// problems small enough to enumerate; the samplers' tests compare their draws with it.
pub fn segmentation_posterior(
    p: &crate::Potentials<'_, f64>,
    b: usize,
) -> std::collections::HashMap<Vec<Segment>, f64> {
    let sh = p.shape();
    let mut scores = Vec::new();
    crate::reference::for_each_segmentation(p.lengths()[b], sh.max_duration, sh.labels, |segs| {
        let s = crate::gold_score(p, b, segs).expect("a segmentation of the sequence");
        if s > f64::NEG_INFINITY {
            scores.push((segs.to_vec(), s));
        }
    });
    let m = scores.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = scores.iter().map(|x| (x.1 - m).exp()).sum();
    scores
        .into_iter()
        .map(|(y, s)| (y, (s - m).exp() / z))
        .collect()
}

/// The total variation distance between the empirical distribution of `samples` and the
/// distribution `p` (anything drawn outside `p`'s support counts fully).
pub fn total_variation(
    p: &std::collections::HashMap<Vec<Segment>, f64>,
    samples: &[Vec<Segment>],
) -> f64 {
    let n = samples.len() as f64;
    let mut counts: std::collections::HashMap<&[Segment], usize> = Default::default();
    for y in samples {
        *counts.entry(y).or_insert(0) += 1;
    }
    let inside: f64 = p
        .iter()
        .map(|(y, &q)| (q - counts.get(y.as_slice()).copied().unwrap_or(0) as f64 / n).abs())
        .sum();
    let outside: f64 = counts
        .iter()
        .filter(|(y, _)| !p.contains_key(**y))
        .map(|(_, &k)| k as f64 / n)
        .sum();
    (inside + outside) / 2.0
}

/// A value in `[-1, 1)` computed from `(b, t, c)` and a salt.
pub fn hashed(b: usize, t: usize, c: usize, salt: u64) -> f64 {
    let mut x = (b as u64) << 40 ^ (t as u64) << 8 ^ c as u64 ^ salt.wrapping_mul(0x9e37_79b9);
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
}

/// A potentials source computed on the fly: the score of `(b, t, c)` is `hashed(b, t, c, 1)`,
/// its begin boundary `hashed(b, t, c, 2) / 2`.
#[derive(Clone, Debug)]
pub struct Hashed {
    /// `L_b` of every sequence.
    pub lengths: Vec<usize>,
    /// `C`.
    pub c: usize,
    /// A row whose label 1 scores `+inf`, to test the checks.
    pub bad: Option<usize>,
}

impl PotentialSource<f64> for Hashed {
    fn lengths(&self) -> &[usize] {
        &self.lengths
    }
    fn labels(&self) -> usize {
        self.c
    }
    fn has_begin_boundary(&self) -> bool {
        true
    }
    fn fill(&self, b: usize, t0: usize, rows: SourceRows<'_, f64>) -> Result<()> {
        let c = self.c;
        let Some(bb) = rows.begin_boundary else {
            return Err(crate::Error::Unsupported {
                backend: "test".into(),
                what: "rows without the begin boundary".into(),
            });
        };
        for (n, (x, y)) in rows.scores.iter_mut().zip(bb.iter_mut()).enumerate() {
            let (t, j) = (t0 + n / c, n % c);
            *x = if self.bad == Some(t) && j == 1 {
                f64::INFINITY
            } else {
                hashed(b, t, j, 1)
            };
            *y = 0.5 * hashed(b, t, j, 2);
        }
        Ok(())
    }
}

impl Hashed {
    /// The same values in arrays: scores and begin boundary, `(B, T, C)` each.
    pub fn arrays(&self) -> (ndarray::Array3<f64>, ndarray::Array3<f64>) {
        let t = self.lengths.iter().copied().max().unwrap_or(0);
        let shape = (self.lengths.len(), t, self.c);
        (
            ndarray::Array3::from_shape_fn(shape, |(b, t, j)| hashed(b, t, j, 1)),
            ndarray::Array3::from_shape_fn(shape, |(b, t, j)| 0.5 * hashed(b, t, j, 2)),
        )
    }
}
