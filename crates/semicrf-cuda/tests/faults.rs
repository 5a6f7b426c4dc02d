//! Faults on the GPU: device memory running out midway is a typed error that leaks nothing,
//! after which the next call answers as before; potentials beyond the numeric range are
//! refused as on every engine. Without a usable GPU each test prints why and passes, unless
//! `SEMICRF_REQUIRE_GPU=1`, which makes that a failure.

use cudarc::driver::CudaContext;
use semicrf_core::testing::{GenSpec, random_problem};
use semicrf_core::{Engine, EngineInfo, Error, LogSemiring, Op, Problem, Query};
use semicrf_cuda::CudaEngine;

fn gpu() -> Option<CudaEngine> {
    CudaEngine::usable_or_skip(0)
}

/// Asserts bitwise equality, saying first where two results differ and by how much.
fn same(what: &str, got: &semicrf_core::Backward, want: &semicrf_core::Backward) {
    for (b, (x, y)) in got.log_z.iter().zip(&want.log_z).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "{what}: log Z[{b}] {x} vs {y}");
    }
    let fields = got.grad.fields().into_iter().zip(want.grad.fields());
    let bm = (
        "boundary_marginals",
        Some(got.boundary_marginals.view().into_dyn()),
    );
    let bm_want = ("", Some(want.boundary_marginals.view().into_dyn()));
    for ((name, x), (_, y)) in fields.chain([(bm, bm_want)]) {
        let (x, y) = match (x, y) {
            (Some(x), Some(y)) => (x, y),
            (None, None) => continue,
            _ => panic!("{what}: {name} present in one only"),
        };
        let diff = x
            .indexed_iter()
            .zip(y.iter())
            .find(|((_, a), b)| a.to_bits() != b.to_bits());
        if let Some(((i, a), b)) = diff {
            let worst = x
                .iter()
                .zip(y.iter())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            panic!("{what}: {name}{i:?} = {a} vs {b}; largest difference {worst:e}");
        }
    }
}

#[test]
fn running_out_of_device_memory_is_a_typed_error_that_leaks_nothing() {
    let Some(e) = gpu() else { return };
    let small_owned = random_problem(20, &GenSpec::new(2, 1000, 16, 4).everything());
    let small = Problem::Structured(small_owned.view().unwrap());
    let big_owned = random_problem(21, &GenSpec::new(8, 20_000, 64, 16).everything());
    let big = Problem::Structured(big_owned.view().unwrap());
    let need = e.memory_required(&Query::of(&big, Op::Backward)).unwrap();
    let ones = vec![1.0; 8];
    // Kernels compiled and the small problem's answer known before the fault.
    let first = e.backward(&small, &ones[..2]).unwrap();
    same(
        "a second call",
        &e.backward(&small, &ones[..2]).unwrap(),
        &first,
    );

    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    stream.synchronize().unwrap();
    // What earlier calls freed, kept by the memory pool, back to the driver: only memory still
    // held after the failed call counts below.
    e.release_memory().unwrap();
    let (free_before, total) = ctx.mem_get_info().unwrap();
    // Leave 16 MiB free: the big backward pass needs far more.
    let left = 16 << 20;
    assert!(
        need > 4 * left as u64,
        "the big problem needs only {need} bytes"
    );
    let hog = stream
        .alloc_zeros::<u8>(free_before - left)
        .unwrap_or_else(|err| panic!("could not take {free_before} of {total} bytes: {err:?}"));
    stream.synchronize().unwrap();
    let err = e.backward(&big, &ones).unwrap_err();
    let Error::Device { ref message, .. } = err else {
        panic!("{err}")
    };
    assert!(message.contains("OUT_OF_MEMORY"), "{err}");
    eprintln!("with {left} bytes free for a call that needs {need}: {err}");
    // The small problem still fits, and answers as before.
    same(
        "the small problem beside the fault",
        &e.backward(&small, &ones[..2]).unwrap(),
        &first,
    );
    drop(hog);
    stream.synchronize().unwrap();
    e.release_memory().unwrap();

    let (free_after, _) = ctx.mem_get_info().unwrap();
    assert_eq!(
        free_after, free_before,
        "device memory leaked by the failed call"
    );
    let big_once = e.backward(&big, &ones).unwrap();
    assert!(big_once.log_z.iter().all(|z| z.is_finite()));
    same(
        "the big problem after the fault",
        &e.backward(&big, &ones).unwrap(),
        &big_once,
    );
    same(
        "the small problem after the fault",
        &e.backward(&small, &ones[..2]).unwrap(),
        &first,
    );
    eprintln!("after the fault: {free_after} bytes free as before; the next calls answer");
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
