//! A small SVG line chart: axes from zero with round ticks, a title, axis labels, one polyline
//! (with a marker at each point) per series, and a legend below. Enough for the bench's curves,
//! without a plotting crate.

use std::fmt::Write as _;

/// One line of a chart: its legend entry and its (x, y) points, in x order.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: &'a [Series],
}

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 40.0;
/// Below the plot: tick labels, the x label and the legend.
const LEGEND_LINE: f64 = 18.0;
const COLOURS: [&str; 5] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#7f7f7f"];

/// The chart as a standalone SVG document.
pub fn line_chart(chart: &Chart) -> String {
    let bottom = 70.0 + LEGEND_LINE * chart.series.len() as f64;
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - bottom);
    let all = || chart.series.iter().flat_map(|s| s.points.iter());
    let x_ticks = ticks(all().map(|p| p.0).fold(0.0, f64::max));
    let y_ticks = ticks(all().map(|p| p.1).fold(0.0, f64::max));
    let (x_max, y_max) = (*x_ticks.last().unwrap_or(&1.0), *y_ticks.last().unwrap_or(&1.0));
    let x_at = |x: f64| LEFT + x / x_max * plot_w;
    let y_at = |y: f64| TOP + plot_h - y / y_max * plot_h;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        WIDTH / 2.0,
        escape(chart.title)
    );
    for &x in &x_ticks {
        let at = x_at(x);
        let _ = writeln!(
            svg,
            r##"<line x1="{at:.1}" y1="{TOP}" x2="{at:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{at:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 16.0,
            number(x)
        );
    }
    for &y in &y_ticks {
        let at = y_at(y);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{at:.1}" x2="{:.1}" y2="{at:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            at + 4.0,
            number(y)
        );
    }
    let _ = writeln!(
        svg,
        r#"<polyline points="{LEFT},{TOP} {LEFT},{bottom_y:.1} {right:.1},{bottom_y:.1}" fill="none" stroke="black"/>"#,
        bottom_y = TOP + plot_h,
        right = LEFT + plot_w
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        TOP + plot_h + 36.0,
        escape(chart.x_label)
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(16,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + plot_h / 2.0,
        escape(chart.y_label)
    );
    for (n, series) in chart.series.iter().enumerate() {
        let colour = COLOURS[n % COLOURS.len()];
        let points: Vec<String> = series
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", x_at(x), y_at(y)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            points.join(" ")
        );
        for &(x, y) in &series.points {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}"/>"#,
                x_at(x),
                y_at(y)
            );
        }
        let legend_y = TOP + plot_h + 58.0 + LEGEND_LINE * n as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{colour}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT + 24.0,
            LEFT + 30.0,
            legend_y + 4.0,
            escape(&series.name),
            y = legend_y
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Round ticks from 0 to at least `max`: 1, 2 or 5 times a power of ten apart, about 5 of them.
fn ticks(max: f64) -> Vec<f64> {
    if max <= 0.0 || !max.is_finite() {
        return vec![0.0, 1.0];
    }
    let rough = max / 5.0;
    let power = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * power);
    let count = (max / step).ceil() as usize;
    (0..=count).map(|i| i as f64 * step).collect()
}

/// A tick label: no needless decimals, thousands as `k`.
fn number(v: f64) -> String {
    if v >= 1000.0 && v % 1000.0 == 0.0 {
        format!("{}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> String {
        let series = [
            Series {
                name: "ours".into(),
                points: vec![(1000.0, 4.0), (5000.0, 19.5), (10000.0, 41.0)],
            },
            Series {
                name: "upstream (did not finish at 5k, 10k in 20 min) <capped>".into(),
                points: vec![(1000.0, 360.0)],
            },
        ];
        line_chart(&Chart {
            title: "Time to every mailbox",
            x_label: "objects",
            y_label: "seconds",
            series: &series,
        })
    }

    #[test]
    fn the_chart_is_well_formed_with_a_polyline_per_series() {
        let svg = chart();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        // Two series and the axes.
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert_eq!(svg.matches("<circle").count(), 4);
        assert!(svg.contains("&lt;capped&gt;"), "text is escaped");
        assert!(!svg.contains("<capped>"));
        // Every element opened on a line is closed on it (self-closing or paired).
        for line in svg.lines().skip(1).filter(|l| *l != "</svg>") {
            let opened = line.matches('<').count() - line.matches("</").count();
            let closed = line.matches("/>").count() + line.matches("</").count();
            assert_eq!(opened, closed, "unbalanced: {line}");
        }
        assert!(svg.contains(">10k<"), "x ticks reach the largest x");
    }

    #[test]
    fn ticks_are_round_and_cover_the_data() {
        assert_eq!(ticks(10000.0), vec![0.0, 2000.0, 4000.0, 6000.0, 8000.0, 10000.0]);
        assert_eq!(ticks(102.0), vec![0.0, 50.0, 100.0, 150.0]);
        assert_eq!(ticks(0.0), vec![0.0, 1.0]);
        assert_eq!(*ticks(7.3).last().unwrap(), 8.0);
    }
}
