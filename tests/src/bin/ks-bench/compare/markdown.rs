//! `docs/benchmarks.md` and its plots, written from every part's results present (parts run on
//! different days combine): one section per part with its date, duration, knobs and table (a
//! part not yet run says so), the curves' growth between points and plots, the method, and the
//! details.

use anyhow::Context;
use std::fmt::Write as _;
use std::path::Path;

use super::report::{Implementation, Unit};
use super::results::{Measured, Outcome, Part, PartResult, Point};
use super::svg::{Chart, Series, line_chart};

/// The hand-written reading of the results against the targets, kept beside them and
/// put in the report as it is, since what a gap comes from is found by people, not the bench.
pub const TARGETS: &str = "targets.md";

/// Reads every part's JSON in `dir`, writes the plots into `dir` and the report to `markdown`.
pub fn write_report(dir: &Path, markdown: &Path) -> anyhow::Result<()> {
    let mut results = Vec::new();
    for part in Part::ALL {
        results.push((part, PartResult::load(dir, part)?));
    }
    // A wrong directory must not replace a report with one where nothing has run.
    anyhow::ensure!(
        results.iter().any(|(_, r)| r.is_some()),
        "no part's results (<part>.json) in {}: nothing to report",
        dir.display()
    );
    let images = markdown
        .parent()
        .and_then(|p| dir.strip_prefix(p).ok())
        .unwrap_or(dir)
        .to_path_buf();
    let targets = dir.join(TARGETS);
    let reading = match std::fs::read_to_string(&targets) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", targets.display())),
    };
    let (text, plots) = render(&results, reading.as_deref(), &images.to_string_lossy());
    for (name, svg) in plots {
        let plot = dir.join(name);
        std::fs::write(&plot, svg).with_context(|| format!("writing the plot {}", plot.display()))?;
    }
    std::fs::write(markdown, text).with_context(|| format!("writing the report {}", markdown.display()))?;
    Ok(())
}

/// The report, with the `reading` of it against the targets after its introduction, and the
/// plots (file name, SVG) it refers to under `images`.
pub fn render(
    results: &[(Part, Option<PartResult>)],
    reading: Option<&str>,
    images: &str,
) -> (String, Vec<(String, String)>) {
    let mut out = String::from(
        "# Benchmarks: ours and upstream KubeStellar side by side\n\n\
Written by `make bench` (`ks-bench compare`), which runs in parts: `make bench SCENARIO=<part>` runs one \
(each under an hour here; `QUICK=1` for a few minutes each), keeps its results in `docs/bench/<part>.json` \
and writes this page again from every part's results present, so parts run on different days combine. \
Each section says when its part ran, how long it took and with which knobs. In the tables, \"ours better \
by\" is upstream's figure divided by ours for times, memory and counts (for rates, ours divided by \
upstream), so above 1× means ours is better; a run stopped at its time cap shows as \"did not finish in \
N min\", and what it had reached by then (memory, CPU, writes) as \"≥\".\n\n",
    );
    if let Some(reading) = reading {
        out.push_str(reading.trim_end());
        out.push_str("\n\n");
    }
    let mut plots = Vec::new();
    let find = |wanted: Part| results.iter().find(|(p, _)| *p == wanted).and_then(|(_, r)| r.as_ref());
    for (part, result) in results {
        // The objects curve's largest points are shown on it.
        if *part == Part::ObjectsLarge {
            continue;
        }
        let _ = writeln!(out, "## {}\n", part.title());
        let largest = find(Part::ObjectsLarge).filter(|_| *part == Part::Objects);
        match result {
            Some(result) => {
                let _ = writeln!(out, "{}\n", sitting(result));
            }
            None => {
                let _ = writeln!(out, "Not run yet: `make bench SCENARIO={}`.\n", part.name());
            }
        }
        if let Some(largest) = largest {
            let _ = writeln!(
                out,
                "Its largest points apart (`make bench SCENARIO={}`, so that each part takes under an hour): {}\n",
                Part::ObjectsLarge.name(),
                sitting(largest)
            );
            if let Some(result) = result.as_ref().filter(|r| !same_day_and_machine(r, largest)) {
                let _ = writeln!(
                    out,
                    "**The two parts ran on different days or machines** ({}, {}): growth between their points \
                     compares the days as much as the code.\n",
                    result.date, largest.date
                );
            }
        }
        let Some(result) = result else {
            if let Some(largest) = largest {
                curve_section(&mut out, &mut plots, &largest.points, *part, images);
            }
            continue;
        };
        if !result.figures.figures.is_empty() {
            out.push_str(&result.figures.markdown_table());
            out.push('\n');
        }
        match part {
            Part::Objects | Part::Wecs => {
                let points = with_largest(&result.points, largest.map_or(&[][..], |l| &l.points));
                curve_section(&mut out, &mut plots, &points, *part, images);
            }
            Part::Churn if !result.samples.is_empty() => {
                let name = "churn.svg".to_string();
                let series = [Series {
                    name: "ours: the agent's RSS after each round of Pods".into(),
                    points: result.samples.clone(),
                }];
                plots.push((
                    name.clone(),
                    line_chart(&Chart {
                        title: "Status agent memory over Pod create/delete cycles",
                        x_label: "Pod create/delete cycles",
                        y_label: "agent RSS (MiB)",
                        series: &series,
                    }),
                ));
                let _ = writeln!(out, "![{name}]({images}/{name})\n");
            }
            _ => {}
        }
    }
    out.push_str(METHOD);
    out.push_str("\n## Details\n\nEvery write the apiservers served during each run, per resource and verb (the agents' WorkStatus writes included: they may still be catching up when a run ends).\n\n");
    for (part, result) in results {
        if let Some(result) = result.as_ref().filter(|r| !r.figures.notes.is_empty()) {
            let _ = writeln!(out, "<details><summary>{}</summary>\n", part.name());
            for note in &result.figures.notes {
                for line in note.lines() {
                    let _ = writeln!(out, "- {line}");
                }
            }
            out.push_str("\n</details>\n\n");
        }
    }
    (out, plots)
}

