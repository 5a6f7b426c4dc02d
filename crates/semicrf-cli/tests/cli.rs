//! The `semicrf eval` command: output keys, shapes and values on valid problems, and one-line
//! errors with exit code 2 on malformed ones.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use semicrf::ndarray::ArrayD;
use semicrf::reference::{self, Reference};
use semicrf::{
    Engine, LogSemiring, OwnedPotentials, Problem, materialize, position_marginals_from_edges,
};
use semicrf_core::testing::{GenSpec, named_cases, random_problem};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_semicrf");

/// Runs `semicrf eval` with `args`, feeding `stdin` when given (with `--input -`).
fn eval(args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("eval").args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("the semicrf binary runs");
    if let Some(text) = stdin {
        // A usage error exits before reading its input: a broken pipe here is expected.
        let _ = child.stdin.take().unwrap().write_all(text.as_bytes());
    }
    child.wait_with_output().unwrap()
}

fn eval_text(text: &str, extra: &[&str]) -> Output {
    let mut args = vec!["--input", "-"];
    args.extend_from_slice(extra);
    eval(&args, Some(text))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the error contract: exit code 2, nothing on stdout, one line `error: ...` on
/// stderr that contains every one of `needles`.
fn assert_fails(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert!(
        o.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(err.lines().count(), 1, "one line on stderr: {err:?}");
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "{err:?} should mention {n:?}");
    }
}

fn tensor_json(a: &ArrayD<f64>) -> Value {
    fn rec(a: semicrf::ndarray::ArrayViewD<'_, f64>) -> Value {
        if a.ndim() == 0 {
            let x = a.iter().next().copied().unwrap();
            return if x == f64::NEG_INFINITY {
                json!("-inf")
            } else {
                json!(x)
            };
        }
        Value::Array(a.axis_iter(semicrf::ndarray::Axis(0)).map(rec).collect())
    }
    rec(a.view())
}

/// The problem in the interchange format.
fn problem_json(p: &OwnedPotentials<f64>) -> Value {
    let mut obj = serde_json::Map::new();
    obj.insert("scores".into(), tensor_json(&p.scores));
    let optional = [
        ("transition", &p.transition),
        ("duration", &p.duration),
        ("start", &p.start),
        ("end", &p.end),
        ("begin_boundary", &p.begin_boundary),
        ("end_boundary", &p.end_boundary),
    ];
    for (name, t) in optional {
        if let Some(t) = t {
            obj.insert(name.into(), tensor_json(t));
        }
    }
    obj.insert("lengths".into(), json!(p.lengths));
    obj.insert("max_duration".into(), json!(p.max_duration));
    Value::Object(obj)
}

fn number(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        v => v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")),
    }
}

fn flat(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(items) => items.iter().flat_map(flat).collect(),
        v => vec![number(v)],
    }
}

