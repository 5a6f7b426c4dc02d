//! Snapshots of small fixed problems (f64): log Z, Viterbi, segments, entropy, marginals and
//! gradients, each value written with 10 significant digits. Every number is also checked against the
//! f64 reference oracle before it is compared with the committed snapshot.
#![cfg(feature = "cpu")]

use std::fmt::Write as _;

use semicrf::ndarray::{ArrayD, ArrayViewD, array};
use semicrf::reference::{self, Reference};
use semicrf::{Engine, MaxSemiring, OwnedPotentials, Problem, SemiCrf};

const NEG_INF: f64 = f64::NEG_INFINITY;

/// Fixed significant digits; values within 1e-12 of zero are written as zero, so that
/// rounding noise of different engines (±1e-16 instead of 0) does not change the text.
fn num(x: f64) -> String {
    if x == NEG_INF {
        "-inf".into()
    } else if x.abs() < 1e-12 {
        format!("{:.9e}", 0.0)
    } else {
        format!("{x:.9e}")
    }
}

fn row(xs: impl IntoIterator<Item = f64>) -> String {
    xs.into_iter().map(num).collect::<Vec<_>>().join(" ")
}

/// One line per innermost row, prefixed with its index.
fn tensor(out: &mut String, name: &str, a: ArrayViewD<'_, f64>) {
    writeln!(out, "{name} {:?}:", a.shape()).unwrap();
    if a.ndim() <= 1 {
        writeln!(out, "  {}", row(a.iter().copied())).unwrap();
        return;
    }
    let inner = a.shape()[a.ndim() - 1];
    let flat: Vec<f64> = a.iter().copied().collect();
    let outer_shape = &a.shape()[..a.ndim() - 1];
    for (n, chunk) in flat.chunks(inner.max(1)).enumerate() {
        let mut idx = Vec::with_capacity(outer_shape.len());
        let mut rest = n;
        for &d in outer_shape.iter().rev() {
            idx.push(rest % d);
            rest /= d;
        }
        idx.reverse();
        writeln!(out, "  {idx:?} {}", row(chunk.iter().copied())).unwrap();
    }
}

fn assert_close(what: &str, got: f64, want: f64) {
    let ok = got == want || (got - want).abs() <= 1e-9 * (1.0 + want.abs());
    assert!(ok, "{what}: got {got}, the reference says {want}");
}

fn assert_all_close(what: &str, got: &ArrayD<f64>, want: &ArrayD<f64>) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    for ((i, g), w) in got.indexed_iter().zip(want.iter()) {
        assert_close(&format!("{what} {i:?}"), *g, *w);
    }
}

/// Runs the facade on `owned`, checks every number against the oracle, and writes the report.
fn report(owned: &OwnedPotentials<f64>) -> String {
    let p = owned.view().unwrap();
    let problem: Problem<f64> = p.clone().into();
    let crf = SemiCrf::new();
    let log_z = crf.log_partition(&problem).unwrap();
    let best = crf.viterbi(&problem).unwrap();
    let back = crf.backward(&problem, None).unwrap();
    let m = crf.marginals(&problem).unwrap();

    let entropy = crf.entropy(&problem).unwrap();
    let oracle_max = Engine::<f64>::forward::<MaxSemiring>(&Reference, &problem).unwrap();
    let oracle = Engine::<f64>::backward(&Reference, &problem, &vec![1.0; log_z.len()]).unwrap();
    for b in 0..log_z.len() {
        let bf = reference::brute_force(&p, b).unwrap();
        assert_close("log Z", log_z[b], bf.log_z);
        assert_close("log Z (backward)", back.log_z[b], bf.log_z);
        assert_close("entropy", entropy[b], bf.entropy);
        assert_close("Viterbi score", best[b].score, oracle_max[b]);
        let gold = semicrf::gold_score(&p, b, &best[b].segments).unwrap();
        assert_close("gold score of the Viterbi segments", gold, best[b].score);
    }
    let g = &back.grad;
    let o = &oracle.grad;
    let mut grads: Vec<(&str, ArrayD<f64>, ArrayD<f64>)> = vec![
        (
            "grad.scores",
            g.scores.clone().unwrap().into_dyn(),
            o.scores.clone().unwrap().into_dyn(),
        ),
        (
            "grad.transition",
            g.transition.clone().unwrap(),
            o.transition.clone().unwrap(),
        ),
        (
            "grad.duration",
            g.duration.clone().unwrap().into_dyn(),
            o.duration.clone().unwrap().into_dyn(),
        ),
        (
            "grad.start",
            g.start.clone().unwrap().into_dyn(),
            o.start.clone().unwrap().into_dyn(),
        ),
        (
            "grad.end",
            g.end.clone().unwrap().into_dyn(),
            o.end.clone().unwrap().into_dyn(),
        ),
    ];
    if let (Some(x), Some(y)) = (&g.begin_boundary, &o.begin_boundary) {
        grads.push((
            "grad.begin_boundary",
            x.clone().into_dyn(),
            y.clone().into_dyn(),
        ));
    }
    if let (Some(x), Some(y)) = (&g.end_boundary, &o.end_boundary) {
        grads.push((
            "grad.end_boundary",
            x.clone().into_dyn(),
            y.clone().into_dyn(),
        ));
    }
    for (name, got, want) in &grads {
        assert_all_close(name, got, want);
    }
    let bm = back.boundary_marginals.clone().into_dyn();
    assert_all_close(
        "boundary marginals",
        &bm,
        &oracle.boundary_marginals.clone().into_dyn(),
    );
    assert_all_close(
        "position marginals",
        &m.position.clone().into_dyn(),
        &grads[0].2,
    );

    let mut out = String::new();
    let sh = p.shape();
    writeln!(
        out,
        "shape (B, T, K, C) = ({}, {}, {}, {}), lengths {:?}",
        sh.batch, sh.len, sh.max_duration, sh.labels, owned.lengths
    )
    .unwrap();
    writeln!(out, "log_z: {}", row(log_z.iter().copied())).unwrap();
    writeln!(out, "viterbi: {}", row(best.iter().map(|d| d.score))).unwrap();
    for (b, d) in best.iter().enumerate() {
        let segs: Vec<String> = d
            .segments
            .iter()
            .map(|s| format!("({}, {}, {})", s.start, s.duration, s.label))
            .collect();
        writeln!(out, "segments[{b}]: {}", segs.join(" ")).unwrap();
    }
    writeln!(out, "entropy: {}", row(entropy.iter().copied())).unwrap();
    tensor(&mut out, "position_marginals", m.position.view().into_dyn());
    tensor(&mut out, "boundary_marginals", bm.view());
    // grad.scores equals the position marginals (checked above), so it is not repeated.
    for (name, got, _) in &grads[1..] {
        tensor(&mut out, name, got.view());
    }
    out
}

