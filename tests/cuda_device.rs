//! The CUDA engine on potentials and outputs already in device memory (`DevicePotentials`,
//! `backward_into`): the same results as from host arrays, bit for bit, refusals of bad
//! device arrays, and large copies through page-locked memory.
//!
//! Without a usable GPU every test here prints why and passes, unless
//! `SEMICRF_REQUIRE_GPU=1`, which makes that a failure.

#![cfg(all(feature = "cpu", feature = "cuda"))]

use semicrf_core::testing::{GenSpec, TransitionKind, random_problem, upstream};
use semicrf_core::{Engine, EntropySemiring, LogSemiring, Problem};
use semicrf_cuda::CudaEngine;

fn gpu() -> Option<CudaEngine> {
    CudaEngine::usable_or_skip(0)
}

/// Potentials in device memory (cudarc buffers and raw addresses with a stream of their
/// own) give what the same potentials from the host give, bit for bit: log Z, entropy and
/// Viterbi, every gradient and marginal, and the magnitude bounds computed on the device
/// equal the host's; both element types, both transition forms, boundaries, ragged lengths
/// and `-inf` entries.
#[test]
fn potentials_in_device_memory_match_host_potentials() {
    use semicrf_cuda::cudarc::driver::{CudaContext, DevicePtr};
    use semicrf_cuda::{DeviceArray, Dtype};
    let Some(cuda) = gpu() else { return };
    let ctx = CudaContext::new(0).unwrap();
    let side = ctx.new_stream().unwrap();
    for (seed, (b, t, k, c, dd)) in [
        (3, 40, 6, 5, false),
        (2, 300, 30, 8, false),
        (4, 120, 7, 24, true),
        (1, 70, 3, 70, false),
    ]
    .into_iter()
    .enumerate()
    {
        let mut spec = GenSpec::new(b, t, k, c).everything();
        if dd {
            spec.transition = TransitionKind::DurationDependent;
        }
        let owned = random_problem(500 + seed as u64, &spec);
        let g = upstream(9, b);
        let flat = |a: &Option<ndarray::ArrayD<f64>>| {
            a.as_ref().map(|a| a.iter().copied().collect::<Vec<f64>>())
        };
        let host_view = owned.view().unwrap();
        for f32 in [false, true] {
            let name = format!("B{b} T{t} K{k} C{c} dd={dd} f32={f32}");
            // The host's answers, for the same values (f32 input: the same f32 values, the
            // parameters too).
            let cast = owned.cast::<f32>();
            let widened = cast.cast::<f64>();
            let from = if f32 { &widened } else { &owned };
            let expect_mag = if f32 {
                cast.view().unwrap().magnitudes().to_vec()
            } else {
                host_view.magnitudes().to_vec()
            };
            let (hb, hz, hh, hv) = if f32 {
                let p = Problem::Structured(cast.view().unwrap());
                (
                    Engine::<f32>::backward(&cuda, &p, &g).unwrap(),
                    Engine::<f32>::forward::<LogSemiring>(&cuda, &p).unwrap(),
                    Engine::<f32>::forward::<EntropySemiring>(&cuda, &p).unwrap(),
                    Engine::<f32>::viterbi(&cuda, &p).unwrap(),
                )
            } else {
                let p = Problem::Structured(host_view.clone());
                (
                    Engine::<f64>::backward(&cuda, &p, &g).unwrap(),
                    Engine::<f64>::forward::<LogSemiring>(&cuda, &p).unwrap(),
                    Engine::<f64>::forward::<EntropySemiring>(&cuda, &p).unwrap(),
                    Engine::<f64>::viterbi(&cuda, &p).unwrap(),
                )
            };
            // The position tensors on the device: scores on the side stream (raw address),
            // boundaries as cudarc buffers of the default stream.
            let up = |v: Vec<f64>, s: &std::sync::Arc<semicrf_cuda::cudarc::driver::CudaStream>| {
                if f32 {
                    let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                    (None, Some(s.clone_htod(&v).unwrap()))
                } else {
                    (Some(s.clone_htod(&v).unwrap()), None)
                }
            };
            let scores: Vec<f64> = owned.scores.iter().copied().collect();
            let sc = up(scores, &side);
            let bb = flat(&owned.begin_boundary).map(|v| up(v, &ctx.default_stream()));
            let eb = flat(&owned.end_boundary).map(|v| up(v, &ctx.default_stream()));
            let (sc_ptr, n) = match &sc {
                (Some(d), _) => (d.device_ptr(&side).0, d.len()),
                (_, Some(s)) => (s.device_ptr(&side).0, s.len()),
                _ => unreachable!(),
            };
            let dtype = if f32 { Dtype::F32 } else { Dtype::F64 };
            // SAFETY: `sc` outlives every call below and is written by nothing else.
            let raw = unsafe { DeviceArray::from_raw(sc_ptr, n, dtype, side.cu_stream()) };
            for scores in [dev_array(&sc), raw] {
                let bounds = [bb.as_ref().map(dev_array), eb.as_ref().map(dev_array)];
                let (dims, lens) = ((b, t, c), &owned.lengths[..]);
                let p = build_on_device(&cuda, scores, bounds, lens, dims, k, Some(from)).unwrap();
                assert_eq!(p.magnitudes(), &expect_mag[..], "{name}: magnitudes");
                let db = cuda.backward_on_device(&p, &g).unwrap().to_host().unwrap();
                assert_same_bits(&db, &hb, &format!("{name}: backward"));
                let z = cuda.forward_on_device::<LogSemiring>(&p).unwrap();
                assert_eq!(format!("{z:?}"), format!("{hz:?}"), "{name}: log Z");
                let h = cuda.forward_on_device::<EntropySemiring>(&p).unwrap();
                assert_eq!(format!("{h:?}"), format!("{hh:?}"), "{name}: entropy");
                assert_eq!(cuda.viterbi_on_device(&p).unwrap(), hv, "{name}: Viterbi");
            }
        }
    }
}

