//! The gene finder end to end on a few embedded records, and its parts against independent
//! checks: the gradient against finite differences, the segmentation of the annotation
//! against the annotation, model files bit for bit, and malformed input.

use rand::{Rng, SeedableRng};
use semicrf_genes::data::{self, Gene, Record};
use semicrf_genes::model::{Model, Prepared, genes_of, gold_segments, why_impossible};
use semicrf_genes::predict::{PredictConfig, predict};
use semicrf_genes::train::{TrainConfig, objective, train};
use semicrf_genes::{Error, embedded, eval, modelfile};

fn quiet() -> PredictConfig {
    PredictConfig {
        progress: false,
        ..PredictConfig::default()
    }
}

#[test]
fn train_predict_and_evaluate_a_tiny_subset_through_files() {
    let training: Vec<Record> = embedded::training().unwrap().into_iter().take(6).collect();
    let test: Vec<Record> = embedded::test().unwrap().into_iter().take(3).collect();
    // From zero weights, so that the NLL has somewhere to fall.
    let cfg = TrainConfig {
        epochs: 3,
        batch: 3,
        progress: false,
        initialise: false,
        learning_rate: 0.05,
        ..TrainConfig::default()
    };
    let (model, report) = train(&training, &cfg).unwrap();
    assert_eq!(report.nll_per_kb.len(), 3);
    assert!(report.nll_per_kb.iter().all(|x| x.is_finite() && *x >= 0.0));
    assert!(
        report.nll_per_kb[2] < report.nll_per_kb[0],
        "training did not lower the NLL: {:?}",
        report.nll_per_kb
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.json");
    modelfile::save(&model, &path).unwrap();
    let back = modelfile::load(&path).unwrap();
    assert_eq!(back.layout, model.layout);
    assert!(
        back.w
            .iter()
            .zip(&model.w)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );

    let predicted = predict(&back, &test, &quiet()).unwrap();
    assert_eq!(predicted.len(), test.len());
    let direct = eval::evaluate(&test, &predicted);
    let gff = dir.path().join("p.gff3");
    let mut f = std::fs::File::create(&gff).unwrap();
    data::write_gff3(&mut f, &predicted).unwrap();
    drop(f);
    let read = data::read_gff3_exons(&gff).unwrap();
    let annotated = eval::scored(
        test.iter()
            .flat_map(|r| r.genes.iter().map(move |g| (r.name.as_str(), g))),
    );
    assert_eq!(eval::compare(&annotated, &read), direct);
    // The annotation scored against itself is perfect.
    let truth: Vec<(String, Vec<Gene>)> = test
        .iter()
        .map(|r| (r.name.clone(), r.genes.clone()))
        .collect();
    let m = eval::evaluate(&test, &truth);
    assert_eq!(
        (m.exon.f1(), m.gene.f1(), m.nucleotide.f1()),
        (1.0, 1.0, 1.0)
    );
}

#[test]
fn the_counted_start_scores_unseen_genes_far_above_zero_weights() {
    let training: Vec<Record> = embedded::training().unwrap().into_iter().take(20).collect();
    let cfg = |initialise| TrainConfig {
        epochs: 0,
        progress: false,
        initialise,
        ..TrainConfig::default()
    };
    let (counted, _) = train(&training, &cfg(true)).unwrap();
    let (zero, _) = train(&training, &cfg(false)).unwrap();
    assert!(zero.w.iter().all(|&w| w == 0.0));
    for r in embedded::test().unwrap().iter().take(3) {
        let (a, _) = semicrf_genes::train::objective(&counted, r).unwrap();
        let (b, _) = semicrf_genes::train::objective(&zero, r).unwrap();
        // Zero weights leave every segmentation alike; the counts pick the annotation out.
        assert!(a.is_finite() && a < 0.5 * b, "{}: NLL {a} vs {b}", r.name);
    }
}

#[test]
fn the_annotation_is_a_possible_segmentation_and_reads_back_as_itself() {
    let model = Model::new(2048);
    let mut possible = 0;
    for r in embedded::training()
        .unwrap()
        .iter()
        .chain(&embedded::test().unwrap())
    {
        let Ok(segs) = gold_segments(&r.genes, r.seq.len(), 2048) else {
            continue;
        };
        assert_eq!(genes_of(&segs), r.genes, "{}", r.name);
        if why_impossible(&model, &Prepared::new(&r.seq), &segs).is_none() {
            possible += 1;
        }
    }
    // Two of the 80 records hold an exon beyond 2048 bases or a non-canonical splice site.
    assert!(possible >= 76, "{possible} of 80 annotations are possible");
}

#[test]
fn the_gradient_matches_central_finite_differences() {
    let r = &embedded::training().unwrap()[0];
    let mut model = Model::new(2048);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    for w in model.w.iter_mut() {
        *w = rng.random_range(-0.3..0.3);
    }
    let (_, grad) = objective(&model, r).unwrap();
    // The coordinates with the largest gradients, and a few random ones.
    let mut idx: Vec<usize> = (0..grad.len()).collect();
    idx.sort_by(|&a, &b| grad[b].abs().total_cmp(&grad[a].abs()));
    idx.truncate(12);
    idx.extend((0..8).map(|_| rng.random_range(0..grad.len())));
    let h = 1e-5;
    for &i in &idx {
        let mut m = model.clone();
        m.w[i] += h;
        let up = objective(&m, r).unwrap().0;
        m.w[i] -= 2.0 * h;
        let down = objective(&m, r).unwrap().0;
        let fd = (up - down) / (2.0 * h);
        assert!(
            (fd - grad[i]).abs() <= 1e-4 * (1.0 + grad[i].abs()),
            "weight {i}: gradient {} vs finite difference {fd}",
            grad[i]
        );
    }
}

#[test]
fn fasta_with_n_lower_case_and_iupac_codes_is_decoded() {
    let test = embedded::test().unwrap();
    let r = &test[0];
    let mut letters: Vec<u8> = r
        .seq
        .iter()
        .map(|&c| semicrf_genes::dna::LETTERS[c as usize])
        .collect();
    for (i, l) in letters.iter_mut().enumerate().take(400) {
        *l = match i % 4 {
            0 => b'n',
            1 => b'R',
            2 => l.to_ascii_lowercase(),
            _ => b'Y',
        };
    }
    let text = format!(
        ">{} a description\n{}\n",
        r.name,
        String::from_utf8(letters).unwrap()
    );
    let recs = data::parse_fasta(text.as_bytes(), "test.fa").unwrap();
    assert_eq!(recs[0].name, r.name);
    assert_eq!(recs[0].seq.len(), r.seq.len());
    let genes = predict(&Model::new(2048), &recs, &quiet()).unwrap();
    assert_eq!(genes.len(), 1);
}

#[test]
fn malformed_input_is_a_clear_error_naming_the_record() {
    let good = embedded::TEST.split("//\n").next().unwrap().to_string() + "//\n";
    let bad_cds = good.replacen("CDS             ", "CDS             complement(", 1);
    let two = format!("{good}{}", bad_cds.replace("join(", "join(<"));
    let e = data::parse_genbank(two.as_bytes(), "x.gb")
        .unwrap_err()
        .to_string();
    assert!(e.contains("x.gb") && e.contains("record 2"), "{e}");
    let unterminated = good.trim_end_matches("//\n").to_string();
    let e = data::parse_genbank(unterminated.as_bytes(), "y.gb")
        .unwrap_err()
        .to_string();
    assert!(e.contains("record 1") && e.contains("//"), "{e}");
    let e = data::parse_fasta(&b">a\nACGT!!\n"[..], "z.fa")
        .unwrap_err()
        .to_string();
    assert!(e.contains("z.fa") && e.contains("\"a\""), "{e}");
    assert!(matches!(
        modelfile::from_json("{\"format\":1}", "m.json"),
        Err(Error::Input { .. })
    ));
}
