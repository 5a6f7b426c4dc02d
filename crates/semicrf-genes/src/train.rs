//! Training: from weights counted from the genes ([`Model::initialise`]), the regularised
//! negative log-likelihood minimised with Adam over minibatches of genes, the gradients of
//! every gene computed by semicrf's streaming engine: on the CPU the genes of a minibatch
//! spread over the threads longest first; on a CUDA device the whole minibatch as one padded
//! problem in one call (module `batched`), its genes of similar lengths
//! ([`TrainConfig::by_length`]).

use indicatif::{ProgressBar, ProgressStyle};
use ndarray::{Array2, s};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rayon::prelude::*;
use semicrf::{Device, Problem, Segment};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::Error;
use crate::data::Record;
use crate::model::{Model, Prepared, engine, gold_segments, why_impossible};

mod batched;

/// The memory budget of one CUDA call of training (a minibatch's padded problem); a
/// minibatch that needs more is split in two, its longer genes in one half, until each part
/// fits.
pub const CUDA_MEMORY_BUDGET: u64 = 24 << 30;

/// Training settings.
#[derive(Clone, Debug)]
pub struct TrainConfig {
    /// Passes over the training genes.
    pub epochs: usize,
    /// Genes per Adam step.
    pub batch: usize,
    /// Adam's step size at the start (it decays linearly to a tenth).
    pub learning_rate: f64,
    /// L2 penalty per weight (its distance from the starting weights), per thousand bases
    /// of a minibatch.
    pub l2: f64,
    /// Longest exon modelled (`K`).
    pub max_exon: usize,
    /// Seed of the minibatch order.
    pub seed: u64,
    /// Start from the generative estimates of the training genes ([`Model::initialise`])
    /// and pull towards them with the L2 penalty; else start from and pull towards zero.
    pub initialise: bool,
    /// Draw progress bars.
    pub progress: bool,
    /// Where the engine runs: the CPU (genes spread over rayon's threads, longest first) or
    /// a CUDA device (a minibatch in one call; needs the `cuda` feature).
    pub device: Device,
    /// Minibatches of genes of similar lengths: each epoch the genes (in a fresh random
    /// order) are sorted by length and cut into minibatches, whose order is then shuffled.
    /// A minibatch in one call costs its longest gene's time, so on a CUDA device this
    /// halves an epoch (the training genes: the sum of the minibatches' longest genes is
    /// 0.42 Mb instead of about 1.25 Mb for random minibatches of 8). Else the minibatches
    /// are consecutive genes of a random order.
    pub by_length: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            epochs: 2,
            batch: 8,
            learning_rate: 0.003,
            l2: 0.01,
            max_exon: 8192,
            seed: 7,
            initialise: true,
            progress: true,
            device: Device::Cpu,
            by_length: false,
        }
    }
}

/// What training did, epoch by epoch.
#[derive(Clone, Debug, Default)]
pub struct TrainReport {
    /// Mean negative log-likelihood per thousand bases over each epoch.
    pub nll_per_kb: Vec<f64>,
    /// Genes trained on.
    pub genes: usize,
    /// Bases trained on.
    pub bases: usize,
    /// Records left out, with the reason.
    pub skipped: Vec<(String, String)>,
    /// Wall time, seconds.
    pub seconds: f64,
}

struct Example {
    prepared: Prepared,
    gold: Vec<Segment>,
}

/// The engine of training's backward passes on `device`.
fn training_engine(device: Device) -> semicrf::SemiCrf {
    match device {
        Device::Cpu => engine(8 << 30),
        // The potentials go to the device as `f64`: the kernels compute in `f64` whatever
        // the input type, so `f32` would only round every potential by up to 6·10⁻⁸ of its
        // size (errors that add up along a 100 kb gene) to save copies that take
        // milliseconds beside seconds of kernels.
        Device::Cuda(_) => semicrf::SemiCrf::with_config(
            semicrf::Config::new()
                .backend(semicrf::Backend::Streaming)
                .device(device)
                .memory_budget(CUDA_MEMORY_BUDGET),
        ),
    }
}

