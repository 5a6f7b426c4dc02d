//! Partially labelled sequences on the CUDA engines: `log Z_partial` against brute-force
//! enumeration and the partial NLL's gradients against the CPU exact engine (itself checked
//! against finite differences in `tests/partial.rs`). The restricted problem is the same
//! problem with `-inf` scores, so this checks that the CUDA engines handle those exactly.
//! Without a usable GPU every test prints why and passes, unless `SEMICRF_REQUIRE_GPU=1`.

#![cfg(all(feature = "cpu", feature = "cuda"))]

use semicrf::ndarray::Array2;
use semicrf::reference::for_each_segmentation;
use semicrf::{Backend, Config, Device, Segment, SemiCrf, gold_score};
use semicrf_core::testing::{GenSpec, TransitionKind, random_problem};
use semicrf_cuda::CudaEngine;

fn agrees(y: &[Segment], labels: &Array2<i64>, b: usize) -> bool {
    y.iter().all(|s| {
        (s.start..s.end()).all(|t| labels[[b, t]] < 0 || labels[[b, t]] as usize == s.label)
    })
}

#[test]
fn partial_labels_on_every_cuda_engine_match_brute_force_and_the_cpu() {
    if CudaEngine::usable_or_skip(0).is_none() {
        return;
    }
    let cpu = SemiCrf::with_config(Config::new().backend(Backend::Exact));
    for tk in [TransitionKind::Static, TransitionKind::DurationDependent] {
        let mut spec = GenSpec::new(3, 7, 3, 3).everything();
        spec.transition = tk;
        spec.forbid_scores = 0.1;
        let owned = random_problem(31, &spec);
        let p = owned.view().unwrap();
        let labels = Array2::from_shape_fn((3, 7), |(b, t)| {
            if (b + t) % 3 == 0 {
                ((b * 7 + t) % 3) as i64
            } else {
                -1
            }
        });
        let want: Vec<f64> = (0..3)
            .map(|b| {
                let mut xs = Vec::new();
                for_each_segmentation(owned.lengths[b], 3, 3, |y| {
                    if agrees(y, &labels, b) {
                        xs.push(gold_score(&p, b, y).unwrap());
                    }
                });
                let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    m
                } else {
                    m + xs.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
                }
            })
            .collect();
        for backend in [Backend::Streaming, Backend::Exact, Backend::Scan] {
            let gpu = SemiCrf::with_config(Config::new().device(Device::Cuda(0)).backend(backend));
            let got = gpu.log_partition_partial(&p, labels.view()).unwrap();
            for b in 0..3 {
                let (g, w) = (got[b], want[b]);
                assert!(
                    g == w || (g - w).abs() <= 1e-9 * (1.0 + w.abs()),
                    "{tk:?}, cuda/{backend}, sequence {b}: {g} vs brute force {w}"
                );
            }
            if want.iter().all(|w| w.is_finite()) {
                let g = gpu.partial_nll_backward(&p, labels.view(), None).unwrap();
                let c = cpu.partial_nll_backward(&p, labels.view(), None).unwrap();
                for ((name, a), (_, b)) in g.grad.fields().into_iter().zip(c.grad.fields()) {
                    let (Some(a), Some(b)) = (a, b) else { continue };
                    for (x, y) in a.iter().zip(b.iter()) {
                        assert!(
                            (x - y).abs() <= 1e-8,
                            "{tk:?}, cuda/{backend}: d NLL / d {name}: {x} vs cpu {y}"
                        );
                    }
                }
            }
        }
    }
}
