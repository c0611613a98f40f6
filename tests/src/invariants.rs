//! What must hold on the stack whatever a test did, checked by the harness once a test binary's
//! tests are done (they run concurrently, so no moment between two of them is quiet):
//!
//! - **Quiet at steady state**: once converged, our processes write nothing. Watches see every
//!   ManifestWork spec write (a new generation), every Binding and WorkStatus write (a new
//!   resourceVersion: only our processes write those), and our processes' write counters cover
//!   the rest (workload `.status`, CombinedStatus). Everything must stay unchanged for
//!   [`QUIET`] within [`SETTLE`].
//! - **No WEC object recreated**: an object that stays selected keeps its UID. A new UID in an
//!   AppliedManifestWork's list, unless the object left a ManifestWork for that WEC in between
//!   (the user deselected or deleted it), means OCM deleted and created it again.
//! - **One WorkStatus per WEC object.**
//!
//! A violation names the objects and the writes seen, so the test that made them can be found
//! (tests name their objects after themselves).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use ks_shared::api::{Binding, BindingPolicy, WorkStatus};
use ks_shared::names::ORIGIN_WDS_LABEL;
use ks_shared::ocm::{AppliedManifestWork, ManifestWork};
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;

use crate::stack::Stack;

/// How long nothing may change for the stack to count as converged.
pub const QUIET: Duration = Duration::from_secs(5);
/// How long convergence may take after the last test.
pub const SETTLE: Duration = Duration::from_secs(120);

/// Our processes' write counters, by process (their sum over every label set).
const HUB_WRITES: [&str; 4] = [
    "kubestellar_binding_writes_total",
    "kubestellar_transport_writes_total",
    "kubestellar_status_writes_total",
    "kubestellar_status_combined_status_writes_total",
];
const AGENT_WRITES: [&str; 1] = ["kubestellar_agent_writes_total"];

/// Writes seen, and WEC objects recreated, since the watches started.
#[derive(Default)]
struct Seen {
    last_write: Option<Instant>,
    /// `(when, what)`: e.g. `ManifestWork cluster1/x generation 7`.
    writes: Vec<(Instant, String)>,
    versions: BTreeMap<String, String>,
    /// (WEC, AppliedManifestWork UID) → the UID of each object it lists.
    applied: BTreeMap<(String, String), BTreeMap<String, String>>,
    /// (mailbox, ManifestWork name) → the objects it holds.
    held: BTreeMap<(String, String), BTreeSet<String>>,
    /// (WEC, object) that left one of the WEC's ManifestWorks: its next UID may be new.
    left: BTreeSet<(String, String)>,
    recreated: Vec<String>,
}

/// How the invariants name a WEC object, from a ManifestWork manifest or an applied resource:
/// group, namespace and name (kinds and resources are not comparable).
/// An object by group, resource, namespace and name: a ConfigMap and a Secret may share a name.
fn object_key(group: &str, resource: &str, namespace: &str, name: &str) -> String {
    format!("{group}/{resource}/{namespace}/{name}")
}

/// The resource (plural) of a kind, as Kubernetes names those of the kinds the tests deliver.
fn resource_of(kind: &str) -> String {
    let kind = kind.to_lowercase();
    match kind.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None if kind.ends_with('s') => format!("{kind}es"),
        None => format!("{kind}s"),
    }
}

impl Seen {
    /// Records `object`'s `version`; a change after the first sighting is a write.
    fn version(&mut self, object: String, version: Option<String>) {
        let changed = match &version {
            Some(version) => self
                .versions
                .insert(object.clone(), version.clone())
                .is_some_and(|before| before != *version),
            None => self.versions.remove(&object).is_some(),
        };
        if changed {
            let now = Instant::now();
            let what = match version {
                Some(version) => format!("{object} now at {version}"),
                None => format!("{object} deleted"),
            };
            self.last_write = Some(now);
            self.writes.push((now, what));
        }
    }

