//! What one part of the comparison measured, as kept in `docs/bench/<part>.json`: parts run on
//! different days combine into one report.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::report::{Figures, Implementation};

/// The parts of `ks-bench compare`, each run on its own (`--scenario`, `make bench SCENARIO=`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// Delivery latency, singleton status and multi-WEC status, one object at a time.
    Latency,
    /// The headline run: many objects in several namespaces and policies, created with
    /// `kubectl apply`, to 2 real and many simulated WECs.
    Bulk,
    /// Cost as objects grow, at a fixed number of WECs.
    Objects,
    /// The objects curve's largest points, run apart from `objects` so that each part takes
    /// under an hour; shown on the same curve.
    #[serde(rename = "objects-large")]
    ObjectsLarge,
    /// Cost as WECs grow, at a fixed number of objects.
    Wecs,
    /// Our status agent alone: many objects on one WEC, one status change each.
    Agent,
    /// Our status agent alone: Pod create/delete cycles, its memory over them.
    Churn,
}

impl Part {
    pub const ALL: [Part; 7] = [
        Part::Latency,
        Part::Bulk,
        Part::Objects,
        Part::ObjectsLarge,
        Part::Wecs,
        Part::Agent,
        Part::Churn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Part::Latency => "latency",
            Part::Bulk => "bulk",
            Part::Objects => "objects",
            Part::ObjectsLarge => "objects-large",
            Part::Wecs => "wecs",
            Part::Agent => "agent",
            Part::Churn => "churn",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Part::Latency => "Latency: one object at a time",
            Part::Bulk => "Bulk: many objects, several namespaces and policies, created with kubectl",
            Part::Objects => "Scaling with objects",
            Part::ObjectsLarge => "Scaling with objects: the largest points",
            Part::Wecs => "Scaling with WECs",
            Part::Agent => "Status agent at many objects (ours only)",
            Part::Churn => "Status agent over Pod create/delete cycles (ours only)",
        }
    }

    /// Where its results are kept.
    pub fn json(self, dir: &Path) -> PathBuf {
        dir.join(format!("{}.json", self.name()))
    }
}

/// One part's results.
#[derive(Debug, Serialize, Deserialize)]
pub struct PartResult {
    pub part: Part,
    /// When it ran (UTC).
    pub date: String,
    /// How long it took, in seconds.
    pub seconds: f64,
    /// The knobs it ran with, as `--flag value`.
    pub knobs: Vec<(String, String)>,
    /// The machine's cores and CPU model.
    pub machine: String,
    pub figures: Figures,
    /// The points of a curve (objects, wecs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub points: Vec<Point>,
    /// (x, y) samples of a quantity over the run, e.g. the agent's RSS over Pod cycles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<(f64, f64)>,
    /// Written after one of its runs while more were to come; kept only when the part was
    /// stopped before its end (a curve's largest points can take longer than a session has).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

/// What a part's run returns: its figures, curve points, samples, and the knobs that mattered.
#[derive(Clone, Default)]
pub struct Output {
    pub figures: Figures,
    pub points: Vec<Point>,
    pub samples: Vec<(f64, f64)>,
    pub knobs: Vec<(String, String)>,
}

/// One point of a curve: one implementation's run at some objects and WECs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    pub implementation: Implementation,
    pub objects: usize,
    pub wecs: usize,
    pub outcome: Outcome,
}

/// A run to full propagation, or how it did not get there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Finished(Measured),
    /// Stopped at the cap; what it had reached by then (RSS, CPU, writes are lower bounds).
    DidNotFinish {
        cap_minutes: f64,
        so_far: Measured,
    },
    /// Not attempted, since a smaller point of the same curve did not finish.
    Skipped {
        cap_minutes: f64,
    },
}

/// The figures of one run to full propagation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Until `kubectl apply` of every file returned.
    pub created_seconds: f64,
    /// Until every mailbox held every object, as a watch on the ITS showed it.
    pub in_mailboxes_seconds: f64,
    /// Until the ITS accepted the last write of that (its own time, to the second); 0 in results
    /// from before it was measured.
    #[serde(default)]
    pub in_mailboxes_accepted_seconds: f64,
    /// Until both real WECs held every object.
    pub on_wecs_seconds: f64,
    pub hub_peak_rss_mib: f64,
    pub hub_cpu_seconds: f64,
    pub hub_wds_writes: u64,
    pub manifestwork_writes: u64,
    pub binding_writes: u64,
    /// The hub's writes (WDS and ManifestWorks) and the status agents' (WorkStatuses) during the
    /// idle time afterwards; before 2026-12-03 the hub's alone.
    pub idle_writes: u64,
    /// The ITS apiserver alone writing the same final ManifestWorks.
    pub apiserver_alone_seconds: f64,
}

impl PartResult {
    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(self.part.json(dir), serde_json::to_string_pretty(self)? + "\n")?;
        Ok(())
    }

    /// The part's results in `dir`, if it has been run.
    pub fn load(dir: &Path, part: Part) -> anyhow::Result<Option<PartResult>> {
        let path = part.json(dir);
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path)?;
        Ok(Some(
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        ))
    }
}

/// Now (UTC) as `YYYY-MM-DD HH:MM UTC`.
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string()
}

/// `<cores> cores (<CPU model>)`.
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    format!("{cores} cores ({model})")
}
