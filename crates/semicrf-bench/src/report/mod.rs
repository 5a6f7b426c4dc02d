//! The benchmark report: a criterion run of the T-sweep, the `memory` binary's measurements
//! and, where present, the peer harness's results, turned into `docs/benchmarks.md` and its
//! SVG plots (the `report` binary is the command; this module is its code, so that a test
//! can feed it a synthetic criterion directory).
//!
//! # Map
//!
//! - [`criterion`]: reads `<dir>/**/new/{benchmark,estimates}.json` into [`Timing`]s.
//! - [`memory`]: reads the `memory` binary's JSON into a [`MemoryDoc`].
//! - [`peers`]: reads the peer harness's result files into [`PeerResult`]s.
//! - [`switch`]: asks `semicrf::SemiCrf::select` (default budget) where scan and exact stop
//!   fitting and what auto-selection picks.
//! - [`plot`]: log–log line charts as SVG text.
//! - `markdown` (private): the page, from the [`Inputs`] and the charts it draws; `tables`
//!   (private): its sources, canonical-shape and peer tables.
//!
//! [`generate`] does it all and returns the page and the SVGs; the binary writes them.

pub mod criterion;
mod markdown;
pub mod memory;
pub mod peers;
pub mod plot;
pub mod switch;
mod tables;

use std::fmt;

use semicrf_core::Shape;

pub use criterion::Timing;
pub use memory::{MemoryDoc, MemoryRow};
pub use peers::PeerResult;

use crate::sweep::Sweep;

/// What went wrong while reading the sources or writing the report, said plainly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(String);

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Error {
        Error(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Parses `B{B}_T{T}_K{K}_C{C}` (the inverse of [`crate::shape_label`]).
pub fn parse_label(label: &str) -> Option<Shape> {
    let mut dims = [0usize; 4];
    let parts: Vec<&str> = label.split('_').collect();
    if parts.len() != 4 {
        return None;
    }
    for ((part, prefix), dim) in parts.iter().zip(['B', 'T', 'K', 'C']).zip(&mut dims) {
        *dim = part.strip_prefix(prefix)?.parse().ok()?;
    }
    let [batch, len, max_duration, labels] = dims;
    Some(Shape::new(batch, len, max_duration, labels))
}

/// This machine in a few words: CPU model, logical CPUs and, where `nvidia-smi` answers, the
/// GPUs.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut text = format!("{cpu}, {cores} logical CPUs");
    let gpus = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty());
    if let Some(gpus) = gpus {
        text += &format!(", {}", gpus.lines().collect::<Vec<_>>().join(", "));
    }
    text
}

/// A source of the report: where it was read from and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Source<T> {
    /// The path it was read from, as given.
    pub path: String,
    /// What was read.
    pub data: T,
}

/// Everything the report is made from.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// The sweep the run measured.
    pub sweep: &'static Sweep,
    /// The criterion run.
    pub criterion: Source<Vec<Timing>>,
    /// The `memory` binary's measurements, where given.
    pub memory: Option<Source<MemoryDoc>>,
    /// Results of `peers/run.sh` (CPU), where present.
    pub peers_cpu: Option<Source<Vec<PeerResult>>>,
    /// Results of `peers/run_gpu.sh`, where present.
    pub peers_gpu: Option<Source<Vec<PeerResult>>>,
    /// The machine the criterion run was made on.
    pub machine: String,
    /// The commit of the checkout measured.
    pub commit: String,
    /// A note on the conditions (e.g. a shared, noisy machine), printed with the sources.
    pub note: Option<String>,
    /// The commands that regenerate the page, one per line.
    pub commands: Vec<String>,
    /// The directory of the SVGs relative to the page (`benchmarks`).
    pub img_dir: String,
}

/// The generated page and its plots.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// `benchmarks.md`.
    pub markdown: String,
    /// `(file name, SVG text)` of every plot the page links to.
    pub svgs: Vec<(String, String)>,
}

/// Builds the page and its plots.
pub fn generate(inputs: &Inputs) -> Result<Report, Error> {
    markdown::generate(inputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_junk_is_refused() {
        let s = Shape::new(4, 4096, 63, 8);
        assert_eq!(parse_label(&crate::shape_label(s)), Some(s));
        for junk in [
            "",
            "B4_T4096_K63",
            "B4_T4096_K63_C8_D1",
            "T4_B4096_K63_C8",
            "B4_Tx_K63_C8",
        ] {
            assert_eq!(parse_label(junk), None, "{junk}");
        }
    }
}
