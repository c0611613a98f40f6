//! End-to-end tests of the status add-on agent (`ks-agent`) on the local stack: the agent the
//! stack's status add-on controller installed on cluster1 (run by the stack's stand-in kubelet,
//! with its CSR-issued hub credential and least-privilege RBAC) reports on what the real OCM
//! work agent delivers from ManifestWorks in its1's `cluster1` namespace. One test takes the
//! Lease of the agent on cluster2 away and gives it back.
//!
//! `ks-agent` is built (or brought up to date) before the tests start. The agents' logs are
//! `.stack/logs/pod-<wec>-open-cluster-management-agent-addon-status-agent.log`, and a failed
//! test prints their tail. Whatever a failed test left behind (its ManifestWorks, WEC
//! namespaces and CRDs, all named with this process's id) is deleted at the end.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use ks_shared::api::WorkStatus;
use ks_shared::names;
use ks_shared::ocm::ManifestWork;
use ks_tests::harness::{Ctx, StackTest, run, wait_until};
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::wait::conditions;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const MANAGER: &str = "ks-tests";
/// The WEC the agent reports for, and so its mailbox namespace on the hub.
const WEC: &str = "cluster1";
/// Deliveries go through the OCM work agent, a Deployment controller and kwok.
const DELIVERY: Duration = Duration::from_secs(90);
/// What the agent alone must do "promptly" (e.g. recreate a WorkStatus deleted by hand).
const PROMPTLY: Duration = Duration::from_secs(15);
/// The label every ManifestWork of this run carries (and so every WorkStatus it causes).
const RUN_LABEL: &str = "e2e.kubestellar.io/run";
/// The WEC of the one test that takes its agent's Lease.
const OTHER_WEC: &str = "cluster2";
const COMPONENTS: &[&str] = &[
    "pod-cluster1-open-cluster-management-agent-addon-status-agent",
    "ocm-agent-cluster1",
    "apiserver-its1",
];
static NAMES: AtomicU32 = AtomicU32::new(0);

fn main() -> std::process::ExitCode {
    let ks_stack = Path::new(env!("CARGO_BIN_EXE_ks-stack"));
    let test = |name, body| StackTest {
        name,
        components: COMPONENTS,
        body,
        alone: false,
    };
    if let Err(err) = ks_tests::binaries::build() {
        eprintln!("{err:#}");
        return std::process::ExitCode::FAILURE;
    }
    let code = run(
        ks_stack.parent().expect("binaries live in a directory"),
        vec![
            test("deployment_status_follows_the_wec", |ctx| {
                Box::pin(deployment_status_follows_the_wec(ctx))
            }),
            test("one_work_status_per_manifest", |ctx| {
                Box::pin(one_work_status_per_manifest(ctx))
            }),
            test("foreign_manifestwork_gets_none", |ctx| {
                Box::pin(foreign_manifestwork_gets_none(ctx))
            }),
            test("kind_installed_after_start_is_reported", |ctx| {
                Box::pin(kind_installed_after_start_is_reported(ctx))
            }),
            test("deleted_work_status_is_recreated", |ctx| {
                Box::pin(deleted_work_status_is_recreated(ctx))
            }),
            StackTest {
                name: "leader_restarts_and_removes_leftovers",
                components: &[
                    "pod-cluster2-open-cluster-management-agent-addon-status-agent",
                    "ocm-agent-cluster2",
                    "kubelet-cluster2",
                ],
                body: |ctx| Box::pin(leader_restarts_and_removes_leftovers(ctx)),
                alone: false,
            },
            test("churn_ends_with_one_work_status_per_object", |ctx| {
                Box::pin(churn_ends_with_one_work_status_per_object(ctx))
            }),
        ],
    );
    if let Err(err) = sweep(ks_stack) {
        eprintln!("cleaning up after this run: {err:#}");
    }
    code
}

