//! A streaming backward pass's results: on the device, staged on their way to the host, or
//! on the host ([`BackwardResults::into_host`]), with the shared parameters' gradients
//! summed over the batch.

use cudarc::driver::CudaSlice;
use ndarray::{Array1, Array2, Array3, ArrayD, IxDyn};
use semicrf_core::{Backward, Error, Gradients, Result};

use crate::call::{Buf, Model, StreamCall};
use crate::logdomain::LogGrads;
use crate::transfer::stage::Staged;

/// A backward pass's large results on their way into page-locked memory
/// ([`Staged`]): which of its arrays each is.
pub(crate) struct StagedResults<'g> {
    pub(crate) copies: Staged<'g>,
    pub(crate) sc: usize,
    pub(crate) bb: Option<usize>,
    pub(crate) eb: Option<usize>,
    pub(crate) bm: usize,
}

/// A backward pass's results: the `(B, T, C)` and `(B, T)` ones on the device (and where
/// `staged`, on their way to the host), the shared parameters' gradients (summed over the
/// batch) on the host.
pub(crate) struct BackwardResults<'g> {
    pub(crate) log_z: Vec<f64>,
    pub(crate) gsc: Buf,
    pub(crate) gbb: Option<Buf>,
    pub(crate) geb: Option<Buf>,
    pub(crate) bmarg: Buf,
    pub(crate) transition: ArrayD<f64>,
    pub(crate) duration: Array2<f64>,
    pub(crate) start: Array1<f64>,
    pub(crate) end: Array1<f64>,
    pub(crate) staged: Option<StagedResults<'g>>,
}

/// Host arrays for a backward pass's results of `model` (scores' gradient, the boundaries'
/// where given, boundary marginals), with every page written once: made by the calling
/// thread while the kernels run (the thread that then copies into them, on its own memory
/// node), so that the copies back do not wait for the operating system to map fresh memory
/// (at S6, 12 MB of gradient: about 0.4 ms).
pub(crate) fn ready_outputs(model: &Model) -> [Vec<f64>; 4] {
    use rayon::prelude::*;
    let sh = model.shape;
    let (btc, bt) = (sh.batch * sh.len * sh.labels, sh.batch * sh.len);
    let touched = |n: usize| {
        let mut v = vec![0.0f64; n];
        // One write per 4 KiB page; rayon's threads for large arrays only (handing them
        // work costs more than a few hundred pages).
        // Volatile: a compiler may know that fresh zeroed memory holds zeros already.
        let page = |c: &mut [f64]| {
            c.iter_mut()
                .step_by(512)
                // SAFETY: `x` is a valid, aligned element of the array.
                .for_each(|x| unsafe { std::ptr::write_volatile(x, 0.0) })
        };
        if n > 1 << 19 {
            v.par_chunks_mut(1 << 15).for_each(page);
        } else {
            page(&mut v);
        }
        v
    };
    [
        touched(btc),
        if model.has_bb {
            touched(btc)
        } else {
            Vec::new()
        },
        if model.has_eb {
            touched(btc)
        } else {
            Vec::new()
        },
        touched(bt),
    ]
}

