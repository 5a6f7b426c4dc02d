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
    pub acc: i32,
}

// SAFETY: a plain `repr(C)` block of integers, laid out as the kernels' `struct MArgs`.
unsafe impl DeviceRepr for MArgs {}

/// Steps a block of the kernels' sweeps (`MT_P` of `kernels/meet.cu`): [`STEPS_WIDE`] in the
/// kernels of a label width where their shared memory still holds the ring (each block of
/// steps has the same barriers and fixed costs, so longer blocks cost less a step: on an
/// H100, 3.6 against 4.3 ms at S4), else [`STEPS`], which the general kernels are compiled
/// for alone ([`steps`]).
pub(crate) const STEPS: usize = 8;

/// See [`STEPS`].
pub(crate) const STEPS_WIDE: usize = 16;

/// The most labels the kernels take (one thread a label in phase 2, and their shared memory
/// holds the C×C transition); more labels run in the log domain.
pub(crate) const MAX_LABELS: usize = 64;

/// The most threads a block of the kernels of `p` steps a block has (their
/// `__launch_bounds__`, `MT_LB`): 512 for [`STEPS`], whose phases 1 and 3 then split large
/// K·C best (S8: 1.65 against 2.5 s with 256); 256 for [`STEPS_WIDE`], whose unrolled phase
/// 2 needs the registers (S4: 3.6 against 4.3 ms with 512).
pub(crate) fn max_threads(p: usize) -> usize {
    if p > STEPS { 256 } else { 512 }
}

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
/// and 3 (p·K·C window terms a block of `p` steps) give each thread about
/// [`items_per_thread`] of them, at least one thread a label (whole warps), at most
/// [`max_threads`].
pub(crate) fn plan(k: usize, c: usize, p: usize) -> Option<usize> {
    plan_with(k, c, items_per_thread(), p)
}

/// The [`plan`] of the kernels for `K`, `C` on a device of `limit` bytes of shared memory a
/// block ([`steps`] a block), or `None` where [`plan`] has none or either kernel of a
/// backward pass (and so the forward's) does not fit.
pub(crate) fn fitting_plan(k: usize, c: usize, limit: usize) -> Option<usize> {
    let fits = |marg| layout(k, c, limit, marg).bytes <= limit;
    plan(k, c, steps(k, c, limit, width(c))).filter(|_| fits(false) && fits(true))
}

/// [`plan`] for a given number of window terms per thread.
pub(crate) fn plan_with(k: usize, c: usize, items: usize, p: usize) -> Option<usize> {
    if c == 0 || c > MAX_LABELS {
        return None;
    }
    let labels = c.div_ceil(32) * 32;
    let want = (p * k * c).div_ceil(items).next_power_of_two();
    Some(want.clamp(32, max_threads(p)).max(labels))
}

/// The label widths the kernels are also compiled for (`MT_CT` of `kernels/meet.cu`: phase 2
/// unrolled with a label's column of the transition in registers).
pub(crate) const WIDTHS: [usize; 3] = [8, 16, 32];

/// The width of the kernels that run `C` labels: the least of [`WIDTHS`] that holds them, or
/// 0 (the general kernels) beyond them or where the environment sets `SEMICRF_CUDA_FAST=0`
/// (for comparison).
pub(crate) fn width(c: usize) -> usize {
    if std::env::var("SEMICRF_CUDA_FAST").as_deref() == Ok("0") {
        return 0;
    }
    WIDTHS.into_iter().find(|&w| c <= w).unwrap_or(0)
}

/// Where a launch keeps what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The kernels' label width ([`width`]; 0: the general kernels).
    pub ct: usize,
    /// Steps staged at a time.
    pub ch: usize,
    /// Whether the ring is in shared memory (else in a global buffer).
    pub ring: bool,
    /// Dynamic shared memory, bytes.
    pub bytes: usize,
    /// Steps a block ([`steps`]).
    pub p: usize,
    /// Whether the second halves accumulate the duration and transition marginals in shared
    /// memory (else in their global outputs, a read and a write a block of steps).
    pub acc: bool,
}

/// The shared-memory layout for `K`, `C` within `limit` bytes (`marg`: the second halves,
/// which also stage the other sweep's rows): the most staged steps (64 down to one block of
/// steps) that keep the ring in shared memory, with the accumulators of the second halves
/// where they fit too; else the most without them.
pub(crate) fn layout(k: usize, c: usize, limit: usize, marg: bool) -> Layout {
    let ct = width(c);
    layout_with(k, c, limit, marg, (true, marg), ct, steps(k, c, limit, ct))
}

/// Steps a block of the kernels of width `ct` for `K`, `C` within `limit` bytes of shared
/// memory ([`STEPS`]): the same for both kernels of a backward pass, which share the state.
pub(crate) fn steps(k: usize, c: usize, limit: usize, ct: usize) -> usize {
    let wide = ct > 0 && layout_with(k, c, limit, true, (true, false), ct, STEPS_WIDE).ring;
    if wide { STEPS_WIDE } else { STEPS }
}

