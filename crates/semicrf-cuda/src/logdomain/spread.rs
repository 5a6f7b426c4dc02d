//! The host side of `kernels/spread.cu`: the static-transition forward (log and max
//! semirings, so log Z and Viterbi) and the log semiring's backward with one sequence spread
//! over several thread blocks, chosen where a sequence's windows are long and there are too
//! few sequences to fill the device with one block each (a genome: one sequence, `K` in the
//! thousands).
//!
//! Their buffers are the one-block kernels': the partials and the grid barriers' counters are
//! carved out of the ring, which the spread kernels keep in shared memory instead. The
//! backward adds one copy of the duration marginals a block (`K·C` words, which
//! `memory_required` counts: [`backward_copies`]).

use cudarc::driver::{LaunchConfig, PushKernelArg};
use semicrf_core::Result;

use crate::call::{Model, Seq, StreamCall};
use crate::device::Gpu;
use crate::kernel::{DevPtr, Kernel, SemiringId, SpreadArgs, StreamArgs};
use crate::tuning::{SPREAD_OVER_MEET, tuning};

/// Lanes a team of the spread kernels: a label's slots are shared by half a warp, so that a
/// block of up to 1,024 threads takes 64 labels at once.
pub(crate) const TEAM: usize = 16;

/// The most blocks a sequence: a lane merges at most 8 blocks' partials (`SPREAD_LANE`).
pub(crate) const MAX_NB: usize = 8 * TEAM;

/// The fewest slots a block holds: the partials (5 words a block and label, with the
/// counters) then fit in the ring they replace.
const MIN_SLOTS: usize = 8;

/// Which spread kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// The forward in a semiring (log or max).
    Forward(SemiringId),
    /// The log semiring's backward.
    Backward,
}

impl Pass {
    /// Row blocks it stages: scores, boundaries (and in the backward u and α).
    fn rows(self) -> usize {
        match self {
            Pass::Forward(_) => 3,
            Pass::Backward => 5,
        }
    }
}

/// How a spread kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Blocks a sequence.
    pub nb: usize,
    /// Positions staged at a time.
    pub ch: usize,
    /// Threads a block.
    pub threads: usize,
    /// Dynamic shared memory in bytes.
    pub bytes: usize,
}

/// Words (8 bytes) of a spread block's shared memory (`spread_words` of `kernels/spread.cu`):
/// α or γ, `rows` staged row blocks, the windows' bounds and longest durations, and the
/// block's `p` slots of each label's ring.
pub(crate) fn smem_words(c: usize, ch: usize, p: usize, rows: usize) -> usize {
    c + rows * ch * c + c + c.div_ceil(2) + c * p
}

/// The plan of `pass` for `seqs` sequences of longest duration `k` and `c` labels, `slots`
/// ring slots a block aimed at (0: never), on a device of `sms` multiprocessors whose blocks
/// take at most `limit` bytes of shared memory; `None` where one block a sequence runs
/// instead: windows shorter than two blocks' slots, or sequences enough to fill the device.
pub(crate) fn plan(
    pass: Pass,
    (k, c, seqs): (usize, usize, usize),
    slots: usize,
    sms: usize,
    limit: usize,
) -> Option<Plan> {
    if slots == 0 || seqs == 0 || k < 2 * slots.max(MIN_SLOTS) {
        return None;
    }
    if pass == Pass::Forward(SemiringId::Entropy) {
        return None;
    }
    // Every block of the launch resident at once: one a multiprocessor (a block of up to
    // 1,024 threads), as many as the device has.
    let nb = k.div_ceil(slots).min(sms / seqs).min(MAX_NB);
    if nb < 2 || k / nb < MIN_SLOTS {
        return None;
    }
    // Fewer positions staged at a time where the ring leaves too little room.
    let mut ch = (1024 / c.max(1)).clamp(1, 32);
    let bytes = |ch| 8 * smem_words(c, ch, k.div_ceil(nb), pass.rows());
    while ch > 1 && bytes(ch) > limit {
        ch /= 2;
    }
    let bytes = bytes(ch);
    (bytes <= limit).then_some(Plan {
        nb,
        ch,
        threads: (TEAM * c.clamp(1, 64)).next_multiple_of(32),
        bytes,
    })
}

/// The plan of `pass` for every sequence of `model` on `gpu` (static transition only).
pub(crate) fn model_plan(gpu: &Gpu, model: &Model, pass: Pass) -> Option<Plan> {
    let sh = model.shape;
    let shape = (sh.max_duration, sh.labels, sh.batch);
    let slots = tuning().spread_slots;
    (!model.dd)
        .then(|| plan(pass, shape, slots, gpu.sms, gpu.smem_limit))
        .flatten()
}

