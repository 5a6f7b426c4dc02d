//! Quick start: run the semicrf facade on a small problem and print log Z, the Viterbi
//! segments, the entropy of the posterior and the marginals.
//!
//! ```text
//! cargo run --release --example quickstart
//! ```

use semicrf::ndarray::{Array3, array};
use semicrf::{Op, Potentials, Segment, SemiCrf};

fn main() -> Result<(), semicrf::Error> {
    // Two sequences (the second one shorter), 3 labels, segments of 1 to 4 positions.
    // scores[b, t, c]: how much position t of sequence b looks like label c.
    let scores = Array3::from_shape_fn((2, 8, 3), |(b, t, c)| {
        let pattern = [0, 0, 1, 1, 1, 2, 0, 0];
        let shift = b * 2;
        if pattern[(t + shift) % 8] == c {
            1.5
        } else {
            -0.5
        }
    });
    // transition[i, j]: going from label i to label j; -inf forbids 2 -> 1.
    let transition = array![
        [-1.0, 0.5, 0.2],
        [0.3, -1.0, 0.4],
        [0.6, f64::NEG_INFINITY, -1.0]
    ];
    // duration[d - 1, c]: label 1 prefers long segments, label 2 short ones.
    let duration = array![
        [0.0, -0.5, 0.5],
        [0.0, 0.0, 0.0],
        [0.0, 0.5, -0.5],
        [0.0, 0.5, -1.0]
    ];
    let lengths = [8, 6];
    let potentials = Potentials::builder(scores.view(), &lengths, 4)
        .transition(transition.view())
        .duration(duration.view())
        .build()?;

    let crf = SemiCrf::new();
    let selection = crf.select(&potentials, Op::Backward)?;
    println!("backend: {}/{}", selection.device, selection.algorithm);
    println!("reason:  {}", selection.reason);

    let log_z = crf.log_partition(&potentials)?;
    let best = crf.viterbi(&potentials)?;
    let entropy = crf.entropy(&potentials)?;
    let marginals = crf.marginals(&potentials)?;
    for (b, &len) in lengths.iter().enumerate() {
        println!("\nsequence {b} (length {len})");
        println!("  log Z         = {:.6}", log_z[b]);
        println!("  Viterbi score = {:.6}", best[b].score);
        println!(
            "  entropy       = {:.6} nats (of the posterior over segmentations)",
            entropy[b]
        );
        let segments: Vec<String> = best[b]
            .segments
            .iter()
            .map(|s: &Segment| format!("[{}, {}) label {}", s.start, s.end(), s.label))
            .collect();
        println!("  segments      = {}", segments.join(", "));
        println!("  t  P(segment starts at t)  P(label 0, 1, 2 at t)");
        for t in 0..len {
            println!(
                "  {t}  {:>22.4}  {:.4} {:.4} {:.4}",
                marginals.boundary[[b, t]],
                marginals.position[[b, t, 0]],
                marginals.position[[b, t, 1]],
                marginals.position[[b, t, 2]],
            );
        }
    }
    let gold: Vec<Vec<Segment>> = best.iter().map(|d| d.segments.clone()).collect();
    let nll = crf.nll(&potentials, &gold)?;
    println!("\nNLL of the Viterbi segmentations: {nll:.6?}");
    Ok(())
}
