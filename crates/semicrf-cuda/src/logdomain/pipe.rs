//! The host side of `kernels/pipe.cu`: the static-transition forward (log and max semirings,
//! so log Z, Viterbi, and the forward a backward pass saves) with one sequence pipelined over
//! several thread blocks: one block on the recurrence's critical path, summing the newest
//! `near` durations of each window, and helpers summing the rest ahead of it, with no grid
//! barrier a step. Where a plan exists it runs in place of the spread forward
//! ([`super::spread`]), which keeps the backward.
//!
//! Its buffers are the one-block kernels': the pipeline's partials, sums, published starts and
//! counters are carved out of the ring ([`words`] of the `K·C` a sequence), the transposed
//! durations go to the second ring, and `memory_required` needs nothing more.

use semicrf_core::Result;

use crate::call::{Seq, StreamCall};
use crate::kernel::{Kernel, SemiringId, SpreadArgs, StreamArgs};
use crate::tuning::tuning;

use super::spread::{MAX_NB, TEAM};

/// Steps a helpers' round.
const ROUND: usize = 8;

/// Rounds of far sums in flight (`PIPE_Q`).
const ROUNDS: usize = 8;

/// Steps between the main block's publications of its progress (`PIPE_PUB`): the near depth
/// is at least a round and this.
const PUBLISH: usize = 4;

/// How a pipelined forward runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Blocks a sequence: the main block and `nb - 1` helpers.
    pub nb: usize,
    /// Positions the main block stages at a time.
    pub ch: usize,
    /// Threads a block.
    pub threads: usize,
    /// Dynamic shared memory in bytes.
    pub bytes: usize,
    /// Durations summed on the critical path.
    pub near: usize,
    /// Steps a helpers' round.
    pub round: usize,
}

/// Words (8 bytes) of one sequence's pipeline buffers in the ring (`pipe_lay` of
/// `kernels/pipe.cu`): partials `(2, nh, M, C)` and far sums `(PIPE_Q, M, C)` (maxima and sums,
/// then their args as i32), the published starts `(D + M, C)` and three counters.
pub(crate) fn words(nh: usize, m: usize, d: usize, c: usize) -> usize {
    let (np, nf) = (2 * nh * m * c, ROUNDS * m * c);
    2 * np + 2 * nf + (d + m) * c + (np + nf).div_ceil(2) + 3
}

/// Words of the main block's shared memory: α twice, three staged row blocks of `ch`
/// positions, the next step's near sums, the near ring and durations (`D·C` each), a round's
/// far sums, the transition, the windows' bounds, then as i32 the longest durations, the near
/// sums' args and bounds, the far sums' args and each label's finite transitions.
fn main_words(c: usize, ch: usize, d: usize, m: usize) -> usize {
    2 * c
        + 3 * ch * c
        + 2 * c
        + 2 * d * c
        + 2 * m * c
        + c * c
        + c
        + (4 * c + m * c + c * c).div_ceil(2)
}

/// Words of a helper's shared memory: the scores of `D + M` steps, the windows' bounds and
/// longest durations, `p` ring slots of each label.
fn helper_words(c: usize, d: usize, m: usize, p: usize) -> usize {
    (d + m) * c + c + c.div_ceil(2) + c * p
}

/// Words of a pipelined block's shared memory (the main block's or a helper's, whichever is
/// more) for `c` labels, `ch` positions staged, near depth and steps a round `(d, m)`, `p`
/// slots a helper.
pub(crate) fn smem_words(c: usize, ch: usize, (d, m): (usize, usize), p: usize) -> usize {
    main_words(c, ch, d, m).max(helper_words(c, d, m, p))
}

/// The plan of the forward in `ring` for `seqs` sequences of longest duration `k` and `c`
/// labels: near depth `near` (0: never), helpers of about `slots` ring slots each, on a device
/// of `sms` multiprocessors whose blocks take at most `limit` bytes of shared memory. `None`
/// where the spread or one-block kernels run instead: entropy, windows no longer than the near
/// depth plus two helpers' slots, too few multiprocessors, or no room.
pub(crate) fn plan(
    ring: SemiringId,
    (k, c, seqs): (usize, usize, usize),
    (near, slots): (usize, usize),
    sms: usize,
    limit: usize,
) -> Option<Plan> {
    if ring == SemiringId::Entropy || near == 0 || slots == 0 || seqs == 0 {
        return None;
    }
    let near = near.max(ROUND + PUBLISH);
    if k < near + 2 * slots {
        return None;
    }
    // Every block of the launch resident at once, one a multiprocessor.
    let nh = k
        .div_ceil(slots)
        .min((sms / seqs).saturating_sub(1))
        .min(MAX_NB);
    if nh < 2 || words(nh, ROUND, near, c) > k * c {
        return None;
    }
    // At least two positions staged: a step reads the next one's scores.
    let mut ch = (1024 / c.max(1)).clamp(2, 32);
    let bytes = |ch| 8 * smem_words(c, ch, (near, ROUND), k.div_ceil(nh));
    while ch > 2 && bytes(ch) > limit {
        ch /= 2;
    }
    let bytes = bytes(ch);
    (bytes <= limit).then_some(Plan {
        nb: nh + 1,
        ch,
        threads: (TEAM * c.clamp(1, 64)).next_multiple_of(32),
        bytes,
        near,
        round: ROUND,
    })
}

