//! The shared parameters (transition, duration, start, end) on the device
//! (`DevicePotentialsBuilder::*_on_device`) and their gradients written into device outputs
//! (`DeviceOutputs::transition`, ...): the same results as with the parameters on the host,
//! bit for bit, the host's errors for bad parameters, and runs that repeat bit for bit.
//!
//! Without a usable GPU every test here prints why and passes, unless
//! `SEMICRF_REQUIRE_GPU=1`, which makes that a failure.

#![cfg(all(feature = "cpu", feature = "cuda"))]

use std::sync::Arc;

use ndarray::ArrayD;
use semicrf_core::testing::{GenSpec, TransitionKind, random_problem, upstream};
use semicrf_core::{Error, OwnedPotentials};
use semicrf_cuda::cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use semicrf_cuda::{
    CudaEngine, DeviceArray, DeviceArrayMut, DeviceOutputs, DevicePotentials,
    DevicePotentialsBuilder, HostBackward,
};

fn gpu() -> Option<CudaEngine> {
    CudaEngine::usable_or_skip(0)
}

/// A device copy of an array, in `f64` or in `f32`.
enum Dev {
    F64(CudaSlice<f64>),
    F32(CudaSlice<f32>),
}

impl Dev {
    fn up(s: &Arc<CudaStream>, v: &[f64], f32: bool) -> Dev {
        if f32 {
            let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            Dev::F32(s.clone_htod(&v).unwrap())
        } else {
            Dev::F64(s.clone_htod(v).unwrap())
        }
    }
    fn array(&self) -> DeviceArray<'_> {
        match self {
            Dev::F64(d) => DeviceArray::f64(d),
            Dev::F32(d) => DeviceArray::f32(d),
        }
    }
    fn out(&mut self) -> DeviceArrayMut<'_> {
        match self {
            Dev::F64(d) => DeviceArrayMut::f64(d),
            Dev::F32(d) => DeviceArrayMut::f32(d),
        }
    }
    /// The values read back on the array's own stream, widened exactly to `f64`: bits.
    fn bits(&self) -> Vec<u64> {
        match self {
            Dev::F64(d) => d.stream().clone_dtoh(d).unwrap(),
            Dev::F32(d) => d
                .stream()
                .clone_dtoh(d)
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect(),
        }
        .into_iter()
        .map(f64::to_bits)
        .collect()
    }
}

fn flat(a: &ArrayD<f64>) -> Vec<f64> {
    a.iter().copied().collect()
}

/// The shared parameters of `p` (where given), on the device (`f32`: rounded) or on the host.
struct Params {
    dev: [Option<(Dev, Vec<usize>)>; 4],
}

impl Params {
    fn up(s: &Arc<CudaStream>, p: &OwnedPotentials<f64>, f32: bool) -> Params {
        let one =
            |a: Option<ArrayD<f64>>| a.map(|a| (Dev::up(s, &flat(&a), f32), a.shape().to_vec()));
        Params {
            dev: [
                one(p.transition.clone()),
                one(p.duration.clone().map(|a| a.into_dyn())),
                one(p.start.clone().map(|a| a.into_dyn())),
                one(p.end.clone().map(|a| a.into_dyn())),
            ],
        }
    }
    fn on<'a>(&'a self, mut pb: DevicePotentialsBuilder<'a>) -> DevicePotentialsBuilder<'a> {
        if let Some((d, s)) = &self.dev[0] {
            pb = pb.transition_on_device(d.array(), s);
        }
        if let Some((d, s)) = &self.dev[1] {
            pb = pb.duration_on_device(d.array(), s);
        }
        if let Some((d, s)) = &self.dev[2] {
            pb = pb.start_on_device(d.array(), s);
        }
        if let Some((d, s)) = &self.dev[3] {
            pb = pb.end_on_device(d.array(), s);
        }
        pb
    }
}

fn host_params<'a>(
    mut pb: DevicePotentialsBuilder<'a>,
    p: &'a OwnedPotentials<f64>,
) -> DevicePotentialsBuilder<'a> {
    if let Some(x) = &p.transition {
        pb = pb.transition(x.view());
    }
    if let Some(x) = &p.duration {
        pb = pb.duration(x.view());
    }
    if let Some(x) = &p.start {
        pb = pb.start(x.view());
    }
    if let Some(x) = &p.end {
        pb = pb.end(x.view());
    }
    pb
}

fn bits<'x>(v: impl IntoIterator<Item = &'x f64>) -> Vec<u64> {
    v.into_iter().map(|x| x.to_bits()).collect()
}

