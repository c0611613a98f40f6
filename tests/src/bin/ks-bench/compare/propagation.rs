//! One run to full propagation, the unit of the bulk and curve parts: objects in several
//! namespaces, each with its own BindingPolicy, created with `kubectl apply`, to both real WECs
//! and some simulated ones; timed until every mailbox holds every object and both real WECs
//! have them, with the hub's memory, CPU and apiserver writes meanwhile and when idle
//! afterwards, against what the ITS apiserver alone needs to write the same ManifestWorks. A run
//! that does not get there within the implementation's cap is stopped there.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use ks_shared::api::WorkStatus;
use ks_shared::names::ORIGIN_BINDING_LABEL;
use ks_shared::ocm::ManifestWork;
use ks_tests::metrics::{Request, apiserver_writes, difference};
use ks_tests::stack::Stack;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use serde_json::value::RawValue;

use super::kubectl::{self, LABEL};
use super::report::Implementation;
use super::results::{Measured, Outcome};
use super::simulated::SIMULATED_LABEL;
use super::{Knobs, WDS, hub_pids, within};
use crate::fixtures::{MANAGER, apply_namespace, unique};
use ks_tests::measure::{CpuByProcess, Usage, rss_by_process};

/// How long the agents get to report every object before the idle window.
const REPORTED_DEADLINE: Duration = Duration::from_secs(600);
/// How long what is waited on must not change: the ITS before a run, the WECs and their reports
/// before the idle window; and the most to wait.
const SETTLED_FOR: Duration = Duration::from_secs(5);
const SETTLE_DEADLINE: Duration = Duration::from_secs(600);

/// What one run sends where.
pub struct Load<'a> {
    pub objects: usize,
    pub namespaces: usize,
    /// The real WECs: both, or none (`--without-real-wecs`).
    pub real: &'a [&'a str],
    pub simulated: &'a [String],
}

impl Load<'_> {
    pub fn wecs(&self) -> usize {
        self.real.len() + self.simulated.len()
    }
}

/// The final content of a finished run's ManifestWorks, as JSON text: for the ITS-alone measure
/// ([`its_alone`]), on a fresh stack.
pub type Finals = Vec<Box<RawValue>>;