impl StreamCall<'_> {
    /// The pipelined plan of this call's forward in `ring` over `seqs` sequences, where it
    /// applies.
    pub(crate) fn pipe_plan(&self, ring: SemiringId, seqs: usize) -> Option<Plan> {
        if self.dd {
            return None;
        }
        let sh = self.shape;
        let t = tuning();
        let shape = (sh.max_duration, sh.labels, seqs);
        let how = (t.pipe_near, t.spread_slots);
        plan(ring, shape, how, self.gpu.sms, self.gpu.smem_limit)
    }

    /// Runs the pipelined forward in `ring` with the arguments `a` (whose zeroed ring holds
    /// the pipeline's buffers) on the sequences of `seq` (all of them for `None`).
    pub(crate) fn launch_pipe(
        &self,
        ring: SemiringId,
        a: &StreamArgs,
        seq: Option<&Seq>,
        p: Plan,
    ) -> Result<()> {
        let kernel = match ring {
            SemiringId::Max => Kernel::FwdPipeMax,
            _ => Kernel::FwdPipeLog,
        };
        let (a, seqs) = self.grouped_args(a, seq, p.ch);
        if seqs == 0 {
            return Ok(());
        }
        let w = SpreadArgs {
            pm: a.ring,
            ps: a.ring,
            pa: a.ring,
            bar: a.ring,
            pd: crate::kernel::DevPtr::NULL,
            nb: p.nb as i32,
            near: p.near as i32,
            round: p.round as i32,
            pad: 0,
        };
        // SAFETY: `a` is the one-block kernel's argument block (every pointer a live
        // allocation sized for the shape); the pipeline's buffers lie within each sequence's
        // K·C zeroed words of the ring (`words` <= K·C, checked by `plan`), the transposed
        // durations within its K·C words of the second ring; the grid is `nb` blocks for each
        // sequence of `seq`.
        unsafe { self.launch_grouped(kernel, (&a, &w), seqs, (p.nb, p.threads, p.bytes)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: usize = 227 * 1024;

    #[test]
    fn a_sequence_is_pipelined_only_over_long_windows_the_device_holds() {
        let log = SemiringId::Log;
        // The gene model's shape on an H100: 128 helpers of 64 slots, and the main block.
        let p = plan(log, (8192, 50, 1), (32, 64), 132, BIG).unwrap();
        assert_eq!((p.nb, p.threads, p.near, p.round), (129, 800, 32, ROUND));
        assert!(p.bytes <= BIG);
        // Max too, never entropy; a near depth below a round and a publication is raised.
        assert!(plan(SemiringId::Max, (8192, 50, 1), (32, 64), 132, BIG).is_some());
        assert_eq!(
            plan(SemiringId::Entropy, (8192, 50, 1), (32, 64), 132, BIG),
            None
        );
        assert_eq!(
            plan(log, (8192, 50, 1), (1, 64), 132, BIG).unwrap().near,
            ROUND + PUBLISH
        );
        // Off, short windows, too few multiprocessors, no room.
        assert_eq!(plan(log, (8192, 50, 1), (0, 64), 132, BIG), None);
        assert_eq!(plan(log, (150, 24, 1), (32, 64), 132, BIG), None);
        assert_eq!(plan(log, (8192, 50, 1), (32, 64), 2, BIG), None);
        assert_eq!(plan(log, (8192, 50, 1), (32, 64), 132, 16 * 1024), None);
        // Two sequences share the device: 65 blocks each.
        assert_eq!(plan(log, (8192, 50, 2), (32, 64), 132, BIG).unwrap().nb, 66);
        // S8's shape: 16 helpers.
        assert_eq!(plan(log, (1000, 24, 1), (32, 64), 132, BIG).unwrap().nb, 17);
        // The buffers fit in the ring wherever there is a plan.
        for (k, c, seqs) in [(60, 1, 1), (8192, 50, 1), (300, 7, 3), (1000, 24, 1)] {
            for slots in [2, 8, 64] {
                if let Some(p) = plan(log, (k, c, seqs), (12, slots), 132, BIG) {
                    assert!(
                        words(p.nb - 1, p.round, p.near, c) <= k * c,
                        "{k} {c} {slots}"
                    );
                }
            }
        }
    }
}