/// The NLL of one example and its gradient added to `grad`.
fn nll_and_gradient(
    crf: &semicrf::SemiCrf,
    model: &Model,
    ex: &Example,
    grad: &mut [f64],
) -> Result<f64, Error> {
    let p = model.potentials::<f64>(&ex.prepared);
    let pot = p.view()?;
    let gold_score = semicrf::gold_score(&pot, 0, &ex.gold)?;
    let problem: Problem<f64> = pot.into();
    let out = crf.backward(&problem, None)?;
    let nll = out.log_z[0] - gold_score;
    let g = out.grad;
    let missing = || Error::Model("the streaming engine returned no gradient".into());
    let mut ds = g.scores.ok_or_else(missing)?.slice_move(s![0, .., ..]);
    let mut db = g
        .begin_boundary
        .ok_or_else(missing)?
        .slice_move(s![0, .., ..]);
    let mut de = g
        .end_boundary
        .ok_or_else(missing)?
        .slice_move(s![0, .., ..]);
    let mut dtr: Array2<f64> = g
        .transition
        .ok_or_else(missing)?
        .into_dimensionality()
        .map_err(|e| Error::Model(e.to_string()))?;
    let mut ddur = g.duration.ok_or_else(missing)?;
    // Gradient of the NLL: expected counts minus the gold segmentation's counts.
    let mut prev = None;
    for sg in &ex.gold {
        let c = sg.label;
        for u in sg.start..sg.start + sg.duration {
            ds[[u, c]] -= 1.0;
        }
        db[[sg.start, c]] -= 1.0;
        de[[sg.start + sg.duration - 1, c]] -= 1.0;
        ddur[[sg.duration - 1, c]] -= 1.0;
        if let Some(i) = prev {
            dtr[[i, c]] -= 1.0;
        }
        prev = Some(c);
    }
    model.pull_back(
        &ex.prepared,
        ds.view(),
        db.view(),
        de.view(),
        dtr.view(),
        ddur.view(),
        grad,
    );
    Ok(nll)
}

/// Trains a model from zero weights on the genes of `records`.
///
/// Records whose annotation the model cannot represent (an exon longer than
/// `max_exon`, a gene touching the sequence's edge) are left out and listed in the report.
pub fn train(records: &[Record], cfg: &TrainConfig) -> Result<(Model, TrainReport), Error> {
    let clock = std::time::Instant::now();
    let mut model = Model::new(cfg.max_exon);
    let mut report = TrainReport::default();
    let mut examples = Vec::new();
    for r in records {
        let gold = gold_segments(&r.genes, r.seq.len(), cfg.max_exon).and_then(|gold| {
            let prepared = Prepared::new(&r.seq);
            match why_impossible(&model, &prepared, &gold) {
                Some(why) => Err(why),
                None => Ok(Example { prepared, gold }),
            }
        });
        match gold {
            Ok(ex) => examples.push(ex),
            Err(why) => report.skipped.push((r.name.clone(), why)),
        }
    }
    if examples.is_empty() {
        return Err(Error::Model("no trainable gene in the training set".into()));
    }
    if cfg.initialise {
        model.initialise(examples.iter().map(|e| (&e.prepared, e.gold.as_slice())));
    }
    let prior = model.w.clone();
    report.genes = examples.iter().map(|e| gene_count(&e.gold)).sum();
    report.bases = examples.iter().map(|e| e.prepared.len()).sum();
    let n = model.layout.total;
    let (mut m1, mut m2) = (vec![0.0; n], vec![0.0; n]);
    let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut order: Vec<usize> = (0..examples.len()).collect();
    let steps_per_epoch = examples.len().div_ceil(cfg.batch.max(1));
    let total_steps = (steps_per_epoch * cfg.epochs).max(1);
    let mut step = 0usize;
    let crf = training_engine(cfg.device);
    for epoch in 0..cfg.epochs {
        order.shuffle(&mut rng);
        let chunks = minibatches(&order, &examples, cfg, &mut rng);
        let bar = progress_bar(cfg.progress, examples.len() as u64, epoch, cfg.epochs);
        let (mut nll_sum, mut bases_sum) = (0.0, 0usize);
        for chunk in &chunks {
            let (nlls, grad) = chunk_gradient(&crf, cfg.device, &model, &examples, chunk)?;
            let bases: usize = chunk.iter().map(|&e| examples[e].prepared.len()).sum();
            for nll in nlls {
                if !nll.is_finite() {
                    return Err(Error::Model(format!(
                        "the negative log-likelihood became {nll} at epoch {}",
                        epoch + 1
                    )));
                }
                nll_sum += nll;
            }
            bases_sum += bases;
            // Adam on the NLL per thousand bases plus the L2 penalty.
            let scale = 1000.0 / bases as f64;
            step += 1;
            let lr = cfg.learning_rate * (1.0 - 0.9 * (step - 1) as f64 / total_steps as f64);
            let (c1, c2) = (1.0 - b1.powi(step as i32), 1.0 - b2.powi(step as i32));
            for q in 0..n {
                let g = grad[q] * scale + cfg.l2 * (model.w[q] - prior[q]);
                m1[q] = b1 * m1[q] + (1.0 - b1) * g;
                m2[q] = b2 * m2[q] + (1.0 - b2) * g * g;
                model.w[q] -= lr * (m1[q] / c1) / ((m2[q] / c2).sqrt() + eps);
            }
            bar.inc(chunk.len() as u64);
            bar.set_message(format!("NLL {:.2}/kb", 1000.0 * nll_sum / bases_sum as f64));
        }
        bar.finish_and_clear();
        report.nll_per_kb.push(1000.0 * nll_sum / bases_sum as f64);
        if !cfg.progress {
            continue;
        }
        eprintln!(
            "epoch {:>2}/{}: NLL {:.3} per kb ({:.0} s)",
            epoch + 1,
            cfg.epochs,
            report.nll_per_kb[epoch],
            clock.elapsed().as_secs_f64()
        );
    }
    report.seconds = clock.elapsed().as_secs_f64();
    Ok((model, report))
}