/// Deletes what a failed test of this run left behind: its ManifestWorks (and so, through the
/// work agent, what they delivered), WEC namespaces and CRDs. All carry this process's id.
fn sweep(ks_stack: &Path) -> anyhow::Result<()> {
    let marker = format!("-{}-", std::process::id());
    let stack = ks_tests::stack::Stack::new(
        &ks_tests::harness::repo_root(),
        2,
        ks_stack.parent().context("bin dir")?,
    )?;
    if !stack.is_running() {
        return Ok(());
    }
    tokio::runtime::Runtime::new()?.block_on(async {
        for wec in [WEC, OTHER_WEC] {
            let works: Api<ManifestWork> = Api::namespaced(stack.client("its1").await?, wec);
            for work in works.list(&kube::api::ListParams::default().labels(RUN_LABEL)).await? {
                if work.name_any().contains(&marker) && work.metadata.deletion_timestamp.is_none() {
                    match works.delete(&work.name_any(), &DeleteParams::default()).await {
                        // Gone meanwhile: its test was finishing.
                        Err(kube::Error::Api(status)) if status.code == 404 => {}
                        Ok(_) => {}
                        Err(err) => return Err(err.into()),
                    }
                }
            }
            let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(stack.client(wec).await?);
            for namespace in namespaces.list(&Default::default()).await? {
                if namespace.name_any().contains(&marker) && namespace.metadata.deletion_timestamp.is_none() {
                    namespaces
                        .delete(&namespace.name_any(), &DeleteParams::default())
                        .await?;
                }
            }
        }
        let crds: Api<CustomResourceDefinition> = Api::all(stack.client(WEC).await?);
        for crd in crds.list(&Default::default()).await? {
            if crd.name_any().contains(&marker) {
                crds.delete(&crd.name_any(), &DeleteParams::default()).await?;
            }
        }
        anyhow::Ok(())
    })
}

/// Waits until the stack's agent for cluster1 is ready (tests run in parallel and share it).
async fn ensure_agent(ctx: &Ctx) -> anyhow::Result<()> {
    ctx.stack.wait_agent_ready(WEC, DELIVERY).await?;
    Ok(())
}

/// A name no other test or run uses.
fn unique(what: &str) -> String {
    format!(
        "e2e-{what}-{}-{}",
        std::process::id(),
        NAMES.fetch_add(1, Ordering::Relaxed)
    )
}

fn deployment(namespace: &str, name: &str, replicas: i32, wds_generation: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {names::WDS_GENERATION_ANNOTATION: wds_generation.to_string()}},
        "spec": {"replicas": replicas,
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}
    })
}

/// One test's ManifestWorks, WorkStatuses and (optionally) WEC namespace, told apart from
/// everything else by the run label.
struct Scenario {
    ctx: Ctx,
    hub: Client,
    works: Api<ManifestWork>,
    /// A namespace on the WEC for the delivered objects.
    namespace: String,
    /// The unique name of this run: its label value and the ManifestWorks' name prefix.
    run: String,
}

impl Scenario {
    async fn start(ctx: Ctx, what: &str) -> anyhow::Result<Scenario> {
        ensure_agent(&ctx).await?;
        let hub = ctx.client("its1").await?;
        Ok(Scenario {
            works: Api::namespaced(hub.clone(), WEC),
            hub,
            namespace: ctx.namespace(WEC).await?,
            run: unique(what),
            ctx,
        })
    }

    /// KubeStellar's labels, as the transport writes them, plus the run label.
    fn kubestellar_labels(&self) -> Value {
        json!({names::ORIGIN_WDS_LABEL: "wds1", names::ORIGIN_BINDING_LABEL: "e2e-binding", RUN_LABEL: self.run})
    }

    /// Creates or updates the ManifestWork `name` in the mailbox namespace.
    async fn deliver(&self, name: &str, labels: Value, manifests: Vec<Value>) -> anyhow::Result<ManifestWork> {
        let work = json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": name, "namespace": WEC, "labels": labels},
            "spec": {"workload": {"manifests": manifests}}
        });
        Ok(self
            .works
            .patch(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&work))
            .await?)
    }

    /// Waits until `done` holds for this run's WorkStatuses; see [`wait_work_statuses`].
    async fn wait(
        &self,
        what: &str,
        deadline: Duration,
        done: impl Fn(&[WorkStatus]) -> bool,
    ) -> anyhow::Result<Vec<WorkStatus>> {
        wait_work_statuses(
            &self.hub,
            WEC,
            &format!("{RUN_LABEL}={}", self.run),
            what,
            deadline,
            done,
        )
        .await
    }

    /// Deletes the ManifestWorks `names`, checks that their WorkStatuses go, and removes the
    /// WEC namespace.
    async fn finish(self, names: &[&str]) -> anyhow::Result<()> {
        for name in names {
            self.works.delete(name, &DeleteParams::default()).await?;
        }
        self.wait("removed with the ManifestWorks", DELIVERY, <[_]>::is_empty)
            .await?;
        self.ctx.delete_namespace(WEC, &self.namespace).await
    }
}

