//! How a [`SemiCrf`](crate::SemiCrf) runs requests: the backend and the configuration.

use core::fmt;
use core::str::FromStr;

use semicrf_core::{Algorithm, Device, Error, Parallelism, Result};

use crate::DEFAULT_MEMORY_BUDGET;

/// Which algorithm runs a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// Pick by input form and memory budget (see the crate docs).
    #[default]
    Auto,
    /// The exact algorithm, nothing else.
    Exact,
    /// The scan algorithm, nothing else.
    Scan,
    /// The streaming algorithm, nothing else (structured input only).
    Streaming,
}

impl Backend {
    /// Every backend, in the order of [`Backend::name`]'s documentation.
    pub const ALL: [Backend; 4] = [
        Backend::Auto,
        Backend::Exact,
        Backend::Scan,
        Backend::Streaming,
    ];

    /// `auto`, `exact`, `scan` or `streaming`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Exact => "exact",
            Backend::Scan => "scan",
            Backend::Streaming => "streaming",
        }
    }

    /// The forced algorithm, or `None` for [`Backend::Auto`].
    pub fn algorithm(self) -> Option<Algorithm> {
        match self {
            Backend::Auto => None,
            Backend::Exact => Some(Algorithm::Exact),
            Backend::Scan => Some(Algorithm::Scan),
            Backend::Streaming => Some(Algorithm::Streaming),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = Error;

    /// Parses `auto`, `exact`, `scan` or `streaming`; anything else is
    /// [`Error::BackendUnavailable`] naming it.
    fn from_str(s: &str) -> Result<Self> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| Error::BackendUnavailable {
                backend: s.to_string(),
                reason: "unknown backend, expected auto, exact, scan or streaming".into(),
            })
    }
}

/// How a [`SemiCrf`](crate::SemiCrf) runs requests: backend, device, memory budget and threading.
///
/// ```
/// use semicrf::{Backend, Config, Device, Parallelism, DEFAULT_MEMORY_BUDGET};
///
/// let config = Config::new()
///     .backend(Backend::Streaming)
///     .memory_budget(1 << 30)
///     .parallelism(Parallelism::Sequential);
/// assert_eq!(config.get_device(), Device::Cpu);
/// assert_eq!(Config::default().get_memory_budget(), DEFAULT_MEMORY_BUDGET);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    backend: Backend,
    device: Device,
    memory_budget: u64,
    parallelism: Parallelism,
    viterbi_pieces: Option<(usize, usize)>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backend: Backend::Auto,
            device: Device::Cpu,
            memory_budget: DEFAULT_MEMORY_BUDGET,
            parallelism: Parallelism::Rayon,
            viterbi_pieces: None,
        }
    }
}

impl Config {
    /// The default configuration: [`Backend::Auto`], [`Device::Cpu`],
    /// [`DEFAULT_MEMORY_BUDGET`], [`Parallelism::Rayon`].
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the backend (default [`Backend::Auto`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }
    /// Sets the device (default [`Device::Cpu`]).
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }
    /// Sets the memory budget in bytes: the most working memory one call may need, as
    /// estimated by [`EngineInfo::memory_required`](crate::EngineInfo::memory_required) before anything is allocated (default
    /// [`DEFAULT_MEMORY_BUDGET`]). A forced backend is checked against it too.
    pub fn memory_budget(mut self, bytes: u64) -> Self {
        self.memory_budget = bytes;
        self
    }
    /// Sets the threading of CPU engines (default [`Parallelism::Rayon`]).
    pub fn parallelism(mut self, parallelism: Parallelism) -> Self {
        self.parallelism = parallelism;
        self
    }
    /// Decodes one long sequence's Viterbi segmentation from a potentials source on CUDA in up
    /// to `pieces` overlapping pieces at once, each starting `overlap` rows before its share
    /// (by default: one sweep); the CPU ignores it. See
    /// `semicrf_cuda::CudaEngine::viterbi_pieces` for how the pieces are verified to give
    /// the one sweep's segments.
    pub fn viterbi_pieces(mut self, pieces: usize, overlap: usize) -> Self {
        self.viterbi_pieces = Some((pieces.max(1), overlap.max(1)));
        self
    }
    /// The pieces and overlap of [`Config::viterbi_pieces`], if set.
    pub fn get_viterbi_pieces(&self) -> Option<(usize, usize)> {
        self.viterbi_pieces
    }
    /// The backend.
    pub fn get_backend(&self) -> Backend {
        self.backend
    }
    /// The device.
    pub fn get_device(&self) -> Device {
        self.device
    }
    /// The memory budget in bytes.
    pub fn get_memory_budget(&self) -> u64 {
        self.memory_budget
    }
    /// The threading of CPU engines.
    pub fn get_parallelism(&self) -> Parallelism {
        self.parallelism
    }
}