/// Bad potentials in device memory are refused as the host's are: the first NaN or `+inf`
/// by tensor and index, a wrong length, mixed element types, an address that is not device
/// memory or whose allocation is too short, bad lengths; and an engine of another algorithm.
#[test]
fn bad_potentials_in_device_memory_are_refused() {
    use semicrf_core::{Algorithm, Error, Potentials};
    use semicrf_cuda::cudarc::driver::{CudaContext, DevicePtr};
    use semicrf_cuda::{DeviceArray, DevicePotentials, Dtype};
    let Some(cuda) = gpu() else { return };
    let stream = CudaContext::new(0).unwrap().default_stream();
    let (b, t, c, k) = (3, 20, 4, 5);
    let lengths = [20, 7, 13];
    let mut v = vec![0.25f64; b * t * c];
    v[5] = f64::NEG_INFINITY;
    // A NaN beyond sequence 1's length (checked too, as on the host) and a +inf later.
    v[(t + 9) * c + 2] = f64::NAN;
    v[(2 * t + 3) * c + 1] = f64::INFINITY;
    let host = ndarray::Array3::from_shape_vec((b, t, c), v.clone()).unwrap();
    let want = Potentials::builder(host.view(), &lengths, k)
        .build()
        .unwrap_err();
    let d = stream.clone_htod(&v).unwrap();
    let got = DevicePotentials::builder(DeviceArray::f64(&d), (b, t, c), &lengths, k)
        .build(&cuda)
        .unwrap_err();
    assert_eq!(format!("{got}"), format!("{want}"));
    assert!(
        matches!(got, Error::NonFinite { ref index, .. } if index == &[1, 9, 2]),
        "{got}"
    );

    let ok = stream.clone_htod(&vec![0.5f64; b * t * c]).unwrap();
    let ok32 = stream.clone_htod(&vec![0.5f32; b * t * c]).unwrap();
    let short = stream.clone_htod(&vec![0.5f64; b * t * c - 1]).unwrap();
    let build = |s, bb, lens| build_on_device(&cuda, s, [bb, None], lens, (b, t, c), k, None);

    assert!(matches!(
        build(DeviceArray::f64(&short), None, &lengths),
        Err(Error::Shape {
            tensor: "scores",
            ..
        })
    ));
    assert!(matches!(
        build(
            DeviceArray::f64(&ok),
            Some(DeviceArray::f32(&ok32)),
            &lengths
        ),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        build(DeviceArray::f64(&ok), None, &[20, 0, 3][..]),
        Err(Error::Length { sequence: 1, .. })
    ));
    assert!(matches!(
        build(DeviceArray::f64(&ok), None, &[20, 3][..]),
        Err(Error::LengthsCount {
            expected: 3,
            got: 2
        })
    ));
    // Host memory, and device memory too short for the length claimed.
    let host_mem = vec![0.5f64; b * t * c];
    // SAFETY: never read: the check refuses the address first.
    let not_dev = unsafe {
        DeviceArray::from_raw(
            host_mem.as_ptr() as u64,
            b * t * c,
            Dtype::F64,
            std::ptr::null_mut(),
        )
    };
    let e = build(not_dev, None, &lengths).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported { ref what, .. } if what.contains("not device memory")),
        "{e}"
    );
    let p = short.device_ptr(&stream).0;
    // SAFETY: never read: the check refuses the length first.
    let long = unsafe { DeviceArray::from_raw(p, b * t * c, Dtype::F64, std::ptr::null_mut()) };
    let e = build(long, None, &lengths).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported { ref what, .. } if what.contains("do not fit")),
        "{e}"
    );
    // Magnitudes beyond the limit, as on the host.
    let huge = stream.clone_htod(&vec![1e299f64; b * t * c]).unwrap();
    let e = build(DeviceArray::f64(&huge), None, &lengths).unwrap_err();
    assert!(matches!(e, Error::Magnitude { sequence: 0, .. }), "{e}");
    // Only the streaming engine takes them.
    let p = build(DeviceArray::f64(&ok), None, &lengths).unwrap();
    let exact = semicrf_cuda::CudaEngine::new(Algorithm::Exact, 0);
    assert!(matches!(
        exact.forward_on_device::<LogSemiring>(&p),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        cuda.backward_on_device(&p, &[1.0]),
        Err(Error::Upstream { .. })
    ));
}

