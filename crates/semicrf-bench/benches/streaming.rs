//! `cpu/streaming/*`: the factorized streaming recurrence, `B·T·(C² + K·C)` terms per pass.

use criterion::Criterion;
use semicrf::AnyEngine;
use semicrf_cpu::StreamingEngine;

use crate::common::{Plan, bench};

/// The plan of the CPU streaming engine `engine`.
pub fn streaming_plan(engine: &AnyEngine) -> Plan<'_> {
    Plan {
        device: "cpu",
        algo: "streaming",
        engine,
        materialises_edges: false,
        work: |s| semicrf_bench::lse_terms(s) as f64,
        timed: None,
    }
}

fn streaming_benches(c: &mut Criterion) {
    let engine = AnyEngine::Streaming(StreamingEngine::new());
    bench(c, &streaming_plan(&engine));
}

criterion::criterion_group!(streaming, streaming_benches);
