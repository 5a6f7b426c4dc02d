//! What a call needs of a problem besides its position tensors, and where those come from.

use semicrf_core::{Potentials, Scalar, Shape, SharedParams};

use crate::kernel::DevPtr;

/// What a call needs of a problem besides its position tensors (scores and boundaries):
/// the shape, the shared parameters in `f64` and the lengths.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    pub(crate) shape: Shape,
    /// Whether the transition is `(K, C, C)`.
    pub(crate) dd: bool,
    /// `(C, C)` or `(K, C, C)`, row-major.
    pub(crate) tr: Vec<f64>,
    /// `(K, C)`.
    pub(crate) dur: Vec<f64>,
    pub(crate) st: Vec<f64>,
    pub(crate) en: Vec<f64>,
    pub(crate) lengths: Vec<usize>,
    pub(crate) has_bb: bool,
    pub(crate) has_eb: bool,
}

impl Model {
    /// The model of a problem held on the host.
    pub(crate) fn of<F: Scalar>(p: &Potentials<'_, F>) -> Model {
        Model::with(
            p,
            p.shape(),
            p.lengths().to_vec(),
            p.begin_boundary().is_some(),
            p.end_boundary().is_some(),
        )
    }

    /// The shared parameters of `p` with another problem's shape, lengths and boundaries
    /// (`p`'s own scores are not used).
    pub(crate) fn with<F: Scalar>(
        p: &Potentials<'_, F>,
        shape: Shape,
        lengths: Vec<usize>,
        has_bb: bool,
        has_eb: bool,
    ) -> Model {
        Model::of_shared(&p.shared(), shape, lengths, has_bb, has_eb)
    }

    /// The model of shared parameters with a problem's shape, lengths and boundaries.
    pub(crate) fn of_shared<F: Scalar>(
        p: &SharedParams<'_, F>,
        shape: Shape,
        lengths: Vec<usize>,
        has_bb: bool,
        has_eb: bool,
    ) -> Model {
        let (k, c) = (shape.max_duration, shape.labels);
        let dd = p.has_duration_dependent_transition();
        let tr: Vec<f64> = if dd {
            let mut v = Vec::with_capacity(k * c * c);
            for d in 0..k {
                for i in 0..c {
                    for j in 0..c {
                        v.push(p.transition_at(d + 1, i, j));
                    }
                }
            }
            v
        } else {
            (0..c * c)
                .map(|x| p.transition_at(1, x / c, x % c))
                .collect()
        };
        Model {
            shape,
            dd,
            tr,
            dur: (0..k * c)
                .map(|x| p.duration_at(x / c + 1, x % c))
                .collect(),
            st: (0..c).map(|j| p.start_at(j)).collect(),
            en: (0..c).map(|j| p.end_at(j)).collect(),
            lengths,
            has_bb,
            has_eb,
        }
    }
}

/// Where a call's scores and boundaries come from.
pub(crate) enum Source<'x, 'a, F> {
    /// Host arrays, copied to the device.
    Host(&'x Potentials<'a, F>),
    /// Device addresses of `(B, T, C)` arrays, `f32` or `f64`, used where they are.
    Device {
        sc: DevPtr,
        bb: Option<DevPtr>,
        eb: Option<DevPtr>,
        f32: bool,
    },
}