/// When a part ran, how long it took and with which knobs.
fn sitting(result: &PartResult) -> String {
    let knobs: Vec<String> = result.knobs.iter().map(|(k, v)| format!("`{k} {v}`")).collect();
    let took = if result.partial {
        format!(
            "**stopped before its end**, after {:.1} min: what its finished runs measured",
            result.seconds / 60.0
        )
    } else {
        format!("took {:.1} min", result.seconds / 60.0)
    };
    format!(
        "Run on {} ({}); {took}; knobs: {}.",
        result.date,
        result.machine,
        knobs.join(" ")
    )
}

/// Whether two parts ran on the same day (UTC) and machine.
fn same_day_and_machine(a: &PartResult, b: &PartResult) -> bool {
    a.date.get(..10) == b.date.get(..10) && a.machine == b.machine
}

/// A curve's points with its largest points run apart; those replace the curve's own at the
/// same scale (an older run of the whole curve).
fn with_largest(points: &[Point], largest: &[Point]) -> Vec<Point> {
    let apart = |p: &Point| largest.iter().any(|l| (l.objects, l.wecs) == (p.objects, p.wecs));
    points.iter().filter(|p| !apart(p)).chain(largest).cloned().collect()
}

/// A curve's table, growth between its points and plots.
fn curve_section(out: &mut String, plots: &mut Vec<(String, String)>, points: &[Point], part: Part, images: &str) {
    out.push_str(&curve_table(points));
    out.push('\n');
    for line in growth_lines(points, part) {
        let _ = writeln!(out, "- {line}");
    }
    out.push('\n');
    for (name, svg) in curve_plots(points, part) {
        let _ = writeln!(out, "![{name}]({images}/{name})");
        plots.push((name, svg));
    }
    out.push('\n');
}

/// The x of a point on its curve.
fn x_of(point: &Point, part: Part) -> usize {
    match part {
        Part::Objects => point.objects,
        _ => point.wecs,
    }
}

fn x_name(part: Part) -> &'static str {
    match part {
        Part::Objects => "objects",
        _ => "WECs",
    }
}

