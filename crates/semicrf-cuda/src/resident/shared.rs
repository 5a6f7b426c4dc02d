//! The shared parameters (transition, duration, start, end) of a problem in device memory:
//! given as host arrays, or as device arrays that the checks' one read-back brings to the
//! host (`shared_check` in `kernels/io.cu`), where they are checked as host ones are.

use cudarc::driver::{LaunchConfig, PushKernelArg};
use ndarray::{ArrayD, ArrayViewD, IxDyn};
use semicrf_core::range::{self, SharedBound};
use semicrf_core::{Error, Potentials, Result};

use super::array::{DeviceArray, Dtype};
use crate::call::Model;
use crate::device::{Gpu, driver};
use crate::kernel::{DevPtr, Kernel};

/// The names of the shared parameters, in the order of the builder's slots.
pub(crate) const NAMES: [&str; 4] = ["transition", "duration", "start", "end"];

/// One shared parameter as given to the builder.
#[derive(Clone, Debug)]
pub(crate) enum Shared<'a> {
    /// A host array of `f64`.
    Host(ArrayViewD<'a, f64>),
    /// A device array of `f32` or `f64`, with the tensor's shape.
    Device(DeviceArray<'a>, Vec<usize>),
}

/// The device arrays among the four slots, with their slots.
pub(crate) fn on_device<'s, 'a>(
    slots: &'s [Option<Shared<'a>>; 4],
) -> impl Iterator<Item = (usize, DeviceArray<'a>)> + 's {
    slots.iter().enumerate().filter_map(|(i, s)| match s {
        Some(Shared::Device(a, _)) => Some((i, *a)),
        _ => None,
    })
}

/// Runs `f` on the core's potentials holding the shared parameters of `slots` (checked by
/// the core's builder, on one position of zeros: shapes, NaN and `+inf`), the device ones'
/// values taken from `values` (slot by slot, in `f64`) or zeros of their shape where
/// `values` is `None` (the checks of shapes before any device work).
pub(crate) fn with_params<R>(
    slots: &[Option<Shared<'_>>; 4],
    values: Option<&[Vec<f64>; 4]>,
    (c, k): (usize, usize),
    backend: &str,
    f: impl FnOnce(&Potentials<'_, f64>) -> R,
) -> Result<R> {
    let owned: Vec<Option<ArrayD<f64>>> = slots
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            Some(Shared::Device(a, shape)) => {
                let n: usize = shape.iter().product();
                if a.len != n {
                    return Err(Error::Shape {
                        tensor: NAMES[i],
                        expected: format!("{shape:?}: {n} elements"),
                        got: vec![a.len],
                    });
                }
                let v = values.map_or_else(|| vec![0.0; n], |v| v[i].clone());
                ArrayD::from_shape_vec(IxDyn(shape), v)
                    .map(Some)
                    .map_err(|e| internal(backend, e))
            }
            _ => Ok(None),
        })
        .collect::<Result<_>>()?;
    let views: Vec<Option<ArrayViewD<'_, f64>>> = slots
        .iter()
        .zip(&owned)
        .map(|(s, o)| match (s, o) {
            (Some(Shared::Host(v)), _) => Some(v.view()),
            (_, Some(o)) => Some(o.view()),
            _ => None,
        })
        .collect();
    let zeros = vec![0.0f64; c];
    let one = [1usize];
    let zview =
        ndarray::ArrayView3::from_shape((1, 1, c), &zeros).map_err(|e| internal(backend, e))?;
    let mut pb = Potentials::builder(zview, &one, k);
    if let Some(v) = &views[0] {
        pb = pb.transition(v.view());
    }
    if let Some(v) = &views[1] {
        pb = pb.duration(v.view());
    }
    if let Some(v) = &views[2] {
        pb = pb.start(v.view());
    }
    if let Some(v) = &views[3] {
        pb = pb.end(v.view());
    }
    let params = pb.build()?;
    Ok(f(&params))
}

/// The model and the shared bound of the parameters of `slots` (see [`with_params`]).
pub(crate) fn model_of(
    slots: &[Option<Shared<'_>>; 4],
    values: Option<&[Vec<f64>; 4]>,
    model: &Model,
    backend: &str,
) -> Result<(Model, SharedBound)> {
    let sh = model.shape;
    with_params(slots, values, (sh.labels, sh.max_duration), backend, |p| {
        let m = Model::with(p, sh, model.lengths.clone(), model.has_bb, model.has_eb);
        (m, range::shared_bound(p))
    })
}

/// Queues `shared_check` on `gpu`'s stream: the device parameters of `slots` widened into
/// `copy` (slot by slot, then the `B` bounds), and each sequence's bound before its position
/// tensors into `bound`. Returns the words it writes at `copy`.
pub(crate) fn launch(
    gpu: &Gpu,
    backend: &str,
    slots: &[Option<Shared<'_>>; 4],
    (len, b): (DevPtr, usize),
    bound: DevPtr,
    copy: DevPtr,
) -> Result<usize> {
    let mut ptrs = [DevPtr::at(0); 4];
    let mut lens = [0i64; 4];
    let mut f32mask = 0i32;
    for (i, a) in on_device(slots) {
        ptrs[i] = DevPtr::at(a.ptr);
        lens[i] = a.len as i64;
        if a.dtype == Dtype::F32 {
            f32mask |= 1 << i;
        }
    }
    let bn = b as i64;
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut l = gpu.stream.launch_builder(gpu.function(Kernel::SharedCheck));
    for p in &ptrs {
        l.arg(p);
    }
    for n in &lens {
        l.arg(n);
    }
    l.arg(&f32mask).arg(&len).arg(&bn).arg(&bound).arg(&copy);
    // SAFETY: each device parameter holds its `len` elements of its type on this device
    // (checked), absent ones are null with no elements; `len` holds B lengths, `bound` B
    // words and `copy` the parameters' elements and B words more; one block of 256 threads
    // (`SH_THREADS`).
    unsafe { l.launch(cfg) }.map_err(|e| driver(backend, e))?;
    Ok(lens.iter().sum::<i64>() as usize + b)
}

/// The device parameters' values from the words `shared_check` wrote (`copy`), slot by
/// slot, and its bounds after them.
pub(crate) fn parse(slots: &[Option<Shared<'_>>; 4], copy: &[f64]) -> ([Vec<f64>; 4], Vec<f64>) {
    let mut out: [Vec<f64>; 4] = Default::default();
    let mut at = 0;
    for (i, a) in on_device(slots) {
        out[i] = copy[at..at + a.len].to_vec();
        at += a.len;
    }
    (out, copy[at..].to_vec())
}

/// Refuses bounds of the device that are not the host's, bit for bit (they decide which
/// kernels run; a difference is a defect of the kernel).
pub(crate) fn same_bounds(
    backend: &str,
    device: &[f64],
    shared: &SharedBound,
    lengths: &[usize],
) -> Result<()> {
    let host = lengths.iter().map(|&l| shared.start(l).to_bits());
    if device.len() != lengths.len() || !host.eq(device.iter().map(|x| x.to_bits())) {
        return Err(internal(
            backend,
            "the shared parameters' bounds computed on the device differ from the host's",
        ));
    }
    Ok(())
}

pub(crate) fn internal(backend: &str, e: impl std::fmt::Display) -> Error {
    Error::Device {
        backend: backend.into(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `shared_check` (`kernels/io.cu`), run on the CPU, copies every parameter widened to
    /// `f64` and gives each sequence's bound before its position tensors as the host's
    /// `range::shared_bound` does, bit for bit: parameters of both element types, absent
    /// ones, `-inf`, `+0`/`-0` and subnormal entries, more elements than the block has
    /// threads, and lengths up to a million.
    #[test]
    fn shared_check_bounds_are_the_hosts() {
        let exe = crate::emu::build_emulator("semicrf-shared-emu", "shared_main.cpp", &[]);
        let Some(exe) = exe else { return };
        bounds_are_the_hosts(&exe);
    }

    /// The same under ThreadSanitizer: the block's reduction of the maxima reads only what
    /// a barrier has ordered (a missing one is a reported race, which fails the run).
    #[test]
    fn shared_check_has_no_data_race() {
        let flags = ["-fsanitize=thread", "-g"];
        let exe = crate::emu::build_emulator("semicrf-shared-tsan", "shared_main.cpp", &flags);
        let Some(exe) = exe else { return };
        bounds_are_the_hosts(&exe);
    }

    fn bounds_are_the_hosts(exe: &std::path::Path) {
        let mut x: u64 = 0x5851_f42d_4c95_7f2d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 40.0
        };
        let (c, k) = (7, 50);
        // (transition shape or none, duration given, start given, end given, f32 mask)
        for (tr, du, st, en, mask) in [
            (Some(vec![c, c]), true, true, true, 0),
            (Some(vec![k, c, c]), true, false, true, 0b1011),
            (None, false, true, false, 0b0100),
            (None, false, false, false, 0),
            (Some(vec![c, c]), false, false, false, 0b0001),
        ] {
            let shapes = [
                tr,
                du.then(|| vec![k, c]),
                st.then(|| vec![c]),
                en.then(|| vec![c]),
            ];
            let lengths: Vec<usize> = vec![1, 17, 1000, 1_000_000];
            let mut values: [Vec<f64>; 4] = Default::default();
            let mut buf = Vec::new();
            for s in &shapes {
                let n: usize = s.as_ref().map_or(0, |s| s.iter().product());
                buf.extend_from_slice(&(n as i64).to_le_bytes());
            }
            buf.extend_from_slice(&(mask as i64).to_le_bytes());
            buf.extend_from_slice(&(lengths.len() as i64).to_le_bytes());
            for (i, s) in shapes.iter().enumerate() {
                let n: usize = s.as_ref().map_or(0, |s| s.iter().product());
                let f32 = mask >> i & 1 == 1;
                let mut v: Vec<f64> = (0..n).map(|_| next()).collect();
                for (j, special) in [f64::NEG_INFINITY, -0.0, 0.0, 1e-310]
                    .into_iter()
                    .enumerate()
                {
                    if j * 3 < n {
                        v[j * 3] = special;
                    }
                }
                for y in &mut v {
                    if f32 {
                        *y = f64::from(*y as f32);
                        buf.extend_from_slice(&(*y as f32).to_le_bytes());
                    } else {
                        buf.extend_from_slice(&y.to_le_bytes());
                    }
                }
                values[i] = v;
            }
            for &l in &lengths {
                buf.extend_from_slice(&(l as i64).to_le_bytes());
            }
            let got = crate::emu::run_emulated(exe, &buf);
            let slots: [Option<Shared<'_>>; 4] = std::array::from_fn(|i| {
                shapes[i].as_ref().map(|s| {
                    let n = s.iter().product();
                    Shared::Device(DeviceArray::at(0, n, Dtype::F64, 0), s.clone())
                })
            });
            let shape = semicrf_core::Shape::new(lengths.len(), 1_000_000, k, c);
            let model = Model {
                shape,
                dd: false,
                tr: Vec::new(),
                dur: Vec::new(),
                st: Vec::new(),
                en: Vec::new(),
                lengths: lengths.clone(),
                has_bb: false,
                has_eb: false,
            };
            let b = lengths.len();
            let (copied, bounds) = parse(&slots, &got[b..]);
            let (_, shared) = model_of(&slots, Some(&values), &model, "test").unwrap();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for i in 0..4 {
                assert_eq!(
                    bits(&copied[i]),
                    bits(&values[i]),
                    "mask {mask}: parameter {i}"
                );
            }
            let want: Vec<f64> = lengths.iter().map(|&l| shared.start(l)).collect();
            assert_eq!(bits(&got[..b]), bits(&want), "mask {mask}: bounds");
            same_bounds("test", &bounds, &shared, &lengths).unwrap();
            // A bound off by one unit in the last place is refused.
            let mut off = bounds.clone();
            off[1] = f64::from_bits(off[1].to_bits() + 1);
            assert!(same_bounds("test", &off, &shared, &lengths).is_err());
        }
    }
}