fn shape(v: &Value) -> Vec<usize> {
    let mut out = Vec::new();
    let mut cur = v;
    while let Value::Array(items) = cur {
        out.push(items.len());
        match items.first() {
            Some(x) => cur = x,
            None => break,
        }
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
}

/// Runs the CLI on `p` and checks every output against the f64 reference.
fn check_against_reference(name: &str, p: &OwnedPotentials<f64>) {
    let text = problem_json(p).to_string();
    let o = eval_text(&text, &[]);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
    assert!(o.stderr.is_empty(), "{name}: {}", stderr(&o));
    let stdout = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        stdout.lines().count(),
        1,
        "{name}: one JSON object on one line"
    );
    let out: Value = serde_json::from_str(&stdout).unwrap();

    let keys: Vec<&str> = out
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for k in [
        "log_z",
        "viterbi",
        "segments",
        "entropy",
        "boundary_marginals",
        "marginals",
        "grad",
        "backend",
        "reason",
    ] {
        assert!(keys.contains(&k), "{name}: missing key {k} in {keys:?}");
    }
    let view = p.view().unwrap();
    let (b, t, c) = view.scores().dim();
    let problem: Problem<f64> = view.clone().into();
    assert_eq!(shape(&out["log_z"]), [b]);
    assert_eq!(shape(&out["viterbi"]), [b]);
    assert_eq!(shape(&out["entropy"]), [b]);
    assert_eq!(shape(&out["boundary_marginals"]), [b, t]);
    assert_eq!(out["segments"].as_array().unwrap().len(), b);

    let log_z = flat(&out["log_z"]);
    let viterbi = flat(&out["viterbi"]);
    let entropy = flat(&out["entropy"]);
    for seq in 0..b {
        let bf = reference::brute_force(&view, seq).unwrap();
        assert!(
            close(entropy[seq], bf.entropy),
            "{name}: entropy {} vs {}",
            entropy[seq],
            bf.entropy
        );
        assert!(
            close(log_z[seq], bf.log_z),
            "{name}: {} vs {}",
            log_z[seq],
            bf.log_z
        );
        assert!(close(viterbi[seq], bf.max), "{name}");
        let segs: Vec<semicrf::Segment> = out["segments"][seq]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let s: Vec<usize> = s
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as usize)
                    .collect();
                assert_eq!(s.len(), 3);
                semicrf::Segment::new(s[0], s[1], s[2])
            })
            .collect();
        let gold = semicrf::gold_score(&view, seq, &segs).unwrap();
        assert!(
            close(gold, viterbi[seq]),
            "{name}: the segments score the Viterbi score"
        );
    }

    let want = Engine::<f64>::backward(&Reference, &problem, &vec![1.0; b]).unwrap();
    let bm = flat(&out["boundary_marginals"]);
    for (x, y) in bm.iter().zip(want.boundary_marginals.iter()) {
        assert!((x - y).abs() < 1e-9, "{name}: boundary marginal {x} vs {y}");
    }
    assert_eq!(out["marginals"]["boundary"], out["boundary_marginals"]);
    // The position marginals, summed from the reference's edge marginals.
    let (_, edge_marginals) = reference::edge_marginals(materialize(&view).view(), view.lengths());
    let want_position = position_marginals_from_edges(edge_marginals.view());
    assert_eq!(shape(&out["marginals"]["position"]), [b, t, c]);
    let position = flat(&out["marginals"]["position"]);
    for (x, y) in position.iter().zip(want_position.iter()) {
        assert!((x - y).abs() < 1e-9, "{name}: position marginal {x} vs {y}");
    }
    let grad = out["grad"].as_object().unwrap();
    let g = &want.grad;
    let expected: Vec<(&str, Option<ArrayD<f64>>, bool)> = vec![
        ("scores", g.scores.clone().map(|a| a.into_dyn()), true),
        ("transition", g.transition.clone(), p.transition.is_some()),
        (
            "duration",
            g.duration.clone().map(|a| a.into_dyn()),
            p.duration.is_some(),
        ),
        (
            "start",
            g.start.clone().map(|a| a.into_dyn()),
            p.start.is_some(),
        ),
        ("end", g.end.clone().map(|a| a.into_dyn()), p.end.is_some()),
        (
            "begin_boundary",
            g.begin_boundary.clone().map(|a| a.into_dyn()),
            p.begin_boundary.is_some(),
        ),
        (
            "end_boundary",
            g.end_boundary.clone().map(|a| a.into_dyn()),
            p.end_boundary.is_some(),
        ),
    ];
    for (key, want, present) in expected {
        if !present {
            assert!(
                !grad.contains_key(key),
                "{name}: grad.{key} for an absent input"
            );
            continue;
        }
        let want = want.unwrap();
        let got = &grad[key];
        assert_eq!(shape(got), want.shape(), "{name}: grad.{key} shape");
        for (x, y) in flat(got).iter().zip(want.iter()) {
            assert!((x - y).abs() < 1e-9, "{name}: grad.{key} {x} vs {y}");
        }
    }
    assert_eq!(grad["scores"].as_array().unwrap().len(), b);
    assert_eq!(shape(&grad["scores"]), [b, t, c]);
    assert!(out["backend"].as_str().unwrap().starts_with("cpu/"));
    assert!(!out["reason"].as_str().unwrap().is_empty());
}

#[test]
fn eval_matches_the_reference_on_every_spec_case() {
    let mut compared = 0;
    for (i, (name, spec)) in named_cases().into_iter().enumerate() {
        let p = random_problem(900 + i as u64, &spec);
        let feasible = Engine::<f64>::forward::<LogSemiring>(&Reference, &p.view().unwrap().into())
            .unwrap()
            .iter()
            .all(|z| z.is_finite());
        if !feasible {
            continue;
        }
        check_against_reference(name, &p);
        compared += 1;
    }
    assert!(compared >= 10, "only {compared} cases compared");
}

#[test]
fn eval_reads_a_committed_problem_file() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/problem.json");
    let o = eval(&["--input", path], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shape(&out["log_z"]), [2]);
    assert_eq!(shape(&out["boundary_marginals"]), [2, 4]);
    // The input's -inf transition has gradient 0, and -inf scores round-trip as "-inf" only
    // in the input: outputs are finite here.
    assert_eq!(flat(&out["grad"]["transition"])[1], 0.0);
    assert_eq!(shape(&out["grad"]["transition"]), [2, 2]);
}

