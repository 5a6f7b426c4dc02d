//! The facade's entry points for streamed problems: the same results as the array entry
//! points on the same values, and clear errors where a source cannot be taken.

use semicrf::ndarray::{Array2, Array3};
#[cfg(feature = "cpu")]
use semicrf::{Backend, Config, Device, GradientArrays};
use semicrf::{Error, Potentials, SemiCrf, StreamedPotentials};

/// A small problem's arrays, which its potentials borrow.
struct Arrays {
    scores: Array3<f64>,
    tr: Array2<f64>,
    lengths: Vec<usize>,
}

impl Arrays {
    fn new() -> Self {
        let scores = Array3::from_shape_fn((2, 30, 3), |(b, t, c)| {
            ((b + 3 * t + 7 * c) % 5) as f64 - 2.0
        });
        let tr = Array2::from_shape_fn((3, 3), |(i, j)| if i == j { -1.0 } else { 0.5 });
        Arrays {
            scores,
            tr,
            lengths: vec![30, 21],
        }
    }

    fn potentials(&self) -> Potentials<'_, f64> {
        Potentials::builder(self.scores.view(), &self.lengths, 4)
            .transition(self.tr.view())
            .build()
            .unwrap()
    }
}

#[cfg(feature = "cpu")]
#[test]
fn streamed_entry_points_give_the_results_of_the_array_entry_points() {
    let arrays = Arrays::new();
    let p = arrays.potentials();
    let s = StreamedPotentials::of(&p);
    let crf = SemiCrf::new();
    assert_eq!(
        crf.log_partition_streamed(&s).unwrap(),
        crf.log_partition(&p).unwrap()
    );
    assert_eq!(crf.entropy_streamed(&s).unwrap(), crf.entropy(&p).unwrap());
    assert_eq!(crf.viterbi_streamed(&s).unwrap(), crf.viterbi(&p).unwrap());
    let sink = GradientArrays::new(s.shape(), false, false);
    let bw = crf.backward_streamed(&s, &[1.0, 0.5], &sink).unwrap();
    let want = crf.backward(&p, Some(&[1.0, 0.5])).unwrap();
    let (scores_grad, _, _, bm) = sink.into_arrays();
    assert_eq!(bw.log_z, want.log_z);
    assert_eq!(Some(scores_grad), want.grad.scores);
    assert_eq!(bm, want.boundary_marginals);
    assert_eq!(bw.grad.transition, want.grad.transition);
}

#[cfg(feature = "cpu")]
#[test]
fn a_source_on_another_backend_or_beyond_the_budget_is_a_clear_error() {
    let arrays = Arrays::new();
    let p = arrays.potentials();
    let s = StreamedPotentials::of(&p);
    let exact = SemiCrf::with_config(Config::new().backend(Backend::Exact));
    assert!(matches!(
        exact.log_partition_streamed(&s),
        Err(Error::Unsupported { .. })
    ));
    let cuda_exact = Config::new()
        .device(Device::Cuda(0))
        .backend(Backend::Exact);
    assert!(matches!(
        SemiCrf::with_config(cuda_exact).viterbi_streamed(&s),
        Err(Error::Unsupported { .. })
    ));
    let tiny = SemiCrf::with_config(Config::new().memory_budget(64));
    assert!(matches!(
        tiny.viterbi_streamed(&s),
        Err(Error::MemoryBudget { .. })
    ));
}

/// Built without the CPU engines, a streamed problem is refused with the reason.
#[cfg(not(feature = "cpu"))]
#[test]
fn without_the_cpu_engines_a_source_is_a_clear_error() {
    let arrays = Arrays::new();
    let p = arrays.potentials();
    let s = StreamedPotentials::of(&p);
    match SemiCrf::new().log_partition_streamed(&s) {
        Err(Error::BackendUnavailable { reason, .. }) => assert!(reason.contains("`cpu`")),
        other => panic!("{other:?}"),
    }
}

/// With `Device::Cuda`, the streamed entry points run the CUDA engine on the source: the
/// results of the array entry points on the same device, bit for bit; without the `cuda`
/// feature or a usable GPU, a clear error.
#[test]
fn streamed_entry_points_on_cuda_give_the_results_of_the_array_entry_points() {
    let arrays = Arrays::new();
    let p = arrays.potentials();
    let s = StreamedPotentials::of(&p);
    let crf = SemiCrf::with_config(semicrf::Config::new().device(semicrf::Device::Cuda(0)));
    let log_z = match crf.log_partition_streamed(&s) {
        Ok(z) => z,
        Err(Error::BackendUnavailable { backend, reason }) => {
            if cfg!(feature = "cuda") && std::env::var("SEMICRF_REQUIRE_GPU").as_deref() == Ok("1")
            {
                panic!("SEMICRF_REQUIRE_GPU=1 but {backend} is unavailable: {reason}");
            }
            eprintln!("skipped ({backend} unavailable: {reason})");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(log_z, crf.log_partition(&p).unwrap());
    assert_eq!(crf.entropy_streamed(&s).unwrap(), crf.entropy(&p).unwrap());
    assert_eq!(crf.viterbi_streamed(&s).unwrap(), crf.viterbi(&p).unwrap());
    let sink = semicrf::GradientArrays::new(s.shape(), false, false);
    let bw = crf.backward_streamed(&s, &[1.0, 0.5], &sink).unwrap();
    let want = crf.backward(&p, Some(&[1.0, 0.5])).unwrap();
    let (scores_grad, _, _, bm) = sink.into_arrays();
    assert_eq!(bw.log_z, want.log_z);
    assert_eq!(Some(scores_grad), want.grad.scores);
    assert_eq!(bm, want.boundary_marginals);
    assert_eq!(bw.grad.transition, want.grad.transition);
}
