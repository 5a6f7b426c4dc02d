//! The JSON interchange format ([`model`](crate::model) §10): problems in, results out
//! (feature `json`; the `semicrf` command-line tool of the `semicrf-cli` package uses it).
//!
//! Reading is strict: unknown keys, ragged arrays, non-numeric entries and malformed
//! `lengths` / `max_duration` are errors naming the key, tensor and index. Values may be JSON
//! numbers or the strings `"-inf"`, `"inf"`, `"+inf"` and `"nan"` (any case); the last three
//! are read so that validation can reject them with the tensor and index. Writing is
//! compact, keys in the order of the specification, `-inf` as the string `"-inf"`.

use crate::OwnedPotentials;

mod partial;
use ndarray::{ArrayD, ArrayViewD, Axis, IxDyn};
pub use partial::{Input, parse_input};
use serde_json::{Map, Value};

/// The keys of a problem file.
const KEYS: [&str; 9] = [
    "scores",
    "transition",
    "duration",
    "start",
    "end",
    "begin_boundary",
    "end_boundary",
    "lengths",
    "max_duration",
];

/// Parses a problem file into unvalidated owned potentials (shapes and values are checked by
/// [`OwnedPotentials::view`]).
pub fn parse_problem(text: &str) -> Result<OwnedPotentials<f64>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let Value::Object(obj) = value else {
        return Err(format!(
            "the problem must be a JSON object, got {}",
            kind(&value)
        ));
    };
    problem_from_object(&obj)
}

/// The problem of a parsed JSON object (every key must be one of the problem's).
fn problem_from_object(obj: &Map<String, Value>) -> Result<OwnedPotentials<f64>, String> {
    if let Some(key) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "unknown key `{key}`; the keys of a problem are {}",
            KEYS.join(", ")
        ));
    }
    let optional = |name: &str| -> Result<Option<ArrayD<f64>>, String> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => tensor(name, v).map(Some),
        }
    };
    Ok(OwnedPotentials {
        scores: tensor("scores", required(obj, "scores")?)?,
        transition: optional("transition")?,
        duration: optional("duration")?,
        start: optional("start")?,
        end: optional("end")?,
        begin_boundary: optional("begin_boundary")?,
        end_boundary: optional("end_boundary")?,
        lengths: lengths(required(obj, "lengths")?)?,
        max_duration: count(required(obj, "max_duration")?)
            .ok_or_else(|| "`max_duration` must be a non-negative integer".to_string())?,
    })
}

fn required<'v>(obj: &'v Map<String, Value>, key: &str) -> Result<&'v Value, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(format!(
            "missing key `{key}` (required: scores, lengths, max_duration)"
        )),
        Some(v) => Ok(v),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A non-negative integer (integral floats such as `5.0` are accepted).
fn count(v: &Value) -> Option<usize> {
    let n = v.as_number()?;
    if let Some(u) = n.as_u64() {
        return usize::try_from(u).ok();
    }
    let f = n.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f < 9.0e15).then_some(f as usize)
}

fn lengths(v: &Value) -> Result<Vec<usize>, String> {
    let Value::Array(items) = v else {
        return Err(format!(
            "`lengths` must be an array of non-negative integers, got {}",
            kind(v)
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            count(x)
                .ok_or_else(|| format!("`lengths[{i}]` must be a non-negative integer, got {x}"))
        })
        .collect()
}

/// A nested JSON array as an n-dimensional array, checked to be rectangular.
fn tensor(name: &str, v: &Value) -> Result<ArrayD<f64>, String> {
    let mut shape = Vec::new();
    let mut cur = v;
    while let Value::Array(a) = cur {
        shape.push(a.len());
        match a.first() {
            Some(x) => cur = x,
            None => break,
        }
    }
    let mut data = Vec::with_capacity(shape.iter().product());
    fill(name, v, &shape, &mut Vec::new(), &mut data)?;
    ArrayD::from_shape_vec(IxDyn(&shape), data).map_err(|e| format!("tensor `{name}`: {e}"))
}

fn fill(
    name: &str,
    v: &Value,
    shape: &[usize],
    index: &mut Vec<usize>,
    out: &mut Vec<f64>,
) -> Result<(), String> {
    let depth = index.len();
    if depth == shape.len() {
        out.push(scalar(name, v, index)?);
        return Ok(());
    }
    match v {
        Value::Array(a) if a.len() == shape[depth] => {
            for (i, x) in a.iter().enumerate() {
                index.push(i);
                fill(name, x, shape, index, out)?;
                index.pop();
            }
            Ok(())
        }
        Value::Array(a) => Err(format!(
            "tensor `{name}` is ragged: the array at index {index:?} has {} {}, expected {}",
            a.len(),
            if a.len() == 1 { "entry" } else { "entries" },
            shape[depth]
        )),
        other => Err(format!(
            "tensor `{name}` is ragged: index {index:?} holds {}, expected an array of {} entries",
            kind(other),
            shape[depth]
        )),
    }
}

fn scalar(name: &str, v: &Value, index: &[usize]) -> Result<f64, String> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| format!("tensor `{name}` holds {n} at index {index:?}, not a number")),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
            "inf" | "+inf" | "infinity" | "+infinity" => Ok(f64::INFINITY),
            "nan" | "+nan" | "-nan" => Ok(f64::NAN),
            _ => Err(format!(
                "tensor `{name}` holds the string {s:?} at index {index:?}; \
                 expected a number or \"-inf\""
            )),
        },
        Value::Array(_) => Err(format!(
            "tensor `{name}` is ragged: index {index:?} holds an array, expected a number"
        )),
        other => Err(format!(
            "tensor `{name}` holds {} at index {index:?}; expected a number or \"-inf\"",
            kind(other)
        )),
    }
}

