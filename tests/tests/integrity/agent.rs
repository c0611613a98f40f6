//! The status agent reports every object a WEC holds, for every KubeStellar ManifestWork: one
//! manifest the WEC cannot apply does not hide its neighbours, and a ManifestWork that does not
//! name its API groups (as upstream's transport and ocm-status-addon's own tests write them)
//! still gets them granted to the agent. And the status add-on takes nothing of the WEC's with it.
//!
//! The ManifestWorks are written straight into cluster1's mailbox on its1, as an external
//! transport would; the agent is the one the stack's status add-on installed on cluster1.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use ks_shared::api::WorkStatus;
use ks_shared::names;
use ks_shared::ocm::ManifestWork;
use ks_tests::harness::{Ctx, StackTest, apply, wait_until};
use ks_tests::stack_test;
use kube::api::{Api, DeleteParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::wait::conditions;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const WEC: &str = "cluster1";
/// Deliveries go through the OCM work agent; a grant also through the add-on's ManifestWork.
const DELIVERY: Duration = Duration::from_secs(90);
/// OCM retries a failed ManifestWork with a growing pause.
const RETRIED: Duration = Duration::from_secs(180);
/// The label on this module's ManifestWorks, copied to their WorkStatuses.
const RUN_LABEL: &str = "integrity.kubestellar.io/run";
/// The agent's ClusterRole on the WEC, which the add-on keeps.
const AGENT_CLUSTER_ROLE: &str = "open-cluster-management:addon-status:agent";
const AGENT: &[&str] = &[
    "pod-cluster1-open-cluster-management-agent-addon-status-agent",
    "ocm-agent-cluster1",
    ks_tests::stack::ADDON_PROCESS,
];

pub fn tests() -> Vec<StackTest> {
    vec![
        stack_test!(one_unappliable_manifest_hides_no_other_object, AGENT),
        stack_test!(unannotated_manifest_works_get_their_kinds_granted, AGENT),
        stack_test!(the_shared_addon_namespace_outlives_the_addon, AGENT),
    ]
}

/// This test's ManifestWorks and CRDs, removed whatever the test's outcome.
struct Scenario {
    ctx: Ctx,
    hub: Client,
    works: Api<ManifestWork>,
    crds: Api<CustomResourceDefinition>,
    /// Unique to this test: the run label's value, the prefix of every name it gives.
    run: String,
    made_works: Vec<String>,
    made_crds: Vec<String>,
    /// Namespaces made on the WEC.
    made_namespaces: Vec<String>,
}

impl Scenario {
    async fn start(ctx: Ctx, what: &str) -> anyhow::Result<Scenario> {
        ctx.stack.wait_agent_ready(WEC, DELIVERY).await?;
        let hub = ctx.client("its1").await?;
        Ok(Scenario {
            works: Api::namespaced(hub.clone(), WEC),
            crds: Api::all(ctx.client(WEC).await?),
            hub,
            run: ctx.unique_name(what),
            ctx,
            made_works: Vec::new(),
            made_crds: Vec::new(),
            made_namespaces: Vec::new(),
        })
    }

    /// A custom resource's group unique to this test, `<suffix>.<run>.example.io`.
    fn group(&self, suffix: &str) -> String {
        format!("{suffix}.{}.example.io", self.run)
    }

    /// Applies the ManifestWork `name` (this test's, so labelled with the run) to the mailbox.
    async fn deliver(
        &mut self,
        name: &str,
        labels: Value,
        annotations: Value,
        manifests: Vec<Value>,
    ) -> anyhow::Result<()> {
        let mut labels = labels;
        labels[RUN_LABEL] = json!(self.run);
        let work = json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {"workload": {"manifests": manifests}}
        });
        self.made_works.push(name.to_string());
        apply(&self.works, work).await?;
        Ok(())
    }

    /// Installs on the WEC a CRD of namespaced `Widget`s in `group`, and waits until it serves.
    async fn install_widgets(&mut self, group: &str) -> anyhow::Result<()> {
        let name = format!("widgets.{group}");
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": true}}}]}
        });
        self.made_crds.push(name.clone());
        apply(&self.crds, crd).await?;
        let established = conditions::is_crd_established();
        wait_until(self.crds.clone(), &name, "established", DELIVERY, established).await?;
        Ok(())
    }

    /// Waits until `done` holds for this test's WorkStatuses in the mailbox, each summed up as
    /// `Kind/name`; fails after `deadline` showing them.
    async fn wait_reported(
        &self,
        what: &str,
        deadline: Duration,
        done: impl Fn(&[String]) -> bool,
    ) -> anyhow::Result<()> {
        let api: Api<WorkStatus> = Api::namespaced(self.hub.clone(), WEC);
        let (store, writer) = reflector::store();
        let selector = format!("{RUN_LABEL}={}", self.run);
        let events = watcher(api, watcher::Config::default().labels(&selector))
            .default_backoff()
            .reflect(writer);
        futures::pin_mut!(events);
        let reported = |store: &Store<WorkStatus>| {
            let mut all: Vec<String> = store
                .state()
                .iter()
                .map(|ws| format!("{}/{}", ws.spec.spec.source_ref.kind, ws.spec.spec.source_ref.name))
                .collect();
            all.sort();
            all
        };
        let until = tokio::time::Instant::now() + deadline;
        let mut listed = false;
        loop {
            match tokio::time::timeout_at(until, events.next()).await {
                Ok(Some(Ok(watcher::Event::InitDone))) => listed = true,
                Ok(Some(_)) => {}
                Ok(None) => anyhow::bail!("the WorkStatus watch ended"),
                Err(_) => anyhow::bail!("not {what} within {deadline:?}; WorkStatuses: {:?}", reported(&store)),
            }
            if listed && done(&reported(&store)) {
                return Ok(());
            }
        }
    }

    /// Deletes what the test made (its ManifestWorks first: OCM then removes what they
    /// delivered), and checks that their WorkStatuses went with them.
    async fn finish(self, outcome: anyhow::Result<()>) -> anyhow::Result<()> {
        fn gone<T>(result: kube::Result<T>) -> kube::Result<()> {
            match result {
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                other => other.map(|_| ()),
            }
        }
        for name in &self.made_works {
            gone(self.works.delete(name, &DeleteParams::default()).await)?;
        }
        let cleaned = self
            .wait_reported("removed with the ManifestWorks", DELIVERY, <[_]>::is_empty)
            .await;
        for name in &self.made_crds {
            gone(self.crds.delete(name, &DeleteParams::default()).await)?;
        }
        for name in &self.made_namespaces {
            self.ctx.delete_namespace(WEC, name).await?;
        }
        outcome.and(cleaned)
    }
}

