//! Line charts as small standalone SVG files for docs/benchmarks.md: no plotting dependency, and they render on
//! GitHub.

use std::fmt::Write as _;

pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

const COLORS: [&str; 3] = ["#1f77b4", "#d62728", "#2ca02c"];
const W: f64 = 640.0;
const H: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

pub struct Chart<'a> {
    /// Relative to the crate root.
    pub path: &'a str,
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Axis ends; by default the largest value (plus a margin for y). Points beyond are drawn at the edge.
    pub x_max: Option<f64>,
    pub y_max: Option<f64>,
    /// The legend in the lower right instead of the upper left, where a cumulative curve rises.
    pub legend_low: bool,
}

/// Writes a line chart of `series`.
pub fn line_chart(chart: &Chart, series: &[Series]) {
    let Chart { title, x_label, y_label, .. } = chart;
    let points = series.iter().flat_map(|s| s.points.iter());
    let x_max = chart.x_max.unwrap_or_else(|| points.clone().map(|p| p.0).fold(0.0, f64::max)).max(f64::MIN_POSITIVE);
    let y_max = chart.y_max.unwrap_or_else(|| points.map(|p| p.1).fold(0.0, f64::max) * 1.1).max(f64::MIN_POSITIVE);
    let x = |v: f64| LEFT + v.min(x_max) / x_max * (W - LEFT - RIGHT);
    let y = |v: f64| H - BOTTOM - v.min(y_max) / y_max * (H - BOTTOM - TOP);
    let (legend_x, legend_y) =
        if chart.legend_low { (W / 2.0 - 60.0, H - BOTTOM - 60.0) } else { (LEFT + 10.0, TOP + 8.0) };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" \
         font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{title}</text>\n",
        W / 2.0
    );
    for i in 0..=4 {
        let (xv, yv) = (x_max * f64::from(i) / 4.0, y_max * f64::from(i) / 4.0);
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            W - RIGHT,
            LEFT - 6.0,
            y(yv) + 4.0,
            tick(yv),
            x(xv),
            H - BOTTOM + 18.0,
            tick(xv),
            y = y(yv),
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{x_label}</text>\
         <text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\">{y_label}</text>",
        (LEFT + W - RIGHT) / 2.0,
        H - 10.0,
        (TOP + H - BOTTOM) / 2.0
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = s.points.iter().map(|p| format!("{:.1},{:.1}", x(p.0), y(p.1))).collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>\
             <rect x=\"{}\" y=\"{}\" width=\"12\" height=\"3\" fill=\"{color}\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            path.join(" "),
            legend_x,
            legend_y + 16.0 * i as f64,
            legend_x + 18.0,
            legend_y + 4.0 + 16.0 * i as f64,
            s.label
        );
    }
    svg.push_str("</svg>\n");
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(chart.path);
    std::fs::write(&file, svg).expect("write a chart");
}

fn tick(v: f64) -> String {
    if v >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
