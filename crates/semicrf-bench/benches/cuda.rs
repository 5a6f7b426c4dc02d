//! `cuda/streaming/*`: the CUDA streaming engine on device 0 (`cuda-log/streaming/*`: the
//! same with the log semiring in the log-domain kernels only) (needs the `cuda` feature and a
//! GPU; otherwise the group says why and times nothing). Each iteration is one whole call:
//! inputs copied to the device, kernels, results copied back, timed by CUDA events recorded
//! on the engine's stream around it (`CudaEngine::time`).

use criterion::Criterion;

use crate::common::{Plan, bench};

/// Calls `each` with the plan of every CUDA engine (`cuda`, `cuda-log`) on device 0; with
/// none built or present, prints why and calls nothing.
#[cfg(feature = "cuda")]
pub fn each_plan(each: &mut dyn FnMut(&Plan<'_>)) {
    use semicrf::AnyEngine;
    use semicrf_cuda::CudaEngine;

    let Some(gpu) = CudaEngine::usable_or_skip(0) else {
        return;
    };
    let timed = |f: &mut dyn FnMut()| gpu.time(f).expect("CUDA events on the device").1;
    // `cuda-log`: the same engine with the log semiring in the log-domain kernels only.
    for (device, engine) in [
        ("cuda", AnyEngine::Cuda(gpu)),
        ("cuda-log", AnyEngine::Cuda(gpu.log_domain_only())),
    ] {
        each(&Plan {
            device,
            algo: "streaming",
            engine: &engine,
            materialises_edges: false,
            work: |s| semicrf_bench::lse_terms(s) as f64,
            timed: Some(&timed),
        });
    }
}

/// Calls `each` with the plan of every CUDA engine; with none built or present, prints why
/// and calls nothing.
#[cfg(not(feature = "cuda"))]
pub fn each_plan(_each: &mut dyn FnMut(&Plan<'_>)) {
    eprintln!("note: cuda/streaming skipped: built without the `cuda` feature");
}

fn cuda_benches(c: &mut Criterion) {
    each_plan(&mut |plan| bench(c, plan));
}

criterion::criterion_group!(cuda, cuda_benches);
