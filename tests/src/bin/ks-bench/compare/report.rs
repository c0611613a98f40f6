//! The comparison's figures and the table they are shown as: per implementation, every run's
//! value, or that it did not finish within its cap (then the value is a lower bound).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which hub a figure was measured with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Seconds,
    MiB,
    Count,
    PerSecond,
}

impl Unit {
    pub fn show(self, value: f64) -> String {
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
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Figure {
    pub name: String,
    pub unit: Unit,
    pub runs: BTreeMap<Implementation, Vec<f64>>,
    /// Implementations whose run did not finish: their values are what was measured until then,
    /// so at least the value a finished run would have had.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unfinished: BTreeMap<Implementation, Unfinished>,
}

/// How a figure of a run that did not finish within its cap is shown.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unfinished {
    /// A time: the run was stopped after this many minutes.
    Cap(f64),
    /// A count, memory or CPU measured until the run was stopped.
    AtLeast,
}

/// Every figure of a comparison, in the order first measured.
#[derive(Clone, Default, Debug, Serialize, Deserialize)]
pub struct Figures {
    pub figures: Vec<Figure>,
    /// Details that have no upstream counterpart or no single number (API writes by resource
    /// and verb, RSS over time, ...), by run.
    pub notes: Vec<String>,
}

impl Figures {
    pub fn add(&mut self, implementation: Implementation, name: &str, unit: Unit, value: f64) {
        self.figure(name, unit)
            .runs
            .entry(implementation)
            .or_default()
            .push(value);
    }

    /// A figure of a run that did not finish: a time that ran out after `cap_minutes`.
    pub fn did_not_finish(&mut self, implementation: Implementation, name: &str, cap_minutes: f64) {
        let figure = self.figure(name, Unit::Seconds);
        figure.runs.entry(implementation).or_default().push(cap_minutes * 60.0);
        figure.unfinished.insert(implementation, Unfinished::Cap(cap_minutes));
    }

    /// A figure of a run that did not finish: what it had reached when stopped.
    pub fn at_least(&mut self, implementation: Implementation, name: &str, unit: Unit, value: f64) {
        let figure = self.figure(name, unit);
        figure.runs.entry(implementation).or_default().push(value);
        figure.unfinished.insert(implementation, Unfinished::AtLeast);
    }

    fn figure(&mut self, name: &str, unit: Unit) -> &mut Figure {
        let index = match self.figures.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.figures.push(Figure {
                    name: name.to_string(),
                    unit,
                    runs: BTreeMap::new(),
                    unfinished: BTreeMap::new(),
                });
                self.figures.len() - 1
            }
        };
        &mut self.figures[index]
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
    /// (above 1 means ours is better, whatever the unit). A run that did not finish shows as
    /// such, and the ratio it gives is a bound (`≥`).
    pub fn table(&self) -> Vec<[String; 4]> {
        self.figures
            .iter()
            .map(|f| {
                let cell = |i| match (f.unfinished.get(&i), f.runs.get(&i)) {
                    (Some(Unfinished::Cap(minutes)), _) => format!("did not finish in {minutes:.0} min"),
                    (Some(Unfinished::AtLeast), Some(v)) => format!("≥ {}", spread(f.unit, v)),
                    (None, Some(v)) => spread(f.unit, v),
                    _ => "—".into(),
                };
                // Upstream unfinished: its value is a lower bound, so (lower being better) the
                // ratio is too; ours unfinished: no honest ratio.
                let bound = match (
                    f.unfinished.contains_key(&Implementation::Ours),
                    f.unfinished.contains_key(&Implementation::Upstream),
                ) {
                    (true, _) => None,
                    (false, true) if f.unit.lower_is_better() => Some("≥ "),
                    (false, true) => None,
                    (false, false) => Some(""),
                };
                let ratio = match (
                    median_of(f, Implementation::Ours),
                    median_of(f, Implementation::Upstream),
                ) {
                    (_, _) if bound.is_none() => "—".into(),
                    (Some(ours), Some(upstream)) if ours > 0.0 && upstream > 0.0 => {
                        let r = if f.unit.lower_is_better() {
                            upstream / ours
                        } else {
                            ours / upstream
                        };
                        format!("{}{r:.2}×", bound.unwrap_or_default())
                    }
                    (Some(ours), Some(upstream)) => format!("{ours:.0} vs {}{upstream:.0}", bound.unwrap_or_default()),
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

    #[test]
    fn an_unfinished_run_shows_its_cap_and_bounds_the_ratio() {
        let mut f = Figures::default();
        f.add(Implementation::Ours, "all in every mailbox", Unit::Seconds, 60.0);
        f.did_not_finish(Implementation::Upstream, "all in every mailbox", 20.0);
        f.add(Implementation::Ours, "hub peak RSS", Unit::MiB, 100.0);
        f.at_least(Implementation::Upstream, "hub peak RSS", Unit::MiB, 250.0);
        f.did_not_finish(Implementation::Ours, "stuck", 30.0);
        f.add(Implementation::Upstream, "stuck", Unit::Seconds, 10.0);
        let t = f.table();
        assert_eq!(t[0][2], "did not finish in 20 min");
        assert_eq!(t[0][3], "≥ 20.00×");
        assert_eq!(t[1][2], "≥ 250 MiB");
        assert_eq!(t[1][3], "≥ 2.50×");
        assert_eq!(t[2][1], "did not finish in 30 min");
        assert_eq!(t[2][3], "—");
        let back: Figures = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(back.table(), t);
    }
}
