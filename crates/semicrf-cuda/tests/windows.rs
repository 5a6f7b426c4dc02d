//! The log-domain kernels' windows on the GPU: problems whose scores are cut by `-inf` in
//! most labels (as stop codons cut exons) while others stay open over the whole `K`, with
//! `-inf` transitions, 33 to 70 labels and rings too large for shared memory, against the CPU
//! streaming engine (itself checked against the oracle by the conformance suite); and
//! bitwise reproducibility. Without a usable GPU every test prints why and passes, unless
//! `SEMICRF_REQUIRE_GPU=1`.

use ndarray::Ix3;
use semicrf_core::testing::{GenSpec, Tolerance, assert_gradients_close, random_problem, upstream};
use semicrf_core::{Engine, EntropySemiring, LogSemiring, MaxSemiring, OwnedPotentials, Problem};
use semicrf_cpu::StreamingEngine;
use semicrf_cuda::CudaEngine;

/// `(B, T, K, C)` with `-inf` scores in three labels of four and durations capped per label
/// where `capped`.
fn cut_problem(
    seed: u64,
    (b, t, k, c): (usize, usize, usize, usize),
    capped: bool,
) -> OwnedPotentials<f64> {
    let mut spec = GenSpec::new(b, t, k, c).everything();
    spec.forbid_scores = 0.03;
    spec.forbid_transitions = 0.3;
    spec.capped_durations = capped;
    let mut p = random_problem(seed, &spec);
    let mut sc = p.scores.view_mut().into_dimensionality::<Ix3>().unwrap();
    for ((_, _, j), x) in sc.indexed_iter_mut() {
        if j % 4 == 0 && *x == f64::NEG_INFINITY {
            *x = 0.5;
        }
    }
    p
}

#[test]
fn cut_windows_match_the_cpu_engine_with_rings_in_global_memory() {
    let Some(gpu) = CudaEngine::usable_or_skip(0) else {
        return;
    };
    let cpu = StreamingEngine::new();
    // K·C words of ring: 33 000 to 70 000, beyond shared memory; and one that fits.
    let shapes = [
        (2, 1500, 1000, 33),
        (1, 1200, 1000, 50),
        (2, 900, 700, 64),
        (1, 800, 1000, 70),
        (3, 300, 40, 50),
    ];
    for (n, &shape) in shapes.iter().enumerate() {
        let owned = cut_problem(4000 + n as u64, shape, n % 2 == 1);
        let p = Problem::Structured(owned.view().unwrap());
        let tag = format!("{shape:?}");
        for cuda in [gpu, gpu.log_domain_only()] {
            let ok = Tolerance::F64_VALUES;
            let z = Engine::<f64>::forward::<LogSemiring>(&cuda, &p).unwrap();
            let zc = cpu.forward::<LogSemiring>(&p).unwrap();
            let h = Engine::<f64>::forward::<EntropySemiring>(&cuda, &p).unwrap();
            let hc = cpu.forward::<EntropySemiring>(&p).unwrap();
            let m = Engine::<f64>::forward::<MaxSemiring>(&cuda, &p).unwrap();
            let mc = cpu.forward::<MaxSemiring>(&p).unwrap();
            let v = Engine::<f64>::viterbi(&cuda, &p).unwrap();
            let vc = cpu.viterbi(&p).unwrap();
            for b in 0..shape.0 {
                assert!(ok.ok(z[b], zc[b]), "{tag} {b}: log Z {} vs {}", z[b], zc[b]);
                let dh = (h[b].entropy - hc[b].entropy).abs();
                assert!(
                    ok.ok(h[b].entropy, hc[b].entropy) || dh <= 1e-10,
                    "{tag} {b}: entropy"
                );
                assert!(ok.ok(m[b], mc[b]), "{tag} {b}: max {} vs {}", m[b], mc[b]);
                assert_eq!(v[b].segments, vc[b].segments, "{tag} {b}: Viterbi");
            }
            if zc.iter().all(|z| z.is_finite()) {
                let g = upstream(n as u64, shape.0);
                let got = Engine::<f64>::backward(&cuda, &p, &g).unwrap();
                let want = cpu.backward(&p, &g).unwrap();
                assert_gradients_close(&tag, &got.grad, &want.grad, Tolerance::F64_GRADS);
                let again = Engine::<f64>::backward(&cuda, &p, &g).unwrap();
                let bits =
                    |a: &ndarray::Array3<f64>| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let (a, b) = (got.grad.scores.unwrap(), again.grad.scores.unwrap());
                assert_eq!(bits(&a), bits(&b), "{tag}: a rerun differs");
            }
        }
    }
}

/// One long sequence spread over many thread blocks (`kernels/spread.cu`: `K` at least twice
/// the slots a block holds; the forward pipelined, `kernels/pipe.cu`, where `K` exceeds that
/// by the near depth), with windows that wrap around the ring, against the CPU engine; and
/// log Z again bit for bit. The last shape's log semiring runs there too (`K·C` of at least
/// `SPREAD_OVER_MEET`), the others' in the meet kernels.
#[test]
fn long_sequences_spread_over_many_blocks_match_the_cpu_engine() {
    let Some(gpu) = CudaEngine::usable_or_skip(0) else {
        return;
    };
    let cpu = StreamingEngine::new();
    let shapes = [
        (1, 9000, 4096, 12),
        (2, 2500, 1024, 50),
        (3, 700, 300, 9),
        (1, 3000, 2048, 40),
    ];
    for (n, shape) in shapes.into_iter().enumerate() {
        let owned = cut_problem(4100 + n as u64, shape, n == 1);
        let p = Problem::Structured(owned.view().unwrap());
        let tag = format!("{shape:?}");
        let ok = Tolerance::F64_VALUES;
        let z = Engine::<f64>::forward::<LogSemiring>(&gpu, &p).unwrap();
        let again = Engine::<f64>::forward::<LogSemiring>(&gpu, &p).unwrap();
        let zc = cpu.forward::<LogSemiring>(&p).unwrap();
        let m = Engine::<f64>::forward::<MaxSemiring>(&gpu, &p).unwrap();
        let mc = cpu.forward::<MaxSemiring>(&p).unwrap();
        let v = Engine::<f64>::viterbi(&gpu, &p).unwrap();
        let vc = cpu.viterbi(&p).unwrap();
        for b in 0..shape.0 {
            assert!(ok.ok(z[b], zc[b]), "{tag} {b}: log Z {} vs {}", z[b], zc[b]);
            assert_eq!(
                z[b].to_bits(),
                again[b].to_bits(),
                "{tag} {b}: a rerun differs"
            );
            assert!(ok.ok(m[b], mc[b]), "{tag} {b}: max {} vs {}", m[b], mc[b]);
            assert_eq!(v[b].segments, vc[b].segments, "{tag} {b}: Viterbi");
        }
    }
}
