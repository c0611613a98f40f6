//! The comparison's figures, and the table, JSON and Markdown they are written as.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

/// Which hub a figure was measured with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Implementation {
    Ours,
    Upstream,
}

impl std::fmt::Display for Implementation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Implementation::Ours => "ours",
            Implementation::Upstream => "upstream",
        })
    }
}

/// What a figure counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Seconds,
    MiB,
    Count,
    PerSecond,
}

impl Unit {
    fn show(self, value: f64) -> String {
        match self {
            Unit::Seconds if value < 1.0 => format!("{:.0} ms", value * 1000.0),
            Unit::Seconds => format!("{value:.2} s"),
            Unit::MiB => format!("{value:.0} MiB"),
            Unit::Count => format!("{value:.0}"),
            Unit::PerSecond => format!("{value:.1}/s"),
        }
    }

    /// Whether a smaller value is better.
    fn lower_is_better(self) -> bool {
        self != Unit::PerSecond
    }
}

/// One measured quantity, with a value per run of each implementation.
#[derive(Debug, Serialize)]
pub struct Figure {
    pub name: String,
    pub unit: Unit,
    pub runs: BTreeMap<Implementation, Vec<f64>>,
}

/// Every figure of a comparison, in the order first measured.
#[derive(Default, Serialize)]
pub struct Figures {
    pub figures: Vec<Figure>,
    /// Details that have no upstream counterpart or no single number (API writes by resource
    /// and verb, RSS over time, ...), by run.
    pub notes: Vec<String>,
}

impl Figures {
    pub fn add(&mut self, implementation: Implementation, name: &str, unit: Unit, value: f64) {
        let index = match self.figures.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.figures.push(Figure {
                    name: name.to_string(),
                    unit,
                    runs: BTreeMap::new(),
                });
                self.figures.len() - 1
            }
        };
        self.figures[index].runs.entry(implementation).or_default().push(value);
    }

    /// p50, p90 and p99 of some latencies, as three figures.
    pub fn percentiles(&mut self, implementation: Implementation, name: &str, mut latencies: Vec<Duration>) {
        if latencies.is_empty() {
            return;
        }
        latencies.sort();
        for (label, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)] {
            let at = latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
            self.add(
                implementation,
                &format!("{name} {label}"),
                Unit::Seconds,
                at.as_secs_f64(),
            );
        }
    }

    /// Rows: figure, ours and upstream as `median (min–max)`, and upstream ÷ ours of the medians
    /// (above 1 means ours is better, whatever the unit).
    pub fn table(&self) -> Vec<[String; 4]> {
        self.figures
            .iter()
            .map(|f| {
                let cell = |i| f.runs.get(&i).map(|v| spread(f.unit, v)).unwrap_or_else(|| "—".into());
                let ratio = match (
                    median_of(f, Implementation::Ours),
                    median_of(f, Implementation::Upstream),
                ) {
                    (Some(ours), Some(upstream)) if ours > 0.0 && upstream > 0.0 => {
                        let r = if f.unit.lower_is_better() {
                            upstream / ours
                        } else {
                            ours / upstream
                        };
                        format!("{r:.2}×")
                    }
                    (Some(ours), Some(upstream)) => format!("{ours:.0} vs {upstream:.0}"),
                    _ => "—".into(),
                };
                [
                    f.name.clone(),
                    cell(Implementation::Ours),
                    cell(Implementation::Upstream),
                    ratio,
                ]
            })
            .collect()
    }

    pub fn text_table(&self) -> String {
        let rows = self.table();
        let header = ["figure", "ours", "upstream v0.30.0", "ours better by"].map(String::from);
        let widths: Vec<usize> = (0..4)
            .map(|c| {
                std::iter::once(&header)
                    .chain(&rows)
                    .map(|r| r[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&rows) {
            for (c, cell) in row.iter().enumerate() {
                let _ = write!(out, "{cell:<w$}  ", w = widths[c]);
            }
            out.push('\n');
        }
        out
    }

    pub fn markdown_table(&self) -> String {
        let mut out = String::from("| figure | ours | upstream v0.30.0 | ours better by |\n|---|---|---|---|\n");
        for row in self.table() {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
        out
    }
}

fn median_of(f: &Figure, i: Implementation) -> Option<f64> {
    let mut v = f.runs.get(&i)?.clone();
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// `median (min–max)`, or the single value of one run.
fn spread(unit: Unit, values: &[f64]) -> String {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let median = unit.show(v[v.len() / 2]);
    match (v.first(), v.last()) {
        (Some(min), Some(max)) if v.len() > 1 => format!("{median} ({}–{})", unit.show(*min), unit.show(*max)),
        _ => median,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_say_how_much_better_ours_is() {
        let mut f = Figures::default();
        f.add(Implementation::Ours, "latency", Unit::Seconds, 0.5);
        f.add(Implementation::Upstream, "latency", Unit::Seconds, 2.0);
        f.add(Implementation::Ours, "rate", Unit::PerSecond, 30.0);
        f.add(Implementation::Upstream, "rate", Unit::PerSecond, 10.0);
        f.add(Implementation::Ours, "idle writes", Unit::Count, 0.0);
        f.add(Implementation::Upstream, "idle writes", Unit::Count, 12.0);
        let t = f.table();
        assert_eq!(t[0][3], "4.00×");
        assert_eq!(t[1][3], "3.00×");
        assert_eq!(t[2][3], "0 vs 12");
    }

    #[test]
    fn cells_show_median_and_range() {
        let mut f = Figures::default();
        for v in [3.0, 1.0, 2.0] {
            f.add(Implementation::Ours, "x", Unit::Seconds, v);
        }
        assert_eq!(f.table()[0][1], "2.00 s (1.00 s–3.00 s)");
        assert_eq!(f.table()[0][2], "—");
    }
}