/// One run with the running hub of `i`; its outcome, the writes it caused (per resource and
/// verb) and, when it finished, its final ManifestWorks. It leaves its objects behind.
pub async fn propagate(
    stack: &Stack,
    knobs: &Knobs,
    i: Implementation,
    load: &Load<'_>,
) -> anyhow::Result<(Outcome, String, Finals)> {
    let its = stack.client("its1").await?;
    let prefix = unique("bench-bulk");
    let spreads = kubectl::spread(&prefix, load.objects, load.namespaces);
    let simulated = json!({"matchLabels": {SIMULATED_LABEL: "true"}});
    let clusters = match load.real {
        [] => json!([simulated]),
        _ => json!([{"matchLabels": {"location-group": "edge"}}, simulated]),
    };
    let dir = stack.state.join("tmp").join(&prefix);
    let files = kubectl::write_files(&dir, &spreads, &clusters)?;

    // Every mailbox's ManifestWorks of this run's policies, as the objects each holds. Listed
    // a few at a time: at 10,000 objects × 52 WECs they hold 500 MB, and a page of kube's
    // default 500 outlasts the apiserver's request timeout.
    let held: Arc<Mutex<Held>> = Arc::default();
    let works: Api<ManifestWork> = Api::all(its.clone());
    let ours = format!("{ORIGIN_BINDING_LABEL} in ({})", names(&spreads).join(","));
    let tracking = tokio::spawn({
        let (works, seen, prefix) = (works.clone(), held.clone(), prefix.clone());
        let config = watcher::Config::default().labels(&ours).page_size(5);
        async move {
            let events = watcher(works, config).default_backoff().applied_objects();
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                // The watcher retries on its own.
                let Ok(work) = event else { continue };
                let ours = work
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(ORIGIN_BINDING_LABEL))
                    .is_some_and(|b| b.starts_with(&format!("{prefix}-")));
                if ours {
                    let key = (
                        work.metadata.namespace.clone().unwrap_or_default(),
                        work.metadata.name.clone().unwrap_or_default(),
                    );
                    let held = HeldWork {
                        objects: work.spec.workload.manifests.iter().map(|m| object_hash(m)).collect(),
                        accepted: spec_accepted(&work),
                    };
                    seen.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(key, held);
                }
            }
        }
    });

    let settling = Instant::now();
    let settled = its_settled(stack).await?;
    println!(
        "   the ITS {} after {:.0} s",
        if settled { "settled" } else { "was still written" },
        settling.elapsed().as_secs_f64()
    );

    let cap_minutes = knobs.cap(i);
    let before = writes_now(stack).await?;
    let written_before = hub_written(stack, i);
    let usage = Usage::start(hub_pids(stack, i));
    let machine = CpuByProcess::start(&stack.procs);
    let started = Instant::now();
    let started_at = Timestamp::now();
    let until = started + Duration::from_secs_f64(cap_minutes * 60.0);
    kubectl::apply(stack, &files, knobs.kubectl_parallel).await?;
    let created = started.elapsed();
    println!(
        "   {} objects in {} namespaces created with kubectl in {:.1} s",
        load.objects,
        spreads.len(),
        created.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);

    // Every mailbox holding every object and every Namespace.
    let mailboxes: Vec<String> = load
        .real
        .iter()
        .map(|s| s.to_string())
        .chain(load.simulated.iter().cloned())
        .collect();
    let target = load.objects + spreads.len();
    let mut progress = Progress::default();
    // When the ITS accepted the last write that the watch had shown once every mailbox was full.
    let mut last_accepted = None;
    // Full: holding every object. Counted as distinct objects, as a hub may hold an object in
    // two ManifestWorks of a mailbox for a while (ours, one that moves to another ManifestWork
    // until that one is applied, which no agent does in a simulated WEC's mailbox).
    let full = || {
        let held = held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut by_mailbox: HashMap<&str, Vec<&[u64]>> = HashMap::new();
        for ((mailbox, _), work) in held.iter() {
            by_mailbox.entry(mailbox).or_default().push(&work.objects);
        }
        let manifests: usize = held.values().map(|w| w.objects.len()).sum();
        let holds_all = |works: &Vec<&[u64]>| {
            // Counting first: most of the time most mailboxes are far from full.
            works.iter().map(|w| w.len()).sum::<usize>() >= target
                && works.iter().flat_map(|w| w.iter()).collect::<HashSet<_>>().len() == target
        };
        let full = mailboxes
            .iter()
            .filter(|m| by_mailbox.get(m.as_str()).is_some_and(holds_all))
            .count();
        progress.tell(started, || {
            format!(
                "{full} of {} mailboxes full, {manifests} manifests held for {} objects × mailboxes",
                mailboxes.len(),
                mailboxes.len() * target
            )
        });
        if full == mailboxes.len() {
            last_accepted = held.values().filter_map(|w| w.accepted).max();
        }
        std::future::ready(Ok(full == mailboxes.len()))
    };
    let in_mailboxes = within(until, full).await?.then(|| started.elapsed());
    let cpu_by_process = machine.since();
    let mut on_wecs = None;
    if in_mailboxes.is_some() {
        let wecs = futures::future::try_join_all(load.real.iter().map(|wec| stack.client(wec))).await?;
        let all_there = || async {
            let mut all = true;
            for wec in &wecs {
                let labelled = ListParams::default().labels(LABEL);
                let cms = Api::<ConfigMap>::all(wec.clone()).list_metadata(&labelled).await?;
                let ds = Api::<Deployment>::all(wec.clone()).list_metadata(&labelled).await?;
                all &= cms.items.len() + ds.items.len() == load.objects;
            }
            anyhow::Ok(all)
        };
        on_wecs = within(until, all_there).await?.then(|| started.elapsed());
    }
    let memory = rss_by_process(&stack.procs);
    let (peak, cpu) = usage.read();
    drop(usage);
    tracking.abort();
    let after = writes_now(stack).await?;
    let written = hub_written(stack, i).zip(written_before).map(|(a, b)| a.since(b));
    let [wds_writes, its_writes] = [difference(&before[0], &after[0]), difference(&before[1], &after[1])];
    let mut measured = Measured {
        created_seconds: created.as_secs_f64(),
        in_mailboxes_seconds: in_mailboxes.unwrap_or_default().as_secs_f64(),
        in_mailboxes_accepted_seconds: last_accepted
            .filter(|_| in_mailboxes.is_some())
            .map_or(0.0, |t| (t.as_millisecond() - started_at.as_millisecond()) as f64 / 1e3),
        on_wecs_seconds: on_wecs
            .filter(|_| !load.real.is_empty())
            .unwrap_or_default()
            .as_secs_f64(),
        hub_peak_rss_mib: peak,
        hub_cpu_seconds: cpu,
        hub_wds_writes: hub_writes_in_wds(&wds_writes),
        manifestwork_writes: manifest_work_writes(&its_writes),
        binding_writes: ks_tests::metrics::total(&wds_writes, "bindings", None),
        ..Measured::default()
    };
    // Each line of the notes names its run.
    let point = format!("{i}, {} objects × {} WECs", load.objects, load.wecs());
    let mut notes = format!(
        "{point}: WDS writes: {}\n{point}: ITS writes: {}",
        describe(&wds_writes),
        describe(&its_writes)
    );
    let cpu = match in_mailboxes {
        Some(took) => cpu_shares(&cpu_by_process, "until every mailbox was full", took),
        None => cpu_shares(&cpu_by_process, "until the cap", started.elapsed()),
    };
    let cpu_line = format!("{point}: {cpu}");
    note_line(&mut notes, &cpu_line);
    let when = match on_wecs {
        Some(_) => "once both real WECs held everything",
        None => "at the cap",
    };
    let memory_line = format!("{point}: {}", memory_shares(&memory, when));
    note_line(&mut notes, &memory_line);
    if on_wecs.is_none() {
        println!(
            "   {i} did not finish in {cap_minutes} min (every mailbox full: {})",
            in_mailboxes.is_some()
        );
        return Ok((
            Outcome::DidNotFinish {
                cap_minutes,
                so_far: measured,
            },
            notes,
            Finals::new(),
        ));
    }

    // Idle: what the hub writes when nothing changes. First the agents report every object
    // (status return is the hub's work too), then a measuring window.
    let reported = || async {
        let mut all = true;
        for wec in load.real {
            let statuses = Api::<WorkStatus>::namespaced(its.clone(), wec)
                .list_metadata(&ListParams::default().labels(&ours))
                .await?;
            all &= statuses.items.len() >= target;
        }
        anyhow::Ok(all)
    };
    if !within(Instant::now() + REPORTED_DEADLINE, reported).await? {
        println!("   the agents have not reported every object after {REPORTED_DEADLINE:?}: idle counted anyway");
    }
    // The hub rightly writes when its inputs change: the OCM work agents' ManifestWork status
    // (Deployments becoming available) and the agents' WorkStatuses; the agents when what they
    // report changes, as the WECs' own controllers catch up (a kube-controller-manager takes
    // minutes over thousands of Deployments). Idle starts once all of them stop.
    if !inputs_settled(stack, load.real).await? {
        println!("   the WECs or their reports still change after {SETTLE_DEADLINE:?}: idle counted anyway");
    }
    let ([wds_after, its_after], wecs_after) = (writes_now(stack).await?, wec_writes_now(stack, load.real).await?);
    tokio::time::sleep(Duration::from_secs(knobs.idle)).await;
    let ([wds_now, its_now], wecs_now) = (writes_now(stack).await?, wec_writes_now(stack, load.real).await?);
    let (wds_idle, its_idle) = (difference(&wds_after, &wds_now), difference(&its_after, &its_now));
    let wecs_idle: Vec<String> = load
        .real
        .iter()
        .zip(wecs_after.iter().zip(&wecs_now))
        .map(|(wec, (before, now))| format!("{wec} [{}]", describe(&difference(before, now))))
        .collect();
    measured.idle_writes = hub_writes_in_wds(&wds_idle) + manifest_work_writes(&its_idle) + agent_writes(&its_idle);
    notes.push_str(&format!(
        "\n{point}: in {} s idle: WDS [{}] ITS [{}] {}",
        knobs.idle,
        describe(&wds_idle),
        describe(&its_idle),
        wecs_idle.join(" ")
    ));

    let final_works = final_contents(&its, &mailboxes, &ours).await?;
    let on_wecs = match load.real {
        [] => "no real WECs".to_string(),
        _ => format!("both real WECs in {:.1} s", measured.on_wecs_seconds),
    };
    let full_line = format!(
        "{point}: every mailbox full in {:.1} s as the watch showed it, and as the ITS accepted the last write {:.0} s; {on_wecs}",
        measured.in_mailboxes_seconds, measured.in_mailboxes_accepted_seconds,
    );
    note_line(&mut notes, &full_line);
    if let Some(written) = written {
        let final_bytes: usize = final_works.iter().map(|w| w.get().len()).sum();
        let lines = [
            format!(
                "{point}: ManifestWork bytes written {:.0} MB, their final content {:.0} MB ({:.2}×)",
                written.bytes / 1e6,
                final_bytes as f64 / 1e6,
                written.bytes / final_bytes.max(1) as f64
            ),
            format!(
                "{point}: the hub's watch showed {:.0} of its writes {:.2} s after each reply on average, {:.0} after more than 60 s; {:.0} not within 5 min",
                written.seen,
                written.seen_seconds / written.seen.max(1.0),
                written.seen - written.seen_within_minute,
                written.unseen
            ),
        ];
        for line in lines {
            note_line(&mut notes, &line);
        }
    }
    Ok((Outcome::Finished(measured), notes, final_works))
}

