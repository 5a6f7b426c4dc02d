//! `semicrf`: the command-line tool of the semicrf library.
//!
//! `semicrf eval --input problem.json` reads a problem in the JSON interchange format
//! (`semicrf::model` §10), runs log Z, Viterbi, the entropy and (unless `--no-grad`) the
//! backward pass, and prints one JSON object on stdout. Any error is one line
//! `error: <message>` on stderr, with exit code 2 and nothing on stdout.

mod kbest;
mod sample;
mod size;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use semicrf::{
    Backend, Config, Device, EntropySemiring, Error, LogSemiring, Op, Selection, SemiCrf,
};

use semicrf::interchange::{self, Json};

/// Semi-Markov CRF inference on problems in the JSON interchange format.
#[derive(Debug, Parser)]
#[command(name = "semicrf", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compute log Z, the Viterbi segmentation and (unless --no-grad) the gradients and
    /// boundary marginals of a problem, and print them as one JSON object.
    ///
    /// The input is a JSON object with keys `scores` (B, T, C), `transition` ((C, C) or
    /// (K, C, C)), `duration` (K, C), `start` (C), `end` (C), `begin_boundary` (B, T, C),
    /// `end_boundary` (B, T, C), `lengths` (B) and `max_duration` (K); `scores`, `lengths`
    /// and `max_duration` are required, the others may be absent or null. `-inf` is written
    /// as the string "-inf".
    ///
    /// The output object has `log_z` (B), `viterbi` (B, the best scores), `segments` (per
    /// sequence, a list of [start, duration, label]), `entropy` (B, the Shannon entropy in
    /// nats of the posterior over segmentations; null for a sequence with log Z = -inf,
    /// which has no posterior, and for one whose potentials are too large for probabilities
    /// to be accurate), `boundary_marginals` (B x T, P(a segment starts at t), 0 beyond the
    /// length), `marginals` (an object: `position`, B x T x C, P(position t lies in a
    /// segment of label c), 0 beyond the length; `boundary`, the same as
    /// `boundary_marginals`), `grad` (the gradients of the sum of log Z over the batch with
    /// respect to every input present, same keys and shapes), `backend` and `reason` (the
    /// engine chosen and why). With --no-grad, `boundary_marginals`, `marginals` and `grad`
    /// are left out. With --kbest N, `kbest` (after `entropy`): per sequence, its N best
    /// segmentations, best first, as a list of {"score": s, "segments": [[start, duration,
    /// label], ...]} (fewer where fewer have a finite score; ties compare segments from the
    /// last one backwards, the smaller label, then the smaller duration, so the first is the
    /// Viterbi segmentation). With --posterior, `posterior` (after `kbest`): per sequence the
    /// posterior decoding, {"score": s, "segments": [...]}, the segmentation that maximises
    /// the expected number of correctly labelled positions, s that expectation.
    ///
    /// With the input key `partial_labels` (B x T: a label index, or -1 for unknown, per
    /// position), the output also has `log_z_partial` (B), after `log_z`: log Z over the
    /// segmentations that agree with the annotation, "-inf" where none has a finite score.
    ///
    /// Errors (malformed JSON, a missing key, a wrong shape, NaN or +inf, potentials too
    /// large in magnitude, a length out of range, an unavailable backend or device) print
    /// one line `error: ...` on stderr and exit with code 2.
    Eval(EvalArgs),
    /// Draw exact samples from the posterior over segmentations and print them as one JSON
    /// object `{"samples": ...}`: per sequence a list of N segmentations, each a list of
    /// [start, duration, label].
    ///
    /// The input is that of `eval`. With `partial_labels`, the samples come from the
    /// posterior restricted to the segmentations that agree with the annotation. The same
    /// --seed gives the same samples on any number of threads. A sequence without any
    /// finite segmentation (nothing to sample) is an error, as are those of `eval`.
    Sample(sample::SampleArgs),
}

