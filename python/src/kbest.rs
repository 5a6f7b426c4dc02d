//! k-best and posterior decoding on host (numpy) arrays, off the GIL.

use numpy::{IntoPyArray, PyArray1, PyArray2, PyArray4};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use semicrf::ndarray::{Array1, Array2, Array4};
use semicrf::{Decoded, SemiCrf};

use crate::args::{Args, count, with_problem};
use crate::errors::Failure;
use crate::host::{Triples, decodings};

/// Padded k-best lists: `scores (B, k)` (-inf past each count), `segments (B, k, T, 3)`
/// int64 rows `(start, duration, label)` (-1 as padding; `T` the padded length, the most
/// segments a segmentation can have, so the shape depends on the input's only),
/// `num_segments (B, k)` and `counts (B,)` int64.
type Padded<'py> = (
    Bound<'py, PyArray2<f64>>,
    Bound<'py, PyArray4<i64>>,
    Bound<'py, PyArray2<i64>>,
    Bound<'py, PyArray1<i64>>,
);

/// The `k` best segmentations of every sequence, as padded arrays.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn kbest<'py>(py: Python<'py>, kwargs: Option<&Bound<'py, PyDict>>) -> PyResult<Padded<'py>> {
    let args = Args::parse(kwargs, &["k"])?;
    let k = match args.extra("k") {
        Some(v) => count(v, "k")?,
        None => return Err(Failure::Type("missing keyword argument `k`".into()).into()),
    };
    let crf = SemiCrf::with_config(args.config.clone());
    let (lists, t) = with_problem!(py, args, |p| Ok((crf.kbest(p, k)?, p.shape().len)))?;
    let (scores, segments, lens, counts) = padded(&lists, k, t);
    Ok((
        scores.into_pyarray(py),
        segments.into_pyarray(py),
        lens.into_pyarray(py),
        counts.into_pyarray(py),
    ))
}

fn padded(
    lists: &[Vec<Decoded>],
    k: usize,
    s: usize,
) -> (Array2<f64>, Array4<i64>, Array2<i64>, Array1<i64>) {
    let b = lists.len();
    let mut scores = Array2::from_elem((b, k), f64::NEG_INFINITY);
    let mut segments = Array4::from_elem((b, k, s, 3), -1i64);
    let mut lens = Array2::zeros((b, k));
    let counts = lists.iter().map(|l| l.len() as i64).collect();
    for (i, list) in lists.iter().enumerate() {
        for (n, d) in list.iter().enumerate() {
            scores[[i, n]] = d.score;
            lens[[i, n]] = d.segments.len() as i64;
            for (m, seg) in d.segments.iter().enumerate() {
                let row = [seg.start, seg.duration, seg.label];
                for (x, v) in row.into_iter().enumerate() {
                    segments[[i, n, m, x]] = v as i64;
                }
            }
        }
    }
    (scores, segments, lens, counts)
}

/// The posterior decoding of every sequence: `(scores (B,), segments)`, each score the
/// expected number of correctly labelled positions.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn posterior_decode<'py>(
    py: Python<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<(Bound<'py, PyArray1<f64>>, Triples)> {
    let args = Args::parse(kwargs, &[])?;
    let crf = SemiCrf::with_config(args.config.clone());
    let decoded = with_problem!(py, args, |p| Ok(crf.posterior_decode(p)?))?;
    Ok(decodings(py, &decoded))
}
