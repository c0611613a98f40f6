//! The binding controller (ks-hub, run by the stack for wds1) on real apiservers: BindingPolicies
//! become Bindings listing exactly the selected objects and WECs, kept current as objects,
//! policies, WECs and CRDs change, with errors in the policy's status.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use ks_shared::api::{Binding, BindingPolicy};
use ks_shared::ocm::ManagedCluster;
use ks_tests::harness::{Ctx, apply, run, wait_until};
use ks_tests::stack::wait_for;
use ks_tests::stack_test;
use ks_tests::tools::Tools;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::conditions;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);
const HUB: &[&str] = &["hub-wds1", "apiserver-wds1"];

ks_tests::stack_main!(
    run,
    vec![
        stack_test!(selects_by_each_criterion, HUB),
        stack_test!(follows_objects_and_policy_edits, HUB, alone),
        stack_test!(follows_wecs, HUB),
        stack_test!(invalid_policy_reports_and_others_work, HUB),
        stack_test!(a_policy_tells_what_happened_in_events, HUB),
        stack_test!(too_many_objects_for_one_binding_are_reported, HUB),
        stack_test!(status_request_labels_follow_policies, HUB),
        stack_test!(crd_created_at_runtime_is_watched, HUB),
    ]
);

fn policy(name: &str, cluster_selectors: Value, downsync: Value) -> Value {
    json!({
        "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
        "metadata": {"name": name},
        "spec": {"clusterSelectors": cluster_selectors, "downsync": downsync}
    })
}

