//! Peak heap of the CPU engines against `memory_required` and the documented formula.
//!
//! ```text
//! cargo run --release -p semicrf-bench --bin memory -- [--t 1000,10000,100000,1000000]
//!     [--shapes S8] [--sweep full|small] [--json PATH]
//! ```
//!
//! For streaming forward (log) and forward+backward at `(B, K, C) = (1, 100, 24)` and each `T`,
//! and for scan and exact where their edge tensor fits in 4 GiB, prints the wall time, the
//! measured peak heap beyond inputs and outputs (counting allocator: the peak of live bytes
//! during the call minus what was live before, minus the bytes of the returned outputs), the
//! engine's `memory_required`, the yardstick formula of the bench README (`8·B·(K·C + C)` forward,
//! `8·B·(K·C + sqrt(T·K)·C)` with the backward) and their ratios; then the same as JSON
//! (to `PATH` when given). `--shapes` adds canonical shapes (e.g. S8: one timed run each).
//!
//! `--sweep NAME` measures the benchmark report's sweeps instead of the default T list
//! (`semicrf_bench::sweep`: the T-sweep at its `(B, K, C)` and the K-sweep at its `(B, T, C)`),
//! with scan and exact run only within the sweep's work limit and where their
//! `memory_required` fits the facade's default memory budget (a row says where they were not
//! run; its `memory_required` is still there), and writes the sweep, the date and the
//! machine into the JSON for the `report` binary.

use semicrf::{AnyEngine, DEFAULT_MEMORY_BUDGET, EngineInfo, LogSemiring, Parallelism};
use semicrf_bench::alloc::{CountingAlloc, measure, warm_up_threads};
use semicrf_bench::sweep::Sweep;
use semicrf_bench::{
    SEED, canonical, edges_fit, human_bytes, problem, run, streaming_formula_bytes,
};
use semicrf_core::{Op, Problem, Query, Shape};
use semicrf_cpu::{ExactEngine, ScanEngine, StreamingEngine};
use serde_json::{Value, json};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

struct Row {
    label: String,
    /// `T` or `K` for a row of the report's sweeps.
    sweep: Option<&'static str>,
    algo: &'static str,
    op: &'static str,
    shape: Shape,
    ms: f64,
    peak: u64,
    outputs: u64,
    required: u64,
    formula: u64,
    error: Option<String>,
}

fn measure_one(
    engine: &AnyEngine,
    algo: &'static str,
    label: &str,
    shape: Shape,
    backward: bool,
) -> Row {
    let owned = problem(shape, SEED);
    let view = owned.view().expect("generated problems are valid");
    let p = Problem::Structured(view);
    let op = op_of(backward);
    let query = Query::of(&p, op).with_threads(semicrf_cpu::threads(Parallelism::Rayon));
    let required = engine.memory_required(&query).unwrap_or(u64::MAX);
    let mut row = skipped(algo, label, shape, backward, required);
    if let Err(e) = engine.check(&query) {
        row.error = Some(e.to_string());
        return row;
    }
    let t0 = std::time::Instant::now();
    let (res, m) = measure(|| run(engine, &p, op));
    row.ms = t0.elapsed().as_secs_f64() * 1e3;
    match res {
        Ok(out) => {
            row.outputs = out;
            row.peak = m.peak.saturating_sub(out);
        }
        Err(e) => row.error = Some(e.to_string()),
    }
    row
}

fn op_of(backward: bool) -> Op {
    if backward {
        Op::Backward
    } else {
        Op::forward::<LogSemiring>()
    }
}

/// `memory_required` of `engine` at `shape` for the pass (f32 structured potentials).
fn required(engine: &AnyEngine, shape: Shape, backward: bool, threads: usize) -> u64 {
    let q = Query {
        shape,
        form: semicrf_core::Form::Structured {
            duration_dependent_transition: false,
            boundaries: [false, false],
        },
        op: op_of(backward),
        dtype_bytes: 4,
        threads,
    };
    engine.memory_required(&q).unwrap_or(u64::MAX)
}