/// Waits, by watching the WorkStatuses with `selector` in the mailbox namespace, until `done`
/// holds for the complete set; fails after `deadline` showing what was there.
async fn wait_work_statuses(
    hub: &Client,
    mailbox: &str,
    selector: &str,
    what: &str,
    deadline: Duration,
    done: impl Fn(&[WorkStatus]) -> bool,
) -> anyhow::Result<Vec<WorkStatus>> {
    let api: Api<WorkStatus> = Api::namespaced(hub.clone(), mailbox);
    let stream = watcher(api, watcher::Config::default().labels(selector)).default_backoff();
    futures::pin_mut!(stream);
    let until = tokio::time::Instant::now() + deadline;
    let (mut current, mut listing) = (BTreeMap::new(), BTreeMap::new());
    let mut listed = false;
    loop {
        let event = match tokio::time::timeout_at(until, stream.next()).await {
            Ok(Some(event)) => event,
            Ok(None) => anyhow::bail!("the WorkStatus watch ended"),
            Err(_) => {
                let seen: Vec<String> = current.values().map(summary).collect();
                anyhow::bail!("not {what} within {deadline:?}; WorkStatuses: {seen:#?}");
            }
        };
        match event {
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(ws)) => {
                listing.insert(ws.name_any(), ws);
            }
            Ok(watcher::Event::InitDone) => {
                current = std::mem::take(&mut listing);
                listed = true;
            }
            Ok(watcher::Event::Apply(ws)) => {
                current.insert(ws.name_any(), ws);
            }
            Ok(watcher::Event::Delete(ws)) => {
                current.remove(&ws.name_any());
            }
            Err(_) => continue,
        }
        let all: Vec<WorkStatus> = current.values().cloned().collect();
        if listed && done(&all) {
            return Ok(all);
        }
    }
}

fn summary(ws: &WorkStatus) -> String {
    format!(
        "{} {:?} labels={:?} status={}",
        ws.name_any(),
        ws.spec.spec.source_ref,
        ws.labels(),
        serde_json::to_string(&ws.status).unwrap_or_default()
    )
}

