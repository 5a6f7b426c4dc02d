//! What every algorithm's module shares: which shapes run (the canonical shapes, or the
//! report's T-sweep), how long criterion samples them, and the one-off peak-memory line
//! printed before a shape is timed.

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use semicrf::{AnyEngine, DEFAULT_MEMORY_BUDGET, EngineInfo, LogSemiring, Parallelism};
use semicrf_bench::alloc::{measure, warm_up_threads};
use semicrf_bench::sweep::Sweep;
use semicrf_bench::{
    CANONICAL, EDGE_LIMIT_BYTES, SEED, bench_id, edges_fit, human_bytes, problem, shape_label,
};
use semicrf_core::{Form, Op, Problem, Query, Shape, edge_tensor_bytes};

/// A pass that is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// `forward(Log)`: log Z.
    Forward,
    /// `backward`: log Z, gradients and marginals.
    Backward,
}

impl Pass {
    fn label(self) -> &'static str {
        match self {
            Pass::Forward => "log",
            Pass::Backward => "log_backward",
        }
    }
    fn op(self) -> Op {
        match self {
            Pass::Forward => Op::forward::<LogSemiring>(),
            Pass::Backward => Op::Backward,
        }
    }
    /// Rough cost relative to a forward pass.
    fn factor(self) -> f64 {
        match self {
            Pass::Forward => 1.0,
            Pass::Backward => 3.0,
        }
    }
}

/// How an algorithm is benchmarked.
pub struct Plan<'a> {
    /// `cpu` or `cuda`: the first part of every id.
    pub device: &'static str,
    /// `streaming`, `scan`, `exact`.
    pub algo: &'static str,
    /// The engine.
    pub engine: &'a AnyEngine,
    /// The algorithm materialises edges: skip shapes where the whole `B·T·K·C²` edge tensor
    /// and the engine's `memory_required` both exceed [`EDGE_LIMIT_BYTES`] (an engine that
    /// materialises one sequence at a time may fit where the whole tensor does not).
    pub materialises_edges: bool,
    /// Inner-loop terms of one forward pass at a shape (to size the sampling).
    pub work: fn(Shape) -> f64,
    /// Times one call on the device's own clock (CUDA events around the call on its
    /// stream); `None`: criterion's wall clock.
    pub timed: Option<&'a Clock<'a>>,
}

/// Runs a call and returns how long it took.
pub type Clock<'a> = dyn Fn(&mut dyn FnMut()) -> Duration + 'a;

/// Above this estimated work (terms × pass factor) a shape is skipped unless
/// `SEMICRF_BENCH_FULL=1`: S8 forward (2.5e9 terms) runs, S8 forward+backward does not.
const WORK_LIMIT: f64 = 3.0e9;

/// The filter given to the bench binary (`cargo bench -- FILTER`), read here too so that
/// shapes it excludes are not even built or measured. Criterion treats it as a regular
/// expression; plain words and ids (the usual use) match as substrings here, and with
/// `--exact` as the whole id; a filter with regular-expression syntax selects everything here.
fn selected(id: &str) -> bool {
    const WITH_VALUE: [&str; 14] = [
        "--save-baseline",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--sample-size",
        "--warm-up-time",
        "--measurement-time",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--output-format",
        "--profile-time",
        "--plotting-backend",
    ];
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exact = args.iter().any(|a| a == "--exact");
    let mut filter = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if WITH_VALUE.contains(&a.as_str()) || a == "--color" {
            i += 2;
            continue;
        }
        if !a.starts_with('-') {
            filter = Some(a.clone());
        }
        i += 1;
    }
    match filter {
        None => true,
        Some(f) if exact => id == f,
        // A real regular expression: let criterion decide (the shape is built and measured
        // once even if criterion then skips it).
        Some(f) if f.contains(|c: char| "()[]|*+?^$\\{}".contains(c)) => true,
        Some(f) => id.contains(&f),
    }
}

fn full() -> bool {
    std::env::var("SEMICRF_BENCH_FULL").is_ok_and(|v| v == "1")
}

