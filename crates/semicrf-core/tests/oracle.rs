//! The oracle is tested itself: the plain exact recurrences over materialised edges agree with
//! brute-force enumeration scored by the model's score formula ([`gold_score`]).

use ndarray::Array3;
use semicrf_core::testing::{cases, random_problem, random_segmentation, random_spec};
use semicrf_core::{
    EdgePotentials, EntropySemiring, LogSemiring, MaxSemiring, OwnedPotentials, Potentials,
    gold_score, gold_score_edges, materialize, reference,
};

fn rel_close(a: f64, b: f64, tol: f64) -> bool {
    if a == b {
        return true;
    }
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(1.0)
}

fn problems() -> Vec<(String, OwnedPotentials<f64>)> {
    cases(1000, 400)
}

#[test]
fn reference_exact_forward_and_viterbi_agree_with_brute_force() {
    let mut n = 0;
    for (name, owned) in problems() {
        let p = owned.view().unwrap();
        let e = materialize(&p);
        let lz = reference::forward_log(e.view(), p.lengths());
        let mx = reference::forward::<MaxSemiring>(e.view(), p.lengths());
        let vit = reference::viterbi(e.view(), p.lengths());
        let ent = reference::forward::<EntropySemiring>(e.view(), p.lengths());
        for b in 0..p.shape().batch {
            let bf = reference::brute_force(&p, b).unwrap();
            assert!(
                rel_close(ent[b].log_weight, bf.log_z, 1e-12),
                "{name} b={b}"
            );
            // The entropy is a mixture of differences of scores: its rounding error is
            // relative to the size of the scores (log Z), not to its own size, which is small
            // when one segmentation dominates.
            assert!(
                (ent[b].entropy - bf.entropy).abs() <= 1e-12 * bf.log_z.abs().max(1.0),
                "{name} b={b}: entropy {} vs {}",
                ent[b].entropy,
                bf.entropy
            );
            assert!(
                rel_close(lz[b], bf.log_z, 1e-12),
                "{name} b={b}: {} vs {}",
                lz[b],
                bf.log_z
            );
            assert!(rel_close(mx[b], bf.max, 1e-12), "{name} b={b}: max");
            assert!(
                rel_close(vit[b].score, bf.max, 1e-12),
                "{name} b={b}: viterbi"
            );
            if bf.max.is_finite() {
                let g = gold_score(&p, b, &vit[b].segments).unwrap();
                assert!(
                    rel_close(g, vit[b].score, 1e-12),
                    "{name} b={b}: gold of viterbi"
                );
            } else {
                assert!(vit[b].segments.is_empty());
            }
            n += 1;
        }
    }
    assert!(n > 500, "only {n} sequences checked");
}

#[test]
fn reference_edge_form_agrees_with_brute_force_over_the_virtual_start() {
    for seed in 0..150u64 {
        let owned = random_problem(seed, &random_spec(seed));
        let p = owned.view().unwrap();
        // A general edge tensor: perturb every finite entry so all sources matter at s = 0.
        let mut e = materialize(&p);
        e.mapv_inplace(|x| if x.is_finite() { x } else { -0.5 });
        let ep = EdgePotentials::new(e.view(), p.lengths()).unwrap();
        let lz = reference::forward_log(e.view(), p.lengths());
        let vit = reference::viterbi(e.view(), p.lengths());
        for b in 0..p.shape().batch {
            let bf = reference::brute_force_edges(&ep, b).unwrap();
            assert!(rel_close(lz[b], bf.log_z, 1e-12), "seed {seed} b={b}");
            assert!(rel_close(vit[b].score, bf.max, 1e-12), "seed {seed} b={b}");
            let g = gold_score_edges::<MaxSemiring, f64>(&ep, b, &vit[b].segments).unwrap();
            assert!(rel_close(g, bf.max, 1e-12));
        }
    }
}

