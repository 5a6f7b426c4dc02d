//! The gold score's gradient (`gold_score_pull_back`) against central finite differences of
//! `gold_score` and `gold_score_edges`, for every input of a problem.

use ndarray::{Array1, Array2, Array3, Array5, ArrayD, IxDyn};
use semicrf_core::{
    EdgePotentials, Gradients, LogSemiring, Potentials, Problem, Segment, gold_score,
    gold_score_edges, gold_score_pull_back,
};

const H: f64 = 1e-6;

/// A deterministic spread of values in (-1, 1).
fn values(n: usize, seed: u64) -> Vec<f64> {
    (0..n)
        .map(|i| ((i as u64 * 2654435761 + seed * 97) % 1000) as f64 / 500.0 - 1.0)
        .collect()
}

struct Inputs {
    scores: Array3<f64>,
    transition: ArrayD<f64>,
    duration: Array2<f64>,
    start: Array1<f64>,
    end: Array1<f64>,
    begin: Array3<f64>,
    finish: Array3<f64>,
}

const LENGTHS: [usize; 2] = [7, 5];
const K: usize = 3;
const C: usize = 3;

impl Inputs {
    fn new(transition_dims: &[usize]) -> Self {
        let (b, t) = (LENGTHS.len(), 7);
        let n: usize = transition_dims.iter().product();
        Inputs {
            scores: Array3::from_shape_vec((b, t, C), values(b * t * C, 1)).unwrap(),
            transition: ArrayD::from_shape_vec(IxDyn(transition_dims), values(n, 2)).unwrap(),
            duration: Array2::from_shape_vec((K, C), values(K * C, 3)).unwrap(),
            start: Array1::from(values(C, 4)),
            end: Array1::from(values(C, 5)),
            begin: Array3::from_shape_vec((b, t, C), values(b * t * C, 6)).unwrap(),
            finish: Array3::from_shape_vec((b, t, C), values(b * t * C, 7)).unwrap(),
        }
    }

    fn score(&self, b: usize, segs: &[Segment]) -> f64 {
        let p = Potentials::builder(self.scores.view(), &LENGTHS, K)
            .transition(self.transition.view())
            .duration(self.duration.view())
            .start(self.start.view())
            .end(self.end.view())
            .begin_boundary(self.begin.view())
            .end_boundary(self.finish.view())
            .build()
            .unwrap();
        gold_score(&p, b, segs).unwrap()
    }

    /// Every input as one flat, mutable list, in the order of `Gradients`' fields.
    fn each(&mut self) -> [(&'static str, &mut [f64]); 7] {
        [
            ("scores", self.scores.as_slice_mut().unwrap()),
            ("transition", self.transition.as_slice_mut().unwrap()),
            ("duration", self.duration.as_slice_mut().unwrap()),
            ("start", self.start.as_slice_mut().unwrap()),
            ("end", self.end.as_slice_mut().unwrap()),
            ("begin_boundary", self.begin.as_slice_mut().unwrap()),
            ("end_boundary", self.finish.as_slice_mut().unwrap()),
        ]
    }
}

fn segments() -> [Vec<Segment>; 2] {
    [
        vec![
            Segment::new(0, 2, 1),
            Segment::new(2, 3, 0),
            Segment::new(5, 2, 2),
        ],
        vec![
            Segment::new(0, 1, 2),
            Segment::new(1, 3, 2),
            Segment::new(4, 1, 0),
        ],
    ]
}

fn check_structured(transition_dims: &[usize]) {
    let mut x = Inputs::new(transition_dims);
    let segs = segments();
    let weights = [0.7, -1.3];
    let mut grad = Gradients {
        scores: Some(Array3::zeros(x.scores.raw_dim())),
        transition: Some(ArrayD::zeros(x.transition.raw_dim())),
        duration: Some(Array2::zeros(x.duration.raw_dim())),
        start: Some(Array1::zeros(C)),
        end: Some(Array1::zeros(C)),
        begin_boundary: Some(Array3::zeros(x.begin.raw_dim())),
        end_boundary: Some(Array3::zeros(x.finish.raw_dim())),
        edges: None,
    };
    {
        let p: Problem<'_, f64> = Potentials::builder(x.scores.view(), &LENGTHS, K)
            .transition(x.transition.view())
            .build()
            .unwrap()
            .into();
        for b in 0..2 {
            gold_score_pull_back(&mut grad, &p, b, &segs[b], weights[b]);
        }
    }
    let objective = |x: &Inputs| {
        -(0..2)
            .map(|b| weights[b] * x.score(b, &segs[b]))
            .sum::<f64>()
    };
    let fields = grad.fields();
    for f in 0..7 {
        let n = x.each()[f].1.len();
        let (name, got) = (fields[f].0, fields[f].1.clone().unwrap());
        let got: Vec<f64> = got.iter().copied().collect();
        for i in 0..n {
            let keep = x.each()[f].1[i];
            x.each()[f].1[i] = keep + H;
            let up = objective(&x);
            x.each()[f].1[i] = keep - H;
            let down = objective(&x);
            x.each()[f].1[i] = keep;
            let want = (up - down) / (2.0 * H);
            assert!(
                (got[i] - want).abs() < 1e-7,
                "{name}[{i}]: {} against {want}",
                got[i]
            );
        }
    }
}

#[test]
fn structured_gradients_match_finite_differences() {
    check_structured(&[C, C]);
}

#[test]
fn duration_dependent_transition_gradients_match_finite_differences() {
    check_structured(&[K, C, C]);
}

#[test]
fn edge_gradients_match_finite_differences() {
    let (b, t) = (LENGTHS.len(), 7);
    let n = b * t * K * C * C;
    let mut edges = Array5::from_shape_vec((b, t, K, C, C), values(n, 8)).unwrap();
    let segs = segments();
    let weights = [0.4, 2.0];
    let mut grad = Gradients {
        edges: Some(Array5::zeros(edges.raw_dim())),
        ..Default::default()
    };
    {
        let p: Problem<'_, f64> = EdgePotentials::new(edges.view(), &LENGTHS).unwrap().into();
        for b in 0..2 {
            gold_score_pull_back(&mut grad, &p, b, &segs[b], weights[b]);
        }
    }
    let objective = |e: &Array5<f64>| {
        let p = EdgePotentials::new(e.view(), &LENGTHS).unwrap();
        -(0..2)
            .map(|b| weights[b] * gold_score_edges::<LogSemiring, f64>(&p, b, &segs[b]).unwrap())
            .sum::<f64>()
    };
    let got: Vec<f64> = grad.edges.unwrap().iter().copied().collect();
    for i in 0..n {
        let keep = edges.as_slice().unwrap()[i];
        edges.as_slice_mut().unwrap()[i] = keep + H;
        let up = objective(&edges);
        edges.as_slice_mut().unwrap()[i] = keep - H;
        let down = objective(&edges);
        edges.as_slice_mut().unwrap()[i] = keep;
        let want = (up - down) / (2.0 * H);
        assert!(
            (got[i] - want).abs() < 1e-7,
            "edges[{i}]: {} against {want}",
            got[i]
        );
    }
}
