//! `cuda/streaming/*`: the CUDA streaming engine on device 0 (`cuda-log/streaming/*`: the
//! same with the log semiring in the log-domain kernels only) (needs the `cuda` feature and a
//! GPU; otherwise the group says why and times nothing). Each iteration is one whole call:
//! inputs copied to the device, kernels, results copied back, timed by CUDA events recorded
//! on the engine's stream around it (`CudaEngine::time`).

use criterion::Criterion;

#[cfg(feature = "cuda")]
fn cuda_benches(c: &mut Criterion) {
    use semicrf::AnyEngine;
    use semicrf_cuda::CudaEngine;

    use crate::common::{Plan, bench};

    let Some(gpu) = CudaEngine::usable_or_skip(0) else {
        return;
    };
    let timed = |f: &mut dyn FnMut()| gpu.time(f).expect("CUDA events on the device").1;
    // `cuda-log`: the same engine with the log semiring in the log-domain kernels only.
    for (device, engine) in [
        ("cuda", AnyEngine::Cuda(gpu)),
        ("cuda-log", AnyEngine::Cuda(gpu.log_domain_only())),
    ] {
        bench(
            c,
            &Plan {
                device,
                algo: "streaming",
                engine: &engine,
                materialises_edges: false,
                work: |s| semicrf_bench::lse_terms(s) as f64,
                timed: Some(&timed),
            },
        );
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_benches(_: &mut Criterion) {
    eprintln!("note: cuda/streaming skipped: built without the `cuda` feature");
}

criterion::criterion_group!(cuda, cuda_benches);
