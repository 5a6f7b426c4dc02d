//! # semicrf-genes
//!
//! A gene finder built on the [`semicrf`] library: a semi-Markov CRF whose segments are
//! coding exons (four types, three reading frames, both strands), introns and intergenic
//! stretches, whose weights are counted from annotated genes (the model read as a generative
//! semi-Markov model) and then trained by minimising the negative log-likelihood with the
//! library's exact gradients, and decoded with its Viterbi algorithm. A model counted from
//! the 486 fly genes of the AUGUSTUS tutorial ships with the crate ([`embedded::model`]).
//!
//! The label set and the gene structure it enforces are described in [`labels`]; the
//! features and parameters in [`model`]; training in [`train`]; the exon-level accuracy
//! measures in [`eval`]. The `semicrf-genes` binary wraps them as `train`, `predict`,
//! `eval` and `demo` subcommands.
//!
//! ```no_run
//! use semicrf_genes::{data, eval, predict, train};
//! # fn main() -> Result<(), semicrf_genes::Error> {
//! let training = data::read_genbank("genes.gb.train".as_ref())?;
//! let test = data::read_genbank("genes.gb.test".as_ref())?;
//! let (model, report) = train::train(&training, &train::TrainConfig::default())?;
//! let predicted = predict::predict(&model, &test, &predict::PredictConfig::default())?;
//! let m = eval::evaluate(&test, &predicted);
//! println!("exon F1 {:.3} after {:.0} s of training", m.exon.f1(), report.seconds);
//! # Ok(()) }
//! ```

mod ahead;
pub mod data;
pub mod dna;
pub mod embedded;
pub mod eval;
pub mod labels;
pub mod model;
pub mod modelfile;
pub mod plot;
pub mod predict;
pub mod train;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Input that is not what it should be; `what` names the record or line.
    #[error("{file}: {what}")]
    Input {
        /// The file (or embedded data set).
        file: String,
        /// What is wrong, and where.
        what: String,
    },
    /// The semi-CRF library refused or failed.
    #[error(transparent)]
    Crf(#[from] semicrf::Error),
    /// Training or decoding went wrong.
    #[error("{0}")]
    Model(String),
}

impl Error {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
