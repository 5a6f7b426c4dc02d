//! The benchmark report, fed a synthetic criterion directory (written here in criterion's own
//! format), memory measurements and peer results: the page has the tables of what it was
//! given, the switch points the CPU engines' own `memory_required` implies, and well-formed
//! SVG plots with every series, the budget and the switch marked.

use std::path::Path;

use semicrf::{DEFAULT_MEMORY_BUDGET, LogSemiring};
use semicrf_bench::report::{self, Inputs, Source, criterion, memory, peers};
use semicrf_bench::sweep::{FULL, SMALL, Sweep};
use semicrf_bench::{bench_id, shape_label};
use semicrf_core::{EngineInfo, Form, Op, Query, Shape, human_bytes};
use semicrf_cpu::{ExactEngine, Parallelism, ScanEngine, threads};
use serde_json::json;

/// Writes one benchmark the way criterion 0.8 does: `<dir>/<group>/<value>/new/`.
fn write_bench(dir: &Path, group: &str, value: &str, median_ns: f64) {
    let safe = |s: &str| s.replace(['/', '\\', ':', '*', '?', '"', '<', '>', '|', '^'], "_");
    let new = dir.join(safe(group)).join(safe(value)).join("new");
    std::fs::create_dir_all(&new).unwrap();
    let full_id = format!("{group}/{value}");
    let benchmark = json!({
        "group_id": group,
        "function_id": null,
        "value_str": value,
        "throughput": {"Elements": 1000},
        "full_id": full_id,
        "directory_name": format!("{}/{}", safe(group), safe(value)),
        "title": full_id,
    });
    let est = |v: f64| {
        json!({
            "confidence_interval": {"confidence_level": 0.95, "lower_bound": v * 0.98,
                                    "upper_bound": v * 1.02},
            "point_estimate": v,
            "standard_error": v * 0.01,
        })
    };
    let estimates = json!({
        "mean": est(median_ns * 1.01),
        "median": est(median_ns),
        "median_abs_dev": est(median_ns * 0.02),
        "slope": null,
        "std_dev": est(median_ns * 0.03),
    });
    std::fs::write(new.join("benchmark.json"), benchmark.to_string()).unwrap();
    std::fs::write(new.join("estimates.json"), estimates.to_string()).unwrap();
    // Criterion also keeps the raw samples and an older run; neither is read.
    std::fs::write(
        new.join("sample.json"),
        r#"{"sampling_mode":"Flat","iters":[1.0],"times":[1.0]}"#,
    )
    .unwrap();
    let base = new.with_file_name("base");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("benchmark.json"), "not read").unwrap();
}

fn op(backward: bool) -> Op {
    if backward {
        Op::Backward
    } else {
        Op::forward::<LogSemiring>()
    }
}

/// The first `T` at which `engine`'s own `memory_required` passes the default budget: an
/// oracle independent of the facade's selection that the report asks.
fn first_t_over(engine: &dyn EngineInfo, sweep: &Sweep, backward: bool) -> usize {
    let need = |t: usize| {
        engine
            .memory_required(&Query {
                shape: Shape::new(sweep.batch, t, sweep.max_duration, sweep.labels),
                form: Form::Structured {
                    duration_dependent_transition: false,
                    boundaries: [false, false],
                },
                op: op(backward),
                dtype_bytes: 4,
                threads: threads(Parallelism::Rayon),
            })
            .unwrap()
    };
    (sweep.max_duration..)
        .find(|&t| need(t) > DEFAULT_MEMORY_BUDGET)
        .unwrap()
}

/// Synthetic timings: streaming linear in T, scan and exact linear with a larger constant and
/// only below `limit` (what the sweep bench runs), CUDA streaming for the forward pass only.
fn write_run(dir: &Path, sweep: &Sweep, limit: usize) {
    for (semiring, factor) in [("log", 1.0), ("log_backward", 3.0)] {
        for s in sweep.t_shapes() {
            let t = s.len as f64;
            write_bench(
                dir,
                &format!("sweep/cpu/streaming/{semiring}"),
                &shape_label(s),
                900.0 * t * factor,
            );
            if s.len < limit && sweep.edges_run(s) {
                for (algo, c) in [("scan", 5000.0), ("exact", 4000.0)] {
                    write_bench(
                        dir,
                        &format!("sweep/cpu/{algo}/{semiring}"),
                        &shape_label(s),
                        c * t * factor,
                    );
                }
            }
            if semiring == "log" {
                write_bench(dir, "sweep/cuda/streaming/log", &shape_label(s), 50.0 * t);
            }
        }
    }
    // A canonical-shape benchmark and one of another convention (ignored).
    let s2 = semicrf_bench::canonical("S2").unwrap();
    let id = bench_id("cpu", "streaming", "log", s2);
    let (group, value) = id.rsplit_once('/').unwrap();
    write_bench(dir, group, value, 3.5e5);
    write_bench(dir, "unrelated", "thing", 10.0);
}

