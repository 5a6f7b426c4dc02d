//! Pictures (SVG): annotated against predicted gene structures, the learned duration
//! tables and the training curve.

use std::path::Path;

use plotters::prelude::*;

use crate::Error;
use crate::data::{Gene, Strand};
use crate::labels::ExonType;
use crate::model::{Model, bin};

fn err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Model(format!("{}: {e}", path.display()))
}

/// The training curve: NLL per thousand bases against the epoch.
pub fn training_curve(path: &Path, nll_per_kb: &[f64]) -> Result<(), Error> {
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let hi = nll_per_kb.iter().cloned().fold(0.0f64, f64::max) * 1.05;
    let lo = nll_per_kb
        .iter()
        .cloned()
        .fold(f64::INFINITY, f64::min)
        .min(hi)
        * 0.95;
    let n = nll_per_kb.len().max(2);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Training: negative log-likelihood per kb",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(1f64..n as f64, lo..hi)
        .map_err(|e| err(path, e))?;
    chart
        .configure_mesh()
        .x_desc("epoch")
        .y_desc("NLL per kb (nats)")
        .draw()
        .map_err(|e| err(path, e))?;
    let pts: Vec<(f64, f64)> = nll_per_kb
        .iter()
        .enumerate()
        .map(|(i, &y)| ((i + 1) as f64, y))
        .collect();
    chart
        .draw_series(LineSeries::new(pts.clone(), BLUE.stroke_width(2)))
        .map_err(|e| err(path, e))?;
    chart
        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, BLUE.filled())))
        .map_err(|e| err(path, e))?;
    root.present().map_err(|e| err(path, e))
}

/// The learned duration weights of the four exon types and of intron first pieces, as a
/// distribution over lengths (`exp(weight)` normalised over the lengths a label may take;
/// exons per unit of log length, on a logarithmic axis).
pub fn durations(path: &Path, model: &Model) -> Result<(), Error> {
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let (left, right) = root.split_horizontally(560);
    let k = model.layout.k;
    let dist = |f: &dyn Fn(usize) -> Option<f64>, max: usize| -> Vec<(f64, f64)> {
        let raw: Vec<(usize, f64)> = (1..=max).filter_map(|d| f(d).map(|w| (d, w))).collect();
        let m = raw.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = raw.iter().map(|x| (x.1 - m).exp()).sum();
        raw.iter()
            .map(|&(d, w)| (d as f64, (w - m).exp() / z))
            .collect()
    };
    let colors = [RED, BLUE, GREEN, MAGENTA];
    let exon_series: Vec<Vec<(f64, f64)>> = ExonType::ALL
        .iter()
        .map(|&t| {
            // On a logarithmic axis, the density per unit of ln(length): `d · P(d)`, so
            // that equal areas hold equal shares of exons.
            dist(
                &|d| Some(model.w[model.layout.exon_duration_bin(t, bin(d))]),
                k,
            )
            .into_iter()
            .map(|(d, p)| (d, d * p))
            .collect()
        })
        .collect();
    let ymax = exon_series
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(0.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&left)
        .caption("Learned exon lengths", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((1f64..k as f64).log_scale(), 0f64..ymax.max(1e-9))
        .map_err(|e| err(path, e))?;
    chart
        .configure_mesh()
        .x_desc("exon length (bases)")
        .y_desc("density per unit of ln(length)")
        .draw()
        .map_err(|e| err(path, e))?;
    for (i, (t, s)) in ExonType::ALL.iter().zip(&exon_series).enumerate() {
        let c = colors[i];
        chart
            .draw_series(LineSeries::new(s.clone(), c.stroke_width(2)))
            .map_err(|e| err(path, e))?
            .label(t.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(path, e))?;
    let piece = crate::labels::PIECE;
    let intron = dist(
        &|d| Some(model.w[model.layout.intron_duration_bin(bin(d))]),
        piece,
    );
    let ymax = intron.iter().map(|p| p.1).fold(0.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&right)
        .caption("Learned short-intron lengths", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(1f64..piece as f64, 0f64..ymax.max(1e-9))
        .map_err(|e| err(path, e))?;
    chart
        .configure_mesh()
        .x_desc("first intron piece (bases)")
        .draw()
        .map_err(|e| err(path, e))?;
    chart
        .draw_series(LineSeries::new(intron, BLACK.stroke_width(2)))
        .map_err(|e| err(path, e))?;
    root.present().map_err(|e| err(path, e))
}

/// Annotated (top track) against predicted (bottom track) coding exons of a few sequences,
/// each on its own row; exons are boxes joined by intron lines, coloured by strand, and a
/// predicted exon that matches an annotated one exactly is filled.
pub fn structures(
    path: &Path,
    rows: &[(String, usize, Vec<Gene>, Vec<Gene>)],
) -> Result<(), Error> {
    let row_h = 90;
    let (w, h) = (1000u32, (40 + row_h * rows.len()) as u32);
    let root = SVGBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let style = ("sans-serif", 14).into_font();
    root.draw(&Text::new(
        "coding exons: annotated (upper track) vs predicted (lower track); filled = exact match; red + strand, blue - strand",
        (10, 10),
        style.clone(),
    ))
    .map_err(|e| err(path, e))?;
    for (r, (name, len, annotated, predicted)) in rows.iter().enumerate() {
        let y0 = 40 + r as i32 * row_h as i32;
        let x = |p: usize| 10 + ((p as f64 / *len as f64) * (w as f64 - 20.0)) as i32;
        root.draw(&Text::new(
            format!("{name} ({len} bp)"),
            (10, y0),
            style.clone(),
        ))
        .map_err(|e| err(path, e))?;
        let truth: std::collections::HashSet<(usize, usize)> =
            annotated.iter().flat_map(|g| g.exons_with_stop()).collect();
        for (track, genes) in [(0, annotated), (1, predicted)] {
            let yc = y0 + 30 + track * 28;
            root.draw(&PathElement::new(
                vec![(x(0), yc), (x(*len), yc)],
                BLACK.mix(0.2),
            ))
            .map_err(|e| err(path, e))?;
            for g in genes.iter() {
                let color = match g.strand {
                    Strand::Plus => RED,
                    Strand::Minus => BLUE,
                };
                let e = g.exons_with_stop();
                for pair in e.windows(2) {
                    let (a, b) = (x(pair[0].1), x(pair[1].0));
                    let mid = (a + b) / 2;
                    root.draw(&PathElement::new(
                        vec![(a, yc), (mid, yc - 8), (b, yc)],
                        color.stroke_width(1),
                    ))
                    .map_err(|e| err(path, e))?;
                }
                for &(a, b) in &e {
                    let filled = track == 0 || truth.contains(&(a, b));
                    let rect = Rectangle::new(
                        [(x(a), yc - 7), (x(b).max(x(a) + 1), yc + 7)],
                        if filled {
                            color.filled()
                        } else {
                            color.stroke_width(2)
                        },
                    );
                    root.draw(&rect).map_err(|e| err(path, e))?;
                }
            }
        }
    }
    root.present().map_err(|e| err(path, e))
}
