//! The draws on the device: `sample_draw` of `kernels/sample.cu`, one warp per (sequence,
//! sample), over the forward values the log-domain forward kernel saved, still on the device.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use semicrf_core::{Error, Result, Samples, Segment};

use crate::call::StreamCall;
use crate::kernel::{DevPtr, Kernel, SampleArgs};

/// Warps a block of `sample_draw`.
const WARPS: usize = 4;

/// The most bytes of the kernel's own buffers (weights, segments, counts and the packed
/// segments) one launch takes: more samples are drawn in several launches.
const BUDGET: usize = 128 << 20;

/// Device bytes of one sample's buffers: a row of `max(K, C)` weights, `T` segment words as
/// it draws them and `T` packed (at most), its count and offset.
pub(crate) fn bytes_per_sample(t: usize, k: usize, c: usize) -> usize {
    8 * k.max(c) + 8 * t + 8
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
    let seg = call.zeros::<i32>(bn * per * t)?;
    let packed = call.zeros::<i32>(bn * per * t)?;
    let mut cnt = call.zeros::<i32>(2 * bn * per + 1)?;
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
        cnt: DevPtr::NULL,
        out: call.ptr(&packed),
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
        if i0 > 0 {
            // A fresh count of the packed words taken (the last word).
            cnt = call.zeros::<i32>(2 * bn * per + 1)?;
        }
        args.cnt = call.ptr(&cnt);
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
        // and `packed` the rows of `B·m <= B·per` samples and `cnt` their counts and offsets
        // (`2·B·m + 1` words, the last zero); one warp per (sequence, sample), the warps
        // beyond `B·m` return at once.
        unsafe { l.launch(cfg) }.map_err(|e| call.err(e))?;
        let counts = call.back(&cnt.slice(..2 * bn * m + 1))?;
        let taken = usize::try_from(counts[2 * bn * m]).unwrap_or(0);
        let words = call.back_all_of(&packed.slice(..taken))?;
        collect(call.backend, &counts[..2 * bn * m], &words, k, i0, &mut out)?;
    }
    Ok(out)
}

/// Appends the samples `i0 .. i0 + m` of every sequence that one launch drew to `out` (one
/// list per sequence): `counts` holds their `B·m` segment counts then their offsets in
/// `words`, the packed segments (last first, each `label·K + d - 1`), as `sample_draw`
/// writes them.
pub(crate) fn collect(
    backend: &str,
    counts: &[i32],
    words: &[i32],
    k: usize,
    i0: usize,
    out: &mut Samples,
) -> Result<()> {
    let bm = counts.len() / 2;
    let m = bm / out.len().max(1);
    for g in 0..bm {
        let (b, i) = (g / m, i0 + g % m);
        let bad = || broken(backend, b, i, counts[g]);
        let walk = usize::try_from(counts[g]).map_err(|_| bad())?;
        let at = usize::try_from(counts[bm + g]).map_err(|_| bad())?;
        let last_first = words.get(at..at + walk).ok_or_else(bad)?;
        let mut s = 0;
        let sample = last_first
            .iter()
            .rev()
            .map(|&x| {
                let x = x as usize;
                let (d, j) = (x % k + 1, x / k);
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