fn write_memory(path: &Path, sweep: &Sweep) {
    let mut rows = Vec::new();
    let shapes = sweep
        .t_shapes()
        .into_iter()
        .map(|s| ("T", s))
        .chain(sweep.k_shapes().into_iter().map(|s| ("K", s)));
    for (tag, s) in shapes {
        for pass in ["forward", "forward+backward"] {
            for (algo, per) in [("streaming", 0.0), ("scan", 1.0), ("exact", 1.2)] {
                let edges = (s.len * s.max_duration * s.labels * s.labels * 8) as f64;
                let streaming = (s.max_duration * s.labels * 8 + 4096) as f64;
                let required = (streaming + per * edges * 1.1) as u64;
                let over = required > DEFAULT_MEMORY_BUDGET;
                rows.push(json!({
                    "case": format!("{tag}={}", if tag == "T" { s.len } else { s.max_duration }),
                    "sweep": tag,
                    "shape": [s.batch, s.len, s.max_duration, s.labels],
                    "algorithm": algo,
                    "pass": pass,
                    "time_ms": if over { json!(null) } else { json!(1.0) },
                    "peak_beyond_inputs_outputs": if over { 0 } else { (required as f64 * 0.9) as u64 },
                    "outputs": 0,
                    "memory_required": required,
                    "formula": 1,
                    "error": if over { json!("not run: needs more than the budget") } else { json!(null) },
                }));
            }
        }
    }
    let doc = json!({
        "what": "synthetic",
        "date_utc": "2026-11-26T06:00:00Z",
        "machine": "test machine",
        "sweep": {"name": sweep.name},
        "threads": 2,
        "rows": rows,
    });
    std::fs::write(path, doc.to_string()).unwrap();
}

fn write_peers(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let ours = json!({"engine": "cuda:0/streaming", "threads": 16, "shape_id": "S3",
                      "shape": [8, 1024, 31, 8], "forward_ms": 0.241, "backward_ms": 0.646,
                      "backward_peak_bytes": 2652896, "seed": 1});
    let flash = json!({"peer": "flash-semicrf", "version": "0.2.0",
                       "implementation": "Triton kernels on NVIDIA H100 80GB HBM3, float32",
                       "shape_id": "S3", "shape": [8, 1024, 31, 8], "forward_ms": 25.4,
                       "backward_ms": 219.0, "backward_peak_bytes": 36225536,
                       "started_utc": "2026-11-25T17:02:08Z", "status": "ok"});
    std::fs::write(dir.join("ours_cuda_S3.json"), ours.to_string()).unwrap();
    std::fs::write(dir.join("flash_S3.json"), flash.to_string()).unwrap();
    std::fs::write(dir.join("README.txt"), "not a result").unwrap();
}

/// Tags open and close in order (a small check of well-formedness: every `<x …>` has its
/// `</x>`, self-closing tags aside), and the document is one `<svg>` element.
fn assert_well_formed(svg: &str, name: &str) {
    let body = svg.trim();
    let start = body
        .find("<svg")
        .unwrap_or_else(|| panic!("{name}: no <svg>"));
    assert!(body.ends_with("</svg>"), "{name}: does not end with </svg>");
    let mut stack: Vec<String> = Vec::new();
    let mut rest = &body[start..];
    while let Some(open) = rest.find('<') {
        let close = rest[open..]
            .find('>')
            .unwrap_or_else(|| panic!("{name}: unclosed <"))
            + open;
        let tag = &rest[open + 1..close];
        if let Some(end) = tag.strip_prefix('/') {
            let top = stack
                .pop()
                .unwrap_or_else(|| panic!("{name}: </{end}> closes nothing"));
            assert_eq!(top, end.trim(), "{name}: </{end}> closes <{top}>");
        } else if !tag.ends_with('/') && !tag.starts_with('?') && !tag.starts_with('!') {
            stack.push(tag.split_whitespace().next().unwrap_or("").to_string());
        }
        rest = &rest[close + 1..];
    }
    assert!(stack.is_empty(), "{name}: unclosed {stack:?}");
}

fn inputs(dir: &Path, sweep: &'static Sweep) -> Inputs {
    Inputs {
        sweep,
        criterion: Source {
            path: "crit".into(),
            data: criterion::load(&dir.join("criterion")).unwrap(),
        },
        memory: Some(Source {
            path: "memory.json".into(),
            data: memory::load(&dir.join("memory.json")).unwrap(),
        }),
        peers_cpu: None,
        peers_gpu: Some(Source {
            path: "gpu".into(),
            data: peers::load_dir(&dir.join("gpu")).unwrap(),
        }),
        machine: "test machine".into(),
        commit: "abc123".into(),
        note: Some("Synthetic numbers.".into()),
        commands: vec!["cargo run -p semicrf-bench --bin report".into()],
        img_dir: "benchmarks".into(),
    }
}

