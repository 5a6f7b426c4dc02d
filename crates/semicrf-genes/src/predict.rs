//! Decoding: the Viterbi segmentation of every sequence, read back as genes.

use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use semicrf::{
    Backend, Config, Decoded, Device, Op, Parallelism, PotentialSource, Problem, Query, SemiCrf,
    SourceEngine, StreamedPotentials,
};

use crate::Error;
use crate::ahead::Ahead;
use crate::data::{Gene, Record};
use crate::model::{Model, Prepared, Source, genes_of};

/// Decoding settings.
#[derive(Clone, Debug)]
pub struct PredictConfig {
    /// Draw a progress bar.
    pub progress: bool,
    /// Memory the engine may use per sequence, bytes.
    pub memory_budget: u64,
    /// Where the engine runs: the CPU, or a CUDA device (which needs the `cuda` feature and
    /// an engine that reads a potentials source there).
    pub device: Device,
    /// Decode from the whole `(T, C)` potentials, computed up front, with every backpointer
    /// kept (`O(T·C)` memory), instead of from a source: the reference that the streamed
    /// path is compared with (the same genes).
    pub materialised: bool,
    /// Posterior decoding ([`SemiCrf::posterior_decode`]: the segmentation with the most
    /// positions expected to be labelled right) instead of the Viterbi segmentation; from
    /// the whole potentials, like [`PredictConfig::materialised`].
    pub posterior: bool,
    /// Bytes of backpointers that the streamed decoding on the CPU keeps from its forward
    /// sweep for the last positions of a sequence (3 bytes a position and label), where its
    /// traceback then recomputes nothing: memory traded for time, within the memory of
    /// [`PredictConfig::memory_budget`]. The genes are the same for any value.
    pub kept_backpointers: usize,
    /// With a CUDA device: how many overlapping pieces a long sequence is decoded in at once,
    /// and the bases each starts before its share
    /// ([`Config::viterbi_pieces`]: each piece is verified to give the genes of one sweep,
    /// up to ties within rounding).
    pub gpu_pieces: (usize, usize),
}

/// The pieces a long sequence is decoded in on a GPU by default: seven gained nothing on an
/// H100 at the model's 50 labels and 8192 durations, eight do not fit the pipelined kernels
/// (docs/cuda.md, "One long sequence in pieces").
pub const GPU_PIECES: usize = 6;

/// The bases each piece starts before its share by default: more than the longest stretch
/// seen on chr2R over which the best gene structure still depended on where decoding began
/// (about 340 kb).
pub const GPU_PIECE_OVERLAP: usize = 1 << 19;

impl Default for PredictConfig {
    fn default() -> Self {
        PredictConfig {
            progress: true,
            memory_budget: 64 << 30,
            device: Device::Cpu,
            materialised: false,
            posterior: false,
            kept_backpointers: 128 << 20,
            gpu_pieces: (GPU_PIECES, GPU_PIECE_OVERLAP),
        }
    }
}

/// The engine of one sequence's decoding: the streaming algorithm on `cfg.device`;
/// `parallel`, when fewer sequences than threads are decoded at once, lets it use the idle
/// threads (on the CPU, the traceback recomputes the next block on a second thread).
fn engine(cfg: &PredictConfig, parallel: bool) -> SemiCrf {
    let parallelism = if parallel {
        Parallelism::Rayon
    } else {
        Parallelism::Sequential
    };
    SemiCrf::with_config(
        Config::new()
            .backend(Backend::Streaming)
            .device(cfg.device)
            .parallelism(parallelism)
            .memory_budget(cfg.memory_budget)
            .viterbi_pieces(cfg.gpu_pieces.0, cfg.gpu_pieces.1),
    )
}

/// The genes of one sequence: the model's Viterbi segmentation, its potentials computed
/// chunk by chunk as the engine asks for them ([`Source`]) and decoded with checkpoints
/// instead of backpointers, so memory grows with the square root of the length (besides the
/// prepared sequence, 2 bytes a base).
pub fn predict_one(model: &Model, seq: &[u8], cfg: &PredictConfig) -> Result<Vec<Gene>, Error> {
    decode(model, seq, cfg, false)
}

