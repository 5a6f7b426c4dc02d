//! CPU backends of semicrf: [`ExactEngine`], [`ScanEngine`] and [`StreamingEngine`], each an
//! implementation of [`semicrf_core::Engine`] for `f32` and `f64` inputs and any semiring,
//! parallel over the batch with rayon.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod edge;
mod exact;
mod kbest;
mod par;
mod sample;
mod scan;
mod streaming;

pub use exact::ExactEngine;
pub use par::{map_indexed, threads};
pub use scan::ScanEngine;
pub use semicrf_core::Parallelism;
pub use streaming::{DEFAULT_CHUNK_ROWS, StreamingEngine};