/// The ITS apiserver alone with a finished run's `finals`, into its `outcome`, and where the
/// machine's CPU went meanwhile into its `notes`; true if it wrote them (and left them behind).
/// Measured on a fresh stack, not next to the run's own: at 10,000 objects × 52 WECs, the run's
/// ManifestWorks and their copies at once took the ITS apiserver to 12.7 GB, and the machine out
/// of memory.
pub async fn its_alone(
    stack: &Stack,
    i: Implementation,
    load: &Load<'_>,
    outcome: &mut Outcome,
    notes: &mut String,
    finals: Finals,
) -> anyhow::Result<bool> {
    let Outcome::Finished(measured) = outcome else {
        return Ok(false);
    };
    let its = stack.client("its1").await?;
    let (took, cpu) = physical_limit(stack, &its, &finals).await?;
    measured.apiserver_alone_seconds = took.as_secs_f64();
    println!(
        "   {i}: the ITS apiserver alone: {:.1} s",
        measured.apiserver_alone_seconds
    );
    let cpu = cpu_shares(&cpu, "while the ITS apiserver alone wrote them", took);
    notes.push_str(&format!(
        "\n{i}, {} objects × {} WECs: {cpu}",
        load.objects,
        load.wecs()
    ));
    Ok(true)
}

/// Where the machine's CPU went during the `took` after a start: the processes that used the
/// most, then the rest together.
fn cpu_shares(used: &[(String, f64)], until: &str, took: Duration) -> String {
    const NAMED: usize = 8;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let total: f64 = used.iter().map(|(_, cpu)| cpu).sum();
    let named: Vec<String> = used
        .iter()
        .take(NAMED)
        .map(|(name, cpu)| format!("{name} {cpu:.0}"))
        .collect();
    let rest: f64 = used.iter().skip(NAMED).map(|(_, cpu)| cpu).sum();
    format!(
        "CPU seconds {until} ({:.1} s, so {:.0} on {cores} cores; the processes used {total:.0}): {}, the other {} {rest:.0}",
        took.as_secs_f64(),
        took.as_secs_f64() * cores as f64,
        named.join(", "),
        used.len().saturating_sub(NAMED)
    )
}

