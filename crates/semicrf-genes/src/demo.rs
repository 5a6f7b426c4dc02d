//! `demo`: the shipped model on the embedded test genes beside other gene finders, then a
//! model trained from nothing on the embedded training genes.

use std::path::Path;
use std::time::Instant;

use semicrf_genes::predict::PredictConfig;
use semicrf_genes::train::TrainConfig;
use semicrf_genes::{Error, embedded, eval, modelfile, plot, predict, train};

use crate::{pictures, structure_rows, summary, write_gff};

/// Exon F1 of other gene finders on the 100 test genes (the crate README's table).
const OTHERS: [(&str, f64); 3] = [
    ("AUGUSTUS, retrained on the same 486 genes", 0.806),
    ("AUGUSTUS, its shipped fly parameters", 0.867),
    ("SNAP, D.melanogaster.hmm", 0.772),
];

pub fn run(out: &Path, epochs: usize, progress: bool) -> Result<(), Error> {
    std::fs::create_dir_all(out).map_err(|e| Error::Io {
        path: out.display().to_string(),
        source: e,
    })?;
    let test = embedded::test()?;
    let training = embedded::training()?;
    let pcfg = PredictConfig {
        progress,
        ..PredictConfig::default()
    };

    let shipped = embedded::model()?;
    let clock = Instant::now();
    let predicted = predict::predict(&shipped, &test, &pcfg)?;
    let m = eval::evaluate(&test, &predicted);
    println!(
        "The shipped model (trained on the 486 training genes of the AUGUSTUS tutorial) on \
         the {} test genes, decoded in {:.1} s:",
        test.len(),
        clock.elapsed().as_secs_f64()
    );
    print!("{m}");
    println!("exon F1 on the same genes (both ends and the strand exact):");
    println!(
        "  {:<44} {:.3}",
        "semicrf-genes, the shipped model",
        m.exon.f1()
    );
    for (name, f1) in OTHERS {
        println!("  {name:<44} {f1:.3}");
    }
    let rows = structure_rows(&test, &predicted, 6);
    plot::structures(&out.join("structures.svg"), &rows)?;
    plot::durations(&out.join("durations.svg"), &shipped)?;
    write_gff(&out.join("predictions.gff3"), &predicted)?;

    println!(
        "\nTraining from nothing on the {} embedded training genes:",
        training.len()
    );
    let cfg = TrainConfig {
        epochs,
        progress,
        ..TrainConfig::default()
    };
    let counted = TrainConfig {
        epochs: 0,
        ..cfg.clone()
    };
    let (start, _) = train::train(&training, &counted)?;
    let f1 = |model: &semicrf_genes::model::Model| -> Result<f64, Error> {
        let p = predict::predict(
            model,
            &test,
            &PredictConfig {
                progress: false,
                ..pcfg.clone()
            },
        )?;
        Ok(eval::evaluate(&test, &p).exon.f1())
    };
    println!(
        "  {:<44} exon F1 {:.3}",
        "counted (the generative estimates alone)",
        f1(&start)?
    );
    let (model, report) = train::train(&training, &cfg)?;
    let then = format!(
        "then {epochs} epoch{} of training ({:.0} s)",
        if epochs == 1 { "" } else { "s" },
        report.seconds
    );
    println!("  {then:<44} exon F1 {:.3}", f1(&model)?);
    summary(&report);
    pictures(&out.join("trained-here"), &report, &model)?;
    std::fs::rename(
        out.join("trained-here").join("training.svg"),
        out.join("training.svg"),
    )
    .map_err(|e| Error::Io {
        path: out.display().to_string(),
        source: e,
    })?;
    modelfile::save(&model, &out.join("trained-here").join("model.json"))?;
    println!(
        "wrote {0}/{{structures,durations,training}}.svg, {0}/predictions.gff3 and \
         {0}/trained-here/{{model.json,durations.svg}}",
        out.display()
    );
    Ok(())
}
