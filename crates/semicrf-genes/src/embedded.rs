//! The embedded default data: a small subset of the *Drosophila melanogaster* gene sets of
//! the AUGUSTUS tutorial (see `data/README.md` in this crate for their origin, license and
//! attribution), so that the demo runs with no download.

use crate::Error;
use crate::data::{Record, parse_genbank};

/// Training genes: the first records of the tutorial's `genes.gb.train`.
pub const TRAIN: &str = include_str!("../data/train.gb");
/// Test genes: the first records of the tutorial's `genes.gb.test`.
pub const TEST: &str = include_str!("../data/test.gb");

/// The embedded training records.
pub fn training() -> Result<Vec<Record>, Error> {
    parse_genbank(TRAIN.as_bytes(), "embedded data/train.gb")
}

/// The embedded test records.
pub fn test() -> Result<Vec<Record>, Error> {
    parse_genbank(TEST.as_bytes(), "embedded data/test.gb")
}