/// [`predict_one`] on an engine that may use the idle threads (`parallel`).
fn decode(
    model: &Model,
    seq: &[u8],
    cfg: &PredictConfig,
    parallel: bool,
) -> Result<Vec<Gene>, Error> {
    if seq.is_empty() {
        return Ok(Vec::new());
    }
    if cfg.device != Device::Cpu && !cfg!(feature = "cuda") {
        return Err(Error::Model(format!(
            "--device {}: semicrf-genes was built without CUDA (build it with `--features cuda`)",
            cfg.device
        )));
    }
    let crf = engine(cfg, parallel);
    let best = if cfg.posterior {
        let arrays = model.potentials::<f64>(&Prepared::lean(seq));
        let problem: Problem<f64> = arrays.view()?.into();
        crf.posterior_decode(&problem)?
    } else if cfg.materialised {
        let arrays = model.potentials::<f32>(&Prepared::lean(seq));
        let problem: Problem<f32> = arrays.view()?.into();
        crf.viterbi(&problem)?
    } else {
        let prepared = Prepared::lean(seq);
        let shared = model.shared::<f32>();
        let source = Source::new(model, &prepared);
        let streamed = |src: &dyn PotentialSource<f32>| -> Result<Vec<Decoded>, Error> {
            let problem = StreamedPotentials::builder(src, shared.duration.nrows())
                .transition(shared.transition.view())
                .duration(shared.duration.view())
                .start(shared.start.view())
                .end(shared.end.view())
                .build()?;
            if cfg.device != Device::Cpu {
                let best = crf.viterbi_streamed(&problem)?;
                if cfg.progress {
                    report_split(seq.len());
                }
                return Ok(best);
            }
            // The CPU engine itself, to keep the last backpointers.
            let e = semicrf_cpu::StreamingEngine::new()
                .parallelism(if parallel {
                    Parallelism::Rayon
                } else {
                    Parallelism::Sequential
                })
                .viterbi_tail(cfg.kept_backpointers);
            let query = Query {
                shape: problem.shape(),
                form: problem.form(),
                op: Op::Viterbi,
                dtype_bytes: 4,
                threads: if parallel {
                    rayon::current_num_threads()
                } else {
                    1
                },
            };
            let required = SourceEngine::<f32>::memory_required_streamed(&e, &query)?;
            if required > cfg.memory_budget {
                return Err(semicrf::Error::MemoryBudget {
                    required,
                    budget: cfg.memory_budget,
                    algorithm: "streaming".into(),
                }
                .into());
            }
            Ok(SourceEngine::<f32>::viterbi_streamed(&e, &problem)?)
        };
        if parallel && cfg.device == Device::Cpu {
            // The rows the forward sweep reads next are computed on another thread
            // meanwhile; `ahead` (dropped before the scope ends) stops it. (The CUDA engine
            // fills its chunks on the pool's threads itself.)
            std::thread::scope(|s| {
                let (ahead, producer) = Ahead::new(&source);
                s.spawn(|| producer.run(&source));
                streamed(&ahead)
            })?
        } else {
            streamed(&source)?
        }
    };
    if best[0].score == f64::NEG_INFINITY {
        // Every sequence has an all-intergenic segmentation: -inf here is a bug, not an answer.
        return Err(Error::Model(
            "no gene structure fits this sequence (Viterbi score -inf)".into(),
        ));
    }
    Ok(genes_of(&best[0].segments))
}

