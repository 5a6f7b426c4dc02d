//! CUDA backends of semicrf.
