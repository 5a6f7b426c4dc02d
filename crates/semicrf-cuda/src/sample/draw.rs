//! The draws on the device: `sample_draw` of `kernels/sample.cu`, one warp per (sequence,
//! sample), over the forward values the log-domain forward kernel saved, still on the device.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use semicrf_core::{Error, Result, Samples, Segment};

use crate::call::StreamCall;
use crate::kernel::{DevPtr, Kernel, SampleArgs};

/// Warps a block of `sample_draw`.
const WARPS: usize = 4;

/// The most bytes of the kernel's own buffers (weights, segments and counts) one launch
/// takes: more samples are drawn in several launches.
const BUDGET: usize = 128 << 20;

/// Device bytes of one sample's buffers: a row of `max(K, C)` weights, `2·T` segment words
/// and its count.
pub(crate) fn bytes_per_sample(t: usize, k: usize, c: usize) -> usize {
    8 * k.max(c) + 8 * t + 4
}

/// Samples `i0 .. i0 + n` of every sequence per launch, so that a launch's buffers stay
/// within [`BUDGET`] (at least one sample).
pub(crate) fn chunk(b: usize, t: usize, k: usize, c: usize) -> usize {
    (BUDGET / (b.max(1) * bytes_per_sample(t, k, c))).max(1)
}

/// `n` samples of every sequence of `call` with the generators of `seed`, drawn on the
/// device from its saved `α` (and `u`, static transition). Every sequence is feasible
/// (checked by the caller).
pub(crate) fn draw_on_device(
    call: &StreamCall<'_>,
    alpha: &CudaSlice<f64>,
    u: Option<&CudaSlice<f64>>,
    n: usize,
    seed: u64,
) -> Result<Samples> {
    let sh = call.shape;
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let mut out: Samples = (0..bn).map(|_| Vec::with_capacity(n)).collect();
    if n == 0 || bn == 0 {
        return Ok(out);
    }
    let per = chunk(bn, t, k, c).min(n);
    let work = call.zeros::<f64>(bn * per * k.max(c))?;
    let seg = call.zeros::<i32>(bn * per * t * 2)?;
    let cnt = call.zeros::<i32>(bn * per)?;
    call.gpu.mark();
    let mut args = SampleArgs {
        sc: call.sc,
        bb: call.bb,
        eb: call.eb,
        tr: call.tr,
        dur: call.dur,
        st: call.st,
        en: call.en,
        len: call.len,
        alpha: call.ptr(alpha),
        u: u.map_or(DevPtr::NULL, |u| call.ptr(u)),
        work: call.ptr(&work),
        seg: call.ptr(&seg),
        cnt: call.ptr(&cnt),
        b: bn as i64,
        t: t as i64,
        k: k as i64,
        c: c as i64,
        n: 0,
        i0: 0,
        seed: seed as i64,
        f32in: call.f32in() as i32,
        dd: call.dd as i32,
    };
    for i0 in (0..n).step_by(per) {
        let m = per.min(n - i0);
        args.n = m as i64;
        args.i0 = i0 as i64;
        let cfg = LaunchConfig {
            grid_dim: ((bn * m).div_ceil(WARPS) as u32, 1, 1),
            block_dim: (32 * WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = call
            .gpu
            .stream
            .launch_builder(call.gpu.function(Kernel::SampleDraw));
        l.arg(&args);
        // SAFETY: `args` matches the kernel's `struct SArgs`; the inputs are the call's
        // (sized for its shape), `alpha` and `u` hold `(B, T+1, C)` values, `work`, `seg`
        // and `cnt` the rows of `B·m <= B·per` samples; one warp per (sequence, sample), the
        // warps beyond `B·m` return at once.
        unsafe { l.launch(cfg) }.map_err(|e| call.err(e))?;
        let counts = call.back(&cnt.slice(..bn * m))?;
        let segs = call.back_all_of(&seg.slice(..bn * m * t * 2))?;
        collect(call.backend, &counts, &segs, t, i0, &mut out)?;
    }
    Ok(out)
}

/// Appends the samples `i0 .. i0 + m` of every sequence that one launch drew (`counts`:
/// `B·m` counts, `segs`: their `T·2` segment words each, as `sample_draw` writes them) to
/// `out` (one list per sequence).
pub(crate) fn collect(
    backend: &str,
    counts: &[i32],
    segs: &[i32],
    t: usize,
    i0: usize,
    out: &mut Samples,
) -> Result<()> {
    let m = counts.len() / out.len().max(1);
    for (g, &count) in counts.iter().enumerate() {
        let (b, i) = (g / m, i0 + g % m);
        let walk = usize::try_from(count).map_err(|_| broken(backend, b, i, count))?;
        let last_first = &segs[g * t * 2..][..2 * walk];
        let mut s = 0;
        let sample = last_first
            .chunks_exact(2)
            .rev()
            .map(|x| {
                let (d, j) = (x[0] as usize, x[1] as usize);
                s += d;
                Segment::new(s - d, d, j)
            })
            .collect();
        out[b].push(sample);
    }
    Ok(())
}

/// A sample the kernel could not finish: no finite item where the saved forward values
/// promise one (`-1`), or an infeasible sequence (`-2`, which the caller rules out first).
fn broken(backend: &str, b: usize, i: usize, code: i32) -> Error {
    if code == -2 {
        return Error::Infeasible { sequence: b };
    }
    Error::Unsupported {
        backend: backend.into(),
        what: format!(
            "sample {i} of sequence {b} reached a segment with no finite item (inconsistent \
             forward values)"
        ),
    }
}
