//! The streaming algorithm on the GPU: a call's forward, Viterbi and backward, each run by
//! the meet kernels (`meet`) where they can and by the log-domain kernels (`logdomain`)
//! otherwise and for the sequences the meet kernels give up; the results ([`results`]) and
//! the memory a call needs ([`memory`]).

pub(crate) mod memory;
pub(crate) mod queued;
pub(crate) mod results;

use cudarc::driver::CudaSlice;
use semicrf_core::{Decoded, Result, Scalar, decode_best};

pub(crate) use queued::Queued;
use results::StagedResults;
use results::weighted;
pub(crate) use results::{BackwardResults, ready_outputs};

use crate::call::{Buf, Model, Source, StreamCall, Targets};
use crate::device::Gpu;
use crate::kernel::{DevPtr, Kernel, SemiringId};
use crate::logdomain::{LogGrads, own_part, spread};
use crate::meet;

/// The meet kernels' threads a block and prepared parameters for `model`, where `meet`
/// allows them, the transition is static, their shared memory fits this device and every
/// parameter is within their range; else `None` (the log-domain kernels run).
fn meet_setup(gpu: &Gpu, model: &Model, meet: bool) -> Option<(usize, Vec<f64>)> {
    let (k, c) = (model.shape.max_duration, model.shape.labels);
    let threads = meet::fitting_plan(k, c, gpu.smem_limit).filter(|_| meet && !model.dd)?;
    let par = meet::params(&model.tr, &model.dur, &model.st, &model.en, k, c)?;
    Some((threads, par))
}

thread_local! {
    static RERUNS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Sequences the kernels of `kernels/meet.cu` gave up and the log-domain kernels reran, on
/// the calling thread, since it started ([`crate::CudaEngine::reruns`]).
pub(crate) fn reruns() -> u64 {
    RERUNS.with(|r| r.get())
}

/// The sequences whose flag is set.
fn given_up(flags: &[i32]) -> Vec<usize> {
    let v: Vec<usize> = (0..flags.len()).filter(|&b| flags[b] != 0).collect();
    RERUNS.with(|r| r.set(r.get() + v.len() as u64));
    v
}

/// A forward pass: `(log-weight, entropy)` per sequence. The log semiring's static form runs
/// in `kernels/meet.cu` where it can (`meet`), and the sequences it gives up again in the
/// log domain.
pub(crate) fn forward<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, F>,
    ring: SemiringId,
    meet: bool,
) -> Result<Vec<[f64; 2]>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = StreamCall::new(
        gpu,
        backend,
        model,
        src,
        &[],
        meet_setup(
            gpu,
            model,
            meet && ring == SemiringId::Log && !spread::spreads(gpu, model),
        ),
    )?;
    let out = match &call.par {
        Some(par) => {
            let (bufs, small) = call.meet_forward(*par)?;
            let redo = given_up(&small.flags);
            gpu.mark();
            if redo.is_empty() {
                small.out
            } else {
                let at = bufs.small.out();
                let _rerun =
                    call.log_forward(SemiringId::Log, Some(&call.seq(redo)?), Some(at), |_| {})?;
                gpu.mark();
                bufs.read_out(&call)?
            }
        }
        None => {
            let fwd = call.log_forward(ring, None, None, |_| {})?;
            gpu.mark();
            call.back(fwd.out.as_ref().expect("its own output"))?
        }
    };
    Ok(out.chunks(2).map(|w| [w[0], w[1]]).collect())
}

/// Viterbi decodings.
pub(crate) fn viterbi<F: Scalar>(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, F>,
) -> Result<Vec<Decoded>> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = StreamCall::new(gpu, backend, model, src, &[], None)?;
    let sh = model.shape;
    let (t, c) = (sh.len, sh.labels);
    let n = sh.batch * (t + 1) * c;
    let bpd = call.zeros::<i32>(n)?;
    let bpi = call.zeros::<i32>(n)?;
    let last = call.zeros::<f64>(sh.batch * c)?;
    call.log_forward(SemiringId::Max, None, None, |a| {
        a.bpd = call.ptr(&bpd);
        a.bpi = call.ptr(&bpi);
        a.last = call.ptr(&last);
    })?;
    gpu.mark();
    let (bpd, bpi, last) = (
        call.back_all(&bpd)?,
        call.back_all(&bpi)?,
        call.back(&last)?,
    );
    let dd = call.dd;
    Ok((0..sh.batch)
        .map(|b| {
            let at = |x: usize, j: usize| (b * (t + 1) + x) * c + j;
            let finals = |j: usize| last[b * c + j] + model.en[j];
            decode_best(model.lengths[b], c, finals, |x, j| {
                let d = bpd[at(x, j)] as usize;
                let prev = if dd {
                    bpi[at(x, j)] as usize
                } else if x == d {
                    0
                } else {
                    bpi[at(x - d, j)] as usize
                };
                (d, prev)
            })
        })
        .collect())
}