fn config_map(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

/// `(resource, namespace/name)` of every object a Binding lists, and its WECs.
fn contents(binding: &Binding) -> (BTreeSet<String>, BTreeSet<String>) {
    let w = &binding.spec.workload;
    let objects = w
        .namespace_scope
        .iter()
        .map(|o| format!("{} {}/{}", o.object.resource, o.object.namespace, o.object.name))
        .chain(
            w.cluster_scope
                .iter()
                .map(|o| format!("{} {}", o.object.resource, o.object.name)),
        )
        .collect();
    let wecs = binding.spec.destinations.iter().map(|d| d.cluster_id.clone()).collect();
    (objects, wecs)
}

/// Waits until the Binding of `policy` lists exactly `objects` and `wecs`.
async fn expect_binding(
    bindings: &Api<Binding>,
    policy: &str,
    objects: &[String],
    wecs: &[&str],
) -> anyhow::Result<()> {
    let want: (BTreeSet<String>, BTreeSet<String>) = (
        objects.iter().cloned().collect(),
        wecs.iter().map(|w| w.to_string()).collect(),
    );
    let matches = |b: Option<&Binding>| b.is_some_and(|b| contents(b) == want);
    let what = format!("listing {want:?}");
    if let Err(err) = wait_until(bindings.clone(), policy, &what, DEADLINE, matches).await {
        let now = bindings.get_opt(policy).await?.map(|b| contents(&b));
        anyhow::bail!("{err:#}; the Binding lists {now:?}");
    }
    Ok(())
}

async fn cleanup(ctx: &Ctx, policies: &Api<BindingPolicy>, names: &[&str], namespace: &str) -> anyhow::Result<()> {
    for name in names {
        policies.delete(name, &DeleteParams::default()).await?;
        wait_until(
            policies.clone(),
            name,
            "deleted (finalizer removed)",
            DEADLINE,
            |p: Option<&BindingPolicy>| p.is_none(),
        )
        .await?;
    }
    ctx.delete_namespace("wds1", namespace).await
}

async fn selects_by_each_criterion(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let cms: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    apply(&cms, config_map("web", json!({"app": "web", "tier": "front"}))).await?;
    apply(&cms, config_map("db", json!({"app": "db", "tier": "back"}))).await?;
    apply(&cms, config_map("cache", json!({"app": "cache", "tier": "back"}))).await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let bindings: Api<Binding> = Api::all(wds.clone());
    let cm = |name: &str| format!("configmaps {ns}/{name}");
    let edge = json!([{"matchLabels": {"location-group": "edge"}}]);
    let cases = [
        // objectNames within the namespace.
        (
            "names",
            json!([{"resources": ["configmaps"], "namespaces": [ns], "objectNames": ["web", "db"]}]),
            vec![cm("web"), cm("db")],
        ),
        // matchLabels are ANDed.
        (
            "and",
            json!([{"namespaces": [ns], "objectSelectors": [{"matchLabels": {"tier": "back", "app": "db"}}]}]),
            vec![cm("db")],
        ),
        // selectors are ORed.
        (
            "or-selectors",
            json!([{"namespaces": [ns], "objectSelectors": [{"matchLabels": {"app": "web"}}, {"matchLabels": {"app": "cache"}}]}]),
            vec![cm("web"), cm("cache")],
        ),
        // clauses are ORed; matchExpressions work.
        (
            "or-clauses",
            json!([
                {"namespaces": [ns], "objectSelectors": [{"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]}]},
                {"namespaces": [ns], "objectNames": ["cache"], "resources": ["configmaps"]}
            ]),
            vec![cm("web"), cm("cache")],
        ),
        // apiGroup "" with resources namespaces and objectNames selects the cluster-scoped Namespace.
        (
            "namespace-object",
            json!([{"apiGroup": "", "resources": ["namespaces"], "objectNames": [ns]}]),
            vec![format!("namespaces {ns}")],
        ),
        // a wrong apiGroup selects nothing.
        (
            "group",
            json!([{"apiGroup": "apps", "namespaces": [ns], "objectNames": ["web"]}]),
            vec![],
        ),
    ];
    let mut names = Vec::new();
    for (suffix, downsync, expected) in &cases {
        let name = format!("{ns}-{suffix}");
        apply(&policies, policy(&name, edge.clone(), downsync.clone())).await?;
        expect_binding(&bindings, &name, expected, &["cluster1", "cluster2"])
            .await
            .map_err(|e| e.context(name.clone()))?;
        names.push(name);
    }
    // namespaceSelectors read the Namespace's labels from the cache, and follow their changes.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(wds.clone());
    let team = |value: Value| json!({"metadata": {"labels": {"team": value}}});
    namespaces
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&team(json!(ns))))
        .await?;
    let by_namespace = format!("{ns}-nsselector");
    let downsync = json!([{"resources": ["configmaps"], "objectNames": ["web"], "namespaceSelectors": [{"matchLabels": {"team": ns}}]}]);
    apply(&policies, policy(&by_namespace, edge.clone(), downsync)).await?;
    expect_binding(&bindings, &by_namespace, &[cm("web")], &["cluster1", "cluster2"]).await?;
    namespaces
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&team(Value::Null)))
        .await?;
    expect_binding(&bindings, &by_namespace, &[], &["cluster1", "cluster2"]).await?;
    names.push(by_namespace);

    // The Binding belongs to its policy; the policy carries our finalizer and a Ready condition.
    let binding = bindings.get(&names[0]).await?;
    let owner = &binding.metadata.owner_references.as_ref().expect("owner")[0];
    anyhow::ensure!(owner.kind == "BindingPolicy" && owner.name == names[0] && owner.controller == Some(true));
    let p = policies.get(&names[0]).await?;
    anyhow::ensure!(
        p.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "bindingpolicy.kubestellar.io/kscontroller")
    );
    let ready = |p: Option<&BindingPolicy>| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.condition("Ready"))
            .is_some_and(|c| c.status == "True")
    };
    wait_until(policies.clone(), &names[0], "Ready", DEADLINE, ready).await?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    cleanup(&ctx, &policies, &refs, &ns).await?;
    for name in &names {
        wait_until(
            bindings.clone(),
            name,
            "garbage-collected",
            DEADLINE,
            |b: Option<&Binding>| b.is_none(),
        )
        .await?;
    }
    Ok(())
}

