//! The library's errors as Python exceptions, and panics kept from reaching Python as crashes.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::PyErr;
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use semicrf::Error;

/// What a native call fails with before it becomes a Python exception: a library error, or
/// one of the binding's own (wrong dtype, bad argument).
#[derive(Debug)]
pub enum Failure {
    /// An error of the library, mapped by kind.
    Lib(Error),
    /// `TypeError`: a wrong dtype or a value of the wrong Python type.
    Type(String),
    /// `ValueError`: a bad argument the library does not see (a negative length, …).
    Value(String),
    /// `RuntimeError`: a panic (a bug) or a device failure outside the library.
    Runtime(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Lib(e)
    }
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        match f {
            Failure::Lib(e) => lib_error(&e),
            Failure::Type(m) => PyTypeError::new_err(m),
            Failure::Value(m) => PyValueError::new_err(m),
            Failure::Runtime(m) => PyRuntimeError::new_err(m),
        }
    }
}

/// The Python exception of a library error: `MemoryError` for the budget, `RuntimeError`
/// for an unavailable backend or a device failure, `ValueError` for everything the caller
/// gave wrong (the library's message names the tensor and the index).
pub fn lib_error(e: &Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::MemoryBudget { .. } => PyMemoryError::new_err(msg),
        Error::BackendUnavailable { .. } | Error::Device { .. } => PyRuntimeError::new_err(msg),
        _ => PyValueError::new_err(msg),
    }
}

/// The result of a native call's work.
pub type Outcome<T> = Result<T, Failure>;

/// Runs `work`, turning a panic into [`Failure::Runtime`] (`RuntimeError`) so that a bug in
/// the library never takes the Python process down.
pub fn guarded<T>(work: impl FnOnce() -> Outcome<T>) -> Outcome<T> {
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string());
            Err(Failure::Runtime(format!(
                "internal error in semicrf: {what}"
            )))
        }
    }
}