/// Two backward results, every value bit for bit (shapes included).
fn assert_same_bits(got: &semicrf_core::Backward, want: &semicrf_core::Backward, what: &str) {
    let bits = |v: &mut dyn Iterator<Item = &f64>| v.map(|x| x.to_bits()).collect::<Vec<u64>>();
    assert_eq!(
        bits(&mut got.log_z.iter()),
        bits(&mut want.log_z.iter()),
        "{what}: log Z"
    );
    assert_eq!(
        got.boundary_marginals.shape(),
        want.boundary_marginals.shape()
    );
    assert!(
        bits(&mut got.boundary_marginals.iter()) == bits(&mut want.boundary_marginals.iter()),
        "{what}: boundary marginals"
    );
    for ((field, a), (_, b)) in got.grad.fields().into_iter().zip(want.grad.fields()) {
        match (a, b) {
            (None, None) => {}
            (Some(a), Some(b)) => {
                assert_eq!(a.shape(), b.shape(), "{what}: shape of grad.{field}");
                assert!(
                    bits(&mut a.iter()) == bits(&mut b.iter()),
                    "{what}: grad.{field}"
                );
            }
            _ => panic!("{what}: grad.{field} present in one only"),
        }
    }
}

/// A device copy of a position tensor, in `f64` or in `f32`.
type OnDevice = (
    Option<semicrf_cuda::cudarc::driver::CudaSlice<f64>>,
    Option<semicrf_cuda::cudarc::driver::CudaSlice<f32>>,
);

fn dev_array(x: &OnDevice) -> semicrf_cuda::DeviceArray<'_> {
    match x {
        (Some(d), _) => semicrf_cuda::DeviceArray::f64(d),
        (_, Some(s)) => semicrf_cuda::DeviceArray::f32(s),
        _ => unreachable!("one of the two"),
    }
}

