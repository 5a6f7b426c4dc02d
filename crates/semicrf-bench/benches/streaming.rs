//! `cpu/streaming/*`: the factorized streaming recurrence, `B·T·(C² + K·C)` terms per pass.

use criterion::Criterion;
use semicrf::AnyEngine;
use semicrf_cpu::StreamingEngine;

use crate::common::{Plan, bench};

fn streaming_benches(c: &mut Criterion) {
    let engine = AnyEngine::Streaming(StreamingEngine::new());
    bench(
        c,
        &Plan {
            device: "cpu",
            algo: "streaming",
            engine: &engine,
            materialises_edges: false,
            work: |s| semicrf_bench::lse_terms(s) as f64,
            timed: None,
        },
    );
}

criterion::criterion_group!(streaming, streaming_benches);
