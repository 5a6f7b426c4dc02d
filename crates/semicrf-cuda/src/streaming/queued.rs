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
use crate::call::{Buf, Seq, StreamCall, Targets};
use crate::kernel::{DevPtr, Kernel, SemiringId};
use crate::logdomain::{LogGrads, part};
use crate::meet::launch::Bufs;

/// A queued backward pass's results on the device.
pub(crate) struct Queued {
    /// `(log Z, h)` per sequence.
    pub(crate) pairs: DevPtr,
    /// The shared parameters' gradients, summed over the batch: duration `(K·C)`,
    /// transition (`ntr`), start `(C)`, end `(C)`.
    pub(crate) red: CudaSlice<f64>,
    pub(crate) ntr: usize,
    pub(crate) gsc: Buf,
    pub(crate) gbb: Option<Buf>,
    pub(crate) geb: Option<Buf>,
    pub(crate) bmarg: Buf,
    /// The allocation `pairs` lies in.
    _pairs: Owner,
}

/// What holds a queued pass's log Z (kept until the copies out of it are queued).
enum Owner {
    Meet { _bufs: Bufs },
    Log { _out: CudaSlice<f64> },
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
        one: (
            call.ptr(part(&o.pdur, call)?),
            call.ptr(part(&o.ptr, call)?),
        ),
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
    let m = call.model;
    Ok(Queued {
        pairs: call.ptr(&pairs),
        red,
        ntr,
        gsc: o.gsc,
        gbb: o.gbb.filter(|_| m.has_bb),
        geb: o.geb.filter(|_| m.has_eb),
        bmarg: o.bmarg,
        _pairs: Owner::Log { _out: pairs },
    })
}

/// The backward of `kernels/meet.cu`, then the log-domain forward and backward of the
/// sequences it gave up, listed on the device (launched on every sequence: the blocks of
/// the others return at once).
pub(super) fn meet_queued(call: &StreamCall<'_>, par: DevPtr, to: &Targets) -> Result<Queued> {
    let sh = call.shape;
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let m = call.model;
    let (bufs, g) = call.meet_backward(par, m.has_eb, to)?;
    let small = &bufs.small;
    let list = call.zeros::<i32>(bn)?;
    rerun_list(call, small.flag(), call.ptr(&list), bn)?;
    let seq = Seq {
        blocks: bn,
        dev: Some(list),
    };
    // A rerun's backward writes every output and its own duration and transition marginals.
    let o = LogGrads {
        gsc: g.gsc,
        gbb: Some(g.gbb),
        geb: match g.geb {
            Some(x) => Some(x),
            None => Some(Buf::Own(call.zeros::<f64>(bn * t * c)?)),
        },
        bmarg: g.bmarg,
        pdur: Some(call.zeros::<f64>(bn * k * c)?),
        ptr: Some(call.zeros::<f64>(bn * c * c)?),
        pst: small.pst(),
        pen: small.pen(),
        own: None,
    };
    let fwd = call.log_forward(SemiringId::Log, Some(&seq), Some(small.out()), |a| {
        a.alpha = bufs.alpha;
        a.u = bufs.u;
    })?;
    let lz = call.zeros::<f64>(bn)?;
    take_even(call, small.out(), call.ptr(&lz), bn, false)?;
    let mut a = call.args();
    let _rings = o.fill_at(call, &mut a, call.ptr(&lz), bufs.alpha, bufs.u)?;
    call.launch_on(Kernel::BwdStaticLog, &a, Some(&seq))?;
    drop(fwd);
    let s = SumInputs {
        two: Some((small.pdur(), small.ptr())),
        one: (
            call.ptr(part(&o.pdur, call)?),
            call.ptr(part(&o.ptr, call)?),
        ),
        ends: (o.pst, o.pen),
        redo: small.flag(),
        b: bn,
        kc: k * c,
        cc: c * c,
        nc: c,
    };
    let red = call.zeros::<f64>(s.words())?;
    shared_sum(call, &s, call.ptr(&red))?;
    call.gpu.mark();
    Ok(Queued {
        pairs: small.out(),
        red,
        ntr: c * c,
        gsc: o.gsc,
        gbb: o.gbb.filter(|_| m.has_bb),
        geb: o.geb.filter(|_| m.has_eb),
        bmarg: o.bmarg,
        _pairs: Owner::Meet { _bufs: bufs },
    })
}
