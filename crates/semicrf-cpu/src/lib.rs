//! CPU backends of semicrf.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
