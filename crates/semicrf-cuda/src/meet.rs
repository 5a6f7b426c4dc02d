//! The host side of `kernels/meet.cu`: the log semiring's streaming forward and backward with
//! a static transition, swept from both ends of every sequence at once in the linear domain.
//!
//! A forward pass is two launches: `meet_fwd_log` (two blocks a sequence: the forward sweep
//! to the middle and the reverse sweep to it) and `meet_z_log` (one block a sequence: `Z`
//! where the two meet). A backward pass is `meet_save_log` (the same first halves, saving
//! their rows) and `meet_bwd_log` (the meet, then both sweeps to the other end with the
//! marginals). Sequences the kernels give up (the flags of `kernels/meet.cu`) are rerun by the
//! log-domain kernels by the caller.

use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};
use semicrf_core::{ByteCount, Error, Result, Shape};

use crate::streaming::Call;

/// The kernels' argument block (`struct MArgs` of `kernels/meet.cu`, field for field).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MArgs {
    pub sc: u64,
    pub bb: u64,
    pub eb: u64,
    pub par: u64,
    pub len: u64,
    pub seq: u64,
    pub st: u64,
    pub alpha: u64,
    pub u: u64,
    pub ex: u64,
    pub erm: u64,
    pub ring: u64,
    pub out: u64,
    pub flag: u64,
    pub up: u64,
    pub gsc: u64,
    pub gbb: u64,
    pub geb: u64,
    pub bmarg: u64,
    pub pdur: u64,
    pub ptr: u64,
    pub pst: u64,
    pub pen: u64,
    pub t: i64,
    pub k: i64,
    pub c: i64,
    pub h: i64,
    pub ch: i32,
    pub f32in: i32,
}

// SAFETY: a plain `repr(C)` block of integers, laid out as the kernels' `struct MArgs`.
unsafe impl DeviceRepr for MArgs {}

/// Steps a block of the kernels' sweeps (`MT_P` of `kernels/meet.cu`).
pub(crate) const P: usize = 8;

/// The most labels the kernels take (one thread a label in phase 2, and their shared memory
/// holds the C×C transition); more labels run in the log domain.
pub(crate) const MAX_LABELS: usize = 64;

/// The most threads a block of these kernels has (their `__launch_bounds__`).
pub(crate) const MAX_THREADS: usize = 512;

/// The largest magnitude of a finite parameter the kernels take (nats; they check scores
/// and boundaries against the same bound, `MT_RANGE`).
const RANGE: f64 = 50.0;

/// Window terms per thread and block of steps the plan aims at in phases 1 and 3:
/// `SEMICRF_CUDA_ITEMS` (for tuning), else 8 (on an H100, 8 and 16 beat 32 and 64 at S4-S6).
fn items_per_thread() -> usize {
    std::env::var("SEMICRF_CUDA_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n >= 1)
        .unwrap_or(8)
}

/// Threads per block for `K`, `C`, or `None` beyond [`MAX_LABELS`]: enough that phases 1
/// and 3 (P·K·C window terms a block of steps) give each thread about
/// [`items_per_thread`] of them, at least one thread a label (whole warps), at most
/// [`MAX_THREADS`].
pub(crate) fn plan(k: usize, c: usize) -> Option<usize> {
    plan_with(k, c, items_per_thread())
}

/// [`plan`] for a given number of window terms per thread.
pub(crate) fn plan_with(k: usize, c: usize, items: usize) -> Option<usize> {
    if c == 0 || c > MAX_LABELS {
        return None;
    }
    let labels = c.div_ceil(32) * 32;
    let want = (P * k * c).div_ceil(items).next_power_of_two();
    Some(want.clamp(32, MAX_THREADS).max(labels))
}

/// Where a launch keeps what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Steps staged at a time.
    pub ch: usize,
    /// Whether the ring is in shared memory (else in a global buffer).
    pub ring: bool,
    /// Dynamic shared memory, bytes.
    pub bytes: usize,
}

