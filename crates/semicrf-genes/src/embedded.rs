//! The embedded default data: a small subset of the *Drosophila melanogaster* gene sets of
//! the AUGUSTUS tutorial (see `data/README.md` in this crate for their origin, license and
//! attribution), so that the demo runs with no download, and the model trained on the
//! tutorial's full training set (`models/README.md`), which `predict` uses by default.

use crate::Error;
use crate::data::{Record, parse_genbank};
use crate::model::Model;

/// Training genes: the first records of the tutorial's `genes.gb.train`.
pub const TRAIN: &str = include_str!("../data/train.gb");
/// Test genes: all 100 records of the tutorial's `genes.gb.test`.
pub const TEST: &str = include_str!("../data/test.gb");

/// The embedded training records.
pub fn training() -> Result<Vec<Record>, Error> {
    parse_genbank(TRAIN.as_bytes(), "embedded data/train.gb")
}

/// The embedded test records.
pub fn test() -> Result<Vec<Record>, Error> {
    parse_genbank(TEST.as_bytes(), "embedded data/test.gb")
}

/// The shipped model: trained on the tutorial's 486 training genes (`models/README.md`).
pub const MODEL: &str = include_str!("../models/fly.json");

/// The shipped model, read.
pub fn model() -> Result<Model, Error> {
    crate::modelfile::from_json(MODEL, "embedded models/fly.json")
}
