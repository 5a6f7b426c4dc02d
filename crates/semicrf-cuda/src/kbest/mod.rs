//! k-best decoding on the GPU (`kernels/kbest.cu`): [`KBest`] for [`CudaEngine`]'s streaming
//! algorithm on structured potentials (model page §7, "k best").
//!
//! The kernel runs the core's `kbest_sequence` dynamic program, one thread block per
//! sequence, with every segment score summed in `f64` in the host's order and candidates
//! ordered as the host orders them, so its lists are the CPU engines', scores bit for bit and
//! ties included. It keeps the whole table of lists on the device, `(B, T, C, k)` entries of
//! 16 bytes (score, backpointer, rank), and traces the results there; only the results come
//! back. A position costs `O(C·k·K·C / 32)` on the warps of a block (each of `k` rounds of a
//! list's merge rescans one lane's share of the `K·C` lists it extends).

use cudarc::driver::{LaunchConfig, PushKernelArg};
use semicrf_core::{
    ByteCount, Decoded, EngineInfo, Error, Form, KBest, Op, Problem, Query, Result, Scalar,
    Segment, Shape,
};

use crate::call::{Model, Source, StreamCall};
use crate::device::{Gpu, driver};
use crate::engine::CudaEngine;
use crate::kernel::{KBestArgs, Kernel, SemiringId, What};
use crate::streaming::memory;

/// The largest `k` the kernel takes. Each list is merged in `k` rounds one after another and
/// the table grows linearly in `k`, so far beyond the lists users ask for (tens), the CPU
/// engines' heap, with any `k`, is the better tool.
pub const KBEST_MAX_K: usize = 1024;

/// Warps a block of the kernel for `C` labels: one per label, up to 16.
pub(crate) fn warps(c: usize) -> usize {
    c.clamp(1, 16)
}

/// Device bytes of a k-best call on `shape` (`dd`: a `(K, C, C)` transition; `given`: the
/// boundaries; inputs of `dtype_bytes`): the inputs as a Viterbi call counts them (an upper
/// bound), the table of `B·T·C·k` entries of 16 bytes and its `B·T·C` lengths, the warps'
/// scratch (`12·K·C + 8·K` bytes each) and the results (`8·k·T + 24·k + 4` bytes a sequence).
pub(crate) fn bytes(
    shape: Shape,
    (dd, given): (bool, [bool; 2]),
    dtype_bytes: usize,
    k: usize,
) -> ByteCount {
    let (b, t, kd, c) = (shape.batch, shape.len, shape.max_duration, shape.labels);
    let w = warps(c);
    let inputs = memory::bytes(
        shape,
        (dd, given),
        What::Forward(SemiringId::Max),
        dtype_bytes,
        0,
        (false, 0),
    );
    inputs
        + ByteCount::bytes(&[b, t, c, k, 16])
        + ByteCount::bytes(&[b, t, c, 4])
        + ByteCount::bytes(&[b, w, kd, c, 12])
        + ByteCount::bytes(&[b, w, kd, 8])
        + ByteCount::bytes(&[b, k, t, 8])
        + ByteCount::bytes(&[b, k, 24])
        + ByteCount::bytes(&[b, 4])
}

impl CudaEngine {
    fn kbest_refused(&self, what: String) -> Error {
        Error::Unsupported {
            backend: self.backend(),
            what,
        }
    }

    /// Whether the streaming algorithm on structured input takes `k` and the shape.
    fn kbest_supported(&self, query: &Query, k: usize) -> Result<()> {
        if self.edge_form() {
            return Err(self.kbest_refused(format!(
                "k-best decoding with the {} algorithm (the streaming algorithm has it)",
                self.algorithm()
            )));
        }
        if query.form == Form::Edges {
            return Err(self.kbest_refused(
                "k-best decoding of edge input (the streaming algorithm takes structured potentials)"
                    .into(),
            ));
        }
        if k > KBEST_MAX_K {
            return Err(self.kbest_refused(format!(
                "k = {k} best (at most {KBEST_MAX_K} on the GPU; the CPU engines take any k)"
            )));
        }
        let sh = query.shape;
        if (sh.max_duration as u128) * (sh.labels as u128) > i32::MAX as u128
            || (sh.len as u128) > i32::MAX as u128
        {
            return Err(self.kbest_refused(format!("{sh}: K·C or T above 2^31 for k best")));
        }
        Ok(())
    }
}

impl<F: Scalar> KBest<F> for CudaEngine {
    /// The streaming algorithm's k best on the device, `k` up to [`KBEST_MAX_K`]; the lists are the
    /// CPU engines', ties included. `k = 0` gives no segmentation, as on the CPU.
    fn kbest(&self, problem: &Problem<'_, F>, k: usize) -> Result<Vec<Vec<Decoded>>> {
        let query = Query::of(problem, Op::Viterbi);
        self.kbest_supported(&query, k)?;
        let Problem::Structured(p) = problem else {
            unreachable!("edge input is refused above")
        };
        let batch = query.shape.batch;
        if k == 0 {
            return Ok(vec![Vec::new(); batch]);
        }
        let gpu = self.gpu()?;
        let backend = self.backend();
        let need = KBest::<F>::kbest_memory_required(self, &query, k)?;
        fits(&gpu, &backend, query.shape, need)?;
        let model = Model::of(p);
        run(&gpu, &backend, &model, Source::Host(p), k)
    }

