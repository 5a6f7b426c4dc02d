//! The device memory a streaming call needs ([`crate::CudaEngine`]'s `memory_required`): an
//! upper bound of what it allocates, counting the log-domain rerun of every sequence the meet
//! kernels could give up.

use semicrf_core::{ByteCount, Shape};

use crate::kernel::{SemiringId, What};
use crate::meet;

/// Device bytes a call allocates for `shape` and inputs of `dtype_bytes`: the scores and the
/// boundaries `given` (`[begin, end]`), with a `(K, C, C)` transition where `dd`. `smem_limit`
/// (bytes of shared memory a block may use) decides where the kernels of `kernels/meet.cu`
/// keep their rings and accumulators. A call that may run them counts their buffers and
/// those of the log-domain rerun of every sequence they could give up (`meet`: false where the
/// call is spread over several blocks a sequence instead). `spread`: the words of the
/// duration marginals' copies of a backward spread over several blocks a sequence, its own or
/// its rerun's (`logdomain::spread::backward_copies`; 0 where none is).
pub(crate) fn bytes(
    shape: Shape,
    (dd, given): (bool, [bool; 2]),
    what: What,
    dtype_bytes: usize,
    smem_limit: usize,
    (meet, spread): (bool, usize),
) -> ByteCount {
    let (b, t, k, c) = (shape.batch, shape.len, shape.max_duration, shape.labels);
    let tr = if dd {
        ByteCount::f64s(&[k, c, c])
    } else {
        ByteCount::f64s(&[c, c])
    };
    let stored = if dtype_bytes == 4 { 4 } else { 8 };
    let arrays = 1 + given.iter().filter(|&&g| g).count();
    let inputs = ByteCount::bytes(&[arrays, b, t, c, stored])
        + tr
        + ByteCount::f64s(&[k, c])
        + ByteCount::f64s(&[2, c])
        + ByteCount::bytes(&[8, b]);
    let rings = |w: usize| ByteCount::f64s(&[w, b, k, c]);
    let t1 = t.saturating_add(1);
    let lists = ByteCount::bytes(&[4, b]);
    let meet = meet && !dd && meet::fitting_plan(k, c, smem_limit).is_some();
    let work = match what {
        What::Forward(SemiringId::Entropy) => {
            rings(if dd { 4 } else { 3 }) + ByteCount::f64s(&[2, b])
        }
        What::Forward(SemiringId::Log) if meet => {
            let lay = meet::layout(k, c, smem_limit, false);
            meet::bytes(shape, false, lay, true) + rings(2) + lists
        }
        // The ring, and the α ring (duration-dependent) or the transposed durations.
        What::Forward(_) => rings(2) + ByteCount::f64s(&[2, b]),
        What::Viterbi => {
            rings(2)
                + ByteCount::f64s(&[2, b])
                + ByteCount::bytes(&[8, b, t1, c])
                + ByteCount::f64s(&[b, c])
        }
        What::Backward if meet => {
            let la = meet::layout(k, c, smem_limit, false);
            let lb = meet::layout(k, c, smem_limit, true);
            let lay = meet::Layout {
                ring: la.ring && lb.ring,
                ..lb
            };
            // The rerun reuses the saved rows (more than (B, T+1, C) each) and the outputs;
            // it needs log Z, five rings and its own duration and transition marginals.
            meet::bytes(shape, true, lay, true)
                + ByteCount::f64s(&[b])
                + rings(5)
                + ByteCount::f64s(&[spread])
                + ByteCount::f64s(&[b, c, c])
                + lists
                + lists
        }
        What::Backward => {
            let ptr = if dd {
                ByteCount::f64s(&[b, k, c, c])
            } else {
                ByteCount::f64s(&[b, c, c])
            };
            // The forward's two rings stay allocated next to the backward's three.
            rings(5)
                + ByteCount::f64s(&[2, b])
                + ByteCount::f64s(&[2, b, t1, c])
                + ByteCount::f64s(&[if given[0] { 3 } else { 2 }, b, t, c])
                + ByteCount::f64s(&[b, t])
                + ByteCount::f64s(&[b, k, c])
                + ptr
                + ByteCount::f64s(&[2, b, c])
                + ByteCount::f64s(&[2, b])
                + ByteCount::f64s(&[spread])
        }
    };
    inputs + work
}