fn status_field(ws: &WorkStatus, field: &str) -> i64 {
    ws.status
        .as_ref()
        .and_then(|s| s.0.get(field))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// A ManifestWork with one Deployment gets exactly one WorkStatus, which follows the WEC's
/// status as the Deployment is scaled (by updating the ManifestWork), keeps its labels in sync,
/// and goes away with the ManifestWork.
async fn deployment_status_follows_the_wec(ctx: Ctx) -> anyhow::Result<()> {
    let s = Scenario::start(ctx, "deploy").await?;
    let (run, ns) = (s.run.clone(), s.namespace.clone());
    let work = s
        .deliver(&run, s.kubestellar_labels(), vec![deployment(&ns, "web", 1, 3)])
        .await?;

    let found = s
        .wait("one WorkStatus with 1 available replica", DELIVERY, |all| {
            all.len() == 1 && status_field(&all[0], "availableReplicas") == 1
        })
        .await?;
    let ws = &found[0];
    let source = &ws.spec.spec.source_ref;
    anyhow::ensure!(
        (
            source.group.as_str(),
            source.version.as_str(),
            source.resource.as_str(),
            source.kind.as_str()
        ) == ("apps", "v1", "deployments", "Deployment")
            && source.namespace == ns
            && source.name == "web",
        "sourceRef: {source:?}"
    );
    let owner = ws.owner_references().first().cloned().context("an ownerReference")?;
    anyhow::ensure!(
        owner.kind == "ManifestWork" && owner.uid == work.uid().unwrap_or_default() && owner.controller == Some(true),
        "controller ownerReference to the ManifestWork: {owner:?}"
    );
    anyhow::ensure!(
        ws.labels().get(names::ORIGIN_WDS_LABEL).map(String::as_str) == Some("wds1"),
        "the ManifestWork's labels are copied: {:?}",
        ws.labels()
    );
    let details = ws.spec.status_details.clone().context("statusDetails")?;
    anyhow::ensure!(
        details.last_generation == 3,
        "lastGeneration from the annotation: {details:?}"
    );
    let upstream_name = format!("-appsv1-deployment-{ns}-web");
    anyhow::ensure!(
        ws.name_any().ends_with(&upstream_name),
        "upstream's name format: {}",
        ws.name_any()
    );

    // Scale to 0, then to 2, by updating the ManifestWork; time the WEC → WorkStatus hop.
    let deployments: Api<Deployment> = Api::namespaced(s.ctx.client(WEC).await?, &ns);
    for (replicas, generation) in [(0, 4), (2, 5)] {
        s.deliver(
            &run,
            s.kubestellar_labels(),
            vec![deployment(&ns, "web", replicas, generation)],
        )
        .await?;
        let on_wec = {
            let deployments = deployments.clone();
            tokio::spawn(async move {
                wait_until(
                    deployments,
                    "web",
                    "scaled on the WEC",
                    DELIVERY,
                    move |d: Option<&Deployment>| {
                        let status = d.and_then(|d| d.status.clone()).unwrap_or_default();
                        status.available_replicas.unwrap_or(0) == replicas && status.replicas.unwrap_or(0) == replicas
                    },
                )
                .await
                .map(|_| Instant::now())
            })
        };
        s.wait(&format!("reporting {replicas} replicas"), DELIVERY, |all| {
            all.len() == 1
                && status_field(&all[0], "availableReplicas") == i64::from(replicas)
                && status_field(&all[0], "replicas") == i64::from(replicas)
                && all[0]
                    .spec
                    .status_details
                    .as_ref()
                    .is_some_and(|d| d.last_generation == generation && d.last_generation_is_applied)
        })
        .await?;
        let reported = Instant::now();
        let on_wec = on_wec.await??;
        eprintln!(
            "    {replicas} replicas: WorkStatus updated {:?} after the WEC status was seen",
            reported.saturating_duration_since(on_wec)
        );
    }

    // Labels stay in sync: a ManifestWork label change and the WEC object's singleton label.
    let mut labels = s.kubestellar_labels();
    labels[names::ORIGIN_BINDING_LABEL] = json!("e2e-binding-2");
    let mut singleton = deployment(&ns, "web", 2, 5);
    singleton["metadata"]["labels"] = json!({names::SINGLETON_STATUS_LABEL: "true"});
    s.deliver(&run, labels, vec![singleton]).await?;
    let found = s
        .wait("relabelled", DELIVERY, |all| {
            all.len() == 1
                && all[0].labels().get(names::ORIGIN_BINDING_LABEL).map(String::as_str) == Some("e2e-binding-2")
                && all[0].labels().get(names::SINGLETON_STATUS_LABEL).map(String::as_str) == Some("true")
        })
        .await?;
    let version = found[0].resource_version().unwrap_or_default();

    // A new trace context on the WEC object alone writes nothing; the label removal that
    // follows it is written (with the trace context, which rides along with real changes).
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {names::TRACEPARENT_ANNOTATION: traceparent}}})),
        )
        .await?;
    // OCM's work agent merges labels (it never removes one), so the label goes on the WEC.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {names::SINGLETON_STATUS_LABEL: null}}})),
        )
        .await?;
    let api: Api<WorkStatus> = Api::namespaced(s.hub.clone(), WEC);
    let name = found[0].name_any();
    let writes = writes_after(&api, &name, &version, PROMPTLY, |ws| {
        !ws.labels().contains_key(names::SINGLETON_STATUS_LABEL)
    })
    .await?;
    // Other writes may happen meanwhile (the Deployment's status settling), but none that
    // changes nothing but the trace context.
    let contents: Vec<Value> = std::iter::once(&found[0]).chain(&writes).map(content).collect();
    anyhow::ensure!(
        contents.windows(2).all(|pair| pair[0] != pair[1]),
        "a write that changed only the trace context: {contents:#?}"
    );
    let ws = api.get(&name).await?;
    // The same trace (the span may be the agent's own, when it exports spans).
    let trace_id = traceparent.split('-').nth(1).unwrap_or_default();
    anyhow::ensure!(
        ws.annotations()
            .get(names::TRACEPARENT_ANNOTATION)
            .is_some_and(|t| t.split('-').nth(1) == Some(trace_id)),
        "the trace context rides along: {:?}",
        ws.annotations()
    );

    s.finish(&[&run]).await
}