/// The shared-memory layout for `K`, `C` within `limit` bytes (`marg`: the second halves,
/// which also stage the other sweep's rows): the most staged steps (64 down to 8) that keep
/// the ring in shared memory, else the most without it.
pub(crate) fn layout(k: usize, c: usize, limit: usize, marg: bool) -> Layout {
    let words = limit / 8;
    let ring_words = (k + P) * c;
    // The kernels' header (`Sweep`): α̃ rows and bounds (C rounded up to 4), H, G·Q0, cB, the
    // block's entries, Tl (rows padded likewise), the first P+1 weights, the rebase factors,
    // then the int words (row flags, window starts, rebase exponents, flags).
    let c4 = c.div_ceil(4) * 4;
    let header =
        2 * (P + 1) * c4 + 4 * P * c + c4 * c + (P + 1) * c + c + (P + 4 + P * c + 3 * c) / 2;
    let base = |ch: usize| header + 4 * ch * c + if marg { 2 * ch * c + 4 * ch } else { 0 };
    let top = (4096 / c.max(1)).clamp(P, 64);
    let chs: Vec<usize> = (0..4).map(|i| 64 >> i).filter(|&ch| ch <= top).collect();
    for ring in [true, false] {
        for &ch in &chs {
            let w = base(ch) + if ring { ring_words } else { 0 };
            if w <= words {
                return Layout {
                    ch,
                    ring,
                    bytes: 8 * w,
                };
            }
        }
    }
    Layout {
        ch: P,
        ring: false,
        bytes: 8 * base(P),
    }
}

/// The prepared parameters (`Par` of `kernels/meet.cu`) of a static transition `tr` (C, C),
/// durations `dur` (K, C), `start` and `end`, or `None` when a finite one is beyond ±50.
pub(crate) fn params(
    tr: &[f64],
    dur: &[f64],
    st: &[f64],
    en: &[f64],
    k: usize,
    c: usize,
) -> Option<Vec<f64>> {
    let all = tr.iter().chain(dur).chain(st).chain(en);
    if all
        .clone()
        .any(|&x| x != f64::NEG_INFINITY && x.abs() > RANGE)
    {
        return None;
    }
    // A maximum over -inf only is taken as 0: every weight is then 0 (-inf).
    let max = |it: &mut dyn Iterator<Item = f64>| {
        let m = it.fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY { 0.0 } else { m }
    };
    let lin = |x: f64| {
        if x == f64::NEG_INFINITY { 0.0 } else { x.exp() }
    };
    let md: Vec<f64> = (0..c)
        .map(|j| max(&mut (0..k).map(|d| dur[d * c + j])))
        .collect();
    let mut v = Vec::with_capacity(k * c + 2 * (c * c + 3 * c) + 2 * c);
    // Wl, label-major: Wl[j·K + d-1].
    v.extend((0..k * c).map(|x| lin(dur[(x % k) * c + x / k] - md[x / k])));
    for side in 0..2 {
        // The side's own transition: the reverse sweep's is the transpose.
        let at = |i: usize, j: usize| {
            if side == 0 {
                tr[i * c + j]
            } else {
                tr[j * c + i]
            }
        };
        let first = if side == 0 { st } else { en };
        let mt: Vec<f64> = (0..c).map(|j| max(&mut (0..c).map(|i| at(i, j)))).collect();
        v.extend((0..c * c).map(|x| lin(at(x / c, x % c) - mt[x % c])));
        v.extend(mt.iter().copied());
        v.extend(mt.iter().map(|x| x.exp()));
        v.extend((0..c).map(|j| lin(first[j] - mt[j])));
    }
    v.extend(md.iter().copied());
    v.extend(md.iter().map(|x| x.exp()));
    Some(v)
}

/// Rows of saved α̃ and ũ each sweep keeps per sequence: the forward sweep saves rows
/// 0..=m, the reverse one 0..=L-m+1, with m = max(1, (L+1)/2).
pub(crate) fn rows(t: usize) -> usize {
    t / 2 + 2
}

