//! Exact posterior samples on the CUDA streaming engine (model page §12): the device runs the
//! log-domain forward kernel of `kernels/streaming.cu` in its mode that saves `α_t` (and, for
//! a static transition, `u_s`) at every position, then `sample_draw` of `kernels/sample.cu`
//! draws every sample from those rows on the device, one warp per (sequence, sample)
//! ([`draw`]); only the samples come back to the host (4 bytes a segment and 8 a sample,
//! packed on the device).
//!
//! | form | the device computes | saved on the device |
//! |---|---|---|
//! | static `(C, C)` transition | `α_t(j)` and `u_s(j)` for every position, `O(T·C·(C + K))` a sequence | `16·(T+1)·C` bytes per sequence |
//! | `(K, C, C)` transition | `α_t(j)` for every position, `O(T·K·C²)` a sequence | `8·(T+1)·C` bytes per sequence |
//!
//! besides the inputs on the device (as for a forward pass); the draws take `8·max(K, C) +
//! 8·T + 8` bytes per sample on the device (the samples of a sequence in launches of at most
//! 128 MiB), and a segment costs `O(K + C)` of the warp (`O(K·C)` for a `(K, C, C)`
//! transition). The draws compute each weight as the host's draws from the same rows do
//! ([`DeviceRows`], the CPU streaming engine's arithmetic) and use the core's generators, so
//! the samples are the host's except where a uniform falls within the last bits of the
//! device's `exp` and `log` of a boundary between two choices.
//!
//! The host's draws ([`DeviceRows`] with the core's `sample_sequence`) stay as the reference
//! the device's draws are tested against.

#[cfg(test)]
mod blocks;
mod draw;

use semicrf_core::{EngineInfo, Error, Op, Problem, Query, Result, Sampler, Samples, Scalar};

use crate::call::{Model, Source, StreamCall};
use crate::device::Gpu;
use crate::engine::CudaEngine;
use crate::kernel::SemiringId;
#[cfg(test)]
pub(crate) use blocks::{DeviceRows, Rows};

/// Runs the log-domain forward kernel on every sequence of `model`, saving `α` (and `u`) on
/// the device, and draws `n` samples of each there: Infeasible for the first sequence of
/// log Z `-inf`.
pub(crate) fn sample_on_device<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, F>,
    n: usize,
    seed: u64,
) -> Result<Samples> {
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
    let fwd = call.log_forward(SemiringId::Log, None, None, |a| {
        a.alpha = call.ptr(&alpha);
        a.u = call.opt(&u);
    })?;
    gpu.mark();
    let Some(out) = fwd.out.as_ref() else {
        unreachable!("log_forward allocates its result where none is given")
    };
    let z = call.back(out)?;
    if let Some(b) = (0..sh.batch).find(|&b| z[2 * b] == f64::NEG_INFINITY) {
        return Err(Error::Infeasible { sequence: b });
    }
    draw::draw_on_device(&call, &alpha, u.as_ref(), n, seed)
}

/// The host's draws of every sequence of `p` from its saved rows (the reference of the
/// device's draws); the first sequence's error in batch order where any fails.
#[cfg(test)]
pub(crate) fn draw_all<F: Scalar>(
    p: &semicrf_core::Potentials<'_, F>,
    model: &Model,
    rows: &Rows,
    n: usize,
    seed: u64,
) -> Result<Samples> {
    use rayon::prelude::*;
    (0..p.shape().batch)
        .into_par_iter()
        .map(|b| {
            let mut blocks = DeviceRows::new(p, model, rows, b);
            semicrf_core::sample::sample_sequence(&mut blocks, b, n, seed)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .collect()
}

/// The streaming algorithm samples (forward and draws on the device: see the module's
/// docs); exact and scan on CUDA do not.
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
        sample_on_device(&gpu, &self.backend(), &model, Source::Host(p), n, seed)
    }
}

#[cfg(test)]
mod tests;
