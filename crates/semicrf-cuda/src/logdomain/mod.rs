//! The host side of the log-domain streaming kernels (`kernels/streaming.cu`): every semiring,
//! both forms of the transition, Viterbi's backpointers and the log semiring's backward, one
//! thread block per sequence, or one long sequence over several ([`spread`], and for the
//! forward [`pipe`]). The meet
//! kernels' sequences given up are rerun here.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use semicrf_core::{Error, Result};

use crate::call::{Arena, Buf, Seq, StreamCall, Targets};
use crate::kernel::{DevPtr, Kernel, SemiringId, StreamArgs, TASKS};

pub(crate) mod pipe;
pub(crate) mod spread;

/// A kernel's use of shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Smem {
    /// Positions staged at a time.
    pub ch: usize,
    /// Whether the rings fit in shared memory.
    pub ring: bool,
    /// Whether the backward's shared-parameter accumulators do too.
    pub acc: bool,
    /// Dynamic shared memory in bytes.
    pub bytes: usize,
}

/// Words (8 bytes) of the windows' bookkeeping of the static forward kernels for `C` labels
/// (`win_words` in `kernels/streaming.cu`): the first admissible starts, three `int` arrays,
/// and the tasks' partials.
pub(crate) fn window_words(c: usize) -> usize {
    let p = c + TASKS;
    c + (3 * c + 3) / 2 + 3 * p + p.div_ceil(2)
}

/// Which kernel a layout is for: `(header words, stages, ring words, accumulator words)` per
/// `K`, `C`.
fn parts(kernel: Kernel, k: usize, c: usize) -> (usize, usize, usize, usize) {
    let kc = k * c;
    match kernel {
        Kernel::FwdStaticLog | Kernel::FwdStaticMax => (2 * c + window_words(c), 3, kc, 0),
        Kernel::FwdStaticEnt => (2 * c + window_words(c), 3, 2 * kc, 0),
        Kernel::FwdDdEnt => (2 * c, 3, 3 * kc, 0),
        Kernel::BwdStaticLog => (2 * c + window_words(c), 5, kc, kc + c * c),
        Kernel::BwdDdLog => (2 * c, 5, 2 * kc, kc + kc * c),
        Kernel::FwdDdLog | Kernel::FwdDdMax => (2 * c, 3, 2 * kc, 0),
        _ => (2 * c, 3, kc, 0),
    }
}

/// The shared-memory layout of `kernel` for `K`, `C` within `limit` bytes: staged rows
/// always, then the backward's accumulators, then the rings, each where it fits.
///
/// Accumulators before rings: each window item of the backward reads a ring entry but reads
/// and writes an accumulator, so when only one of them fits, the accumulators gain more. On an
/// H100 at S8 (1, 100000, 1000, 24), where only one fits, forward+backward took 2.38 s
/// with the accumulators in shared memory and 4.70 s with the ring there.
pub(crate) fn smem(kernel: Kernel, k: usize, c: usize, limit: usize) -> Smem {
    let (header, stages, ring, acc) = parts(kernel, k, c);
    let words = limit / 8;
    let ch = (1024 / c.max(1)).clamp(1, 32);
    let mut used = header + stages * ch * c;
    let acc_fits = acc > 0 && used.saturating_add(acc) <= words;
    if acc_fits {
        used += acc;
    }
    let ring_fits = used.saturating_add(ring) <= words;
    if ring_fits {
        used += ring;
    }
    Smem {
        ch,
        ring: ring_fits,
        acc: acc_fits,
        bytes: used * 8,
    }
}

