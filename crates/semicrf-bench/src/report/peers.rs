//! Reading the peer harness's results (`peers/results/*.json` from `peers/run.sh`,
//! `peers/results/gpu/*.json` from `peers/run_gpu.sh`).

use std::path::Path;

use serde::Deserialize;

use super::Error;
use semicrf_core::Shape;

/// One engine's result at one canonical shape.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerResult {
    /// `ours cpu/streaming`, `ours cuda:0/streaming`, `flash-semicrf 0.2.0`, ….
    pub engine: String,
    /// How it ran (the peer's implementation string, or our threads).
    pub detail: String,
    /// `S1` … `S9`.
    pub shape_id: String,
    /// `(B, T, K, C)`.
    pub shape: Shape,
    /// Median forward time in ms.
    pub forward_ms: Option<f64>,
    /// Median forward+backward time in ms.
    pub backward_ms: Option<f64>,
    /// Bytes allocated by one forward+backward call, where measured.
    pub backward_bytes: Option<u64>,
    /// When it ran (RFC 3339), where recorded.
    pub date_utc: Option<String>,
    /// `ok`, `timeout`, … (peers only).
    pub status: Option<String>,
}

#[derive(Deserialize)]
struct ResultJson {
    #[serde(default)]
    engine: Option<String>,
    #[serde(default)]
    peer: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    implementation: Option<String>,
    #[serde(default)]
    threads: Option<u64>,
    shape_id: String,
    shape: [usize; 4],
    #[serde(default)]
    forward_ms: Option<f64>,
    #[serde(default)]
    backward_ms: Option<f64>,
    #[serde(default)]
    backward_peak_bytes: Option<u64>,
    #[serde(default)]
    started_utc: Option<String>,
    #[serde(default)]
    finished_utc: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

/// Every result file (`*.json`) directly in `dir`, sorted by shape and engine.
pub fn load_dir(dir: &Path) -> Result<Vec<PeerResult>, Error> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::new(format!("cannot list peer results {}: {e}", dir.display())))?;
    let mut out = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| Error::new(format!("{}: {e}", dir.display())))?
            .path();
        if path.extension().is_none_or(|x| x != "json") || !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))?;
        let r: ResultJson = serde_json::from_str(&text)
            .map_err(|e| Error::new(format!("{} is not a peer result: {e}", path.display())))?;
        let (engine, detail) = match (&r.engine, &r.peer) {
            (Some(e), _) if e.starts_with("cuda") => (
                format!("ours {e}"),
                "on the GPU, whole calls (copies in and out)".to_string(),
            ),
            (Some(e), _) => (
                format!("ours {e}"),
                r.threads
                    .map_or(String::new(), |t| format!("{t} CPU threads")),
            ),
            (None, Some(p)) => (
                match &r.version {
                    Some(v) => format!("{p} {v}"),
                    None => p.clone(),
                },
                r.implementation.clone().unwrap_or_default(),
            ),
            (None, None) => {
                return Err(Error::new(format!(
                    "{} names neither an engine nor a peer",
                    path.display()
                )));
            }
        };
        let [b, t, k, c] = r.shape;
        out.push(PeerResult {
            engine,
            detail,
            shape_id: r.shape_id,
            shape: Shape::new(b, t, k, c),
            forward_ms: r.forward_ms,
            backward_ms: r.backward_ms,
            backward_bytes: r.backward_peak_bytes,
            date_utc: r.started_utc.or(r.finished_utc),
            status: r.status,
        });
    }
    // S1 … S9 in order (S10 would sort after S9), then by engine.
    out.sort_by(|a, b| {
        (a.shape_id.len(), &a.shape_id, &a.engine).cmp(&(b.shape_id.len(), &b.shape_id, &b.engine))
    });
    Ok(out)
}
