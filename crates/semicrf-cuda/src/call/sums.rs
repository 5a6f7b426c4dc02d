//! The small kernels of `kernels/io.cu` around a backward pass's results on the device: the
//! batch's weighted gradients of the shared parameters (`shared_sum`), the list of the
//! sequences the meet kernels gave up (`rerun_list`) and log Z out of a forward pass's
//! `(log Z, h)` pairs (`take_even`).

use cudarc::driver::{LaunchConfig, PushKernelArg};
use semicrf_core::Result;

use super::StreamCall;
use crate::kernel::{DevPtr, Kernel};

/// Where `shared_sum` reads the per-sequence values of a batch of `b` sequences: the
/// duration (`kc` a row) and transition (`cc` a row) marginals, from the meet kernels' two
/// sweeps (`two`: `(B, 2, ·)` each) where given and the sequence is not flagged in `redo`,
/// else from one row a sequence (`one`); the start and end marginals (`nc` a row, `(B, nc)`
/// each; `nc = 0`: none).
pub(crate) struct SumInputs {
    pub two: Option<(DevPtr, DevPtr)>,
    pub one: (DevPtr, DevPtr),
    pub ends: (DevPtr, DevPtr),
    pub redo: DevPtr,
    pub b: usize,
    pub kc: usize,
    pub cc: usize,
    pub nc: usize,
}

impl SumInputs {
    /// Words of the sums: durations, transition, start, end.
    pub(crate) fn words(&self) -> usize {
        self.kc + self.cc + 2 * self.nc
    }
}

/// Launches `shared_sum` of `s` into `red` ([`SumInputs::words`] words), weighted by the
/// call's upstream gradient.
pub(crate) fn shared_sum(call: &StreamCall<'_>, s: &SumInputs, red: DevPtr) -> Result<()> {
    let n = s.words();
    if n == 0 {
        return Ok(());
    }
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(256) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (d2, t2) = s.two.unwrap_or((DevPtr::NULL, DevPtr::NULL));
    let dims = [s.b, s.kc, s.cc, s.nc].map(|x| x as i64);
    let mut l = call
        .gpu
        .stream
        .launch_builder(call.gpu.function(Kernel::SharedSum));
    l.arg(&d2)
        .arg(&t2)
        .arg(&s.one.0)
        .arg(&s.one.1)
        .arg(&s.ends.0)
        .arg(&s.ends.1)
        .arg(&s.redo)
        .arg(&call.up)
        .arg(&red)
        .arg(&dims[0])
        .arg(&dims[1])
        .arg(&dims[2])
        .arg(&dims[3]);
    // SAFETY: the arguments are `shared_sum`'s; each source holds B rows of its width (two
    // per sequence for the sweeps'), read only where not null and chosen; the upstream
    // gradient B values; `red` the sums' words; one thread per item.
    unsafe { l.launch(cfg) }.map_err(|e| call.err(e))?;
    Ok(())
}

/// Launches `rerun_list`: the flagged sequences of `flags` (`b` of them) into `seq`, padded
/// with -1 to `b` entries.
pub(crate) fn rerun_list(
    call: &StreamCall<'_>,
    flags: DevPtr,
    seq: DevPtr,
    b: usize,
) -> Result<()> {
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let n = b as i64;
    let mut l = call
        .gpu
        .stream
        .launch_builder(call.gpu.function(Kernel::RerunList));
    l.arg(&flags).arg(&seq).arg(&n);
    // SAFETY: `flags` holds `b` i32, `seq` room for `b` i32; one thread writes them.
    unsafe { l.launch(cfg) }.map_err(|e| call.err(e))?;
    Ok(())
}

/// The launch of a grid-stride kernel over `n` items (`take_even`, `narrow_f32`).
pub(crate) fn grid_stride(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 65_535) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Launches `take_even`: `dst[i] = pairs[2·i]` for `i < n`, rounded to `f32` where `f32out`.
pub(crate) fn take_even(
    call: &StreamCall<'_>,
    pairs: DevPtr,
    dst: DevPtr,
    n: usize,
    f32out: bool,
) -> Result<()> {
    let cfg = grid_stride(n);
    let (n, f) = (n as i64, f32out as i32);
    let mut l = call
        .gpu
        .stream
        .launch_builder(call.gpu.function(Kernel::TakeEven));
    l.arg(&pairs).arg(&dst).arg(&n).arg(&f);
    // SAFETY: `pairs` holds 2·n f64, `dst` n values of the element type `f32out` names, on
    // this device; a grid-stride loop over `n`.
    unsafe { l.launch(cfg) }.map_err(|e| call.err(e))?;
    Ok(())
}
