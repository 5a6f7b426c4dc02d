//! Launching the meet kernels: one call's buffers (one allocation), the small outputs read
//! back in one copy, the forward pass (`meet_fwd_log`, `meet_z_log`) and the backward pass
//! (`meet_save_log`, `meet_bwd_log`, then `shared_sum`).

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use semicrf_core::{Error, Result};

use super::plan::{Layout, layout, placed, rows, state_words};
use crate::call::sums::{SumInputs, shared_sum};
use crate::call::{Buf, StreamCall, Targets};
use crate::kernel::{DevPtr, MeetArgs, MeetPass, max_threads};

/// Buffers of one call of the kernels, carved out of one zeroed allocation (one allocation
/// and one memset instead of one of each a buffer: at S1 a few microseconds each, spent
/// before the first kernel can start): the small outputs first, then the sweeps' saved
/// states, the ring where it is kept in global memory, and for a backward pass the saved
/// rows.
pub(crate) struct Bufs {
    arena: CudaSlice<f64>,
    /// The sweeps' saved states.
    pub st: DevPtr,
    /// The rings in global memory, 0 where the layout keeps them in shared memory.
    pub ring: DevPtr,
    /// A backward pass's saved rows: `α` and `u` (`(B, 2, H, C)` each), the exponents
    /// (`i64`, `(B, 2, H)`) and the rows' scale (`(B, 2, H)`); 0 for a forward pass.
    pub alpha: DevPtr,
    pub u: DevPtr,
    pub ex: DevPtr,
    pub erm: DevPtr,
    pub small: SmallWords,
}

/// The small outputs of one call, at the start of [`Bufs`]' allocation, read back in one
/// copy: `(log Z, 0)` per sequence, the flags (`i32`, two a word), and for a backward pass
/// the start and end marginals, the batch's weighted duration and transition marginals
/// (`shared_sum`), then (read only when a sequence is rerun) each sweep's duration and
/// transition marginals.
pub(crate) struct SmallWords {
    base: DevPtr,
    b: usize,
    kc: usize,
    cc: usize,
    c: usize,
}

/// The first part of [`SmallWords`] on the host.
pub(crate) struct SmallValues {
    pub out: Vec<f64>,
    pub flags: Vec<i32>,
    pub pst: Vec<f64>,
    pub pen: Vec<f64>,
    /// `(K·C)`: Σ_b g_b · (both sweeps' duration marginals).
    pub dur: Vec<f64>,
    /// `(C·C)`: likewise for the transition.
    pub tr: Vec<f64>,
}

impl SmallWords {
    /// Words of the small outputs of `b` sequences with `kc` duration and `cc` transition
    /// marginals per sweep and `c` start and end marginals (all 0 for a forward pass).
    pub(crate) fn words(b: usize, kc: usize, cc: usize, c: usize) -> usize {
        2 * b + b.div_ceil(2) + 2 * b * c + kc + cc + 2 * b * kc + 2 * b * cc
    }

    fn at(&self, words: usize) -> DevPtr {
        self.base.words(words)
    }

    pub(crate) fn out(&self) -> DevPtr {
        self.at(0)
    }

    fn flag_words(&self) -> usize {
        2 * self.b
    }

    pub(crate) fn flag(&self) -> DevPtr {
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

    pub(crate) fn pst(&self) -> DevPtr {
        self.at(self.pst_words())
    }

    pub(crate) fn pen(&self) -> DevPtr {
        self.at(self.pen_words())
    }

    pub(crate) fn pdur(&self) -> DevPtr {
        self.at(self.pdur_words())
    }

    pub(crate) fn ptr(&self) -> DevPtr {
        self.at(self.ptr_words())
    }

    /// The [`SmallWords::head_words`] first words, as read back, taken apart.
    pub(crate) fn parse(&self, v: &[f64]) -> SmallValues {
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
        SmallValues {
            out: part(0, 2 * b),
            flags,
            pst: part(self.pst_words(), b * c),
            pen: part(self.pen_words(), b * c),
            dur: part(self.sum_words(), self.kc),
            tr: part(self.sum_words() + self.kc, self.cc),
        }
    }

    /// Launches `shared_sum` (`kernels/io.cu`) on the two sweeps' duration and transition
    /// marginals: the batch's weighted sums, as the host's `weighted` sums them (the
    /// waiting backward's; the queued one sums everything in one launch of its own).
    pub(crate) fn sum(&self, call: &StreamCall<'_>) -> Result<()> {
        let s = SumInputs {
            two: Some((self.pdur(), self.ptr())),
            one: (DevPtr::NULL, DevPtr::NULL),
            ends: (DevPtr::NULL, DevPtr::NULL),
            redo: DevPtr::NULL,
            b: self.b,
            kc: self.kc,
            cc: self.cc,
            nc: 0,
        };
        shared_sum(call, &s, self.at(self.sum_words()))
    }
}

impl Bufs {
    /// The small outputs (the allocation's first words).
    pub(crate) fn small_part(&self) -> cudarc::driver::CudaView<'_, f64> {
        self.arena.slice(0..self.small.head_words())
    }

