//! How work is spread over threads.

use rayon::prelude::*;

/// Whether a CPU engine uses rayon's thread pool or runs on the calling thread.
///
/// Results are bitwise identical either way: every reduction over the batch is done in a
/// fixed order after the parallel part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Parallelism {
    /// Run on the calling thread (deterministic tests, nested parallelism).
    Sequential,
    /// Use rayon's global thread pool (over the batch, and inside a sequence where that helps).
    #[default]
    Rayon,
}

/// `f(0), f(1), …, f(n-1)`, in order, computed in parallel when `par` is [`Parallelism::Rayon`].
pub fn map_indexed<T: Send>(
    par: Parallelism,
    n: usize,
    f: impl Fn(usize) -> T + Sync + Send,
) -> Vec<T> {
    match par {
        Parallelism::Sequential => (0..n).map(f).collect(),
        Parallelism::Rayon => (0..n).into_par_iter().map(f).collect(),
    }
}
