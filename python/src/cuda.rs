//! Tensors already on a GPU (a PyTorch CUDA tensor's `data_ptr()`): the CUDA engine reads
//! them in place, and writes the gradients into buffers the caller allocated
//! (`CudaEngine::backward_into`), ordered before later work on the caller's stream. See
//! `python/NATIVE.md`.

use numpy::{PyArray1, PyReadonlyArray1, PyReadonlyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use semicrf::cuda::cudarc::driver::sys::CUstream;
use semicrf::cuda::{
    CudaEngine, DeviceArray, DeviceArrayMut, DeviceOutputs, DevicePotentials, Dtype, HostBackward,
};
use semicrf::ndarray::ArrayViewD;
use semicrf::{Algorithm, EntropySemiring, LogSemiring, entropies};

use crate::args::{lengths_of, listed};
use crate::errors::{Failure, Outcome, guarded};
use crate::host::{Triples, decodings};

/// Whether CUDA device `device` can run the engine, and the reason when it cannot.
#[pyfunction]
#[pyo3(signature = (device=0))]
pub fn cuda_available(py: Python<'_>, device: usize) -> (bool, String) {
    let r =
        py.detach(|| guarded(|| Ok(CudaEngine::new(Algorithm::Streaming, device).available()?)));
    match r {
        Ok(()) => (true, String::new()),
        Err(Failure::Lib(e)) => (false, e.to_string()),
        Err(Failure::Type(m) | Failure::Value(m) | Failure::Runtime(m)) => (false, m),
    }
}

/// A shared parameter: a host `float64` array, or a device array of the problem's dtype (its
/// address and shape).
enum Param<'py> {
    Host(PyReadonlyArrayDyn<'py, f64>),
    Device(u64, Vec<usize>),
}

impl Param<'_> {
    fn len(&self) -> usize {
        match self {
            Param::Host(a) => a.as_array().len(),
            Param::Device(_, shape) => shape.iter().product(),
        }
    }
}

/// The arguments every `cuda_*` function takes: the problem on the device.
struct OnDevice<'py> {
    scores: u64,
    dims: (usize, usize, usize),
    dtype: Dtype,
    lengths: Vec<usize>,
    max_duration: usize,
    params: Vec<(&'static str, Param<'py>)>,
    begin_boundary: Option<u64>,
    end_boundary: Option<u64>,
    stream: usize,
    device: usize,
}

fn dtype_of(name: &str) -> Outcome<Dtype> {
    match name.strip_prefix("torch.").unwrap_or(name) {
        "float32" => Ok(Dtype::F32),
        "float64" => Ok(Dtype::F64),
        other => Err(Failure::Type(format!(
            "dtype {other:?}: device arrays must be float32 or float64"
        ))),
    }
}

fn address(name: &str, p: u64) -> Outcome<u64> {
    if p == 0 {
        return Err(Failure::Value(format!("`{name}` is a null device address")));
    }
    Ok(p)
}