/// Scores and the begin and end boundaries given on the device, with the shared parameters
/// of `params` (where given), checked.
fn build_on_device<'a>(
    cuda: &CudaEngine,
    scores: semicrf_cuda::DeviceArray<'a>,
    [bb, eb]: [Option<semicrf_cuda::DeviceArray<'a>>; 2],
    lengths: &'a [usize],
    dims: (usize, usize, usize),
    k: usize,
    params: Option<&'a semicrf_core::OwnedPotentials<f64>>,
) -> semicrf_core::Result<semicrf_cuda::DevicePotentials<'a>> {
    let mut pb = semicrf_cuda::DevicePotentials::builder(scores, dims, lengths, k);
    if let Some(x) = bb {
        pb = pb.begin_boundary(x);
    }
    if let Some(x) = eb {
        pb = pb.end_boundary(x);
    }
    if let Some(p) = params {
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
    }
    pb.build(cuda)
}

/// Copies larger than the page-locked buffer (more chunks than it has slots, and a last
/// chunk not full) in both directions: a backward from host arrays (copied through it)
/// equals, bit for bit, the same backward on the same values already on the device, read
/// back with a plain copy; f32 and f64.
#[test]
fn large_copies_through_page_locked_memory_are_exact() {
    use semicrf_cuda::cudarc::driver::CudaContext;
    let Some(cuda) = gpu() else { return };
    let stream = CudaContext::new(0).unwrap().default_stream();
    // 3 · 230001 · 7 positions: 38.6 MB of f64 gradient, 19.3 MB of f32 scores.
    let (b, t, k, c) = (3, 230_001, 4, 7);
    let mut spec = GenSpec::new(b, t, k, c);
    spec.ragged = true;
    let owned = random_problem(41, &spec);
    let g = upstream(5, b);
    let cast = owned.cast::<f32>();
    let widened = cast.cast::<f64>();
    let lengths = owned.lengths.clone();
    let flat: Vec<f64> = owned.scores.iter().copied().collect();
    for f32 in [false, true] {
        let host = if f32 {
            let p = Problem::Structured(cast.view().unwrap());
            Engine::<f32>::backward(&cuda, &p, &g).unwrap()
        } else {
            let p = Problem::Structured(owned.view().unwrap());
            Engine::<f64>::backward(&cuda, &p, &g).unwrap()
        };
        let on: OnDevice = if f32 {
            let v: Vec<f32> = flat.iter().map(|&x| x as f32).collect();
            (None, Some(stream.clone_htod(&v).unwrap()))
        } else {
            (Some(stream.clone_htod(&flat).unwrap()), None)
        };
        let params = if f32 { &widened } else { &owned };
        let (dims, sc) = ((b, t, c), dev_array(&on));
        let p = build_on_device(&cuda, sc, [None, None], &lengths, dims, k, Some(params)).unwrap();
        let dev = cuda.backward_on_device(&p, &g).unwrap().to_host().unwrap();
        assert_same_bits(&dev, &host, &format!("f32={f32}: staged and plain copies"));
    }
}

/// A device output of either element type, made on `s` full of NaN (so a value the call
/// does not write shows).
fn nan_output(
    s: &std::sync::Arc<semicrf_cuda::cudarc::driver::CudaStream>,
    n: usize,
    f32: bool,
) -> OnDevice {
    if f32 {
        (None, Some(s.clone_htod(&vec![f32::NAN; n]).unwrap()))
    } else {
        (Some(s.clone_htod(&vec![f64::NAN; n]).unwrap()), None)
    }
}

fn out_array(x: &mut OnDevice) -> semicrf_cuda::DeviceArrayMut<'_> {
    match x {
        (Some(d), _) => semicrf_cuda::DeviceArrayMut::f64(d),
        (_, Some(s)) => semicrf_cuda::DeviceArrayMut::f32(s),
        _ => unreachable!("one of the two"),
    }
}

