//! Reading the `memory` binary's JSON (`--sweep NAME --json PATH`).

use std::path::Path;

use serde::Deserialize;

use super::Error;
use semicrf_core::Shape;

/// One measurement (or a measurement not made) of the `memory` binary.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryRow {
    /// `T` or `K` for a row of the report's sweeps; `None` for other rows.
    pub sweep: Option<String>,
    /// `(B, T, K, C)`.
    pub shape: Shape,
    /// `streaming`, `scan`, `exact`.
    pub algo: String,
    /// `forward` or `forward+backward`.
    pub pass: String,
    /// Peak heap beyond inputs and outputs in bytes; `None` where it was not run.
    pub peak: Option<u64>,
    /// The engine's `memory_required`, in bytes.
    pub required: u64,
    /// Why it was not run, or the error it returned.
    pub error: Option<String>,
}

/// The `memory` binary's output.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryDoc {
    /// When it ran (RFC 3339), where recorded.
    pub date_utc: Option<String>,
    /// The machine it ran on, where recorded.
    pub machine: Option<String>,
    /// Rayon's threads.
    pub threads: Option<u64>,
    /// The sweep it measured (`full`, `small`), if any.
    pub sweep: Option<String>,
    /// Every row.
    pub rows: Vec<MemoryRow>,
}

#[derive(Deserialize)]
struct RowJson {
    #[serde(default)]
    sweep: Option<String>,
    shape: [usize; 4],
    algorithm: String,
    pass: String,
    peak_beyond_inputs_outputs: u64,
    memory_required: u64,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct SweepJson {
    name: String,
}

#[derive(Deserialize)]
struct DocJson {
    #[serde(default)]
    date_utc: Option<String>,
    #[serde(default)]
    machine: Option<String>,
    #[serde(default)]
    threads: Option<u64>,
    #[serde(default)]
    sweep: Option<SweepJson>,
    rows: Vec<RowJson>,
}

/// Reads the JSON the `memory` binary wrote to `path`.
pub fn load(path: &Path) -> Result<MemoryDoc, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::new(format!(
            "cannot read the memory measurements {}: {e} (write them with `cargo run --release \
             -p semicrf-bench --bin memory -- --sweep full --json PATH`)",
            path.display()
        ))
    })?;
    let doc: DocJson = serde_json::from_str(&text).map_err(|e| {
        Error::new(format!(
            "{} is not the memory binary's JSON: {e}",
            path.display()
        ))
    })?;
    let rows = doc
        .rows
        .into_iter()
        .map(|r| {
            let [b, t, k, c] = r.shape;
            MemoryRow {
                sweep: r.sweep,
                shape: Shape::new(b, t, k, c),
                algo: r.algorithm,
                pass: r.pass,
                peak: r.error.is_none().then_some(r.peak_beyond_inputs_outputs),
                required: r.memory_required,
                error: r.error,
            }
        })
        .collect();
    Ok(MemoryDoc {
        date_utc: doc.date_utc,
        machine: doc.machine,
        threads: doc.threads,
        sweep: doc.sweep.map(|s| s.name),
        rows,
    })
}