/// An epoch's minibatches: consecutive genes of `order`, or, with
/// [`TrainConfig::by_length`], genes of similar lengths in a random order of minibatches.
fn minibatches(
    order: &[usize],
    examples: &[Example],
    cfg: &TrainConfig,
    rng: &mut rand_chacha::ChaCha8Rng,
) -> Vec<Vec<usize>> {
    let size = cfg.batch.max(1);
    if !cfg.by_length {
        return order.chunks(size).map(<[usize]>::to_vec).collect();
    }
    let mut sorted = order.to_vec();
    // Stable: genes of equal length keep the epoch's random order.
    sorted.sort_by_key(|&e| examples[e].prepared.len());
    let mut chunks: Vec<Vec<usize>> = sorted.chunks(size).map(<[usize]>::to_vec).collect();
    chunks.shuffle(rng);
    chunks
}

/// The NLL of each example of `chunk` and the gradient of their sum: on the CPU each
/// example on its own ([`minibatch`]), summed in the chunk's order; on a CUDA device the
/// chunk as one padded problem ([`batched::batch_gradient`]).
fn chunk_gradient(
    crf: &semicrf::SemiCrf,
    device: Device,
    model: &Model,
    examples: &[Example],
    chunk: &[usize],
) -> Result<(Vec<f64>, Vec<f64>), Error> {
    if device != Device::Cpu {
        let genes: Vec<_> = chunk
            .iter()
            .map(|&e| (&examples[e].prepared, examples[e].gold.as_slice()))
            .collect();
        let g = batched::batch_gradient(crf, model, &genes)?;
        return Ok((g.nll, g.grad));
    }
    let mut grad = vec![0.0; model.layout.total];
    let mut nlls = Vec::with_capacity(chunk.len());
    for r in minibatch(crf, model, examples, chunk) {
        let (nll, g) = r?;
        nlls.push(nll);
        for (a, b) in grad.iter_mut().zip(&g) {
            *a += b;
        }
    }
    Ok((nlls, grad))
}

/// One example's NLL and gradient, or what went wrong.
type Gradient = Result<(f64, Vec<f64>), Error>;

/// The NLL and gradient of every example of `chunk`, in its order.
///
/// On the CPU the examples are taken longest first from a shared queue by as many workers
/// as rayon has threads: a long gene starts at once, and the short ones fill the other
/// threads meanwhile (one gene per thread in the batch's random order left a thread idle
/// behind a long gene that started last). The results do not depend on the schedule: each
/// example's gradient is its own, summed afterwards in the batch's order.
fn minibatch(
    crf: &semicrf::SemiCrf,
    model: &Model,
    examples: &[Example],
    chunk: &[usize],
) -> Vec<Gradient> {
    let n = model.layout.total;
    let one = |e: usize| {
        let mut g = vec![0.0; n];
        let nll = nll_and_gradient(crf, model, &examples[e], &mut g)?;
        Ok((nll, g))
    };
    let mut queue: Vec<usize> = (0..chunk.len()).collect();
    queue.sort_by_key(|&q| std::cmp::Reverse(examples[chunk[q]].prepared.len()));
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Gradient>>> = chunk.iter().map(|_| Mutex::new(None)).collect();
    let workers = rayon::current_num_threads().min(chunk.len());
    (0..workers).into_par_iter().for_each(|_| {
        loop {
            let q = next.fetch_add(1, Ordering::Relaxed);
            let Some(&at) = queue.get(q) else { break };
            let r = one(chunk[at]);
            *slots[at].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(|| Err(Error::Model("a gradient was not computed".into())))
        })
        .collect()
}

/// The negative log-likelihood of the annotation of one record under `model`, and its
/// gradient with respect to the weights (without the L2 penalty).
pub fn objective(model: &Model, record: &Record) -> Result<(f64, Vec<f64>), Error> {
    let gold =
        gold_segments(&record.genes, record.seq.len(), model.layout.k).map_err(Error::Model)?;
    let ex = Example {
        prepared: Prepared::new(&record.seq),
        gold,
    };
    let mut grad = vec![0.0; model.layout.total];
    let nll = nll_and_gradient(&engine(8 << 30), model, &ex, &mut grad)?;
    Ok((nll, grad))
}

fn gene_count(segs: &[Segment]) -> usize {
    crate::model::genes_of(segs).len()
}

fn progress_bar(show: bool, len: u64, epoch: usize, epochs: usize) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} genes, {msg}, {elapsed}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(format!("epoch {}/{epochs}", epoch + 1));
    bar
}
