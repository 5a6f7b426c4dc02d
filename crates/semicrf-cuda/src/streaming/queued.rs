//! A backward pass that the host queues without waiting for it
//! ([`crate::CudaEngine::backward_into_queued`]): every decision the other passes make on the
//! host from values read back is made on the device instead.
//!
//! - log Z goes from the forward's output to the backward on the device (`take_even`), and
//!   needs no check: the potentials hold no `-inf` ([`crate::DevicePotentials`]' checks), so
//!   every sequence has a finite log Z;
//! - the sequences the meet kernels give up are listed on the device (`rerun_list`) and rerun
//!   by log-domain kernels launched on every sequence, whose blocks beyond the list return at
//!   once;
//! - the shared parameters' gradients are summed on the device (`shared_sum`), in the host's
//!   order and rounding.
//!
//! The results are those of the passes that read back, bit for bit.

use cudarc::driver::CudaSlice;
use semicrf_core::Result;

use crate::call::sums::{SumInputs, rerun_list, shared_sum, take_even};
use crate::call::{Arena, Buf, Seq, StreamCall, Targets};
use crate::kernel::{DevPtr, Kernel, SemiringId};
use crate::logdomain::{LogGrads, part};
use crate::meet::launch::Bufs;

/// A queued backward pass's results on the device.
pub(crate) struct Queued {
    /// `(log Z, h)` per sequence.
    pub(crate) pairs: DevPtr,
    /// The shared parameters' gradients, summed over the batch: duration `(K·C)`,
    /// transition (`ntr`), start `(C)`, end `(C)`.
    pub(crate) red: DevPtr,
    pub(crate) ntr: usize,
    pub(crate) gsc: Buf,
    pub(crate) gbb: Option<Buf>,
    pub(crate) geb: Option<Buf>,
    pub(crate) bmarg: Buf,
    /// The allocations the results lie in.
    _owner: Owner,
}

impl Queued {
    /// The results of a pass whose backward wrote `o`, with log Z in the `(log Z, h)` pairs
    /// at `pairs` and the sums at `red` (`ntr` transition words), held by `owner`.
    fn new(
        call: &StreamCall<'_>,
        o: LogGrads,
        (pairs, red, ntr): (DevPtr, DevPtr, usize),
        owner: Owner,
    ) -> Queued {
        let m = call.model;
        Queued {
            pairs,
            red,
            ntr,
            gsc: o.gsc,
            gbb: o.gbb.filter(|_| m.has_bb),
            geb: o.geb.filter(|_| m.has_eb),
            bmarg: o.bmarg,
            _owner: owner,
        }
    }
}

/// What holds a queued pass's results (kept until the copies out of them are queued).
enum Owner {
    Meet {
        _bufs: Bufs,
        _arena: Arena,
    },
    Log {
        _out: CudaSlice<f64>,
        _red: CudaSlice<f64>,
    },
}

/// The log-domain forward and backward of every sequence.
pub(super) fn log_queued(call: &StreamCall<'_>, to: &Targets) -> Result<Queued> {
    let sh = call.shape;
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let saved = bn * (t + 1) * c;
    let alpha = call.zeros::<f64>(saved)?;
    let u = if call.dd {
        None
    } else {
        Some(call.zeros::<f64>(saved)?)
    };
    let mut fwd = call.log_forward(SemiringId::Log, None, None, |a| {
        a.alpha = call.ptr(&alpha);
        a.u = call.opt(&u);
    })?;
    let pairs = fwd.out.take().expect("its own output");
    let lz = call.zeros::<f64>(bn)?;
    take_even(call, call.ptr(&pairs), call.ptr(&lz), bn, false)?;
    let o = LogGrads::new(call, call.model.has_bb, to)?;
    let mut a = call.args();
    let _rings = o.fill_at(call, &mut a, call.ptr(&lz), call.ptr(&alpha), call.opt(&u))?;
    let kernel = if call.dd {
        Kernel::BwdDdLog
    } else {
        Kernel::BwdStaticLog
    };
    call.launch(kernel, &a)?;
    let ntr = if call.dd { k * c * c } else { c * c };
    let s = SumInputs {
        two: None,
        one: (part(&o.pdur, call)?, part(&o.ptr, call)?),
        ends: (o.pst, o.pen),
        redo: DevPtr::NULL,
        b: bn,
        kc: k * c,
        cc: ntr,
        nc: c,
    };
    let red = call.zeros::<f64>(s.words())?;
    shared_sum(call, &s, call.ptr(&red))?;
    call.gpu.mark();
    let (at, red_at) = (call.ptr(&pairs), call.ptr(&red));
    let owner = Owner::Log {
        _out: pairs,
        _red: red,
    };
    Ok(Queued::new(call, o, (at, red_at, ntr), owner))
}