/// Whether a call of `model` on `gpu` would spread its log-domain forward and backward, and
/// its log semiring's calls then run there rather than in the meet kernels (which take one
/// block a sequence): windows of at least [`SPREAD_OVER_MEET`] items a position.
pub(crate) fn spreads(gpu: &Gpu, model: &Model) -> bool {
    let sh = model.shape;
    sh.max_duration * sh.labels >= SPREAD_OVER_MEET
        && model_plan(gpu, model, Pass::Backward).is_some()
        && model_plan(gpu, model, Pass::Forward(SemiringId::Log)).is_some()
}

/// Words of the spread backward's copies of the duration marginals for `(B, K, C)` on a device
/// of `sms` multiprocessors with `limit` bytes of shared memory (0 where it does not spread).
/// A call that does not spread as a whole may still spread the log-domain rerun of the
/// sequences the meet kernels give up, so this counts wherever the plan exists.
pub(crate) fn backward_copies(b: usize, k: usize, c: usize, sms: usize, limit: usize) -> usize {
    let slots = tuning().spread_slots;
    // A copy a block: the most blocks any number of the B sequences (a rerun's) takes.
    let blocks = (1..=b.min(sms))
        .filter_map(|n| plan(Pass::Backward, (k, c, n), slots, sms, limit).map(|p| n * p.nb))
        .max();
    blocks.map_or(0, |n| n * k * c)
}

