//! The transport controller (in ks-hub, run by the stack for wds1) through the real OCM work
//! agent: selected objects reach the WECs transformed, follow updates, respect createOnly and
//! CustomTransforms, move when a policy is retargeted, and leave when the policy goes.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use ks_shared::api::{BindingPolicy, CustomTransform};
use ks_tests::harness::{Ctx, apply, run, wait_until};
use ks_tests::stack_test;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::wait::conditions;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(90);
const PATH: &[&str] = &["hub-wds1", "ocm-agent-cluster1", "ocm-agent-cluster2"];

fn main() -> std::process::ExitCode {
    let ks_stack = std::path::Path::new(env!("CARGO_BIN_EXE_ks-stack"));
    run(
        ks_stack.parent().expect("binaries live in a directory"),
        vec![
            stack_test!(objects_reach_wecs_follow_updates_and_leave, PATH),
            stack_test!(create_only_and_custom_transforms, PATH),
        ],
    )
}

/// Labels a WDS namespace so that the test's policy selects it with its objects.
async fn label_namespace(wds: &kube::Client, ns: &str, labels: &Value) -> anyhow::Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(wds.clone());
    let patch = json!({"metadata": {"labels": labels}});
    namespaces
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn deployment(replicas: i32, labels: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": labels},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
}

fn policy(name: &str, clusters: Value, downsync: Value) -> Value {
    json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": name},
           "spec": {"clusterSelectors": clusters, "downsync": downsync}})
}

fn replicas_are(n: i32) -> impl Fn(Option<&Deployment>) -> bool {
    move |d| d.and_then(|d| d.spec.as_ref()).and_then(|s| s.replicas) == Some(n)
}

async fn objects_reach_wecs_follow_updates_and_leave(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": ns});
    label_namespace(&wds, &ns, &selector).await?;
    apply(
        &Api::<Deployment>::namespaced(wds.clone(), &ns),
        deployment(1, selector.clone()),
    )
    .await?;
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "labels": selector},
                         "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80}]}});
    apply(&Api::<Service>::namespaced(wds.clone(), &ns), service).await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let name = format!("{ns}-edge");
    apply(
        &policies,
        policy(
            &name,
            json!([{"matchLabels": {"location-group": "edge"}}]),
            json!([{"objectSelectors": [{"matchLabels": selector}]}]),
        ),
    )
    .await?;

    for wec in ["cluster1", "cluster2"] {
        let client = ctx.client(wec).await?;
        let available =
            |d: Option<&Deployment>| d.and_then(|d| d.status.as_ref()).and_then(|s| s.available_replicas) == Some(1);
        wait_until(
            Api::<Deployment>::namespaced(client.clone(), &ns),
            "web",
            "available",
            DEADLINE,
            available,
        )
        .await?;
        // The NodePort Service was accepted after its cluster-assigned fields were dropped.
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        wait_until(services, "web", "present", DEADLINE, |s: Option<&Service>| s.is_some()).await?;
    }

    // An update in the WDS reaches both WECs.
    apply(
        &Api::<Deployment>::namespaced(wds.clone(), &ns),
        deployment(2, selector.clone()),
    )
    .await?;
    for wec in ["cluster1", "cluster2"] {
        let deployments = Api::<Deployment>::namespaced(ctx.client(wec).await?, &ns);
        wait_until(deployments, "web", "scaled to 2", DEADLINE, replicas_are(2)).await?;
    }

    // Retargeting moves the objects: cluster2 only.
    apply(
        &policies,
        policy(
            &name,
            json!([{"matchLabels": {"name": "cluster2"}}]),
            json!([{"objectSelectors": [{"matchLabels": selector}]}]),
        ),
    )
    .await?;
    let on_cluster1 = Api::<Deployment>::namespaced(ctx.client("cluster1").await?, &ns);
    let uid = on_cluster1.get("web").await?.metadata.uid.unwrap_or_default();
    wait_until(
        on_cluster1,
        "web",
        "removed from cluster1",
        DEADLINE,
        conditions::is_deleted(&uid),
    )
    .await?;

    // Deleting the policy removes everything from the WECs.
    policies.delete(&name, &DeleteParams::default()).await?;
    let on_cluster2 = Api::<Deployment>::namespaced(ctx.client("cluster2").await?, &ns);
    let uid = on_cluster2.get("web").await?.metadata.uid.unwrap_or_default();
    wait_until(
        on_cluster2,
        "web",
        "removed from cluster2",
        DEADLINE,
        conditions::is_deleted(&uid),
    )
    .await?;
    ctx.delete_namespace("wds1", &ns).await
}

