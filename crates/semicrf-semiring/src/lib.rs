//! Semirings for semi-Markov CRF inference, and the numeric kernels their loops are made of.
//!
//! Every dynamic program of semicrf is written once, generic over [`Semiring`], and
//! instantiated with a semiring that decides what it computes:
//!
//! | semiring | element | `⊕` | result of a forward pass |
//! |---|---|---|---|
//! | [`LogSemiring`] | a log-weight `x` | log-add-exp | `log Z`; its derivatives are the marginals |
//! | [`MaxSemiring`] | a score `x` | `max` | the Viterbi score |
//! | [`EntropySemiring`] | a pair `(x, h)`: log-weight and entropy | log-add-exp and the mixing rule of entropies | `log Z` and the Shannon entropy of the posterior |
//!
//! In all three, `⊗` adds log-weights, `zero` has log-weight `-inf` and `one` has log-weight
//! `0`; a potential `θ` (a score, `-inf` allowed) enters a program as [`Semiring::lift`]`(θ)`.
//!
//! Use this crate directly only to write a new backend or a new semiring; users reach for the
//! `semicrf` facade.
//!
//! ```
//! use semicrf_semiring::{EntropySemiring, LogSemiring, MaxSemiring, Semiring};
//!
//! let ninf = f64::NEG_INFINITY;
//! assert_eq!(LogSemiring::plus(ninf, ninf), ninf); // never NaN
//! assert!((LogSemiring::plus(0.0, 0.0) - 2f64.ln()).abs() < 1e-15);
//! assert_eq!(MaxSemiring::sum(&mut [1.0, 3.0, 2.0]), 3.0);
//! assert_eq!(LogSemiring::sum(&mut []), ninf);
//!
//! // Two equally likely outcomes: log Z = ln 2 and an entropy of ln 2 nats.
//! let e = EntropySemiring::plus(EntropySemiring::lift(0.0), EntropySemiring::lift(0.0));
//! assert!((e.log_weight - 2f64.ln()).abs() < 1e-15);
//! assert!((e.entropy - 2f64.ln()).abs() < 1e-15);
//! ```
//!
//! # Laws
//!
//! For every implementation and all elements `a, b, c` (up to rounding):
//!
//! - `plus` is associative and commutative with identity `zero()`;
//! - `times` is associative and commutative with identity `one()` and absorbing element
//!   `zero()`: `plus(times(zero, a), b) = b`;
//! - `times` distributes over `plus`: `times(a, plus(b, c)) = plus(times(a, b), times(a, c))`;
//! - `lift` turns addition of potentials into `⊗`: `lift(x + y) = times(lift(x), lift(y))`,
//!   `lift(0) = one()` and `lift(-inf) = zero()`.
//!
//! The tests of this crate check them on values from `-inf` to `±1e300`.
//!
//! # The `-inf` rules
//!
//! A log-weight of `-inf` is the semiring zero: it forbids what it scores. `plus(zero, zero) =
//! zero` (never NaN, never a sentinel such as `-1e9`), and every reduction over a set whose
//! largest log-weight is `-inf` returns zero. `+inf` and NaN are never valid potentials;
//! inputs are validated before they reach a semiring, so the functions here do not test for
//! them.
//!
//! # What the engines' loops call
//!
//! - [`Semiring::sum`] and [`Semiring::sum_shifted`]: vectorisable `⊕`-reductions over
//!   slices (the log semiring's use the branch-free [`kernels::exp_fast`] and a fixed
//!   summation order, so results are deterministic);
//! - [`Semiring::Ring`] and [`Semiring::Matrix`]: the two operators of the streaming
//!   recurrence, a sliding window of past values reduced against per-lag weights and a
//!   `C × C` matrix-vector product. [`PlainRing`] and [`PlainMatrix`] implement them for any
//!   semiring from the slice reductions; the log semiring's [`LinearRing`] and
//!   [`LinearMatrix`] evaluate them in the linear domain (dot products instead of a
//!   log-sum-exp per term), with exact log-domain fallbacks.
//!
//! A new semiring implements [`Semiring`], picks `PlainRing<Self>` and `PlainMatrix<Self>`
//! (or faster operators of its own), and every engine runs it with no change.
//!
//! # Crate features
//!
//! None.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use core::fmt::Debug;

