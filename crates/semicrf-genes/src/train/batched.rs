//! A minibatch as one call of the engine: its genes as one padded `(B, T_max, C)` problem
//! with their lengths, so that a CUDA device runs all of them at once (two thread blocks a
//! gene) instead of one after another.
//!
//! The batch's gradient is the sum of its genes' gradients: each gene's rows of the
//! position gradients are pulled back onto the weights with that gene's contexts, and the
//! shared parameters' gradients (transitions, durations), which the engine returns summed
//! over the batch, are pulled back once. A batch whose call needs more memory than the
//! engine's budget ([`semicrf::SemiCrf::select`] says so before anything is allocated) is
//! split in two, its longer genes in one half, until each part fits.

use ndarray::{Array2, Array3, s};
use rayon::prelude::*;
use semicrf::{Op, Problem, Segment};

use crate::Error;
use crate::labels::C;
use crate::model::{Model, Prepared};

/// The NLL of each gene of a batch (in its order) and the gradient of their sum.
pub(super) struct BatchGradient {
    /// One per gene.
    pub nll: Vec<f64>,
    /// With respect to the weights, without the L2 penalty.
    pub grad: Vec<f64>,
}

/// The NLL and gradient of `genes` (prepared sequences and their gold segmentations), in
/// as few calls of `crf` as its memory budget allows: the genes sorted by length, then
/// halved until a call fits.
pub(super) fn batch_gradient(
    crf: &semicrf::SemiCrf,
    model: &Model,
    genes: &[(&Prepared, &[Segment])],
) -> Result<BatchGradient, Error> {
    let mut order: Vec<usize> = (0..genes.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(genes[i].0.len()));
    let mut nll = vec![0.0; genes.len()];
    let mut grad = vec![0.0; model.layout.total];
    let mut parts = vec![order];
    while let Some(part) = parts.pop() {
        let these: Vec<(&Prepared, &[Segment])> = part.iter().map(|&i| genes[i]).collect();
        match one_call(crf, model, &these) {
            Ok(g) => {
                for (&i, v) in part.iter().zip(g.nll) {
                    nll[i] = v;
                }
                for (a, b) in grad.iter_mut().zip(&g.grad) {
                    *a += b;
                }
            }
            Err(Error::Crf(semicrf::Error::MemoryBudget { .. })) if part.len() > 1 => {
                let (longer, shorter) = part.split_at(part.len() / 2);
                parts.push(shorter.to_vec());
                parts.push(longer.to_vec());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(BatchGradient { nll, grad })
}

/// One call of the engine on `genes` as one padded problem.
fn one_call(
    crf: &semicrf::SemiCrf,
    model: &Model,
    genes: &[(&Prepared, &[Segment])],
) -> Result<BatchGradient, Error> {
    let b_len = genes.len();
    let t_max = genes.iter().map(|g| g.0.len()).max().unwrap_or(0);
    let lengths: Vec<usize> = genes.iter().map(|g| g.0.len()).collect();
    // Padding rows are zero: the engine reads no position past a sequence's length.
    let mut scores = Array3::<f64>::zeros((b_len, t_max, C));
    let mut begin = Array3::<f64>::zeros((b_len, t_max, C));
    let mut end = Array3::<f64>::zeros((b_len, t_max, C));
    let rows: Vec<_> = scores
        .outer_iter_mut()
        .zip(begin.outer_iter_mut())
        .zip(end.outer_iter_mut())
        .zip(genes)
        .collect();
    rows.into_par_iter()
        .for_each(|(((sc, bb), eb), g)| model.fill_rows(g.0, sc, bb, eb));
    let shared = model.shared::<f64>();
    let pot = semicrf::Potentials::builder(scores.view(), &lengths, model.layout.k)
        .transition(shared.transition.view())
        .duration(shared.duration.view())
        .start(shared.start.view())
        .end(shared.end.view())
        .begin_boundary(begin.view())
        .end_boundary(end.view())
        .build()?;
    let gold_scores = genes
        .iter()
        .enumerate()
        .map(|(b, g)| semicrf::gold_score(&pot, b, g.1))
        .collect::<Result<Vec<f64>, _>>()?;
    let problem: Problem<f64> = pot.into();
    // Checks the call's memory against the engine's budget before allocating anything.
    crf.select(&problem, Op::Backward)?;
    let out = crf.backward(&problem, None)?;
    drop(problem);
    drop((scores, begin, end));
    let nll: Vec<f64> = out
        .log_z
        .iter()
        .zip(&gold_scores)
        .map(|(z, g)| z - g)
        .collect();
    let g = out.grad;
    let missing = || Error::Model("the engine returned no gradient".into());
    let mut ds = g.scores.ok_or_else(missing)?;
    let mut db = g.begin_boundary.ok_or_else(missing)?;
    let mut de = g.end_boundary.ok_or_else(missing)?;
    let mut dtr: Array2<f64> = g
        .transition
        .ok_or_else(missing)?
        .into_dimensionality()
        .map_err(|e| Error::Model(e.to_string()))?;
    let mut ddur = g.duration.ok_or_else(missing)?;
    // Gradient of the NLL: expected counts minus the gold segmentations' counts.
    for (b, g) in genes.iter().enumerate() {
        let mut prev = None;
        for sg in g.1 {
            let c = sg.label;
            for u in sg.start..sg.start + sg.duration {
                ds[[b, u, c]] -= 1.0;
            }
            db[[b, sg.start, c]] -= 1.0;
            de[[b, sg.start + sg.duration - 1, c]] -= 1.0;
            ddur[[sg.duration - 1, c]] -= 1.0;
            if let Some(i) = prev {
                dtr[[i, c]] -= 1.0;
            }
            prev = Some(c);
        }
    }
    // Each gene's rows on its own thread; the shared parameters with the first gene.
    let n = model.layout.total;
    let (no_tr, no_dur) = (Array2::zeros((C, C)), Array2::zeros(ddur.raw_dim()));
    let per_gene: Vec<Vec<f64>> = (0..b_len)
        .into_par_iter()
        .map(|b| {
            let t = genes[b].0.len();
            let rows = s![b, ..t, ..];
            let (tr, dur) = if b == 0 {
                (&dtr, &ddur)
            } else {
                (&no_tr, &no_dur)
            };
            let mut out = vec![0.0; n];
            model.pull_back(
                genes[b].0,
                ds.slice(rows),
                db.slice(rows),
                de.slice(rows),
                tr.view(),
                dur.view(),
                &mut out,
            );
            out
        })
        .collect();
    let mut grad = vec![0.0; n];
    for g in &per_gene {
        for (a, b) in grad.iter_mut().zip(g) {
            *a += b;
        }
    }
    Ok(BatchGradient { nll, grad })
}

#[cfg(test)]
mod tests {
    use ndarray::Array2;

    use super::super::{Example, nll_and_gradient};
    use super::*;
    use crate::embedded;
    use crate::model::{engine, gold_segments};

    /// The shortest embedded training genes, prepared, under the shipped model.
    fn genes(n: usize) -> (Model, Vec<Example>) {
        let model = embedded::model().unwrap();
        let mut records = embedded::training().unwrap();
        records.sort_by_key(|r| r.seq.len());
        let examples = records
            .iter()
            .take(n)
            .map(|r| Example {
                prepared: Prepared::new(&r.seq),
                gold: gold_segments(&r.genes, r.seq.len(), model.layout.k).unwrap(),
            })
            .collect();
        (model, examples)
    }

    /// Each gene alone on the CPU engine: its NLL and the sum of the gradients, in order.
    fn one_by_one(model: &Model, examples: &[Example]) -> (Vec<f64>, Vec<f64>) {
        let crf = engine(8 << 30);
        let mut grad = vec![0.0; model.layout.total];
        let nll = examples
            .iter()
            .map(|ex| nll_and_gradient(&crf, model, ex, &mut grad).unwrap())
            .collect();
        (nll, grad)
    }

    /// The error model of GUARANTEES.md: an NLL within `2⁻⁴⁵·M` of the exact one, and each
    /// potential's gradient within `2⁻⁴⁵·M·√T`; a weight's gradient adds up as many of those
    /// as the potentials it moves (counted by pulling back ones).
    fn tolerances(model: &Model, examples: &[Example]) -> (f64, Vec<f64>) {
        let mut m: f64 = 0.0;
        let mut terms = vec![0.0; model.layout.total];
        for ex in examples {
            let p = model.potentials::<f64>(&ex.prepared);
            m = m.max(p.view().unwrap().magnitudes()[0].bound);
            let t = ex.prepared.len();
            let ones = Array2::<f64>::ones((t, C));
            let k = model.layout.k;
            let (tr, dur) = (Array2::ones((C, C)), Array2::ones((k, C)));
            model.pull_back(
                &ex.prepared,
                ones.view(),
                ones.view(),
                ones.view(),
                tr.view(),
                dur.view(),
                &mut terms,
            );
        }
        let t_max = examples.iter().map(|e| e.prepared.len()).max().unwrap() as f64;
        let unit = 2f64.powi(-45) * m;
        let grad = terms.iter().map(|&n| n * unit * t_max.sqrt()).collect();
        (unit, grad)
    }

    fn assert_agree(model: &Model, examples: &[Example], crf: &semicrf::SemiCrf) -> BatchGradient {
        let (nll, grad) = one_by_one(model, examples);
        let genes: Vec<(&Prepared, &[Segment])> = examples
            .iter()
            .map(|e| (&e.prepared, e.gold.as_slice()))
            .collect();
        let batch = batch_gradient(crf, model, &genes).unwrap();
        let (nll_tol, grad_tol) = tolerances(model, examples);
        for (b, (x, y)) in batch.nll.iter().zip(&nll).enumerate() {
            assert!(
                (x - y).abs() <= nll_tol,
                "gene {b}: NLL {x} batched, {y} alone"
            );
        }
        let mut worst: f64 = 0.0;
        for (q, ((x, y), tol)) in batch.grad.iter().zip(&grad).zip(&grad_tol).enumerate() {
            assert!(
                (x - y).abs() <= *tol,
                "weight {q}: {x} batched, {y} alone (tolerance {tol:e})"
            );
            worst = worst.max((x - y).abs());
        }
        // The comparison can fail: the gradient is not small beside its tolerance.
        let largest = grad.iter().fold(0.0f64, |a, g| a.max(g.abs()));
        let loosest = grad_tol.iter().fold(0.0f64, |a, t| a.max(*t));
        assert!(
            largest > 100.0 * loosest,
            "gradient {largest:e}, tolerance {loosest:e}"
        );
        eprintln!("largest difference {worst:e} (largest tolerance {loosest:e})");
        batch
    }

    #[test]
    fn a_padded_batch_gives_each_genes_nll_and_the_sum_of_their_gradients_on_the_cpu() {
        // Genes of different lengths: the shorter ones padded.
        let (model, examples) = genes(4);
        let lengths: Vec<usize> = examples.iter().map(|e| e.prepared.len()).collect();
        assert!(lengths[0] < lengths[3], "{lengths:?}");
        assert_agree(&model, &examples, &engine(8 << 30));
    }

    #[test]
    fn a_batch_over_the_memory_budget_is_split_and_gives_the_same_answer() {
        let (model, examples) = genes(3);
        // Room for one gene's call but not for the three together.
        let one = |ex: &Example| {
            let p = model.potentials::<f64>(&ex.prepared);
            let problem: Problem<f64> = p.view().unwrap().into();
            engine(8 << 30)
                .select(&problem, Op::Backward)
                .unwrap()
                .required
        };
        let budget = examples.iter().map(one).max().unwrap();
        let crf = semicrf::SemiCrf::with_config(
            semicrf::Config::new()
                .backend(semicrf::Backend::Streaming)
                .parallelism(semicrf::Parallelism::Sequential)
                .memory_budget(budget),
        );
        let genes: Vec<(&Prepared, &[Segment])> = examples
            .iter()
            .map(|e| (&e.prepared, e.gold.as_slice()))
            .collect();
        let whole = one_call(&crf, &model, &genes);
        assert!(
            matches!(whole, Err(Error::Crf(semicrf::Error::MemoryBudget { .. }))),
            "the three genes fit in one gene's budget"
        );
        assert_agree(&model, &examples, &crf);
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn a_batch_on_cuda_gives_the_cpu_engines_nll_and_gradients() {
        if semicrf::cuda::CudaEngine::usable_or_skip(0).is_none() {
            return;
        }
        // Eight genes of 1.5–3 kb and the longest embedded one, as one call.
        let (model, mut examples) = genes(8);
        let (_, mut all) = genes(60);
        examples.push(all.pop().unwrap());
        assert_agree(
            &model,
            &examples,
            &super::super::training_engine(semicrf::Device::Cuda(0)),
        );
    }
}
