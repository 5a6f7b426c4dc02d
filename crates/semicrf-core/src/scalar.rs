//! The element types semicrf accepts.

use core::fmt::{Debug, Display};
use num_traits::Float;

/// An input element type: `f32` or `f64`. Outputs are always `f64`.
pub trait Scalar: Float + Debug + Display + Default + Send + Sync + 'static {
    /// `"f32"` or `"f64"`.
    const DTYPE: &'static str;
    /// Size in bytes.
    const BYTES: u64;
    /// Exact widening to `f64`.
    fn as_f64(self) -> f64;
    /// Conversion from `f64` (rounding for `f32`).
    fn from_f64_lossy(x: f64) -> Self;
}

impl Scalar for f32 {
    const DTYPE: &'static str = "f32";
    const BYTES: u64 = 4;
    #[inline(always)]
    fn as_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_f64_lossy(x: f64) -> Self {
        x as f32
    }
}

impl Scalar for f64 {
    const DTYPE: &'static str = "f64";
    const BYTES: u64 = 8;
    #[inline(always)]
    fn as_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64_lossy(x: f64) -> Self {
        x
    }
}
