//! Writes a benchmark problem for the peer harness, with our own results and timings.
//!
//! ```text
//! cargo run --release -p semicrf-bench --bin export_problem -- --shape S2 [--seed N]
//!     [--out DIR] [--repeats 5] [--engine streaming|scan|exact|cuda] [--no-time]
//! cargo run --release -p semicrf-bench --bin export_problem -- --dims 16,256,15,8 ...
//! ```
//!
//! Writes two files into `DIR` (default `.`), named by the shape label (`B16_T256_K15_C8`):
//!
//! - `problem_{label}.json`: the problem of [`semicrf_bench::problem`] in the interchange format
//!   of the model page (`semicrf_core::model` §10: `scores`, `transition`, `duration`, `start`, `lengths`, `max_duration`), every
//!   value the exact `f64` widening of the `f32` input;
//! - `ours_{label}.json`: our log Z per sequence (f32 inputs), the gradient of `Σ_b log Z_b`
//!   with respect to `scores` (position marginals) and `duration`, and the median wall time of
//!   `repeats` forward (log) and forward+backward calls after one warm-up call, in ms, with
//!   every run's time and the number of rayon threads. `--engine cuda` (feature `cuda`) runs
//!   the CUDA streaming engine on device 0 instead and names the file `ours_cuda_{label}.json`;
//!   its times are whole calls (inputs copied in, results copied out), as a caller sees them,
//!   and the file adds the device memory of one forward and one forward+backward call
//!   (`*_peak_bytes`: bytes allocated; `*_driver_bytes`: the fall of free device memory;
//!   `*_required_bytes`: `memory_required`). `--engine cuda-exact` runs the CUDA exact engine
//!   (edge kernels, structured input materialised on the host) into `ours_cuda-exact_{label}.json`.

use semicrf::{AnyEngine, Engine, EngineInfo, LogSemiring};
use semicrf_bench::{SEED, canonical, median, ones, problem, shape_label, time_ms};
use semicrf_core::{Problem, Shape};
use semicrf_cpu::{ExactEngine, ScanEngine, StreamingEngine};
use serde_json::{Value, json};

fn to_json(a: &ndarray::ArrayD<f32>) -> Value {
    fn rec(v: ndarray::ArrayViewD<'_, f32>) -> Value {
        if v.ndim() == 0 {
            return json!(v.iter().next().map(|&x| x as f64));
        }
        if v.ndim() == 1 {
            return Value::Array(v.iter().map(|&x| json!(x as f64)).collect());
        }
        Value::Array(v.outer_iter().map(rec).collect())
    }
    rec(a.view())
}

fn to_json_f64(a: ndarray::ArrayViewD<'_, f64>) -> Value {
    if a.ndim() == 1 {
        return Value::Array(a.iter().map(|&x| json!(x)).collect());
    }
    Value::Array(a.outer_iter().map(to_json_f64).collect())
}