/// A line on standard error about a sequence of length `len` decoded in pieces on the GPU
/// ([`PredictConfig::gpu_pieces`]), if it was.
fn report_split(len: usize) {
    #[cfg(feature = "cuda")]
    if let Some(r) = semicrf::cuda::CudaEngine::take_last_split()
        && r.len == len
    {
        let joined = r
            .pieces
            .iter()
            .map(|&(lo, _, x)| x.saturating_sub(lo))
            .max();
        eprintln!(
            "{:.2} Mb decoded in {} pieces at once on the GPU ({} attempt{}; each piece joined \
             the one before within {:.0} kb of its start); potentials {:.1} s, sweeps {:.1} s, \
             checks and traceback {:.1} s",
            len as f64 / 1e6,
            r.pieces.len(),
            r.attempts,
            if r.attempts == 1 { "" } else { "s" },
            joined.unwrap_or(0) as f64 / 1e3,
            r.upload.as_secs_f64(),
            r.sweep.as_secs_f64(),
            r.check.as_secs_f64()
        );
    }
    #[cfg(not(feature = "cuda"))]
    let _ = len;
}

/// The predicted genes of every record, in order, decoded in parallel.
pub fn predict(
    model: &Model,
    records: &[Record],
    cfg: &PredictConfig,
) -> Result<Vec<(String, Vec<Gene>)>, Error> {
    let total: u64 = records.iter().map(|r| r.seq.len() as u64).sum();
    let bar = if cfg.progress {
        let b = ProgressBar::new(total);
        b.set_style(
            ProgressStyle::with_template(
                "decoding [{bar:30}] {decimal_bytes}/{decimal_total_bytes} bases, {elapsed}, ETA {eta}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        b.enable_steady_tick(std::time::Duration::from_millis(250));
        b
    } else {
        ProgressBar::hidden()
    };
    // Fewer sequences than threads: each decoding may use the threads left idle.
    let parallel = records.len() < rayon::current_num_threads();
    let out = records
        .par_iter()
        .map(|r| {
            let genes = decode(model, &r.seq, cfg, parallel).map_err(|e| match e {
                Error::Model(m) => Error::Model(format!("{}: {m}", r.name)),
                other => other,
            })?;
            bar.inc(r.seq.len() as u64);
            Ok((r.name.clone(), genes))
        })
        .collect::<Result<Vec<_>, Error>>();
    bar.finish_and_clear();
    out
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::labels::PIECE;

    fn quiet(materialised: bool) -> PredictConfig {
        PredictConfig {
            progress: false,
            materialised,
            ..PredictConfig::default()
        }
    }

    #[test]
    fn decoding_from_the_source_gives_the_genes_of_the_materialised_potentials() {
        let mut rng = ChaCha8Rng::seed_from_u64(27);
        let mut model = Model::new(PIECE + 60);
        for w in model.w.iter_mut() {
            *w = rng.random_range(-1.0..1.0);
        }
        let records: Vec<Record> = crate::embedded::test()
            .unwrap()
            .into_iter()
            .take(4)
            .collect();
        let want = predict(&model, &records, &quiet(true)).unwrap();
        let genes: usize = want.iter().map(|(_, g)| g.len()).sum();
        assert!(genes > 0, "no gene to compare");
        assert_eq!(predict(&model, &records, &quiet(false)).unwrap(), want);
        // One sequence at a time, the traceback on one thread, too; and with the idle
        // threads (the rows computed ahead, the traceback on two threads); with no
        // backpointers kept by the sweep, or those of the last 500 positions (above, by
        // default, all of them).
        for (r, (_, g)) in records.iter().zip(&want) {
            for kept in [0, 3 * 50 * 500] {
                let cfg = PredictConfig {
                    kept_backpointers: kept,
                    ..quiet(false)
                };
                assert_eq!(&predict_one(&model, &r.seq, &cfg).unwrap(), g);
                assert_eq!(&decode(&model, &r.seq, &cfg, true).unwrap(), g);
            }
        }
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_is_a_clear_error() {
        let model = Model::new(PIECE + 1);
        let cfg = PredictConfig {
            device: Device::Cuda(0),
            ..quiet(false)
        };
        let err = predict_one(&model, &[0, 1, 2, 3], &cfg).unwrap_err();
        assert!(err.to_string().contains("--features cuda"), "{err}");
    }
}
