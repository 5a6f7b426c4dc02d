//! How work is spread over threads.

use rayon::prelude::*;
use semicrf_core::Parallelism;

/// The number of threads an engine with `par` runs on: 1 when sequential, otherwise the size
/// of rayon's global pool (the `threads` to put in a [`Query`](semicrf_core::Query) so that
/// its estimate is tight).
pub fn threads(par: Parallelism) -> usize {
    match par {
        Parallelism::Sequential => 1,
        _ => rayon::current_num_threads(),
    }
}

/// How many of `batch` sequences hold working memory at once when `threads` threads run them.
pub(crate) fn in_flight(par: Parallelism, batch: usize, threads: usize) -> usize {
    match par {
        Parallelism::Sequential => batch.min(1),
        _ => batch.min(threads.max(1)),
    }
}

/// `f(0), f(1), …, f(n-1)`, in order, computed in parallel when `par` is
/// [`Parallelism::Rayon`].
pub fn map_indexed<T: Send>(
    par: Parallelism,
    n: usize,
    f: impl Fn(usize) -> T + Sync + Send,
) -> Vec<T> {
    match par {
        Parallelism::Sequential => (0..n).map(f).collect(),
        _ => (0..n).into_par_iter().map(f).collect(),
    }
}

/// `f(b, a_b, c_b)` over the consecutive `ca`-sized chunks of `a` zipped with the `cb`-sized
/// chunks of `c`, in order, in parallel when `par` is [`Parallelism::Rayon`] (the in-place
/// twin of [`map_indexed`]: each call owns its sequence's rows of the outputs).
pub(crate) fn map_zip_chunks<T: Send>(
    par: Parallelism,
    a: &mut [f64],
    ca: usize,
    c: &mut [f64],
    cb: usize,
    f: impl Fn(usize, &mut [f64], &mut [f64]) -> T + Sync + Send,
) -> Vec<T> {
    match par {
        Parallelism::Sequential => a
            .chunks_mut(ca)
            .zip(c.chunks_mut(cb))
            .enumerate()
            .map(|(b, (x, y))| f(b, x, y))
            .collect(),
        _ => a
            .par_chunks_mut(ca)
            .zip(c.par_chunks_mut(cb))
            .enumerate()
            .map(|(b, (x, y))| f(b, x, y))
            .collect(),
    }
}
