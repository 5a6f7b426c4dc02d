//! Posterior samples and partially labelled sequences on host (numpy) arrays: the library's
//! `SemiCrf::sample`, `log_partition_partial` and `partial_nll`, off the GIL.

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use semicrf::SemiCrf;
use semicrf::ndarray::Array2;
use semicrf::partial::{restrict, restricted_problem};

use crate::args::{Args, with_problem};
use crate::errors::{Failure, Outcome};
use crate::host::Triples;

/// `n` samples per sequence from the posterior over segmentations: `samples[b][i]` a list of
/// `(start, duration, label)`; with `partial_labels`, from the posterior restricted to the
/// segmentations that agree with them.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn sample<'py>(py: Python<'py>, kwargs: Option<&Bound<'py, PyDict>>) -> PyResult<Vec<Triples>> {
    let args = Args::parse(kwargs, &["n", "seed", "partial_labels"])?;
    let n: usize = match args.extra("n") {
        Some(v) => v
            .extract()
            .map_err(|_| Failure::Type("`n` must be a non-negative int".into()))?,
        None => return Err(Failure::Type("missing keyword argument `n`".into()).into()),
    };
    let seed: u64 = match args.extra("seed") {
        Some(v) => v
            .extract()
            .map_err(|_| Failure::Type("`seed` must be an int in 0..2**64".into()))?,
        None => 0,
    };
    let labels = match args.extra("partial_labels") {
        Some(v) if !v.is_none() => Some(partial_labels(&args)?),
        _ => None,
    };
    let crf = SemiCrf::with_config(args.config.clone());
    let samples = with_problem!(py, args, |p| match &labels {
        None => Ok(crf.sample(p, n, seed)?),
        Some(labels) => {
            let restricted = restrict(p, labels.view())?;
            Ok(crf.sample(&restricted_problem(p, &restricted)?, n, seed)?)
        }
    })?;
    Ok(samples
        .into_iter()
        .map(|per| {
            per.into_iter()
                .map(|y| y.iter().map(|s| (s.start, s.duration, s.label)).collect())
                .collect()
        })
        .collect())
}

/// `log Z_partial_b`, `(B,)`: log Z over the segmentations that agree with `partial_labels`.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn log_partition_partial<'py>(
    py: Python<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let args = Args::parse(kwargs, &["partial_labels"])?;
    let labels = partial_labels(&args)?;
    let crf = SemiCrf::with_config(args.config.clone());
    let v = with_problem!(py, args, |p| Ok(
        crf.log_partition_partial(p, labels.view())?
    ))?;
    Ok(PyArray1::from_vec(py, v))
}

/// `log Z_b - log Z_partial_b`, `(B,)` (`+inf` where nothing agrees).
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn partial_nll<'py>(
    py: Python<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let args = Args::parse(kwargs, &["partial_labels"])?;
    let labels = partial_labels(&args)?;
    let crf = SemiCrf::with_config(args.config.clone());
    let v = with_problem!(py, args, |p| Ok(crf.partial_nll(p, labels.view())?))?;
    Ok(PyArray1::from_vec(py, v))
}

/// `partial_labels` as a `(B, T)` array: a list of `B` lists of `T` ints.
fn partial_labels(args: &Args<'_>) -> Outcome<Array2<i64>> {
    let v = args
        .extra("partial_labels")
        .ok_or_else(|| Failure::Type("missing keyword argument `partial_labels`".into()))?;
    let rows: Vec<Vec<i64>> = v
        .extract()
        .map_err(|_| Failure::Type("`partial_labels` must be a (B, T) array of integers".into()))?;
    let t = rows.first().map_or(0, Vec::len);
    if let Some(b) = rows.iter().position(|r| r.len() != t) {
        return Err(Failure::Value(format!(
            "`partial_labels` is ragged: row {b} has {} entries, expected {t}",
            rows[b].len()
        )));
    }
    let b = rows.len();
    Array2::from_shape_vec((b, t), rows.into_iter().flatten().collect())
        .map_err(|e| Failure::Value(format!("`partial_labels`: {e}")))
}
