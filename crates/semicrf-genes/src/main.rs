//! `semicrf-genes`: train, run and score a semi-Markov CRF gene finder.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use semicrf_genes::data::{self, Record};
use semicrf_genes::predict::PredictConfig;
use semicrf_genes::train::{TrainConfig, TrainReport};
use semicrf_genes::{Error, embedded, eval, modelfile, plot, predict, train};

#[derive(Parser)]
#[command(
    name = "semicrf-genes",
    version,
    about = "A semi-Markov CRF gene finder: coding exons, introns and reading frames on both strands"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train on the embedded fly genes, predict the embedded test genes, print the accuracy
    /// and draw the pictures.
    Demo {
        /// Folder for the pictures, the model and the predictions.
        #[arg(long, default_value = "semicrf-genes-demo")]
        out: PathBuf,
        #[command(flatten)]
        train: TrainArgs,
    },
    /// Train a model on annotated genes (GenBank, one `CDS` feature per gene).
    Train {
        /// Annotated training sequences (GenBank).
        #[arg(long)]
        genes: PathBuf,
        /// Where to write the model (JSON).
        #[arg(long)]
        model: PathBuf,
        /// Where to draw the training curve and the learned durations (SVG); none if absent.
        #[arg(long)]
        pictures: Option<PathBuf>,
        #[command(flatten)]
        train: TrainArgs,
    },
    /// Predict genes (GenBank or FASTA in, GFF3 out).
    Predict {
        /// A model written by `train`.
        #[arg(long)]
        model: PathBuf,
        /// Sequences: GenBank or FASTA (N, lower case and IUPAC codes are accepted).
        #[arg(long)]
        input: PathBuf,
        /// Where to write the GFF3 (standard output if absent).
        #[arg(long)]
        out: Option<PathBuf>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
        /// Where to decode: `cpu`, or `cuda` / `cuda:N` (needs the `cuda` feature).
        #[arg(long, default_value = "cpu", value_parser = parse_device)]
        device: semicrf::Device,
        /// Decode from the whole potentials computed up front, every backpointer kept
        /// (memory `O(T·C)`): the reference path, for comparison.
        #[arg(long)]
        materialised: bool,
    },
    /// Score predictions (GFF3) against annotated genes (GenBank).
    Eval {
        /// Predictions, as `predict` writes them.
        #[arg(long)]
        predictions: PathBuf,
        /// The annotated sequences (GenBank).
        #[arg(long)]
        genes: PathBuf,
    },
}

#[derive(Args)]
struct TrainArgs {
    /// Passes over the training genes.
    #[arg(long, default_value_t = TrainConfig::default().epochs)]
    epochs: usize,
    /// Genes per Adam step.
    #[arg(long, default_value_t = TrainConfig::default().batch)]
    batch: usize,
    /// Adam's initial step size.
    #[arg(long, default_value_t = TrainConfig::default().learning_rate)]
    learning_rate: f64,
    /// L2 penalty per weight.
    #[arg(long, default_value_t = TrainConfig::default().l2)]
    l2: f64,
    /// Longest exon modelled, in bases.
    #[arg(long, default_value_t = TrainConfig::default().max_exon)]
    max_exon: usize,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

impl TrainArgs {
    fn config(&self) -> Result<TrainConfig, Error> {
        let bad = |what: &str| Err(Error::Model(format!("invalid training setting: {what}")));
        if self.epochs == 0 || self.batch == 0 {
            return bad("--epochs and --batch must be at least 1");
        }
        if !(self.learning_rate > 0.0 && self.learning_rate.is_finite()) {
            return bad("--learning-rate must be positive");
        }
        if !(self.l2 >= 0.0 && self.l2.is_finite()) {
            return bad("--l2 must be non-negative");
        }
        if self.max_exon < 3 || self.max_exon > 1 << 16 {
            return bad("--max-exon must be within 3..=65536");
        }
        Ok(TrainConfig {
            epochs: self.epochs,
            batch: self.batch,
            learning_rate: self.learning_rate,
            l2: self.l2,
            max_exon: self.max_exon,
            progress: !self.quiet,
            ..TrainConfig::default()
        })
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn summary(report: &TrainReport) {
    eprintln!(
        "trained on {} genes ({:.2} Mb) in {:.1} s; final NLL {:.3} per kb",
        report.genes,
        report.bases as f64 / 1e6,
        report.seconds,
        report.nll_per_kb.last().copied().unwrap_or(f64::NAN)
    );
    for (name, why) in &report.skipped {
        eprintln!("  left out {name}: {why}");
    }
}

fn pictures(
    dir: &Path,
    report: &TrainReport,
    model: &semicrf_genes::model::Model,
) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        path: dir.display().to_string(),
        source: e,
    })?;
    plot::training_curve(&dir.join("training.svg"), &report.nll_per_kb)?;
    plot::durations(&dir.join("durations.svg"), model)
}

fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Demo { out, train: t } => {
            let cfg = t.config()?;
            let training = embedded::training()?;
            let test = embedded::test()?;
            eprintln!(
                "demo: training on {} embedded fly genes, testing on {} others",
                training.len(),
                test.len()
            );
            let (model, report) = train::train(&training, &cfg)?;
            summary(&report);
            let clock = std::time::Instant::now();
            let pcfg = PredictConfig {
                progress: cfg.progress,
                ..PredictConfig::default()
            };
            let predicted = predict::predict(&model, &test, &pcfg)?;
            eprintln!(
                "decoded {} test sequences in {:.1} s",
                test.len(),
                clock.elapsed().as_secs_f64()
            );
            let m = eval::evaluate(&test, &predicted);
            println!("accuracy on {} embedded test genes:", test.len());
            print!("{m}");
            pictures(&out, &report, &model)?;
            let rows = structure_rows(&test, &predicted, 6);
            plot::structures(&out.join("structures.svg"), &rows)?;
            modelfile::save(&model, &out.join("model.json"))?;
            write_gff(&out.join("predictions.gff3"), &predicted)?;
            println!(
                "wrote {}/{{structures,durations,training}}.svg, model.json and predictions.gff3",
                out.display()
            );
            Ok(())
        }
        Command::Train {
            genes,
            model,
            pictures: pics,
            train: t,
        } => {
            let cfg = t.config()?;
            let records = data::read_genbank(&genes)?;
            let (m, report) = train::train(&records, &cfg)?;
            summary(&report);
            modelfile::save(&m, &model)?;
            if let Some(dir) = pics {
                pictures(&dir, &report, &m)?;
            }
            Ok(())
        }
        Command::Predict {
            model,
            input,
            out,
            quiet,
            device,
            materialised,
        } => {
            let m = modelfile::load(&model)?;
            let records = data::read_any(&input)?;
            let clock = std::time::Instant::now();
            let cfg = PredictConfig {
                progress: !quiet,
                device,
                materialised,
                ..PredictConfig::default()
            };
            let predicted = predict::predict(&m, &records, &cfg)?;
            let bases: usize = records.iter().map(|r| r.seq.len()).sum();
            let genes: usize = predicted.iter().map(|p| p.1.len()).sum();
            eprintln!(
                "decoded {} sequences ({:.2} Mb) in {:.1} s: {genes} genes",
                records.len(),
                bases as f64 / 1e6,
                clock.elapsed().as_secs_f64()
            );
            match out {
                Some(path) => write_gff(&path, &predicted),
                None => data::write_gff3(&mut std::io::stdout().lock(), &predicted).map_err(|e| {
                    Error::Io {
                        path: "standard output".into(),
                        source: e,
                    }
                }),
            }
        }
        Command::Eval { predictions, genes } => {
            let records = data::read_genbank(&genes)?;
            let pred = data::read_gff3_exons(&predictions)?;
            let annotated = eval::scored(
                records
                    .iter()
                    .flat_map(|r| r.genes.iter().map(move |g| (r.name.as_str(), g))),
            );
            let m = eval::compare(&annotated, &pred);
            print!("{m}");
            Ok(())
        }
    }
}

/// `cpu`, `cuda` (device 0) or `cuda:N`.
fn parse_device(s: &str) -> Result<semicrf::Device, String> {
    match s {
        "cpu" => Ok(semicrf::Device::Cpu),
        "cuda" => Ok(semicrf::Device::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(semicrf::Device::Cuda)
            .ok_or_else(|| format!("{s:?} is not a device: cpu, cuda or cuda:N")),
    }
}

fn write_gff(path: &Path, predicted: &[(String, Vec<data::Gene>)]) -> Result<(), Error> {
    let io = |e| Error::Io {
        path: path.display().to_string(),
        source: e,
    };
    let f = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(f);
    data::write_gff3(&mut w, predicted).map_err(io)?;
    std::io::Write::flush(&mut w).map_err(io)
}

/// The first `n` records with annotated genes, with their predictions.
fn structure_rows(
    records: &[Record],
    predicted: &[(String, Vec<data::Gene>)],
    n: usize,
) -> Vec<(String, usize, Vec<data::Gene>, Vec<data::Gene>)> {
    records
        .iter()
        .zip(predicted)
        .filter(|(r, _)| !r.genes.is_empty())
        .take(n)
        .map(|(r, p)| (r.name.clone(), r.seq.len(), r.genes.clone(), p.1.clone()))
        .collect()
}
