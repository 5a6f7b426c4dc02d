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
    let cuda = SemiCrf::with_config(Config::new().device(Device::Cuda(0)));
    assert!(matches!(
        cuda.viterbi_streamed(&s),
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