/// The host results of a `backward_into`, as bits: log Z, transition, duration, start, end.
fn host_bits(h: &HostBackward) -> [Vec<u64>; 5] {
    [
        bits(&h.log_z),
        bits(&h.transition),
        bits(&h.duration),
        bits(&h.start),
        bits(&h.end),
    ]
}

/// One `backward_into` (`backward_into_queued` where `queued`) with every result on the
/// device (outputs made on `s`, full of NaN; `f32`: the potentials', `shared_f32`: the
/// shared gradients' element type; `dd`: a `(K, C, C)` transition): the outputs read back
/// (scores' gradient, boundary marginals, log Z, the four shared gradients, the boundaries'
/// gradients; in bits) and what the call returned on the host (nothing, queued).
fn backward_all_on_device(
    cuda: &CudaEngine,
    p: &DevicePotentials<'_>,
    g: &[f64],
    s: &Arc<CudaStream>,
    (f32, shared_f32, dd, queued): (bool, bool, bool, bool),
) -> (Vec<Vec<u64>>, Option<HostBackward>) {
    let sh = p.shape();
    let (b, t, k, c) = (sh.batch, sh.len, sh.max_duration, sh.labels);
    let nan = |n: usize, f| Dev::up(s, &vec![f64::NAN; n], f);
    let ntr = if dd { k * c * c } else { c * c };
    let mut sc = nan(b * t * c, f32);
    let mut bm = nan(b * t, f32);
    let mut lz = nan(b, f32);
    let mut tr = nan(ntr, shared_f32);
    let mut du = nan(k * c, shared_f32);
    let mut st = nan(c, shared_f32);
    let mut en = nan(c, shared_f32);
    let mut gb = nan(b * t * c, f32);
    let mut ge = nan(b * t * c, f32);
    let out = DeviceOutputs::new(sc.out())
        .begin_boundary(gb.out())
        .end_boundary(ge.out())
        .boundary(bm.out())
        .log_z(lz.out())
        .transition(tr.out())
        .duration(du.out())
        .start(st.out())
        .end(en.out());
    let host = if queued {
        cuda.backward_into_queued(p, g, out).unwrap();
        None
    } else {
        Some(cuda.backward_into(p, g, out).unwrap())
    };
    let read = [&sc, &bm, &lz, &tr, &du, &st, &en, &gb, &ge]
        .map(Dev::bits)
        .to_vec();
    (read, host)
}

