//! `sweep/*`: the benchmark report's T-sweep (`semicrf_bench::sweep`; `SEMICRF_BENCH_SWEEP=small`
//! for the tiny CI variant): streaming, scan and exact on the CPU, forward and
//! forward+backward, then the CUDA streaming engine where built and present. Run it alone with
//! `cargo bench -p semicrf-bench --bench main -- sweep/`.

use criterion::Criterion;
use semicrf::AnyEngine;
use semicrf_cpu::{ExactEngine, ScanEngine, StreamingEngine};

use crate::common::sweep;
use crate::edge::edge_plan;
use crate::streaming::streaming_plan;

fn sweep_benches(c: &mut Criterion) {
    let streaming = AnyEngine::Streaming(StreamingEngine::new());
    sweep(c, &streaming_plan(&streaming));
    let scan = AnyEngine::Scan(ScanEngine::new());
    sweep(c, &edge_plan("scan", &scan));
    let exact = AnyEngine::Exact(ExactEngine::new());
    sweep(c, &edge_plan("exact", &exact));
    crate::cuda::each_plan(&mut |plan| sweep(c, plan));
}

criterion::criterion_group!(sweep_group, sweep_benches);