/// Prints `line` as the run goes and adds it to the run's notes.
fn note_line(notes: &mut String, line: &str) {
    println!("   {line}");
    notes.push_str(&format!("\n{line}"));
}

/// Where the machine's memory was at a moment: the processes holding the most.
fn memory_shares(held: &[(String, f64)], when: &str) -> String {
    let named: Vec<String> = held
        .iter()
        .take(8)
        .map(|(name, mib)| format!("{name} {mib:.0}"))
        .collect();
    format!("resident MiB {when}: {}", named.join(", "))
}

fn names(spreads: &[kubectl::Spread]) -> Vec<String> {
    spreads.iter().map(|s| s.namespace.clone()).collect()
}

/// The content (`spec`) of the ManifestWorks `selector` selects, as JSON text, one mailbox per
/// request. As text: at 10,000 objects × 52 WECs they are 300 MB of JSON, and several GB as
/// decoded objects. Per mailbox, not paged across all: on an ITS that far behind, a list of all
/// of them a few per page outlived its continue token (the apiserver compacts every 5 minutes).
async fn final_contents(its: &Client, mailboxes: &[String], selector: &str) -> anyhow::Result<Vec<Box<RawValue>>> {
    let mut all = Vec::new();
    let params = ListParams::default().labels(selector);
    for mailbox in mailboxes {
        let works = Api::<ManifestWork>::namespaced(its.clone(), mailbox)
            .list(&params)
            .await?;
        for work in works.items {
            all.push(serde_json::value::to_raw_value(&work.spec)?);
        }
    }
    Ok(all)
}

