//! CPU backends of semicrf: [`ExactEngine`], [`ScanEngine`] and [`StreamingEngine`], each an
//! implementation of [`semicrf_core::Engine`] for `f32` and `f64` inputs, parallel over the
//! batch with rayon.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod exact;
mod kernels;
mod par;
mod scan;
mod streaming;

pub use exact::ExactEngine;
pub use par::{Parallelism, map_indexed};
pub use scan::ScanEngine;
pub use streaming::StreamingEngine;