    /// Everything but the per-sweep marginals, in one copy (which waits for the launches
    /// before it).
    pub(crate) fn read(&self, call: &StreamCall<'_>) -> Result<SmallValues> {
        Ok(self.small.parse(&call.back(&self.small_part())?))
    }

    /// `(log Z, 0)` per sequence (after a rerun wrote some of them).
    pub(crate) fn read_out(&self, call: &StreamCall<'_>) -> Result<Vec<f64>> {
        call.back(&self.arena.slice(0..2 * self.small.b))
    }

    /// Each sweep's duration (`(B, 2, K·C)`) and transition (`(B, 2, C·C)`) marginals.
    pub(crate) fn read_sweeps(&self, call: &StreamCall<'_>) -> Result<(Vec<f64>, Vec<f64>)> {
        let s = &self.small;
        let (d, t) = (s.pdur_words(), s.ptr_words());
        let pdur = call.back_all_of(&self.arena.slice(d..t))?;
        let ptr = call.back_all_of(&self.arena.slice(t..t + 2 * s.b * s.cc))?;
        Ok((pdur, ptr))
    }
}

impl StreamCall<'_> {
    /// The kernels' argument block with the inputs filled in.
    fn margs(&self, par: DevPtr, b: &Bufs) -> MeetArgs {
        let sh = self.shape;
        MeetArgs {
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
            ..MeetArgs::default()
        }
    }

    fn meet_launch(&self, pass: MeetPass, grid: usize, lay: Layout, args: &MeetArgs) -> Result<()> {
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
        let f = self
            .gpu
            .meet_function(placed(pass, lay), lay.p)
            .map_err(|message| Error::Device {
                backend: self.backend.into(),
                message,
            })?;
        let mut b = self.gpu.stream.launch_builder(&f);
        b.arg(&a);
        // SAFETY: `a` is the kernel's `struct MArgs` (its layout asserted at compile time); every pointer in it is a live
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
            SmallWords::words(b, kc, cc, c1),
            b * 2 * state_words(k, c),
            if lay.ring { 0 } else { b * 2 * (k + lay.p) * c },
            if backward { b * 2 * h * c } else { 0 },
            if backward { b * 2 * h * c } else { 0 },
            if backward { b * 2 * h } else { 0 },
            if backward { b * 2 * h } else { 0 },
        ];
        let arena = self.zeros::<f64>(parts.iter().sum())?;
        let base = self.ptr(&arena);
        let mut at = [DevPtr::NULL; 7];
        let mut next = base;
        for (a, &n) in at.iter_mut().zip(&parts) {
            *a = if n == 0 { DevPtr::NULL } else { next };
            next = next.words(n);
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
            small: SmallWords {
                base,
                b,
                kc,
                cc,
                c: c1,
            },
        })
    }

    /// The forward pass: `(log Z, 0)` per sequence and the flags, read back.
    pub(crate) fn meet_forward(&self, par: DevPtr) -> Result<(Bufs, SmallValues)> {
        let lay = self.meet_layout(false);
        let bufs = self.meet_bufs(lay, false)?;
        let a = self.margs(par, &bufs);
        let n = self.shape.batch;
        self.meet_launch(MeetPass::Forward, 2 * n, lay, &a)?;
        self.meet_launch(MeetPass::Z, n, lay, &a)?;
        let small = bufs.read(self)?;
        Ok((bufs, small))
    }
}

/// A backward pass's outputs on the device (beyond the small ones of [`Bufs`]).
pub(crate) struct MeetGrads {
    pub gsc: Buf,
    /// Written whether or not the problem has a begin boundary.
    pub gbb: Buf,
    pub geb: Option<Buf>,
    pub bmarg: Buf,
}

impl StreamCall<'_> {
    /// The backward pass, launched: outputs in `MeetGrads` and among the small outputs (per
    /// sweep for the duration and transition marginals), log Z there too, and the flags.
    /// The large outputs are the caller's buffers where `to` gives them.
    pub(crate) fn meet_backward(
        &self,
        par: DevPtr,
        eb: bool,
        to: &Targets,
    ) -> Result<(Bufs, MeetGrads)> {
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
        self.meet_launch(MeetPass::Save, 2 * b, la, &a)?;
        // The outputs, which only the second kernel writes, are made ready while the first
        // runs.
        let g = MeetGrads {
            gsc: self.result_buf(to.sc, b * t * c, to)?,
            gbb: self.result_buf(to.bb, b * t * c, to)?,
            geb: if eb {
                Some(self.result_buf(to.eb, b * t * c, to)?)
            } else {
                None
            },
            bmarg: self.result_buf(to.bm, b * t, to)?,
        };
        a.gsc = g.gsc.ptr(self);
        a.gbb = g.gbb.ptr(self);
        a.geb = g.geb.as_ref().map_or(DevPtr::NULL, |x| x.ptr(self));
        a.bmarg = g.bmarg.ptr(self);
        a.acc = lb.acc as i32;
        self.meet_launch(MeetPass::Backward, 2 * b, lb, &a)?;
        self.gpu.mark();
        Ok((bufs, g))
    }
}
