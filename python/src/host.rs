//! The functions on host (numpy) arrays: the library's `SemiCrf` methods, off the GIL.

use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use semicrf::{Backward, EntropySemiring, LogSemiring, Op, SemiCrf};

use crate::args::{Args, listed, with_problem};
use crate::errors::{Failure, Outcome};
use crate::grad::{self, Gold};

/// Segments as Python sees them: `(start, duration, label)`.
pub type Triples = Vec<Vec<(usize, usize, usize)>>;

/// `log Z_b`, `(B,)`.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn log_partition<'py>(
    py: Python<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let args = Args::parse(kwargs, &[])?;
    let crf = SemiCrf::with_config(args.config.clone());
    let v = with_problem!(py, args, |p| Ok(crf.log_partition(p)?))?;
    Ok(PyArray1::from_vec(py, v))
}

/// The entropy of the posterior over segmentations, `(B,)`, in nats.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn entropy<'py>(
    py: Python<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let args = Args::parse(kwargs, &[])?;
    let crf = SemiCrf::with_config(args.config.clone());
    let v = with_problem!(py, args, |p| Ok(crf.entropy(p)?))?;
    Ok(PyArray1::from_vec(py, v))
}

/// The best segmentation of every sequence: `(scores (B,), segments)`.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn viterbi<'py>(
    py: Python<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<(Bound<'py, PyArray1<f64>>, Triples)> {
    let args = Args::parse(kwargs, &[])?;
    let crf = SemiCrf::with_config(args.config.clone());
    let decoded = with_problem!(py, args, |p| Ok(crf.viterbi(p)?))?;
    Ok(decodings(py, &decoded))
}

/// Decodings as `(scores, segments)`.
pub fn decodings<'py>(
    py: Python<'py>,
    decoded: &[semicrf::Decoded],
) -> (Bound<'py, PyArray1<f64>>, Triples) {
    let scores = decoded.iter().map(|d| d.score).collect();
    let segments = decoded
        .iter()
        .map(|d| {
            d.segments
                .iter()
                .map(|s| (s.start, s.duration, s.label))
                .collect()
        })
        .collect();
    (PyArray1::from_vec(py, scores), segments)
}

/// Position, boundary (and, for edges, edge) marginals with log Z, as a dict.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn marginals<'py>(
    py: Python<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let args = Args::parse(kwargs, &[])?;
    let crf = SemiCrf::with_config(args.config.clone());
    let m = with_problem!(py, args, |p| Ok(crf.marginals(p)?))?;
    let d = PyDict::new(py);
    d.set_item("log_z", PyArray1::from_vec(py, m.log_z))?;
    d.set_item("position", m.position.into_pyarray(py))?;
    d.set_item("boundary", m.boundary.into_pyarray(py))?;
    d.set_item("edges", m.edges.map(|e| e.into_pyarray(py)))?;
    Ok(d)
}

/// `log Z_b − score(gold_b)`, `(B,)`.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn nll<'py>(
    py: Python<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let args = Args::parse(kwargs, &["gold"])?;
    let gold = gold_arg(&args)?.ok_or_else(|| missing("gold"))?;
    let crf = SemiCrf::with_config(args.config.clone());
    let v = with_problem!(py, args, |p| {
        let segs = gold.segments(p.shape(), p.lengths())?;
        Ok(crf.nll(p, &segs)?)
    })?;
    Ok(PyArray1::from_vec(py, v))
}

/// The engine that would run `op`, and why.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn select<'py>(
    py: Python<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let args = Args::parse(kwargs, &["op"])?;
    let op_name: String = match args.extra("op") {
        Some(v) => v
            .extract()
            .map_err(|_| Failure::Type("`op` must be a str".into()))?,
        None => "backward".into(),
    };
    let op = match op_name.as_str() {
        "backward" | "marginals" | "nll" => Op::Backward,
        "log_partition" => Op::forward::<LogSemiring>(),
        "entropy" => Op::forward::<EntropySemiring>(),
        "viterbi" => Op::Viterbi,
        other => {
            return Err(Failure::Value(format!(
                "op {other:?} is not one of \"backward\", \"marginals\", \"nll\", \
                 \"log_partition\", \"entropy\", \"viterbi\""
            ))
            .into());
        }
    };
    let crf = SemiCrf::with_config(args.config.clone());
    let s = with_problem!(py, args, |p| Ok(crf.select(p, op)?))?;
    let d = PyDict::new(py);
    d.set_item("device", s.device.to_string())?;
    d.set_item("algorithm", s.algorithm.name())?;
    d.set_item("required", s.required)?;
    d.set_item("reason", s.reason)?;
    Ok(d)
}

/// log Z and the gradients of `Σ_b upstream[b] · log Z_b` (or, with `gold`, of
/// `Σ_b upstream[b] · NLL_b`) with respect to every floating input given.
#[pyfunction]
#[pyo3(signature = (**kwargs))]
pub fn backward<'py>(
    py: Python<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let args = Args::parse(kwargs, &["upstream", "gold"])?;
    let gold = gold_arg(&args)?;
    let upstream: Option<Vec<f64>> = match args.extra("upstream") {
        Some(v) => Some(listed(v).extract().map_err(|_| {
            Failure::Type("`upstream` must be a sequence or 1-D array of floats".into())
        })?),
        None => None,
    };
    let crf = SemiCrf::with_config(args.config.clone());
    let (out, nll): (Backward, Option<Vec<f64>>) = with_problem!(py, args, |p| {
        let batch = p.shape().batch;
        let ones = vec![1.0; batch];
        let up = upstream.as_deref().unwrap_or(&ones);
        let mut out = crf.backward(p, Some(up))?;
        let nll = match &gold {
            None => None,
            Some(gold) => {
                let segs = gold.segments(p.shape(), p.lengths())?;
                let scores = grad::scores(p, &segs)?;
                if let Some(b) = scores.iter().position(|&g| g == f64::NEG_INFINITY) {
                    return Err(Failure::Value(format!(
                        "the gold segmentation of sequence {b} has score -inf (it uses \
                         something a -inf potential forbids): its NLL is +inf, without gradient"
                    )));
                }
                grad::subtract(&mut out.grad, p, &segs, up);
                Some(out.log_z.iter().zip(&scores).map(|(z, g)| z - g).collect())
            }
        };
        Ok((out, nll))
    })?;
    let d = PyDict::new(py);
    d.set_item("log_z", PyArray1::from_vec(py, out.log_z.clone()))?;
    if let Some(n) = nll {
        d.set_item("nll", PyArray1::from_vec(py, n))?;
    }
    let given = args.given();
    for (name, g) in out.grad.fields() {
        if !given.contains(&name) {
            continue;
        }
        let g = g.ok_or_else(|| {
            Failure::Runtime(format!("the backend returned no gradient for `{name}`"))
        })?;
        d.set_item(name, g.to_owned().into_pyarray(py))?;
    }
    d.set_item("boundary", out.boundary_marginals.into_pyarray(py))?;
    Ok(d)
}

fn gold_arg(args: &Args<'_>) -> Outcome<Option<Gold>> {
    args.extra("gold").map(Gold::parse).transpose()
}

fn missing(name: &str) -> Failure {
    Failure::Type(format!("missing keyword argument `{name}`"))
}