/// Forward and backward: log Z, gradients scaled by `upstream`, boundary marginals, the
/// large ones left on the device. The static form runs in `kernels/meet.cu` where it can
/// (`meet`). `then` is given them (and the call, to read them) before the device is free
/// for the next call; where `host` (the caller reads them back), with the host arrays of
/// [`ready_outputs`], and small results already on their way back ([`BackwardResults::into_host`]).
/// The large results are written into the caller's buffers where `to` gives them (not with
/// `host`).
pub(crate) fn backward<F: Scalar, R>(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, F>,
    upstream: &[f64],
    meet: bool,
    host: bool,
    to: &Targets,
    then: impl FnOnce(&StreamCall<'_>, BackwardResults<'_>, Option<[Vec<f64>; 4]>) -> Result<R>,
) -> Result<R> {
    with_call(gpu, backend, model, src, upstream, meet, |call| {
        let (g, arrays) = match call.par {
            Some(par) => meet_backward(call, par, upstream, host, to)?,
            None => log_backward(call, upstream, host, to)?,
        };
        then(call, g, arrays)
    })
}

/// `f` on a backward pass's call of `model` (the meet kernels set up where `meet` allows),
/// the device held meanwhile.
fn with_call<F: Scalar, R>(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, F>,
    upstream: &[f64],
    meet: bool,
    f: impl FnOnce(&StreamCall<'_>) -> Result<R>,
) -> Result<R> {
    let _guard = gpu.lock.lock().unwrap_or_else(|e| e.into_inner());
    let call = StreamCall::new(
        gpu,
        backend,
        model,
        src,
        upstream,
        meet_setup(gpu, model, meet && !spread::spreads(gpu, model)),
    )?;
    f(&call)
}

/// Forward and backward, queued ([`queued`]): the results on the device, given to `then` (with the call,
/// to launch the copies into the caller's outputs) before the device is free for the next
/// call. The potentials must hold no `-inf`.
pub(crate) fn backward_queued<F: Scalar, R>(
    gpu: &Gpu,
    backend: &str,
    model: &Model,
    src: Source<'_, '_, F>,
    upstream: &[f64],
    meet: bool,
    to: &Targets,
    then: impl FnOnce(&StreamCall<'_>, Queued) -> Result<R>,
) -> Result<R> {
    with_call(gpu, backend, model, src, upstream, meet, |call| {
        let q = match call.par {
            Some(par) => queued::meet_queued(call, par, to)?,
            None => queued::log_queued(call, to)?,
        };
        then(call, q)
    })
}

/// The log-domain backward of every sequence, with the host arrays of [`ready_outputs`]
/// where `host`.
fn log_backward<'g>(
    call: &StreamCall<'g>,
    upstream: &[f64],
    host: bool,
    to: &Targets,
) -> Result<(BackwardResults<'g>, Option<[Vec<f64>; 4]>)> {
    let sh = call.shape;
    let (bn, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let dd = call.dd;
    let saved = bn * (t + 1) * c;
    let alpha = call.zeros::<f64>(saved)?;
    let u = if dd {
        None
    } else {
        Some(call.zeros::<f64>(saved)?)
    };
    let fwd = call.log_forward(SemiringId::Log, None, None, |a| {
        a.alpha = call.ptr(&alpha);
        a.u = call.opt(&u);
    })?;
    let arrays = host.then(|| ready_outputs(call.model));
    let out = fwd.out.as_ref().expect("its own output");
    let log_z: Vec<f64> = call.back(out)?.chunks(2).map(|w| w[0]).collect();
    semicrf_core::check_feasible(&log_z)?;
    let o = LogGrads::new(call, call.model.has_bb, to)?;
    let mut a = call.args();
    let _bufs = o.fill(call, &mut a, &log_z, call.ptr(&alpha), call.opt(&u))?;
    let kernel = if dd {
        Kernel::BwdDdLog
    } else {
        Kernel::BwdStaticLog
    };
    call.launch(kernel, &a)?;
    call.gpu.mark();
    let ntr = if dd { k * c * c } else { c * c };
    let sum = |v: Vec<f64>, n: usize| weighted(upstream, bn, &v, n, |_| false, &[]);
    let tr = sum(call.back(own_part(&o.ptr, call)?)?, ntr);
    let dur = sum(call.back(own_part(&o.pdur, call)?)?, k * c);
    Ok((
        o.finish(call, log_z, tr, dur, upstream, None, None)?,
        arrays,
    ))
}

/// The backward of `kernels/meet.cu`, with the sequences it gives up rerun in the log
/// domain: their forward into the same log Z buffer and the saved rows' memory, their
/// backward into the same marginal buffers and their own duration and transition marginals.
/// Where `host`, the results are staged for the host behind the kernels
/// ([`Gpu::stage_all`](crate::device::Gpu)) when they are small enough, and their host
/// arrays ([`ready_outputs`]) made while the kernels run.
fn meet_backward<'g>(
    call: &StreamCall<'g>,
    par: DevPtr,
    upstream: &[f64],
    host: bool,
    to: &Targets,
) -> Result<(BackwardResults<'g>, Option<[Vec<f64>; 4]>)> {
    let sh = call.shape;
    let (bn, k, c) = (sh.batch, sh.max_duration, sh.labels);
    let m = call.model;
    let (bufs, g) = call.meet_backward(par, m.has_eb, to)?;
    bufs.small.sum(call)?;
    let mut staged = if host {
        // The small outputs, then the large ones the caller gets (all the engine's own: a
        // call read back has no targets).
        let own = |b| Buf::view(b, call.backend);
        let mut srcs = vec![bufs.small_part(), own(&g.gsc)?];
        let bb = if m.has_bb {
            srcs.push(own(&g.gbb)?);
            Some(srcs.len() - 1)
        } else {
            None
        };
        let eb = match g.geb.as_ref().filter(|_| m.has_eb) {
            Some(x) => {
                srcs.push(own(x)?);
                Some(srcs.len() - 1)
            }
            None => None,
        };
        srcs.push(own(&g.bmarg)?);
        let bm = srcs.len() - 1;
        call.gpu
            .stage_all(&srcs)
            .map_err(|e| call.err(e))?
            .map(|copies| StagedResults {
                copies,
                sc: 1,
                bb,
                eb,
                bm,
            })
    } else {
        None
    };
    let arrays = host.then(|| ready_outputs(m));
    let mut small = match &staged {
        Some(st) => {
            st.copies.wait().map_err(|e| call.err(e))?;
            bufs.small
                .parse(st.copies.part(0).map_err(|e| call.err(e))?)
        }
        None => bufs.read(call)?,
    };
    let redo = given_up(&small.flags);
    // A rerun's backward writes every output and its own duration and transition marginals.
    let rerun = |n: usize| -> Result<Option<CudaSlice<f64>>> {
        (!redo.is_empty()).then(|| call.zeros::<f64>(n)).transpose()
    };
    let o = LogGrads {
        gsc: g.gsc,
        gbb: Some(g.gbb),
        geb: match g.geb {
            Some(x) => Some(x),
            None => rerun(bn * sh.len * c)?.map(Buf::Own),
        },
        bmarg: g.bmarg,
        pdur: rerun(bn * k * c)?.map(Buf::Own),
        ptr: rerun(bn * c * c)?.map(Buf::Own),
        pst: bufs.small.pst(),
        pen: bufs.small.pen(),
        own: None,
    };
    let mut keep = Vec::new();
    if !redo.is_empty() {
        // What was staged is not the final results.
        staged = None;
        // The log-domain forward of the sequences given up, saving α and u in the (larger)
        // buffers of the saved rows, then their backward.
        let seq = call.seq(redo.clone())?;
        let out = bufs.small.out();
        let fwd = call.log_forward(SemiringId::Log, Some(&seq), Some(out), |a| {
            a.alpha = bufs.alpha;
            a.u = bufs.u;
        })?;
        let log_z: Vec<f64> = bufs.read_out(call)?.chunks(2).map(|w| w[0]).collect();
        semicrf_core::check_feasible(&log_z)?;
        let mut a = call.args();
        keep.push(o.fill(call, &mut a, &log_z, bufs.alpha, bufs.u)?);
        call.launch_on(Kernel::BwdStaticLog, &a, Some(&seq))?;
        drop(fwd);
        // Log Z and the start and end marginals of the sequences rerun.
        let again = bufs.read(call)?;
        (small.out, small.pst, small.pen) = (again.out, again.pst, again.pen);
    }
    call.gpu.mark();
    let log_z: Vec<f64> = small.out.chunks(2).map(|w| w[0]).collect();
    semicrf_core::check_feasible(&log_z)?;
    let again = |b: usize| redo.binary_search(&b).is_err();
    let (tr, dur) = if redo.is_empty() {
        // Summed on the device (`shared_sum`), as `weighted` sums them.
        (
            std::mem::take(&mut small.tr),
            std::mem::take(&mut small.dur),
        )
    } else {
        let (pdur2, ptr2) = bufs.read_sweeps(call)?;
        (
            weighted(
                upstream,
                bn,
                &call.back(own_part(&o.ptr, call)?)?,
                c * c,
                again,
                &ptr2,
            ),
            weighted(
                upstream,
                bn,
                &call.back(own_part(&o.pdur, call)?)?,
                k * c,
                again,
                &pdur2,
            ),
        )
    };
    let known = Some((small.pst, small.pen));
    let out = o.finish(call, log_z, tr, dur, upstream, known, staged)?;
    Ok((out, arrays))
}

#[cfg(test)]
mod tests {
    use super::results::weighted;

    /// `shared_sum` (`kernels/io.cu`), run on the CPU, sums the per-sequence values exactly
    /// as the host's `weighted` does, bit for bit: the meet kernels' two sweeps alone, one
    /// row a sequence alone (the log-domain backward), the two mixed by the flags of the
    /// sequences rerun, and the start and end marginals; one and several thread blocks.
    #[test]
    fn shared_sum_is_the_hosts_weighted_sum() {
        let exe = crate::emu::build_emulator("semicrf-sum-emu", "sum_main.cpp", &[]);
        let Some(exe) = exe else { return };
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 0.5
        };
        let shapes = [
            (1, 7, 9, 3),
            (5, 300, 64, 8),
            (3, 2400, 576, 24),
            (6, 40, 1000, 5),
        ];
        for (b, kc, cc, nc) in shapes {
            for (two, redo) in [(true, false), (false, false), (true, true)] {
                let mut draw = |n: usize| -> Vec<f64> { (0..n).map(|_| next()).collect() };
                let (dur2, tr2) = (draw(b * 2 * kc), draw(b * 2 * cc));
                let (dur1, tr1) = (draw(b * kc), draw(b * cc));
                let (st, en) = (draw(b * nc), draw(b * nc));
                let up: Vec<f64> = draw(b).into_iter().map(|u| u * 3.0).collect();
                let flags: Vec<i64> = (0..b).map(|s| (redo && s % 2 == 1) as i64).collect();
                let mut buf = Vec::new();
                for v in [b, kc, cc, nc, two as usize, redo as usize] {
                    buf.extend_from_slice(&(v as i64).to_le_bytes());
                }
                let sweeps = if two {
                    [&dur2[..], &tr2[..]]
                } else {
                    [&[][..], &[][..]]
                };
                let all = sweeps.into_iter().chain([&dur1[..], &tr1, &st, &en, &up]);
                for v in all.flatten() {
                    buf.extend_from_slice(&v.to_le_bytes());
                }
                if redo {
                    for f in &flags {
                        buf.extend_from_slice(&f.to_le_bytes());
                    }
                }
                let red = crate::emu::run_emulated(&exe, &buf);
                let swept = |s: usize| two && flags[s] == 0;
                let want: Vec<f64> = weighted(&up, b, &dur1, kc, swept, &dur2)
                    .into_iter()
                    .chain(weighted(&up, b, &tr1, cc, swept, &tr2))
                    .chain(weighted(&up, b, &st, nc, |_| false, &[]))
                    .chain(weighted(&up, b, &en, nc, |_| false, &[]))
                    .collect();
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let what = format!("B {b}, K·C {kc}, C·C {cc}, C {nc}, two {two}, redo {redo}");
                assert_eq!(bits(&red), bits(&want), "{what}");
            }
        }
    }
}