/// A JSON value to write, with keys kept in insertion order.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null` (a value that does not exist, such as the entropy of an infeasible sequence).
    Null,
    /// A float; `-inf` is written as `"-inf"`, `+inf` as `"inf"`; NaN is refused.
    Num(f64),
    /// An integer.
    Int(usize),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object.
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// An n-dimensional array as nested arrays.
    pub fn array(a: ArrayViewD<'_, f64>) -> Json {
        if a.ndim() == 0 {
            return Json::Num(a.iter().next().copied().unwrap_or(0.0));
        }
        Json::Arr(a.axis_iter(Axis(0)).map(Json::array).collect())
    }

    /// A list of floats.
    pub fn floats(xs: &[f64]) -> Json {
        Json::Arr(xs.iter().map(|&x| Json::Num(x)).collect())
    }

    /// Compact JSON text; fails naming the path of the first NaN.
    pub fn render(&self) -> Result<String, String> {
        let mut out = String::new();
        self.write(&mut out, &mut String::new())?;
        Ok(out)
    }

    fn write(&self, out: &mut String, path: &mut String) -> Result<(), String> {
        match self {
            Json::Null => out.push_str("null"),
            Json::Num(x) if x.is_nan() => return Err(format!("NaN in the output at `{path}`")),
            Json::Num(x) if *x == f64::NEG_INFINITY => out.push_str("\"-inf\""),
            Json::Num(x) if *x == f64::INFINITY => out.push_str("\"inf\""),
            Json::Num(x) => out.push_str(&Value::from(*x).to_string()),
            Json::Int(n) => out.push_str(&n.to_string()),
            Json::Str(s) => out.push_str(&Value::from(s.as_str()).to_string()),
            Json::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    item.write(out, path)?;
                    path.truncate(len);
                }
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push('{');
                for (i, (key, item)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::from(key.as_str()).to_string());
                    out.push(':');
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                    item.write(out, path)?;
                    path.truncate(len);
                }
                out.push('}');
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_problem_parses_with_inf_strings() {
        let p = parse_problem(
            r#"{"scores": [[[1, "-inf"], [0.5, 2]]], "transition": null, "lengths": [2],
                "max_duration": 2}"#,
        )
        .unwrap();
        assert_eq!(p.scores.shape(), &[1, 2, 2]);
        assert_eq!(p.scores[[0, 0, 1]], f64::NEG_INFINITY);
        assert!(p.transition.is_none());
        assert_eq!(p.lengths, [2]);
        assert_eq!(p.max_duration, 2);
    }

    #[test]
    fn a_ragged_array_is_an_error_naming_the_tensor_and_index() {
        let e = parse_problem(r#"{"scores": [[[1, 2], [3]]], "lengths": [2], "max_duration": 1}"#)
            .unwrap_err();
        assert!(
            e.contains("`scores` is ragged") && e.contains("[0, 1]"),
            "{e}"
        );
    }

    #[test]
    fn nan_strings_are_read_so_that_validation_names_them() {
        let p =
            parse_problem(r#"{"scores": [[["nan"]]], "lengths": [1], "max_duration": 1}"#).unwrap();
        assert!(p.scores[[0, 0, 0]].is_nan());
    }

    #[test]
    fn unknown_keys_and_bad_lengths_are_errors() {
        let e = parse_problem(r#"{"scores": [[[1]]], "lengths": [1], "max_duration": 1, "k": 2}"#)
            .unwrap_err();
        assert!(e.contains("unknown key `k`"), "{e}");
        let e = parse_problem(r#"{"scores": [[[1]]], "lengths": [-1], "max_duration": 1}"#)
            .unwrap_err();
        assert!(e.contains("`lengths[0]`"), "{e}");
    }

    #[test]
    fn output_writes_infinities_as_strings_and_refuses_nan() {
        let j = Json::Obj(vec![
            ("a".into(), Json::floats(&[1.5, f64::NEG_INFINITY])),
            ("b".into(), Json::Int(3)),
        ]);
        assert_eq!(j.render().unwrap(), r#"{"a":[1.5,"-inf"],"b":3}"#);
        let bad = Json::Obj(vec![("g".into(), Json::floats(&[0.0, f64::NAN]))]);
        assert_eq!(bad.render().unwrap_err(), "NaN in the output at `g[1]`");
    }
}
