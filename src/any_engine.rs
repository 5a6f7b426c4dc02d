//! [`AnyEngine`]: the one enum boundary between run-time choice and monomorphised engines.

#[cfg(not(all(feature = "cpu", feature = "cuda")))]
use semicrf_core::Error;
use semicrf_core::Parallelism;
use semicrf_core::{
    Algorithm, Backward, Decoded, Device, Engine, EngineInfo, Problem, Query, Result, Scalar,
    Semiring,
};

/// Any engine this build of semicrf can run: the one enum boundary between run-time choice
/// (a device and an algorithm) and the engines' monomorphised code.
///
/// [`SemiCrf`](crate::SemiCrf) picks one for every call; use it directly to loop over engines, e.g. in a
/// harness that compares them.
///
/// ```
/// use semicrf::ndarray::Array3;
/// use semicrf::{Algorithm, AnyEngine, Device, Engine, EngineInfo, LogSemiring, Parallelism};
/// use semicrf::{Potentials, Problem};
///
/// let scores = Array3::<f64>::zeros((1, 4, 2));
/// let lengths = [4];
/// let p: Problem<f64> = Potentials::builder(scores.view(), &lengths, 2).build()?.into();
/// for algorithm in [Algorithm::Exact, Algorithm::Scan, Algorithm::Streaming] {
///     let e = AnyEngine::new(Device::Cpu, algorithm, Parallelism::Sequential)?;
///     let z = e.forward::<LogSemiring>(&p)?;
///     println!("{}: {z:?}", e.name());
/// }
/// # Ok::<(), semicrf::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AnyEngine {
    /// The CPU exact engine.
    #[cfg(feature = "cpu")]
    #[cfg(feature = "cpu")]
    Exact(semicrf_cpu::ExactEngine),
    /// The CPU scan engine.
    #[cfg(feature = "cpu")]
    Scan(semicrf_cpu::ScanEngine),
    /// The CPU streaming engine.
    #[cfg(feature = "cpu")]
    Streaming(semicrf_cpu::StreamingEngine),
    /// A CUDA engine.
    #[cfg(feature = "cuda")]
    Cuda(semicrf_cuda::CudaEngine),
}

/// Evaluates `$body` with `$e` bound to the engine inside an [`AnyEngine`].
#[cfg(any(feature = "cpu", feature = "cuda"))]
macro_rules! dispatch {
    ($chosen:expr, |$e:ident| $body:expr) => {
        match $chosen {
            #[cfg(feature = "cpu")]
            AnyEngine::Exact($e) => $body,
            #[cfg(feature = "cpu")]
            AnyEngine::Scan($e) => $body,
            #[cfg(feature = "cpu")]
            AnyEngine::Streaming($e) => $body,
            #[cfg(feature = "cuda")]
            AnyEngine::Cuda($e) => $body,
        }
    };
}

/// Without any backend the enum has no variants, so no value of it exists.
#[cfg(not(any(feature = "cpu", feature = "cuda")))]
macro_rules! dispatch {
    ($chosen:expr, |$e:ident| $body:expr) => {
        match *$chosen {}
    };
}

impl AnyEngine {
    /// The engine of `algorithm` on `device`, or [`Error::BackendUnavailable`](crate::Error::BackendUnavailable) when that
    /// device is not compiled in.
    pub fn new(
        device: Device,
        algorithm: Algorithm,
        parallelism: Parallelism,
    ) -> Result<AnyEngine> {
        match device {
            Device::Cpu => cpu_engine(algorithm, parallelism),
            Device::Cuda(ordinal) => cuda_engine(algorithm, ordinal),
        }
    }
}

// Without any backend the enum has no variants: every method is an empty match and its
// arguments go unused.
#[cfg_attr(not(any(feature = "cpu", feature = "cuda")), allow(unused_variables))]
impl<F: Scalar> Engine<F> for AnyEngine {
    fn forward<S: Semiring>(&self, problem: &Problem<'_, F>) -> Result<Vec<S::Value>> {
        dispatch!(self, |e| Engine::<F>::forward::<S>(e, problem))
    }
    fn backward(&self, problem: &Problem<'_, F>, upstream: &[f64]) -> Result<Backward> {
        dispatch!(self, |e| Engine::<F>::backward(e, problem, upstream))
    }
    fn viterbi(&self, problem: &Problem<'_, F>) -> Result<Vec<Decoded>> {
        dispatch!(self, |e| Engine::<F>::viterbi(e, problem))
    }
}

#[cfg_attr(not(any(feature = "cpu", feature = "cuda")), allow(unused_variables))]
impl EngineInfo for AnyEngine {
    fn algorithm(&self) -> Algorithm {
        dispatch!(self, |e| e.algorithm())
    }
    fn device(&self) -> Device {
        dispatch!(self, |e| e.device())
    }
    fn name(&self) -> String {
        dispatch!(self, |e| e.name())
    }
    fn check(&self, query: &Query) -> Result<()> {
        dispatch!(self, |e| e.check(query))
    }
    fn memory_required(&self, query: &Query) -> Result<u64> {
        dispatch!(self, |e| e.memory_required(query))
    }
}

#[cfg(feature = "cpu")]
pub(crate) fn cpu_threads(parallelism: Parallelism) -> usize {
    semicrf_cpu::threads(parallelism)
}

#[cfg(not(feature = "cpu"))]
pub(crate) fn cpu_threads(_parallelism: Parallelism) -> usize {
    1
}

#[cfg(feature = "cpu")]
fn cpu_engine(algorithm: Algorithm, parallelism: Parallelism) -> Result<AnyEngine> {
    Ok(match algorithm {
        Algorithm::Exact => {
            AnyEngine::Exact(semicrf_cpu::ExactEngine::new().parallelism(parallelism))
        }
        Algorithm::Scan => AnyEngine::Scan(semicrf_cpu::ScanEngine::new().parallelism(parallelism)),
        Algorithm::Streaming => {
            AnyEngine::Streaming(semicrf_cpu::StreamingEngine::new().parallelism(parallelism))
        }
    })
}

#[cfg(not(feature = "cpu"))]
fn cpu_engine(algorithm: Algorithm, _parallelism: Parallelism) -> Result<AnyEngine> {
    Err(Error::BackendUnavailable {
        backend: format!("cpu/{algorithm}"),
        reason: "semicrf was built without the `cpu` feature".into(),
    })
}

#[cfg(feature = "cuda")]
fn cuda_engine(algorithm: Algorithm, ordinal: usize) -> Result<AnyEngine> {
    Ok(AnyEngine::Cuda(semicrf_cuda::CudaEngine::new(
        algorithm, ordinal,
    )))
}

#[cfg(not(feature = "cuda"))]
fn cuda_engine(algorithm: Algorithm, _ordinal: usize) -> Result<AnyEngine> {
    Err(Error::BackendUnavailable {
        backend: format!("cuda/{algorithm}"),
        reason: "semicrf was built without the `cuda` feature".into(),
    })
}