fn run(engine: &AnyEngine, p: &Problem<'_, f32>, pass: Pass) -> Result<u64, String> {
    semicrf_bench::run(engine, p, pass.op()).map_err(|e| e.to_string())
}

/// `memory_required` of `engine` for `pass` on the benches' problem of shape `s` (f32
/// structured potentials, static transition), planned for rayon's threads; `u64::MAX` if the
/// engine cannot say.
fn required(engine: &AnyEngine, s: Shape, pass: Pass) -> u64 {
    let planned = Query {
        shape: s,
        form: Form::Structured {
            duration_dependent_transition: false,
            boundaries: [false, false],
        },
        op: pass.op(),
        dtype_bytes: 4,
        threads: semicrf_cpu::threads(Parallelism::Rayon),
    };
    engine.memory_required(&planned).unwrap_or(u64::MAX)
}

/// Benchmarks `plan` at every canonical shape S1–S8 that fits, forward then forward+backward.
pub fn bench(c: &mut Criterion, plan: &Plan<'_>) {
    warm_up_threads();
    for pass in [Pass::Forward, Pass::Backward] {
        let mut group =
            c.benchmark_group(format!("{}/{}/{}", plan.device, plan.algo, pass.label()));
        for can in CANONICAL.iter().filter(|c| c.id != "S9") {
            let s = can.shape;
            let id = bench_id(plan.device, plan.algo, pass.label(), s);
            if !selected(&id) {
                continue;
            }
            let required = required(plan.engine, s, pass);
            if plan.materialises_edges && !edges_fit(s) && required > EDGE_LIMIT_BYTES {
                eprintln!(
                    "note: {id} ({}) skipped: its edge tensor needs {} and the engine {} \
                     (limit {})",
                    can.id,
                    human_bytes(edge_tensor_bytes(s)),
                    human_bytes(required),
                    human_bytes(EDGE_LIMIT_BYTES)
                );
                continue;
            }
            let work = (plan.work)(s) * pass.factor();
            // A GPU runs S8 forward+backward in seconds.
            if work > WORK_LIMIT && !full() && plan.device == "cpu" {
                eprintln!(
                    "note: {id} ({}) skipped: ~{work:.1e} terms per iteration; \
                     SEMICRF_BENCH_FULL=1 runs it (or see the memory binary)",
                    can.id
                );
                continue;
            }
            time_shape(
                &mut group,
                plan,
                pass,
                s,
                &id,
                can.id,
                Sampling::by_work(work),
            );
        }
        group.finish();
    }
}

/// How criterion samples one benchmark.
#[derive(Clone, Copy, Debug)]
pub enum Sampling {
    /// Above ~2·10⁸ terms per iteration: 10 flat samples over 5 s.
    Long,
    /// Above ~2·10⁷ terms: 10 flat samples over 3 s.
    Medium,
    /// 20 samples over 3 s.
    Short,
    /// The small sweep for CI: 10 samples over 0.2 s.
    Quick,
}

impl Sampling {
    /// By estimated work (terms × pass factor) per iteration.
    pub fn by_work(work: f64) -> Sampling {
        if work > 2e8 {
            Sampling::Long
        } else if work > 2e7 {
            Sampling::Medium
        } else {
            Sampling::Short
        }
    }

    fn apply(self, group: &mut BenchmarkGroup<'_, WallTime>) {
        let (mode, samples, warm_up, measurement) = match self {
            Sampling::Long => (SamplingMode::Flat, 10, 500, 5000),
            Sampling::Medium => (SamplingMode::Flat, 10, 1000, 3000),
            Sampling::Short => (SamplingMode::Auto, 20, 1000, 3000),
            Sampling::Quick => (SamplingMode::Flat, 10, 50, 200),
        };
        group
            .sampling_mode(mode)
            .sample_size(samples)
            .warm_up_time(Duration::from_millis(warm_up))
            .measurement_time(Duration::from_millis(measurement));
    }
}

