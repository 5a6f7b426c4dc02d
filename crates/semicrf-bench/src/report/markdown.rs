//! The page: sources, shapes, where scan and exact stop fitting, time and memory against `T`,
//! memory against `K`, the canonical shapes and the peers, with the charts it links to.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use semicrf::{Backend, DEFAULT_MEMORY_BUDGET, LogSemiring, Op};
use semicrf_core::{Shape, human_bytes};

use super::plot::{Chart, Marker, Series, svg};
use super::switch::{first_over, select};
use super::tables::{canonical_section, peers_section, sources};
use super::{Error, Inputs, MemoryRow, Report, Timing};
use crate::CANONICAL;

/// A pass as criterion (`log`, `log_backward`) and the `memory` binary name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pass {
    semiring: &'static str,
    memory: &'static str,
    title: &'static str,
    file: &'static str,
    backward: bool,
}

const PASSES: [Pass; 2] = [
    Pass {
        semiring: "log",
        memory: "forward",
        title: "forward (log Z)",
        file: "forward",
        backward: false,
    },
    Pass {
        semiring: "log_backward",
        memory: "forward+backward",
        title: "forward+backward (log Z, gradients, marginals)",
        file: "forward-backward",
        backward: true,
    },
];

impl Pass {
    fn op(self) -> Op {
        if self.backward {
            Op::Backward
        } else {
            Op::forward::<LogSemiring>()
        }
    }
}

const ALGOS: [&str; 3] = ["streaming", "scan", "exact"];

/// The sort rank and colour of an engine: CPU algorithms first, then devices.
fn rank(device: &str, algo: &str) -> (usize, usize) {
    let d = match device {
        "cpu" => 0,
        "cuda" => 1,
        "cuda-log" => 2,
        _ => 3,
    };
    let a = ALGOS.iter().position(|x| *x == algo).unwrap_or(ALGOS.len());
    (d, a)
}

fn color_of(device: &str, algo: &str) -> usize {
    match rank(device, algo) {
        (0, a) => a,
        (d, _) => 2 + d,
    }
}

