//! Model files: JSON with the format's name, the structure's constants and the weights.
//! Weights are written with enough digits to read back bit for bit.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::labels::{C, PIECE};
use crate::model::Model;

/// The format's name, checked on reading.
pub const FORMAT: &str = "semicrf-genes/1";

#[derive(Serialize, Deserialize)]
struct File {
    format: String,
    labels: usize,
    piece: usize,
    max_exon: usize,
    weights: Vec<f64>,
}

/// Writes a model.
pub fn save(model: &Model, path: &Path) -> Result<(), Error> {
    let f = File {
        format: FORMAT.into(),
        labels: C,
        piece: PIECE,
        max_exon: model.layout.k,
        weights: model.w.clone(),
    };
    let text = serde_json::to_string(&f).map_err(|e| Error::Model(e.to_string()))?;
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

/// Reads a model written by [`save`].
pub fn load(path: &Path) -> Result<Model, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    from_json(&text, &path.display().to_string())
}

/// Reads a model from JSON text; `source` names it in errors.
pub fn from_json(text: &str, source: &str) -> Result<Model, Error> {
    let bad = |what: String| Error::Input {
        file: source.to_string(),
        what,
    };
    let f: File = serde_json::from_str(text).map_err(|e| bad(format!("not a model file: {e}")))?;
    if f.format != FORMAT || f.labels != C || f.piece != PIECE {
        return Err(bad(format!(
            "a model of format {:?} with {} labels and pieces of {}, expected {FORMAT:?}, {C}, {PIECE}",
            f.format, f.labels, f.piece
        )));
    }
    if f.max_exon == 0 || f.max_exon > 1 << 20 {
        return Err(bad(format!("max_exon {} out of range", f.max_exon)));
    }
    let mut model = Model::new(f.max_exon);
    if f.weights.len() != model.w.len() {
        return Err(bad(format!(
            "{} weights, expected {}",
            f.weights.len(),
            model.w.len()
        )));
    }
    if let Some(i) = f.weights.iter().position(|w| !w.is_finite()) {
        return Err(bad(format!("weight {i} is not finite")));
    }
    model.w = f.weights;
    Ok(model)
}