/// The backward of `kernels/meet.cu`, then the log-domain forward and backward of the
/// sequences it gave up, listed on the device (launched on every sequence: the blocks of
/// the others return at once).
///
/// The engine's own buffers of the pass (the large results the caller gives no buffer for,
/// and everything the reruns and the sums use) are carved out of one zeroed allocation.
pub(super) fn meet_queued(call: &StreamCall<'_>, par: DevPtr, to: &Targets) -> Result<Queued> {
    let sh = call.shape;
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let m = call.model;
    let btc = bn * t * c;
    let own = |given: Option<DevPtr>, n: usize| if given.is_some() { 0 } else { n };
    let fr = call.forward_rings(SemiringId::Log);
    let [r0, r1, r2] = LogGrads::rings(call);
    let s = SumInputs {
        two: None,
        one: (DevPtr::NULL, DevPtr::NULL),
        ends: (DevPtr::NULL, DevPtr::NULL),
        redo: DevPtr::NULL,
        b: bn,
        kc: k * c,
        cc: c * c,
        nc: c,
    };
    let (arena, at) = call.arena([
        own(to.sc, btc),
        own(to.bb, btc),
        // A rerun's backward writes the end marginals whether or not the problem has an end
        // boundary.
        own(to.eb, btc),
        own(to.bm, bn * t),
        bn.div_ceil(2),
        bn * k * c,
        bn * c * c,
        fr[0],
        fr[1],
        fr[2],
        fr[3],
        bn,
        r0,
        r1,
        r2,
        s.words(),
    ])?;
    let [
        sc,
        bb,
        eb,
        bm,
        list,
        pdur,
        ptr,
        f0,
        f1,
        f2,
        f3,
        lz,
        b0,
        b1,
        b2,
        red,
    ] = at;
    let pick = |given: Option<DevPtr>, mine: DevPtr| given.or(Some(mine));
    let mine = Targets {
        sc: pick(to.sc, sc),
        bb: pick(to.bb, bb),
        eb: pick(to.eb, eb),
        bm: pick(to.bm, bm),
        fresh: [sc, bb, eb, bm],
    };
    let (bufs, g) = call.meet_backward(par, m.has_eb, &mine)?;
    let small = &bufs.small;
    rerun_list(call, small.flag(), list, bn)?;
    let seq = Seq {
        blocks: bn,
        dev: list,
        _own: None,
    };
    // A rerun's backward writes every output and its own duration and transition marginals.
    let o = LogGrads {
        gsc: g.gsc,
        gbb: Some(g.gbb),
        geb: Some(g.geb.unwrap_or(Buf::Given(to.eb.unwrap_or(eb)))),
        bmarg: g.bmarg,
        pdur: Some(Buf::Given(pdur)),
        ptr: Some(Buf::Given(ptr)),
        pst: small.pst(),
        pen: small.pen(),
        own: None,
    };
    call.log_forward_in(
        SemiringId::Log,
        Some(&seq),
        small.out(),
        [f0, f1, f2, f3],
        |a| {
            a.alpha = bufs.alpha;
            a.u = bufs.u;
        },
    )?;
    take_even(call, small.out(), lz, bn, false)?;
    let mut a = call.args();
    o.fill_in(call, &mut a, lz, bufs.alpha, bufs.u, [b0, b1, b2])?;
    call.launch_on(Kernel::BwdStaticLog, &a, Some(&seq))?;
    let s = SumInputs {
        two: Some((small.pdur(), small.ptr())),
        one: (pdur, ptr),
        ends: (o.pst, o.pen),
        redo: small.flag(),
        ..s
    };
    shared_sum(call, &s, red)?;
    call.gpu.mark();
    let pairs = small.out();
    let owner = Owner::Meet {
        _bufs: bufs,
        _arena: arena,
    };
    Ok(Queued::new(call, o, (pairs, red, c * c), owner))
}