/// Words of a sweep's saved state (`state_len` of the kernels).
pub(crate) fn state_words(k: usize, c: usize) -> usize {
    (k + P) * c + 10 * c + 4
}

/// Device bytes of the kernels' own buffers for `shape` (`backward`: with the saved rows and
/// the outputs), with the ring in global memory where `lay` does not keep it in shared
/// memory.
pub(crate) fn bytes(shape: Shape, backward: bool, lay: Layout, eb: bool) -> ByteCount {
    let (b, t, k, c) = (shape.batch, shape.len, shape.max_duration, shape.labels);
    let h = rows(t);
    let params = ByteCount::f64s(&[k * c + 2 * (c * c + 3 * c) + 2 * c]);
    let mut n = params
        + ByteCount::f64s(&[b, 2, state_words(k, c)])
        + ByteCount::f64s(&[2, b])
        + ByteCount::bytes(&[4, b]);
    if !lay.ring {
        n = n + ByteCount::f64s(&[b, 2, k + P, c]);
    }
    if backward {
        n = n
            + ByteCount::f64s(&[2, b, 2, h, c])
            + ByteCount::bytes(&[8, b, 2, h])
            + ByteCount::f64s(&[b, 2, h])
            + ByteCount::f64s(&[b])
            + ByteCount::f64s(&[if eb { 3 } else { 2 }, b, t, c])
            + ByteCount::f64s(&[b, t])
            + ByteCount::f64s(&[b, 2, k, c])
            + ByteCount::f64s(&[b, 2, c, c])
            + ByteCount::f64s(&[2, b, c]);
    }
    n
}

/// The kernel that runs `kernel` with layout `lay`: one variant per placement of the ring
/// (`_r`: shared memory), so that the kernels address shared memory directly.
pub(crate) fn placed(kernel: &str, lay: Layout) -> String {
    let suffix = match (kernel, lay.ring) {
        ("meet_z_log", _) => "",
        (_, true) => "_r",
        _ => "",
    };
    format!("{kernel}{suffix}")
}

/// Buffers of one call of the kernels.
pub(crate) struct Bufs {
    pub st: CudaSlice<f64>,
    pub ring: Option<CudaSlice<f64>>,
    pub out: CudaSlice<f64>,
    pub flag: CudaSlice<i32>,
}

impl<'g> Call<'g> {
    /// The kernels' argument block with the inputs filled in.
    fn margs(&self, par: &CudaSlice<f64>, b: &Bufs) -> MArgs {
        let sh = self.shape;
        MArgs {
            sc: self.sc.ptr(&self.gpu.stream),
            bb: self.bb.as_ref().map_or(0, |x| x.ptr(&self.gpu.stream)),
            eb: self.eb.as_ref().map_or(0, |x| x.ptr(&self.gpu.stream)),
            f32in: self.f32in() as i32,
            par: self.ptr(par),
            len: self.ptr(&self.len),
            st: self.ptr(&b.st),
            ring: self.opt(&b.ring),
            out: self.ptr(&b.out),
            flag: self.ptr(&b.flag),
            t: sh.len as i64,
            k: sh.max_duration as i64,
            c: sh.labels as i64,
            h: rows(sh.len) as i64,
            ..MArgs::default()
        }
    }