mod entropy;
pub mod kernels;
pub mod linear;
mod log_max;
mod plain;

pub use entropy::{EntropySemiring, EntropyValue};
pub use linear::{LinearMatrix, LinearMatrixScratch, LinearRing, LinearWeights};
pub use log_max::{LogSemiring, MaxSemiring};
pub use plain::{PlainMatrix, PlainRing, PlainWeights};

/// The operations a dynamic program needs.
///
/// Implementations are zero-sized types used for static dispatch: hot loops are generic over
/// `S: Semiring` and monomorphised.
pub trait Semiring: Copy + Clone + Default + Debug + Send + Sync + 'static {
    /// A short lowercase name (`"log"`, `"max"`, `"entropy"`), used in reports and ids.
    const NAME: &'static str;
    /// The number of `f64` words of a [`Semiring::Value`] ([`Semiring::to_words`]).
    const WIDTH: usize;

    /// An element of the semiring.
    type Value: Copy + Debug + PartialEq + Send + Sync + 'static;
    /// The sliding-window operator of the streaming recurrence.
    type Ring: Ring<Self>;
    /// The `C × C` matrix-vector operator of the streaming recurrence.
    type Matrix: Matrix<Self>;

    /// The additive identity (log-weight `-inf`).
    fn zero() -> Self::Value;
    /// The multiplicative identity (log-weight `0`).
    fn one() -> Self::Value;
    /// `a ⊕ b`.
    fn plus(a: Self::Value, b: Self::Value) -> Self::Value;
    /// `a ⊗ b`.
    fn times(a: Self::Value, b: Self::Value) -> Self::Value;
    /// A potential `θ` (a log-weight; `-inf` forbids) as an element; `lift(-inf) = zero()`.
    fn lift(theta: f64) -> Self::Value;
    /// `v ⊗ lift(θ)`.
    #[inline(always)]
    fn shift(v: Self::Value, theta: f64) -> Self::Value {
        Self::times(v, Self::lift(theta))
    }
    /// The log-weight of an element: `log Z` for Log and Entropy, the best score for Max;
    /// `-inf` exactly for zero.
    fn weight(v: Self::Value) -> f64;

    /// `⊕` over a slice, which it may overwrite; `zero()` for an empty slice.
    fn sum(xs: &mut [Self::Value]) -> Self::Value;
    /// `⊕_i xs[i] ⊗ lift(ws[i])` over the common length, using `buf` (at least as long) as
    /// scratch; `zero()` for empty slices.
    fn sum_shifted(xs: &[Self::Value], ws: &[f64], buf: &mut [Self::Value]) -> Self::Value;

    /// Writes the [`Semiring::WIDTH`] words of `v` to `out`.
    fn to_words(v: Self::Value, out: &mut [f64]);
    /// Reads an element from its [`Semiring::WIDTH`] words.
    fn from_words(words: &[f64]) -> Self::Value;

    /// What a memory estimate needs to know about this semiring.
    fn info() -> SemiringInfo {
        SemiringInfo {
            name: Self::NAME,
            width: Self::WIDTH,
            ring_words: <Self::Ring as Ring<Self>>::ENTRY_WORDS,
            matrix_words: <Self::Matrix as Matrix<Self>>::ENTRY_WORDS,
        }
    }
}

/// The facts about a semiring that memory estimates use, available without naming the
/// semiring's type ([`Semiring::info`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SemiringInfo {
    /// [`Semiring::NAME`].
    pub name: &'static str,
    /// [`Semiring::WIDTH`]: `f64` words per element.
    pub width: usize,
    /// [`Ring::ENTRY_WORDS`]: `f64` words a ring keeps per stored entry.
    pub ring_words: usize,
    /// [`Matrix::ENTRY_WORDS`]: `f64` words a prepared matrix keeps per entry.
    pub matrix_words: usize,
}

