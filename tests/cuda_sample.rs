//! `SemiCrf::sample` on a CUDA device: the facade runs the CUDA streaming engine's sampler,
//! whose samples are the CPU streaming engine's for the same seed (the CUDA crate's
//! `tests/sample.rs` checks them against the enumerated posterior). Without a usable GPU the
//! test prints why and passes, unless `SEMICRF_REQUIRE_GPU=1`.

#![cfg(all(feature = "cpu", feature = "cuda"))]

use semicrf::{Config, Device, Potentials, Problem, Sampler, SemiCrf};
use semicrf_core::testing::{GenSpec, random_problem};
use semicrf_cpu::StreamingEngine;
use semicrf_cuda::CudaEngine;

#[test]
fn sampling_on_a_cuda_device_runs_the_cuda_engine() {
    let Some(cuda) = CudaEngine::usable_or_skip(0) else {
        return;
    };
    let mut spec = GenSpec::new(3, 50, 6, 40).everything();
    spec.forbid_scores = 0.02;
    let owned = random_problem(21, &spec);
    let p: Potentials<'_, f64> = owned.view().unwrap();
    let crf = SemiCrf::with_config(Config::new().device(Device::Cuda(0)));
    let got = crf.sample(&p, 40, 3).unwrap();
    let problem = Problem::Structured(p.clone());
    assert_eq!(got, cuda.sample(&problem, 40, 3).unwrap());
    assert_eq!(got, StreamingEngine::new().sample(&problem, 40, 3).unwrap());
}