fn main() {
    let mut shape: Option<(String, Shape)> = None;
    let mut seed = SEED;
    let mut out = String::from(".");
    let mut repeats = 5usize;
    let mut engine_name = String::from("streaming");
    let mut timed = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} takes a value"));
        match a.as_str() {
            "--shape" => {
                let id = val();
                let s = canonical(&id).unwrap_or_else(|| panic!("unknown shape {id}"));
                shape = Some((id.to_uppercase(), s));
            }
            "--dims" => {
                let d: Vec<usize> = val()
                    .split(',')
                    .map(|x| x.trim().parse().expect("--dims B,T,K,C"))
                    .collect();
                assert_eq!(d.len(), 4, "--dims B,T,K,C");
                let s = Shape::new(d[0], d[1], d[2], d[3]);
                shape = Some((shape_label(s), s));
            }
            "--seed" => seed = val().parse().expect("--seed takes an integer"),
            "--out" => out = val(),
            "--repeats" => repeats = val().parse().expect("--repeats takes an integer"),
            "--engine" => engine_name = val(),
            "--no-time" => timed = false,
            other => panic!("unknown argument {other}"),
        }
    }
    let (id, s) = shape.expect("--shape S1..S9 or --dims B,T,K,C");
    let label = shape_label(s);
    std::fs::create_dir_all(&out).expect("output directory");

    let owned = problem(s, seed);
    let opt = |a: &Option<ndarray::ArrayD<f32>>| a.as_ref().map_or(Value::Null, to_json);
    let prob = json!({
        "scores": to_json(&owned.scores),
        "transition": opt(&owned.transition),
        "duration": opt(&owned.duration),
        "start": opt(&owned.start),
        "end": Value::Null,
        "begin_boundary": Value::Null,
        "end_boundary": Value::Null,
        "lengths": owned.lengths,
        "max_duration": owned.max_duration,
    });
    let ppath = format!("{out}/problem_{label}.json");
    std::fs::write(&ppath, serde_json::to_string(&prob).expect("json")).expect("writable");

    let engine = match engine_name.as_str() {
        "streaming" => AnyEngine::Streaming(StreamingEngine::new()),
        "scan" => AnyEngine::Scan(ScanEngine::new()),
        "exact" => AnyEngine::Exact(ExactEngine::new()),
        #[cfg(feature = "cuda")]
        "cuda" => AnyEngine::Cuda(
            semicrf_cuda::CudaEngine::usable_or_skip(0).expect("a usable GPU for --engine cuda"),
        ),
        #[cfg(feature = "cuda")]
        "cuda-exact" => {
            semicrf_cuda::CudaEngine::usable_or_skip(0).expect("a usable GPU for --engine cuda");
            AnyEngine::Cuda(semicrf_cuda::CudaEngine::new(
                semicrf_core::Algorithm::Exact,
                0,
            ))
        }
        other => panic!("unknown engine {other}"),
    };
    let p = Problem::Structured(owned.view().expect("valid"));
    let up = ones(s.batch);
    let log_z = engine
        .forward::<LogSemiring>(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", engine.name()));
    let bwd = engine
        .backward(&p, &up)
        .unwrap_or_else(|e| panic!("{}: {e}", engine.name()));
    let (mut fwd_ms, mut bwd_ms) = (Vec::new(), Vec::new());
    if timed {
        fwd_ms = time_ms(repeats, || engine.forward::<LogSemiring>(&p));
        bwd_ms = time_ms(repeats, || engine.backward(&p, &up));
    }
    let memory = device_memory(&engine, &p, &up);
    let grad_scores = bwd
        .grad
        .scores
        .as_ref()
        .map(|g| to_json_f64(g.view().into_dyn()));
    let grad_duration = bwd
        .grad
        .duration
        .as_ref()
        .map(|g| to_json_f64(g.view().into_dyn()));
    let ours = json!({
        "shape_id": id,
        "shape": [s.batch, s.len, s.max_duration, s.labels],
        "seed": seed,
        "engine": engine.name(),
        "dtype": "f32",
        "threads": rayon::current_num_threads(),
        "log_z": log_z,
        "log_z_backward": bwd.log_z,
        "grad_scores": grad_scores,
        "grad_duration": grad_duration,
        "forward_ms": if timed { json!(median(&mut fwd_ms.clone())) } else { Value::Null },
        "forward_runs_ms": fwd_ms,
        "backward_ms": if timed { json!(median(&mut bwd_ms.clone())) } else { Value::Null },
        "backward_runs_ms": bwd_ms,
        "repeats": repeats,
    });
    let mut ours = ours;
    if let (Some(m), Some(o)) = (memory, ours.as_object_mut()) {
        o.extend(m);
    }
    let opath = if engine_name.starts_with("cuda") {
        format!("{out}/ours_{engine_name}_{label}.json")
    } else {
        format!("{out}/ours_{label}.json")
    };
    std::fs::write(&opath, serde_json::to_string(&ours).expect("json")).expect("writable");
    println!("{ppath}\n{opath}");
}

/// The device memory of one forward and one forward+backward call of a CUDA engine.
#[cfg(feature = "cuda")]
fn device_memory(
    engine: &AnyEngine,
    p: &Problem<'_, f32>,
    up: &[f64],
) -> Option<serde_json::Map<String, Value>> {
    use semicrf_core::{Op, Query};
    let AnyEngine::Cuda(e) = engine else {
        return None;
    };
    fn ok<T>(name: &str, r: semicrf_core::Result<T>) -> T {
        r.unwrap_or_else(|err| panic!("{name}: {err}"))
    }
    let name = e.name();
    let (z, fwd) = ok(&name, e.measure_memory(|| e.forward::<LogSemiring>(p)));
    let (g, bwd) = ok(&name, e.measure_memory(|| e.backward(p, up)));
    ok(&name, z);
    ok(&name, g);
    let req = |op| ok(&name, e.memory_required(&Query::of(p, op)));
    let mut m = serde_json::Map::new();
    m.insert("forward_peak_bytes".into(), json!(fwd.allocated));
    m.insert("forward_driver_bytes".into(), json!(fwd.driver));
    m.insert(
        "forward_required_bytes".into(),
        json!(req(Op::forward::<LogSemiring>())),
    );
    m.insert("backward_peak_bytes".into(), json!(bwd.allocated));
    m.insert("backward_driver_bytes".into(), json!(bwd.driver));
    m.insert("backward_required_bytes".into(), json!(req(Op::Backward)));
    Some(m)
}

#[cfg(not(feature = "cuda"))]
fn device_memory(
    _: &AnyEngine,
    _: &Problem<'_, f32>,
    _: &[f64],
) -> Option<serde_json::Map<String, Value>> {
    None
}