/// How a window of positions maps to the per-lag weights of a [`Ring`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lag {
    /// A window `[first, first + n)` that ends where a segment ends: position `q` takes the
    /// weight of lag `d = first + n - q` (`n` down to 1). The forward recurrence: segments of
    /// duration `d` end at `t` and start at `t - d`.
    FromEnd,
    /// A window `[first, first + n)` that starts right after a segment starts at
    /// `s = first - 1`: position `q` takes the weight of lag `d = q - s` (1 up to `n`). The
    /// backward recurrence: segments of duration `d` start at `s` and end at `s + d`.
    FromStart,
}

/// A ring of the last `K` values per label, reduced against per-lag weights:
/// `out[j] = ⊕_{q ∈ window_j} value_j(q) ⊗ lift(w[j, d(q) - 1])`.
///
/// The streaming recurrence keeps one: `α_t(j)` is the `⊕` over the last `min(K, ·)` starts
/// of label `j`, each weighted by the duration score of its lag. Entries are indexed by
/// position; a position's entry lives until `K` later positions have been pushed.
pub trait Ring<S: Semiring>: Clone + Debug + Send + Sync {
    /// `f64` words stored per entry, for memory estimates.
    const ENTRY_WORDS: usize;
    /// Per-lag weights prepared for this ring.
    type Weights: Clone + Debug + Send + Sync;

    /// Prepares a `(C, K)` weight table, `table[j * k + d - 1]` the weight of label `j` at
    /// lag `d`, for windows ordered as `lag` says.
    fn weights(table: &[f64], k: usize, c: usize, lag: Lag) -> Self::Weights;
    /// `f64` words held by prepared weights of `k` lags and `c` labels.
    fn weight_words(k: usize, c: usize) -> usize;
    /// An empty ring (every entry zero) of `k` positions and `c` labels.
    fn new(k: usize, c: usize) -> Self;
    /// `f64` words held by a ring, its scratch included.
    fn words(k: usize, c: usize) -> usize;
    /// Stores `values[j]` as the entry of position `pos` for every label `j`.
    fn push(&mut self, pos: usize, values: &[S::Value]);
    /// For every label `j`: `out[j] = ⊕` over the window `[first[j], first[j] + len[j])`
    /// (`zero()` when `len[j] = 0`).
    ///
    /// Windows are read as the streaming recurrences read them: a window holds every
    /// position of its label that a later window will read (it ends at the newest entry
    /// and reaches back as far as any later window will). Every position of a window must
    /// be among the last `K` pushed. An implementation may refresh its internal state from
    /// the window (hence `&mut`), never the values.
    fn sums(&mut self, first: &[usize], len: &[usize], w: &Self::Weights, out: &mut [S::Value]);
    /// `⊗ lift(by)` on every entry of label `j`.
    fn shift(&mut self, j: usize, by: f64);
    /// The entry of label `j` at position `pos`.
    fn get(&self, j: usize, pos: usize) -> S::Value;
    /// `f64` words of a saved ring ([`Ring::save`]).
    fn saved_words(k: usize, c: usize) -> usize;
    /// Saves the exact state (entries and any internal references) into `out`.
    fn save(&self, out: &mut [f64]);
    /// Restores a state saved with [`Ring::save`]; the ring then behaves bitwise as it did.
    fn restore(&mut self, from: &[f64]);
}

/// A `C × C` matrix of potentials `m[i, j]` applied to a vector of elements:
/// `y[j] = ⊕_i x[i] ⊗ lift(m[i, j])`.
pub trait Matrix<S: Semiring>: Clone + Debug + Send + Sync {
    /// `f64` words stored per matrix entry, for memory estimates.
    const ENTRY_WORDS: usize;
    /// Per-call scratch.
    type Scratch: Clone + Debug + Send;
    /// Prepares `table` (`C × C`, row-major, `table[i * c + j] = m[i, j]`).
    fn new(table: &[f64], c: usize) -> Self;
    /// Scratch for [`Matrix::apply`] with `c` labels.
    fn scratch(c: usize) -> Self::Scratch;
    /// `f64` words of scratch for `c` labels.
    fn scratch_words(c: usize) -> usize;
    /// `out[j] = ⊕_i x[i] ⊗ lift(m[i, j])`.
    fn apply(&self, x: &[S::Value], out: &mut [S::Value], scratch: &mut Self::Scratch);
}

#[cfg(test)]
mod tests;