/// A row for a measurement not (yet) made: no time, no peak.
fn skipped(algo: &'static str, label: &str, shape: Shape, backward: bool, required: u64) -> Row {
    Row {
        label: label.to_string(),
        sweep: None,
        algo,
        op: if backward {
            "forward+backward"
        } else {
            "forward"
        },
        shape,
        ms: f64::NAN,
        peak: 0,
        outputs: 0,
        required,
        formula: streaming_formula_bytes(shape, op_of(backward)),
        error: None,
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

fn parse_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
}

fn main() {
    let mut ts: Vec<usize> = vec![1_000, 10_000, 100_000, 1_000_000];
    let mut extra: Vec<String> = Vec::new();
    let mut json_path: Option<String> = None;
    let mut sweep_def: Option<&'static Sweep> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--t" => {
                ts = parse_list(&args.next().expect("--t takes a list"))
                    .iter()
                    .map(|x| x.parse::<f64>().expect("--t takes numbers") as usize)
                    .collect()
            }
            "--shapes" => extra = parse_list(&args.next().expect("--shapes takes a list")),
            "--json" => json_path = Some(args.next().expect("--json takes a path")),
            "--sweep" => {
                let name = args.next().expect("--sweep takes a name");
                sweep_def = Some(Sweep::by_name(&name).unwrap_or_else(|e| {
                    eprintln!("error: {e}");
                    std::process::exit(2)
                }));
            }
            "-h" | "--help" => {
                println!(
                    "usage: memory [--t 1000,10000,...] [--shapes S8,...] [--sweep full|small] \
                     [--json PATH]"
                );
                return;
            }
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(semicrf_bench::alloc::installed());
    warm_up_threads();

    let streaming = AnyEngine::Streaming(StreamingEngine::new());
    let scan = AnyEngine::Scan(ScanEngine::new());
    let exact = AnyEngine::Exact(ExactEngine::new());
    let threads = semicrf_cpu::threads(Parallelism::Rayon);
    let mut rows = Vec::new();
    // (label, shape, sweep): the report's sweeps, or the T list at (1, T, 100, 24).
    let mut cases: Vec<(String, Shape, Option<&'static str>)> = match sweep_def {
        Some(def) => {
            let t = def
                .t_shapes()
                .into_iter()
                .map(|s| (format!("T={}", s.len), s, Some("T")));
            let k = def
                .k_shapes()
                .into_iter()
                .map(|s| (format!("K={}", s.max_duration), s, Some("K")));
            t.chain(k).collect()
        }
        None => ts
            .iter()
            .map(|&t| (format!("T={t}"), Shape::new(1, t, 100, 24), None))
            .collect(),
    };
    for id in &extra {
        cases.push((
            id.to_uppercase(),
            canonical(id).expect("a canonical id S1..S9"),
            None,
        ));
    }
    for (label, shape, tag) in &cases {
        for backward in [false, true] {
            let mut r = measure_one(&streaming, "streaming", label, *shape, backward);
            eprintln!("done: streaming {} {} ({:.0} ms)", r.op, label, r.ms);
            r.sweep = *tag;
            rows.push(r);
            for (engine, name) in [(&scan, "scan"), (&exact, "exact")] {
                let r = if let Some(def) = sweep_def.filter(|_| tag.is_some()) {
                    // The report's sweeps: run where the default budget lets it run, within
                    // the sweep's work limit.
                    let need = required(engine, *shape, backward, threads);
                    if !def.edges_run(*shape) {
                        let mut r = skipped(name, label, *shape, backward, need);
                        r.error = Some("not run: over the sweep's work limit".into());
                        r
                    } else if need > DEFAULT_MEMORY_BUDGET {
                        let mut r = skipped(name, label, *shape, backward, need);
                        r.error = Some(format!(
                            "not run: needs {} > the default budget {}",
                            human_bytes(need),
                            human_bytes(DEFAULT_MEMORY_BUDGET)
                        ));
                        r
                    } else {
                        measure_one(engine, name, label, *shape, backward)
                    }
                } else if edges_fit(*shape) {
                    measure_one(engine, name, label, *shape, backward)
                } else {
                    continue;
                };
                eprintln!("done: {name} {} {} ({:.0} ms)", r.op, label, r.ms);
                rows.push(Row { sweep: *tag, ..r });
            }
        }
    }

    println!(
        "| case | (B, T, K, C) | algorithm | pass | time (ms) | peak beyond in/out | \
         memory_required | formula | peak / required | peak / formula |"
    );
    println!("|---|---|---|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let s = r.shape;
        let dims = format!("({}, {}, {}, {})", s.batch, s.len, s.max_duration, s.labels);
        match &r.error {
            Some(e) => println!(
                "| {} | {dims} | {} | {} | — | — | {} | {} | — | — ({e}) |",
                r.label,
                r.algo,
                r.op,
                human_bytes(r.required),
                human_bytes(r.formula)
            ),
            None => println!(
                "| {} | {dims} | {} | {} | {:.1} | {} | {} | {} | {:.3} | {:.3} |",
                r.label,
                r.algo,
                r.op,
                r.ms,
                human_bytes(r.peak),
                human_bytes(r.required),
                human_bytes(r.formula),
                ratio(r.peak, r.required),
                ratio(r.peak, r.formula)
            ),
        }
    }

    // Scaling in T of the streaming rows of the (1, T, 100, 24) sweep.
    let sweep = |op: &str| -> Vec<&Row> {
        rows.iter()
            .filter(|r| {
                r.algo == "streaming"
                    && r.op == op
                    && r.label.starts_with("T=")
                    && r.error.is_none()
            })
            .collect()
    };
    let fwd = sweep("forward");
    let bwd = sweep("forward+backward");
    let mut scaling = json!({});
    if fwd.len() >= 2 {
        let lo = fwd.iter().map(|r| r.peak).min().unwrap_or(0);
        let hi = fwd.iter().map(|r| r.peak).max().unwrap_or(0);
        println!(
            "\nstreaming forward: peak from {} to {} over T = {}..{} (max/min {:.3}; flat is 1)",
            human_bytes(lo),
            human_bytes(hi),
            fwd[0].shape.len,
            fwd[fwd.len() - 1].shape.len,
            ratio(hi, lo)
        );
        scaling["forward_max_over_min"] = json!(ratio(hi, lo));
    }
    if bwd.len() >= 2 {
        let per: Vec<f64> = bwd
            .iter()
            .map(|r| r.peak as f64 / (r.shape.len as f64).sqrt())
            .collect();
        let txt: Vec<String> = per.iter().map(|x| format!("{x:.0}")).collect();
        println!(
            "streaming forward+backward: peak / sqrt(T) = [{}] bytes (constant for sqrt(T) growth)",
            txt.join(", ")
        );
        scaling["backward_peak_over_sqrt_t"] = json!(per);
        // The part the backward adds over the forward at the same T (constants removed).
        let extra: Vec<f64> = bwd
            .iter()
            .filter_map(|r| {
                let f = fwd.iter().find(|f| f.shape == r.shape)?;
                Some((r.peak as f64 - f.peak as f64) / (r.shape.len as f64).sqrt())
            })
            .collect();
        let txt: Vec<String> = extra.iter().map(|x| format!("{x:.0}")).collect();
        println!(
            "streaming forward+backward: (peak - forward peak) / sqrt(T) = [{}] bytes",
            txt.join(", ")
        );
        scaling["backward_extra_over_sqrt_t"] = json!(extra);
    }

    // Where scan's and exact's materialised edges stop fitting a budget: memory_required of
    // every engine at the canonical shapes, and the crossover T at (B, K, C) = (1, 100, 24).
    const BUDGETS: [(u64, &str); 3] = [
        (1 << 30, "1 GiB"),
        (2 << 30, "2 GiB (the facade's default)"),
        (16 << 30, "16 GiB"),
    ];
    println!("\nmemory_required for forward+backward (f32 inputs) at the canonical shapes:");
    println!("| shape | (B, T, K, C) | streaming | scan | exact |");
    println!("|---|---|---:|---:|---:|");
    let mut canon = Vec::new();
    for c in semicrf_bench::CANONICAL {
        let q = Query {
            shape: c.shape,
            form: semicrf_core::Form::Structured {
                duration_dependent_transition: false,
                boundaries: [false, false],
            },
            op: Op::Backward,
            dtype_bytes: 4,
            threads,
        };
        let req = [&streaming, &scan, &exact].map(|e| e.memory_required(&q).unwrap_or(u64::MAX));
        let s = c.shape;
        println!(
            "| {} | ({}, {}, {}, {}) | {} | {} | {} |",
            c.id,
            s.batch,
            s.len,
            s.max_duration,
            s.labels,
            human_bytes(req[0]),
            human_bytes(req[1]),
            human_bytes(req[2])
        );
        canon.push(json!({"shape": c.id, "streaming": req[0], "scan": req[1], "exact": req[2]}));
    }
    let (xb, xk, xc) = sweep_def.map_or((1, 100, 24), |d| (d.batch, d.max_duration, d.labels));
    let mut crossover = Vec::new();
    for (budget, name) in BUDGETS {
        let mut line = format!("budget {name}: at (B, K, C) = ({xb}, {xk}, {xc})");
        let mut entry = json!({"budget": budget});
        for (engine, algo) in [
            (&streaming, "streaming"),
            (&scan, "scan"),
            (&exact, "exact"),
        ] {
            let need = |t: usize| {
                engine
                    .memory_required(&Query {
                        shape: Shape::new(xb, t, xk, xc),
                        form: semicrf_core::Form::Structured {
                            duration_dependent_transition: false,
                            boundaries: [false, false],
                        },
                        op: Op::Backward,
                        dtype_bytes: 4,
                        threads,
                    })
                    .unwrap_or(u64::MAX)
            };
            // The largest T (up to 1e9) whose forward+backward fits.
            let (mut lo, mut hi) = (0usize, 1_000_000_000usize);
            if need(hi) <= budget {
                lo = hi;
            }
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if need(mid) <= budget {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            line += &format!(", {algo} fits up to T = {lo}");
            entry[algo] = json!(lo);
        }
        println!("{line}");
        crossover.push(entry);
    }

    let json_rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "case": r.label,
                "sweep": r.sweep,
                "shape": [r.shape.batch, r.shape.len, r.shape.max_duration, r.shape.labels],
                "algorithm": r.algo,
                "pass": r.op,
                "time_ms": if r.ms.is_finite() { json!(r.ms) } else { Value::Null },
                "peak_beyond_inputs_outputs": r.peak,
                "outputs": r.outputs,
                "memory_required": r.required,
                "formula": r.formula,
                "error": r.error,
            })
        })
        .collect();
    let doc = json!({
        "what": "peak heap beyond inputs and outputs (counting allocator), f32 inputs",
        "date_utc": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "machine": semicrf_bench::report::machine(),
        "sweep": sweep_def.map(|d| json!({
            "name": d.name,
            "t": {"batch": d.batch, "max_duration": d.max_duration, "labels": d.labels,
                  "lens": d.lens},
            "k": {"batch": d.batch, "len": d.k_len, "labels": d.labels,
                  "durations": d.durations},
        })),
        "threads": rayon::current_num_threads(),
        "rows": json_rows,
        "scaling": scaling,
        "canonical_memory_required_backward": canon,
        "largest_t_within_budget": {"batch": xb, "max_duration": xk, "labels": xc,
                                    "budgets": crossover},
    });
    let text = serde_json::to_string_pretty(&doc).expect("serialisable");
    match json_path {
        Some(p) => {
            std::fs::write(&p, text + "\n").expect("writable JSON path");
            println!("\nJSON written to {p}");
        }
        None => println!("\n{text}"),
    }
}