/// The writes to `name` after resourceVersion `from` (watched from that version, so none is
/// missed), until `done` holds.
async fn writes_after(
    api: &Api<WorkStatus>,
    name: &str,
    from: &str,
    deadline: Duration,
    done: impl Fn(&WorkStatus) -> bool,
) -> anyhow::Result<Vec<WorkStatus>> {
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let stream = api.watch(&params, from).await?;
    futures::pin_mut!(stream);
    let mut writes = Vec::new();
    let until = tokio::time::Instant::now() + deadline;
    loop {
        match tokio::time::timeout_at(until, stream.next()).await {
            Ok(Some(Ok(WatchEvent::Modified(ws)))) => {
                let finished = done(&ws);
                writes.push(ws);
                if finished {
                    return Ok(writes);
                }
            }
            Ok(Some(Ok(WatchEvent::Bookmark(_)))) => {}
            Ok(Some(other)) => anyhow::bail!("unexpected while watching {name}: {other:?}"),
            Ok(None) => anyhow::bail!("the watch of {name} ended"),
            Err(_) => anyhow::bail!("{name} not as awaited within {deadline:?}"),
        }
    }
}

/// What a WorkStatus says, without metadata that is not ours to compare (trace annotations,
/// resourceVersion, managedFields).
fn content(ws: &WorkStatus) -> Value {
    json!({"labels": ws.labels(), "owners": ws.owner_references(), "spec": ws.spec, "status": ws.status})
}

fn source_names(all: &[WorkStatus]) -> Vec<String> {
    let mut names: Vec<String> = all.iter().map(|w| w.spec.spec.source_ref.name.clone()).collect();
    names.sort();
    names
}

/// Two Deployments in one ManifestWork get two WorkStatuses; removing one manifest leaves one.
async fn one_work_status_per_manifest(ctx: Ctx) -> anyhow::Result<()> {
    let s = Scenario::start(ctx, "two").await?;
    let (run, ns) = (s.run.clone(), s.namespace.clone());
    let both = vec![deployment(&ns, "one", 1, 1), deployment(&ns, "two", 1, 1)];
    s.deliver(&run, s.kubestellar_labels(), both).await?;
    s.wait("two WorkStatuses", DELIVERY, |all| source_names(all) == ["one", "two"])
        .await?;
    s.deliver(&run, s.kubestellar_labels(), vec![deployment(&ns, "two", 1, 1)])
        .await?;
    s.wait("one WorkStatus left", DELIVERY, |all| source_names(all) == ["two"])
        .await?;
    s.finish(&[&run]).await
}

fn config_map(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": namespace}, "data": {"k": "v"}})
}

/// A ManifestWork without KubeStellar labels gets no WorkStatus. The proof that the agent has
/// looked at it: a KubeStellar ManifestWork delivered after it has its WorkStatus; and the same
/// ManifestWork gets one as soon as it is labelled.
async fn foreign_manifestwork_gets_none(ctx: Ctx) -> anyhow::Result<()> {
    let s = Scenario::start(ctx, "foreign").await?;
    let (run, ns) = (s.run.clone(), s.namespace.clone());
    let foreign = format!("{run}-foreign");
    s.deliver(&foreign, json!({RUN_LABEL: run}), vec![config_map(&ns, "foreign")])
        .await?;
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(s.ctx.client(WEC).await?, &ns);
    wait_until(config_maps, "foreign", "delivered", DELIVERY, |c: Option<&_>| {
        c.is_some()
    })
    .await?;

    let witness = format!("{run}-witness");
    s.deliver(&witness, s.kubestellar_labels(), vec![config_map(&ns, "witness")])
        .await?;
    let found = s
        .wait("the witness reported", DELIVERY, |all| {
            source_names(all).contains(&"witness".into())
        })
        .await?;
    anyhow::ensure!(
        source_names(&found) == ["witness"],
        "no WorkStatus for a ManifestWork without KubeStellar labels: {:#?}",
        found.iter().map(summary).collect::<Vec<_>>()
    );

    s.deliver(&foreign, s.kubestellar_labels(), vec![config_map(&ns, "foreign")])
        .await?;
    s.wait("reported once labelled", PROMPTLY, |all| {
        source_names(all) == ["foreign", "witness"]
    })
    .await?;
    s.finish(&[&foreign, &witness]).await
}

