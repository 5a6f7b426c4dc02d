//! `semicrf eval --kbest N` and `--posterior`: the `"kbest"` and `"posterior"` keys against
//! brute-force enumeration, a snapshot of both on the committed problem file, and their
//! errors.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use semicrf::{Problem, Segment, enumerate};
use semicrf_core::testing::{GenSpec, random_problem};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_semicrf");

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn eval(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("eval")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the semicrf binary runs")
}

fn ok_json(o: &Output) -> Value {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    serde_json::from_slice(&o.stdout).unwrap()
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

fn score(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        v => v.as_f64().unwrap(),
    }
}

/// Writes `p` in the interchange format to a file of its own.
fn write_problem(p: &semicrf::OwnedPotentials<f64>, name: &str) -> PathBuf {
    fn t(a: &semicrf::ndarray::ArrayD<f64>) -> Value {
        fn rec(a: semicrf::ndarray::ArrayViewD<'_, f64>) -> Value {
            match a.iter().next() {
                Some(&x) if a.ndim() == 0 && x == f64::NEG_INFINITY => json!("-inf"),
                Some(&x) if a.ndim() == 0 => json!(x),
                _ => Value::Array(a.axis_iter(semicrf::ndarray::Axis(0)).map(rec).collect()),
            }
        }
        rec(a.view())
    }
    let mut obj = serde_json::Map::new();
    obj.insert("scores".into(), t(&p.scores));
    for (key, x) in [
        ("transition", &p.transition),
        ("duration", &p.duration),
        ("start", &p.start),
        ("end", &p.end),
        ("begin_boundary", &p.begin_boundary),
        ("end_boundary", &p.end_boundary),
    ] {
        if let Some(x) = x {
            obj.insert(key.into(), t(x));
        }
    }
    obj.insert("lengths".into(), json!(p.lengths));
    obj.insert("max_duration".into(), json!(p.max_duration));
    let path =
        std::env::temp_dir().join(format!("semicrf-kbest-{}-{name}.json", std::process::id()));
    std::fs::write(&path, Value::Object(obj).to_string()).unwrap();
    path
}

#[test]
fn kbest_and_posterior_equal_brute_force_on_every_backend() {
    let mut g = GenSpec::new(3, 5, 3, 3).everything();
    g.forbid_transitions = 0.2;
    let owned = random_problem(41, &g);
    let path = write_problem(&owned, "random");
    let p: Problem<'_, f64> = owned.view().unwrap().into();
    for backend in ["auto", "exact", "scan", "streaming"] {
        let args = [
            "--input",
            path.to_str().unwrap(),
            "--backend",
            backend,
            "--kbest",
            "7",
            "--posterior",
            "--no-grad",
        ];
        let o = eval(&args);
        let out = ok_json(&o);
        // The keys in the documented order.
        let text = String::from_utf8_lossy(&o.stdout);
        let at = |key: &str| text.find(&format!("\"{key}\":")).expect(key);
        let order = [
            "log_z",
            "viterbi",
            "segments",
            "entropy",
            "kbest",
            "posterior",
            "backend",
        ];
        assert!(order.windows(2).all(|w| at(w[0]) < at(w[1])), "{backend}");
        for b in 0..owned.lengths.len() {
            let want = enumerate::kbest(&p, b, 7).unwrap();
            let got = out["kbest"][b].as_array().unwrap();
            assert_eq!(got.len(), want.len(), "{backend}, sequence {b}");
            for (g, w) in got.iter().zip(&want) {
                assert!((score(&g["score"]) - w.score).abs() < 1e-9, "{backend}");
                assert_eq!(segments(&g["segments"]), w.segments, "{backend}");
            }
            assert_eq!(
                got[0]["segments"], out["segments"][b],
                "{backend}: Viterbi first"
            );
            let post = enumerate::posterior(&p, b).unwrap();
            let d = &out["posterior"][b];
            let x = enumerate::expected_correct(&post.position, &segments(&d["segments"]));
            assert!(
                (x - post.best).abs() < 1e-9,
                "{backend}: {x} vs {}",
                post.best
            );
            assert!((score(&d["score"]) - post.best).abs() < 1e-9, "{backend}");
        }
        assert!(
            out["reason"].as_str().unwrap().contains("k = 7"),
            "{backend}"
        );
    }
    std::fs::remove_file(path).unwrap();
}

#[test]
fn kbest_and_posterior_on_the_committed_problem_file() {
    let file = data("problem.json");
    let out = ok_json(&eval(&[
        "--input",
        file.to_str().unwrap(),
        "--kbest",
        "4",
        "--posterior",
    ]));
    // One line per decoding: `kbest[b][n]` or `posterior[b]`, its score and segments.
    let mut shown = String::new();
    for (b, list) in out["kbest"].as_array().unwrap().iter().enumerate() {
        for (n, d) in list.as_array().unwrap().iter().enumerate() {
            shown += &format!("kbest[{b}][{n}] {} {}\n", d["score"], d["segments"]);
        }
    }
    for (b, d) in out["posterior"].as_array().unwrap().iter().enumerate() {
        shown += &format!("posterior[{b}] {} {}\n", d["score"], d["segments"]);
    }
    insta::assert_snapshot!(shown);
}

#[test]
fn more_than_exist_gives_every_segmentation_and_zero_gives_none() {
    let file = data("problem.json");
    let f = file.to_str().unwrap();
    let all = ok_json(&eval(&["--input", f, "--kbest", "1000", "--no-grad"]));
    let owned =
        semicrf::interchange::parse_problem(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let p: Problem<'_, f64> = owned.view().unwrap().into();
    for b in 0..2 {
        let n = enumerate::kbest(&p, b, usize::MAX).unwrap().len();
        assert_eq!(all["kbest"][b].as_array().unwrap().len(), n);
    }
    let none = ok_json(&eval(&["--input", f, "--kbest", "0", "--no-grad"]));
    assert_eq!(none["kbest"], json!([[], []]));
}

#[test]
fn posterior_of_an_infeasible_sequence_and_a_bad_count_are_one_line_errors() {
    let text = r#"{"scores": [[["-inf", "-inf"]]], "lengths": [1], "max_duration": 1}"#;
    let path = std::env::temp_dir().join(format!("semicrf-kbest-{}-inf.json", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let f = path.to_str().unwrap();
    let o = eval(&["--input", f, "--posterior", "--no-grad"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("error: ") && err.contains("--posterior"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
    // k best of an infeasible sequence: an empty list.
    let out = ok_json(&eval(&["--input", f, "--kbest", "3", "--no-grad"]));
    assert_eq!(out["kbest"], json!([[]]));
    let o = eval(&["--input", f, "--kbest", "many"]);
    assert_eq!(o.status.code(), Some(2));
    std::fs::remove_file(path).unwrap();
}

#[test]
fn the_help_documents_kbest_and_posterior() {
    let o = Command::new(BIN).args(["eval", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(
        help.contains("--kbest <N>") && help.contains("--posterior"),
        "{help}"
    );
}
