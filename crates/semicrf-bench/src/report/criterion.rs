//! Reading a criterion run: every `<id>/new/benchmark.json` under the output directory
//! (`target/criterion` or `$CRITERION_HOME`) with its `estimates.json` next to it.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

use super::{Error, parse_label};
use semicrf_core::Shape;

/// One benchmark of the suite's id convention, `[sweep/]{device}/{algo}/{semiring}/B_T_K_C`.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Whether the id starts with `sweep/` (the report's T-sweep).
    pub sweep: bool,
    /// `cpu`, `cuda`, `cuda-log`.
    pub device: String,
    /// `streaming`, `scan`, `exact`.
    pub algo: String,
    /// `log` (forward) or `log_backward` (forward+backward).
    pub semiring: String,
    /// `(B, T, K, C)`.
    pub shape: Shape,
    /// Criterion's median time per iteration, in nanoseconds.
    pub median_ns: f64,
    /// The median's confidence interval, in nanoseconds.
    pub median_ci_ns: (f64, f64),
    /// When criterion wrote the estimate.
    pub written: SystemTime,
}

#[derive(Deserialize)]
struct BenchmarkJson {
    full_id: String,
}

#[derive(Deserialize)]
struct Interval {
    lower_bound: f64,
    upper_bound: f64,
}

#[derive(Deserialize)]
struct Estimate {
    confidence_interval: Interval,
    point_estimate: f64,
}

#[derive(Deserialize)]
struct EstimatesJson {
    median: Estimate,
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        Error::new(format!(
            "{} is not what criterion writes: {e}",
            path.display()
        ))
    })
}

/// Every `benchmark.json` in a directory called `new` below `dir`.
fn benchmark_files(dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), Error> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::new(format!("cannot list {}: {e}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::new(format!("{}: {e}", dir.display())))?;
        let path = entry.path();
        if path.is_dir() {
            benchmark_files(&path, found)?;
        } else if path.file_name().is_some_and(|n| n == "benchmark.json")
            && dir.file_name().is_some_and(|n| n == "new")
        {
            found.push(path);
        }
    }
    Ok(())
}

/// Splits `[sweep/]{device}/{algo}/{semiring}/B{B}_T{T}_K{K}_C{C}`; `None` for other ids.
pub fn parse_id(id: &str) -> Option<(bool, String, String, String, Shape)> {
    let (sweep, rest) = match id.strip_prefix("sweep/") {
        Some(rest) => (true, rest),
        None => (false, id),
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let [device, algo, semiring, label] = parts[..] else {
        return None;
    };
    let shape = parse_label(label)?;
    Some((sweep, device.into(), algo.into(), semiring.into(), shape))
}

/// Reads every benchmark under `dir` whose id follows the suite's convention, sorted by id
/// and `T`. Errors: a missing directory, a directory with no benchmark, unreadable files.
pub fn load(dir: &Path) -> Result<Vec<Timing>, Error> {
    if !dir.is_dir() {
        return Err(Error::new(format!(
            "criterion directory {} not found: run `cargo bench -p semicrf-bench --bench main \
             -- sweep/` first, or pass its output directory with --criterion",
            dir.display()
        )));
    }
    let mut files = Vec::new();
    benchmark_files(dir, &mut files)?;
    let mut out = Vec::new();
    for file in files {
        let bench: BenchmarkJson = read_json(&file)?;
        let Some((sweep, device, algo, semiring, shape)) = parse_id(&bench.full_id) else {
            continue;
        };
        let est_path = file.with_file_name("estimates.json");
        let est: EstimatesJson = read_json(&est_path)?;
        let m = est.median;
        if !(m.point_estimate.is_finite() && m.point_estimate > 0.0) {
            return Err(Error::new(format!(
                "{}: median {} is not a positive time",
                est_path.display(),
                m.point_estimate
            )));
        }
        let written = std::fs::metadata(&est_path)
            .and_then(|md| md.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        out.push(Timing {
            sweep,
            device,
            algo,
            semiring,
            shape,
            median_ns: m.point_estimate,
            median_ci_ns: (
                m.confidence_interval.lower_bound,
                m.confidence_interval.upper_bound,
            ),
            written,
        });
    }
    if out.is_empty() {
        return Err(Error::new(format!(
            "no benchmark of the suite (ids like sweep/cpu/streaming/log/B1_T250_K100_C24) \
             under {}",
            dir.display()
        )));
    }
    out.sort_by(|a, b| {
        (
            a.sweep,
            &a.device,
            &a.algo,
            &a.semiring,
            a.shape.batch,
            a.shape.labels,
        )
            .cmp(&(
                b.sweep,
                &b.device,
                &b.algo,
                &b.semiring,
                b.shape.batch,
                b.shape.labels,
            ))
            .then(a.shape.max_duration.cmp(&b.shape.max_duration))
            .then(a.shape.len.cmp(&b.shape.len))
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_the_convention_parse_and_others_do_not() {
        let (sweep, device, algo, semiring, s) =
            parse_id("sweep/cpu/scan/log_backward/B1_T250_K100_C24").unwrap();
        assert!(sweep);
        assert_eq!((device.as_str(), algo.as_str()), ("cpu", "scan"));
        assert_eq!(semiring, "log_backward");
        assert_eq!(s, Shape::new(1, 250, 100, 24));
        assert!(!parse_id("cuda/streaming/log/B4_T4096_K63_C8").unwrap().0);
        assert!(parse_id("cpu/streaming/log").is_none());
        assert!(parse_id("cpu/streaming/log/B4_T4096_K63").is_none());
        assert!(parse_id("other/bench").is_none());
    }
}
