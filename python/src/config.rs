//! `backend=`, `device=` and `memory_budget=` as the Python API spells them.

use pyo3::prelude::*;
use pyo3::types::PyString;
use semicrf::{Backend, Config, DEFAULT_MEMORY_BUDGET, Device};

use crate::errors::{Failure, Outcome};

/// `"auto"`, `"exact"`, `"scan"` or `"streaming"`; anything else is the library's
/// `BackendUnavailable` (`RuntimeError`) naming it.
pub fn backend(name: &str) -> Outcome<Backend> {
    Ok(name.parse::<Backend>()?)
}

/// `"cpu"`, `"cuda"` (device 0) or `"cuda:N"`.
pub fn device(name: &str) -> Outcome<Device> {
    let bad = || {
        Failure::Value(format!(
            "device {name:?} is not understood: expected \"cpu\", \"cuda\" or \"cuda:N\""
        ))
    };
    match name.trim() {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        s => {
            let n = s.strip_prefix("cuda:").ok_or_else(bad)?;
            n.parse::<usize>().map(Device::Cuda).map_err(|_| bad())
        }
    }
}

/// A memory budget in bytes from an int or a string: `"2GiB"`, `"512 MiB"`, `"1.5GB"`,
/// `"100000"`. Units: B, KB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB (powers of
/// 1024), case-insensitive; the bytes are rounded down.
pub fn parse_budget(s: &str) -> Outcome<u64> {
    let bad = |why: &str| Failure::Value(format!("memory_budget {s:?} is not a size: {why}"));
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| bad("expected a number followed by an optional unit"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad("unknown unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad("too large"));
    }
    Ok(bytes as u64)
}

/// A budget given as a Python int or str, or `None` for the default.
pub fn budget(value: Option<&Bound<'_, PyAny>>) -> Outcome<u64> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(DEFAULT_MEMORY_BUDGET);
    };
    if let Ok(s) = v.cast::<PyString>() {
        return parse_budget(&s.to_cow().map_err(|e| Failure::Type(e.to_string()))?);
    }
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(Failure::Type(
            "memory_budget must be an int or a str, not a bool".into(),
        ));
    }
    match v.extract::<i128>() {
        Ok(n) if (0..=i128::from(u64::MAX)).contains(&n) => Ok(n as u64),
        Ok(n) => Err(Failure::Value(format!(
            "memory_budget = {n} is out of range 0..=2^64-1"
        ))),
        Err(_) => Err(Failure::Type(format!(
            "memory_budget must be an int (bytes) or a str such as \"2GiB\", not {}",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into())
        ))),
    }
}

/// The library's configuration from the three keywords.
pub fn config(
    backend_name: &str,
    device_name: &str,
    budget_value: Option<&Bound<'_, PyAny>>,
) -> Outcome<Config> {
    Ok(Config::new()
        .backend(backend(backend_name)?)
        .device(device(device_name)?)
        .memory_budget(budget(budget_value)?))
}
