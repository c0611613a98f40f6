//! The comparison's figures, and the table, JSON and Markdown report they are written as.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::Knobs;

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

/// `docs/benchmarks.md`: what was run, how, and the table.
pub fn markdown(knobs: &Knobs, figures: &Figures, took: Duration) -> String {
    let machine = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let notes: String = figures
        .notes
        .iter()
        .map(|n| format!("- {}\n", n.replace('\n', "\n- ")))
        .collect();
    format!(
        "# Benchmarks: ours and upstream KubeStellar side by side\n\n\
Written by `make bench` (`ks-bench compare`) on {date}; {took:.0} s in all. Every figure is the median over \
{repeats} runs per implementation, with the range (min–max) in brackets; \"ours better by\" is upstream's median \
divided by ours for times, memory and counts (for rates, ours divided by upstream), so above 1× means ours is better.\n\n\
{table}\n\
## Method\n\n\
- **Machine:** {cores} cores ({machine}), shared with the whole stack: every apiserver, etcd, OCM and Jaeger run \
on the same cores, so absolute numbers are noisy; compare within a run.\n\
- **Versions:** upstream KubeStellar v0.30.0's `controller-manager` (binding and status controllers) and \
`ocm-transport-controller`, built from the Go module proxy by `deps/build.sh kubestellar`, run with their \
binaries' defaults (QPS 5, burst 10, the same 512,000-byte and 512,000-object ManifestWork limits as ours), and \
found through KubeFlex ControlPlane objects as in a real install. Ours: `ks-hub`, a release build like every \
process of ours here (`make bench` builds them), with its shipped defaults and tracing on. Both against the same stack (`make up`): Kubernetes v1.34 apiservers, OCM v1.2.0, two WECs with \
our status agent (upstream's ocm-status-addon is not served by the module proxy, so it cannot be built here; \
upstream's status controller reads the WorkStatuses our agent writes, which are API-compatible).\n\
- **Alternation:** each repeat runs every scenario against one implementation and then the other, the order \
swapping between repeats; the hub not under test is stopped. Scenarios clean up after themselves, so each \
starts from the same stack state.\n\
- **Delivery** ({objects} Deployments, one after another): from the create call returning to the object \
existing on both WECs (a watch on each WEC). ManifestWork generations per object counts the ITS writes that \
changed a ManifestWork's spec.\n\
- **Status, singleton** ({changes} changes): a Gauge (a custom resource with a status subresource and no \
controller) bound to cluster1 with `wantSingletonReportedState`; the bench writes its `.status` on cluster1 \
and times until the WDS Gauge shows it. Between the clocks: our agent, the WorkStatus, the hub's status controller.\n\
- **Status, multi-WEC**: a Deployment bound to both WECs with `wantMultiWECReportedState`, scaled between 1 \
and 2 replicas in the WDS; timed until the WDS status shows the new ready replicas aggregated over both WECs \
(ours sums them, upstream v0.30.0 takes the minimum; upstream aggregates only apps kinds, hence a Deployment). \
This includes delivery and the WECs' own controllers.\n\
- **Bulk** ({bulk:?} objects, half ConfigMaps and half Deployments of 0 replicas, created 16 at a time) to \
both WECs and {sims} simulated WECs (ManagedClusters with a mailbox namespace but no agent, to load the hub): \
time to every mailbox holding every object (a watch on ManifestWorks) and to every object existing on both \
real WECs; the hub's peak RSS (sampled every 250 ms, summed over upstream's two processes) and CPU seconds; \
the writes the WDS and ITS apiservers served (their own `apiserver_request_total`, write verbs): the hub's \
writes to the WDS (all but the bench's own applies, the ServiceAccount a new Namespace gets, Leases and \
Events) and ManifestWork writes to the ITS (the hub's, plus the OCM agent's finalizer patch on each new \
ManifestWork of a real WEC), then the same during {idle} s of idle afterwards (target 0). Every write per \
resource and verb, the agents' WorkStatus writes included (they may still be catching up when a phase \
ends), is listed under Details.\n\
- **Physical limit:** the same final ManifestWorks, each written once into a namespace no agent reads, from \
a tight client loop with 8 writes in flight: what the ITS apiserver alone needs.\n\
- **Agent** (ours only): {agent} Gauges on cluster1 in ManifestWorks of 100, then {rounds} rounds each \
changing every Gauge's status (16 writes in flight); WorkStatus writes per second over the rounds (the ITS \
apiserver's count) and the agent's RSS after each round.\n\n\
## Details\n\n{notes}",
        date = chrono_like_now(),
        took = took.as_secs_f64(),
        repeats = knobs.repeats,
        table = figures.markdown_table(),
        objects = knobs.objects,
        changes = knobs.changes,
        bulk = knobs.bulk,
        sims = knobs.simulated_wecs,
        idle = knobs.idle,
        agent = knobs.agent_objects,
        rounds = knobs.agent_rounds,
    )
}

/// Today's date (UTC) as YYYY-MM-DD.
fn chrono_like_now() -> String {
    let ts = k8s_openapi::jiff::Timestamp::now();
    ts.strftime("%Y-%m-%d %H:%M UTC").to_string()
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
