//! The problem as keyword arguments: parsing, dtype checks, and the library's `Problem`.

use numpy::{Element, PyReadonlyArray1, PyReadonlyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use semicrf::ndarray::ArrayViewD;
use semicrf::{Config, EdgePotentials, Potentials, Problem, Scalar};

use crate::config;
use crate::errors::{Failure, Outcome};

/// The floating inputs, in the order of the interchange format.
pub const FLOATS: [&str; 8] = [
    "scores",
    "edges",
    "transition",
    "duration",
    "start",
    "end",
    "begin_boundary",
    "end_boundary",
];

/// The structured inputs besides the scores.
const STRUCTURED_ONLY: [&str; 6] = [
    "transition",
    "duration",
    "start",
    "end",
    "begin_boundary",
    "end_boundary",
];

/// The floating inputs that were given, borrowed from numpy, all of one dtype.
pub enum Floats<'py> {
    /// `float32`.
    F32(Vec<(&'static str, PyReadonlyArrayDyn<'py, f32>)>),
    /// `float64`.
    F64(Vec<(&'static str, PyReadonlyArrayDyn<'py, f64>)>),
}

/// Everything a host function was called with.
pub struct Args<'py> {
    /// The floating inputs.
    pub floats: Floats<'py>,
    /// `lengths`.
    pub lengths: Vec<usize>,
    /// `max_duration`, where given.
    pub max_duration: Option<usize>,
    /// `backend`, `device`, `memory_budget`.
    pub config: Config,
    /// The function's own keywords that were given (not None), by name.
    pub extra: Vec<(&'static str, Bound<'py, PyAny>)>,
}

impl<'py> Args<'py> {
    /// Parses `kwargs`: the problem, the configuration, and the keywords of `extras`.
    pub fn parse(kwargs: Option<&Bound<'py, PyDict>>, extras: &[&'static str]) -> Outcome<Self> {
        let mut given: Vec<(&'static str, Bound<'py, PyAny>)> = Vec::new();
        let mut backend = String::from("auto");
        let mut device = String::from("cpu");
        let mut budget = None;
        let mut lengths = None;
        let mut max_duration = None;
        let mut extra = Vec::new();
        if let Some(kw) = kwargs {
            for (k, v) in kw.iter() {
                let key: String = k
                    .extract()
                    .map_err(|_| Failure::Type("keyword names must be str".into()))?;
                if v.is_none() {
                    continue;
                }
                match key.as_str() {
                    "backend" => backend = text(&v, "backend")?,
                    "device" => device = text(&v, "device")?,
                    "memory_budget" => budget = Some(v),
                    "lengths" => lengths = Some(lengths_of(&v)?),
                    "max_duration" => max_duration = Some(count(&v, "max_duration")?),
                    _ => {
                        if let Some(name) = FLOATS.iter().find(|n| **n == key) {
                            given.push((name, v));
                        } else if let Some(name) = extras.iter().find(|n| **n == key) {
                            extra.push((*name, v));
                        } else {
                            return Err(Failure::Type(format!(
                                "unexpected keyword argument `{key}`"
                            )));
                        }
                    }
                }
            }
        }
        let lengths =
            lengths.ok_or_else(|| Failure::Type("missing keyword argument `lengths`".into()))?;
        Ok(Args {
            floats: floats(given)?,
            lengths,
            max_duration,
            config: config::config(&backend, &device, budget.as_ref())?,
            extra,
        })
    }

    /// The extra keyword `name`, where given.
    pub fn extra(&self, name: &str) -> Option<&Bound<'py, PyAny>> {
        self.extra.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The names of the floating inputs given.
    pub fn given(&self) -> Vec<&'static str> {
        match &self.floats {
            Floats::F32(a) => a.iter().map(|(n, _)| *n).collect(),
            Floats::F64(a) => a.iter().map(|(n, _)| *n).collect(),
        }
    }
}