/// An output read back on its own stream, as `f64` (`f32` widened exactly).
fn read_output(x: &OnDevice) -> Vec<f64> {
    match x {
        (Some(d), _) => d.stream().clone_dtoh(d).unwrap(),
        (_, Some(s)) => s
            .stream()
            .clone_dtoh(s)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        _ => unreachable!("one of the two"),
    }
}

/// `backward_into` writes into the caller's arrays (made on another stream than the
/// engine's, full of NaN) what `backward_on_device` gives, bit for bit (rounded to `f32` for
/// `f32` potentials), and returns the same log Z and shared gradients: both element types,
/// with and without boundaries, a `(K, C, C)` transition, the log-domain kernels alone, and
/// sequences beyond the linear domain's range (rerun in the log domain) beside ordinary ones.
#[test]
fn backward_into_writes_what_backward_on_device_gives() {
    use semicrf_cuda::cudarc::driver::{CudaContext, DevicePtrMut};
    use semicrf_cuda::{DeviceArrayMut, DeviceOutputs, Dtype};
    let Some(cuda) = gpu() else { return };
    let ctx = CudaContext::new(0).unwrap();
    let side = ctx.new_stream().unwrap();
    let stream = ctx.default_stream();
    // (B, T, K, C, boundaries and start/end, (K, C, C) transition, a score of 60 nats)
    for (seed, (b, t, k, c, all, dd, range)) in [
        (3, 40, 6, 5, false, false, false),
        (2, 120, 7, 24, true, true, false),
        (4, 300, 64, 5, true, false, true),
        (4, 300, 64, 5, false, false, true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut spec = GenSpec::new(b, t, k, c);
        if all {
            spec = spec.everything();
        }
        spec.transition = if dd {
            TransitionKind::DurationDependent
        } else {
            TransitionKind::Static
        };
        let mut owned = random_problem(17 + seed as u64, &spec);
        if range {
            // As in `sequences_beyond_the_linear_domain_are_answered_exactly`: a score of 60
            // nats (beyond the linear range) within sequence 1.
            let at = owned.lengths[1] / 2;
            owned.scores[[1, at, 0]] = 60.0;
        }
        let g = upstream(5, b);
        let widened = owned.cast::<f32>().cast::<f64>();
        let flat = |a: &ndarray::ArrayD<f64>| a.iter().copied().collect::<Vec<f64>>();
        for f32 in [false, true] {
            let from = if f32 { &widened } else { &owned };
            let up = |v: Vec<f64>| {
                if f32 {
                    let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                    (None, Some(stream.clone_htod(&v).unwrap()))
                } else {
                    (Some(stream.clone_htod(&v).unwrap()), None)
                }
            };
            let sc: OnDevice = up(owned.scores.iter().copied().collect());
            let bb = owned.begin_boundary.as_ref().map(|x| up(flat(x)));
            let eb = owned.end_boundary.as_ref().map(|x| up(flat(x)));
            let bounds = [bb.as_ref().map(dev_array), eb.as_ref().map(dev_array)];
            let (dims, lens) = ((b, t, c), &owned.lengths[..]);
            let p =
                build_on_device(&cuda, dev_array(&sc), bounds, lens, dims, k, Some(from)).unwrap();
            for engine in [cuda, cuda.log_domain_only()] {
                let name = format!(
                    "B{b} T{t} K{k} C{c} all={all} dd={dd} range={range} f32={f32} \
                     linear={}",
                    engine == cuda
                );
                let want = engine
                    .backward_on_device(&p, &g)
                    .unwrap()
                    .to_host()
                    .unwrap();
                let (btc, bt) = (b * t * c, b * t);
                let mut o_sc = nan_output(&side, btc, f32);
                let mut o_bb = bb.as_ref().map(|_| nan_output(&side, btc, f32));
                let mut o_eb = eb.as_ref().map(|_| nan_output(&side, btc, f32));
                let mut o_bm = nan_output(&side, bt, f32);
                let mut o_lz = nan_output(&side, b, f32);
                // The scores' output by its raw address and stream.
                let (ptr, dtype) = match &mut o_sc {
                    (Some(d), _) => (d.device_ptr_mut(&side).0, Dtype::F64),
                    (_, Some(s)) => (s.device_ptr_mut(&side).0, Dtype::F32),
                    _ => unreachable!(),
                };
                // SAFETY: `o_sc` outlives the call and is used by nothing else meanwhile.
                let raw = unsafe { DeviceArrayMut::from_raw(ptr, btc, dtype, side.cu_stream()) };
                let mut out = DeviceOutputs::new(raw)
                    .boundary(out_array(&mut o_bm))
                    .log_z(out_array(&mut o_lz));
                if let Some(x) = o_bb.as_mut() {
                    out = out.begin_boundary(out_array(x));
                }
                if let Some(x) = o_eb.as_mut() {
                    out = out.end_boundary(out_array(x));
                }
                let before = CudaEngine::reruns();
                let host = engine.backward_into(&p, &g, out).unwrap();
                if range && engine == cuda {
                    assert!(CudaEngine::reruns() > before, "{name}: sequence 1 rerun");
                }
                let bits = |v: &mut dyn Iterator<Item = &f64>| {
                    v.map(|&x| if f32 { f64::from(x as f32) } else { x }.to_bits())
                        .collect::<Vec<u64>>()
                };
                let got = |x: &OnDevice| read_output(x).iter().map(|x| x.to_bits()).collect();
                let w = &want.grad;
                let s: Vec<u64> = got(&o_sc);
                assert!(
                    s == bits(&mut w.scores.as_ref().unwrap().iter()),
                    "{name}: scores"
                );
                let both = [
                    (o_bb.as_ref(), w.begin_boundary.as_ref(), "begin"),
                    (o_eb.as_ref(), w.end_boundary.as_ref(), "end"),
                ];
                for (o, wa, side_name) in both {
                    assert_eq!(o.is_some(), wa.is_some(), "{name}: {side_name} boundary");
                    if let (Some(o), Some(wa)) = (o, wa) {
                        let v: Vec<u64> = got(o);
                        assert!(v == bits(&mut wa.iter()), "{name}: {side_name} boundary");
                    }
                }
                let v: Vec<u64> = got(&o_bm);
                assert!(
                    v == bits(&mut want.boundary_marginals.iter()),
                    "{name}: marginals"
                );
                let v: Vec<u64> = got(&o_lz);
                assert_eq!(
                    v,
                    bits(&mut want.log_z.iter()),
                    "{name}: log Z on the device"
                );
                let exact = |v: &mut dyn Iterator<Item = &f64>| {
                    v.map(|x| x.to_bits()).collect::<Vec<u64>>()
                };
                assert_eq!(exact(&mut host.log_z.iter()), exact(&mut want.log_z.iter()));
                let shared = [
                    (host.transition.clone(), w.transition.clone()),
                    (
                        host.duration.clone().into_dyn(),
                        w.duration.clone().map(|a| a.into_dyn()),
                    ),
                    (
                        host.start.clone().into_dyn(),
                        w.start.clone().map(|a| a.into_dyn()),
                    ),
                    (
                        host.end.clone().into_dyn(),
                        w.end.clone().map(|a| a.into_dyn()),
                    ),
                ];
                for (i, (h, wv)) in shared.into_iter().enumerate() {
                    let wv = wv.unwrap();
                    assert_eq!(h.shape(), wv.shape(), "{name}: shared {i}");
                    assert_eq!(
                        exact(&mut h.iter()),
                        exact(&mut wv.iter()),
                        "{name}: shared {i}"
                    );
                }
            }
        }
    }
}

/// Outputs that do not fit the problem are refused before anything is written: a wrong
/// length, another element type, a boundary output missing or given for a boundary the
/// problem lacks, an output overlapping the scores, host memory, and a bad upstream.
#[test]
fn bad_outputs_are_refused() {
    use semicrf_core::Error;
    use semicrf_cuda::cudarc::driver::{CudaContext, DevicePtr};
    use semicrf_cuda::{DeviceArray, DeviceArrayMut, DeviceOutputs, DevicePotentials, Dtype};
    let Some(cuda) = gpu() else { return };
    let stream = CudaContext::new(0).unwrap().default_stream();
    let (b, t, c, k) = (2, 10, 3, 4);
    let lengths = [10, 6];
    let n = b * t * c;
    let scores = stream.clone_htod(&vec![0.5f64; n]).unwrap();
    let bound = stream.clone_htod(&vec![0.1f64; n]).unwrap();
    let p = DevicePotentials::builder(DeviceArray::f64(&scores), (b, t, c), &lengths, k)
        .begin_boundary(DeviceArray::f64(&bound))
        .build(&cuda)
        .unwrap();
    let mut ok = stream.alloc_zeros::<f64>(n).unwrap();
    let mut ok2 = stream.alloc_zeros::<f64>(n).unwrap();
    let mut short = stream.alloc_zeros::<f64>(n - 1).unwrap();
    let mut f32s = stream.alloc_zeros::<f32>(n).unwrap();
    let g = [1.0, 1.0];
    let unsupported = |e: Error, needle: &str| {
        let ok = matches!(&e, Error::Unsupported { what, .. } if what.contains(needle));
        assert!(ok, "{e}");
    };
    let e = cuda
        .backward_into(
            &p,
            &g,
            DeviceOutputs::new(DeviceArrayMut::f64(&mut short))
                .begin_boundary(DeviceArrayMut::f64(&mut ok2)),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shape {
                tensor: "scores output",
                ..
            }
        ),
        "{e}"
    );
    let e = cuda
        .backward_into(
            &p,
            &g,
            DeviceOutputs::new(DeviceArrayMut::f64(&mut ok))
                .begin_boundary(DeviceArrayMut::f32(&mut f32s)),
        )
        .unwrap_err();
    unsupported(e, "F32 for potentials of F64");
    let e = cuda
        .backward_into(&p, &g, DeviceOutputs::new(DeviceArrayMut::f64(&mut ok)))
        .unwrap_err();
    unsupported(e, "begin boundary without");
    let e = cuda
        .backward_into(
            &p,
            &g,
            DeviceOutputs::new(DeviceArrayMut::f64(&mut ok))
                .begin_boundary(DeviceArrayMut::f64(&mut ok2))
                .end_boundary(DeviceArrayMut::f64(&mut short)),
        )
        .unwrap_err();
    unsupported(e, "end boundary's gradient on a problem without");
    // The scores' own memory as an output.
    let at = scores.device_ptr(&stream).0;
    // SAFETY: never written: the check refuses it first.
    let alias = unsafe { DeviceArrayMut::from_raw(at, n, Dtype::F64, std::ptr::null_mut()) };
    let e = cuda
        .backward_into(
            &p,
            &g,
            DeviceOutputs::new(alias).begin_boundary(DeviceArrayMut::f64(&mut ok2)),
        )
        .unwrap_err();
    unsupported(e, "overlapping scores");
    let mut host_mem = vec![0.0f64; n];
    // SAFETY: never written: the check refuses the address first.
    let not_dev = unsafe {
        DeviceArrayMut::from_raw(
            host_mem.as_mut_ptr() as u64,
            n,
            Dtype::F64,
            std::ptr::null_mut(),
        )
    };
    let e = cuda
        .backward_into(
            &p,
            &g,
            DeviceOutputs::new(not_dev).begin_boundary(DeviceArrayMut::f64(&mut ok2)),
        )
        .unwrap_err();
    unsupported(e, "not device memory");
    let e = cuda
        .backward_into(
            &p,
            &[1.0],
            DeviceOutputs::new(DeviceArrayMut::f64(&mut ok))
                .begin_boundary(DeviceArrayMut::f64(&mut ok2)),
        )
        .unwrap_err();
    assert!(matches!(e, Error::Upstream { .. }), "{e}");
    // And the same outputs, right, are taken.
    cuda.backward_into(
        &p,
        &g,
        DeviceOutputs::new(DeviceArrayMut::f64(&mut ok))
            .begin_boundary(DeviceArrayMut::f64(&mut ok2)),
    )
    .unwrap();
}
