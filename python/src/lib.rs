//! `semicrf._native`: the native half of the Python package `semicrf` (see `NATIVE.md`
//! beside this crate for the contract with the Python layers).
//!
//! Host (numpy) arrays go to the library's `SemiCrf` (`host`); tensors already on a GPU go
//! to the CUDA engine by device address (`cuda`). Every call releases the GIL while it
//! computes, runs CPU work in a per-process thread pool (`pool`: safe across `fork`), and
//! turns the library's errors and any panic into Python exceptions (`errors`).

mod args;
mod config;
mod cuda;
mod errors;
mod grad;
mod host;
mod kbest;
mod pool;
mod sample;

use pyo3::prelude::*;

/// Parses a memory budget (`"2GiB"`, `"512MiB"`, an int) into bytes.
#[pyfunction]
fn parse_memory_budget(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    Ok(config::budget(Some(value))?)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(host::log_partition, m)?)?;
    m.add_function(wrap_pyfunction!(host::entropy, m)?)?;
    m.add_function(wrap_pyfunction!(host::viterbi, m)?)?;
    m.add_function(wrap_pyfunction!(host::marginals, m)?)?;
    m.add_function(wrap_pyfunction!(host::nll, m)?)?;
    m.add_function(wrap_pyfunction!(host::select, m)?)?;
    m.add_function(wrap_pyfunction!(host::backward, m)?)?;
    m.add_function(wrap_pyfunction!(kbest::kbest, m)?)?;
    m.add_function(wrap_pyfunction!(kbest::posterior_decode, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::cuda_available, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::cuda_log_partition, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::cuda_entropy, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::cuda_viterbi, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::cuda_backward, m)?)?;
    m.add_function(wrap_pyfunction!(parse_memory_budget, m)?)?;
    m.add_function(wrap_pyfunction!(sample::sample, m)?)?;
    m.add_function(wrap_pyfunction!(sample::log_partition_partial, m)?)?;
    m.add_function(wrap_pyfunction!(sample::partial_nll, m)?)?;
    Ok(())
}
