//! Benchmark support for semicrf.
