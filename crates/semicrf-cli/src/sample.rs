//! `semicrf sample`: exact samples from the posterior over segmentations, and the
//! `log_z_partial` key that `semicrf eval` adds for a partially labelled input.

use std::path::PathBuf;

use semicrf::interchange::{self, Json};
use semicrf::ndarray::Array2;
use semicrf::partial::{restrict, restricted_problem};
use semicrf::{Config, Potentials, Segment, SemiCrf};

use crate::{BackendArg, Failure, read_input, shown_name};

#[derive(Debug, clap::Args)]
pub(crate) struct SampleArgs {
    /// The problem file (JSON); `-` reads standard input.
    #[arg(long, short, value_name = "FILE")]
    input: PathBuf,
    /// Samples per sequence.
    #[arg(long, short, value_name = "N")]
    n: usize,
    /// The seed: the same seed gives the same samples, on any number of threads.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The algorithm: `auto` picks by input form and memory budget.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// The memory budget (as for `eval`) [default: 2 GiB].
    #[arg(long, value_name = "SIZE", value_parser = crate::size::parse_size)]
    memory_budget: Option<u64>,
}

/// One segmentation as a list of `[start, duration, label]`.
pub(crate) fn segmentation_json(segments: &[Segment]) -> Json {
    Json::Arr(
        segments
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
}

/// Runs `semicrf sample`: `{"samples": ...}`, per sequence a list of `n` segmentations.
pub(crate) fn sample(args: &SampleArgs) -> Result<String, Failure> {
    let shown = shown_name(&args.input);
    let text = read_input(&args.input)?;
    let input =
        interchange::parse_input(&text).map_err(|e| Failure::input(format!("{shown}: {e}")))?;
    let problem = input
        .problem
        .view()
        .map_err(|e| Failure::input(format!("{shown}: {e}")))?;
    let mut config = Config::new().backend(args.backend.into());
    if let Some(bytes) = args.memory_budget {
        config = config.memory_budget(bytes);
    }
    let crf = SemiCrf::with_config(config);
    let samples = match &input.partial_labels {
        None => crf.sample(&problem, args.n, args.seed)?,
        Some(labels) => {
            let problem = problem.into();
            let restricted = restrict(&problem, labels.view())?;
            crf.sample(
                &restricted_problem(&problem, &restricted)?,
                args.n,
                args.seed,
            )?
        }
    };
    let samples = Json::Arr(
        samples
            .iter()
            .map(|per| Json::Arr(per.iter().map(|y| segmentation_json(y)).collect()))
            .collect(),
    );
    Json::Obj(vec![("samples".to_string(), samples)])
        .render()
        .map_err(|e| Failure {
            message: format!("internal error: {e}"),
            code: 1,
        })
}

/// The `log_z_partial` field of `semicrf eval`: log Z over the segmentations that agree with
/// the annotation, `"-inf"` where none has a finite score.
pub(crate) fn log_z_partial(
    crf: &SemiCrf,
    problem: &Potentials<'_, f64>,
    labels: &Array2<i64>,
) -> Result<(String, Json), Failure> {
    let z = crf.log_partition_partial(problem, labels.view())?;
    Ok(("log_z_partial".to_string(), Json::floats(&z)))
}