/// A kind whose CRD is installed on the WEC after the agent started is reported: here a
/// cluster-scoped one without a status subresource, whose `.status` comes with the manifest.
async fn kind_installed_after_start_is_reported(ctx: Ctx) -> anyhow::Result<()> {
    let s = Scenario::start(ctx, "crd").await?;
    let run = s.run.clone();
    let group = format!("{run}.example.io");
    let crd_name = format!("widgets.{group}");
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {"group": group, "scope": "Cluster",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))?;
    let crds: Api<CustomResourceDefinition> = Api::all(s.ctx.client(WEC).await?);
    crds.create(&PostParams::default(), &crd).await?;
    wait_until(
        crds.clone(),
        &crd_name,
        "established",
        DELIVERY,
        conditions::is_crd_established(),
    )
    .await?;

    let widget = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                        "metadata": {"name": "gadget"}, "status": {"phase": "Ready"}});
    s.deliver(&run, s.kubestellar_labels(), vec![widget]).await?;
    let found = s
        .wait("the Widget reported", DELIVERY, |all| {
            all.len() == 1 && all[0].status.as_ref().and_then(|st| st.0.get("phase")) == Some(&json!("Ready"))
        })
        .await?;
    let source = &found[0].spec.spec.source_ref;
    anyhow::ensure!(
        source.kind == "Widget" && source.resource == "widgets" && source.group == group && source.namespace.is_empty(),
        "sourceRef of a cluster-scoped custom object: {source:?}"
    );
    anyhow::ensure!(
        found[0].name_any().contains("-widget--gadget"),
        "cluster-scoped: empty namespace in the name: {}",
        found[0].name_any()
    );
    s.finish(&[&run]).await?;
    crds.delete(&crd_name, &DeleteParams::default()).await?;
    Ok(())
}

/// A WorkStatus deleted by hand comes back promptly (an object without `.status` here).
async fn deleted_work_status_is_recreated(ctx: Ctx) -> anyhow::Result<()> {
    let s = Scenario::start(ctx, "recreate").await?;
    let (run, ns) = (s.run.clone(), s.namespace.clone());
    s.deliver(&run, s.kubestellar_labels(), vec![config_map(&ns, "settings")])
        .await?;
    let found = s.wait("reported", DELIVERY, |all| all.len() == 1).await?;
    anyhow::ensure!(found[0].status.is_none(), "no status to copy: {}", summary(&found[0]));
    let first_uid = found[0].uid().unwrap_or_default();

    let api: Api<WorkStatus> = Api::namespaced(s.hub.clone(), WEC);
    let deleted = Instant::now();
    api.delete(&found[0].name_any(), &DeleteParams::default()).await?;
    s.wait("recreated", PROMPTLY, |all| {
        all.len() == 1 && all[0].uid().unwrap_or_default() != first_uid
    })
    .await?;
    eprintln!("    recreated {:?} after the delete", deleted.elapsed());
    s.finish(&[&run]).await
}

/// 20 ManifestWorks with a Pod each, deleted and recreated back to back, end with exactly 20
/// WorkStatuses, each for the current ManifestWork; then none once they are all deleted.
async fn churn_ends_with_one_work_status_per_object(ctx: Ctx) -> anyhow::Result<()> {
    const WORKS: usize = 20;
    let s = Scenario::start(ctx, "churn").await?;
    let (run, ns) = (s.run.clone(), s.namespace.clone());
    let names: Vec<String> = (0..WORKS).map(|i| format!("{run}-{i}")).collect();
    let pod = |i: usize| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": format!("pod-{i}"), "namespace": ns},
               "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}})
    };
    for round in 0..5 {
        if round > 0 {
            // Delete all, then recreate as soon as each is gone (the work agent's finalizer
            // keeps a ManifestWork until it has removed what it delivered).
            let mut gone = Vec::new();
            for name in &names {
                let uid = s.works.get(name).await?.uid().unwrap_or_default();
                s.works.delete(name, &DeleteParams::default()).await?;
                let works = s.works.clone();
                gone.push(
                    async move { wait_until(works, name, "deleted", DELIVERY, conditions::is_deleted(&uid)).await },
                );
            }
            for result in futures::future::join_all(gone).await {
                result?;
            }
        }
        for (i, name) in names.iter().enumerate() {
            s.deliver(name, s.kubestellar_labels(), vec![pod(i)]).await?;
        }
    }
    let current: BTreeMap<String, String> = s
        .works
        .list(&kube::api::ListParams::default().labels(&format!("{RUN_LABEL}={run}")))
        .await?
        .items
        .iter()
        .map(|w| (w.name_any(), w.uid().unwrap_or_default()))
        .collect();
    anyhow::ensure!(current.len() == WORKS, "{WORKS} ManifestWorks: {current:?}");
    s.wait("one per current ManifestWork, Running", DELIVERY, |all| {
        all.len() == WORKS
            && all.iter().all(|w| {
                w.owner_references()
                    .iter()
                    .any(|o| current.get(&o.name) == Some(&o.uid))
            })
            && all.iter().all(|w| {
                w.status
                    .as_ref()
                    .is_some_and(|st| st.0.get("phase") == Some(&json!("Running")))
            })
    })
    .await?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    s.finish(&names).await
}

