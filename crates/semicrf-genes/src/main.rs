//! `semicrf-genes`: train, run and score a semi-Markov CRF gene finder.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use semicrf::Device;
use semicrf_genes::data::{self, Record};
use semicrf_genes::predict::PredictConfig;
use semicrf_genes::train::{TrainConfig, TrainReport};
use semicrf_genes::{Error, embedded, eval, modelfile, plot, predict, train};

mod demo;

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
    /// Predict the 100 embedded test genes with the shipped model and print its accuracy
    /// beside other gene finders'; then train a model from nothing on the 60 embedded
    /// training genes and print what it learned; draw the pictures.
    Demo {
        /// Folder for the pictures, the models and the predictions.
        #[arg(long, default_value = "semicrf-genes-demo")]
        out: PathBuf,
        /// Passes over the 60 training genes in the training from nothing.
        #[arg(long, default_value_t = 1)]
        epochs: usize,
        /// No progress bars.
        #[arg(long)]
        quiet: bool,
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
        /// Hold out this many genes (a fixed random choice, `--split-seed`), train on the
        /// others and print the accuracy on the held-out ones: for choosing settings without
        /// the test genes.
        #[arg(long, default_value_t = 0)]
        hold_out: usize,
        /// Seed of the held-out choice.
        #[arg(long, default_value_t = 28)]
        split_seed: u64,
        /// Decode the held-out genes by posterior decoding instead of Viterbi.
        #[arg(long)]
        posterior: bool,
        #[command(flatten)]
        train: TrainArgs,
    },
    /// Predict genes (GenBank or FASTA in, GFF3 out).
    Predict {
        /// A model written by `train` (default: the shipped model, trained on the 486 fly
        /// genes of the AUGUSTUS tutorial).
        #[arg(long)]
        model: Option<PathBuf>,
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
        device: Device,
        /// Decode from the whole potentials computed up front, every backpointer kept
        /// (memory `O(T·C)`): the reference path, for comparison.
        #[arg(long)]
        materialised: bool,
        /// Posterior decoding (the segmentation with the most positions expected right)
        /// instead of Viterbi; from the whole potentials (memory `O(T·C)`).
        #[arg(long)]
        posterior: bool,
        /// With `--device cuda`: decode each long sequence in up to this many overlapping
        /// pieces at once, each verified to give the one sweep's genes (1: one sweep).
        #[arg(long, default_value_t = predict::GPU_PIECES)]
        gpu_pieces: usize,
        /// With `--device cuda`: the bases each piece starts before its share.
        #[arg(long, default_value_t = predict::GPU_PIECE_OVERLAP)]
        gpu_piece_overlap: usize,
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
    /// Start from zero weights instead of the generative estimates of the training genes.
    #[arg(long)]
    zero_start: bool,
    /// Where the engine runs: `cpu`, or `cuda` / `cuda:N` (a build with `--features cuda`):
    /// there each minibatch is one call, its genes of similar lengths (`--by-length`).
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    device: Device,
    /// Minibatches of genes of similar lengths, in a random order (always on with
    /// `--device cuda`; on the CPU it gives the CUDA training's minibatches).
    #[arg(long)]
    by_length: bool,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

/// `cpu`, `cuda` (device 0) or `cuda:N`.
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

impl TrainArgs {
    fn config(&self) -> Result<TrainConfig, Error> {
        let bad = |what: &str| Err(Error::Model(format!("invalid training setting: {what}")));
        if self.batch == 0 {
            return bad("--batch must be at least 1");
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
            device: self.device,
            initialise: !self.zero_start,
            by_length: self.by_length || self.device != Device::Cpu,
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
    let last = match report.nll_per_kb.last() {
        Some(nll) => format!("final NLL {nll:.3} per kb"),
        None => "no epoch: the weights counted from the genes".into(),
    };
    eprintln!(
        "trained on {} genes ({:.2} Mb) in {:.1} s; {last}",
        report.genes,
        report.bases as f64 / 1e6,
        report.seconds,
    );
    for (name, why) in &report.skipped {
        eprintln!("  left out {name}: {why}");
    }
}

pub(crate) fn pictures(
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
        Command::Demo { out, epochs, quiet } => demo::run(&out, epochs, !quiet),
        Command::Train {
            genes,
            model,
            pictures: pics,
            hold_out,
            split_seed,
            posterior,
            train: t,
        } => {
            let cfg = t.config()?;
            let mut records = data::read_genbank(&genes)?;
            if hold_out >= records.len() {
                return Err(Error::Model(format!(
                    "--hold-out {hold_out} leaves no training gene of {}",
                    records.len()
                )));
            }
            let held = hold_out_split(&mut records, hold_out, split_seed);
            let (m, report) = train::train(&records, &cfg)?;
            summary(&report);
            modelfile::save(&m, &model)?;
            if let Some(dir) = pics {
                pictures(&dir, &report, &m)?;
            }
            if !held.is_empty() {
                let pcfg = PredictConfig {
                    progress: false,
                    posterior,
                    ..PredictConfig::default()
                };
                let predicted = predict::predict(&m, &held, &pcfg)?;
                println!("accuracy on {} held-out genes:", held.len());
                print!("{}", eval::evaluate(&held, &predicted));
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
            posterior,
            gpu_pieces,
            gpu_piece_overlap,
        } => {
            let m = match model {
                Some(path) => modelfile::load(&path)?,
                None => embedded::model()?,
            };
            let records = data::read_any(&input)?;
            let clock = std::time::Instant::now();
            let cfg = PredictConfig {
                progress: !quiet,
                device,
                materialised,
                posterior,
                gpu_pieces: (gpu_pieces, gpu_piece_overlap),
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

/// Moves `n` records chosen at random (seeded) out of `records`, keeping both in order.
fn hold_out_split(records: &mut Vec<Record>, n: usize, seed: u64) -> Vec<Record> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..records.len()).collect();
    order.shuffle(&mut rng);
    let mut out = vec![false; records.len()];
    for &i in &order[..n] {
        out[i] = true;
    }
    let all = std::mem::take(records);
    let mut held = Vec::with_capacity(n);
    for (r, o) in all.into_iter().zip(out) {
        if o { held.push(r) } else { records.push(r) }
    }
    held
}

pub(crate) fn write_gff(path: &Path, predicted: &[(String, Vec<data::Gene>)]) -> Result<(), Error> {
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
pub(crate) fn structure_rows(
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