#[test]
fn reference_edge_marginals_match_finite_differences_of_log_z() {
    for seed in 0..40u64 {
        let owned = random_problem(seed, &random_spec(seed));
        let p = owned.view().unwrap();
        let e = materialize(&p);
        let (lz, mu) = reference::edge_marginals(e.view(), p.lengths());
        if lz.iter().any(|z| !z.is_finite()) {
            continue;
        }
        let h = 1e-5;
        for (idx, &x) in e.indexed_iter() {
            if !x.is_finite() {
                assert_eq!(mu[idx], 0.0);
                continue;
            }
            let mut ep = e.clone();
            ep[idx] = x + h;
            let up = reference::forward_log(ep.view(), p.lengths())[idx.0];
            ep[idx] = x - h;
            let dn = reference::forward_log(ep.view(), p.lengths())[idx.0];
            let fd = (up - dn) / (2.0 * h);
            assert!(
                (fd - mu[idx]).abs() < 1e-8,
                "seed {seed} {idx:?}: {fd} vs {}",
                mu[idx]
            );
        }
    }
}

#[test]
fn gold_score_of_a_random_segmentation_never_exceeds_log_z() {
    for seed in 0..200u64 {
        let g = random_spec(seed);
        let owned = random_problem(seed, &g);
        let p = owned.view().unwrap();
        for b in 0..g.batch {
            let segs = random_segmentation(
                seed * 31 + b as u64,
                p.lengths()[b],
                g.max_duration,
                g.labels,
            );
            let gold = gold_score(&p, b, &segs).unwrap();
            let bf = reference::brute_force(&p, b).unwrap();
            if gold == f64::NEG_INFINITY {
                continue;
            }
            assert!(
                bf.log_z.is_finite(),
                "seed {seed}: finite gold but log Z = -inf"
            );
            let nll = bf.log_z - gold;
            assert!(
                nll >= -1e-12 * bf.log_z.abs().max(1.0),
                "NLL {nll} < 0 at seed {seed}"
            );
            let _ = gold_score_edges::<LogSemiring, f64>;
        }
    }
}

#[test]
fn brute_force_entropy_is_log_count_for_equal_scores_and_between_zero_and_that_otherwise() {
    for (len, k, c) in [(1, 1, 1), (1, 3, 4), (4, 2, 3), (6, 6, 2), (5, 3, 1)] {
        let scores = Array3::<f64>::zeros((1, len, c));
        let lengths = [len];
        let p = Potentials::builder(scores.view(), &lengths, k)
            .build()
            .unwrap();
        let bf = reference::brute_force(&p, 0).unwrap();
        let n = reference::count_segmentations(len, k, c) as f64;
        assert!((bf.entropy - n.ln()).abs() < 1e-12, "{len} {k} {c}");
        assert!((bf.log_z - n.ln()).abs() < 1e-12);
    }
    for (name, owned) in problems() {
        let p = owned.view().unwrap();
        for b in 0..p.shape().batch {
            let bf = reference::brute_force(&p, b).unwrap();
            assert!(bf.entropy >= 0.0, "{name}");
            assert!(bf.entropy <= (bf.count as f64).ln() + 1e-12, "{name}");
        }
    }
}

#[test]
fn reference_entropy_on_edge_input_is_that_of_segmentations_over_the_virtual_start() {
    for seed in 0..150u64 {
        let owned = random_problem(seed, &random_spec(seed));
        let p = owned.view().unwrap();
        // Every source of a first segment finite: they must merge into one segmentation.
        let mut e = materialize(&p);
        e.mapv_inplace(|x| if x.is_finite() { x } else { -0.5 });
        let ep = EdgePotentials::new(e.view(), p.lengths()).unwrap();
        let ent = reference::forward::<EntropySemiring>(e.view(), p.lengths());
        for b in 0..p.shape().batch {
            let bf = reference::brute_force_edges(&ep, b).unwrap();
            assert!(rel_close(ent[b].log_weight, bf.log_z, 1e-12), "seed {seed}");
            assert!(
                (ent[b].entropy - bf.entropy).abs() <= 1e-12 * bf.log_z.abs().max(1.0),
                "seed {seed} b={b}: {} vs {}",
                ent[b].entropy,
                bf.entropy
            );
        }
    }
}