impl<'py> OnDevice<'py> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        scores: u64,
        shape: (usize, usize, usize),
        dtype: &str,
        lengths: &Bound<'py, PyAny>,
        max_duration: usize,
        stream: usize,
        device: usize,
        shared: [(&'static str, Option<Bound<'py, PyAny>>); 4],
        boundaries: (Option<u64>, Option<u64>),
    ) -> Outcome<Self> {
        let mut params = Vec::new();
        for (name, v) in shared {
            if let Some(v) = v.filter(|v| !v.is_none()) {
                let p = if let Ok((at, shape)) = v.extract::<(u64, Vec<usize>)>() {
                    Param::Device(address(name, at)?, shape)
                } else {
                    Param::Host(v.extract::<PyReadonlyArrayDyn<'py, f64>>().map_err(|_| {
                        Failure::Type(format!(
                            "`{name}` must be a host numpy float64 array or a (device \
                             address, shape) pair"
                        ))
                    })?)
                };
                params.push((name, p));
            }
        }
        Ok(OnDevice {
            scores: address("scores", scores)?,
            dims: shape,
            dtype: dtype_of(dtype)?,
            lengths: lengths_of(lengths)?,
            max_duration,
            params,
            begin_boundary: boundaries
                .0
                .map(|p| address("begin_boundary", p))
                .transpose()?,
            end_boundary: boundaries
                .1
                .map(|p| address("end_boundary", p))
                .transpose()?,
            stream,
            device,
        })
    }

    /// Runs `work` off the GIL on the engine and the checked device problem.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        work: impl FnOnce(&CudaEngine, &DevicePotentials<'_>) -> Outcome<T> + Send,
    ) -> Outcome<T> {
        let views: Vec<(&'static str, Given<'_>)> = self
            .params
            .iter()
            .map(|(n, a)| match a {
                Param::Host(a) => (*n, Given::Host(a.as_array())),
                Param::Device(p, shape) => (*n, Given::Device(*p, shape.as_slice())),
            })
            .collect();
        let (device, dims, dtype, lengths) = (self.device, self.dims, self.dtype, &self.lengths);
        let (scores, bb, eb) = (self.scores, self.begin_boundary, self.end_boundary);
        let (caller, max_duration) = (self.stream, self.max_duration);
        py.detach(move || {
            guarded(|| {
                let engine = CudaEngine::new(Algorithm::Streaming, device);
                // No device address is touched on a machine that cannot run the engine.
                engine.available()?;
                let (b, t, c) = dims;
                let n = b * t * c;
                let stream = caller as CUstream;
                // SAFETY: the caller (the torch layer) passes live, contiguous tensors of
                // `n` elements of `dtype` on `device`, written on `stream`, kept alive until
                // this returns (python/NATIVE.md); the builder checks the allocations' sizes.
                let arr_n = |p: u64, n| unsafe { DeviceArray::from_raw(p, n, dtype, stream) };
                let arr = |p: u64| arr_n(p, n);
                let mut builder =
                    DevicePotentials::builder(arr(scores), dims, lengths, max_duration);
                for (name, v) in &views {
                    builder = match (*name, v) {
                        ("transition", Given::Host(v)) => builder.transition(v.view()),
                        ("duration", Given::Host(v)) => builder.duration(v.view()),
                        ("start", Given::Host(v)) => builder.start(v.view()),
                        (_, Given::Host(v)) => builder.end(v.view()),
                        (name, Given::Device(p, shape)) => {
                            let a = arr_n(*p, shape.iter().product());
                            match name {
                                "transition" => builder.transition_on_device(a, shape),
                                "duration" => builder.duration_on_device(a, shape),
                                "start" => builder.start_on_device(a, shape),
                                _ => builder.end_on_device(a, shape),
                            }
                        }
                    };
                }
                if let Some(p) = bb {
                    builder = builder.begin_boundary(arr(p));
                }
                if let Some(p) = eb {
                    builder = builder.end_boundary(arr(p));
                }
                let p = builder.build(&engine)?;
                work(&engine, &p)
            })
        })
    }
}

macro_rules! device_fn {
    ($(#[$doc:meta])* $name:ident, $ret:ty, |$py:ident, $call:ident| $body:expr) => {
        $(#[$doc])*
        #[pyfunction]
        #[pyo3(signature = (*, scores, shape, dtype, lengths, max_duration, stream, device,
            transition=None, duration=None, start=None, end=None,
            begin_boundary=None, end_boundary=None))]
        #[allow(clippy::too_many_arguments)]
        pub fn $name<'py>(
            $py: Python<'py>,
            scores: u64,
            shape: (usize, usize, usize),
            dtype: &str,
            lengths: &Bound<'py, PyAny>,
            max_duration: usize,
            stream: usize,
            device: usize,
            transition: Option<Bound<'py, PyAny>>,
            duration: Option<Bound<'py, PyAny>>,
            start: Option<Bound<'py, PyAny>>,
            end: Option<Bound<'py, PyAny>>,
            begin_boundary: Option<u64>,
            end_boundary: Option<u64>,
        ) -> PyResult<$ret> {
            let $call = OnDevice::new(
                scores, shape, dtype, lengths, max_duration, stream, device,
                [("transition", transition), ("duration", duration), ("start", start),
                 ("end", end)],
                (begin_boundary, end_boundary),
            )?;
            $body
        }
    };
}

device_fn!(
    /// `log Z_b` of a problem on the device, `(B,)` on the host.
    cuda_log_partition, Bound<'py, PyArray1<f64>>, |py, call| {
        let v = call.run(py, |e, p| Ok(e.forward_on_device::<LogSemiring>(p)?))?;
        Ok(PyArray1::from_vec(py, v))
    }
);