/// `1,000`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One row per point: the time to every mailbox, the hub's peak RSS and CPU, ManifestWork
/// writes and idle writes, ours and upstream side by side.
pub fn curve_table(points: &[Point]) -> String {
    let mut scale: Vec<(usize, usize)> = points.iter().map(|p| (p.objects, p.wecs)).collect();
    scale.sort_unstable();
    scale.dedup();
    let mut out = String::from(
        "| objects × WECs | all in every mailbox: ours | upstream | ITS apiserver alone | hub peak RSS: ours | upstream | hub CPU: ours | upstream | ManifestWork writes: ours | upstream | idle writes: ours | upstream |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (objects, wecs) in scale {
        let at = |i| {
            points
                .iter()
                .find(|p| p.implementation == i && p.objects == objects && p.wecs == wecs)
        };
        let (ours, upstream) = (at(Implementation::Ours), at(Implementation::Upstream));
        let alone = [ours, upstream]
            .into_iter()
            .flatten()
            .find_map(|p| match &p.outcome {
                Outcome::Finished(m) => Some(Unit::Seconds.show(m.apiserver_alone_seconds)),
                _ => None,
            })
            .unwrap_or_else(|| "—".into());
        let cells = |f: &dyn Fn(Option<&Point>) -> String| [f(ours), f(upstream)].join(" | ");
        let _ = writeln!(
            out,
            "| {} × {wecs} | {} | {alone} | {} | {} | {} | {} |",
            thousands(objects),
            cells(&|p| time_cell(p)),
            cells(&|p| figure_cell(p, Unit::MiB, |m| m.hub_peak_rss_mib)),
            cells(&|p| figure_cell(p, Unit::Seconds, |m| m.hub_cpu_seconds)),
            cells(&|p| figure_cell(p, Unit::Count, |m| m.manifestwork_writes as f64)),
            cells(&|p| match p.map(|p| &p.outcome) {
                Some(Outcome::Finished(m)) => m.idle_writes.to_string(),
                _ => "—".into(),
            }),
        );
    }
    out
}

fn time_cell(point: Option<&Point>) -> String {
    match point.map(|p| &p.outcome) {
        None => "—".into(),
        Some(Outcome::Finished(m)) => Unit::Seconds.show(m.in_mailboxes_seconds),
        Some(Outcome::DidNotFinish { cap_minutes, .. }) => format!("did not finish in {cap_minutes:.0} min"),
        Some(Outcome::Skipped { cap_minutes }) => {
            format!("not tried (a smaller point did not finish in {cap_minutes:.0} min)")
        }
    }
}

fn figure_cell(point: Option<&Point>, unit: Unit, value: impl Fn(&Measured) -> f64) -> String {
    match point.map(|p| &p.outcome) {
        Some(Outcome::Finished(m)) => unit.show(value(m)),
        Some(Outcome::DidNotFinish { so_far, .. }) => format!("≥ {}", unit.show(value(so_far))),
        _ => "—".into(),
    }
}

/// How `y` grows when `x` grows: from the exponent of `y ∝ x^e` between two points.
pub fn growth_class(x_ratio: f64, y_ratio: f64) -> &'static str {
    if x_ratio <= 1.0 || y_ratio <= 0.0 {
        return "not comparable";
    }
    let e = y_ratio.ln() / x_ratio.ln();
    match e {
        e if e < 0.2 => "flat",
        e if e < 0.8 => "sublinear",
        e if e <= 1.2 => "linear",
        e if e < 1.7 => "superlinear",
        _ => "quadratic or worse",
    }
}

/// `10× objects → 9.1× time: linear`.
pub fn growth_words(x_ratio: f64, x_name: &str, y_ratio: f64, y_name: &str) -> String {
    format!(
        "{}× {x_name} → {}× {y_name}: {}",
        ratio(x_ratio),
        ratio(y_ratio),
        growth_class(x_ratio, y_ratio)
    )
}

/// A ratio with the digits that matter: `10`, `5.2`, `1.35`.
fn ratio(r: f64) -> String {
    if r >= 10.0 || ((r - r.round()).abs() < 0.05 && r >= 2.0) {
        format!("{r:.0}")
    } else if r >= 2.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.2}")
    }
}

