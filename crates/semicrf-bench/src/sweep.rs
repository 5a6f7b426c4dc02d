//! The sweeps of the benchmark report: several sequence lengths `T` at a fixed `(B, K, C)`,
//! and several maximum durations `K` at a fixed `(B, T, C)`.
//!
//! The criterion group `sweep/` (`cargo bench -p semicrf-bench --bench main -- sweep/`) times
//! the T-sweep, the `memory` binary's `--sweep` measures peak heap over both sweeps, and the
//! `report` binary turns both into `docs/benchmarks.md`. All three take the sweep by name:
//! [`FULL`] (the default) or [`SMALL`] (seconds, for CI), from `--sweep NAME` or the
//! environment variable [`ENV`].
//!
//! ```
//! use semicrf_bench::sweep::{FULL, Sweep};
//!
//! assert_eq!(Sweep::by_name("full").unwrap(), &FULL);
//! let shapes = FULL.t_shapes();
//! assert!(shapes.iter().all(|s| s.max_duration == FULL.max_duration));
//! assert!(Sweep::by_name("huge").is_err());
//! ```

use semicrf_core::Shape;

/// The environment variable that names the sweep: `full` (default) or `small`.
pub const ENV: &str = "SEMICRF_BENCH_SWEEP";

/// A T-sweep at fixed `(B, K, C)` and a K-sweep at fixed `(B, T, C)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// `full` or `small`.
    pub name: &'static str,
    /// `B` of both sweeps.
    pub batch: usize,
    /// `K` of the T-sweep.
    pub max_duration: usize,
    /// `C` of both sweeps.
    pub labels: usize,
    /// The lengths `T` of the T-sweep, increasing.
    pub lens: &'static [usize],
    /// `T` of the K-sweep.
    pub k_len: usize,
    /// The maximum durations `K` of the K-sweep, increasing.
    pub durations: &'static [usize],
    /// Scan and exact run only where their work `B·T·K·C²` is at most this many terms: their
    /// time grows as fast as their memory, so near the budget a call takes minutes.
    pub edge_work_limit: u64,
}

/// The report's sweep: `(B, K, C) = (1, 32, 8)` (about the durations and labels of S3) for `T`
/// from 128 to 131,072, past the point where scan's and exact's edges stop fitting the default
/// memory budget (scan and exact run up to `T = 2048`, the work limit); `(B, T, C) =
/// (1, 256, 8)` for `K` from 4 to 256.
pub const FULL: Sweep = Sweep {
    name: "full",
    batch: 1,
    max_duration: 32,
    labels: 8,
    lens: &[
        128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072,
    ],
    k_len: 256,
    durations: &[4, 16, 64, 256],
    edge_work_limit: 1 << 22,
};

/// A sweep of tiny shapes that runs in seconds, so that CI exercises the whole chain.
pub const SMALL: Sweep = Sweep {
    name: "small",
    batch: 1,
    max_duration: 8,
    labels: 4,
    lens: &[32, 64, 128, 256],
    k_len: 128,
    durations: &[2, 8, 32],
    edge_work_limit: 1 << 22,
};

/// Every sweep, by name.
pub const ALL: [&Sweep; 2] = [&FULL, &SMALL];

impl Sweep {
    /// The sweep called `name`; an error naming the choices otherwise.
    pub fn by_name(name: &str) -> Result<&'static Sweep, String> {
        ALL.into_iter().find(|s| s.name == name).ok_or_else(|| {
            format!("unknown sweep {name:?}: expected one of full, small (--sweep or {ENV})")
        })
    }

    /// The sweep named by [`ENV`], [`FULL`] when it is unset.
    pub fn from_env() -> Result<&'static Sweep, String> {
        match std::env::var(ENV) {
            Ok(name) => Sweep::by_name(name.trim()),
            Err(std::env::VarError::NotPresent) => Ok(&FULL),
            Err(e) => Err(format!("{ENV}: {e}")),
        }
    }

    /// The T-sweep's shapes, in order of `T`.
    pub fn t_shapes(&self) -> Vec<Shape> {
        self.lens
            .iter()
            .map(|&t| Shape::new(self.batch, t, self.max_duration, self.labels))
            .collect()
    }

    /// The K-sweep's shapes, in order of `K`.
    pub fn k_shapes(&self) -> Vec<Shape> {
        self.durations
            .iter()
            .map(|&k| Shape::new(self.batch, self.k_len, k, self.labels))
            .collect()
    }

    /// Whether scan and exact run at `s` (their work is within [`Sweep::edge_work_limit`]).
    pub fn edges_run(&self, s: Shape) -> bool {
        (s.batch * s.len * s.max_duration * s.labels * s.labels) as u64 <= self.edge_work_limit
    }

    /// Whether `s` is a shape of the T-sweep (any `T`, the sweep's `B`, `K` and `C`).
    pub fn in_t_sweep(&self, s: Shape) -> bool {
        s.batch == self.batch && s.max_duration == self.max_duration && s.labels == self.labels
    }

    /// Whether `s` is a shape of the K-sweep.
    pub fn in_k_sweep(&self, s: Shape) -> bool {
        s.batch == self.batch && s.len == self.k_len && s.labels == self.labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_are_increasing_and_keep_durations_within_the_length() {
        for s in ALL {
            assert!(s.lens.windows(2).all(|w| w[0] < w[1]), "{}", s.name);
            assert!(s.durations.windows(2).all(|w| w[0] < w[1]), "{}", s.name);
            assert!(s.max_duration <= s.lens[0], "{}", s.name);
            assert!(s.durations.iter().all(|&k| k <= s.k_len), "{}", s.name);
            assert!(s.t_shapes().into_iter().all(|x| s.in_t_sweep(x)));
            assert!(s.k_shapes().into_iter().all(|x| s.in_k_sweep(x)));
        }
    }
}