async fn follows_objects_and_policy_edits(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let cms: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let bindings: Api<Binding> = Api::all(wds.clone());
    let cm = |name: &str| format!("configmaps {ns}/{name}");
    let edge = json!([{"matchLabels": {"location-group": "edge"}}]);
    let web = json!([{"namespaces": [ns], "objectSelectors": [{"matchLabels": {"app": "web"}}]}]);
    let (first, second) = (format!("{ns}-a"), format!("{ns}-b"));
    apply(&policies, policy(&first, edge.clone(), web.clone())).await?;
    // A second, overlapping policy that sends the same objects to cluster1 only.
    apply(
        &policies,
        policy(&second, json!([{"matchLabels": {"name": "cluster1"}}]), web.clone()),
    )
    .await?;
    expect_binding(&bindings, &first, &[], &["cluster1", "cluster2"]).await?;

    apply(&cms, config_map("one", json!({"app": "web"}))).await?;
    apply(&cms, config_map("two", json!({"app": "web"}))).await?;
    expect_binding(&bindings, &first, &[cm("one"), cm("two")], &["cluster1", "cluster2"]).await?;
    expect_binding(&bindings, &second, &[cm("one"), cm("two")], &["cluster1"]).await?;

    // A changed object: new resourceVersion in the Binding.
    let before = bindings.get(&first).await?;
    apply(&cms, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one", "labels": {"app": "web"}}, "data": {"k": "changed"}})).await?;
    let rv = cms.get("one").await?.metadata.resource_version.unwrap_or_default();
    let has_rv = |b: Option<&Binding>| {
        b.is_some_and(|b| {
            b.spec
                .workload
                .namespace_scope
                .iter()
                .any(|o| o.object.name == "one" && o.object.resource_version == rv)
        })
    };
    wait_until(
        bindings.clone(),
        &first,
        "carrying the new resourceVersion",
        DEADLINE,
        has_rv,
    )
    .await?;
    anyhow::ensure!(before.metadata.generation < bindings.get(&first).await?.metadata.generation);

    // Relabelled and deleted objects leave.
    apply(&cms, config_map("two", json!({"app": "db"}))).await?;
    expect_binding(&bindings, &first, &[cm("one")], &["cluster1", "cluster2"]).await?;
    cms.delete("one", &DeleteParams::default()).await?;
    expect_binding(&bindings, &first, &[], &["cluster1", "cluster2"]).await?;

    // A policy edit re-evaluates against the cache.
    let db = json!([{"namespaces": [ns], "objectSelectors": [{"matchLabels": {"app": "db"}}]}]);
    apply(
        &policies,
        policy(&first, json!([{"matchLabels": {"region": "west"}}]), db),
    )
    .await?;
    expect_binding(&bindings, &first, &[cm("two")], &["cluster2"]).await?;

    // The hub restarts in the middle of a change and converges.
    ctx.stack.procs.stop("hub-wds1", Duration::from_secs(10))?;
    apply(&cms, config_map("three", json!({"app": "db"}))).await?;
    ctx.stack.up().await?;
    expect_binding(&bindings, &first, &[cm("two"), cm("three")], &["cluster2"]).await?;
    cleanup(&ctx, &policies, &[&first, &second], &ns).await
}

async fn follows_wecs(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let its = ctx.client("its1").await?;
    let ns = ctx.namespace("wds1").await?;
    let label = format!("test-{}", std::process::id());
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let bindings: Api<Binding> = Api::all(wds.clone());
    let clusters: Api<ManagedCluster> = Api::all(its.clone());
    let name = format!("{ns}-wecs");
    apply(
        &policies,
        policy(
            &name,
            json!([{"matchLabels": {&label: "yes"}}]),
            json!([{"namespaces": [ns], "objectNames": ["nothing"]}]),
        ),
    )
    .await?;
    expect_binding(&bindings, &name, &[], &[]).await?;

    let set_label = |value: Value| json!({"metadata": {"labels": {&label: value}}});
    clusters
        .patch(
            "cluster2",
            &PatchParams::default(),
            &Patch::Merge(&set_label(json!("yes"))),
        )
        .await?;
    expect_binding(&bindings, &name, &[], &["cluster2"]).await?;
    let extra = format!("extra-{}", std::process::id());
    apply(
        &clusters,
        json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": extra, "labels": {&label: "yes"}}, "spec": {"hubAcceptsClient": false}}),
    )
    .await?;
    expect_binding(&bindings, &name, &[], &["cluster2", &extra]).await?;
    clusters.delete(&extra, &DeleteParams::default()).await?;
    clusters
        .patch(
            "cluster2",
            &PatchParams::default(),
            &Patch::Merge(&set_label(Value::Null)),
        )
        .await?;
    expect_binding(&bindings, &name, &[], &[]).await?;
    cleanup(&ctx, &policies, &[&name], &ns).await
}

/// A policy selecting more objects than one Binding can hold (etcd stores at most 1.5 MiB per
/// object) is told so in its status; its Binding keeps what it listed, and once the selection
/// fits again its Binding is written.
async fn too_many_objects_for_one_binding_are_reported(ctx: Ctx) -> anyhow::Result<()> {
    use futures::{StreamExt, TryStreamExt};
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let bindings: Api<Binding> = Api::all(wds.clone());
    let cms: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    // 4,000 ConfigMaps with the longest names a Binding lists in about 1.65 MB. Created before
    // a policy selects them, so the Binding is tried once, and sent to no WEC.
    futures::stream::iter(0..4000)
        .map(|i| {
            let object = serde_json::from_value(config_map(&format!("{i:0>253}"), json!({"many": "yes"})));
            let cms = cms.clone();
            async move { anyhow::Ok(cms.create(&Default::default(), &object?).await?) }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    let name = format!("{ns}-too-much");
    let nowhere = json!([{"matchLabels": {"name": "no-such-wec"}}]);
    let first = json!([{"namespaces": [ns], "objectNames": [format!("{:0>253}", 0)]}]);
    apply(&policies, policy(&name, nowhere.clone(), first)).await?;
    let one = [format!("configmaps {ns}/{:0>253}", 0)];
    expect_binding(&bindings, &name, &one, &[]).await?;

    let all = json!([{"namespaces": [ns], "objectSelectors": [{"matchLabels": {"many": "yes"}}]}]);
    apply(&policies, policy(&name, nowhere.clone(), all)).await?;
    let too_large = |p: Option<&BindingPolicy>| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.condition("Synced"))
            .is_some_and(|c| {
                c.status == "False"
                    && c.message
                        .contains("more than the 1.50 MB an object may take: select fewer objects, or split the policy")
            })
    };
    wait_until(
        policies.clone(),
        &name,
        "the Binding too large, reported",
        DEADLINE,
        too_large,
    )
    .await?;
    // The Binding is as it was (not rewritten, not emptied).
    expect_binding(&bindings, &name, &one, &[]).await?;

    // Narrowed to another object, it is written again. (The Binding, not the status, shows it:
    // the KubeFlex-mode test runs a second binding controller on this WDS, whose status writes
    // may land in between.)
    let second = json!([{"namespaces": [ns], "objectNames": [format!("{:0>253}", 1)]}]);
    apply(&policies, policy(&name, nowhere, second)).await?;
    expect_binding(&bindings, &name, &[format!("configmaps {ns}/{:0>253}", 1)], &[]).await?;
    // The 4,000 ConfigMaps go too: left behind, they slow every later hub start on this stack.
    cleanup(&ctx, &policies, &[&name], &ns).await
}

/// What becomes of a policy shows in `kubectl describe bindingpolicy`, as Events: no WEC chosen,
/// an invalid selector, and once both are mended, its objects propagated to its WEC.
async fn a_policy_tells_what_happened_in_events(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "events")?;
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let name = format!("{ns}-told");
    apply(
        &Api::<ConfigMap>::namespaced(wds.clone(), &ns),
        config_map("told", json!({})),
    )
    .await?;
    let objects = json!([{"namespaces": [ns], "objectNames": ["told"]}]);
    let nowhere = json!([{"matchLabels": {"name": "no-such-wec"}}]);
    apply(&policies, policy(&name, nowhere, objects.clone())).await?;
    described(&tools, &name, &["Warning", "NoWECSelected", "choose no WEC"]).await?;
    let cluster1 = json!([{"matchLabels": {"name": "cluster1"}}]);
    let invalid = json!([{"namespaces": [ns], "objectSelectors": [{"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]}]}]);
    apply(&policies, policy(&name, cluster1.clone(), invalid)).await?;
    described(
        &tools,
        &name,
        &["Warning", "PolicyError", "not a valid label selector operator"],
    )
    .await?;
    apply(&policies, policy(&name, cluster1, objects)).await?;
    described(&tools, &name, &["Normal", "Resolved"]).await?;
    described(
        &tools,
        &name,
        &["Normal", "Propagated", "applied and available on all 1 WECs"],
    )
    .await?;
    policies.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// Waits until `kubectl describe bindingpolicy NAME` has an Event line holding all of `wanted`.
async fn described(tools: &Tools, name: &str, wanted: &[&str]) -> anyhow::Result<()> {
    let mut last = String::new();
    let shown = wait_for(
        &format!("kubectl describe bindingpolicy {name} to show an Event {wanted:?}"),
        DEADLINE,
        || {
            let described = tools.kubectl("wds1", &["describe", "bindingpolicy", name]);
            let found = described
                .as_ref()
                .is_ok_and(|d| d.lines().any(|l| wanted.iter().all(|w| l.contains(w))));
            last = described.unwrap_or_else(|e| format!("{e:#}"));
            std::future::ready(Ok(found))
        },
    )
    .await;
    shown.map_err(|e| anyhow::anyhow!("{e:#}; the last description:\n{last}"))
}

async fn invalid_policy_reports_and_others_work(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let bindings: Api<Binding> = Api::all(wds.clone());
    let cms: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    let (bad, good) = (format!("{ns}-bad"), format!("{ns}-good"));
    let invalid = json!([{"namespaces": [ns], "objectSelectors": [{"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]}]}]);
    apply(&policies, policy(&bad, json!([{}]), invalid)).await?;
    let reported = |p: Option<&BindingPolicy>| {
        p.and_then(|p| p.status.as_ref()).is_some_and(|s| {
            s.errors
                .iter()
                .any(|e| e.contains("\"Equals\" is not a valid label selector operator"))
                && s.condition("Ready")
                    .is_some_and(|c| c.status == "False" && c.reason == "ReconcileError")
        })
    };
    wait_until(
        policies.clone(),
        &bad,
        "reporting the invalid selector",
        DEADLINE,
        reported,
    )
    .await?;

    apply(
        &policies,
        policy(
            &good,
            json!([{"matchLabels": {"name": "cluster1"}}]),
            json!([{"namespaces": [ns], "objectNames": ["ok"]}]),
        ),
    )
    .await?;
    apply(&cms, config_map("ok", json!({}))).await?;
    expect_binding(&bindings, &good, &[format!("configmaps {ns}/ok")], &["cluster1"]).await?;

    // A StatusCollector that does not exist (yet) is an error until it is created.
    let collector = format!("{ns}-collector");
    let with_collector = json!([{"namespaces": [ns], "objectNames": ["ok"], "statusCollectors": [collector]}]);
    apply(
        &policies,
        policy(&good, json!([{"matchLabels": {"name": "cluster1"}}]), with_collector),
    )
    .await?;
    let missing = format!("names StatusCollector {collector:?}, which does not exist");
    let reports = |present: bool| {
        let missing = missing.clone();
        move |p: Option<&BindingPolicy>| {
            p.and_then(|p| p.status.as_ref())
                .is_some_and(|s| s.errors.iter().any(|e| e.contains(&missing)) == present)
        }
    };
    wait_until(
        policies.clone(),
        &good,
        "reporting the missing collector",
        DEADLINE,
        reports(true),
    )
    .await?;
    let collectors: Api<ks_shared::api::StatusCollector> = Api::all(wds.clone());
    apply(
        &collectors,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "StatusCollector",
        "metadata": {"name": collector}, "spec": {"limit": 5}}),
    )
    .await?;
    wait_until(
        policies.clone(),
        &good,
        "no longer reporting it",
        DEADLINE,
        reports(false),
    )
    .await?;
    collectors.delete(&collector, &DeleteParams::default()).await?;
    cleanup(&ctx, &policies, &[&bad, &good], &ns).await
}

/// The hub's `kubestellar_workload_informers` gauge.
fn informer_count(ctx: &Ctx) -> anyhow::Result<u64> {
    let address = ([127, 0, 0, 1], ctx.stack.hub_port("wds1")).into();
    let (_, metrics) = ks_tests::process::http_get(address, "/metrics");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubestellar_workload_informers "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no informer gauge in /metrics"))
}

async fn crd_created_at_runtime_is_watched(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let group = format!("g{}.example.com", std::process::id());
    let baseline = informer_count(&ctx)?;
    let crds: Api<CustomResourceDefinition> = Api::all(wds.clone());
    let crd_name = format!("widgets.{group}");
    apply(&crds, json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    })).await?;
    wait_until(
        crds.clone(),
        &crd_name,
        "established",
        DEADLINE,
        conditions::is_crd_established(),
    )
    .await?;

    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let bindings: Api<Binding> = Api::all(wds.clone());
    let name = format!("{ns}-widgets");
    apply(
        &policies,
        policy(
            &name,
            json!([{"matchLabels": {"name": "cluster2"}}]),
            json!([{"apiGroup": group, "namespaces": [ns]}]),
        ),
    )
    .await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        wds.clone(),
        &ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(&group, "v1", "Widget")),
    );
    apply(
        &widgets,
        json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 1}}),
    )
    .await?;
    expect_binding(&bindings, &name, &[format!("widgets {ns}/w1")], &["cluster2"]).await?;
    anyhow::ensure!(
        informer_count(&ctx)? == baseline + 1,
        "one more informer for the new CRD"
    );

    crds.delete(&crd_name, &DeleteParams::default()).await?;
    expect_binding(&bindings, &name, &[], &["cluster2"]).await?;
    ks_tests::stack::wait_for("the informer count to return to its baseline", DEADLINE, || async {
        Ok(informer_count(&ctx)? == baseline)
    })
    .await?;
    cleanup(&ctx, &policies, &[&name], &ns).await
}

