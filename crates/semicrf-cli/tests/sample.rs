//! `semicrf sample` and the `partial_labels` input of `semicrf eval`: values against brute
//! force enumeration, the samples' distribution and reproducibility, the errors, and the JSON
//! of both commands as committed snapshots.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Output, Stdio};

use semicrf::reference::for_each_segmentation;
use semicrf::{Segment, gold_score};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_semicrf");
const PROBLEM: &str = include_str!("data/problem.json");

/// Runs `semicrf <command> --input - <args>` on `stdin`.
fn run(command: &str, stdin: &str, args: &[&str]) -> Output {
    let mut child = Command::new(BIN)
        .arg(command)
        .args(["--input", "-"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the semicrf binary runs");
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

fn ok(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stderr: {err}");
    assert!(o.stderr.is_empty(), "{err}");
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn fails(o: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert!(o.stdout.is_empty());
    assert_eq!(err.lines().count(), 1, "{err:?}");
    for n in needles {
        assert!(err.contains(n), "{err:?} should mention {n:?}");
    }
}

/// The committed problem with a `partial_labels` key.
fn with_labels(labels: Value) -> String {
    let mut v: Value = serde_json::from_str(PROBLEM).unwrap();
    v["partial_labels"] = labels;
    v.to_string()
}

/// The committed problem, read by the library.
fn owned() -> semicrf::OwnedPotentials<f64> {
    semicrf::interchange::parse_problem(PROBLEM).unwrap()
}

fn agrees(y: &[Segment], labels: &[i64]) -> bool {
    y.iter()
        .all(|s| (s.start..s.end()).all(|t| labels[t] < 0 || labels[t] as usize == s.label))
}

/// Every segmentation of sequence `b` that agrees with `labels`, and its probability under
/// the restricted posterior.
fn posterior(b: usize, labels: &[i64]) -> (f64, HashMap<Vec<Segment>, f64>) {
    let o = owned();
    let p = o.view().unwrap();
    let mut ys = Vec::new();
    for_each_segmentation(o.lengths[b], o.max_duration, 2, |y| {
        let s = gold_score(&p, b, y).unwrap();
        if agrees(y, labels) && s > f64::NEG_INFINITY {
            ys.push((y.to_vec(), s));
        }
    });
    let m = ys.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return (m, HashMap::new());
    }
    let z: f64 = ys.iter().map(|x| (x.1 - m).exp()).sum();
    let post = ys
        .into_iter()
        .map(|(y, s)| (y, (s - m).exp() / z))
        .collect();
    (m + z.ln(), post)
}

fn segments(v: &Value) -> Vec<Segment> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let n = |i: usize| s[i].as_u64().unwrap() as usize;
            Segment::new(n(0), n(1), n(2))
        })
        .collect()
}

const LABELS: [[i64; 4]; 2] = [[-1, 1, -1, -1], [1, -1, -1, -1]];

#[test]
fn eval_adds_log_z_partial_after_log_z_matching_brute_force() {
    let text = ok(&run("eval", &with_labels(json!(LABELS)), &["--no-grad"]));
    let at = |key: &str| text.find(&format!("\"{key}\":")).unwrap();
    assert!(at("log_z") < at("log_z_partial") && at("log_z_partial") < at("viterbi"));
    let out: Value = serde_json::from_str(&text).unwrap();
    for b in 0..2 {
        let want = posterior(b, &LABELS[b]).0;
        let got = out["log_z_partial"][b].as_f64().unwrap();
        assert!((got - want).abs() < 1e-9, "sequence {b}: {got} vs {want}");
    }
    insta::assert_snapshot!(
        "eval_log_z_partial",
        json!({"log_z": out["log_z"], "log_z_partial": out["log_z_partial"]}).to_string()
    );
}

#[test]
fn eval_writes_minus_inf_where_no_segmentation_agrees() {
    // Position 1 of sequence 1 scores -inf for label 0.
    let labels = json!([[-1, -1, -1, -1], [-1, 0, -1, -1]]);
    let out: Value =
        serde_json::from_str(&ok(&run("eval", &with_labels(labels), &["--no-grad"]))).unwrap();
    assert_eq!(out["log_z_partial"][1], json!("-inf"));
    assert_eq!(out["log_z_partial"][0], out["log_z"][0]);
}

#[test]
fn bad_partial_labels_are_one_line_errors() {
    let o = run(
        "eval",
        &with_labels(json!([[0, 1, 2, 0], [0, 0, 0, 0]])),
        &[],
    );
    fails(&o, &["partial label 2", "position 2"]);
    let o = run("eval", &with_labels(json!([[0, 1], [0, 0]])), &[]);
    fails(&o, &["partial_labels", "shape"]);
    let o = run("sample", &with_labels(json!([[0.5]])), &["--n", "1"]);
    fails(&o, &["partial_labels", "index [0, 0]"]);
}

#[test]
fn sample_prints_n_valid_reproducible_segmentations_per_sequence() {
    let text = ok(&run("sample", PROBLEM, &["--n", "4", "--seed", "7"]));
    let out: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(out.as_object().unwrap().len(), 1);
    let samples = out["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2);
    let o = owned();
    for (b, per) in samples.iter().enumerate() {
        let per = per.as_array().unwrap();
        assert_eq!(per.len(), 4);
        for y in per {
            let y = segments(y);
            assert!(posterior(b, &[-1; 4]).1.contains_key(&y), "{y:?}");
            assert!(semicrf::validate_segmentation(b, &y, o.lengths[b], 3, 2).is_ok());
        }
    }
    for backend in ["exact", "scan"] {
        let again = ok(&run(
            "sample",
            PROBLEM,
            &["--n", "4", "--seed", "7", "--backend", backend],
        ));
        assert_eq!(again, text, "{backend}");
    }
    let other = ok(&run("sample", PROBLEM, &["--n", "4", "--seed", "8"]));
    assert_ne!(other, text);
    insta::assert_snapshot!("sample_n4_seed7", text.trim_end());
}

#[test]
fn samples_follow_the_posterior_restricted_to_the_annotation() {
    let n = 20_000;
    let text = ok(&run(
        "sample",
        &with_labels(json!(LABELS)),
        &["--n", &n.to_string(), "--seed", "3"],
    ));
    let out: Value = serde_json::from_str(&text).unwrap();
    for b in 0..2 {
        let (_, post) = posterior(b, &LABELS[b]);
        let mut counts: HashMap<Vec<Segment>, usize> = HashMap::new();
        for y in out["samples"][b].as_array().unwrap() {
            *counts.entry(segments(y)).or_insert(0) += 1;
        }
        assert!(
            counts.keys().all(|y| post.contains_key(y)),
            "a disagreeing sample"
        );
        let tv: f64 = post
            .iter()
            .map(|(y, &p)| (p - *counts.get(y).unwrap_or(&0) as f64 / n as f64).abs())
            .sum::<f64>()
            / 2.0;
        assert!(tv < 0.02, "sequence {b}: total variation {tv}");
    }
}

#[test]
fn sampling_an_infeasible_sequence_or_without_n_is_an_error() {
    let labels = json!([[-1, -1, -1, -1], [-1, 0, -1, -1]]);
    let o = run("sample", &with_labels(labels), &["--n", "2"]);
    fails(&o, &["sequence 1", "-inf"]);
    let o = run("sample", PROBLEM, &[]);
    fails(&o, &["--n"]);
}
