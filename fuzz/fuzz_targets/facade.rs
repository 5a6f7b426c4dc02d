//! Arbitrary small problems, shapes and values (NaN, ±inf, subnormals, magnitudes up to
//! `f64::MAX`, wrong extents and ranks included) through validation and every backend of the
//! facade, checked against the f64 reference by `semicrf_fuzz::check`.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use semicrf::OwnedPotentials;
use semicrf::ndarray::{ArrayD, IxDyn};

fn value(u: &mut Unstructured<'_>) -> Result<f64> {
    Ok(match u.int_in_range(0..=15u8)? {
        0 => f64::NEG_INFINITY,
        1 => f64::from_bits(u.arbitrary()?),
        2 => {
            let e: i32 = u.int_in_range(-320..=308)?;
            let sign = if u.arbitrary()? { -1.0 } else { 1.0 };
            sign * 10f64.powi(e)
        }
        3 => [f64::NAN, f64::INFINITY, f64::MAX, f64::MIN_POSITIVE, -0.0][u.choose_index(5)?],
        _ => f64::from(u.int_in_range(-50..=50i8)?) / 10.0,
    })
}

fn tensor(u: &mut Unstructured<'_>, shape: &[usize]) -> Result<ArrayD<f64>> {
    // Now and then a wrong extent or rank, which validation must name.
    let mut shape = shape.to_vec();
    match u.int_in_range(0..=30u8)? {
        0 if !shape.is_empty() => shape[0] += 1,
        1 => shape.push(1),
        2 => {
            shape.pop();
        }
        _ => {}
    }
    let n: usize = shape.iter().product();
    if n > 4096 {
        return Ok(ArrayD::zeros(IxDyn(&[0])));
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(value(u)?);
    }
    Ok(ArrayD::from_shape_vec(IxDyn(&shape), v).expect("the shape holds n values"))
}

fn optional(u: &mut Unstructured<'_>, shape: &[usize]) -> Result<Option<ArrayD<f64>>> {
    Ok(if u.arbitrary()? {
        Some(tensor(u, shape)?)
    } else {
        None
    })
}

fn problem(u: &mut Unstructured<'_>) -> Result<OwnedPotentials<f64>> {
    let b = u.int_in_range(1..=3usize)?;
    let t = u.int_in_range(1..=10usize)?;
    let k = u.int_in_range(0..=12usize)?;
    let c = u.int_in_range(1..=4usize)?;
    let mut lengths = Vec::new();
    for _ in 0..b {
        lengths.push(u.int_in_range(0..=t + 1)?);
    }
    if u.int_in_range(0..=30u8)? == 0 {
        lengths.pop();
    }
    let transition = if u.arbitrary()? {
        optional(u, &[c, c])?
    } else {
        optional(u, &[k, c, c])?
    };
    Ok(OwnedPotentials {
        scores: tensor(u, &[b, t, c])?,
        transition,
        duration: optional(u, &[k, c])?,
        start: optional(u, &[c])?,
        end: optional(u, &[c])?,
        begin_boundary: optional(u, &[b, t, c])?,
        end_boundary: optional(u, &[b, t, c])?,
        lengths,
        max_duration: k,
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    if let Ok(p) = problem(&mut u) {
        semicrf_fuzz::check(&p);
    }
});