/// Builds the problem of shape `s`, makes one measured call (warm-up, smoke test and the
/// `memory:` line on stderr) and times `pass` in `group` under the parameter
/// `B{B}_T{T}_K{K}_C{C}`, so that the benchmark's id is `id`. `tag` names the shape in notes.
pub fn time_shape(
    group: &mut BenchmarkGroup<'_, WallTime>,
    plan: &Plan<'_>,
    pass: Pass,
    s: Shape,
    id: &str,
    tag: &str,
    sampling: Sampling,
) {
    let threads = semicrf_cpu::threads(Parallelism::Rayon);
    let owned = problem(s, SEED);
    let view = owned.view().expect("generated problems are valid");
    let p = Problem::Structured(view);
    let query = Query::of(&p, pass.op()).with_threads(threads);
    if let Err(e) = plan.engine.check(&query) {
        eprintln!("note: {id} ({tag}) skipped: {e}");
        return;
    }
    let required = plan.engine.memory_required(&query).unwrap_or(u64::MAX);
    // One measured call: warm-up, smoke test and the peak-memory line.
    let (res, m) = measure(|| run(plan.engine, &p, pass));
    let out = match res {
        Ok(out) => out,
        Err(e) => {
            eprintln!("note: {id} ({tag}) skipped: {e}");
            return;
        }
    };
    eprintln!(
        "memory: {id} ({tag}): peak heap beyond inputs and outputs {} (outputs {}), \
         memory_required {}",
        human_bytes(m.peak.saturating_sub(out)),
        human_bytes(out),
        human_bytes(required)
    );
    group.throughput(Throughput::Elements((s.batch * s.len) as u64));
    sampling.apply(group);
    group.bench_function(
        BenchmarkId::from_parameter(shape_label(s)),
        |b| match plan.timed {
            Some(timed) => b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        timed(&mut || {
                            std::hint::black_box(run(plan.engine, &p, pass)).ok();
                        })
                    })
                    .sum()
            }),
            None => b.iter(|| run(plan.engine, &p, pass)),
        },
    );
}

/// Benchmarks `plan` over the T-sweep of the sweep named by `SEMICRF_BENCH_SWEEP`
/// (`semicrf_bench::sweep`), forward then forward+backward, under the ids
/// `sweep/{device}/{algo}/{semiring}/B{B}_T{T}_K{K}_C{C}`. An algorithm that materialises
/// edges runs only within the sweep's work limit and where its `memory_required` fits the
/// facade's default memory budget (what `SemiCrf::select` would let it run); the report marks
/// where the budget stops it.
pub fn sweep(c: &mut Criterion, plan: &Plan<'_>) {
    let def = match Sweep::from_env() {
        Ok(def) => def,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    warm_up_threads();
    for pass in [Pass::Forward, Pass::Backward] {
        let mut group = c.benchmark_group(format!(
            "sweep/{}/{}/{}",
            plan.device,
            plan.algo,
            pass.label()
        ));
        for s in def.t_shapes() {
            let id = format!(
                "sweep/{}",
                bench_id(plan.device, plan.algo, pass.label(), s)
            );
            if !selected(&id) {
                continue;
            }
            let tag = format!("{} sweep, T = {}", def.name, s.len);
            if plan.materialises_edges && !def.edges_run(s) && plan.device == "cpu" {
                eprintln!(
                    "note: {id} ({tag}) skipped: over the sweep's work limit for scan and exact"
                );
                continue;
            }
            if plan.materialises_edges {
                let required = required(plan.engine, s, pass);
                if required > DEFAULT_MEMORY_BUDGET {
                    eprintln!(
                        "note: {id} ({tag}) skipped: needs {} > the default budget {}",
                        human_bytes(required),
                        human_bytes(DEFAULT_MEMORY_BUDGET)
                    );
                    continue;
                }
            }
            let sampling = if def.name == "small" {
                Sampling::Quick
            } else {
                Sampling::by_work((plan.work)(s) * pass.factor())
            };
            time_shape(&mut group, plan, pass, s, &id, &tag, sampling);
        }
        group.finish();
    }
}