    /// Records what a ManifestWork holds (`present` false: it is gone); what left it may come
    /// back as a new object.
    fn held(&mut self, work: &ManifestWork, present: bool) {
        let mailbox = work.namespace().unwrap_or_default();
        let key = (mailbox.clone(), work.name_any());
        let holds: BTreeSet<String> = if present {
            work.spec
                .workload
                .manifests
                .iter()
                .map(|m| {
                    let group = m["apiVersion"]
                        .as_str()
                        .and_then(|a| a.rsplit_once('/'))
                        .map_or("", |(g, _)| g);
                    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
                    let resource = resource_of(&text(&m["kind"]));
                    object_key(
                        group,
                        &resource,
                        &text(&m["metadata"]["namespace"]),
                        &text(&m["metadata"]["name"]),
                    )
                })
                .collect()
        } else {
            BTreeSet::new()
        };
        let before = self.held.remove(&key).unwrap_or_default();
        for object in before.difference(&holds) {
            self.left.insert((mailbox.clone(), object.clone()));
        }
        if present {
            self.held.insert(key, holds);
        }
    }

    /// Records what an AppliedManifestWork lists (`None`: it is gone).
    fn applied(&mut self, wec: &str, work: &AppliedManifestWork, present: bool) {
        let key = (wec.to_string(), work.uid().unwrap_or_default());
        let listed: BTreeMap<String, String> = if present {
            work.status
                .iter()
                .flat_map(|s| &s.applied_resources)
                .map(|r| (object_key(&r.group, &r.resource, &r.namespace, &r.name), r.uid.clone()))
                .collect()
        } else {
            BTreeMap::new()
        };
        if let Some(before) = self.applied.get(&key) {
            for (object, uid) in &listed {
                let changed = before.get(object).filter(|old| *old != uid);
                let deselected_meanwhile = self.left.remove(&(wec.to_string(), object.clone()));
                if let Some(old) = changed.filter(|_| !deselected_meanwhile) {
                    self.recreated.push(format!(
                        "{wec}: {object} (listed by {}) recreated: UID {old} -> {uid}",
                        work.spec.manifest_work_name
                    ));
                }
            }
        }
        if present {
            self.applied.insert(key, listed);
        } else {
            self.applied.remove(&key);
        }
    }
}

/// Watches that record what the invariants need, from the moment they start.
pub struct Invariants {
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<JoinHandle<()>>,
}

fn spawn_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    seen: Arc<Mutex<Seen>>,
    record: impl Fn(&mut Seen, &K, bool) + Send + 'static,
) -> JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    tokio::spawn(async move {
        let stream = watcher(api, config).default_backoff();
        tokio::pin!(stream);
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            let mut seen = seen.lock().expect("invariants lock");
            match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => record(&mut seen, &o, true),
                watcher::Event::Delete(o) => record(&mut seen, &o, false),
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
    })
}

fn named<K: ResourceExt>(kind: &str, object: &K) -> String {
    match object.namespace() {
        Some(namespace) => format!("{kind} {namespace}/{}", object.name_any()),
        None => format!("{kind} {}", object.name_any()),
    }
}