/// Per implementation: the growth of time, RSS and CPU between consecutive finished points and
/// from the first to the last; a point that did not finish, with the growth that implies at
/// least.
pub fn growth_lines(points: &[Point], part: Part) -> Vec<String> {
    let mut lines = Vec::new();
    let what = x_name(part);
    for i in [Implementation::Ours, Implementation::Upstream] {
        let mut mine: Vec<&Point> = points.iter().filter(|p| p.implementation == i).collect();
        mine.sort_by_key(|p| x_of(p, part));
        let finished: Vec<(&Point, &Measured)> = mine
            .iter()
            .filter_map(|p| match &p.outcome {
                Outcome::Finished(m) => Some((*p, m)),
                _ => None,
            })
            .collect();
        let mut pairs: Vec<(usize, usize)> = (1..finished.len()).map(|k| (k - 1, k)).collect();
        if finished.len() > 2 {
            pairs.push((0, finished.len() - 1));
        }
        for (a, b) in pairs {
            let ((pa, ma), (pb, mb)) = (finished[a], finished[b]);
            let rx = x_of(pb, part) as f64 / x_of(pa, part) as f64;
            lines.push(format!(
                "{i}, {} → {} {what}: {}; {}; {}",
                thousands(x_of(pa, part)),
                thousands(x_of(pb, part)),
                growth_words(rx, what, mb.in_mailboxes_seconds / ma.in_mailboxes_seconds, "time"),
                growth_words(rx, what, mb.hub_peak_rss_mib / ma.hub_peak_rss_mib, "hub RSS"),
                growth_words(rx, what, mb.hub_cpu_seconds / ma.hub_cpu_seconds, "hub CPU"),
            ));
        }
        let last = finished.last();
        for p in &mine {
            match (&p.outcome, last) {
                (Outcome::DidNotFinish { cap_minutes, .. }, Some((lp, lm))) => {
                    let rx = x_of(p, part) as f64 / x_of(lp, part) as f64;
                    let ry = cap_minutes * 60.0 / lm.in_mailboxes_seconds;
                    lines.push(format!(
                        "{i}, {} {what}: did not finish in {cap_minutes:.0} min ({} {what} took {}): at least {}× time for {}× {what}",
                        thousands(x_of(p, part)),
                        thousands(x_of(lp, part)),
                        Unit::Seconds.show(lm.in_mailboxes_seconds),
                        ratio(ry),
                        ratio(rx)
                    ));
                }
                (Outcome::DidNotFinish { cap_minutes, .. }, None) => lines.push(format!(
                    "{i}, {} {what}: did not finish in {cap_minutes:.0} min",
                    thousands(x_of(p, part))
                )),
                (Outcome::Skipped { cap_minutes }, _) => lines.push(format!(
                    "{i}, {} {what}: not tried, as a smaller point did not finish in {cap_minutes:.0} min",
                    thousands(x_of(p, part))
                )),
                _ => {}
            }
        }
    }
    lines
}

/// Time to every mailbox and hub RSS against the curve's x, ours and upstream; points that did
/// not finish are left out of the lines and named in the legend.
fn curve_plots(points: &[Point], part: Part) -> Vec<(String, String)> {
    let what = x_name(part);
    let series_of = |i: Implementation, value: &dyn Fn(&Measured) -> f64| {
        let mut mine: Vec<&Point> = points.iter().filter(|p| p.implementation == i).collect();
        mine.sort_by_key(|p| x_of(p, part));
        let finished = mine
            .iter()
            .filter_map(|p| match &p.outcome {
                Outcome::Finished(m) => Some((x_of(p, part) as f64, value(m))),
                _ => None,
            })
            .collect();
        let missing: Vec<String> = mine
            .iter()
            .filter(|p| !matches!(p.outcome, Outcome::Finished(_)))
            .map(|p| thousands(x_of(p, part)))
            .collect();
        let cap = mine.iter().find_map(|p| match p.outcome {
            Outcome::DidNotFinish { cap_minutes, .. } | Outcome::Skipped { cap_minutes } => Some(cap_minutes),
            _ => None,
        });
        let name = match cap {
            Some(cap) => format!("{i} (did not finish at {} {what} in {cap:.0} min)", missing.join(", ")),
            None => i.to_string(),
        };
        Series { name, points: finished }
    };
    let time = |m: &Measured| m.in_mailboxes_seconds;
    let rss = |m: &Measured| m.hub_peak_rss_mib;
    let mut time_series = vec![
        series_of(Implementation::Ours, &time),
        series_of(Implementation::Upstream, &time),
    ];
    let mut alone = series_of(Implementation::Ours, &|m: &Measured| m.apiserver_alone_seconds);
    alone.name = "ITS apiserver alone, the same ManifestWorks (ours)".into();
    time_series.push(alone);
    let rss_series = [
        series_of(Implementation::Ours, &rss),
        series_of(Implementation::Upstream, &rss),
    ];
    let x_label = match part {
        Part::Objects => "objects".to_string(),
        _ => "WECs (2 real, the rest simulated)".to_string(),
    };
    let name = part.name();
    vec![
        (
            format!("{name}-time.svg"),
            line_chart(&Chart {
                title: &format!("Time until every mailbox holds every object, by {what}"),
                x_label: &x_label,
                y_label: "seconds",
                series: &time_series,
            }),
        ),
        (
            format!("{name}-rss.svg"),
            line_chart(&Chart {
                title: &format!("Hub peak RSS, by {what}"),
                x_label: &x_label,
                y_label: "MiB",
                series: &rss_series,
            }),
        ),
    ]
}