/// The time the ITS apiserver alone needs to accept `works` (their final content, each written
/// once, created: the cheapest write the apiserver takes, with no YAML to parse as for an apply)
/// from a tight client loop with 8 writes in flight, into a namespace no agent reads; and
/// the CPU seconds of the stack's processes meanwhile. It leaves them there.
async fn physical_limit(
    stack: &Stack,
    its: &kube::Client,
    works: &[Box<RawValue>],
) -> anyhow::Result<(Duration, Vec<(String, f64)>)> {
    let ns = unique("bench-floor");
    apply_namespace(its, &ns, &json!({})).await?;
    let params = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    let resource = ApiResource::erase::<ManifestWork>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(its.clone(), &ns, &resource);
    let machine = CpuByProcess::start(&stack.procs);
    let started = Instant::now();
    futures::stream::iter(works.iter().enumerate())
        .map(|(n, w)| {
            let (api, params) = (api.clone(), params.clone());
            let work = DynamicObject::new(&format!("w-{n}"), &resource).data(json!({"spec": w}));
            async move { api.create(&params, &work).await.map(|_| ()) }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await?;
    Ok((started.elapsed(), machine.since()))
}

/// What each ManifestWork holds, by (mailbox, name).
type Held = HashMap<(String, String), HeldWork>;

struct HeldWork {
    /// Its objects (see [`object_hash`]).
    objects: Vec<u64>,
    /// When the ITS accepted the write of its `spec` that the watch shows ([`spec_accepted`]).
    accepted: Option<Timestamp>,
}

/// When the ITS accepted the last write of a ManifestWork's `spec`, by the apiserver's own clock
/// (to the second): the latest time among the managedFields entries that own part of the spec,
/// so not a status or finalizer patch. A watch can show a write long after that when the ITS is
/// busy (up to 94 s at 10,000 objects), and the ITS-alone measure counts to each write's reply.
fn spec_accepted(work: &ManifestWork) -> Option<Timestamp> {
    work.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.subresource.as_deref().unwrap_or_default().is_empty())
        .filter(|e| e.fields_v1.as_ref().is_some_and(|f| f.0.get("f:spec").is_some()))
        .filter_map(|e| e.time.as_ref().map(|t| t.0))
        .max()
}

/// A manifest's identity (apiVersion, kind, namespace, name), hashed: 520,000 of them are
/// held at 10,000 objects × 52 WECs.
fn object_hash(manifest: &serde_json::Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for field in [
        &manifest["apiVersion"],
        &manifest["kind"],
        &manifest["metadata"]["namespace"],
        &manifest["metadata"]["name"],
    ] {
        field.as_str().unwrap_or_default().hash(&mut hasher);
    }
    hasher.finish()
}

/// A line on how a long wait goes, once a minute: a run that does not finish shows where it
/// stopped.
#[derive(Default)]
struct Progress {
    last: Option<Instant>,
}

impl Progress {
    fn tell(&mut self, started: Instant, line: impl FnOnce() -> String) {
        if self.last.is_none_or(|last| last.elapsed() >= Duration::from_secs(60)) {
            self.last = Some(Instant::now());
            println!("   {:.0} s: {}", started.elapsed().as_secs_f64(), line());
        }
    }
}

/// Our hub's own account of its ManifestWork writes so far, by its metrics.
#[derive(Clone, Copy, Debug, Default)]
struct Written {
    /// Request bodies.
    bytes: f64,
    /// Writes its watch showed, the seconds that took in all, and those it showed within 60 s.
    seen: f64,
    seen_seconds: f64,
    seen_within_minute: f64,
    /// Writes its watch had not shown after 5 min.
    unseen: f64,
}

impl Written {
    fn of(text: &str) -> Written {
        let metric = |name: &str| ks_tests::metrics::sum(text, &format!("kubestellar_transport_{name}"));
        Written {
            bytes: metric("written_bytes_total"),
            seen: metric("write_seen_seconds_count"),
            seen_seconds: metric("write_seen_seconds_sum"),
            seen_within_minute: text
                .lines()
                .find_map(|l| l.strip_prefix("kubestellar_transport_write_seen_seconds_bucket{le=\"60.0\"} "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_default(),
            unseen: metric("write_unseen_total"),
        }
    }

    fn since(self, before: Written) -> Written {
        Written {
            bytes: self.bytes - before.bytes,
            seen: self.seen - before.seen,
            seen_seconds: self.seen_seconds - before.seen_seconds,
            seen_within_minute: self.seen_within_minute - before.seen_within_minute,
            unseen: self.unseen - before.unseen,
        }
    }
}

/// `None` for upstream's hub, which has no such metrics.
fn hub_written(stack: &Stack, i: Implementation) -> Option<Written> {
    if i != Implementation::Ours {
        return None;
    }
    let hub = std::net::SocketAddr::from(([127, 0, 0, 1], stack.hub_port(WDS)));
    std::net::TcpStream::connect(hub).ok()?;
    let (code, text) = ks_tests::process::http_get(hub, "/metrics");
    (code == 200).then(|| Written::of(&text))
}

/// Whether the writes of the WECs' reports into the ITS (ManifestWork status, WorkStatuses) and
/// the writes on the real `wecs` themselves stopped for `SETTLED_FOR`, within `SETTLE_DEADLINE`.
async fn inputs_settled(stack: &Stack, wecs: &[&str]) -> anyhow::Result<bool> {
    let its = stack.client("its1").await?;
    let reports = |counts: &BTreeMap<Request, u64>| {
        ks_tests::metrics::total(counts, "manifestworks", Some("status")) + agent_writes(counts)
    };
    stopped_changing(|| async {
        let on_wecs: u64 = wec_writes_now(stack, wecs).await?.iter().map(object_writes).sum();
        anyhow::Ok(reports(&apiserver_writes(&its).await?) + on_wecs)
    })
    .await
}

/// Whether the ITS served no writes but Leases' and Events' for `SETTLED_FOR`, within
/// `SETTLE_DEADLINE`: new WECs keep OCM's hub controllers and our add-on writing for a while
/// (each one's RBAC, add-on and quota), which is the stack's setup, not the run's.
async fn its_settled(stack: &Stack) -> anyhow::Result<bool> {
    let its = stack.client("its1").await?;
    stopped_changing(|| async { anyhow::Ok(object_writes(&apiserver_writes(&its).await?)) }).await
}

/// Whether the count `changes` returns stayed the same for `SETTLED_FOR`, within
/// `SETTLE_DEADLINE`.
async fn stopped_changing<F, Fut>(mut changes: F) -> anyhow::Result<bool>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<u64>>,
{
    let until = Instant::now() + SETTLE_DEADLINE;
    let (mut count, mut since) = (changes().await?, Instant::now());
    while since.elapsed() < SETTLED_FOR {
        if Instant::now() >= until {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = changes().await?;
        if now != count {
            (count, since) = (now, Instant::now());
        }
    }
    Ok(true)
}

/// Write counts of the WDS and the ITS apiservers.
async fn writes_now(stack: &Stack) -> anyhow::Result<[BTreeMap<Request, u64>; 2]> {
    Ok([writes_now_in(stack, WDS).await?, writes_now_in(stack, "its1").await?])
}

/// Write counts of the apiserver of `space`.
async fn writes_now_in(stack: &Stack, space: &str) -> anyhow::Result<BTreeMap<Request, u64>> {
    apiserver_writes(&stack.client(space).await?).await
}

/// Write counts of each of the `wecs`' apiservers.
async fn wec_writes_now(stack: &Stack, wecs: &[&str]) -> anyhow::Result<Vec<BTreeMap<Request, u64>>> {
    let mut counts = Vec::new();
    for wec in wecs {
        counts.push(writes_now_in(stack, wec).await?);
    }
    Ok(counts)
}

/// Writes that change objects: all but Leases and Events.
fn object_writes(counts: &BTreeMap<Request, u64>) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| !["leases", "events"].contains(&k.resource.as_str()))
        .map(|(_, v)| v)
        .sum()
}

/// The status agents' writes: their WorkStatuses, every verb and subresource.
fn agent_writes(counts: &BTreeMap<Request, u64>) -> u64 {
    ks_tests::metrics::total(counts, "workstatuses", None)
}

/// WDS writes a hub makes: not the bench's own (kubectl's creates and patches of the objects,
/// their Namespaces and the policies), the ServiceAccount the kube-controller-manager puts in a
/// new Namespace, Leases or Events.
fn hub_writes_in_wds(counts: &BTreeMap<Request, u64>) -> u64 {
    let by_bench = |k: &Request| {
        ["APPLY", "POST", "CREATE"].contains(&k.verb.as_str())
            && k.subresource.is_empty()
            && ["configmaps", "deployments", "namespaces", "bindingpolicies"].contains(&k.resource.as_str())
    };
    counts
        .iter()
        .filter(|(k, _)| !["leases", "events", "serviceaccounts"].contains(&k.resource.as_str()) && !by_bench(k))
        .map(|(_, v)| v)
        .sum()
}

/// ManifestWork writes (main resource, every write verb: the hub's, and the OCM agent's
/// finalizer patches, one per new ManifestWork on a real WEC).
fn manifest_work_writes(counts: &BTreeMap<Request, u64>) -> u64 {
    ks_tests::metrics::total(counts, "manifestworks", Some(""))
}

fn describe(counts: &BTreeMap<Request, u64>) -> String {
    counts
        .iter()
        .filter(|(k, _)| !["leases", "events"].contains(&k.resource.as_str()))
        .map(|(k, v)| {
            let sub = if k.subresource.is_empty() {
                String::new()
            } else {
                format!("/{}", k.subresource)
            };
            format!("{} {}{sub} {v}", k.verb, k.resource)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_is_accepted_when_its_last_spec_write_was() {
        // The hub's two applies of the spec, then OCM's finalizer patch and status update.
        let work: ManifestWork = serde_json::from_value(json!({
            "metadata": {"name": "w", "namespace": "cluster1", "managedFields": [
                {"manager": "ks-hub", "operation": "Apply", "time": "2026-11-26T10:00:07Z",
                 "fieldsV1": {"f:spec": {"f:workload": {}}}},
                {"manager": "work-agent", "operation": "Update", "time": "2026-11-26T10:00:09Z",
                 "fieldsV1": {"f:metadata": {"f:finalizers": {}}}},
                {"manager": "work-agent", "operation": "Update", "subresource": "status",
                 "time": "2026-11-26T10:00:30Z", "fieldsV1": {"f:status": {}}},
                {"manager": "other", "operation": "Update", "time": "2026-11-26T10:00:05Z",
                 "fieldsV1": {"f:spec": {"f:deleteOption": {}}}},
            ]},
            "spec": {"workload": {"manifests": []}},
        }))
        .unwrap();
        assert_eq!(spec_accepted(&work), Some("2026-11-26T10:00:07Z".parse().unwrap()));
        let unwritten: ManifestWork = serde_json::from_value(json!({"metadata": {"name": "w"}, "spec": {}})).unwrap();
        assert_eq!(spec_accepted(&unwritten), None);
    }
}