impl Invariants {
    /// Starts watching the stack's ITS (`its1`), WDS (`wds1`) and WECs.
    pub async fn start(stack: &Stack) -> anyhow::Result<Invariants> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let its = stack.client("its1").await?;
        let wds = stack.client("wds1").await?;
        let ours = watcher::Config::default().labels(ORIGIN_WDS_LABEL);
        let mut tasks = vec![
            spawn_watch(
                Api::<ManifestWork>::all(its.clone()),
                ours,
                seen.clone(),
                |s, w, present| {
                    let generation =
                        present.then(|| format!("generation {}", w.metadata.generation.unwrap_or_default()));
                    s.version(named("ManifestWork", w), generation);
                    s.held(w, present);
                },
            ),
            spawn_watch(
                Api::<WorkStatus>::all(its.clone()),
                watcher::Config::default(),
                seen.clone(),
                |s, w, present| s.version(named("WorkStatus", w), present.then(|| version(w))),
            ),
            spawn_watch(
                Api::<Binding>::all(wds.clone()),
                watcher::Config::default(),
                seen.clone(),
                |s, b, present| s.version(named("Binding", b), present.then(|| version(b))),
            ),
            // Their status (binding controller's conditions, transport's propagation).
            spawn_watch(
                Api::<BindingPolicy>::all(wds),
                watcher::Config::default(),
                seen.clone(),
                |s, p, present| s.version(named("BindingPolicy", p), present.then(|| version(p))),
            ),
        ];
        for wec in stack.wec_names() {
            let client = stack.client(&wec).await?;
            tasks.push(spawn_watch(
                Api::<AppliedManifestWork>::all(client),
                watcher::Config::default(),
                seen.clone(),
                move |s, w, present| s.applied(&wec, w, present),
            ));
        }
        Ok(Invariants { seen, tasks })
    }

    /// Waits for the stack to converge, then checks every invariant; the violations, if any.
    pub async fn check(&self, stack: &Stack) -> anyhow::Result<Vec<String>> {
        let mut violations = self.quiet(stack).await;
        violations.extend(duplicate_work_statuses(&stack.client("its1").await?).await?);
        violations.extend(self.seen.lock().expect("invariants lock").recreated.clone());
        Ok(violations)
    }

    /// Waits until nothing of ours was written for [`QUIET`]; the writes seen if that never
    /// happens within [`SETTLE`].
    async fn quiet(&self, stack: &Stack) -> Vec<String> {
        let until = Instant::now() + SETTLE;
        let mut counters = write_counters(stack);
        let mut quiet_since = Instant::now();
        loop {
            let last_write = self.seen.lock().expect("invariants lock").last_write;
            let now_counters = write_counters(stack);
            if now_counters != counters {
                counters = now_counters;
                quiet_since = Instant::now();
            }
            let since = last_write.map_or(quiet_since, |w| w.max(quiet_since));
            if since.elapsed() >= QUIET {
                return Vec::new();
            }
            if Instant::now() > until {
                return self.recent_writes(counters);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// What was written in the last [`QUIET`] × 4, by object, as a violation.
    fn recent_writes(&self, counters: BTreeMap<String, f64>) -> Vec<String> {
        let seen = self.seen.lock().expect("invariants lock");
        let window = QUIET * 4;
        let mut by_object: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
        for (_, what) in seen.writes.iter().filter(|(at, _)| at.elapsed() <= window) {
            let object = what.rsplit_once(" now at ").map_or(what.as_str(), |(o, _)| o);
            let entry = by_object.entry(object).or_insert((0, what));
            entry.0 += 1;
            entry.1 = what;
        }
        let mut lines = vec![format!(
            "not quiet within {SETTLE:?}: writes in the last {window:?} (our write counters now {counters:?}):"
        )];
        lines.extend(
            by_object
                .into_iter()
                .map(|(object, (count, last))| format!("  {count} writes of {object} (last: {last})")),
        );
        vec![lines.join("\n")]
    }
}

impl Drop for Invariants {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn version<K: ResourceExt>(object: &K) -> String {
    format!("resourceVersion {}", object.resource_version().unwrap_or_default())
}

/// Our processes' write counters, summed per process and counter; processes not answering
/// (stopped by a test) are left out.
fn write_counters(stack: &Stack) -> BTreeMap<String, f64> {
    let mut counters = BTreeMap::new();
    let hub = SocketAddr::from(([127, 0, 0, 1], stack.hub_port("wds1")));
    let mut sources = vec![("hub".to_string(), Some(hub), &HUB_WRITES[..])];
    for wec in stack.wec_names() {
        sources.push((format!("agent {wec}"), stack.agent_address(&wec), &AGENT_WRITES[..]));
    }
    for (process, address, names) in sources {
        let Some(address) = address.filter(|a| std::net::TcpStream::connect(a).is_ok()) else {
            continue;
        };
        let (code, text) = crate::process::http_get(address, "/metrics");
        if code != 200 {
            continue;
        }
        for name in names {
            counters.insert(format!("{process} {name}"), crate::metrics::sum(&text, name));
        }
    }
    counters
}

/// WorkStatuses reporting on the same WEC object (same mailbox and source), as violations.
async fn duplicate_work_statuses(its: &Client) -> anyhow::Result<Vec<String>> {
    let mut by_object: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for status in Api::<WorkStatus>::all(its.clone()).list(&ListParams::default()).await? {
        if status.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let source = &status.spec.spec.source_ref;
        let object = format!(
            "{}: {}/{} {}/{}",
            status.namespace().unwrap_or_default(),
            source.group,
            source.resource,
            source.namespace,
            source.name
        );
        by_object.entry(object).or_default().push(status.name_any());
    }
    Ok(by_object
        .into_iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|(object, names)| format!("{} WorkStatuses for {object}: {}", names.len(), names.join(", ")))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sightings_are_not_writes_and_changes_are() {
        let mut seen = Seen::default();
        seen.version("ManifestWork c/w".into(), Some("generation 1".into()));
        assert!(seen.writes.is_empty());
        seen.version("ManifestWork c/w".into(), Some("generation 1".into()));
        assert!(seen.writes.is_empty(), "a status update leaves the generation");
        seen.version("ManifestWork c/w".into(), Some("generation 2".into()));
        seen.version("ManifestWork c/w".into(), None);
        let writes: Vec<&str> = seen.writes.iter().map(|(_, w)| w.as_str()).collect();
        assert_eq!(
            writes,
            ["ManifestWork c/w now at generation 2", "ManifestWork c/w deleted"]
        );
    }

    fn applied(uid: &str, objects: &[(&str, &str)]) -> AppliedManifestWork {
        let mut work: AppliedManifestWork = serde_json::from_value(serde_json::json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "AppliedManifestWork",
            "metadata": {"name": "a", "uid": uid},
            "spec": {"hubHash": "h", "agentID": "x", "manifestWorkName": "w"},
        }))
        .unwrap();
        let resources = objects
            .iter()
            .map(|(name, uid)| {
                serde_json::json!({"group": "", "version": "v1", "resource": "configmaps",
                                                 "namespace": "n", "name": name, "uid": uid})
            })
            .collect::<Vec<_>>();
        work.status = serde_json::from_value(serde_json::json!({"appliedResources": resources})).unwrap();
        work
    }

    fn work(names: &[&str]) -> ManifestWork {
        let manifests: Vec<serde_json::Value> = names
            .iter()
            .map(|n| serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": "n"}}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "w", "namespace": "c1"},
            "spec": {"workload": {"manifests": manifests}},
        }))
        .unwrap()
    }

    #[test]
    fn a_new_uid_while_selected_is_a_recreation() {
        let mut seen = Seen::default();
        seen.held(&work(&["a", "b"]), true);
        seen.applied("c1", &applied("amw", &[("a", "1"), ("b", "2")]), true);
        // b is deselected and selected again (the AppliedManifestWork need not show the gap).
        seen.held(&work(&["a"]), true);
        seen.held(&work(&["a", "b"]), true);
        seen.applied("c1", &applied("amw", &[("a", "1"), ("b", "3")]), true);
        assert!(seen.recreated.is_empty(), "b left and came back: the user's doing");
        seen.applied("c1", &applied("amw", &[("a", "9"), ("b", "3")]), true);
        assert_eq!(
            seen.recreated,
            ["c1: /configmaps/n/a (listed by w) recreated: UID 1 -> 9"]
        );
    }

    #[test]
    fn a_configmap_and_a_secret_of_one_name_are_two_objects() {
        let mut seen = Seen::default();
        seen.held(&work(&["a"]), true);
        let mut both = applied("amw", &[("a", "1")]);
        let secret = serde_json::json!({"group": "", "version": "v1", "resource": "secrets",
                                        "namespace": "n", "name": "a", "uid": "2"});
        both.status
            .as_mut()
            .unwrap()
            .applied_resources
            .push(serde_json::from_value(secret).unwrap());
        seen.applied("c1", &both, true);
        both.status.as_mut().unwrap().applied_resources.reverse();
        seen.applied("c1", &both, true);
        assert!(seen.recreated.is_empty(), "{:?}", seen.recreated);
        assert_eq!(resource_of("NetworkPolicy"), "networkpolicies");
        assert_eq!(resource_of("Ingress"), "ingresses");
    }
}
