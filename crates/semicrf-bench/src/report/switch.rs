//! Where scan's and exact's materialised edges stop fitting the default memory budget, and
//! what auto-selection picks, asked of the facade itself (`semicrf::SemiCrf::select` with the
//! default configuration) on problems of the sweep's shapes.

use ndarray::{Array1, Array2, Array3};
use semicrf::{Backend, Config, Error as CrfError, Op, Potentials, Problem, SemiCrf};
use semicrf_core::Shape;

use super::Error;

/// The largest problem (`B·T·C` scores) built to find a switch point: 2²⁵ f32 values.
pub const MAX_SCORES: usize = 1 << 25;

/// What `SemiCrf::select` says for `backend` and `op` at `shape` with the default budget:
/// `Ok(algorithm)`, `Err(None)` when no candidate fits the budget, `Err(Some(reason))` for
/// any other refusal.
pub fn select(shape: Shape, op: Op, backend: Backend) -> Result<String, Option<String>> {
    let Shape {
        batch: b,
        len: t,
        max_duration: k,
        labels: c,
    } = shape;
    // Zeros: only the shapes matter to selection. The form is the benches' (static `(C, C)`
    // transition, `(K, C)` durations, a start vector).
    let scores = Array3::<f32>::zeros((b, t, c));
    let transition = Array2::<f32>::zeros((c, c));
    let duration = Array2::<f32>::zeros((k, c));
    let start = Array1::<f32>::zeros(c);
    let lengths = vec![t; b];
    let potentials = Potentials::builder(scores.view(), &lengths, k)
        .transition(transition.view())
        .duration(duration.view())
        .start(start.view())
        .build()
        .map_err(|e| Some(e.to_string()))?;
    let problem: Problem<f32> = potentials.into();
    let crf = SemiCrf::with_config(Config::new().backend(backend));
    match crf.select(&problem, op) {
        Ok(s) => Ok(s.algorithm.to_string()),
        Err(CrfError::MemoryBudget { .. }) => Err(None),
        Err(e) => Err(Some(e.to_string())),
    }
}

/// The smallest `T ≥ from` at which `backend` no longer fits the default budget for `op` at
/// `(B, K, C)` of `base` (`T = from` must fit), found by doubling then bisection; `Ok(None)`
/// when it still fits at the largest problem this builds ([`MAX_SCORES`]).
pub fn first_over(
    base: Shape,
    from: usize,
    op: Op,
    backend: Backend,
) -> Result<Option<usize>, Error> {
    let at = |t: usize| Shape { len: t, ..base };
    let fits = |t: usize| -> Result<bool, Error> {
        match select(at(t), op, backend) {
            Ok(_) => Ok(true),
            Err(None) => Ok(false),
            Err(Some(e)) => Err(Error::new(format!("selecting {backend} at {}: {e}", at(t)))),
        }
    };
    let limit = MAX_SCORES / (base.batch * base.labels).max(1);
    let mut lo = from.max(base.max_duration).max(1);
    if !fits(lo)? {
        return Ok(Some(lo));
    }
    let mut hi = lo;
    loop {
        if hi >= limit {
            return Ok(None);
        }
        hi = (hi * 2).min(limit);
        if !fits(hi)? {
            break;
        }
        lo = hi;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use semicrf::{DEFAULT_MEMORY_BUDGET, LogSemiring};

    #[test]
    fn auto_picks_streaming_and_scan_stops_fitting_where_its_estimate_passes_the_budget() {
        let base = Shape::new(1, 100, 100, 24);
        let op = Op::forward::<LogSemiring>();
        assert_eq!(select(base, op, Backend::Auto), Ok("streaming".into()));
        let t = first_over(base, 100, op, Backend::Scan).unwrap().unwrap();
        // Just below fits, at it does not.
        assert!(select(Shape { len: t - 1, ..base }, op, Backend::Scan).is_ok());
        assert_eq!(
            select(Shape { len: t, ..base }, op, Backend::Scan),
            Err(None)
        );
        // The materialised f64 edges alone, B·T·K·C²·8 bytes, bound it from above.
        let edges_fill_budget = DEFAULT_MEMORY_BUDGET / (100 * 24 * 24 * 8);
        assert!(
            t as u64 <= edges_fill_budget + 1,
            "{t} > {edges_fill_budget}"
        );
    }
}