impl StreamCall<'_> {
    /// The argument block with the inputs filled in.
    pub(crate) fn args(&self) -> StreamArgs {
        let sh = self.shape;
        StreamArgs {
            sc: self.sc,
            bb: self.bb,
            eb: self.eb,
            f32in: self.f32in() as i32,
            tr: self.tr,
            dur: self.dur,
            st: self.st,
            en: self.en,
            len: self.len,
            t: sh.len as i64,
            k: sh.max_duration as i64,
            c: sh.labels as i64,
            team: self.team as i32,
            ..StreamArgs::default()
        }
    }

    pub(crate) fn launch(&self, kernel: Kernel, args: &StreamArgs) -> Result<()> {
        self.launch_on(kernel, args, None)
    }

    /// Launches `kernel` on the sequences of `seq` (one block each), or on all of them.
    pub(crate) fn launch_on(
        &self,
        kernel: Kernel,
        args: &StreamArgs,
        seq: Option<&Seq>,
    ) -> Result<()> {
        let sh = self.shape;
        if kernel == Kernel::BwdStaticLog {
            let seqs = seq.map_or(sh.batch, |q| q.blocks);
            if let Some(p) = self.spread_plan(spread::Pass::Backward, seqs) {
                return self.launch_spread(spread::Pass::Backward, args, seq, p);
            }
        }
        let m = smem(kernel, sh.max_duration, sh.labels, self.gpu.smem_limit);
        let f = self.gpu.function(kernel);
        if m.bytes > self.gpu.smem_limit {
            return Err(Error::Unsupported {
                backend: self.backend.into(),
                what: format!(
                    "{} labels: the kernel's {} bytes of shared memory exceed the device's {}",
                    sh.labels, m.bytes, self.gpu.smem_limit
                ),
            });
        }
        let mut args = *args;
        args.ch = m.ch as i32;
        args.smem_ring = m.ring as i32;
        args.smem_acc = m.acc as i32;
        let blocks = match seq {
            Some(q) => {
                args.seq = q.dev;
                q.blocks
            }
            None => sh.batch,
        };
        if blocks == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (self.threads as u32, 1, 1),
            shared_mem_bytes: m.bytes as u32,
        };
        let mut b = self.gpu.stream.launch_builder(f);
        b.arg(&args);
        // SAFETY: `args` matches the kernel's `struct Args`, every pointer in it is a live
        // allocation of this call sized for the shape (or null where the kernel checks), and
        // the grid has one block per sequence (of `seq`, whose entries are below the batch).
        unsafe { b.launch(cfg) }.map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Runs a log-domain forward kernel on the sequences of `seq` (all of them for `None`).
    /// `extra` fills the optional outputs (saved tables, backpointers); `out` is the result
    /// buffer, allocated when `None`.
    pub(crate) fn log_forward(
        &self,
        ring: SemiringId,
        seq: Option<&Seq>,
        out: Option<DevPtr>,
        extra: impl Fn(&mut StreamArgs),
    ) -> Result<LogForward> {
        let (arena, rings) = self.arena(self.forward_rings(ring))?;
        let own = match out {
            Some(_) => None,
            None => Some(self.zeros::<f64>(2 * self.shape.batch)?),
        };
        let at = match (out, &own) {
            (Some(at), _) => at,
            (None, Some(own)) => self.ptr(own),
            (None, None) => unreachable!("an output buffer is allocated where none is given"),
        };
        self.log_forward_in(ring, seq, at, rings, extra)?;
        Ok(LogForward {
            out: own,
            _rings: arena,
        })
    }

    /// Words of the rings of a log-domain forward in semiring `ring` (the second and fourth
    /// only for entropy), for [`StreamCall::log_forward_in`].
    pub(crate) fn forward_rings(&self, ring: SemiringId) -> [usize; 4] {
        let sh = self.shape;
        let n = sh.batch * sh.max_duration * sh.labels;
        let ent = ring == SemiringId::Entropy;
        // The duration-dependent form's α ring; the static form's transposed durations.
        [
            n,
            if ent { n } else { 0 },
            n,
            if self.dd && ent { n } else { 0 },
        ]
    }

    /// [`StreamCall::log_forward`] into the result buffer `out` with the zeroed rings
    /// `rings` ([`StreamCall::forward_rings`] words each, null where that is 0).
    pub(crate) fn log_forward_in(
        &self,
        ring: SemiringId,
        seq: Option<&Seq>,
        out: DevPtr,
        rings: [DevPtr; 4],
        extra: impl Fn(&mut StreamArgs),
    ) -> Result<()> {
        let mut a = self.args();
        [a.ring, a.ringh, a.ring2, a.ring2h] = rings;
        a.out = out;
        extra(&mut a);
        let seqs = seq.map_or(self.shape.batch, |q| q.blocks);
        if let Some(p) = self.pipe_plan(ring, seqs) {
            return self.launch_pipe(ring, &a, seq, p);
        }
        if let Some(p) = self.spread_plan(spread::Pass::Forward(ring), seqs) {
            return self.launch_spread(spread::Pass::Forward(ring), &a, seq, p);
        }
        let kernel = match (self.dd, ring) {
            (false, SemiringId::Log) => Kernel::FwdStaticLog,
            (false, SemiringId::Max) => Kernel::FwdStaticMax,
            (false, SemiringId::Entropy) => Kernel::FwdStaticEnt,
            (true, SemiringId::Log) => Kernel::FwdDdLog,
            (true, SemiringId::Max) => Kernel::FwdDdMax,
            (true, SemiringId::Entropy) => Kernel::FwdDdEnt,
        };
        self.launch_on(kernel, &a, seq)
    }
}

/// A log-domain forward pass's own result buffer (`(x, h)` per sequence) and its rings.
pub(crate) struct LogForward {
    pub(crate) out: Option<CudaSlice<f64>>,
    _rings: Arena,
}

/// The address of one of the buffers a log-domain backward writes ([`LogGrads`]).
pub(crate) fn part(s: &Option<Buf>, call: &StreamCall<'_>) -> Result<DevPtr> {
    Ok(s.as_ref().ok_or_else(|| missing(call))?.ptr(call))
}

/// [`part`] for reading back: the engine's own buffer.
pub(crate) fn own_part<'s>(
    s: &'s Option<Buf>,
    call: &StreamCall<'_>,
) -> Result<&'s CudaSlice<f64>> {
    s.as_ref().ok_or_else(|| missing(call))?.own(call.backend)
}