/// `12.3 ms`, `0.0456 ms`: three significant digits.
pub(super) fn ms(v: f64) -> String {
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

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Where scan and exact stop fitting the default budget, per pass (`None`: not within the
/// largest problem the search builds).
struct Switches {
    /// `[pass][scan, exact]`.
    first_over: [[Option<usize>; 2]; 2],
}

impl Switches {
    fn find(base: Shape, from: usize) -> Result<Switches, Error> {
        let mut first = [[None; 2]; 2];
        for (p, pass) in PASSES.iter().enumerate() {
            for (a, backend) in [Backend::Scan, Backend::Exact].into_iter().enumerate() {
                first[p][a] = first_over(base, from, pass.op(), backend)?;
            }
        }
        Ok(Switches { first_over: first })
    }

    /// The markers of a chart over `lens` (those within a factor 4 of its range).
    fn markers(&self, p: usize, lens: &[usize]) -> Vec<Marker> {
        let (lo, hi) = (lens[0] as f64 / 4.0, lens[lens.len() - 1] as f64 * 4.0);
        let budget = human_bytes(DEFAULT_MEMORY_BUDGET);
        let [scan, exact] = self.first_over[p];
        let mut out = Vec::new();
        let mut push = |t: usize, who: &str| {
            if (lo..=hi).contains(&(t as f64)) {
                out.push(Marker {
                    x: t as f64,
                    label: format!("{who} over the {budget} budget from T = {t}"),
                });
            }
        };
        match (scan, exact) {
            (Some(s), Some(e)) if s == e => push(s, "scan and exact"),
            _ => {
                if let Some(s) = scan {
                    push(s, "scan");
                }
                if let Some(e) = exact {
                    push(e, "exact");
                }
            }
        }
        out
    }

    fn text(t: Option<usize>) -> String {
        match t {
            Some(t) => format!("T = {t}"),
            None => "beyond the largest problem searched".into(),
        }
    }
}

fn sweep_timings(inputs: &Inputs, pass: Pass) -> Vec<&Timing> {
    inputs
        .criterion
        .data
        .iter()
        .filter(|t| t.sweep && t.semiring == pass.semiring && inputs.sweep.in_t_sweep(t.shape))
        .collect()
}

/// `(device, algo)` of the engines timed, in report order.
fn engines(timings: &[&Timing]) -> Vec<(String, String)> {
    let set: BTreeSet<((usize, usize), String, String)> = timings
        .iter()
        .map(|t| (rank(&t.device, &t.algo), t.device.clone(), t.algo.clone()))
        .collect();
    set.into_iter().map(|(_, d, a)| (d, a)).collect()
}

fn peer_sweep_points(inputs: &Inputs, pass: Pass) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    let sources = [&inputs.peers_cpu, &inputs.peers_gpu];
    for (i, src) in sources.into_iter().flatten().enumerate() {
        for r in src
            .data
            .iter()
            .filter(|r| inputs.sweep.in_t_sweep(r.shape) && !r.engine.starts_with("ours"))
        {
            let v = if pass.backward {
                r.backward_ms
            } else {
                r.forward_ms
            };
            let Some(v) = v else { continue };
            let name = format!("{} ({})", r.engine, ["CPU run", "GPU run"][i]);
            match out.iter_mut().find(|s| s.name == name) {
                Some(s) => s.points.push((r.shape.len as f64, v)),
                None => out.push(Series {
                    name,
                    points: vec![(r.shape.len as f64, v)],
                    dashed: false,
                    color: 5 + out.len(),
                }),
            }
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

fn time_chart(inputs: &Inputs, p: usize, switches: &Switches) -> Result<Chart, Error> {
    let pass = PASSES[p];
    let timings = sweep_timings(inputs, pass);
    let mut series = Vec::new();
    for (device, algo) in engines(&timings) {
        let points = timings
            .iter()
            .filter(|t| t.device == device && t.algo == algo)
            .map(|t| (t.shape.len as f64, t.median_ns / 1e6))
            .collect();
        series.push(Series {
            name: format!("{device} {algo}"),
            points,
            dashed: false,
            color: color_of(&device, &algo),
        });
    }
    series.extend(peer_sweep_points(inputs, pass));
    if series.is_empty() {
        return Err(Error::new(format!(
            "the criterion run has no sweep/ benchmark of the {} sweep ({}) for the {} pass",
            inputs.sweep.name,
            t_shape_text(inputs),
            pass.memory
        )));
    }
    let s = inputs.sweep;
    Ok(Chart {
        title: format!(
            "Time against T, {}, (B, K, C) = ({}, {}, {})",
            pass.memory, s.batch, s.max_duration, s.labels
        ),
        x_desc: "T (positions per sequence)".into(),
        y_desc: "median time per call (ms)".into(),
        series,
        markers: switches.markers(p, s.lens),
        levels: vec![],
    })
}

fn budget_level() -> (f64, String) {
    (
        mib(DEFAULT_MEMORY_BUDGET),
        format!(
            "default memory budget ({})",
            human_bytes(DEFAULT_MEMORY_BUDGET)
        ),
    )
}

/// Measured peaks (solid) and `memory_required` (dashed) of each algorithm over `rows`, with
/// `x` the swept dimension.
fn memory_series(rows: &[&MemoryRow], x: fn(Shape) -> usize) -> Vec<Series> {
    let mut series = Vec::new();
    for (a, algo) in ALGOS.iter().enumerate() {
        let mine: Vec<&&MemoryRow> = rows.iter().filter(|r| r.algo == *algo).collect();
        let peaks: Vec<(f64, f64)> = mine
            .iter()
            .filter_map(|r| Some((x(r.shape) as f64, mib(r.peak?))))
            .filter(|p| p.1 > 0.0)
            .collect();
        let required: Vec<(f64, f64)> = mine
            .iter()
            .filter(|r| r.required < u64::MAX)
            .map(|r| (x(r.shape) as f64, mib(r.required)))
            .collect();
        if !peaks.is_empty() {
            series.push(Series {
                name: format!("cpu {algo}: measured peak"),
                points: peaks,
                dashed: false,
                color: a,
            });
        }
        if !required.is_empty() {
            series.push(Series {
                name: format!("cpu {algo}: memory_required"),
                points: required,
                dashed: true,
                color: a,
            });
        }
    }
    series
}

fn memory_rows<'a>(inputs: &'a Inputs, sweep: &str, pass: &str) -> Vec<&'a MemoryRow> {
    let Some(m) = &inputs.memory else {
        return vec![];
    };
    let s = inputs.sweep;
    let mut rows: Vec<&MemoryRow> = m
        .data
        .rows
        .iter()
        .filter(|r| r.sweep.as_deref() == Some(sweep) && r.pass == pass)
        .filter(|r| match sweep {
            "T" => s.in_t_sweep(r.shape),
            _ => s.in_k_sweep(r.shape),
        })
        .collect();
    rows.sort_by_key(|r| (r.shape.len, r.shape.max_duration));
    rows
}

fn t_shape_text(inputs: &Inputs) -> String {
    let s = inputs.sweep;
    format!(
        "(B, T, K, C) = ({}, T, {}, {})",
        s.batch, s.max_duration, s.labels
    )
}

fn k_shape_text(inputs: &Inputs) -> String {
    let s = inputs.sweep;
    format!("(B, T, K, C) = ({}, {}, K, {})", s.batch, s.k_len, s.labels)
}

fn shapes(out: &mut String, inputs: &Inputs) {
    let s = inputs.sweep;
    let _ = writeln!(out, "## Shapes\n");
    let _ = writeln!(
        out,
        "A shape is `(B, T, K, C)`: batch, positions per sequence, maximum segment duration \
         (inclusive) and labels. Every problem is `semicrf_bench::problem(shape, SEED)`: \
         seeded random f32 structured potentials (emission scores, a static `(C, C)` \
         transition, `(K, C)` duration scores and a start vector), every sequence of length \
         `T`.\n"
    );
    let _ = writeln!(
        out,
        "**The canonical shapes** S1–S9 (`semicrf_bench::CANONICAL`), used by the criterion \
         suite and the peer comparison:\n"
    );
    let _ = writeln!(out, "| id | (B, T, K, C) |");
    let _ = writeln!(out, "|---|---|");
    for c in CANONICAL {
        let sh = c.shape;
        let _ = writeln!(
            out,
            "| {} | ({}, {}, {}, {}) |",
            c.id, sh.batch, sh.len, sh.max_duration, sh.labels
        );
    }
    let lens: Vec<String> = s.lens.iter().map(|t| t.to_string()).collect();
    let ks: Vec<String> = s.durations.iter().map(|k| k.to_string()).collect();
    let _ = writeln!(
        out,
        "\n**The `{}` sweep** (`semicrf_bench::sweep`):\n\n\
         - the T-sweep, {}, T ∈ {{{}}}: criterion ids \
         `sweep/{{device}}/{{algo}}/{{semiring}}/B{}_T{{T}}_K{}_C{}` (`log`: forward, \
         `log_backward`: forward+backward);\n\
         - the K-sweep (memory only), {}, K ∈ {{{}}}.\n",
        s.name,
        t_shape_text(inputs),
        lens.join(", "),
        s.batch,
        s.max_duration,
        s.labels,
        k_shape_text(inputs),
        ks.join(", ")
    );
}

fn switch_section(out: &mut String, inputs: &Inputs, switches: &Switches) -> Result<(), Error> {
    let s = inputs.sweep;
    let budget = human_bytes(DEFAULT_MEMORY_BUDGET);
    let _ = writeln!(out, "## Where scan and exact stop fitting the budget\n");
    let _ = writeln!(
        out,
        "Scan and exact materialise the `(T, K, C, C)` edges of a sequence; streaming never \
         does. Asked of `semicrf::SemiCrf::select` with the default configuration (memory \
         budget {budget}, `DEFAULT_MEMORY_BUDGET`) at {}:\n",
        t_shape_text(inputs)
    );
    let _ = writeln!(
        out,
        "| pass | scan fits up to | exact fits up to | auto-selection at every T of the sweep |"
    );
    let _ = writeln!(out, "|---|---|---|---|");
    for (p, pass) in PASSES.iter().enumerate() {
        let mut picks = BTreeSet::new();
        for shape in s.t_shapes() {
            let pick = select(shape, pass.op(), Backend::Auto).map_err(|e| {
                Error::new(format!(
                    "auto-selection at {shape}: {}",
                    e.unwrap_or_else(|| "no engine fits the default budget".into())
                ))
            })?;
            picks.insert(pick);
        }
        let fits = |t: Option<usize>| match t {
            Some(t) => format!("T = {} (refused from T = {t})", t - 1),
            None => Switches::text(None),
        };
        let picks: Vec<String> = picks.into_iter().collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            pass.memory,
            fits(switches.first_over[p][0]),
            fits(switches.first_over[p][1]),
            picks.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "\nAuto-selection tries streaming, exact, scan in that order for structured input \
         (`Algorithm::default_preference`) and takes the first that fits, so it runs streaming \
         at every `T`; scan and exact are what a caller gets by forcing `Backend::Scan` or \
         `Backend::Exact`, and beyond the marked `T` the facade refuses them with \
         `Error::MemoryBudget`: only streaming can run there. The vertical line in the plots \
         marks that point.\n"
    );
    Ok(())
}

fn time_section(
    out: &mut String,
    inputs: &Inputs,
    svgs: &mut Vec<(String, String)>,
    switches: &Switches,
) -> Result<(), Error> {
    let _ = writeln!(out, "## Time against T\n");
    let _ = writeln!(
        out,
        "Median time per call (ms) at {}; `—`: not run. Scan and exact run only where their \
         work `B·T·K·C²` is at most {:.1e} terms (the sweep's limit: their time grows with their \
         memory, and near the budget one call takes minutes on a CPU) and within the budget.\n",
        t_shape_text(inputs),
        inputs.sweep.edge_work_limit as f64
    );
    for (p, pass) in PASSES.iter().enumerate() {
        let timings = sweep_timings(inputs, *pass);
        let engines = engines(&timings);
        let lens: BTreeSet<usize> = inputs
            .sweep
            .lens
            .iter()
            .copied()
            .chain(timings.iter().map(|t| t.shape.len))
            .collect();
        let _ = writeln!(out, "**{}**\n", pass.title);
        let head: Vec<String> = engines.iter().map(|(d, a)| format!("{d} {a}")).collect();
        let _ = writeln!(out, "| T | {} |", head.join(" | "));
        let _ = writeln!(out, "|---:|{}", "---:|".repeat(engines.len()));
        for t in lens {
            let cells: Vec<String> = engines
                .iter()
                .map(|(d, a)| {
                    timings
                        .iter()
                        .find(|x| x.device == *d && x.algo == *a && x.shape.len == t)
                        .map_or("—".into(), |x| ms(x.median_ns / 1e6))
                })
                .collect();
            let _ = writeln!(out, "| {t} | {} |", cells.join(" | "));
        }
        let chart = time_chart(inputs, p, switches)?;
        let file = format!("time-T-{}.svg", pass.file);
        let _ = writeln!(out, "\n![{}]({}/{file})\n", chart.title, inputs.img_dir);
        svgs.push((file, svg(&chart)?));
    }
    Ok(())
}

fn memory_table(out: &mut String, rows: &[&MemoryRow], x: fn(Shape) -> usize, name: &str) {
    let xs: BTreeSet<usize> = rows.iter().map(|r| x(r.shape)).collect();
    let algos: Vec<&str> = ALGOS
        .iter()
        .copied()
        .filter(|a| rows.iter().any(|r| r.algo == *a))
        .collect();
    let head: Vec<String> = algos
        .iter()
        .map(|a| format!("{a} peak | {a} memory_required"))
        .collect();
    let _ = writeln!(out, "| {name} | {} |", head.join(" | "));
    let _ = writeln!(out, "|---:|{}", "---:|---:|".repeat(algos.len()));
    for v in xs {
        let mut cells = Vec::new();
        for a in &algos {
            match rows.iter().find(|r| r.algo == *a && x(r.shape) == v) {
                Some(r) => {
                    cells.push(match (r.peak, &r.error) {
                        (Some(p), _) => human_bytes(p),
                        (None, Some(e)) if e.starts_with("not run") => "not run".into(),
                        (None, _) => "error".into(),
                    });
                    cells.push(human_bytes(r.required));
                }
                None => cells.extend(["—".to_string(), "—".to_string()]),
            }
        }
        let _ = writeln!(out, "| {v} | {} |", cells.join(" | "));
    }
}

fn memory_section(
    out: &mut String,
    inputs: &Inputs,
    svgs: &mut Vec<(String, String)>,
    switches: &Switches,
) -> Result<(), Error> {
    if inputs.memory.is_none() {
        let _ = writeln!(
            out,
            "## Peak memory\n\nNo memory measurements were given (`--memory`).\n"
        );
        return Ok(());
    }
    let s = inputs.sweep;
    let _ = writeln!(out, "## Peak memory against T\n");
    let _ = writeln!(
        out,
        "Peak heap beyond inputs and outputs of one call (counting allocator over the calling \
         thread and rayon's workers) and the engine's own estimate `memory_required` (what \
         selection budgets with), at {}. `not run`: over the sweep's work limit for scan and \
         exact, or over the default budget; the dashed `memory_required` lines go on.\n",
        t_shape_text(inputs)
    );
    for (p, pass) in PASSES.iter().enumerate() {
        let rows = memory_rows(inputs, "T", pass.memory);
        if rows.is_empty() {
            let _ = writeln!(out, "No T-sweep rows for the {} pass.\n", pass.memory);
            continue;
        }
        let _ = writeln!(out, "**{}**\n", pass.title);
        memory_table(out, &rows, |sh| sh.len, "T");
        let chart = Chart {
            title: format!(
                "Peak memory against T, {}, (B, K, C) = ({}, {}, {})",
                pass.memory, s.batch, s.max_duration, s.labels
            ),
            x_desc: "T (positions per sequence)".into(),
            y_desc: "bytes beyond inputs and outputs (MiB)".into(),
            series: memory_series(&rows, |sh| sh.len),
            markers: switches.markers(p, s.lens),
            levels: vec![budget_level()],
        };
        let file = format!("memory-T-{}.svg", pass.file);
        let _ = writeln!(out, "\n![{}]({}/{file})\n", chart.title, inputs.img_dir);
        svgs.push((file, svg(&chart)?));
    }
    let rows = memory_rows(inputs, "K", PASSES[1].memory);
    let _ = writeln!(out, "## Peak memory against K\n");
    if rows.is_empty() {
        let _ = writeln!(out, "No K-sweep rows in the memory measurements.\n");
        return Ok(());
    }
    let _ = writeln!(
        out,
        "Forward+backward at {}: streaming's memory grows with `K·C`, scan's and exact's \
         with `T·K·C²`.\n",
        k_shape_text(inputs)
    );
    memory_table(out, &rows, |sh| sh.max_duration, "K");
    let chart = Chart {
        title: format!(
            "Peak memory against K, forward+backward, (B, T, C) = ({}, {}, {})",
            s.batch, s.k_len, s.labels
        ),
        x_desc: "K (maximum segment duration)".into(),
        y_desc: "bytes beyond inputs and outputs (MiB)".into(),
        series: memory_series(&rows, |sh| sh.max_duration),
        markers: vec![],
        levels: vec![budget_level()],
    };
    let file = "memory-K-forward-backward.svg".to_string();
    let _ = writeln!(out, "\n![{}]({}/{file})\n", chart.title, inputs.img_dir);
    svgs.push((file, svg(&chart)?));
    Ok(())
}

pub(super) fn generate(inputs: &Inputs) -> Result<Report, Error> {
    let s = inputs.sweep;
    let base = Shape::new(s.batch, s.lens[0], s.max_duration, s.labels);
    let switches = Switches::find(base, s.lens[0])?;
    let mut out = String::new();
    let mut svgs = Vec::new();
    let _ = writeln!(
        out,
        "<!-- Generated by the `report` binary of semicrf-bench: edit the generator, not this \
         file. -->\n"
    );
    let _ = writeln!(out, "# Benchmarks\n");
    let _ = writeln!(
        out,
        "This page is generated: the `report` binary of `semicrf-bench` writes it and its \
         plots (in `{}/`) from a criterion run, the `memory` binary's measurements and, where \
         present, the peer harness's results. These commands regenerate it, from the \
         repository root:\n",
        inputs.img_dir
    );
    let _ = writeln!(out, "```sh\n{}\n```\n", inputs.commands.join("\n"));
    let _ = writeln!(
        out,
        "It compares the three CPU algorithms — streaming (never materialises edges), scan \
         and exact (both materialise them) — and, where measured, the CUDA streaming engine \
         and the peers, in time and peak memory against the sequence length `T`, and in \
         memory against the maximum duration `K`.\n"
    );
    sources(&mut out, inputs);
    shapes(&mut out, inputs);
    switch_section(&mut out, inputs, &switches)?;
    time_section(&mut out, inputs, &mut svgs, &switches)?;
    memory_section(&mut out, inputs, &mut svgs, &switches)?;
    canonical_section(&mut out, inputs);
    if let Some(src) = &inputs.peers_cpu {
        peers_section(&mut out, "Peers on the CPU", src);
    }
    if let Some(src) = &inputs.peers_gpu {
        peers_section(&mut out, "Peers on a GPU machine", src);
    }
    let _ = writeln!(
        out,
        "## How these numbers are taken\n\n\
         - **Time**: criterion's median over its samples of whole calls (`forward` of the log \
         semiring, or `backward`: log Z, gradients and marginals), wall clock on the CPU, CUDA \
         events around the call on the GPU (inputs copied in, results copied out).\n\
         - **Memory**: one call per row under the counting global allocator of \
         `semicrf_bench::alloc`; inputs and returned outputs are not counted.\n\
         - **Selection**: `memory_required` is each engine's own estimate, the number \
         `SemiCrf::select` compares with the budget; the switch points above are the facade's \
         answers, not a formula of this page.\n"
    );
    Ok(Report {
        markdown: out,
        svgs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_keep_three_significant_digits() {
        assert_eq!(ms(1234.4), "1234");
        assert_eq!(ms(12.345), "12.3");
        assert_eq!(ms(1.2345), "1.23");
        assert_eq!(ms(0.12345), "0.123");
        assert_eq!(ms(0.012345), "0.0123");
    }
}
