//! Writes `docs/benchmarks.md` and its SVG plots from a criterion run of the sweep, the
//! `memory` binary's JSON and, where present, the peer harness's results.
//!
//! ```text
//! cargo bench -p semicrf-bench --bench main -- sweep/
//! cargo run --release -p semicrf-bench --bin memory -- --sweep full --json target/memory.json
//! cargo run --release -p semicrf-bench --bin report -- --memory target/memory.json --out docs
//! ```
//!
//! Every path is an argument, so the staged binaries run it on a machine without cargo
//! (`bin-report --criterion target/criterion --memory … --gpu … --out docs`). The sweep is
//! `--sweep` or `SEMICRF_BENCH_SWEEP` (default `full`), as for the bench and the `memory`
//! binary.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use semicrf_bench::report::{self, Inputs, Source, criterion, memory, peers};
use semicrf_bench::sweep::{ENV, Sweep};

/// The default places of the peer results, relative to the repository root.
const PEERS_CPU: &str = "crates/semicrf-bench/peers/results";
const PEERS_GPU: &str = "crates/semicrf-bench/peers/results/gpu";

#[derive(Parser, Debug)]
#[command(
    name = "report",
    about = "Writes docs/benchmarks.md and its SVG plots from a criterion run of the sweep, \
             the memory binary's JSON and the peer results"
)]
struct Args {
    /// Criterion's output directory [default: $CRITERION_HOME, else target/criterion].
    #[arg(long)]
    criterion: Option<PathBuf>,
    /// The `memory` binary's JSON (`memory --sweep NAME --json PATH`).
    #[arg(long)]
    memory: Option<PathBuf>,
    /// CPU peer results (`peers/run.sh`) [default: crates/semicrf-bench/peers/results where it
    /// exists].
    #[arg(long)]
    peers: Option<PathBuf>,
    /// GPU peer results (`peers/run_gpu.sh`) [default: crates/semicrf-bench/peers/results/gpu
    /// where it exists].
    #[arg(long)]
    gpu: Option<PathBuf>,
    /// Leave the peer results out even where they exist.
    #[arg(long)]
    no_peers: bool,
    /// The sweep measured: full or small [default: $SEMICRF_BENCH_SWEEP, else full].
    #[arg(long)]
    sweep: Option<String>,
    /// Where the criterion run was made [default: this machine].
    #[arg(long)]
    machine: Option<String>,
    /// The commit measured [default: `git rev-parse --short HEAD` here, marked when the
    /// checkout has changes].
    #[arg(long)]
    commit: Option<String>,
    /// A sentence on the conditions of the run, printed under the sources.
    #[arg(long)]
    note: Option<String>,
    /// Directory of the page: writes OUT/benchmarks.md and OUT/benchmarks/*.svg.
    #[arg(long, default_value = "docs")]
    out: PathBuf,
}

fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn commit() -> String {
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(c) => match git(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(s) if !s.is_empty() => format!("{c} with uncommitted changes"),
            _ => c,
        },
        None => "unknown (not a git checkout; pass --commit)".into(),
    }
}

/// A peer directory: the one given (which must exist), else the default where it exists.
fn peer_dir(given: &Option<PathBuf>, default: &str) -> Result<Option<PathBuf>, String> {
    match given {
        Some(p) if p.is_dir() => Ok(Some(p.clone())),
        Some(p) => Err(format!("peer results directory {} not found", p.display())),
        None => Ok(Some(PathBuf::from(default)).filter(|p| p.is_dir())),
    }
}

fn shell_words(args: &Args, criterion: &Path, sweep: &Sweep) -> Vec<String> {
    let small = if sweep.name == "full" {
        String::new()
    } else {
        format!("{ENV}={} ", sweep.name)
    };
    let mut report = format!(
        "cargo run --release -p semicrf-bench --bin report -- --sweep {}",
        sweep.name
    );
    if args.criterion.is_some() {
        report += &format!(" --criterion {}", criterion.display());
    }
    if let Some(m) = &args.memory {
        report += &format!(" --memory {}", m.display());
    }
    if let Some(p) = &args.peers {
        report += &format!(" --peers {}", p.display());
    }
    if let Some(g) = &args.gpu {
        report += &format!(" --gpu {}", g.display());
    }
    if args.no_peers {
        report += " --no-peers";
    }
    // `--note` describes one run's conditions: not part of the command to repeat.
    report += &format!(" --out {}", args.out.display());
    let memory = args.memory.as_ref().map(|m| {
        format!(
            "cargo run --release -p semicrf-bench --bin memory -- --sweep {} --json {}",
            sweep.name,
            m.display()
        )
    });
    [
        Some(format!(
            "{small}cargo bench -p semicrf-bench --bench main -- sweep/"
        )),
        memory,
        Some(report),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn run(args: &Args) -> Result<(), String> {
    let sweep = match &args.sweep {
        Some(name) => Sweep::by_name(name)?,
        None => Sweep::from_env()?,
    };
    let criterion_dir = args.criterion.clone().unwrap_or_else(|| {
        std::env::var_os("CRITERION_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("target/criterion"))
    });
    let timings = criterion::load(&criterion_dir).map_err(|e| e.to_string())?;
    let memory = match &args.memory {
        Some(path) => Some(Source {
            path: path.display().to_string(),
            data: memory::load(path).map_err(|e| e.to_string())?,
        }),
        None => None,
    };
    if let Some(m) = &memory
        && let Some(name) = &m.data.sweep
        && name != sweep.name
    {
        return Err(format!(
            "{} measured the {name} sweep, not the {} sweep (pass --sweep {name})",
            m.path, sweep.name
        ));
    }
    let load_peers = |dir: Option<PathBuf>| -> Result<_, String> {
        match dir {
            Some(dir) if !args.no_peers => Ok(Some(Source {
                path: dir.display().to_string(),
                data: peers::load_dir(&dir).map_err(|e| e.to_string())?,
            })),
            _ => Ok(None),
        }
    };
    let peers_cpu = load_peers(peer_dir(&args.peers, PEERS_CPU)?)?;
    let peers_gpu = load_peers(peer_dir(&args.gpu, PEERS_GPU)?)?;
    let inputs = Inputs {
        sweep,
        criterion: Source {
            path: criterion_dir.display().to_string(),
            data: timings,
        },
        memory,
        peers_cpu: peers_cpu.filter(|s| !s.data.is_empty()),
        peers_gpu: peers_gpu.filter(|s| !s.data.is_empty()),
        machine: args.machine.clone().unwrap_or_else(report::machine),
        commit: args.commit.clone().unwrap_or_else(commit),
        note: args.note.clone(),
        commands: shell_words(args, &criterion_dir, sweep),
        img_dir: "benchmarks".into(),
    };
    let generated = report::generate(&inputs).map_err(|e| e.to_string())?;
    let img = args.out.join(&inputs.img_dir);
    std::fs::create_dir_all(&img).map_err(|e| format!("cannot create {}: {e}", img.display()))?;
    for (name, text) in &generated.svgs {
        let path = img.join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let page = args.out.join("benchmarks.md");
    std::fs::write(&page, &generated.markdown)
        .map_err(|e| format!("cannot write {}: {e}", page.display()))?;
    println!(
        "{} and {} plots in {}",
        page.display(),
        generated.svgs.len(),
        img.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