    /// The inputs (as a Viterbi call counts them), the table of `B·T·C·k` entries of 16
    /// bytes and its `B·T·C` lengths, the warps' scratch (`12·K·C + 8·K` bytes each) and the
    /// results (`8·k·T + 24·k + 4` bytes a sequence).
    fn kbest_memory_required(&self, query: &Query, k: usize) -> Result<u64> {
        self.kbest_supported(query, k)?;
        let (dd, given) = match query.form {
            Form::Structured {
                duration_dependent_transition,
                boundaries,
            } => (duration_dependent_transition, boundaries),
            Form::Edges => (false, [false; 2]),
        };
        bytes(query.shape, (dd, given), query.dtype_bytes as usize, k)
            .finish(&self.backend(), query.shape)
    }
}

/// Refuses a call that needs more than the device's free memory (after the memory pool gave
/// back what it held), as [`EngineInfo::check`] does for the other operations.
fn fits(gpu: &Gpu, backend: &str, shape: Shape, need: u64) -> Result<()> {
    let err = |e| driver(backend, e);
    let (mut free, _) = gpu.ctx.mem_get_info().map_err(err)?;
    if need > free as u64 {
        gpu.trim().map_err(err)?;
        free = gpu.ctx.mem_get_info().map_err(err)?.0;
    }
    if need > free as u64 {
        return Err(Error::Unsupported {
            backend: backend.into(),
            what: format!(
                "{shape} k best (it needs {need} bytes of device memory, {free} are free)"
            ),
        });
    }
    Ok(())
}

/// The k best of every sequence of `model` with its position tensors from `src`.
pub(crate) fn run<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, F>,
    k: usize,
) -> Result<Vec<Vec<Decoded>>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = StreamCall::new(gpu, backend, model, src, &[], None)?;
    let sh = model.shape;
    let (bn, t, kd, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let w = warps(c);
    let lists = bn * t * c;
    let score = call.zeros::<f64>(lists * k)?;
    let back = call.zeros::<i32>(lists * k)?;
    let rank = call.zeros::<i32>(lists * k)?;
    let cnt = call.zeros::<i32>(lists)?;
    let head = call.zeros::<i32>(bn * w * kd * c)?;
    let hv = call.zeros::<f64>(bn * w * kd * c)?;
    let seg = call.zeros::<f64>(bn * w * kd)?;
    let pick = call.zeros::<i32>(bn * k * 2)?;
    let oscore = call.zeros::<f64>(bn * k)?;
    let on = call.zeros::<i32>(bn)?;
    let olen = call.zeros::<i32>(bn * k)?;
    let od = call.zeros::<i32>(bn * k * t)?;
    let oc = call.zeros::<i32>(bn * k * t)?;
    let args = KBestArgs {
        sc: call.sc,
        bb: call.bb,
        eb: call.eb,
        tr: call.tr,
        dur: call.dur,
        st: call.st,
        en: call.en,
        len: call.len,
        score: call.ptr(&score),
        back: call.ptr(&back),
        rank: call.ptr(&rank),
        cnt: call.ptr(&cnt),
        head: call.ptr(&head),
        hv: call.ptr(&hv),
        seg: call.ptr(&seg),
        pick: call.ptr(&pick),
        oscore: call.ptr(&oscore),
        on: call.ptr(&on),
        olen: call.ptr(&olen),
        od: call.ptr(&od),
        oc: call.ptr(&oc),
        t: t as i64,
        k: kd as i64,
        c: c as i64,
        kbest: k as i32,
        dd: model.dd as i32,
        f32in: call.f32in() as i32,
    };
    if bn > 0 {
        let cfg = LaunchConfig {
            grid_dim: (bn as u32, 1, 1),
            block_dim: (32 * w as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = gpu.stream.launch_builder(gpu.function(Kernel::KBestFwd));
        b.arg(&args);
        // SAFETY: `args` matches the kernel's `struct KArgs`, every pointer in it is a live
        // allocation of this call sized for the shape, `k` and the block's warps, and the
        // grid has one block per sequence.
        unsafe { b.launch(cfg) }.map_err(|e| call.err(e))?;
    }
    gpu.mark();
    let (on, oscore, olen) = (call.back(&on)?, call.back(&oscore)?, call.back(&olen)?);
    let (od, oc) = (call.back_all(&od)?, call.back_all(&oc)?);
    Ok((0..bn)
        .map(|b| {
            (0..on[b].max(0) as usize)
                .map(|r| {
                    let o = b * k + r;
                    let m = olen[o].max(0) as usize;
                    let mut segments = Vec::with_capacity(m);
                    let mut start = 0;
                    for x in (0..m).rev() {
                        let (d, j) = (od[o * t + x] as usize, oc[o * t + x] as usize);
                        segments.push(Segment::new(start, d, j));
                        start += d;
                    }
                    Decoded {
                        score: oscore[o],
                        segments,
                    }
                })
                .collect()
        })
        .collect())
}

#[cfg(test)]
mod tests;