fn text(v: &Bound<'_, PyAny>, name: &str) -> Outcome<String> {
    v.extract()
        .map_err(|_| Failure::Type(format!("`{name}` must be a str")))
}

/// A non-negative integer argument.
pub fn count(v: &Bound<'_, PyAny>, name: &str) -> Outcome<usize> {
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(Failure::Type(format!(
            "`{name}` must be an int, not a bool"
        )));
    }
    let n: i64 = v
        .extract()
        .map_err(|_| Failure::Type(format!("`{name}` must be an int")))?;
    usize::try_from(n).map_err(|_| Failure::Value(format!("`{name}` = {n} is negative")))
}

/// `lengths`: a sequence or 1-D array of integers.
pub fn lengths_of(v: &Bound<'_, PyAny>) -> Outcome<Vec<usize>> {
    let raw: Vec<i64> = match v.extract::<PyReadonlyArray1<'_, i64>>() {
        // An int64 array (what the torch layer passes) is read in place.
        Ok(a) => a.as_array().to_vec(),
        Err(_) => listed(v).extract().map_err(|_| {
            Failure::Type("`lengths` must be a sequence or 1-D array of integers".into())
        })?,
    };
    raw.iter()
        .enumerate()
        .map(|(i, &l)| {
            usize::try_from(l)
                .map_err(|_| Failure::Value(format!("`lengths[{i}]` = {l} is negative")))
        })
        .collect()
}

/// `v.tolist()` for a numpy array (which does not extract as a sequence), else `v`.
pub fn listed<'py>(v: &Bound<'py, PyAny>) -> Bound<'py, PyAny> {
    if v.hasattr("tolist").unwrap_or(false)
        && let Ok(l) = v.call_method0("tolist")
    {
        return l;
    }
    v.clone()
}

/// The floating inputs as numpy arrays of one dtype, `float32` or `float64`.
fn floats<'py>(given: Vec<(&'static str, Bound<'py, PyAny>)>) -> Outcome<Floats<'py>> {
    let dtype_of = |name: &str, v: &Bound<'py, PyAny>| -> Outcome<String> {
        if !v.hasattr("dtype").unwrap_or(false) || !v.hasattr("shape").unwrap_or(false) {
            return Err(Failure::Type(format!(
                "`{name}` must be a numpy array, not {}",
                type_name(v)
            )));
        }
        Ok(v.getattr("dtype")
            .and_then(|d| d.str().map(|s| s.to_string()))
            .unwrap_or_else(|_| "?".into()))
    };
    let Some((first, v0)) = given.first() else {
        return Err(Failure::Value(
            "no potentials: give `scores` (B, T, C) or `edges` (B, T, K, C, C)".into(),
        ));
    };
    let want = dtype_of(first, v0)?;
    for (name, v) in &given {
        let d = dtype_of(name, v)?;
        if d != want {
            return Err(Failure::Type(format!(
                "all floating inputs must have one dtype: `{first}` is {want} but `{name}` is {d}"
            )));
        }
    }
    match want.as_str() {
        "float32" => Ok(Floats::F32(borrow(given)?)),
        "float64" => Ok(Floats::F64(borrow(given)?)),
        other => Err(Failure::Type(format!(
            "`{first}` has dtype {other}: the potentials must be float32 or float64"
        ))),
    }
}

fn borrow<'py, F: Element>(
    given: Vec<(&'static str, Bound<'py, PyAny>)>,
) -> Outcome<Vec<(&'static str, PyReadonlyArrayDyn<'py, F>)>> {
    given
        .into_iter()
        .map(|(n, v)| {
            v.extract::<PyReadonlyArrayDyn<'py, F>>()
                .map(|a| (n, a))
                .map_err(|e| Failure::Type(format!("`{n}`: {e}")))
        })
        .collect()
}

/// The Python type's name of `v`.
pub fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The inputs as array views, ready to become a library `Problem` off the GIL.
pub struct Inputs<'a, F> {
    arrays: Vec<(&'static str, ArrayViewD<'a, F>)>,
    lengths: &'a [usize],
    max_duration: Option<usize>,
}