const METHOD: &str = "## Method

- **Machine:** shared with the whole stack: every apiserver, etcd, OCM and Jaeger run on the same cores, so \
absolute numbers are noisy; compare within a part, ours against upstream.
- **Versions:** upstream KubeStellar v0.30.0's `controller-manager` (binding and status controllers) and \
`ocm-transport-controller`, built from the Go module proxy by `deps/build.sh kubestellar`, run with their \
binaries' defaults (QPS 5, burst 10, the same 512,000-byte and 512,000-object ManifestWork limits as ours), and \
found through KubeFlex ControlPlane objects as in a real install. Ours: `ks-hub`, a release build like every \
process of ours here (`make bench` builds them), with its shipped defaults and tracing on. Both against the \
same fresh stack (`make bench` starts one per run): Kubernetes v1.34 apiservers, OCM v1.2.0 (its agents' \
rate limit towards their WEC raised from 50 to 200 QPS, as the Klusterlet's `workConfiguration.kubeAPIQPS` \
allows: OCM's work agent re-reads every object it applied every 10 s, which at 50 QPS takes the whole budget \
from 500 objects on a WEC), two WECs with our \
status agent (upstream's ocm-status-addon is not served by the module proxy, so it cannot be built here; \
upstream's status controller reads the WorkStatuses our agent writes, which are API-compatible).
- **Alternation:** the hub not under test is stopped; which implementation goes first alternates between \
repeats (latency) and between points (curves). Each bulk and curve run, and each *ITS apiserver alone* \
below, starts on a fresh stack (every process stopped, etcd and certificates removed, the stack started again: \
about 50 s), so none inherits another's backlog: after 10,000 objects × 52 WECs the ITS apiserver is minutes \
behind its watchers at 13 GB, and undoing a run through it (the hub withdrawing its ManifestWorks, OCM's agents \
letting go of what they applied) took 20 minutes. The hub's withdrawal is therefore not timed here; the \
end-to-end tests check it. A run's clock starts once the ITS has served no writes (but Leases and Events) for \
5 s: the simulated WECs' registration (OCM's RBAC, our add-on's quota, for each) is the stack's setup, not the \
run. Latency runs clean up after themselves and wait until nothing of theirs is left.
- **Latency's hub** runs with the shipped limits (512,000 bytes and objects per ManifestWork), so the delivery \
scenario's objects, one policy's, share one ManifestWork per WEC; `make up`'s hub puts at most 20 in one.
- **Latency.** *Delivery* (`--objects` Deployments, one after another): from the create call returning to the \
object existing on both WECs; ManifestWork generations per object counts the ITS writes that changed a \
ManifestWork's spec. *Singleton status* (`--changes` changes): a Gauge (a custom resource with a status \
subresource and no controller) bound to cluster1 with `wantSingletonReportedState`; the bench writes its \
`.status` on cluster1 and times until the WDS Gauge shows it. *Multi-WEC status*: a Deployment bound to both \
WECs with `wantMultiWECReportedState`, scaled between 1 and 2 replicas in the WDS, timed until the WDS status \
shows the ready replicas aggregated over both WECs (ours sums them, upstream v0.30.0 takes the minimum; \
upstream aggregates only apps kinds, hence a Deployment); this includes delivery and the WECs' controllers.
- **Bulk and curves.** Objects (half ConfigMaps, half Deployments of 0 replicas) spread over `--namespaces` \
namespaces; for each namespace one YAML file holding its BindingPolicy (selecting the namespace's label, for \
both real WECs and every simulated one), the Namespace and its objects, applied with `kubectl apply -f` \
(client-side apply, as users do; `--kubectl-parallel` kubectl processes at once) in the WDS. Simulated WECs are \
ManagedClusters with a mailbox namespace but no agent. Timed from the first `kubectl apply`: *created in the \
WDS* (every kubectl returned), *all in every mailbox* (a watch on ManifestWorks: every mailbox's works of the \
run's policies hold every object and Namespace; *after kubectl finished* is the part of it after *created in the \
WDS*, the hub's tail; *as the ITS accepted it* is the same moment by the ITS apiserver's own clock, to the second: \
the latest time in the managedFields entries that own the `spec` of the ManifestWorks the watch then showed, since \
a busy apiserver's watch shows writes long after it accepted them), *all on both real WECs*. kubectl shares the machine with \
everything downstream: a hub that delivers while kubectl runs (the WECs' apiservers and agents applying \
thousands of objects, their reports flowing back) slows kubectl down, and one that delivers little does not, \
so *created in the WDS* compares what the whole machine did meanwhile, not the hubs alone. Meanwhile the hub's peak RSS \
(sampled every 250 ms, summed over upstream's two processes) and CPU seconds, and the writes the WDS and ITS \
apiservers served (their own `apiserver_request_total`, write verbs): the hub's writes to the WDS (all but \
kubectl's creates, the ServiceAccount a new Namespace gets, Leases and Events) and ManifestWork writes to the \
ITS (the hub's, plus the OCM agent's finalizer patch on each new ManifestWork of a real WEC); then, once the \
agents on both real WECs have reported every object (a WorkStatus each) and neither the real WECs' objects (their \
own controllers catch up for minutes after thousands of Deployments) nor the WECs' reports (ManifestWork status, \
WorkStatuses) have changed for 5 s (at most 10 minutes), the writes of our processes or upstream's during `--idle` \
seconds of idle (target 0): the hub's, and the status agents' WorkStatus writes (the details list every write \
then, the real WECs' included). *ITS apiserver alone*: the same final \
ManifestWorks, each written once (created: the cheapest write the apiserver takes) into a namespace no agent reads, from a tight client loop with 8 writes in \
flight, on a fresh stack (so the ITS never holds both) — the physical limit. The details say where \
the machine's CPU went until every mailbox was full, and while the ITS apiserver alone wrote: CPU seconds of \
each process of the stack (from `/proc`), of the bench's kubectl processes and of the bench itself; and \
the resident memory of the stack's processes that held the most once both real WECs had every object (an OCM \
work agent's included). A run that has not reached every mailbox and both real WECs after \
`--upstream-cap-minutes` (upstream) or `--ours-cap-minutes` (ours) is stopped and shown as \"did not finish\"; \
on a curve, an implementation's larger points are then not tried. Growth between points is named from the \
exponent e of y ∝ xᵉ: flat (e < 0.2), sublinear (< 0.8), linear (0.8–1.2), superlinear (< 1.7), quadratic or \
worse.
- **Agent and churn** (ours only, past the hub, straight into cluster1's mailbox): `--agent-objects` Gauges in \
ManifestWorks of 100, delivered a tenth at a time; after each tenth, once the agent has a WorkStatus for every \
Gauge, its RSS; MiB per 1,000 objects is the least-squares slope. The time until all are reported is mostly \
OCM's work agent creating the Gauges (run for this part with a status-sync interval of an hour, as \
re-reading every applied Gauge each 10 s would starve its applying); the agent's own part is the wait from a \
tenth's last Gauge existing on the WEC to its last WorkStatus (polled every 500 ms). Then one status change of every Gauge (16 \
writes in flight), timed until every WorkStatus shows it; WorkStatus writes per change from the ITS \
apiserver's request counts (target 1). Churn: Pod create/delete cycles: ManifestWorks holding `--agent-pods` \
Pods (of 100 each), every round replacing each Pod with a new one (OCM deletes the old and creates the new; \
`terminationGracePeriodSeconds: 0`), until the agent's WorkStatuses name exactly the new Pods; its RSS after \
each round, and the least-squares slope after the first round (target: flat).
";

#[cfg(test)]
mod tests {
    use super::super::report::Figures;
    use super::*;

    fn measured(seconds: f64, rss: f64) -> Measured {
        Measured {
            in_mailboxes_seconds: seconds,
            hub_peak_rss_mib: rss,
            hub_cpu_seconds: seconds / 2.0,
            apiserver_alone_seconds: seconds / 4.0,
            ..Measured::default()
        }
    }

    fn point(i: Implementation, objects: usize, outcome: Outcome) -> Point {
        Point {
            implementation: i,
            objects,
            wecs: 12,
            outcome,
        }
    }

    fn objects_curve() -> Vec<Point> {
        vec![
            point(Implementation::Ours, 1000, Outcome::Finished(measured(4.0, 100.0))),
            point(
                Implementation::Upstream,
                1000,
                Outcome::Finished(measured(360.0, 150.0)),
            ),
            point(Implementation::Ours, 5000, Outcome::Finished(measured(19.0, 120.0))),
            point(
                Implementation::Upstream,
                5000,
                Outcome::DidNotFinish {
                    cap_minutes: 20.0,
                    so_far: measured(0.0, 400.0),
                },
            ),
            point(Implementation::Ours, 10000, Outcome::Finished(measured(36.4, 130.0))),
            point(Implementation::Upstream, 10000, Outcome::Skipped { cap_minutes: 20.0 }),
        ]
    }

    #[test]
    fn growth_is_named_from_the_ratios() {
        assert_eq!(
            growth_words(10.0, "objects", 9.1, "time"),
            "10× objects → 9.1× time: linear"
        );
        assert_eq!(growth_class(10.0, 1.05), "flat");
        assert_eq!(growth_class(10.0, 3.0), "sublinear");
        assert_eq!(growth_class(10.0, 30.0), "superlinear");
        assert_eq!(growth_class(10.0, 100.0), "quadratic or worse");
        assert_eq!(growth_class(1.0, 3.0), "not comparable");
    }

    #[test]
    fn a_curve_states_its_growth_and_what_did_not_finish() {
        let lines = growth_lines(&objects_curve(), Part::Objects);
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("ours, 1,000 → 10,000 objects: 10× objects → 9.1× time: linear")),
            "{lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("ours, 1,000 → 5,000 objects: 5× objects → 4.8× time: linear")),
            "{lines:#?}"
        );
        assert!(lines.iter().any(|l| l == "upstream, 5,000 objects: did not finish in 20 min (1,000 objects took 360.00 s): at least 3.3× time for 5× objects"), "{lines:#?}");
        assert!(
            lines.iter().any(|l| l.contains("upstream, 10,000 objects: not tried")),
            "{lines:#?}"
        );
        let table = curve_table(&objects_curve());
        assert!(
            table.contains("| 5,000 × 12 | 19.00 s | did not finish in 20 min | 4.75 s | 120 MiB | ≥ 400 MiB |"),
            "{table}"
        );
        assert!(
            table.contains("not tried (a smaller point did not finish in 20 min)"),
            "{table}"
        );
    }

    #[test]
    fn the_report_combines_the_parts_present_and_says_which_are_not_run() {
        let mut figures = Figures::default();
        figures.add(Implementation::Ours, "all in every mailbox", Unit::Seconds, 30.0);
        figures.did_not_finish(Implementation::Upstream, "all in every mailbox", 20.0);
        let bulk = PartResult {
            part: Part::Bulk,
            date: "2026-11-24 20:00 UTC".into(),
            seconds: 1800.0,
            knobs: vec![("--bulk-objects".into(), "10000".into())],
            machine: "2 cores (test)".into(),
            figures,
            points: vec![],
            samples: vec![],
            partial: false,
        };
        let objects = PartResult {
            part: Part::Objects,
            date: "2026-11-25 20:00 UTC".into(),
            seconds: 3000.0,
            knobs: vec![],
            machine: "2 cores (test)".into(),
            figures: Figures::default(),
            points: objects_curve(),
            samples: vec![],
            partial: true,
        };
        // Through JSON, as the parts are kept.
        let json = |r: &PartResult| serde_json::from_str::<PartResult>(&serde_json::to_string(r).unwrap()).unwrap();
        let results = vec![
            (Part::Latency, None),
            (Part::Bulk, Some(json(&bulk))),
            (Part::Objects, Some(json(&objects))),
            (Part::Wecs, None),
            (Part::Agent, None),
            (Part::Churn, None),
        ];
        let reading = "## Against the targets\n\nMet, mostly.\n";
        let (text, plots) = render(&results, Some(reading), "bench");
        assert!(text.contains("≥\".\n\n## Against the targets\n\nMet, mostly.\n\n## Latency"));
        assert!(text.contains("## Latency: one object at a time\n\nNot run yet: `make bench SCENARIO=latency`."));
        assert!(text.contains("Not run yet: `make bench SCENARIO=wecs`."));
        assert!(
            text.contains(
                "Run on 2026-11-24 20:00 UTC (2 cores (test)); took 30.0 min; knobs: `--bulk-objects 10000`."
            )
        );
        assert!(text.contains(
            "Run on 2026-11-25 20:00 UTC (2 cores (test)); **stopped before its end**, after 50.0 min: what its \
             finished runs measured; knobs: ."
        ));
        assert!(text.contains("| all in every mailbox | 30.00 s | did not finish in 20 min | ≥ 40.00× |"));
        assert!(text.contains("![objects-time.svg](bench/objects-time.svg)"));
        assert!(text.contains("## Method"));
        let names: Vec<&str> = plots.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(names, ["objects-time.svg", "objects-rss.svg"]);
        assert!(
            plots[0]
                .1
                .contains("upstream (did not finish at 5,000, 10,000 objects in 20 min)")
        );
        let before_bulk = text.find("## Bulk").unwrap();
        assert!(
            text.find("## Latency").unwrap() < before_bulk
                && before_bulk < text.find("## Scaling with objects").unwrap()
        );
    }

    #[test]
    fn the_objects_curves_largest_points_run_apart_join_it() {
        let sitting = |part, points| PartResult {
            part,
            date: "2026-12-03 12:00 UTC".into(),
            seconds: 2700.0,
            knobs: vec![],
            machine: "2 cores (test)".into(),
            figures: Figures::default(),
            points,
            samples: vec![],
            partial: false,
        };
        let largest = vec![
            point(Implementation::Ours, 10000, Outcome::Finished(measured(40.0, 140.0))),
            point(Implementation::Upstream, 10000, Outcome::Skipped { cap_minutes: 20.0 }),
        ];
        // The objects part as it ran before: the whole curve, 10,000 included.
        let both = vec![
            (Part::Objects, Some(sitting(Part::Objects, objects_curve()))),
            (Part::ObjectsLarge, Some(sitting(Part::ObjectsLarge, largest.clone()))),
        ];
        let (text, plots) = render(&both, None, "bench");
        assert!(!text.contains("the largest points\n"), "no section of its own:\n{text}");
        assert!(text.contains(
            "Its largest points apart (`make bench SCENARIO=objects-large`, so that each part takes under an hour): \
             Run on 2026-12-03 12:00 UTC (2 cores (test)); took 45.0 min"
        ));
        assert!(text.contains("| 10,000 × 12 | 40.00 s |"), "{text}");
        assert!(
            !text.contains("36.40 s"),
            "the newer run of 10,000 replaces the older:\n{text}"
        );
        assert!(text.contains("| 5,000 × 12 | 19.00 s |"), "{text}");
        assert!(!text.contains("The two parts ran"), "{text}");
        assert_eq!(plots.len(), 2);
        let mut earlier = sitting(Part::Objects, objects_curve());
        earlier.date = "2026-11-29 12:51 UTC".into();
        let apart = vec![(Part::Objects, Some(earlier)), both.into_iter().nth(1).unwrap()];
        let (text, _) = render(&apart, None, "bench");
        assert!(
            text.contains(
                "**The two parts ran on different days or machines** (2026-11-29 12:51 UTC, 2026-12-03 12:00 UTC)"
            ),
            "{text}"
        );

        let largest_alone = vec![
            (Part::Objects, None),
            (Part::ObjectsLarge, Some(sitting(Part::ObjectsLarge, largest))),
        ];
        let (text, _) = render(&largest_alone, None, "bench");
        assert!(text.contains("Not run yet: `make bench SCENARIO=objects`."), "{text}");
        assert!(text.contains("| 10,000 × 12 | 40.00 s |"), "{text}");
    }

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(thousands(10000), "10,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000000), "1,000,000");
    }
}
