//! CUDA backends of semicrf — **not implemented yet**.
//!
//! This crate will hold the CUDA implementations of the three semicrf algorithms (exact, scan
//! and streaming), with kernels compiled at run time by NVRTC for the device's own
//! architecture. Today it only provides [`CudaEngine`], an [`Engine`] whose every method
//! reports [`Error::BackendUnavailable`] with the reason "the CUDA kernels are not implemented
//! yet", so that the `semicrf` facade, its CLI and the test suites can already name CUDA
//! devices and get an honest, typed answer instead of a panic.
//!
//! # When not to use it
//!
//! For now, always: use the CPU engines of `semicrf-cpu` (through the `semicrf` facade). This
//! crate never touches the CUDA driver at run time yet, so it is safe to compile into any
//! binary, on machines with or without a GPU.
//!
//! ```
//! use semicrf_core::{Algorithm, EngineInfo, Error, Form, LogSemiring, Op, Query, Shape};
//! use semicrf_cuda::CudaEngine;
//!
//! let engine = CudaEngine::new(Algorithm::Streaming, 0);
//! let query = Query {
//!     shape: Shape::new(1, 8, 3, 2),
//!     form: Form::Structured { duration_dependent_transition: false },
//!     op: Op::forward::<LogSemiring>(),
//!     dtype_bytes: 4,
//!     threads: 1,
//! };
//! let err = engine.check(&query).unwrap_err();
//! assert!(matches!(err, Error::BackendUnavailable { .. }));
//! assert_eq!(engine.name(), "cuda:0/streaming");
//! ```
//!
//! # Algorithms
//!
//! The planned engines mirror the CPU ones (per sequence):
//!
//! | algorithm | input | time | working memory |
//! |---|---|---|---|
//! | exact | edges (materialised if structured) | `O(T·K·C²)` | `O(T·K·C²)` edges + `O(T·C)` tables |
//! | scan | edges (materialised if structured) | `O(T·K·C²)` | edges + `O(K·C)` ring, checkpoints |
//! | streaming | structured | `O(T·C·(C+K))` (2-D transition) | `O(K·C + sqrt(T·K)·C)` |
//!
//! # Crate features
//!
//! None. The crate has no CUDA dependency yet: it builds anywhere, without a CUDA toolkit or
//! a GPU.
#![deny(missing_docs)]

use semicrf_core::{
    Algorithm, Backward, Decoded, Device, Engine, EngineInfo, Error, Problem, Query, Result,
    Scalar, Semiring,
};

/// Why every [`CudaEngine`] request fails today.
pub const NOT_IMPLEMENTED: &str = "the CUDA kernels are not implemented yet";

/// One algorithm on one CUDA device.
///
/// Every method returns [`Error::BackendUnavailable`] (backend `cuda/<algorithm>`, reason
/// [`NOT_IMPLEMENTED`]); [`EngineInfo::check`] does so too, so the selector skips it with
/// that reason. No driver call is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CudaEngine {
    algorithm: Algorithm,
    ordinal: usize,
}

impl CudaEngine {
    /// The engine of `algorithm` on CUDA device `ordinal`.
    pub fn new(algorithm: Algorithm, ordinal: usize) -> Self {
        CudaEngine { algorithm, ordinal }
    }

    /// The CUDA device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The error every request gets.
    pub fn unavailable(&self) -> Error {
        Error::BackendUnavailable {
            backend: format!("cuda/{}", self.algorithm),
            reason: NOT_IMPLEMENTED.into(),
        }
    }
}

impl EngineInfo for CudaEngine {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }
    fn check(&self, _query: &Query) -> Result<()> {
        Err(self.unavailable())
    }
    fn memory_required(&self, _query: &Query) -> Result<u64> {
        Err(self.unavailable())
    }
}

impl<F: Scalar> Engine<F> for CudaEngine {
    fn forward<S: Semiring>(&self, _problem: &Problem<'_, F>) -> Result<Vec<S::Value>> {
        Err(self.unavailable())
    }
    fn backward(&self, _problem: &Problem<'_, F>, _upstream: &[f64]) -> Result<Backward> {
        Err(self.unavailable())
    }
    fn viterbi(&self, _problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        Err(self.unavailable())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use semicrf_core::{Form, Op, Shape};

    fn query(op: Op) -> Query {
        Query {
            shape: Shape::new(2, 5, 3, 4),
            form: Form::Edges,
            op,
            dtype_bytes: 8,
            threads: 1,
        }
    }

    #[test]
    fn every_algorithm_reports_that_the_kernels_are_missing() {
        for a in [Algorithm::Exact, Algorithm::Scan, Algorithm::Streaming] {
            let e = CudaEngine::new(a, 1);
            let err = e.check(&query(Op::Backward)).unwrap_err();
            assert_eq!(
                err,
                Error::BackendUnavailable {
                    backend: format!("cuda/{a}"),
                    reason: NOT_IMPLEMENTED.into()
                }
            );
            assert_eq!(e.device(), Device::Cuda(1));
        }
    }
}
