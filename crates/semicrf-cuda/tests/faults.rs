//! Faults on the GPU: device memory running out midway is a typed error that leaks nothing,
//! after which the next call answers as before; potentials beyond the numeric range are
//! refused as on every engine. Without a usable GPU each test prints why and passes, unless
//! `SEMICRF_REQUIRE_GPU=1`, which makes that a failure.

use cudarc::driver::CudaContext;
use semicrf_core::testing::{GenSpec, random_problem};
use semicrf_core::{Engine, Error, LogSemiring, Problem};
use semicrf_cuda::CudaEngine;

fn gpu() -> Option<CudaEngine> {
    CudaEngine::usable_or_skip(0)
}

#[test]
fn running_out_of_device_memory_is_a_typed_error_that_leaks_nothing() {
    let Some(e) = gpu() else { return };
    let owned = random_problem(21, &GenSpec::new(8, 20_000, 64, 16).everything());
    let p = owned.view().unwrap();
    let problem = Problem::Structured(p);
    let ones = vec![1.0; 8];
    let first = e.backward(&problem, &ones).unwrap();

    let ctx = CudaContext::new(0).unwrap();
    let (free_before, total) = ctx.mem_get_info().unwrap();
    // Take all but 8 MiB of what is free: the backward pass needs far more.
    let stream = ctx.default_stream();
    let hog = stream
        .alloc_zeros::<u8>(free_before - (8 << 20))
        .unwrap_or_else(|err| panic!("could not take {free_before} of {total} bytes: {err:?}"));
    stream.synchronize().unwrap();
    let err = e.backward(&problem, &ones).unwrap_err();
    let Error::Device { ref message, .. } = err else {
        panic!("{err}")
    };
    assert!(message.contains("OUT_OF_MEMORY"), "{err}");
    eprintln!("with the device full: {err}");
    // The forward pass fails the same way, or fits; either way it does not crash.
    let _ = e.forward::<LogSemiring>(&problem);
    drop(hog);
    stream.synchronize().unwrap();

    let (free_after, _) = ctx.mem_get_info().unwrap();
    assert_eq!(
        free_after, free_before,
        "device memory leaked by the failed calls"
    );
    let again = e.backward(&problem, &ones).unwrap();
    assert_eq!(again, first, "the next call answers as before, bitwise");
    eprintln!("after the fault: {free_after} bytes free as before, same answer");
}

#[test]
fn potentials_beyond_the_numeric_range_are_refused_on_the_gpu() {
    let Some(e) = gpu() else { return };
    let mut owned = random_problem(22, &GenSpec::new(2, 50, 8, 4));
    owned.scores.mapv_inplace(|x| x * 1e13);
    let p = owned.view().unwrap();
    let problem = Problem::Structured(p);
    assert!(e.forward::<LogSemiring>(&problem).unwrap()[0].is_finite());
    assert!(matches!(
        e.backward(&problem, &[1.0, 1.0]),
        Err(Error::Magnitude { sequence: 0, .. })
    ));
    assert!(matches!(
        e.forward::<semicrf_core::EntropySemiring>(&problem),
        Err(Error::Magnitude { .. })
    ));
}
