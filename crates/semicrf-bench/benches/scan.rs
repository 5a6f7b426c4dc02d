//! `cpu/scan/*`: materialised edges, `B·T·K·C²` terms per pass; shapes whose edge tensor
//! exceeds 4 GiB are skipped with a note.

use criterion::Criterion;
use semicrf::AnyEngine;
use semicrf_cpu::ScanEngine;

use crate::common::{Plan, bench};

fn scan_benches(c: &mut Criterion) {
    let engine = AnyEngine::Scan(ScanEngine::new());
    bench(
        c,
        &Plan {
            algo: "scan",
            engine: &engine,
            materialises_edges: true,
            work: |s| (s.batch * s.len * s.max_duration * s.labels * s.labels) as f64,
        },
    );
}

criterion::criterion_group!(scan, scan_benches);