async fn create_only_and_custom_transforms(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": ns});
    label_namespace(&wds, &ns, &selector).await?;
    // A label key of this run only: CustomTransforms apply to every Deployment in the WDS.
    let owner = format!("owner-{}", std::process::id());
    let mut labels = selector.clone();
    labels[owner.as_str()] = json!("team-a");
    let wds_deployments = Api::<Deployment>::namespaced(wds.clone(), &ns);
    apply(&wds_deployments, deployment(1, labels.clone())).await?;

    // The CustomTransform drops the `owner` label on delivery.
    let transforms: Api<CustomTransform> = Api::all(wds.clone());
    let transform = format!("{ns}-drop-owner");
    apply(
        &transforms,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "CustomTransform",
        "metadata": {"name": transform}, "spec": {"apiGroup": "apps", "resource": "deployments",
        "remove": [format!("$.metadata.labels[\"{owner}\"]")]}}),
    )
    .await?;

    // A second one for the same group/resource with a bad path: both are reported.
    let bad = format!("{ns}-bad");
    apply(
        &transforms,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "CustomTransform",
        "metadata": {"name": bad}, "spec": {"apiGroup": "apps", "resource": "deployments", "remove": ["spec"]}}),
    )
    .await?;
    let reported = |t: Option<&CustomTransform>| {
        t.and_then(|t| t.status.as_ref()).is_some_and(|s| {
            s.errors.iter().any(|e| e.starts_with("Error in spec.remove[0]"))
                && s.warnings
                    .iter()
                    .any(|w| w.contains("multiple CustomTransform objects specify the same GroupResource"))
        })
    };
    wait_until(
        transforms.clone(),
        &bad,
        "reporting its error and the shared GroupResource",
        DEADLINE,
        reported,
    )
    .await?;
    transforms.delete(&bad, &DeleteParams::default()).await?;

    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let name = format!("{ns}-create-only");
    let downsync = json!([{"objectSelectors": [{"matchLabels": selector}], "createOnly": true}]);
    apply(
        &policies,
        policy(&name, json!([{"matchLabels": {"name": "cluster1"}}]), downsync),
    )
    .await?;

    let wec = Api::<Deployment>::namespaced(ctx.client("cluster1").await?, &ns);
    let without_owner =
        |d: Option<&Deployment>| d.is_some_and(|d| !d.metadata.labels.as_ref().is_some_and(|l| l.contains_key(&owner)));
    let first = wait_until(
        wec.clone(),
        "web",
        "delivered without the owner label",
        DEADLINE,
        without_owner,
    )
    .await?;
    let uid = first.and_then(|d| d.metadata.uid).unwrap_or_default();

    // createOnly: a WDS update does not change the WEC object.
    apply(&wds_deployments, deployment(3, labels.clone())).await?;
    let binding_caught_up = |b: Option<&ks_shared::api::Binding>| {
        b.and_then(|b| b.status.as_ref())
            .is_some_and(|s| s.observed_generation == b.unwrap().metadata.generation.unwrap_or(0))
    };
    let bindings: Api<ks_shared::api::Binding> = Api::all(wds.clone());
    wait_until(
        bindings,
        &name,
        "processed by the transport",
        DEADLINE,
        binding_caught_up,
    )
    .await?;
    let after = wec.get("web").await?;
    anyhow::ensure!(
        after.metadata.uid.as_deref() == Some(uid.as_str()),
        "the WEC object was not re-created"
    );
    anyhow::ensure!(
        after.spec.and_then(|s| s.replicas) == Some(1),
        "createOnly: the WDS update did not reach the WEC"
    );

    // Editing the CustomTransform re-renders without touching the workload: now `owner` stays
    // and the other label goes; with createOnly the WEC keeps its object, so switch it off.
    apply(
        &policies,
        policy(
            &name,
            json!([{"matchLabels": {"name": "cluster1"}}]),
            json!([{"objectSelectors": [{"matchLabels": selector}]}]),
        ),
    )
    .await?;
    apply(
        &transforms,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "CustomTransform",
        "metadata": {"name": transform}, "spec": {"apiGroup": "apps", "resource": "deployments",
        "remove": ["$.spec.template.metadata.labels[\"unused\"]"]}}),
    )
    .await?;
    let with_owner = |d: Option<&Deployment>| {
        d.is_some_and(|d| {
            d.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.get(&owner).map(String::as_str) == Some("team-a"))
        })
    };
    wait_until(
        wec.clone(),
        "web",
        "carrying the owner label again",
        DEADLINE,
        with_owner,
    )
    .await?;
    wait_until(wec, "web", "scaled to 3", DEADLINE, replicas_are(3)).await?;

    policies.delete(&name, &DeleteParams::default()).await?;
    transforms.delete(&transform, &DeleteParams::default()).await?;
    ctx.delete_namespace("wds1", &ns).await
}