    fn meet_launch(&self, kernel: &str, grid: usize, lay: Layout, args: &MArgs) -> Result<()> {
        let threads = self.meet_plan.expect("the meet kernels have a plan");
        if lay.bytes > self.gpu.smem_limit {
            return Err(Error::Unsupported {
                backend: self.backend.into(),
                what: format!(
                    "{} labels: the kernel's {} bytes of shared memory exceed the device's {}",
                    self.shape.labels, lay.bytes, self.gpu.smem_limit
                ),
            });
        }
        let mut a = *args;
        a.ch = lay.ch as i32;
        if grid == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (grid as u32, 1, 1),
            block_dim: (threads as u32, 1, 1),
            shared_mem_bytes: lay.bytes as u32,
        };
        let mut b = self
            .gpu
            .stream
            .launch_builder(self.gpu.function(&placed(kernel, lay)));
        b.arg(&a);
        // SAFETY: `a` matches the kernel's `struct MArgs`; every pointer in it is a live
        // allocation of this call sized for the shape (or null where the kernel checks), the
        // shared memory is the layout's, and the grid has two blocks (or one, `meet_z_log`)
        // per sequence of the batch.
        unsafe { b.launch(cfg) }.map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The layout of a launch of this call (`marg`: the second kernel of a backward).
    pub(crate) fn meet_layout(&self, marg: bool) -> Layout {
        let sh = self.shape;
        layout(sh.max_duration, sh.labels, self.gpu.smem_limit, marg)
    }

    fn meet_bufs(&self, lay: Layout) -> Result<Bufs> {
        let sh = self.shape;
        let (b, k, c) = (sh.batch, sh.max_duration, sh.labels);
        Ok(Bufs {
            st: self.zeros::<f64>(b * 2 * state_words(k, c))?,
            ring: if lay.ring {
                None
            } else {
                Some(self.zeros::<f64>(b * 2 * (k + P) * c)?)
            },
            out: self.zeros::<f64>(2 * b)?,
            flag: self.zeros::<i32>(b)?,
        })
    }

    /// The forward pass: `(log Z, 0)` per sequence in `out` and the flags.
    pub(crate) fn meet_forward(&self, par: &CudaSlice<f64>) -> Result<(Bufs, Vec<i32>)> {
        let lay = self.meet_layout(false);
        let bufs = self.meet_bufs(lay)?;
        let a = self.margs(par, &bufs);
        let n = self.shape.batch;
        self.meet_launch("meet_fwd_log", 2 * n, lay, &a)?;
        self.meet_launch("meet_z_log", n, lay, &a)?;
        let flags = self.back(&bufs.flag)?;
        Ok((bufs, flags))
    }
}

/// A backward pass's device buffers (beyond [`Bufs`]).
pub(crate) struct Grads {
    pub alpha: CudaSlice<f64>,
    pub u: CudaSlice<f64>,
    pub gsc: CudaSlice<f64>,
    pub gbb: CudaSlice<f64>,
    pub geb: Option<CudaSlice<f64>>,
    pub bmarg: CudaSlice<f64>,
    pub pdur: CudaSlice<f64>,
    pub ptr: CudaSlice<f64>,
    pub pst: CudaSlice<f64>,
    pub pen: CudaSlice<f64>,
    pub up: CudaSlice<f64>,
}

