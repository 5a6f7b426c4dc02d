//! The host side of `kernels/spread.cu`: the static-transition forward (log and max
//! semirings, so log Z and Viterbi) with one sequence spread over several thread blocks,
//! chosen where a sequence's windows are long and there are too few sequences to fill the
//! device with one block each (a genome: one sequence, `K` in the thousands).
//!
//! Its buffers are the one-block forward's: the partials and the grid barriers' counters are
//! carved out of the ring, which the spread kernels keep in shared memory instead, so a call
//! needs no memory beyond what `memory_required` counts for the forward.

use cudarc::driver::{LaunchConfig, PushKernelArg};
use semicrf_core::Result;

use crate::call::{Model, Seq, StreamCall};
use crate::device::Gpu;
use crate::kernel::{Kernel, SemiringId, SpreadArgs, StreamArgs};
use crate::tuning::tuning;

/// Lanes a team of the spread kernels: a label's slots are shared by one warp.
const TEAM: usize = 32;

/// The fewest slots a block holds: the partials (5 words a block and label, with the
/// counters) then fit in the ring they replace.
const MIN_SLOTS: usize = 8;

/// How a spread forward runs.
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
/// α, three staged row blocks, the windows' first starts and longest durations, and the
/// block's `p` slots of each label's ring.
pub(crate) fn smem_words(c: usize, ch: usize, p: usize) -> usize {
    c + 3 * ch * c + c + c.div_ceil(2) + c * p
}

/// The plan for `seqs` sequences of longest duration `k` and `c` labels, `slots` ring slots a
/// block aimed at (0: never), on a device of `sms` multiprocessors whose blocks take at most
/// `limit` bytes of shared memory; `None` where one block a sequence runs instead: windows
/// shorter than two blocks' slots, or sequences enough to fill the device.
pub(crate) fn plan(
    k: usize,
    c: usize,
    seqs: usize,
    slots: usize,
    sms: usize,
    limit: usize,
) -> Option<Plan> {
    if slots == 0 || seqs == 0 || k < 2 * slots.max(MIN_SLOTS) {
        return None;
    }
    // Every block of the launch resident at once: one a multiprocessor (a block of up to
    // 1,024 threads), as many as the device has.
    let nb = k.div_ceil(slots).min(sms / seqs);
    if nb < 2 || k / nb < MIN_SLOTS {
        return None;
    }
    let ch = (1024 / c.max(1)).clamp(1, 32);
    let bytes = 8 * smem_words(c, ch, k.div_ceil(nb));
    (bytes <= limit).then_some(Plan {
        nb,
        ch,
        threads: TEAM * c.clamp(1, 32),
        bytes,
    })
}

/// Whether a call of `model` on `gpu` would spread its log-domain forward (the log semiring's
/// forward then runs there rather than in the meet kernels, which take one block a sequence).
pub(crate) fn spreads(gpu: &Gpu, model: &Model) -> bool {
    let sh = model.shape;
    let slots = tuning().spread_slots;
    !model.dd
        && plan(
            sh.max_duration,
            sh.labels,
            sh.batch,
            slots,
            gpu.sms,
            gpu.smem_limit,
        )
        .is_some()
}

impl StreamCall<'_> {
    /// The spread plan of this call's forward in semiring `ring` over `seqs` sequences,
    /// where it applies (static transition, log or max semiring).
    pub(crate) fn spread_plan(&self, ring: SemiringId, seqs: usize) -> Option<Plan> {
        if self.dd || ring == SemiringId::Entropy {
            return None;
        }
        let sh = self.shape;
        let slots = tuning().spread_slots;
        plan(
            sh.max_duration,
            sh.labels,
            seqs,
            slots,
            self.gpu.sms,
            self.gpu.smem_limit,
        )
    }

    /// Runs the spread forward `kernel` with the arguments `a` (whose zeroed ring holds the
    /// partials and counters) on the sequences of `seq` (all of them for `None`).
    pub(crate) fn launch_spread(
        &self,
        ring: SemiringId,
        a: &StreamArgs,
        seq: Option<&Seq>,
        p: Plan,
    ) -> Result<()> {
        let sh = self.shape;
        let kernel = match ring {
            SemiringId::Max => Kernel::FwdSpreadMax,
            _ => Kernel::FwdSpreadLog,
        };
        let mut a = *a;
        a.ch = p.ch as i32;
        a.team = TEAM as i32;
        a.smem_ring = 1;
        let seqs = match seq {
            Some(q) => {
                a.seq = q.dev;
                q.blocks
            }
            None => sh.batch,
        };
        if seqs == 0 {
            return Ok(());
        }
        // (B, 2, C, nb) maxima and sums, the args (i32), then one counter a sequence.
        let n = 2 * sh.batch * sh.labels * p.nb;
        let w = SpreadArgs {
            pm: a.ring,
            ps: a.ring.words(n),
            pa: a.ring.words(2 * n),
            bar: a.ring.words(2 * n + n.div_ceil(2)),
            nb: p.nb as i32,
            pad: 0,
        };
        let cfg = LaunchConfig {
            grid_dim: ((seqs * p.nb) as u32, 1, 1),
            block_dim: (p.threads as u32, 1, 1),
            shared_mem_bytes: p.bytes as u32,
        };
        let mut b = self.gpu.stream.launch_builder(self.gpu.function(kernel));
        b.arg(&a);
        b.arg(&w);
        // SAFETY: `a` is a forward's argument block as for `launch_on` (every pointer a live
        // allocation sized for the shape); the partials and counters lie within its zeroed
        // ring of B·K·C words (5·nb·C + 1 <= K·C words a sequence, as K >= 8·nb); the grid is
        // `nb` blocks for each sequence of `seq`, and a cooperative launch refuses a grid whose
        // blocks cannot all be resident at once, which the kernel's grid barriers need.
        unsafe { b.launch_cooperative(cfg) }.map_err(|e| self.err(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_is_spread_only_over_long_windows_and_blocks_the_device_holds() {
        let big = 227 * 1024;
        // The gene model's shape on an H100: 64 blocks of 128 slots.
        let p = plan(8192, 50, 1, 128, 132, big).unwrap();
        assert_eq!((p.nb, p.threads), (64, 1024));
        assert!(p.bytes <= big);
        // Two sequences share the device; five do not get two blocks each out of 8.
        assert_eq!(plan(8192, 50, 2, 128, 132, big).unwrap().nb, 64);
        assert_eq!(plan(8192, 50, 3, 128, 132, big).unwrap().nb, 44);
        assert_eq!(plan(1000, 24, 5, 128, 8, big), None);
        // Short windows, no setting, no room.
        assert_eq!(plan(200, 24, 1, 128, 132, big), None);
        assert_eq!(plan(8192, 50, 1, 0, 132, big), None);
        assert_eq!(plan(8192, 50, 1, 128, 2, 48 * 1024), None);
        // The partials and counters fit in the ring they replace.
        for (k, c, seqs) in [(16, 1, 1), (8192, 50, 1), (300, 7, 3), (17, 3, 2)] {
            if let Some(p) = plan(k, c, seqs, 2, 132, big) {
                let n = 2 * seqs * c * p.nb;
                assert!(
                    2 * n + n.div_ceil(2) + seqs <= seqs * k * c,
                    "{k} {c} {seqs}"
                );
            }
        }
    }
}