impl BackwardResults<'_> {
    /// Everything on the host, in `ready` (from [`ready_outputs`]) where given: from the
    /// page-locked buffer where the results were staged, else copied now.
    pub(crate) fn into_host(
        self,
        call: &StreamCall<'_>,
        ready: Option<[Vec<f64>; 4]>,
    ) -> Result<Backward> {
        let sh = call.shape;
        let (bn, t, c) = (sh.batch, sh.len, sh.labels);
        let [r_sc, r_bb, r_eb, r_bm] = ready.unwrap_or_default();
        let staged = self.staged.as_ref();
        // `part`: the array's place among the staged ones.
        let back = |s: &CudaSlice<f64>, part: Option<usize>, mut v: Vec<f64>| -> Result<Vec<f64>> {
            match (staged, part) {
                (Some(st), Some(i)) => {
                    let src = st.copies.part(i).map_err(|e| call.err(e))?;
                    if v.len() == src.len() {
                        v.copy_from_slice(src);
                        return Ok(v);
                    }
                    return Ok(src.to_vec());
                }
                // The staged copies hold the page-locked buffer a large copy would wait for.
                (Some(_), None) => {
                    return Err(Error::Device {
                        backend: call.backend.into(),
                        message: "a result of a staged backward pass was not staged".into(),
                    });
                }
                (None, _) => {}
            }
            if v.len() != s.len() {
                return call.back_all(s);
            }
            call.gpu
                .download(&s.slice(..), &mut v)
                .map_err(|e| call.err(e))?;
            Ok(v)
        };
        let to3 = |s: &Buf, part, v| {
            let s = s.own(call.backend)?;
            Array3::from_shape_vec((bn, t, c), back(s, part, v)?).map_err(|e| call.shape_err(e))
        };
        let opt3 = |s: &Option<Buf>, part, v| s.as_ref().map(|s| to3(s, part, v)).transpose();
        let bm = back(self.bmarg.own(call.backend)?, staged.map(|s| s.bm), r_bm)?;
        let bm = Array2::from_shape_vec((bn, t), bm).map_err(|e| call.shape_err(e))?;
        Ok(Backward {
            log_z: self.log_z,
            grad: Gradients {
                scores: Some(to3(&self.gsc, staged.map(|s| s.sc), r_sc)?),
                transition: Some(self.transition),
                duration: Some(self.duration),
                start: Some(self.start),
                end: Some(self.end),
                begin_boundary: opt3(&self.gbb, staged.and_then(|s| s.bb), r_bb)?,
                end_boundary: opt3(&self.geb, staged.and_then(|s| s.eb), r_eb)?,
                edges: None,
            },
            boundary_marginals: bm,
        })
    }
}

impl LogGrads {
    /// The gradients from the position, begin, end and boundary marginals on the device and
    /// the shared parameters' sums.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish<'g>(
        self,
        call: &StreamCall<'g>,
        log_z: Vec<f64>,
        tr: Vec<f64>,
        dur: Vec<f64>,
        upstream: &[f64],
        known: Option<(Vec<f64>, Vec<f64>)>,
        staged: Option<StagedResults<'g>>,
    ) -> Result<BackwardResults<'g>> {
        let sh = call.shape;
        let (bn, k, c) = (sh.batch, sh.max_duration, sh.labels);
        let one = |v: Vec<f64>| weighted(upstream, bn, &v, c, |_| false, &[]);
        let (st, en) = match (known, &self.own) {
            (Some(se), _) => se,
            (None, Some([st, en])) => (call.back(st)?, call.back(en)?),
            (None, None) => {
                return Err(Error::Device {
                    backend: call.backend.into(),
                    message: "the start and end marginals were not read back".into(),
                });
            }
        };
        let (start, end) = (one(st), one(en));
        let transition = if call.dd {
            ArrayD::from_shape_vec(IxDyn(&[k, c, c]), tr)
        } else {
            ArrayD::from_shape_vec(IxDyn(&[c, c]), tr)
        }
        .map_err(|e| call.shape_err(e))?;
        let duration = Array2::from_shape_fn((k, c), |(d, j)| dur[d * c + j]);
        let m = call.model;
        Ok(BackwardResults {
            log_z,
            gsc: self.gsc,
            gbb: self.gbb.filter(|_| m.has_bb),
            geb: self.geb.filter(|_| m.has_eb),
            bmarg: self.bmarg,
            transition,
            duration,
            start: Array1::from(start),
            end: Array1::from(end),
            staged,
        })
    }
}

/// Σ_b g_b · (per-sequence marginals `v`, `n` each), in ascending b; the sequences for which
/// `two` holds have two rows (the two sweeps of `kernels/meet.cu`, added first) in `two_v`
/// at their `2·b` and `2·b + 1`, the others one row in `v`.
pub(crate) fn weighted(
    upstream: &[f64],
    bn: usize,
    v: &[f64],
    n: usize,
    two: impl Fn(usize) -> bool,
    two_v: &[f64],
) -> Vec<f64> {
    let mut acc = vec![0.0; n];
    for b in 0..bn {
        if two(b) {
            let (f, r) = (
                &two_v[2 * b * n..(2 * b + 1) * n],
                &two_v[(2 * b + 1) * n..(2 * b + 2) * n],
            );
            for ((x, &y), &z) in acc.iter_mut().zip(f).zip(r) {
                *x += upstream[b] * (y + z);
            }
        } else {
            for (x, &y) in acc.iter_mut().zip(&v[b * n..(b + 1) * n]) {
                *x += upstream[b] * y;
            }
        }
    }
    acc
}