device_fn!(
    /// The posterior entropy of a problem on the device, `(B,)` on the host.
    cuda_entropy, Bound<'py, PyArray1<f64>>, |py, call| {
        let v = call.run(py, |e, p| Ok(entropies(&e.forward_on_device::<EntropySemiring>(p)?)?))?;
        Ok(PyArray1::from_vec(py, v))
    }
);

device_fn!(
    /// Viterbi decodings of a problem on the device: `(scores (B,), segments)`.
    cuda_viterbi, (Bound<'py, PyArray1<f64>>, Triples), |py, call| {
        let d = call.run(py, |e, p| Ok(e.viterbi_on_device(p)?))?;
        Ok(decodings(py, &d))
    }
);

/// Forward and backward of a problem on the device; the `(B, T, C)` gradients (weighted by
/// `upstream`), the `(B, T)` boundary marginals, log Z and the shared parameters' gradients
/// (where `out_*` gives them) are written into the caller's device buffers of `dtype`,
/// ordered before later work on `stream`. Returns log Z and the shared parameters'
/// gradients that have no output (one flat float64 array) on the host; with `queued`, which
/// needs `out_log_z` and an output for every shared parameter given, nothing (an empty
/// dict), and the call may return before the device has done its work
/// (`CudaEngine::backward_into_queued`).
#[pyfunction]
#[pyo3(signature = (*, scores, shape, dtype, lengths, max_duration, stream, device, upstream,
    out_scores, transition=None, duration=None, start=None, end=None, begin_boundary=None,
    end_boundary=None, out_begin_boundary=None, out_end_boundary=None, out_boundary=None,
    out_log_z=None, out_transition=None, out_duration=None, out_start=None, out_end=None,
    queued=false))]
#[allow(clippy::too_many_arguments)]
pub fn cuda_backward<'py>(
    py: Python<'py>,
    scores: u64,
    shape: (usize, usize, usize),
    dtype: &str,
    lengths: &Bound<'py, PyAny>,
    max_duration: usize,
    stream: usize,
    device: usize,
    upstream: &Bound<'py, PyAny>,
    out_scores: u64,
    transition: Option<Bound<'py, PyAny>>,
    duration: Option<Bound<'py, PyAny>>,
    start: Option<Bound<'py, PyAny>>,
    end: Option<Bound<'py, PyAny>>,
    begin_boundary: Option<u64>,
    end_boundary: Option<u64>,
    out_begin_boundary: Option<u64>,
    out_end_boundary: Option<u64>,
    out_boundary: Option<u64>,
    out_log_z: Option<u64>,
    out_transition: Option<u64>,
    out_duration: Option<u64>,
    out_start: Option<u64>,
    out_end: Option<u64>,
    queued: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let call = OnDevice::new(
        scores,
        shape,
        dtype,
        lengths,
        max_duration,
        stream,
        device,
        [
            ("transition", transition),
            ("duration", duration),
            ("start", start),
            ("end", end),
        ],
        (begin_boundary, end_boundary),
    )?;
    let need = |given: Option<u64>, out: Option<u64>, name: &str| -> Outcome<Option<u64>> {
        match (given, out) {
            (Some(_), None) => Err(Failure::Value(format!(
                "`{name}` is given: `out_{name}` must be a device buffer for its gradient"
            ))),
            (Some(_), Some(o)) => Ok(Some(address(&format!("out_{name}"), o)?)),
            (None, _) => Ok(None),
        }
    };
    let targets = Targets {
        scores: address("out_scores", out_scores)?,
        begin_boundary: need(begin_boundary, out_begin_boundary, "begin_boundary")?,
        end_boundary: need(end_boundary, out_end_boundary, "end_boundary")?,
        boundary: out_boundary
            .map(|p| address("out_boundary", p))
            .transpose()?,
        log_z: out_log_z.map(|p| address("out_log_z", p)).transpose()?,
        shared: shared_targets(
            &call,
            [
                ("transition", out_transition),
                ("duration", out_duration),
                ("start", out_start),
                ("end", out_end),
            ],
        )?,
    };
    if queued {
        let missing = call
            .params
            .iter()
            .find(|(n, _)| !targets.shared.iter().any(|(m, _, _)| m == n));
        if let Some((name, _)) = missing {
            return Err(Failure::Value(format!(
                "`queued` returns nothing on the host: `{name}` needs `out_{name}`"
            ))
            .into());
        }
        if targets.log_z.is_none() {
            return Err(Failure::Value(
                "`queued` returns nothing on the host: log Z needs `out_log_z`".into(),
            )
            .into());
        }
    }
    let upstream = floats_of(upstream)?;
    let (dtype, (bn, t, c)) = (call.dtype, call.dims);
    let out = call.run(py, |e, p| {
        let caller = stream as CUstream;
        // SAFETY: the caller (the torch layer) passes live, contiguous tensors of `len`
        // elements of `dtype` on `device`, allocated on `stream`, kept alive until this
        // returns and used by nothing else meanwhile (python/NATIVE.md); the engine checks
        // the allocations' sizes and orders `stream` after its writes.
        let arr = |p: u64, len: usize| unsafe { DeviceArrayMut::from_raw(p, len, dtype, caller) };
        let n = bn * t * c;
        let mut outs = DeviceOutputs::new(arr(targets.scores, n));
        if let Some(p) = targets.begin_boundary {
            outs = outs.begin_boundary(arr(p, n));
        }
        if let Some(p) = targets.end_boundary {
            outs = outs.end_boundary(arr(p, n));
        }
        if let Some(p) = targets.boundary {
            outs = outs.boundary(arr(p, bn * t));
        }
        if let Some(p) = targets.log_z {
            outs = outs.log_z(arr(p, bn));
        }
        for &(name, p, len) in &targets.shared {
            outs = match name {
                "transition" => outs.transition(arr(p, len)),
                "duration" => outs.duration(arr(p, len)),
                "start" => outs.start(arr(p, len)),
                _ => outs.end(arr(p, len)),
            };
        }
        if queued {
            e.backward_into_queued(p, &upstream, outs)?;
            return Ok(None);
        }
        Ok(Some(out_host(e.backward_into(p, &upstream, outs)?)))
    })?;
    let d = PyDict::new(py);
    let Some(out) = out else { return Ok(d) };
    d.set_item("log_z", PyArray1::from_vec(py, out.0))?;
    let mut shared = Vec::new();
    for (name, a) in out.1 {
        let written = targets.shared.iter().any(|(n, _, _)| *n == name);
        if !written && call.params.iter().any(|(n, _)| *n == name) {
            shared.extend(a.iter().copied());
        }
    }
    d.set_item("shared", PyArray1::from_vec(py, shared))?;
    Ok(d)
}