/// The stack's agent on cluster2 stops when it loses its Lease (here the test takes it, as
/// another replica would), and is restarted as a standby. An object removed meanwhile has its
/// WorkStatus deleted once the agent leads again; the other WorkStatus is kept.
async fn leader_restarts_and_removes_leftovers(ctx: Ctx) -> anyhow::Result<()> {
    let hub = ctx.client("its1").await?;
    let works: Api<ManifestWork> = Api::namespaced(hub.clone(), OTHER_WEC);
    let ns = ctx.namespace(OTHER_WEC).await?;
    let run = unique("restart");
    let selector = format!("{RUN_LABEL}={run}");
    let leader = ctx.stack.wait_agent_ready(OTHER_WEC, DELIVERY).await?;

    let deliver = |names: &[&str]| {
        let manifests: Vec<Value> = names.iter().map(|n| config_map(&ns, n)).collect();
        let work = json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": run, "namespace": OTHER_WEC,
                         "labels": {names::ORIGIN_WDS_LABEL: "wds1", RUN_LABEL: run}},
            "spec": {"workload": {"manifests": manifests}}
        });
        let works = works.clone();
        let run = run.clone();
        async move {
            works
                .patch(&run, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&work))
                .await
        }
    };
    deliver(&["drop", "keep"]).await?;
    let reported = wait_work_statuses(&hub, OTHER_WEC, &selector, "both reported", DELIVERY, |all| {
        source_names(all) == ["drop", "keep"]
    })
    .await?;

    let leases: Api<Lease> = Api::namespaced(ctx.client(OTHER_WEC).await?, names::AGENT_INSTALL_NAMESPACE);
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let taken = json!({"spec": {"holderIdentity": format!("ks-tests-{}", std::process::id()),
                                "leaseDurationSeconds": 3600, "acquireTime": now, "renewTime": now}});
    leases
        .patch(names::AGENT_LEASE, &PatchParams::default(), &Patch::Merge(&taken))
        .await
        .context("taking the agent's Lease")?;
    let agent = Stack::agent_process(OTHER_WEC);
    ks_tests::stack::wait_for("the agent to give up leading", DELIVERY, || async {
        Ok(ctx.stack.procs.running(&agent) != Some(leader))
    })
    .await?;

    deliver(&["keep"]).await?;
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(ctx.client(OTHER_WEC).await?, &ns);
    wait_until(
        config_maps,
        "drop",
        "removed from the WEC",
        DELIVERY,
        |c: Option<&_>| c.is_none(),
    )
    .await?;
    leases.delete(names::AGENT_LEASE, &DeleteParams::default()).await?;
    let left = wait_work_statuses(&hub, OTHER_WEC, &selector, "the leftover removed", DELIVERY, |all| {
        source_names(all) == ["keep"]
    })
    .await?;
    let kept = reported.iter().find(|w| w.spec.spec.source_ref.name == "keep");
    anyhow::ensure!(
        kept.map(|w| w.uid()) == Some(left[0].uid()),
        "the other WorkStatus is kept, not recreated"
    );

    works.delete(&run, &DeleteParams::default()).await?;
    wait_work_statuses(&hub, OTHER_WEC, &selector, "none left", DELIVERY, <[_]>::is_empty).await?;
    ctx.delete_namespace(OTHER_WEC, &ns).await
}