#[derive(Debug, clap::Args)]
struct EvalArgs {
    /// The problem file (JSON); `-` reads standard input.
    #[arg(long, short, value_name = "FILE")]
    input: PathBuf,
    /// The algorithm: `auto` picks by input form and memory budget.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// The device: `cpu`, `cuda` (device 0) or `cuda:N`.
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    device: Device,
    /// The memory budget of one pass: a number of bytes, or a size with a unit (B, KB, KiB,
    /// MB, MiB, GB, GiB, TB, TiB, any case, e.g. `512MiB` or `1 GB`) [default: 2 GiB].
    #[arg(long, value_name = "SIZE", value_parser = size::parse_size)]
    memory_budget: Option<u64>,
    /// Skip the backward pass: print log Z, Viterbi and the entropy only, without `grad`,
    /// `marginals` and `boundary_marginals` (needed when some sequence has log Z = -inf).
    #[arg(long)]
    no_grad: bool,
    /// Add `kbest`: the N highest-scoring segmentations of every sequence, best first, each
    /// {"score", "segments"} (CPU engines; with --device cuda the GPU, N up to 1024).
    #[arg(long, value_name = "N")]
    kbest: Option<usize>,
    /// Add `posterior`: the posterior decoding of every sequence (the segmentation with the
    /// most expected correctly labelled positions), {"score", "segments"}, its score that
    /// expectation. Needs log Z > -inf for every sequence.
    #[arg(long)]
    posterior: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BackendArg {
    Auto,
    Exact,
    Scan,
    Streaming,
}

impl From<BackendArg> for Backend {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Auto => Backend::Auto,
            BackendArg::Exact => Backend::Exact,
            BackendArg::Scan => Backend::Scan,
            BackendArg::Streaming => Backend::Streaming,
        }
    }
}

fn parse_device(s: &str) -> Result<Device, String> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(Device::Cuda)
            .ok_or_else(|| format!("expected cpu, cuda or cuda:N, got `{s}`")),
    }
}

/// An error to report: the message (one line) and the exit code.
struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    fn input(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 2,
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::input(e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let result = match cli.command {
        Command::Eval(args) => eval(&args),
        Command::Sample(args) => sample::sample(&args),
    };
    match result {
        Ok(text) => {
            let mut stdout = std::io::stdout().lock();
            match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(Failure::input(format!("cannot write the output: {e}"))),
            }
        }
        Err(f) => fail(f),
    }
}

fn fail(f: Failure) -> ExitCode {
    let one_line: Vec<&str> = f.message.split_whitespace().collect();
    eprintln!("error: {}", one_line.join(" "));
    ExitCode::from(f.code)
}

/// Help and version go to stdout as usual; every other parse error becomes one line.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
    }
    let rendered = e.render().to_string();
    let lines: Vec<&str> = rendered
        .lines()
        .take_while(|l| !l.starts_with("Usage:"))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
        .collect();
    let message = lines.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    fail(Failure::input(message))
}

fn read_input(path: &PathBuf) -> Result<String, Failure> {
    let mut text = String::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_string(&mut text).map(|_| ()))
    };
    read.map_err(|e| Failure::input(format!("cannot read `{}`: {e}", path.display())))?;
    Ok(text)
}

/// The input's name in messages.
fn shown_name(input: &std::path::Path) -> String {
    if input.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        input.display().to_string()
    }
}

