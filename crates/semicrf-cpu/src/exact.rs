//! The exact algorithm on the CPU (placeholder until implemented).

use semicrf_core::{
    Algorithm, Backward, Decoded, Device, Engine, Error, Problem, Query, Result, Scalar,
    SemiringKind,
};

use crate::Parallelism;

/// The exact engine on the CPU.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ExactEngine {
    /// Threading.
    pub parallelism: Parallelism,
}

impl ExactEngine {
    /// An engine with default settings.
    pub fn new() -> Self {
        Self::default()
    }
}

fn missing() -> Error {
    Error::Unsupported {
        backend: "cpu/exact".into(),
        what: "any request yet (not implemented)".into(),
    }
}

impl<F: Scalar> Engine<F> for ExactEngine {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Exact
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn check(&self, _query: &Query) -> Result<()> {
        Err(missing())
    }
    fn memory_required(&self, _query: &Query) -> u64 {
        0
    }
    fn forward(&self, _problem: &Problem<'_, F>, _semiring: SemiringKind) -> Result<Vec<f64>> {
        Err(missing())
    }
    fn backward(&self, _problem: &Problem<'_, F>, _upstream: &[f64]) -> Result<Backward> {
        Err(missing())
    }
    fn viterbi(&self, _problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        Err(missing())
    }
}