/// The shared parameters on the device give what the same values on the host give, bit for
/// bit: the magnitude bounds, log Z, every gradient and marginal of `backward_on_device`,
/// and with every result written into device outputs (the shared parameters' gradients
/// included, of either element type) the host's values; both element types, both
/// transition forms, boundaries, ragged lengths, `-inf` entries, the log-domain kernels
/// alone and a sequence beyond the linear domain's range (rerun). Ten runs of the
/// asynchronous call give the same bits, and so do ten of the queued call
/// (`backward_into_queued`: log Z, the reruns and the shared sums on the device where no
/// input holds a `-inf`; the waiting call's path where one does).
#[test]
fn shared_parameters_on_the_device_give_the_host_parameters_results() {
    let Some(cuda) = gpu() else { return };
    let ctx = CudaContext::new(0).unwrap();
    let side = ctx.new_stream().unwrap();
    for (seed, (b, t, k, c, dd, range, cut)) in [
        (3, 40, 6, 5, false, false, false),
        (4, 120, 7, 24, true, false, false),
        (2, 300, 30, 8, false, false, false),
        (4, 300, 64, 5, false, true, false),
        (5, 200, 12, 6, true, true, false),
        (3, 150, 10, 7, false, false, true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut spec = GenSpec::new(b, t, k, c).everything();
        spec.transition = if dd {
            TransitionKind::DurationDependent
        } else {
            TransitionKind::Static
        };
        let mut owned = random_problem(700 + seed as u64, &spec);
        if range {
            let at = owned.lengths[1] / 2;
            owned.scores[[1, at, 0]] = 60.0;
        }
        if cut {
            owned.scores[[2, 0, 1]] = f64::NEG_INFINITY;
        }
        let g = upstream(11, b);
        let widened = owned.cast::<f32>().cast::<f64>();
        for f32 in [false, true] {
            let from = if f32 { &widened } else { &owned };
            let sc = Dev::up(&side, &flat(&owned.scores.clone().into_dyn()), f32);
            let bb = Dev::up(&side, &flat(owned.begin_boundary.as_ref().unwrap()), f32);
            let eb = Dev::up(&side, &flat(owned.end_boundary.as_ref().unwrap()), f32);
            let params = Params::up(&side, from, f32);
            let lens = &owned.lengths[..];
            let base = || {
                DevicePotentials::builder(sc.array(), (b, t, c), lens, k)
                    .begin_boundary(bb.array())
                    .end_boundary(eb.array())
            };
            let host_p = host_params(base(), from).build(&cuda).unwrap();
            let dev_p = params.on(base()).build(&cuda).unwrap();
            assert_eq!(
                dev_p.sure_feasible(),
                !cut,
                "a -inf found where there is one"
            );
            for engine in [cuda, cuda.log_domain_only()] {
                let name = format!(
                    "B{b} T{t} K{k} C{c} dd={dd} range={range} f32={f32} linear={}",
                    engine == cuda
                );
                assert_eq!(dev_p.magnitudes(), host_p.magnitudes(), "{name}: bounds");
                let want = engine.backward_on_device(&host_p, &g).unwrap();
                let got = engine.backward_on_device(&dev_p, &g).unwrap();
                let (want, got) = (want.to_host().unwrap(), got.to_host().unwrap());
                assert_eq!(bits(&got.log_z), bits(&want.log_z), "{name}: log Z");
                let pairs = got.grad.fields().into_iter().zip(want.grad.fields());
                for ((field, x), (_, y)) in pairs {
                    let (x, y) = (x.map(|a| bits(a.iter())), y.map(|a| bits(a.iter())));
                    assert!(x == y, "{name}: grad.{field}");
                }
                assert!(
                    bits(got.boundary_marginals.iter()) == bits(want.boundary_marginals.iter()),
                    "{name}: boundary marginals"
                );
                for (shared_f32, queued) in
                    [(false, false), (true, false), (false, true), (true, true)]
                {
                    let round = |v: &[u64]| -> Vec<u64> {
                        v.iter()
                            .map(|&x| {
                                let x = f64::from_bits(x);
                                if shared_f32 { f64::from(x as f32) } else { x }.to_bits()
                            })
                            .collect()
                    };
                    let mut first = None;
                    for run in 0..10 {
                        let (read, host) = backward_all_on_device(
                            &engine,
                            &dev_p,
                            &g,
                            &side,
                            (f32, shared_f32, dd, queued),
                        );
                        let name = format!("{name} queued={queued}");
                        let w = &want.grad;
                        let wt = [
                            bits(w.transition.as_ref().unwrap()),
                            bits(w.duration.as_ref().unwrap()),
                            bits(w.start.as_ref().unwrap()),
                            bits(w.end.as_ref().unwrap()),
                        ];
                        if let Some(host) = &host {
                            // The host's part equals the host parameters' backward.
                            let h = host_bits(host);
                            assert_eq!(h[0], bits(&want.log_z), "{name}: returned log Z");
                            for i in 0..4 {
                                assert_eq!(h[i + 1], wt[i], "{name}: returned shared {i}");
                            }
                        }
                        for i in 0..4 {
                            assert_eq!(
                                read[3 + i],
                                round(&wt[i]),
                                "{name}: shared {i} on the device (f32 {shared_f32})"
                            );
                        }
                        let narrow = |v: Vec<u64>| if f32 { round_f32(&v) } else { v };
                        let ws = bits(w.scores.as_ref().unwrap());
                        assert!(read[0] == narrow(ws), "{name}: scores' gradient");
                        assert!(
                            read[1] == narrow(bits(want.boundary_marginals.iter())),
                            "{name}: boundary marginals on the device"
                        );
                        assert_eq!(read[2], narrow(bits(&want.log_z)), "{name}: log Z");
                        let wb = bits(w.begin_boundary.as_ref().unwrap());
                        let we = bits(w.end_boundary.as_ref().unwrap());
                        assert!(read[7] == narrow(wb), "{name}: begin boundary's gradient");
                        assert!(read[8] == narrow(we), "{name}: end boundary's gradient");
                        match &first {
                            None => first = Some(read),
                            Some(f) => assert!(f == &read, "{name}: run {run} differs"),
                        }
                    }
                }
            }
        }
    }
}

fn round_f32(v: &[u64]) -> Vec<u64> {
    v.iter()
        .map(|&x| f64::from(f64::from_bits(x) as f32).to_bits())
        .collect()
}

/// Bad shared parameters on the device are refused with the host's errors: a NaN and a
/// `+inf` (by tensor and index), a wrong shape (the core's shape error), an array whose
/// length is not its shape's, an address that is not device memory, an allocation too short.
#[test]
fn bad_shared_parameters_on_the_device_are_refused_as_on_the_host() {
    let Some(cuda) = gpu() else { return };
    let stream = CudaContext::new(0).unwrap().default_stream();
    let (b, t, k, c) = (2, 30, 4, 3);
    let lengths = [30, 17];
    let sc = stream.clone_htod(&vec![0.5f64; b * t * c]).unwrap();
    fn make<'a>(sc: &'a CudaSlice<f64>, l: &'a [usize], k: usize) -> DevicePotentialsBuilder<'a> {
        let (b, t, c) = (l.len(), 30, sc.len() / (30 * l.len()));
        DevicePotentials::builder(DeviceArray::f64(sc), (b, t, c), l, k)
    }
    let base = || make(&sc, &lengths, k);
    let host_err = |tr: &ArrayD<f64>| {
        make(&sc, &lengths, k)
            .transition(tr.view())
            .build(&cuda)
            .unwrap_err()
    };
    let dev_err = |tr: &ArrayD<f64>, f32: bool| {
        let d = Dev::up(&stream, &flat(tr), f32);
        make(&sc, &lengths, k)
            .transition_on_device(d.array(), tr.shape())
            .build(&cuda)
            .unwrap_err()
    };
    let msg = |e: Error| format!("{e:?} / {e}");
    for f32 in [false, true] {
        // NaN at [1, 2] and +inf at [2, 0]: the host names the first in memory order.
        let mut tr = ArrayD::from_elem(ndarray::IxDyn(&[c, c]), 0.25);
        tr[[2, 0]] = f64::INFINITY;
        tr[[1, 2]] = f64::NAN;
        assert_eq!(msg(dev_err(&tr, f32)), msg(host_err(&tr)), "NaN, f32={f32}");
        // A (K, C, C) transition with a NaN.
        let mut td = ArrayD::from_elem(ndarray::IxDyn(&[k, c, c]), -1.0);
        td[[3, 0, 1]] = f64::NAN;
        assert_eq!(
            msg(dev_err(&td, f32)),
            msg(host_err(&td)),
            "(K, C, C), f32={f32}"
        );
        // A wrong shape, with as many elements as it says.
        let wrong = ArrayD::from_elem(ndarray::IxDyn(&[c, c + 1]), 0.0);
        assert_eq!(
            msg(dev_err(&wrong, f32)),
            msg(host_err(&wrong)),
            "shape, f32={f32}"
        );
    }
    // A length that is not the shape's.
    let d = stream.clone_htod(&vec![0.0f64; c * c - 1]).unwrap();
    match base()
        .transition_on_device(DeviceArray::f64(&d), &[c, c])
        .build(&cuda)
    {
        Err(Error::Shape { tensor, got, .. }) => {
            assert_eq!((tensor, got), ("transition", vec![c * c - 1]))
        }
        other => panic!("{other:?}"),
    }
    // Host memory, and an allocation too short for what the array says.
    let host = vec![0.0f64; c];
    // SAFETY: only checked (refused before any device work touches it).
    let raw = unsafe {
        DeviceArray::from_raw(
            host.as_ptr() as u64,
            c,
            semicrf_cuda::Dtype::F64,
            std::ptr::null_mut(),
        )
    };
    let what = |r: semicrf_core::Result<DevicePotentials<'_>>| match r {
        Err(Error::Unsupported { what, .. }) => what,
        other => panic!("{other:?}"),
    };
    let w = what(base().start_on_device(raw, &[c]).build(&cuda));
    assert!(
        w.starts_with("start at device address") && w.contains("not device memory"),
        "{w}"
    );
    let short = stream.clone_htod(&vec![0.0f64; c - 1]).unwrap();
    // SAFETY: only checked (the allocation is too short, so refused).
    let raw = unsafe {
        DeviceArray::from_raw(
            semicrf_cuda::cudarc::driver::DevicePtr::device_ptr(&short, &stream).0,
            c,
            semicrf_cuda::Dtype::F64,
            stream.cu_stream(),
        )
    };
    let w = what(base().end_on_device(raw, &[c]).build(&cuda));
    assert!(
        w.starts_with("end at device address") && w.contains("do not fit"),
        "{w}"
    );
    // Outputs of the shared gradients of a wrong length are refused by name.
    let p = base().build(&cuda).unwrap();
    let mut g = stream.alloc_zeros::<f64>(b * t * c).unwrap();
    let mut tr = stream.alloc_zeros::<f64>(c * c + 1).unwrap();
    let out =
        DeviceOutputs::new(DeviceArrayMut::f64(&mut g)).transition(DeviceArrayMut::f64(&mut tr));
    match cuda.backward_into(&p, &[1.0, 1.0], out) {
        Err(Error::Shape { tensor, got, .. }) => {
            assert_eq!((tensor, got), ("transition output", vec![c * c + 1]))
        }
        other => panic!("{other:?}"),
    }
}
