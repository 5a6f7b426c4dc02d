//! A backward pass's results left on the device ([`DeviceBackward`]), and their copy to the
//! host.

use cudarc::driver::CudaSlice;
use ndarray::{Array1, Array2, Array3, ArrayD};
use semicrf_core::{Backward, Error, Gradients, Result, Shape};

use crate::call::Buf;
use crate::streaming::BackwardResults;

/// A backward pass on potentials in device memory: the `(B, T, C)` and `(B, T)` results
/// stay on the device (`f64`, row-major; their addresses through cudarc's
/// [`DevicePtr`](cudarc::driver::DevicePtr)), the shared parameters' gradients (summed over
/// the batch, weighted by the upstream gradient) are on the host.
#[derive(Debug)]
pub struct DeviceBackward {
    /// log Z per sequence.
    pub log_z: Vec<f64>,
    /// Gradient of the scores, `(B, T, C)`.
    pub scores: CudaSlice<f64>,
    /// Gradient of the begin boundary, `(B, T, C)`, where one was given.
    pub begin_boundary: Option<CudaSlice<f64>>,
    /// Gradient of the end boundary, `(B, T, C)`, where one was given.
    pub end_boundary: Option<CudaSlice<f64>>,
    /// Probability that a segment starts at each position, `(B, T)` (not weighted).
    pub boundary_marginals: CudaSlice<f64>,
    /// Gradient of the transition, `(C, C)` or `(K, C, C)`.
    pub transition: ArrayD<f64>,
    /// Gradient of the duration scores, `(K, C)`.
    pub duration: Array2<f64>,
    /// Gradient of the start scores, `(C)`.
    pub start: Array1<f64>,
    /// Gradient of the end scores, `(C)`.
    pub end: Array1<f64>,
    pub(crate) shape: Shape,
}

impl DeviceBackward {
    /// The results of a call that wrote its own buffers.
    pub(crate) fn new(o: BackwardResults, shape: Shape, backend: &str) -> Result<Self> {
        let own = |b: Buf| b.into_own(backend);
        Ok(DeviceBackward {
            log_z: o.log_z,
            scores: own(o.gsc)?,
            begin_boundary: o.gbb.map(own).transpose()?,
            end_boundary: o.geb.map(own).transpose()?,
            boundary_marginals: own(o.bmarg)?,
            transition: o.transition,
            duration: o.duration,
            start: o.start,
            end: o.end,
            shape,
        })
    }

    /// Everything on the host, as [`semicrf_core::Engine::backward`] returns it.
    pub fn to_host(&self) -> Result<Backward> {
        let sh = self.shape;
        let (b, t, c) = (sh.batch, sh.len, sh.labels);
        let bad = |e: String| Error::Device {
            backend: "cuda/streaming".into(),
            message: e,
        };
        let read = |s: &CudaSlice<f64>, n: usize| -> Result<Vec<f64>> {
            let mut v = s
                .stream()
                .clone_dtoh(s)
                .map_err(|e| bad(format!("{e:?}")))?;
            v.truncate(n);
            Ok(v)
        };
        let to3 = |s: &CudaSlice<f64>| {
            Array3::from_shape_vec((b, t, c), read(s, b * t * c)?).map_err(|e| bad(e.to_string()))
        };
        let opt3 = |s: &Option<CudaSlice<f64>>| s.as_ref().map(to3).transpose();
        Ok(Backward {
            log_z: self.log_z.clone(),
            grad: Gradients {
                scores: Some(to3(&self.scores)?),
                transition: Some(self.transition.clone()),
                duration: Some(self.duration.clone()),
                start: Some(self.start.clone()),
                end: Some(self.end.clone()),
                begin_boundary: opt3(&self.begin_boundary)?,
                end_boundary: opt3(&self.end_boundary)?,
                edges: None,
            },
            boundary_marginals: Array2::from_shape_vec(
                (b, t),
                read(&self.boundary_marginals, b * t)?,
            )
            .map_err(|e| bad(e.to_string()))?,
        })
    }
}