fn eval(args: &EvalArgs) -> Result<String, Failure> {
    let shown = shown_name(&args.input);
    let text = read_input(&args.input)?;
    let input =
        interchange::parse_input(&text).map_err(|e| Failure::input(format!("{shown}: {e}")))?;
    let owned = input.problem;
    let problem = owned
        .view()
        .map_err(|e| Failure::input(format!("{shown}: {e}")))?;

    let mut config = Config::new()
        .backend(args.backend.into())
        .device(args.device);
    if let Some(bytes) = args.memory_budget {
        config = config.memory_budget(bytes);
    }
    let crf = SemiCrf::with_config(config);

    let mut ops = vec![
        ("log_z", Op::forward::<LogSemiring>()),
        ("viterbi", Op::Viterbi),
        ("entropy", Op::forward::<EntropySemiring>()),
    ];
    if !args.no_grad {
        ops.push(("grad", Op::Backward));
    }
    let mut selections = ops
        .iter()
        .map(|&(name, op)| crf.select(&problem, op).map(|s| (name, s)))
        .collect::<Result<Vec<_>, Error>>()?;
    selections.extend(kbest::selections(&crf, &problem, args.kbest)?);
    let (backend, reason) = describe(&selections);

    let log_z = crf.log_partition(&problem)?;
    let decoded = crf.viterbi(&problem)?;
    // A sequence with log Z = -inf has no posterior, hence no entropy: null. Nor has one
    // beyond the numeric range of probabilities, where the others keep theirs.
    let entropy_json = |v: &semicrf::EntropyValue| {
        if v.log_weight == f64::NEG_INFINITY {
            Json::Null
        } else {
            Json::Num(v.entropy)
        }
    };
    let entropy: Vec<Json> = match crf.forward::<EntropySemiring, f64>(&problem) {
        Ok(values) => values.iter().map(entropy_json).collect(),
        Err(Error::Magnitude { .. }) => {
            let limits = problem.magnitudes().iter().zip(problem.lengths());
            let in_range =
                limits.map(|(m, &len)| m.bound <= semicrf::range::probability_limit(len));
            let mut out = Vec::new();
            for (b, ok) in in_range.enumerate() {
                out.push(match owned.sequence(b) {
                    Some(one) if ok => {
                        let one = one.view()?;
                        entropy_json(&crf.forward::<EntropySemiring, f64>(&one)?[0])
                    }
                    _ => Json::Null,
                });
            }
            out
        }
        Err(e) => return Err(e.into()),
    };
    let mut fields = vec![
        ("log_z".to_string(), Json::floats(&log_z)),
        (
            "viterbi".to_string(),
            Json::Arr(decoded.iter().map(|d| Json::Num(d.score)).collect()),
        ),
        (
            "segments".to_string(),
            Json::Arr(
                decoded
                    .iter()
                    .map(|d| {
                        Json::Arr(
                            d.segments
                                .iter()
                                .map(|s| {
                                    Json::Arr(vec![
                                        Json::Int(s.start),
                                        Json::Int(s.duration),
                                        Json::Int(s.label),
                                    ])
                                })
                                .collect(),
                        )
                    })
                    .collect(),
            ),
        ),
        ("entropy".to_string(), Json::Arr(entropy)),
    ];
    if let Some(k) = args.kbest {
        fields.push(kbest::kbest(&crf, &problem, k)?);
    }
    if args.posterior {
        fields.push(kbest::posterior(&crf, &problem).map_err(|e| match e {
            Error::Infeasible { .. } => Failure::input(format!(
                "{e}; it has no posterior to decode, rerun without --posterior"
            )),
            e => e.into(),
        })?);
    }
    if let Some(labels) = &input.partial_labels {
        fields.insert(1, sample::log_z_partial(&crf, &problem, labels)?);
    }

    if !args.no_grad {
        let out = crf.backward(&problem, None).map_err(|e| match e {
            Error::Infeasible { .. } => Failure::input(format!(
                "{e}; gradients are undefined there, rerun with --no-grad for log Z and Viterbi"
            )),
            e => e.into(),
        })?;
        let boundary = Json::array(out.boundary_marginals.view().into_dyn());
        fields.push(("boundary_marginals".to_string(), boundary.clone()));
        // With an upstream of ones the gradient of the scores is the position marginals.
        let position = out.grad.scores.as_ref().ok_or_else(|| Failure {
            message: format!("the {backend} backend returned no position marginals"),
            code: 1,
        })?;
        fields.push((
            "marginals".to_string(),
            Json::Obj(vec![
                (
                    "position".to_string(),
                    Json::array(position.view().into_dyn()),
                ),
                ("boundary".to_string(), boundary),
            ]),
        ));
        let g = &out.grad;
        let mut grad = Vec::new();
        // Only the inputs present in the problem get a gradient in the output.
        let given = |name: &str| match name {
            "scores" => true,
            "transition" => owned.transition.is_some(),
            "duration" => owned.duration.is_some(),
            "start" => owned.start.is_some(),
            "end" => owned.end.is_some(),
            "begin_boundary" => owned.begin_boundary.is_some(),
            "end_boundary" => owned.end_boundary.is_some(),
            _ => false,
        };
        let present = g.fields().map(|(name, value)| (name, given(name), value));
        for (name, given, value) in present {
            if !given {
                continue;
            }
            let value = value.ok_or_else(|| Failure {
                message: format!("the {backend} backend returned no gradient for `{name}`"),
                code: 1,
            })?;
            grad.push((name.to_string(), Json::array(value)));
        }
        fields.push(("grad".to_string(), Json::Obj(grad)));
    }
    fields.push(("backend".to_string(), Json::Str(backend)));
    fields.push(("reason".to_string(), Json::Str(reason)));
    Json::Obj(fields).render().map_err(|e| Failure {
        message: format!("internal error: {e}"),
        code: 1,
    })
}

/// The engine(s) chosen for the passes that ran, and why.
fn describe(selections: &[(&str, Selection)]) -> (String, String) {
    let name = |s: &Selection| format!("{}/{}", s.device, s.algorithm);
    let first = name(&selections[0].1);
    if selections.iter().all(|(_, s)| name(s) == first) {
        let (_, last) = &selections[selections.len() - 1];
        return (first, last.reason.clone());
    }
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for (pass, s) in selections {
        match groups.iter_mut().find(|(n, _)| *n == name(s)) {
            Some((_, passes)) => passes.push(pass),
            None => groups.push((name(s), vec![pass])),
        }
    }
    let backend = groups
        .iter()
        .map(|(n, passes)| format!("{n} ({})", passes.join(", ")))
        .collect::<Vec<_>>()
        .join(", ");
    let reason = selections
        .iter()
        .map(|(pass, s)| format!("{pass}: {}", s.reason))
        .collect::<Vec<_>>()
        .join("; ");
    (backend, reason)
}