fn check(sweep: &'static Sweep) {
    let dir = tempfile::tempdir().unwrap();
    let scan = ScanEngine::new();
    let exact = ExactEngine::new();
    let scan_over = [false, true].map(|b| first_t_over(&scan, sweep, b));
    let exact_over = [false, true].map(|b| first_t_over(&exact, sweep, b));
    let limit = scan_over[0]
        .min(exact_over[0])
        .min(scan_over[1])
        .min(exact_over[1]);
    write_run(&dir.path().join("criterion"), sweep, limit);
    write_memory(&dir.path().join("memory.json"), sweep);
    write_peers(&dir.path().join("gpu"));
    let inputs = inputs(dir.path(), sweep);
    let out = report::generate(&inputs).unwrap();
    let md = &out.markdown;

    // Shapes are defined before they are used; sources name machine, date and commit.
    let defined = md
        .find("| S9 | (1, 1000000, 1000, 24) |")
        .expect("the canonical table");
    assert!(md.find("| S3 | (8, 1024, 31, 8) | ours cuda").unwrap() > defined);
    assert!(md.contains("test machine") && md.contains("`abc123`"));
    assert!(md.contains("2026-11-26 06:00 UTC") && md.contains("2026-11-25"));
    assert!(md.starts_with("<!-- Generated"));
    assert!(md.contains("cargo run -p semicrf-bench --bin report"));

    // The time table: every engine, every T, the synthetic medians.
    assert!(md.contains("| T | cpu streaming | cpu scan | cpu exact | cuda streaming |"));
    assert!(md.contains("| T | cpu streaming | cpu scan | cpu exact |\n"));
    for s in sweep.t_shapes() {
        let t = s.len;
        let streaming = 900.0 * t as f64 / 1e6;
        assert!(
            md.lines()
                .any(|l| l.starts_with(&format!("| {t} | ")) && l.contains(&fmt3(streaming))),
            "no row for T = {t} with {}",
            fmt3(streaming)
        );
    }
    // The switch points, as the engines' own estimates put them, and auto-selection.
    for (p, pass) in ["forward", "forward+backward"].into_iter().enumerate() {
        let line = format!(
            "| {pass} | T = {} (refused from T = {}) | T = {} (refused from T = {}) | streaming |",
            scan_over[p] - 1,
            scan_over[p],
            exact_over[p] - 1,
            exact_over[p]
        );
        assert!(md.contains(&line), "missing {line}");
    }

    // The plots: linked, well formed, with every series, the budget and (where the switch
    // falls within the sweep) its marker.
    let names: Vec<&str> = out.svgs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "time-T-forward.svg",
            "time-T-forward-backward.svg",
            "memory-T-forward.svg",
            "memory-T-forward-backward.svg",
            "memory-K-forward-backward.svg"
        ]
    );
    let budget = human_bytes(DEFAULT_MEMORY_BUDGET);
    let last = *sweep.lens.last().unwrap();
    for (name, svg) in &out.svgs {
        assert!(
            md.contains(&format!("(benchmarks/{name})")),
            "{name} not linked"
        );
        assert_well_formed(svg, name);
        for series in ["cpu streaming", "cpu scan", "cpu exact"] {
            assert!(svg.contains(series), "{name}: no {series}");
        }
        if name.starts_with("time-T-forward.") {
            assert!(svg.contains("cuda streaming"), "{name}: no cuda streaming");
        }
        if name.starts_with("memory") {
            assert!(
                svg.contains(&format!("default memory budget ({budget})")),
                "{name}"
            );
            assert!(svg.contains("memory_required"), "{name}");
        }
        let p = usize::from(name.contains("backward"));
        if name.contains("-T-") && scan_over[p] <= last * 4 {
            let marker = format!("budget from T = {}", scan_over[p].min(exact_over[p]));
            assert!(svg.contains(&marker), "{name}: no marker {marker:?}");
        }
        assert!(svg.contains("T (positions per sequence)") || svg.contains("K (maximum"));
    }
}

fn fmt3(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        let digits = (2.0 - v.log10().floor()) as usize;
        format!("{v:.digits$}")
    }
}

#[test]
fn the_small_sweep_gives_tables_and_well_formed_plots() {
    check(&SMALL);
}

#[test]
fn the_full_sweep_marks_where_scan_and_exact_stop_fitting() {
    check(&FULL);
}

#[test]
fn bad_sources_are_errors_that_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let missing = criterion::load(&dir.path().join("nope"))
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("not found") && missing.contains("sweep/"),
        "{missing}"
    );
    let empty = criterion::load(dir.path()).unwrap_err().to_string();
    assert!(empty.contains("no benchmark"), "{empty}");
    let crit = dir.path().join("c");
    write_bench(&crit, "sweep/cpu/streaming/log", "B1_T32_K8_C4", 1.0);
    std::fs::write(
        crit.join("sweep_cpu_streaming_log/B1_T32_K8_C4/new/estimates.json"),
        "{}",
    )
    .unwrap();
    let broken = criterion::load(&crit).unwrap_err().to_string();
    assert!(
        broken.contains("estimates.json") && broken.contains("criterion"),
        "{broken}"
    );
    let mem = dir.path().join("m.json");
    std::fs::write(&mem, "[1, 2]").unwrap();
    let bad = memory::load(&mem).unwrap_err().to_string();
    assert!(bad.contains("not the memory binary's JSON"), "{bad}");
}