impl<'a, F: Scalar + Element> Inputs<'a, F> {
    /// Views of borrowed arrays.
    pub fn of(
        arrays: &'a [(&'static str, PyReadonlyArrayDyn<'_, F>)],
        lengths: &'a [usize],
        max_duration: Option<usize>,
    ) -> Self {
        Inputs {
            arrays: arrays.iter().map(|(n, a)| (*n, a.as_array())).collect(),
            lengths,
            max_duration,
        }
    }

    fn get(&self, name: &str) -> Option<ArrayViewD<'a, F>> {
        self.arrays
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| a.clone())
    }

    /// The library's problem: structured (`scores`) or edges (`edges`), checked by it.
    pub fn problem(&self) -> Outcome<Problem<'a, F>> {
        match (self.get("scores"), self.get("edges")) {
            (Some(_), Some(_)) => Err(Failure::Value(
                "give either `scores` (structured) or `edges`, not both".into(),
            )),
            (None, None) => Err(Failure::Value(
                "no potentials: give `scores` (B, T, C) or `edges` (B, T, K, C, C)".into(),
            )),
            (None, Some(edges)) => {
                if let Some(name) = STRUCTURED_ONLY.iter().find(|n| self.get(n).is_some()) {
                    return Err(Failure::Value(format!(
                        "`{name}` is for structured input (`scores`); edge potentials hold \
                         every score already"
                    )));
                }
                let p = EdgePotentials::new(edges, self.lengths)?;
                if let Some(k) = self.max_duration
                    && k != p.shape().max_duration
                {
                    return Err(Failure::Value(format!(
                        "max_duration = {k} but `edges` has K = {} (its third axis)",
                        p.shape().max_duration
                    )));
                }
                Ok(p.into())
            }
            (Some(scores), None) => {
                let k = self.max_duration.ok_or_else(|| {
                    Failure::Type("missing keyword argument `max_duration`".into())
                })?;
                let mut b = Potentials::builder(scores, self.lengths, k);
                if let Some(a) = self.get("transition") {
                    b = b.transition(a);
                }
                if let Some(a) = self.get("duration") {
                    b = b.duration(a);
                }
                if let Some(a) = self.get("start") {
                    b = b.start(a);
                }
                if let Some(a) = self.get("end") {
                    b = b.end(a);
                }
                if let Some(a) = self.get("begin_boundary") {
                    b = b.begin_boundary(a);
                }
                if let Some(a) = self.get("end_boundary") {
                    b = b.end_boundary(a);
                }
                Ok(b.build()?.into())
            }
        }
    }
}

/// Runs `work` off the GIL, in this process's thread pool, with panics caught.
pub fn off_gil<T: Send>(py: Python<'_>, work: impl FnOnce() -> Outcome<T> + Send) -> Outcome<T> {
    py.detach(|| crate::errors::guarded(|| crate::pool::install(work)))
}

/// Builds the problem of `args` for its dtype and runs `$body` with `$p: &Problem<F>` off
/// the GIL; `$body` is compiled once per dtype.
macro_rules! with_problem {
    ($py:expr, $args:expr, |$p:ident| $body:expr) => {{
        let args = &$args;
        match &args.floats {
            $crate::args::Floats::F32(arrays) => {
                let inputs = $crate::args::Inputs::of(arrays, &args.lengths, args.max_duration);
                $crate::args::off_gil($py, || {
                    let $p = &inputs.problem()?;
                    $body
                })
            }
            $crate::args::Floats::F64(arrays) => {
                let inputs = $crate::args::Inputs::of(arrays, &args.lengths, args.max_duration);
                $crate::args::off_gil($py, || {
                    let $p = &inputs.problem()?;
                    $body
                })
            }
        }
    }};
}
pub(crate) use with_problem;
