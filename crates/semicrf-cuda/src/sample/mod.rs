//! Exact posterior samples on the CUDA streaming engine (model page §12): the device runs the
//! log-domain forward kernel of `kernels/streaming.cu` in its mode that saves `α_t` (and, for
//! a static transition, `u_s`) at every position, the rows come back to the host, and the
//! core's [`sample_sequence`] draws every sample from them ([`blocks`]), one sequence per
//! task of rayon's pool.
//!
//! | form | the device computes | on the device and the host |
//! |---|---|---|
//! | static `(C, C)` transition | `α_t(j)` and `u_s(j)` for every position, `O(T·C·(C + K))` a sequence | `16·(T+1)·C` bytes per sequence |
//! | `(K, C, C)` transition | `α_t(j)` for every position, `O(T·K·C²)` a sequence | `8·(T+1)·C` bytes per sequence |
//!
//! besides the inputs on the device (as for a forward pass) and the samples on the host. The
//! host's draws read those rows with the problem's scores and boundaries (the core's
//! accessors), never a `(T, K, C)` table.

mod blocks;

use rayon::prelude::*;
use semicrf_core::sample::sample_sequence;
use semicrf_core::{
    EngineInfo, Error, Op, Potentials, Problem, Query, Result, Sampler, Samples, Scalar,
};

use crate::call::{Model, Source, StreamCall};
use crate::device::Gpu;
use crate::engine::CudaEngine;
use crate::kernel::SemiringId;
pub(crate) use blocks::{DeviceRows, Rows};

/// Runs the log-domain forward kernel on every sequence of `model`, saving `α` (and `u`),
/// and reads the rows back.
pub(crate) fn forward_rows<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, F>,
) -> Result<Rows> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = StreamCall::new(gpu, backend, model, src, &[], None)?;
    let sh = model.shape;
    let saved = sh.batch * (sh.len + 1) * sh.labels;
    let alpha = call.zeros::<f64>(saved)?;
    let u = if call.dd {
        None
    } else {
        Some(call.zeros::<f64>(saved)?)
    };
    call.log_forward(SemiringId::Log, None, None, |a| {
        a.alpha = call.ptr(&alpha);
        a.u = call.opt(&u);
    })?;
    gpu.mark();
    Ok(Rows {
        alpha: call.back_all(&alpha)?,
        u: u.as_ref().map(|u| call.back_all(u)).transpose()?,
    })
}

/// The draws of every sequence of `p` from its saved rows, parallel over the batch; the
/// first sequence's error in batch order where any fails.
pub(crate) fn draw_all<F: Scalar>(
    p: &Potentials<'_, F>,
    model: &Model,
    rows: &Rows,
    n: usize,
    seed: u64,
) -> Result<Samples> {
    (0..p.shape().batch)
        .into_par_iter()
        .map(|b| {
            let mut blocks = DeviceRows::new(p, model, rows, b);
            sample_sequence(&mut blocks, b, n, seed)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .collect()
}

/// The streaming algorithm samples (forward on the device, draws on the host: see the
/// crate docs); exact and scan on CUDA do not.
impl<F: Scalar> Sampler<F> for CudaEngine {
    fn sample(&self, problem: &Problem<'_, F>, n: usize, seed: u64) -> Result<Samples> {
        if self.edge_form() {
            return Err(Error::Unsupported {
                backend: self.backend(),
                what: "posterior sampling (the streaming algorithm samples on CUDA)".into(),
            });
        }
        let Problem::Structured(p) = problem else {
            return Err(Error::Unsupported {
                backend: self.backend(),
                what: "edge input (the streaming algorithm takes structured potentials)".into(),
            });
        };
        // A backward pass's memory bounds the saved rows and rings of this forward.
        self.check(&Query::of(problem, Op::Backward))?;
        semicrf_core::range::check_probabilities(problem)?;
        let gpu = self.gpu()?;
        let model = Model::of(p);
        let rows = forward_rows(&gpu, &self.backend(), &model, Source::Host(p))?;
        draw_all(p, &model, &rows, n, seed)
    }
}

#[cfg(test)]
mod tests;
