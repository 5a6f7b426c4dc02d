//! The input of `semicrf eval` and `semicrf sample`: a problem and, optionally, a partial
//! annotation `partial_labels` `(B, T)` (a label index, or `-1` for unknown, per position).

use ndarray::Array2;
use serde_json::Value;

use super::{kind, problem_from_object};
use crate::OwnedPotentials;

/// The key of the partial annotation.
pub const PARTIAL_LABELS: &str = "partial_labels";

/// A problem file with its optional partial annotation.
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    /// The problem (every key of [`parse_problem`](super::parse_problem)).
    pub problem: OwnedPotentials<f64>,
    /// `partial_labels`, `(B, T)`: a label index, or `-1` for unknown; `None` when the key is
    /// absent or `null`. Its shape and labels are checked against the problem when used
    /// ([`check_partial_labels`](crate::partial::check_partial_labels)).
    pub partial_labels: Option<Array2<i64>>,
}

/// Parses a problem file that may also hold `partial_labels`: a `(B, T)` array of integers
/// (integral floats such as `2.0` are accepted). A ragged array, a rank other than 2 or an
/// entry that is not an integer is an error naming the index.
pub fn parse_input(text: &str) -> Result<Input, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let Value::Object(mut obj) = value else {
        return Err(format!(
            "the problem must be a JSON object, got {}",
            kind(&value)
        ));
    };
    let partial_labels = match obj.remove(PARTIAL_LABELS) {
        None | Some(Value::Null) => None,
        Some(v) => Some(labels(&v)?),
    };
    Ok(Input {
        problem: problem_from_object(&obj)?,
        partial_labels,
    })
}

fn labels(v: &Value) -> Result<Array2<i64>, String> {
    let bad =
        |what: String| format!("`{PARTIAL_LABELS}` must be a (B, T) array of integers: {what}");
    let Value::Array(rows) = v else {
        return Err(bad(format!("got {}", kind(v))));
    };
    let t = match rows.first() {
        Some(Value::Array(r)) => r.len(),
        Some(other) => return Err(bad(format!("index [0] holds {}", kind(other)))),
        None => 0,
    };
    let mut data = Vec::with_capacity(rows.len() * t);
    for (b, row) in rows.iter().enumerate() {
        let Value::Array(row) = row else {
            return Err(bad(format!("index [{b}] holds {}", kind(row))));
        };
        if row.len() != t {
            return Err(bad(format!(
                "it is ragged: row {b} has {} entries, expected {t}",
                row.len()
            )));
        }
        for (i, x) in row.iter().enumerate() {
            let n = x
                .as_i64()
                .or_else(|| {
                    x.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                        .map(|f| f as i64)
                })
                .ok_or_else(|| bad(format!("index [{b}, {i}] holds {x}")))?;
            data.push(n);
        }
    }
    Array2::from_shape_vec((rows.len(), t), data).map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_labels_are_read_beside_the_problem() {
        let i = parse_input(
            r#"{"scores": [[[1, 2], [3, 4]]], "lengths": [2], "max_duration": 2,
                "partial_labels": [[-1, 1.0]]}"#,
        )
        .unwrap();
        assert_eq!(i.partial_labels.unwrap(), ndarray::array![[-1i64, 1]]);
        assert_eq!(i.problem.lengths, [2]);
        let none = parse_input(r#"{"scores": [[[1]]], "lengths": [1], "max_duration": 1}"#);
        assert_eq!(none.unwrap().partial_labels, None);
    }

    #[test]
    fn malformed_partial_labels_are_errors_naming_the_index() {
        let base = r#""scores": [[[1]]], "lengths": [1], "max_duration": 1"#;
        for (labels, needle) in [
            ("[[0.5]]", "index [0, 0]"),
            ("[[0], [0, 1]]", "ragged"),
            ("[0]", "index [0]"),
            ("\"x\"", "a string"),
        ] {
            let e = parse_input(&format!("{{{base}, \"partial_labels\": {labels}}}")).unwrap_err();
            assert!(e.contains("partial_labels") && e.contains(needle), "{e}");
        }
        // The plain problem reader still refuses the key.
        let e = super::super::parse_problem(&format!("{{{base}, \"partial_labels\": [[0]]}}"))
            .unwrap_err();
        assert!(e.contains("unknown key `partial_labels`"), "{e}");
    }
}
