//! Log–log line charts as SVG text (plotters' SVG backend: text is written as `<text>`
//! elements, so no font file is needed).

use plotters::prelude::*;

use super::Error;

/// One line of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Its legend entry.
    pub name: String,
    /// `(x, y)` points, both positive, in order of `x`.
    pub points: Vec<(f64, f64)>,
    /// A thin dashed line without markers (an estimate) instead of a solid one with markers
    /// (a measurement).
    pub dashed: bool,
    /// Index into the palette: series of one engine share a colour.
    pub color: usize,
}

/// A vertical line across the plot at `x`, named in the legend.
#[derive(Clone, Debug, PartialEq)]
pub struct Marker {
    /// Where.
    pub x: f64,
    /// Its legend entry.
    pub label: String,
}

/// A log–log chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// The caption.
    pub title: String,
    /// The x axis' description, with its unit.
    pub x_desc: String,
    /// The y axis' description, with its unit.
    pub y_desc: String,
    /// The lines.
    pub series: Vec<Series>,
    /// Vertical markers.
    pub markers: Vec<Marker>,
    /// Horizontal levels (`y`, legend entry), e.g. a memory budget.
    pub levels: Vec<(f64, String)>,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// The colour of palette entry `i`.
fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// The range `[lo, hi]` of the values, widened by a little on either side in log space.
fn log_range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if hi == 0.0 {
        return None;
    }
    // A single value still gets a decade around it.
    let (lo, hi) = if hi / lo < 10.0 {
        let mid = (lo * hi).sqrt();
        (mid / 3.2, mid * 3.2)
    } else {
        (lo, hi)
    };
    Some((lo / 1.4, hi * 1.4))
}

/// `1k`, `20k`, `0.5`, `0.002`: short labels for a log axis.
fn short(v: f64) -> String {
    let a = v.abs();
    if a > 0.0 && a < 1.0 {
        let digits = (1.0 - a.log10().floor()) as usize;
        let text = format!("{v:.digits$}");
        return text.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    let (x, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let digits = if x.abs() >= 10.0 || x.fract().abs() < 1e-9 {
        0
    } else {
        1
    };
    format!("{x:.digits$}{suffix}")
}

fn draw_err(e: impl std::fmt::Display) -> Error {
    Error::new(format!("drawing a chart: {e}"))
}

/// Draws `chart` and returns the SVG document. Errors: no positive point to draw.
pub fn svg(chart: &Chart) -> Result<String, Error> {
    let xs = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(chart.markers.iter().map(|m| m.x));
    let ys = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(chart.levels.iter().map(|l| l.0));
    let (Some((x0, x1)), Some((y0, y1))) = (log_range(xs), log_range(ys)) else {
        return Err(Error::new(format!(
            "chart {:?} has no positive point to draw",
            chart.title
        )));
    };
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (900, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut cc = ChartBuilder::on(&root)
            .caption(&chart.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(draw_err)?;
        let fmt_x = |v: &f64| short(*v);
        let fmt_y = |v: &f64| short(*v);
        cc.configure_mesh()
            .x_desc(&chart.x_desc)
            .y_desc(&chart.y_desc)
            .x_label_formatter(&fmt_x)
            .y_label_formatter(&fmt_y)
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 13))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(draw_err)?;
        for s in &chart.series {
            let c = color(s.color);
            if s.dashed {
                let style = c.stroke_width(1);
                cc.draw_series(DashedLineSeries::new(s.points.clone(), 6, 4, style))
                    .map_err(draw_err)?
                    .label(&s.name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 7, y)], style));
            } else {
                let style = c.stroke_width(2);
                cc.draw_series(LineSeries::new(s.points.clone(), style))
                    .map_err(draw_err)?
                    .label(&s.name)
                    .legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + PathElement::new(vec![(-9, 0), (9, 0)], style)
                            + Circle::new((0, 0), 3, c.filled())
                    });
                cc.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(draw_err)?;
            }
        }
        for (y, label) in &chart.levels {
            let style = BLACK.stroke_width(1);
            cc.draw_series(DashedLineSeries::new([(x0, *y), (x1, *y)], 3, 3, style))
                .map_err(draw_err)?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
        for m in &chart.markers {
            let style = RGBColor(90, 90, 90).stroke_width(2);
            cc.draw_series(LineSeries::new([(m.x, y0), (m.x, y1)], style))
                .map_err(draw_err)?
                .label(&m.label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x + 9, y - 6), (x + 9, y + 6)], style)
                });
        }
        cc.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_labels_keep_the_leading_digits() {
        assert_eq!(short(1000.0), "1k");
        assert_eq!(short(2500.0), "2.5k");
        assert_eq!(short(32000.0), "32k");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(short(0.5), "0.5");
        assert_eq!(short(0.001), "0.001");
        assert_eq!(short(2.0e9), "2G");
    }

    #[test]
    fn a_chart_without_points_is_an_error_not_a_panic() {
        let chart = Chart {
            title: "empty".into(),
            x_desc: "x".into(),
            y_desc: "y".into(),
            series: vec![],
            markers: vec![],
            levels: vec![],
        };
        assert!(svg(&chart).is_err());
    }
}