impl StreamCall<'_> {
    /// The spread plan of this call's `pass` over `seqs` sequences, where it applies.
    pub(crate) fn spread_plan(&self, pass: Pass, seqs: usize) -> Option<Plan> {
        if self.dd {
            return None;
        }
        let sh = self.shape;
        let shape = (sh.max_duration, sh.labels, seqs);
        let slots = tuning().spread_slots;
        plan(pass, shape, slots, self.gpu.sms, self.gpu.smem_limit)
    }

    /// `a` set for a kernel that spreads each sequence over a group of blocks (`ch`
    /// positions staged, teams of [`TEAM`] lanes, rings in shared memory) on the sequences of
    /// `seq` (all of them for `None`), with the number of sequences.
    pub(crate) fn grouped_args(
        &self,
        a: &StreamArgs,
        seq: Option<&Seq>,
        ch: usize,
    ) -> (StreamArgs, usize) {
        let mut a = *a;
        a.ch = ch as i32;
        a.team = TEAM as i32;
        a.smem_ring = 1;
        let seqs = match seq {
            Some(q) => {
                a.seq = q.dev;
                q.blocks
            }
            None => self.shape.batch,
        };
        (a, seqs)
    }

    /// Launches `kernel` (a spread or pipelined kernel: arguments `a` and `w`) cooperatively on
    /// `seqs` groups of `nb` blocks of `threads` threads and `bytes` of shared memory.
    ///
    /// # Safety
    ///
    /// `a` and `w` must be what `kernel` reads for that grid: every pointer a live allocation
    /// of the size the kernel indexes. The cooperative launch refuses a grid whose blocks
    /// cannot all be resident at once, which the blocks' waits on one another need.
    pub(crate) unsafe fn launch_grouped(
        &self,
        kernel: Kernel,
        (a, w): (&StreamArgs, &SpreadArgs),
        seqs: usize,
        (nb, threads, bytes): (usize, usize, usize),
    ) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: ((seqs * nb) as u32, 1, 1),
            block_dim: (threads as u32, 1, 1),
            shared_mem_bytes: bytes as u32,
        };
        let mut b = self.gpu.stream.launch_builder(self.gpu.function(kernel));
        b.arg(a);
        b.arg(w);
        // SAFETY: the caller's contract.
        unsafe { b.launch_cooperative(cfg) }.map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Runs the spread kernel of `pass` with the arguments `a` (whose zeroed ring holds the
    /// partials and counters) on the sequences of `seq` (all of them for `None`).
    pub(crate) fn launch_spread(
        &self,
        pass: Pass,
        a: &StreamArgs,
        seq: Option<&Seq>,
        p: Plan,
    ) -> Result<()> {
        let sh = self.shape;
        let kernel = match pass {
            Pass::Forward(SemiringId::Max) => Kernel::FwdSpreadMax,
            Pass::Forward(_) => Kernel::FwdSpreadLog,
            Pass::Backward => Kernel::BwdSpreadLog,
        };
        let (a, seqs) = self.grouped_args(a, seq, p.ch);
        if seqs == 0 {
            return Ok(());
        }
        // The backward's copies of the duration marginals, one a block, zeroed (freed in
        // stream order).
        let kc = sh.max_duration * sh.labels;
        let copies = match pass {
            Pass::Backward => Some(self.zeros::<f64>(seqs * p.nb * kc)?),
            Pass::Forward(_) => None,
        };
        // (B, 2, C, nb) maxima and sums, the args (i32), then one counter a sequence.
        let n = 2 * sh.batch * sh.labels * p.nb;
        let w = SpreadArgs {
            pm: a.ring,
            ps: a.ring.words(n),
            pa: a.ring.words(2 * n),
            bar: a.ring.words(2 * n + n.div_ceil(2)),
            pd: copies.as_ref().map_or(DevPtr::NULL, |c| self.ptr(c)),
            nb: p.nb as i32,
            near: 0,
            round: 0,
            pad: 0,
        };
        // SAFETY: `a` is the one-block kernel's argument block (every pointer a live
        // allocation sized for the shape); the partials and counters lie within its zeroed
        // ring of B·K·C words (5·nb·C + 1 <= K·C words a sequence, as K >= 8·nb); the copies
        // are K·C zeroed words for each block of the grid; the grid is `nb` blocks for each
        // sequence of `seq`.
        unsafe { self.launch_grouped(kernel, (&a, &w), seqs, (p.nb, p.threads, p.bytes)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bwd_ch() -> usize {
        plan(Pass::Backward, (8192, 50, 1), 128, 132, 227 * 1024)
            .unwrap()
            .ch
    }

    fn fwd(shape: (usize, usize, usize), slots: usize, sms: usize, limit: usize) -> Option<Plan> {
        plan(Pass::Forward(SemiringId::Log), shape, slots, sms, limit)
    }

    #[test]
    fn a_sequence_is_spread_only_over_long_windows_and_blocks_the_device_holds() {
        let big = 227 * 1024;
        // The gene model's shape on an H100: 64 blocks of 128 slots.
        let p = fwd((8192, 50, 1), 128, 132, big).unwrap();
        assert_eq!((p.nb, p.threads), (64, 800));
        // A label a team, whole warps; at most 128 blocks.
        assert_eq!(fwd((8192, 9, 1), 128, 132, big).unwrap().threads, 160);
        assert_eq!(fwd((40000, 70, 1), 128, 132, big).unwrap().threads, 1024);
        assert_eq!(fwd((40000, 8, 1), 128, 132, big).unwrap().nb, 128);
        assert!(p.bytes <= big);
        // Two sequences share the device; five do not get two blocks each out of 8.
        assert_eq!(fwd((8192, 50, 2), 128, 132, big).unwrap().nb, 64);
        assert_eq!(fwd((8192, 50, 3), 128, 132, big).unwrap().nb, 44);
        assert_eq!(fwd((1000, 24, 5), 128, 8, big), None);
        // Short windows, no setting, no room.
        assert_eq!(fwd((200, 24, 1), 128, 132, big), None);
        assert_eq!(fwd((8192, 50, 1), 0, 132, big), None);
        assert_eq!(fwd((8192, 50, 1), 128, 2, 48 * 1024), None);
        // Eight sequences of the gene model: 16 blocks each, fewer positions staged.
        let batch = plan(Pass::Backward, (8192, 50, 8), 128, 132, big).unwrap();
        assert!(batch.nb == 16 && batch.ch < bwd_ch(), "{batch:?}");
        // The backward stages more rows; entropy never spreads.
        let bwd = plan(Pass::Backward, (8192, 50, 1), 128, 132, big).unwrap();
        assert!(bwd.bytes > p.bytes && bwd.nb == p.nb);
        let ent = Pass::Forward(SemiringId::Entropy);
        assert_eq!(plan(ent, (8192, 50, 1), 128, 132, big), None);
        // The partials and counters fit in the ring they replace.
        for (k, c, seqs) in [(16, 1, 1), (8192, 50, 1), (300, 7, 3), (17, 3, 2)] {
            if let Some(p) = fwd((k, c, seqs), 2, 132, big) {
                let n = 2 * seqs * c * p.nb;
                assert!(
                    2 * n + n.div_ceil(2) + seqs <= seqs * k * c,
                    "{k} {c} {seqs}"
                );
            }
        }
    }
}