#[test]
fn every_backend_can_be_forced_and_is_reported() {
    let p = random_problem(3, &GenSpec::new(2, 5, 3, 2));
    let text = problem_json(&p).to_string();
    for backend in ["exact", "scan", "streaming"] {
        let o = eval_text(&text, &["--backend", backend]);
        assert_eq!(o.status.code(), Some(0), "{backend}: {}", stderr(&o));
        let out: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(out["backend"], json!(format!("cpu/{backend}")));
    }
}

#[test]
fn no_grad_leaves_out_gradients_and_boundary_marginals() {
    let p = random_problem(4, &GenSpec::new(1, 4, 2, 3));
    let o = eval_text(&problem_json(&p).to_string(), &["--no-grad"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    let obj = out.as_object().unwrap();
    for key in ["grad", "boundary_marginals", "marginals"] {
        assert!(!obj.contains_key(key), "{key} with --no-grad");
    }
    assert!(obj.contains_key("log_z") && obj.contains_key("segments"));
    assert_eq!(shape(&out["entropy"]), [1]);
}

#[test]
fn an_infeasible_sequence_prints_neg_inf_with_no_grad_and_fails_with_grad() {
    // K = 1 and the only transition is forbidden: sequence 1 (length 2) has no segmentation.
    let text = r#"{"scores": [[[0.5], [0.0]], [[0.1], [0.2]]], "transition": [["-inf"]],
                  "lengths": [1, 2], "max_duration": 1}"#;
    let o = eval_text(text, &["--no-grad"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["log_z"][1], json!("-inf"));
    assert_eq!(out["viterbi"][1], json!("-inf"));
    assert_eq!(out["segments"][1], json!([]));
    assert_eq!(out["log_z"][0], json!(0.5));
    // One segmentation: no uncertainty; none at all: no posterior, no entropy.
    assert_eq!(out["entropy"], json!([0.0, null]));
    assert_fails(&eval_text(text, &[]), &["sequence 1", "--no-grad"]);
}

#[test]
fn a_missing_key_is_named() {
    let o = eval_text(r#"{"scores": [[[0.0]]], "lengths": [1]}"#, &[]);
    assert_fails(&o, &["missing key `max_duration`"]);
    let o = eval_text(r#"{"lengths": [1], "max_duration": 1}"#, &[]);
    assert_fails(&o, &["missing key `scores`"]);
}

#[test]
fn a_tensor_of_the_wrong_shape_is_named() {
    let o = eval_text(
        r#"{"scores": [[[0, 0], [0, 0]]], "transition": [[0, 0, 0], [0, 0, 0]],
            "lengths": [2], "max_duration": 2}"#,
        &[],
    );
    assert_fails(&o, &["`transition`", "[2, 3]"]);
    let o = eval_text(
        r#"{"scores": [[0, 0], [0, 0]], "lengths": [2], "max_duration": 2}"#,
        &[],
    );
    assert_fails(&o, &["`scores`", "rank 2"]);
}

#[test]
fn a_nan_is_named_with_its_tensor_and_index() {
    let o = eval_text(
        r#"{"scores": [[[0, 0], [0, "NaN"]]], "lengths": [2], "max_duration": 2}"#,
        &[],
    );
    assert_fails(&o, &["`scores`", "NaN", "[0, 1, 1]"]);
    let o = eval_text(
        r#"{"scores": [[[0, 0]]], "duration": [["inf", 0]], "lengths": [1], "max_duration": 1}"#,
        &[],
    );
    assert_fails(&o, &["`duration`", "inf", "[0, 0]"]);
}

#[test]
fn a_length_beyond_t_is_named() {
    let o = eval_text(
        r#"{"scores": [[[0], [0]]], "lengths": [3], "max_duration": 2}"#,
        &[],
    );
    assert_fails(&o, &["`lengths[0]` = 3", "1..=2"]);
    let o = eval_text(
        r#"{"scores": [[[0], [0]]], "lengths": [2, 1], "max_duration": 2}"#,
        &[],
    );
    assert_fails(&o, &["`lengths` has 2 entries"]);
}

#[test]
fn truncated_json_is_reported_with_its_position() {
    let o = eval_text(r#"{"scores": [[[0.0, 1.0], [0.5"#, &[]);
    assert_fails(&o, &["invalid JSON", "EOF", "line 1"]);
    assert_fails(&eval_text("", &[]), &["invalid JSON"]);
}

#[test]
fn a_ragged_array_is_named() {
    let o = eval_text(
        r#"{"scores": [[[0, 0], [0]]], "lengths": [2], "max_duration": 2}"#,
        &[],
    );
    assert_fails(&o, &["`scores` is ragged", "[0, 1]"]);
}

#[test]
fn other_malformed_values_are_named() {
    let bad = [
        (r#"[1, 2]"#, "JSON object"),
        (
            r#"{"scores": [[[0]]], "lengths": [1], "max_duration": 1, "transitions": [[0]]}"#,
            "unknown key `transitions`",
        ),
        (
            r#"{"scores": [[[0]]], "lengths": [1.5], "max_duration": 1}"#,
            "`lengths[0]`",
        ),
        (
            r#"{"scores": [[[0]]], "lengths": [1], "max_duration": -2}"#,
            "`max_duration`",
        ),
        (
            r#"{"scores": [[[0]]], "lengths": [1], "max_duration": 0}"#,
            "maximum duration",
        ),
        (
            r#"{"scores": [[["high"]]], "lengths": [1], "max_duration": 1}"#,
            "\"high\"",
        ),
        (
            r#"{"scores": [[[true]]], "lengths": [1], "max_duration": 1}"#,
            "a boolean",
        ),
    ];
    for (text, needle) in bad {
        assert_fails(&eval_text(text, &[]), &[needle]);
    }
}

#[test]
fn an_unknown_backend_is_a_one_line_usage_error() {
    let o = eval_text(
        r#"{"scores": [[[0]]], "lengths": [1], "max_duration": 1}"#,
        &["--backend", "fastest"],
    );
    assert_fails(&o, &["fastest", "--backend", "streaming"]);
}

#[test]
fn an_unknown_device_and_an_unavailable_one_are_errors() {
    let text = r#"{"scores": [[[0]]], "lengths": [1], "max_duration": 1}"#;
    assert_fails(&eval_text(text, &["--device", "tpu"]), &["tpu"]);
    // Built with the `cuda` feature on a machine with a GPU, `--device cuda` runs.
    if cfg!(feature = "cuda") && std::env::var("SEMICRF_REQUIRE_GPU").as_deref() == Ok("1") {
        return;
    }
    assert_fails(
        &eval_text(text, &["--device", "cuda"]),
        &["cuda/", "unavailable"],
    );
}

#[test]
fn a_missing_file_is_an_io_error_naming_it() {
    let mut path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    path.push("no-such-problem.json");
    let o = eval(&["--input", path.to_str().unwrap()], None);
    assert_fails(&o, &["cannot read", "no-such-problem.json"]);
}

#[test]
fn a_budget_too_small_is_reported() {
    let p = random_problem(8, &GenSpec::new(1, 6, 2, 2));
    let o = eval_text(&problem_json(&p).to_string(), &["--memory-budget", "1"]);
    assert_fails(&o, &["memory budget"]);
}

#[test]
fn a_memory_budget_with_a_unit_is_accepted_and_applied() {
    let p = random_problem(9, &GenSpec::new(1, 6, 2, 2));
    let text = problem_json(&p).to_string();
    for budget in ["1GiB", "2 GiB", "512mib", "1 GB", "4096 KiB", "1073741824"] {
        let o = eval_text(&text, &["--memory-budget", budget]);
        assert_eq!(o.status.code(), Some(0), "{budget}: {}", stderr(&o));
    }
    // The unit is applied, not dropped: 1 KB is too small where 1 GB is not.
    assert_fails(
        &eval_text(&text, &["--memory-budget", "1KB"]),
        &["memory budget"],
    );
}

#[test]
fn a_malformed_memory_budget_is_a_one_line_usage_error() {
    let text = r#"{"scores": [[[0]]], "lengths": [1], "max_duration": 1}"#;
    for budget in ["1 GiBs", "-1", "lots", "99999999 TiB"] {
        let o = eval_text(text, &[&format!("--memory-budget={budget}")]);
        assert_fails(&o, &["--memory-budget", budget]);
    }
}

#[test]
fn the_help_tells_what_no_grad_prints_and_the_units_of_a_size() {
    let o = Command::new(BIN).args(["eval", "--help"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8(o.stdout).unwrap();
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("log Z, Viterbi and the entropy only"),
        "{help}"
    );
    assert!(
        flat.contains("GiB") && flat.contains("[default: 2 GiB]"),
        "{help}"
    );
    assert!(flat.contains("`marginals`"), "{help}");
}
