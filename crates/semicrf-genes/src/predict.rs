//! Decoding: the Viterbi segmentation of every sequence, read back as genes.

use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use semicrf::StreamedPotentials;

use crate::Error;
use crate::data::{Gene, Record};
use crate::model::{Model, Prepared, Source, engine, genes_of};

/// Decoding settings.
#[derive(Clone, Debug)]
pub struct PredictConfig {
    /// Draw a progress bar.
    pub progress: bool,
    /// Memory the engine may use per sequence, bytes.
    pub memory_budget: u64,
}

impl Default for PredictConfig {
    fn default() -> Self {
        PredictConfig {
            progress: true,
            memory_budget: 64 << 30,
        }
    }
}

/// The genes of one sequence: the model's Viterbi segmentation, its potentials computed
/// chunk by chunk as the engine asks for them ([`Source`]) and decoded with checkpoints
/// instead of backpointers, so memory grows with the square root of the length (besides the
/// prepared sequence, 2 bytes a base).
pub fn predict_one(model: &Model, seq: &[u8], cfg: &PredictConfig) -> Result<Vec<Gene>, Error> {
    if seq.is_empty() {
        return Ok(Vec::new());
    }
    let prepared = Prepared::lean(seq);
    let shared = model.shared::<f32>();
    let source = Source::new(model, &prepared);
    let problem = StreamedPotentials::builder(&source, shared.duration.nrows())
        .transition(shared.transition.view())
        .duration(shared.duration.view())
        .start(shared.start.view())
        .end(shared.end.view())
        .build()?;
    let crf = engine(cfg.memory_budget);
    let best = crf.viterbi_streamed(&problem)?;
    if best[0].score == f64::NEG_INFINITY {
        // Every sequence has an all-intergenic segmentation: -inf here is a bug, not an answer.
        return Err(Error::Model(
            "no gene structure fits this sequence (Viterbi score -inf)".into(),
        ));
    }
    Ok(genes_of(&best[0].segments))
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
    let out = records
        .par_iter()
        .map(|r| {
            let genes = predict_one(model, &r.seq, cfg).map_err(|e| match e {
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