fn widget(group: &str, namespace: &str, name: &str) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
           "metadata": {"name": name, "namespace": namespace}, "spec": {"size": 1}})
}

/// KubeStellar's labels as our transport (and upstream's) writes them.
fn transport_labels() -> Value {
    json!({names::ORIGIN_WDS_LABEL: "wds1", names::ORIGIN_BINDING_LABEL: "integrity"})
}

/// A Namespace, a ConfigMap in it and a Widget whose CRD cluster1 lacks, in one ManifestWork:
/// OCM applies the first two and fails the Widget, and leaves its AppliedManifestWork's list of
/// applied resources empty. The Namespace and ConfigMap are reported all the same; once the CRD
/// is installed the Widget is too, each object once.
async fn one_unappliable_manifest_hides_no_other_object(ctx: Ctx) -> anyhow::Result<()> {
    let mut s = Scenario::start(ctx, "unappliable").await?;
    let outcome = unappliable(&mut s).await;
    s.finish(outcome).await
}

async fn unappliable(s: &mut Scenario) -> anyhow::Result<()> {
    let (run, group) = (s.run.clone(), s.group("late"));
    let manifests = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": run}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": run},
               "data": {"k": "v"}}),
        widget(&group, &run, "gadget"),
    ];
    // As our transport writes them: with the API groups annotation.
    let annotations = json!({names::API_GROUPS_ANNOTATION: group});
    s.deliver(&run, transport_labels(), annotations, manifests).await?;
    let failed = |w: Option<&ManifestWork>| {
        let manifests = w.and_then(|w| w.status.as_ref()).map(|s| &s.resource_status.manifests);
        let applied = |kind: &str, status: &str| {
            manifests.into_iter().flatten().any(|m| {
                m.resource_meta.kind == kind && m.conditions.iter().any(|c| c.type_ == "Applied" && c.status == status)
            })
        };
        applied("ConfigMap", "True") && applied("Namespace", "True") && applied("Widget", "False")
    };
    let what = "applied but for the Widget";
    wait_until(s.works.clone(), &run, what, DELIVERY, failed).await?;

    let (namespace, config_map) = (format!("Namespace/{run}"), "ConfigMap/cm".to_string());
    let neighbours = [config_map.clone(), namespace.clone()];
    s.wait_reported("the ConfigMap and Namespace reported", DELIVERY, |all| {
        all == neighbours
    })
    .await?;

    s.install_widgets(&group).await?;
    let all = [config_map, namespace, "Widget/gadget".to_string()];
    s.wait_reported("each of the three reported once", RETRIED, |reported| reported == all)
        .await
}