async fn status_request_labels_follow_policies(ctx: Ctx) -> anyhow::Result<()> {
    const SINGLETON: &str = "managed-by.kubestellar.io/singletonstatus";
    const MULTI: &str = "managed-by.kubestellar.io/multiwecstatus";
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let cms: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    apply(&cms, config_map("single", json!({"app": "single"}))).await?;
    apply(&cms, config_map("multi", json!({"app": "multi"}))).await?;
    // Someone else's label: never removed by us.
    apply(&cms, config_map("user", json!({"app": "user", SINGLETON: "true"}))).await?;
    let name = format!("{ns}-labels");
    let clauses = |want: bool| {
        json!([
            {"namespaces": [ns], "objectSelectors": [{"matchLabels": {"app": "single"}}], "wantSingletonReportedState": want},
            {"namespaces": [ns], "objectSelectors": [{"matchLabels": {"app": "multi"}}], "wantMultiWECReportedState": want},
            {"namespaces": [ns], "objectSelectors": [{"matchLabels": {"app": "user"}}]}
        ])
    };
    apply(
        &policies,
        policy(&name, json!([{"matchLabels": {"name": "cluster1"}}]), clauses(true)),
    )
    .await?;
    let labelled = |key: &'static str, present: bool| {
        move |c: Option<&ConfigMap>| {
            c.is_some_and(|c| c.metadata.labels.iter().flatten().any(|(k, v)| k == key && v == "true") == present)
        }
    };
    wait_until(
        cms.clone(),
        "single",
        "labelled singletonstatus",
        DEADLINE,
        labelled(SINGLETON, true),
    )
    .await?;
    wait_until(
        cms.clone(),
        "multi",
        "labelled multiwecstatus",
        DEADLINE,
        labelled(MULTI, true),
    )
    .await?;
    anyhow::ensure!(
        !cms.get("multi")
            .await?
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(SINGLETON)
    );

    apply(
        &policies,
        policy(&name, json!([{"matchLabels": {"name": "cluster1"}}]), clauses(false)),
    )
    .await?;
    wait_until(
        cms.clone(),
        "single",
        "unlabelled",
        DEADLINE,
        labelled(SINGLETON, false),
    )
    .await?;
    wait_until(cms.clone(), "multi", "unlabelled", DEADLINE, labelled(MULTI, false)).await?;
    anyhow::ensure!(
        cms.get("user")
            .await?
            .metadata
            .labels
            .unwrap_or_default()
            .get(SINGLETON)
            .map(String::as_str)
            == Some("true"),
        "a label set by someone else stays"
    );
    cleanup(&ctx, &policies, &[&name], &ns).await
}
