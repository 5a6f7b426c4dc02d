//! A call's inputs on their way to the device: the position tensors in the caller's precision
//! in one copy (from where they are, or through page-locked memory), and the 8-byte words
//! of everything else packed for one copy.

use cudarc::driver::{CudaSlice, DeviceRepr};
use ndarray::ArrayView3;
use semicrf_core::{Result, Scalar};

use crate::device::{Gpu, driver};
use crate::kernel::DevPtr;

/// A call's `(B, T, C)` inputs on the device: `f32` input as it is (the kernels widen each
/// value as they read it, exactly), anything else in `f64`; or the caller's own device
/// arrays.
pub(crate) enum Input {
    F32(CudaSlice<f32>),
    F64(CudaSlice<f64>),
    Borrowed { f32: bool },
}

/// The parts, one after the other, in a new device array of `T`, copied from where they are;
/// `None` unless `F` is `T`.
fn put<F: Scalar, T: DeviceRepr + 'static>(
    gpu: &Gpu,
    parts: &[std::borrow::Cow<'_, [F]>],
    n: usize,
) -> Option<std::result::Result<CudaSlice<T>, cudarc::driver::DriverError>> {
    if std::any::TypeId::of::<F>() != std::any::TypeId::of::<T>() {
        return None;
    }
    let copy = || {
        let mut dst = gpu.uninit::<T>(n)?;
        let mut at = 0;
        for p in parts.iter().filter(|p| !p.is_empty()) {
            // SAFETY: `F` is `T` (checked above), so the slice is the same memory read as
            // the same type.
            let p: &[T] = unsafe { std::slice::from_raw_parts(p.as_ptr().cast::<T>(), p.len()) };
            gpu.stream
                .memcpy_htod(p, &mut dst.slice_mut(at..at + p.len()))?;
            at += p.len();
        }
        Ok(dst)
    };
    Some(copy())
}

impl Input {
    /// `parts` one after the other, in one copy.
    pub(crate) fn new<F: Scalar>(
        gpu: &Gpu,
        backend: &str,
        parts: &[&ArrayView3<'_, F>],
    ) -> Result<Input> {
        // Each part as one slice in memory order (a copy only for a part that is not one).
        let flat: Vec<std::borrow::Cow<'_, [F]>> = parts
            .iter()
            .map(|a| match a.as_slice() {
                Some(s) => std::borrow::Cow::Borrowed(s),
                None => std::borrow::Cow::Owned(a.iter().copied().collect()),
            })
            .collect();
        let n = flat.iter().map(|s| s.len()).sum();
        // Elements `i..i + out.len()` of the parts, converted.
        fn fill<F: Scalar, T>(
            flat: &[std::borrow::Cow<'_, [F]>],
            i: usize,
            out: &mut [T],
            to: impl Fn(F) -> T,
        ) {
            let (mut i, mut out) = (i, out);
            for s in flat {
                if out.is_empty() {
                    return;
                }
                if i >= s.len() {
                    i -= s.len();
                    continue;
                }
                let m = out.len().min(s.len() - i);
                let (now, rest) = out.split_at_mut(m);
                for (o, &x) in now.iter_mut().zip(&s[i..i + m]) {
                    *o = to(x);
                }
                (i, out) = (0, rest);
            }
        }
        // Below the staging threshold the parts go to the device from where they are: the
        // input's element type is the device's (`f32` stays `f32`, `f64` is `f64`).
        if crate::transfer::stage::direct(n * F::BYTES as usize) {
            let r = if F::BYTES == 4 {
                put::<F, f32>(gpu, &flat, n).map(|r| r.map(Input::F32))
            } else {
                put::<F, f64>(gpu, &flat, n).map(|r| r.map(Input::F64))
            };
            if let Some(r) = r {
                return r.map_err(|e| driver(backend, e));
            }
        }
        let r = if F::BYTES == 4 {
            gpu.upload_with(n, |i, out: &mut [f32]| {
                fill(&flat, i, out, |x| x.as_f64() as f32)
            })
            .map(Input::F32)
        } else {
            gpu.upload_with(n, |i, out: &mut [f64]| fill(&flat, i, out, |x| x.as_f64()))
                .map(Input::F64)
        };
        r.map_err(|e| driver(backend, e))
    }

    /// The inputs' address (null where they are the caller's own).
    pub(crate) fn ptr(&self, gpu: &Gpu) -> DevPtr {
        match self {
            Input::F32(s) => gpu.ptr(s),
            Input::F64(s) => gpu.ptr(s),
            Input::Borrowed { .. } => DevPtr::NULL,
        }
    }

    /// Bytes of an element.
    pub(crate) fn elem(&self) -> usize {
        if self.f32() { 4 } else { 8 }
    }

    /// Whether the elements are `f32`.
    pub(crate) fn f32(&self) -> bool {
        matches!(self, Input::F32(_) | Input::Borrowed { f32: true })
    }
}

/// Arrays of 8-byte words packed for one copy to the device: `push` returns an array's
/// offset in words.
#[derive(Default)]
pub(crate) struct Words(pub(crate) Vec<u64>);

impl Words {
    pub(crate) fn f64s(&mut self, v: impl IntoIterator<Item = f64>) -> usize {
        let at = self.0.len();
        self.0.extend(v.into_iter().map(f64::to_bits));
        at
    }

    pub(crate) fn i64s(&mut self, v: impl IntoIterator<Item = i64>) -> usize {
        let at = self.0.len();
        self.0.extend(v.into_iter().map(|x| x as u64));
        at
    }
}