fn missing(call: &StreamCall<'_>) -> Error {
    Error::Device {
        backend: call.backend.into(),
        message: "a buffer of the log-domain backward was not allocated".into(),
    }
}

/// The log-domain backward's outputs: position, begin and end marginals, boundary
/// marginals, per-sequence duration, transition, start and end marginals.
pub(crate) struct LogGrads {
    pub(crate) gsc: Buf,
    /// `None`: begin marginals are kept in `gsc` (the kernels' `bwd_tail`).
    pub(crate) gbb: Option<Buf>,
    /// `None` where neither the end boundary nor a rerun needs it (as the next two where no
    /// sequence of `kernels/meet.cu` is rerun).
    pub(crate) geb: Option<Buf>,
    pub(crate) bmarg: Buf,
    pub(crate) pdur: Option<Buf>,
    pub(crate) ptr: Option<Buf>,
    /// Start and end marginals: addresses of `bn·c` values each (in `own` or in the
    /// small outputs of `kernels/meet.cu`).
    pub(crate) pst: DevPtr,
    pub(crate) pen: DevPtr,
    /// The start and end marginals' own buffers (a log-domain backward's).
    pub(crate) own: Option<[CudaSlice<f64>; 2]>,
}

impl LogGrads {
    /// The buffers of a log-domain backward of every sequence of `call`, the large results
    /// in the caller's buffers where `to` gives them (the end marginals in the engine's own
    /// where the problem has no end boundary: the kernel writes them).
    pub(crate) fn new(call: &StreamCall<'_>, gbb: bool, to: &Targets) -> Result<LogGrads> {
        let sh = call.shape;
        let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
        let btc = bn * t * c;
        let ntr = if call.dd { k * c * c } else { c * c };
        let z = |n: usize| call.zeros::<f64>(n);
        let (pst, pen) = (z(bn * c)?, z(bn * c)?);
        Ok(LogGrads {
            gsc: call.result_buf(to.sc, btc, to)?,
            gbb: if gbb {
                Some(call.result_buf(to.bb, btc, to)?)
            } else {
                None
            },
            geb: Some(call.result_buf(to.eb, btc, to)?),
            bmarg: call.result_buf(to.bm, bn * t, to)?,
            pdur: Some(Buf::Own(z(bn * k * c)?)),
            ptr: Some(Buf::Own(z(bn * ntr)?)),
            pst: call.ptr(&pst),
            pen: call.ptr(&pen),
            own: Some([pst, pen]),
        })
    }

    /// Fills the backward's arguments (the rings and `log_z` on the device are returned
    /// to be kept alive until the launch is done).
    pub(crate) fn fill(
        &self,
        call: &StreamCall<'_>,
        a: &mut StreamArgs,
        log_z: &[f64],
        alpha: DevPtr,
        u: DevPtr,
    ) -> Result<(Arena, CudaSlice<f64>)> {
        let lz = call.gpu.upload(log_z).map_err(|e| call.err(e))?;
        let rings = self.fill_at(call, a, call.ptr(&lz), alpha, u)?;
        Ok((rings, lz))
    }

    /// Words of the zeroed rings of a backward ([`LogGrads::fill_in`]).
    pub(crate) fn rings(call: &StreamCall<'_>) -> [usize; 3] {
        let sh = call.shape;
        [sh.batch * sh.max_duration * sh.labels; 3]
    }

    /// [`LogGrads::fill`] with log Z (`B` values) already on the device at `lz`.
    pub(crate) fn fill_at(
        &self,
        call: &StreamCall<'_>,
        a: &mut StreamArgs,
        lz: DevPtr,
        alpha: DevPtr,
        u: DevPtr,
    ) -> Result<Arena> {
        let (arena, rings) = call.arena(LogGrads::rings(call))?;
        self.fill_in(call, a, lz, alpha, u, rings)?;
        Ok(arena)
    }

    /// [`LogGrads::fill_at`] with the zeroed rings `rings` ([`LogGrads::rings`]).
    pub(crate) fn fill_in(
        &self,
        call: &StreamCall<'_>,
        a: &mut StreamArgs,
        lz: DevPtr,
        alpha: DevPtr,
        u: DevPtr,
        rings: [DevPtr; 3],
    ) -> Result<()> {
        let [ring, ring2, pdur] = rings;
        a.up = call.up;
        a.lz = lz;
        a.ring = ring;
        a.ring2 = ring2;
        a.ringh = pdur;
        a.alpha = alpha;
        a.u = u;
        a.gsc = self.gsc.ptr(call);
        a.gbb = self.gbb.as_ref().map_or(a.gsc, |g| g.ptr(call));
        a.geb = self.geb.as_ref().ok_or_else(|| missing(call))?.ptr(call);
        a.bmarg = self.bmarg.ptr(call);
        a.pdur = part(&self.pdur, call)?;
        a.ptr = part(&self.ptr, call)?;
        a.pst = self.pst;
        a.pen = self.pen;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