/// ManifestWorks without our API groups annotation, each delivering a Widget whose CRD is on
/// cluster1: one labelled as upstream's transport labels them, one as ocm-status-addon's e2e
/// scenario does (`managed-by.kubestellar.io/something`). The agent's ClusterRole gains both
/// groups and both Widgets are reported.
async fn unannotated_manifest_works_get_their_kinds_granted(ctx: Ctx) -> anyhow::Result<()> {
    let mut s = Scenario::start(ctx, "unannotated").await?;
    let outcome = unannotated(&mut s).await;
    s.finish(outcome).await
}

async fn unannotated(s: &mut Scenario) -> anyhow::Result<()> {
    let namespace = s.ctx.namespace(WEC).await?;
    s.made_namespaces.push(namespace.clone());
    let styles = [
        ("transport", transport_labels()),
        ("legacy", json!({"managed-by.kubestellar.io/something": "true"})),
    ];
    let mut groups = Vec::new();
    for (style, labels) in styles {
        let group = s.group(style);
        s.install_widgets(&group).await?;
        let name = format!("{}-{style}", s.run);
        s.deliver(&name, labels, json!({}), vec![widget(&group, &namespace, style)])
            .await?;
        groups.push(group);
    }
    let roles: Api<ClusterRole> = Api::all(s.ctx.client(WEC).await?);
    let granted = |role: Option<&ClusterRole>| {
        let rules = role.and_then(|r| r.rules.as_ref());
        let grants = |group: &String| {
            rules
                .into_iter()
                .flatten()
                .any(|r| r.api_groups.iter().flatten().any(|g| g == group))
        };
        groups.iter().all(grants)
    };
    let what = format!("granted {groups:?}");
    wait_until(roles, AGENT_CLUSTER_ROLE, &what, DELIVERY, granted).await?;
    let both = ["Widget/legacy".to_string(), "Widget/transport".to_string()];
    s.wait_reported("both Widgets reported", DELIVERY, |all| all == both)
        .await
}

/// The agent's Namespace on cluster1 is OCM's `open-cluster-management-agent-addon`, which every
/// add-on's agent shares: the add-on's delivery must not own it, or disabling the add-on (or
/// moving it to another namespace) makes OCM's work agent delete it with every other add-on in it.
async fn the_shared_addon_namespace_outlives_the_addon(ctx: Ctx) -> anyhow::Result<()> {
    ctx.stack.wait_agent_ready(WEC, DELIVERY).await?;
    let namespaces: Api<Namespace> = Api::all(ctx.client(WEC).await?);
    let delivery = format!("-{}", names::STATUS_ADDON_MANIFESTWORK);
    let owners = |ns: &Namespace| -> Vec<String> {
        let applied = ns.owner_references().iter().filter(|o| o.kind == "AppliedManifestWork");
        applied
            .filter(|o| o.name.ends_with(&delivery))
            .map(|o| o.name.clone())
            .collect()
    };
    let unowned = |ns: Option<&Namespace>| ns.is_some_and(|ns| owners(ns).is_empty());
    let what = "left unowned by the add-on's AppliedManifestWork";
    if let Err(err) = wait_until(
        namespaces.clone(),
        names::AGENT_INSTALL_NAMESPACE,
        what,
        DELIVERY,
        unowned,
    )
    .await
    {
        let owned_by = owners(&namespaces.get(names::AGENT_INSTALL_NAMESPACE).await?);
        anyhow::bail!("{err}: OCM deletes it with the add-on's delivery, owned by {owned_by:?}");
    }
    Ok(())
}