/// `upstream`: a 1-D float64 array (read in place) or any sequence of floats.
fn floats_of(v: &Bound<'_, PyAny>) -> Outcome<Vec<f64>> {
    if let Ok(a) = v.extract::<PyReadonlyArray1<'_, f64>>() {
        return Ok(a.as_array().to_vec());
    }
    listed(v)
        .extract()
        .map_err(|_| Failure::Type("`upstream` must be a sequence or 1-D array of floats".into()))
}

type HostResults = (Vec<f64>, Vec<(&'static str, semicrf::ndarray::ArrayD<f64>)>);

fn out_host(out: HostBackward) -> HostResults {
    (
        out.log_z,
        vec![
            ("transition", out.transition),
            ("duration", out.duration.into_dyn()),
            ("start", out.start.into_dyn()),
            ("end", out.end.into_dyn()),
        ],
    )
}

/// The caller's device buffers.
struct Targets {
    scores: u64,
    begin_boundary: Option<u64>,
    end_boundary: Option<u64>,
    boundary: Option<u64>,
    log_z: Option<u64>,
    /// The shared parameters' gradients: name, address, elements (the parameter's).
    shared: Vec<(&'static str, u64, usize)>,
}

/// A shared parameter as the engine's builder takes it.
enum Given<'a> {
    Host(ArrayViewD<'a, f64>),
    Device(u64, &'a [usize]),
}

/// The outputs of the shared parameters' gradients: each for a parameter given, of its
/// number of elements.
fn shared_targets(
    call: &OnDevice<'_>,
    outs: [(&'static str, Option<u64>); 4],
) -> Outcome<Vec<(&'static str, u64, usize)>> {
    let mut v = Vec::new();
    for (name, out) in outs {
        let Some(out) = out else { continue };
        let Some((_, p)) = call.params.iter().find(|(n, _)| *n == name) else {
            return Err(Failure::Value(format!(
                "`out_{name}` is given without `{name}`"
            )));
        };
        v.push((name, address(&format!("out_{name}"), out)?, p.len()));
    }
    Ok(v)
}