/// [`layout`], with the ring kept out of shared memory unless `ring` and the accumulators
/// unless `acc`, for the kernels of width `ct` and `p` steps a block (for tests).
pub(crate) fn layout_with(
    k: usize,
    c: usize,
    limit: usize,
    marg: bool,
    (ring, acc): (bool, bool),
    ct: usize,
    p: usize,
) -> Layout {
    let words = limit / 8;
    let ring_words = (k + p) * c;
    // The kernels' header (`Sweep`): α̃ rows and bounds (C rounded up to 4, or to the
    // kernels' width), four arrays of the block's steps, Tl (rows padded likewise), the first
    // P+1 weights, the rebase factors, the steps' exponents, then the int words (row flags,
    // window starts, rebase exponents, general steps, flags). The second halves also keep two
    // more arrays of the block's steps and two copies of the running marginals.
    let c4 = if ct > 0 { ct } else { c.div_ceil(4) * 4 };
    let header = 2 * (p + 1) * c4
        + 4 * p * c
        + c4 * c
        + (p + 1) * c
        + c
        + (p + 1)
        + (3 * p + 4 + p * c + 3 * c) / 2;
    let base = |ch: usize| {
        header
            + 4 * ch * c
            + if marg {
                2 * ch * c + 4 * ch + 2 * p * c + 4 * c
            } else {
                0
            }
    };
    let top = (4096 / c.max(1)).clamp(p, 64);
    let chs: Vec<usize> = (0..4)
        .map(|i| 64 >> i)
        .filter(|&ch| ch <= top && ch >= p)
        .collect();
    let acc_words = k * c + c * c;
    let acc = acc && marg;
    for (ring, acc) in [(ring, acc), (ring, false), (false, acc), (false, false)] {
        for &ch in &chs {
            let w = base(ch) + if ring { ring_words } else { 0 } + if acc { acc_words } else { 0 };
            if w <= words {
                return Layout {
                    ct,
                    ch,
                    ring,
                    bytes: 8 * w,
                    p,
                    acc,
                };
            }
        }
    }
    Layout {
        ct,
        ch: p,
        ring: false,
        bytes: 8 * base(p),
        p,
        acc: false,
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

/// Words of a sweep's saved state (`state_len` of the kernels): the ring's last `K` entries
/// of every label and ten words a label besides.
pub(crate) fn state_words(k: usize, c: usize) -> usize {
    k * c + 10 * c + 4
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
        + ByteCount::f64s(&[b.div_ceil(2)]);
    if !lay.ring {
        n = n + ByteCount::f64s(&[b, 2, k + lay.p, c]);
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
            + ByteCount::f64s(&[2, b, c])
            + ByteCount::f64s(&[k * c + c * c]);
    }
    n
}

/// The kernel that runs `kernel` with layout `lay`: one variant per label width (`_cN`) and
/// placement of the ring (`_r`: shared memory), so that the kernels address shared memory
/// directly; with the module that holds it: its label width (0: the general kernels) and
/// steps a block (each module has its own `meet_z_log`, whose shared memory is laid out as
/// its sweeps').
pub(crate) fn placed(kernel: &str, lay: Layout) -> (String, usize, usize) {
    if kernel == "meet_z_log" {
        return (kernel.into(), lay.ct, lay.p);
    }
    let width = match lay.ct {
        0 => String::new(),
        ct => format!("_c{ct}"),
    };
    let ring = if lay.ring { "_r" } else { "" };
    (format!("{kernel}{width}{ring}"), lay.ct, lay.p)
}

/// Buffers of one call of the kernels, carved out of one zeroed allocation (one allocation
/// and one memset instead of one of each a buffer: at S1 a few microseconds each, spent
/// before the first kernel can start): the small outputs first, then the sweeps' saved
/// states, the ring where it is kept in global memory, and for a backward pass the saved
/// rows.
pub(crate) struct Bufs {
    arena: CudaSlice<f64>,
    /// The sweeps' saved states.
    pub st: u64,
    /// The rings in global memory, 0 where the layout keeps them in shared memory.
    pub ring: u64,
    /// A backward pass's saved rows: `α` and `u` (`(B, 2, H, C)` each), the exponents
    /// (`i64`, `(B, 2, H)`) and the rows' scale (`(B, 2, H)`); 0 for a forward pass.
    pub alpha: u64,
    pub u: u64,
    pub ex: u64,
    pub erm: u64,
    pub small: Small,
}

/// The small outputs of one call, at the start of [`Bufs`]' allocation, read back in one
/// copy: `(log Z, 0)` per sequence, the flags (`i32`, two a word), and for a backward pass
/// the start and end marginals, the batch's weighted duration and transition marginals
/// (`meet_sum`), then (read only when a sequence is rerun) each sweep's duration and
/// transition marginals.
pub(crate) struct Small {
    base: u64,
    b: usize,
    kc: usize,
    cc: usize,
    c: usize,
}

/// The first part of [`Small`] on the host.
pub(crate) struct SmallHost {
    pub out: Vec<f64>,
    pub flags: Vec<i32>,
    pub pst: Vec<f64>,
    pub pen: Vec<f64>,
    /// `(K·C)`: Σ_b g_b · (both sweeps' duration marginals).
    pub dur: Vec<f64>,
    /// `(C·C)`: likewise for the transition.
    pub tr: Vec<f64>,
}

impl Small {
    /// Words of the small outputs of `b` sequences with `kc` duration and `cc` transition
    /// marginals per sweep and `c` start and end marginals (all 0 for a forward pass).
    pub(crate) fn words(b: usize, kc: usize, cc: usize, c: usize) -> usize {
        2 * b + b.div_ceil(2) + 2 * b * c + kc + cc + 2 * b * kc + 2 * b * cc
    }

    fn at(&self, words: usize) -> u64 {
        self.base + 8 * words as u64
    }

    pub(crate) fn out(&self) -> u64 {
        self.at(0)
    }

    fn flag_words(&self) -> usize {
        2 * self.b
    }

    pub(crate) fn flag(&self) -> u64 {
        self.at(self.flag_words())
    }

    fn pst_words(&self) -> usize {
        self.flag_words() + self.b.div_ceil(2)
    }

    fn pen_words(&self) -> usize {
        self.pst_words() + self.b * self.c
    }

    fn sum_words(&self) -> usize {
        self.pen_words() + self.b * self.c
    }

    fn pdur_words(&self) -> usize {
        self.sum_words() + self.kc + self.cc
    }

    fn ptr_words(&self) -> usize {
        self.pdur_words() + 2 * self.b * self.kc
    }

    /// Words of the part [`Bufs::read`] reads: everything but the per-sweep marginals.
    pub(crate) fn head_words(&self) -> usize {
        self.pdur_words()
    }

    pub(crate) fn pst(&self) -> u64 {
        self.at(self.pst_words())
    }

    pub(crate) fn pen(&self) -> u64 {
        self.at(self.pen_words())
    }

    pub(crate) fn pdur(&self) -> u64 {
        self.at(self.pdur_words())
    }

    pub(crate) fn ptr(&self) -> u64 {
        self.at(self.ptr_words())
    }

    /// The [`Small::head_words`] first words, as read back, taken apart.
    pub(crate) fn parse(&self, v: &[f64]) -> SmallHost {
        let part = |a: usize, n: usize| v[a..a + n].to_vec();
        let (b, c) = (self.b, self.c);
        let flags = v[self.flag_words()..self.pst_words()]
            .iter()
            .flat_map(|w| {
                let u = w.to_bits();
                [u as u32 as i32, (u >> 32) as u32 as i32]
            })
            .take(b)
            .collect();
        SmallHost {
            out: part(0, 2 * b),
            flags,
            pst: part(self.pst_words(), b * c),
            pen: part(self.pen_words(), b * c),
            dur: part(self.sum_words(), self.kc),
            tr: part(self.sum_words() + self.kc, self.cc),
        }
    }

    /// Launches `meet_sum`: the batch's weighted duration and transition marginals.
    fn sum(&self, call: &Call<'_>) -> Result<()> {
        let n = self.kc + self.cc;
        if n == 0 {
            return Ok(());
        }
        let f = call.gpu.function("meet_sum");
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (pdur, ptr, red) = (self.pdur(), self.ptr(), self.at(self.sum_words()));
        let (b, kc, cc) = (self.b as i64, self.kc as i64, self.cc as i64);
        let mut l = call.gpu.stream.launch_builder(f);
        l.arg(&pdur)
            .arg(&ptr)
            .arg(&call.up)
            .arg(&red)
            .arg(&b)
            .arg(&kc)
            .arg(&cc);
        // SAFETY: the arguments are `meet_sum`'s; the per-sweep marginals hold 2·B·(K·C)
        // and 2·B·(C·C) words, the upstream gradient B, `red` K·C + C·C; one thread per item.
        unsafe { l.launch(cfg) }.map_err(|e| call.err(e))?;
        Ok(())
    }
}

impl Bufs {
    /// The small outputs (the allocation's first words).
    pub(crate) fn small_part(&self) -> cudarc::driver::CudaView<'_, f64> {
        self.arena.slice(0..self.small.head_words())
    }

    /// Everything but the per-sweep marginals, in one copy (which waits for the launches
    /// before it).
    pub(crate) fn read(&self, call: &Call<'_>) -> Result<SmallHost> {
        Ok(self.small.parse(&call.back(&self.small_part())?))
    }

    /// `(log Z, 0)` per sequence (after a rerun wrote some of them).
    pub(crate) fn read_out(&self, call: &Call<'_>) -> Result<Vec<f64>> {
        call.back(&self.arena.slice(0..2 * self.small.b))
    }

    /// Each sweep's duration (`(B, 2, K·C)`) and transition (`(B, 2, C·C)`) marginals.
    pub(crate) fn read_sweeps(&self, call: &Call<'_>) -> Result<(Vec<f64>, Vec<f64>)> {
        let s = &self.small;
        let (d, t) = (s.pdur_words(), s.ptr_words());
        let pdur = call.back_all_of(&self.arena.slice(d..t))?;
        let ptr = call.back_all_of(&self.arena.slice(t..t + 2 * s.b * s.cc))?;
        Ok((pdur, ptr))
    }
}

impl<'g> Call<'g> {
    /// The kernels' argument block with the inputs filled in.
    fn margs(&self, par: u64, b: &Bufs) -> MArgs {
        let sh = self.shape;
        MArgs {
            sc: self.sc,
            bb: self.bb,
            eb: self.eb,
            f32in: self.f32in() as i32,
            par,
            len: self.len,
            st: b.st,
            ring: b.ring,
            out: b.small.out(),
            flag: b.small.flag(),
            t: sh.len as i64,
            k: sh.max_duration as i64,
            c: sh.labels as i64,
            h: rows(sh.len) as i64,
            ..MArgs::default()
        }
    }

    fn meet_launch(&self, kernel: &str, grid: usize, lay: Layout, args: &MArgs) -> Result<()> {
        let threads = self.meet_plan.expect("the meet kernels have a plan");
        debug_assert!(threads <= max_threads(lay.p), "{threads} threads, {lay:?}");
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
        let (name, ct, p) = placed(kernel, lay);
        let f = self
            .gpu
            .function_or_wide(&name, ct, p)
            .map_err(|message| Error::Device {
                backend: self.backend.into(),
                message,
            })?;
        let mut b = self.gpu.stream.launch_builder(&f);
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

    /// The buffers of a pass (`backward`: with room for the marginals among the small
    /// outputs, and the saved rows).
    fn meet_bufs(&self, lay: Layout, backward: bool) -> Result<Bufs> {
        let sh = self.shape;
        let (b, k, c) = (sh.batch, sh.max_duration, sh.labels);
        let (kc, cc, c1) = if backward {
            (k * c, c * c, c)
        } else {
            (0, 0, 0)
        };
        let h = rows(sh.len);
        // Words of each part, in the allocation's order.
        let parts = [
            Small::words(b, kc, cc, c1),
            b * 2 * state_words(k, c),
            if lay.ring { 0 } else { b * 2 * (k + lay.p) * c },
            if backward { b * 2 * h * c } else { 0 },
            if backward { b * 2 * h * c } else { 0 },
            if backward { b * 2 * h } else { 0 },
            if backward { b * 2 * h } else { 0 },
        ];
        let arena = self.zeros::<f64>(parts.iter().sum())?;
        let base = self.ptr(&arena);
        let mut at = [0u64; 7];
        let mut next = base;
        for (a, &n) in at.iter_mut().zip(&parts) {
            *a = if n == 0 { 0 } else { next };
            next += 8 * n as u64;
        }
        let [_, st, ring, alpha, u, ex, erm] = at;
        Ok(Bufs {
            arena,
            st,
            ring,
            alpha,
            u,
            ex,
            erm,
            small: Small {
                base,
                b,
                kc,
                cc,
                c: c1,
            },
        })
    }

    /// The forward pass: `(log Z, 0)` per sequence and the flags, read back.
    pub(crate) fn meet_forward(&self, par: u64) -> Result<(Bufs, SmallHost)> {
        let lay = self.meet_layout(false);
        let bufs = self.meet_bufs(lay, false)?;
        let a = self.margs(par, &bufs);
        let n = self.shape.batch;
        self.meet_launch("meet_fwd_log", 2 * n, lay, &a)?;
        self.meet_launch("meet_z_log", n, lay, &a)?;
        let small = bufs.read(self)?;
        Ok((bufs, small))
    }
}

/// A backward pass's outputs on the device (beyond the small ones of [`Bufs`]).
pub(crate) struct Grads {
    pub gsc: CudaSlice<f64>,
    pub gbb: CudaSlice<f64>,
    pub geb: Option<CudaSlice<f64>>,
    pub bmarg: CudaSlice<f64>,
}

impl<'g> Call<'g> {
    /// The backward pass, launched: outputs in `Grads` and among the small outputs (per
    /// sweep for the duration and transition marginals), log Z there too, and the flags.
    pub(crate) fn meet_backward(&self, par: u64, eb: bool) -> Result<(Bufs, Grads)> {
        let sh = self.shape;
        let (b, t, c) = (sh.batch, sh.len, sh.labels);
        let la = self.meet_layout(false);
        let lb = self.meet_layout(true);
        // Each kernel keeps the ring where its own layout says (the saved state carries it
        // from one to the other); the global one is there if either needs it.
        let bufs = self.meet_bufs(
            Layout {
                ring: la.ring && lb.ring,
                ..lb
            },
            true,
        )?;
        let mut a = self.margs(par, &bufs);
        a.alpha = bufs.alpha;
        a.u = bufs.u;
        a.ex = bufs.ex;
        a.erm = bufs.erm;
        a.up = self.up;
        a.pdur = bufs.small.pdur();
        a.ptr = bufs.small.ptr();
        a.pst = bufs.small.pst();
        a.pen = bufs.small.pen();
        self.meet_launch("meet_save_log", 2 * b, la, &a)?;
        // The outputs, which only the second kernel writes, are made ready while the first
        // runs.
        let g = Grads {
            gsc: self.zeros::<f64>(b * t * c)?,
            gbb: self.zeros::<f64>(b * t * c)?,
            geb: if eb {
                Some(self.zeros::<f64>(b * t * c)?)
            } else {
                None
            },
            bmarg: self.zeros::<f64>(b * t)?,
        };
        a.gsc = self.ptr(&g.gsc);
        a.gbb = self.ptr(&g.gbb);
        a.geb = self.opt(&g.geb);
        a.bmarg = self.ptr(&g.bmarg);
        a.acc = lb.acc as i32;
        self.meet_launch("meet_bwd_log", 2 * b, lb, &a)?;
        bufs.small.sum(self)?;
        self.gpu.mark();
        Ok((bufs, g))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn every_plan_has_a_thread_per_label_in_whole_warps() {
        for k in [1, 2, 3, 7, 31, 63, 64, 100, 127, 200, 1000] {
            for c in [1, 3, 4, 5, 8, 24, 33, 50, MAX_LABELS] {
                for p in [STEPS, STEPS_WIDE] {
                    let threads = plan(k, c, p).unwrap();
                    assert_eq!(threads % 32, 0);
                    assert!((32..=max_threads(p)).contains(&threads));
                    assert!(threads >= c, "{k} {c}: {threads}");
                }
            }
        }
        assert_eq!(plan(5, MAX_LABELS + 1, STEPS), None);
        assert_eq!(plan_with(127, 4, 32, STEPS), Some(128));
        assert_eq!(plan_with(127, 4, 8, STEPS), Some(512));
        assert_eq!(plan_with(127, 4, 8, STEPS_WIDE), Some(256));
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
        assert!(
            s5.ring && s5.acc && s5.ch == 64 && s5.p == STEPS_WIDE,
            "{s5:?}"
        );
        assert!(!layout(127, 4, 227 * 1024, false).acc);
        // S8: the ring (194 KB) fits with fewer staged steps and the shorter blocks, the
        // accumulators (194 KB more) do not.
        let s8 = layout(1000, 24, 227 * 1024, true);
        assert!(s8.ring && !s8.acc && s8.ch < 64 && s8.p == STEPS, "{s8:?}");
        for (lay, k, c) in [(s5, 127, 4), (s8, 1000, 24)] {
            assert_eq!(lay.ch % lay.p, 0);
            // Both kernels of a backward pass share the state, so the steps a block.
            assert_eq!(layout(k, c, 227 * 1024, false).p, lay.p);
        }
        // The general kernels are compiled for STEPS alone.
        assert_eq!(layout(100, 40, 227 * 1024, true).p, STEPS);
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
                for ct in [0].into_iter().chain(WIDTHS) {
                    let p = if ct == 0 { STEPS } else { STEPS_WIDE };
                    let lay = Layout {
                        ct,
                        ch: p,
                        ring,
                        bytes: 0,
                        p,
                        acc: false,
                    };
                    let (name, module, steps) = placed(k, lay);
                    let found = match module {
                        0 => crate::device::KERNELS.contains(&name.as_str()),
                        ct => crate::device::wide_kernels(ct).contains(&name),
                    };
                    assert!(found, "{k} {lay:?}: {name} (module {module})");
                    assert!(module == ct && steps == p, "{k} {lay:?}: module {module}");
                }
            }
        }
    }

    /// The emulated kernels of `tests/emu/{main}` (`meet_main.cpp`: those of
    /// `kernels/meet.cu`) compiled for the CPU emulation of `tests/emu`
    /// (`c++` or `$CXX`, C++20, threads, and the extra `flags`) into `name` in the temporary
    /// directory; `None`, with the reason printed, where no C++ compiler can be started
    /// (a failure instead when `SEMICRF_REQUIRE_CXX=1`, as CI sets it).
    pub(crate) fn build_emulator(
        name: &str,
        main: &str,
        flags: &[&str],
    ) -> Option<std::path::PathBuf> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let exe = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let run = std::process::Command::new(&cxx)
            .args(["-std=c++20", "-O1", "-pthread"])
            .args(flags)
            .arg("-I")
            .arg(dir.join("kernels"))
            .arg(dir.join("tests/emu").join(main))
            .arg("-o")
            .arg(&exe)
            .output();
        match run {
            Err(e) if std::env::var("SEMICRF_REQUIRE_CXX").as_deref() == Ok("1") => {
                panic!("SEMICRF_REQUIRE_CXX=1 but no C++ compiler ({cxx}: {e})")
            }
            Err(e) => {
                eprintln!("skipped: no C++ compiler ({cxx}: {e})");
                None
            }
            Ok(o) if !o.status.success() => panic!(
                "the emulated kernels do not compile:\n{}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Ok(_) => Some(exe),
        }
    }

    /// The emulated kernels compiled for `p` steps a block, where a label rebases itself in
    /// a block beyond 2^±`own` (`MT_SELF`; `None`: the kernels' own bound, which random
    /// problems seldom reach).
    fn emulator(p: usize, own: Option<usize>) -> Option<std::path::PathBuf> {
        let own = own.map(|x| format!("-DMT_SELF={x}"));
        let flags: Vec<String> = std::iter::once(format!("-DMT_P={p}")).chain(own).collect();
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        build_emulator(
            &format!(
                "semicrf-meet-emu-{}",
                flags.join("").replace(['-', '='], "")
            ),
            "meet_main.cpp",
            &flags,
        )
    }

    /// Runs the emulator `exe` on the input `buf`: the `f64`s it writes.
    pub(crate) fn run_emulated(exe: &std::path::Path, buf: &[u8]) -> Vec<f64> {
        let dir = std::env::temp_dir();
        let id = std::process::id();
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (fin, fout) = (
            dir.join(format!("semicrf-emu-{id}-{call}.in")),
            dir.join(format!("semicrf-emu-{id}-{call}.out")),
        );
        std::fs::write(&fin, buf).unwrap();
        let o = std::process::Command::new(exe)
            .arg(&fin)
            .arg(&fout)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "emulated kernels: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let bytes = std::fs::read(&fout).unwrap();
        let _ = std::fs::remove_file(&fin);
        let _ = std::fs::remove_file(&fout);
        bytes
            .chunks(8)
            .map(|w| f64::from_le_bytes(w.try_into().unwrap()))
            .collect()
    }

    /// What one emulated call returns.
    struct Emulated {
        out: Vec<f64>,
        flag: Vec<f64>,
        rest: Vec<f64>,
    }

    /// Runs the kernels of width `ct` on `p` under the emulation `exe` (compiled for `steps`
    /// steps a block), with `threads` per block and, where `ring`, the ring in shared memory
    /// (where `acc`, the second halves' accumulators too): the forward pass, or the backward
    /// pass with upstream gradients `up`.
    fn emulate(
        (exe, steps): (&std::path::Path, usize),
        p: &semicrf_core::Potentials<'_, f64>,
        threads: usize,
        (ring, acc): (bool, bool),
        ct: usize,
        up: Option<&[f64]>,
    ) -> Emulated {
        let sh = p.shape();
        let (b, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
        let tr: Vec<f64> = (0..c * c)
            .map(|x| p.transition_at(1, x / c, x % c))
            .collect();
        let dur: Vec<f64> = (0..k * c)
            .map(|x| p.duration_at(x / c + 1, x % c))
            .collect();
        let st: Vec<f64> = (0..c).map(|j| p.start_at(j)).collect();
        let en: Vec<f64> = (0..c).map(|j| p.end_at(j)).collect();
        let par = params(&tr, &dur, &st, &en, k, c).expect("parameters within the range");
        let limit = 227 * 1024;
        let la = layout_with(k, c, limit, false, (ring, false), ct, steps);
        let lb = layout_with(k, c, limit, true, (ring, acc), ct, steps);
        let ch = la.ch.min(lb.ch);
        let (la, lb) = (
            layout_at(k, c, ch, (la.ring, false), false, ct, steps),
            layout_at(k, c, ch, (lb.ring, lb.acc), true, ct, steps),
        );
        let mut buf: Vec<u8> = Vec::new();
        let mut int = |x: i64| buf.extend_from_slice(&x.to_le_bytes());
        let backward = up.is_some();
        for x in [
            b as i64,
            t as i64,
            k as i64,
            c as i64,
            rows(t) as i64,
            ch as i64,
            threads as i64,
            la.ring as i64,
            lb.ring as i64,
            la.bytes as i64,
            lb.bytes as i64,
            backward as i64,
            p.begin_boundary().is_some() as i64,
            p.end_boundary().is_some() as i64,
            ct as i64,
            lb.acc as i64,
        ] {
            int(x);
        }
        for &l in p.lengths() {
            int(l as i64);
        }
        let mut f64s = |v: &mut dyn Iterator<Item = f64>| {
            for x in v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        };
        f64s(&mut p.scores().iter().copied());
        if let Some(a) = p.begin_boundary() {
            f64s(&mut a.iter().copied());
        }
        if let Some(a) = p.end_boundary() {
            f64s(&mut a.iter().copied());
        }
        buf.extend_from_slice(&(par.len() as i64).to_le_bytes());
        let ones = vec![1.0; b];
        let mut f64s2 = |v: &[f64]| {
            for x in v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        };
        f64s2(&par);
        f64s2(up.unwrap_or(&ones));
        let v = run_emulated(exe, &buf);
        Emulated {
            out: v[..2 * b].to_vec(),
            flag: v[2 * b..3 * b].to_vec(),
            rest: v[3 * b..].to_vec(),
        }
    }

    /// The layout of `ch` staged steps (the same for both kernels, as the emulation stages).
    fn layout_at(
        k: usize,
        c: usize,
        ch: usize,
        (ring, acc): (bool, bool),
        marg: bool,
        ct: usize,
        p: usize,
    ) -> Layout {
        let lay = layout_with(k, c, usize::MAX / 2, marg, (ring, acc), ct, p);
        // The bytes at `lay.ch`, less the difference in staged steps.
        let per_step = 8 * (4 * c + if marg { 2 * c + 4 } else { 0 });
        Layout {
            ct,
            ch,
            ring,
            bytes: lay.bytes - per_step * (lay.ch - ch),
            p,
            acc,
        }
    }

    /// The kernels of `kernels/meet.cu`, run on the CPU by the emulation of `tests/emu`
    /// (every thread a thread, barriers and warp operations emulated), against the f64
    /// reference: log Z of the forward pass, and every gradient and boundary marginal of the
    /// backward pass, on random problems with every optional input, ragged lengths, `-inf`
    /// scores and transitions, one and two warps of labels, the ring in shared or global
    /// memory, both numbers of steps a block, labels rebasing themselves within blocks; and
    /// none of them is given up. The kernels compiled for a label width (the unrolled phase
    /// 2) give results bitwise identical to the general kernels'. Skipped where no C++
    /// compiler can be started.
    #[test]
    fn the_kernels_match_the_reference_under_a_cpu_emulation() {
        for (steps, own) in [(STEPS, None), (STEPS_WIDE, None), (STEPS_WIDE, Some(24))] {
            let Some(exe) = emulator(steps, own) else {
                return;
            };
            the_emulated_kernels_match_the_reference((&exe, steps));
        }
    }

    fn the_emulated_kernels_match_the_reference(exe: (&std::path::Path, usize)) {
        use semicrf_core::reference::Reference;
        use semicrf_core::testing::{
            GenSpec, Tolerance, TransitionKind, assert_gradients_close, random_problem, upstream,
        };
        use semicrf_core::{Engine, Gradients, Problem};
        let mut n = 0;
        for seed in 0..32u64 {
            let (b, t, k, c) = match seed % 8 {
                0 => (3, 12, 4, 3),
                1 => (2, 30, 9, 5),
                2 => (1, 1, 3, 2),
                3 => (2, 40, 25, 4),
                4 => (1, 17, 1, 6),
                5 => (2, 9, 12, 2),
                6 => (1, 21, 6, 20),
                _ => (1, 11, 5, 40),
            };
            let mut spec = GenSpec::new(b, t, k, c);
            if seed % 2 == 0 {
                spec = spec.everything();
            }
            spec.transition = TransitionKind::Static;
            spec.scale = [1.0, 3.0, 10.0][seed as usize % 3];
            spec.forbid_scores = if seed % 4 == 1 { 0.1 } else { 0.0 };
            spec.forbid_transitions = if seed % 5 == 2 && c > 1 { 0.2 } else { 0.0 };
            let owned = random_problem(500 + seed, &spec);
            let p = owned.view().unwrap();
            let problem = Problem::Structured(p.clone());
            let threads = if seed % 3 == 0 { 128 } else { 32 }.max(c.div_ceil(32) * 32);
            let ring = seed % 4 != 3;
            let acc = (ring, seed / 8 % 2 == 0);
            let tag = format!("seed {seed}: B={b} T={t} K={k} C={c}");
            let want = Reference.backward(&problem, &upstream(seed, b));
            let Ok(want) = want else { continue };
            // The general kernels, and those of the least width that holds C.
            let ct = WIDTHS.into_iter().find(|&w| c <= w).unwrap_or(0);
            let fwd = emulate(exe, &p, threads, acc, 0, None);
            let wide = emulate(exe, &p, threads, acc, ct, None);
            assert_eq!(bits(&fwd.out), bits(&wide.out), "{tag}: width {ct}");
            assert_eq!(fwd.flag, wide.flag, "{tag}: width {ct}");
            assert!(
                fwd.flag.iter().all(|&f| f == 0.0),
                "{tag}: given up {:?}",
                fwd.flag
            );
            for x in 0..b {
                assert!(
                    Tolerance::F64_VALUES.ok(fwd.out[2 * x], want.log_z[x]),
                    "{tag}: log Z {} vs {}",
                    fwd.out[2 * x],
                    want.log_z[x]
                );
            }
            let g = upstream(seed, b);
            let bwd = emulate(exe, &p, threads, acc, 0, Some(&g));
            let wide = emulate(exe, &p, threads, acc, ct, Some(&g));
            assert_eq!(bits(&bwd.out), bits(&wide.out), "{tag}: width {ct}");
            assert_eq!(bits(&bwd.rest), bits(&wide.rest), "{tag}: width {ct}");
            assert_eq!(bwd.flag, wide.flag, "{tag}: width {ct}");
            assert!(
                bwd.flag.iter().all(|&f| f == 0.0),
                "{tag}: given up {:?}",
                bwd.flag
            );
            let btc = b * t * c;
            let r = &bwd.rest;
            let arr3 = |off: usize| {
                ndarray::Array3::from_shape_vec((b, t, c), r[off..off + btc].to_vec()).unwrap()
            };
            let (bm0, pd0) = (3 * btc, 3 * btc + b * t);
            let (pt0, ps0) = (pd0 + b * 2 * k * c, pd0 + b * 2 * k * c + b * 2 * c * c);
            let pe0 = ps0 + b * c;
            let sum = |off: usize, n: usize, sides: usize| -> Vec<f64> {
                (0..n)
                    .map(|i| {
                        (0..b)
                            .map(|x| {
                                g[x] * (0..sides)
                                    .map(|s| r[off + (x * sides + s) * n + i])
                                    .sum::<f64>()
                            })
                            .sum()
                    })
                    .collect()
            };
            let got = Gradients {
                scores: Some(arr3(0)),
                begin_boundary: p.begin_boundary().map(|_| arr3(btc)),
                end_boundary: p.end_boundary().map(|_| arr3(2 * btc)),
                duration: Some(
                    ndarray::Array2::from_shape_vec((k, c), sum(pd0, k * c, 2)).unwrap(),
                ),
                transition: Some(
                    ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[c, c]), sum(pt0, c * c, 2))
                        .unwrap(),
                ),
                start: Some(ndarray::Array1::from(sum(ps0, c, 1))),
                end: Some(ndarray::Array1::from(sum(pe0, c, 1))),
                edges: None,
            };
            assert_gradients_close(&tag, &got, &want.grad, Tolerance::F64_GRADS);
            for (i, w) in want.boundary_marginals.iter().enumerate() {
                assert!(
                    Tolerance::F64_GRADS.ok(r[bm0 + i], *w),
                    "{tag}: boundary marginal {i}: {} vs {w}",
                    r[bm0 + i]
                );
            }
            n += 1;
        }
        assert!(n >= 28, "{} steps: only {n} problems compared", exe.1);
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// The same emulation built with ThreadSanitizer: no shared-memory access of one thread
    /// is left unordered against another's by the kernels' barriers (a missing barrier makes
    /// it report, and the run fail). A forward and a backward pass on one warp of labels and
    /// on two, with `-inf` scores (the general step) and without (the short one), in the
    /// kernels of a label width where C allows. Skipped where no C++ compiler can be started.
    #[test]
    fn the_emulated_kernels_leave_no_access_unordered() {
        use semicrf_core::testing::{GenSpec, TransitionKind, random_problem, upstream};
        let Some(exe) = build_emulator(
            "semicrf-meet-tsan",
            "meet_main.cpp",
            &["-fsanitize=thread", "-g"],
        ) else {
            return;
        };
        for (seed, (b, t, k, c)) in [(2, 20, 7, 5), (1, 12, 4, 40), (1, 14, 5, 12)]
            .into_iter()
            .enumerate()
        {
            let mut spec = GenSpec::new(b, t, k, c).everything();
            spec.transition = TransitionKind::Static;
            spec.forbid_scores = if seed == 0 { 0.1 } else { 0.0 };
            let owned = random_problem(900 + seed as u64, &spec);
            let p = owned.view().unwrap();
            let threads = 64.max(c.div_ceil(32) * 32);
            let ct = WIDTHS.into_iter().find(|&w| c <= w).unwrap_or(0);
            let e = (exe.as_path(), STEPS);
            emulate(e, &p, threads, (true, false), ct, None);
            emulate(
                e,
                &p,
                threads,
                (seed == 0, seed != 1),
                ct,
                Some(&upstream(1, b)),
            );
        }
    }

    #[test]
    fn parameters_beyond_the_range_are_refused() {
        assert!(params(&[0.0], &[0.0], &[0.0], &[0.0], 1, 1).is_some());
        assert!(params(&[51.0], &[0.0], &[0.0], &[0.0], 1, 1).is_none());
        assert!(params(&[f64::NEG_INFINITY], &[0.0], &[0.0], &[-50.0], 1, 1).is_some());
    }
}