#[test]
fn three_labels_with_forbidden_transitions() {
    let mut p = OwnedPotentials::new(
        array![[
            [0.5, -0.2, 1.0],
            [1.5, 0.0, -1.0],
            [0.3, 0.8, 0.1],
            [-0.4, 1.2, 0.6],
            [0.0, 0.2, 2.0]
        ]]
        .into_dyn(),
        vec![5],
        3,
    );
    // 0 -> 2 and 2 -> 1 are forbidden, as is repeating label 1.
    p.transition = Some(
        array![
            [0.2, 0.5, NEG_INF],
            [0.1, NEG_INF, 0.4],
            [0.3, NEG_INF, -0.1]
        ]
        .into_dyn(),
    );
    p.duration = Some(array![[0.0, 0.1, -0.3], [0.4, -0.2, 0.0], [-0.6, 0.3, 0.2]].into_dyn());
    insta::assert_snapshot!(report(&p));
}

#[test]
fn duration_dependent_transition_with_boundaries_start_and_end() {
    let mut p = OwnedPotentials::new(
        array![
            [[0.2, -0.5], [1.0, 0.3], [-0.7, 0.9], [0.4, 0.4]],
            [[-0.1, 0.6], [0.5, -0.3], [0.8, 0.0], [0.2, -0.9]]
        ]
        .into_dyn(),
        vec![4, 4],
        2,
    );
    p.transition = Some(array![[[0.1, -0.4], [0.6, 0.0]], [[-0.2, 0.3], [0.5, -0.8]]].into_dyn());
    p.duration = Some(array![[0.0, 0.2], [-0.3, 0.1]].into_dyn());
    p.start = Some(array![0.4, -0.6].into_dyn());
    p.end = Some(array![-0.2, 0.7].into_dyn());
    p.begin_boundary = Some(
        array![
            [[0.1, 0.0], [-0.2, 0.3], [0.0, 0.5], [0.6, -0.1]],
            [[0.0, 0.0], [0.4, -0.4], [-0.3, 0.2], [0.1, 0.1]]
        ]
        .into_dyn(),
    );
    p.end_boundary = Some(
        array![
            [[0.0, 0.2], [0.3, -0.1], [-0.5, 0.0], [0.2, 0.4]],
            [[0.1, -0.2], [0.0, 0.6], [0.2, 0.2], [-0.4, 0.3]]
        ]
        .into_dyn(),
    );
    insta::assert_snapshot!(report(&p));
}

#[test]
fn ragged_batch_with_lengths_five_two_and_one() {
    let mut p = OwnedPotentials::new(
        array![
            [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [0.2, 0.1], [-0.3, 0.4]],
            [[0.3, -0.3], [0.0, 0.9], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
            [[0.7, 0.2], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
        ]
        .into_dyn(),
        vec![5, 2, 1],
        3,
    );
    p.transition = Some(array![[-0.5, 0.3], [0.2, -0.1]].into_dyn());
    p.duration = Some(array![[0.0, 0.0], [0.3, -0.2], [-0.4, 0.1]].into_dyn());
    insta::assert_snapshot!(report(&p));
}

#[test]
fn linear_chain_with_one_position_segments_and_a_forbidden_score() {
    let mut p = OwnedPotentials::new(
        array![[[0.9, 0.1, -0.3], [NEG_INF, 0.5, 0.2], [0.4, NEG_INF, 0.8]]].into_dyn(),
        vec![3],
        1,
    );
    p.transition = Some(array![[0.0, 0.3, -0.2], [0.1, 0.0, 0.5], [-0.4, 0.2, 0.0]].into_dyn());
    p.start = Some(array![0.0, -0.5, 0.3].into_dyn());
    insta::assert_snapshot!(report(&p));
}