impl<'g> Call<'g> {
    /// The backward pass: outputs in `Grads` (per sweep for the duration and transition
    /// marginals), log Z in `out`, and the flags.
    pub(crate) fn meet_backward(
        &self,
        par: &CudaSlice<f64>,
        upstream: &[f64],
        eb: bool,
    ) -> Result<(Bufs, Grads, Vec<i32>)> {
        let sh = self.shape;
        let (b, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
        let h = rows(t);
        let la = self.meet_layout(false);
        let lb = self.meet_layout(true);
        // Each kernel keeps the ring where its own layout says (the saved state carries it
        // from one to the other); the global one is there if either needs it.
        let bufs = self.meet_bufs(Layout {
            ring: la.ring && lb.ring,
            ..lb
        })?;
        let g = Grads {
            alpha: self.zeros::<f64>(b * 2 * h * c)?,
            u: self.zeros::<f64>(b * 2 * h * c)?,
            gsc: self.zeros::<f64>(b * t * c)?,
            gbb: self.zeros::<f64>(b * t * c)?,
            geb: if eb {
                Some(self.zeros::<f64>(b * t * c)?)
            } else {
                None
            },
            bmarg: self.zeros::<f64>(b * t)?,
            pdur: self.zeros::<f64>(b * 2 * k * c)?,
            ptr: self.zeros::<f64>(b * 2 * c * c)?,
            pst: self.zeros::<f64>(b * c)?,
            pen: self.zeros::<f64>(b * c)?,
            up: self.gpu.upload(upstream).map_err(|e| self.err(e))?,
        };
        let ex = self.zeros::<i64>(b * 2 * h)?;
        let erm = self.zeros::<f64>(b * 2 * h)?;
        let mut a = self.margs(par, &bufs);
        a.alpha = self.ptr(&g.alpha);
        a.u = self.ptr(&g.u);
        a.ex = self.ptr(&ex);
        a.erm = self.ptr(&erm);
        a.up = self.ptr(&g.up);
        a.gsc = self.ptr(&g.gsc);
        a.gbb = self.ptr(&g.gbb);
        a.geb = self.opt(&g.geb);
        a.bmarg = self.ptr(&g.bmarg);
        a.pdur = self.ptr(&g.pdur);
        a.ptr = self.ptr(&g.ptr);
        a.pst = self.ptr(&g.pst);
        a.pen = self.ptr(&g.pen);
        self.meet_launch("meet_save_log", 2 * b, la, &a)?;
        self.meet_launch("meet_bwd_log", 2 * b, lb, &a)?;
        self.gpu.mark();
        let flags = self.back(&bufs.flag)?;
        Ok((bufs, g, flags))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plan_has_a_thread_per_label_in_whole_warps() {
        for k in [1, 2, 3, 7, 31, 63, 64, 100, 127, 200, 1000] {
            for c in [1, 3, 4, 5, 8, 24, 33, 50, MAX_LABELS] {
                let threads = plan(k, c).unwrap();
                assert_eq!(threads % 32, 0);
                assert!((32..=MAX_THREADS).contains(&threads));
                assert!(threads >= c, "{k} {c}: {threads}");
            }
        }
        assert_eq!(plan(5, MAX_LABELS + 1), None);
        assert_eq!(plan_with(127, 4, 32), Some(128));
        assert_eq!(plan_with(127, 4, 8), Some(512));
    }

    #[test]
    fn the_layout_fits_the_limit_and_prefers_shared_memory() {
        for (k, c) in [
            (7, 9),
            (127, 4),
            (100, 24),
            (1000, 24),
            (1, MAX_LABELS),
            (1000, MAX_LABELS),
        ] {
            for marg in [false, true] {
                let lay = layout(k, c, 227 * 1024, marg);
                assert!(lay.bytes <= 227 * 1024, "{k} {c} {marg}: {lay:?}");
            }
        }
        let s5 = layout(127, 4, 227 * 1024, true);
        assert!(s5.ring && s5.ch == 64, "{s5:?}");
        // S8: the ring (194 KB) fits with fewer staged steps.
        let s8 = layout(1000, 24, 227 * 1024, true);
        assert!(s8.ring && s8.ch < 64, "{s8:?}");
        for lay in [s5, s8] {
            assert_eq!(lay.ch % P, 0);
        }
    }

    #[test]
    fn every_placement_is_a_loaded_kernel() {
        for k in [
            "meet_fwd_log",
            "meet_save_log",
            "meet_z_log",
            "meet_bwd_log",
        ] {
            for ring in [false, true] {
                let lay = Layout {
                    ch: P,
                    ring,
                    bytes: 0,
                };
                let name = placed(k, lay);
                assert!(
                    crate::device::KERNELS.contains(&name.as_str()),
                    "{k} {lay:?}: {name}"
                );
            }
        }
    }

    #[test]
    fn parameters_beyond_the_range_are_refused() {
        assert!(params(&[0.0], &[0.0], &[0.0], &[0.0], 1, 1).is_some());
        assert!(params(&[51.0], &[0.0], &[0.0], &[0.0], 1, 1).is_none());
        assert!(params(&[f64::NEG_INFINITY], &[0.0], &[0.0], &[-50.0], 1, 1).is_some());
    }
}
