//! `cpu/exact/*` and `cpu/scan/*`: the edge program over materialised edges, `B·T·K·C²` terms
//! per pass; shapes whose edge tensor and estimate exceed 4 GiB are skipped with a note.

use criterion::Criterion;
use semicrf::AnyEngine;
use semicrf_cpu::{ExactEngine, ScanEngine};

use crate::common::{Plan, bench};

/// The plan of an engine over materialised edges (`exact` or `scan`).
pub fn edge_plan<'a>(algo: &'static str, engine: &'a AnyEngine) -> Plan<'a> {
    Plan {
        device: "cpu",
        algo,
        engine,
        materialises_edges: true,
        work: |s| (s.batch * s.len * s.max_duration * s.labels * s.labels) as f64,
        timed: None,
    }
}

fn exact_benches(c: &mut Criterion) {
    bench(
        c,
        &edge_plan("exact", &AnyEngine::Exact(ExactEngine::new())),
    );
}

fn scan_benches(c: &mut Criterion) {
    bench(c, &edge_plan("scan", &AnyEngine::Scan(ScanEngine::new())));
}

criterion::criterion_group!(exact, exact_benches);
criterion::criterion_group!(scan, scan_benches);
