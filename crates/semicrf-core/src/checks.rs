//! The checks every way of building a problem shares: ranks and shapes of the shared
//! parameters and of any tensor, the lengths, and the values (NaN and `+inf` rejected).

use ndarray::{
    ArrayView, ArrayView1, ArrayView2, ArrayView3, ArrayViewD, Dimension, IntoDimension, Ix1, Ix2,
};

use crate::potentials::Transition;
use crate::{Error, Result, Scalar};

/// The shared parameters of a problem (model §2) as a builder holds them, each checked for
/// rank and shape against `K` and `C`: transition `(C, C)` or `(K, C, C)`, duration `(K, C)`,
/// start and end `(C)`. Their values are checked by [`check_shared_values`].
#[allow(clippy::type_complexity)]
pub(crate) fn shared_views<'a, F: Scalar>(
    transition: Option<ArrayViewD<'a, F>>,
    duration: Option<ArrayViewD<'a, F>>,
    start: Option<ArrayViewD<'a, F>>,
    end: Option<ArrayViewD<'a, F>>,
    k: usize,
    c: usize,
) -> Result<(
    Option<Transition<'a, F>>,
    Option<ArrayView2<'a, F>>,
    Option<ArrayView1<'a, F>>,
    Option<ArrayView1<'a, F>>,
)> {
    let transition = match transition {
        None => None,
        Some(v) => Some(match v.ndim() {
            2 => {
                let v: ArrayView2<F> = fixed_rank(v, "transition", "2 or 3")?;
                expect_shape("transition", v.shape(), &[c, c], "(C, C)")?;
                Transition::Static(v)
            }
            3 => {
                let v: ArrayView3<F> = fixed_rank(v, "transition", "2 or 3")?;
                expect_shape("transition", v.shape(), &[k, c, c], "(K, C, C)")?;
                Transition::DurationDependent(v)
            }
            got => {
                return Err(Error::Rank {
                    tensor: "transition",
                    expected: "2 or 3".into(),
                    got,
                });
            }
        }),
    };
    let duration = opt_view::<Ix2, F>(duration, "duration", "2", &[k, c], "(K, C)")?;
    let start = opt_view::<Ix1, F>(start, "start", "1", &[c], "(C)")?;
    let end = opt_view::<Ix1, F>(end, "end", "1", &[c], "(C)")?;
    Ok((transition, duration, start, end))
}

/// Rejects NaN and `+inf` in the shared parameters, in the order transition, duration,
/// start, end.
pub(crate) fn check_shared_values<F: Scalar>(
    transition: &Option<Transition<'_, F>>,
    duration: &Option<ArrayView2<'_, F>>,
    start: &Option<ArrayView1<'_, F>>,
    end: &Option<ArrayView1<'_, F>>,
) -> Result<()> {
    match transition {
        Some(Transition::Static(v)) => check_values("transition", v)?,
        Some(Transition::DurationDependent(v)) => check_values("transition", v)?,
        None => {}
    }
    if let Some(v) = duration {
        check_values("duration", v)?;
    }
    for (name, v) in [("start", start), ("end", end)] {
        if let Some(v) = v {
            check_values(name, v)?;
        }
    }
    Ok(())
}

pub(crate) fn fixed_rank<'a, F, D: Dimension>(
    v: ArrayViewD<'a, F>,
    tensor: &'static str,
    expected: &str,
) -> Result<ArrayView<'a, F, D>> {
    let got = v.ndim();
    v.into_dimensionality::<D>().map_err(|_| Error::Rank {
        tensor,
        expected: expected.into(),
        got,
    })
}

pub(crate) fn opt_view<'a, D: Dimension, F: Scalar>(
    v: Option<ArrayViewD<'a, F>>,
    tensor: &'static str,
    rank: &str,
    want: &[usize],
    symbols: &str,
) -> Result<Option<ArrayView<'a, F, D>>> {
    let Some(v) = v else { return Ok(None) };
    let v: ArrayView<'a, F, D> = fixed_rank(v, tensor, rank)?;
    expect_shape(tensor, v.shape(), want, symbols)?;
    Ok(Some(v))
}

pub(crate) fn expect_shape(
    tensor: &'static str,
    got: &[usize],
    want: &[usize],
    symbols: &str,
) -> Result<()> {
    if got == want {
        return Ok(());
    }
    let dims: Vec<String> = want.iter().map(|x| x.to_string()).collect();
    Err(Error::Shape {
        tensor,
        expected: format!("{symbols} = ({})", dims.join(", ")),
        got: got.to_vec(),
    })
}

pub(crate) fn check_lengths(lengths: &[usize], b: usize, t: usize) -> Result<()> {
    if lengths.len() != b {
        return Err(Error::LengthsCount {
            expected: b,
            got: lengths.len(),
        });
    }
    for (i, &l) in lengths.iter().enumerate() {
        if l == 0 || l > t {
            return Err(Error::Length {
                sequence: i,
                length: l,
                max: t,
            });
        }
    }
    Ok(())
}

/// Rejects NaN and `+inf`, naming the first bad element in row-major order.
pub(crate) fn check_values<F: Scalar, D: Dimension>(
    tensor: &'static str,
    v: &ArrayView<'_, F, D>,
) -> Result<()> {
    let bad = |x: F| x.is_nan() || x == F::infinity();
    // Fast path over contiguous memory; the slow path finds the index.
    let any_bad = match v.as_slice_memory_order() {
        Some(s) => s.iter().any(|&x| bad(x)),
        None => v.iter().any(|&x| bad(x)),
    };
    if !any_bad {
        return Ok(());
    }
    for (idx, &x) in v.indexed_iter() {
        if bad(x) {
            return Err(Error::NonFinite {
                tensor,
                index: idx.into_dimension().as_array_view().to_vec(),
                value: x.as_f64(),
            });
        }
    }
    unreachable!("a bad value was seen in memory order")
}
