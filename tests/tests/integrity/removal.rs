//! What the WDS removes goes from the WEC copy, and what others write on the WEC stays (defect
//! 6): OCM's default update kept every label and annotation it once wrote, and replaced a Job's
//! spec without the selector the WEC had assigned, which the WEC refused, so no change of a Job
//! ever arrived. A copy OCM first wrote in place (created for a createOnly policy, or by an
//! earlier hub) is not server-side applied later: that create's fields stay its own, and an apply
//! merged a changed port into the old one.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use ks_shared::api::BindingPolicy;
use ks_shared::ocm::ManifestWork;
use ks_tests::harness::{Ctx, StackTest, apply, wait_until};
use ks_tests::stack_test;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);
const COMPONENTS: &[&str] = &["hub-wds1", "apiserver-wds1", "ocm-agent-cluster1"];

pub fn tests() -> Vec<StackTest> {
    vec![
        stack_test!(removed_metadata_goes_and_the_wecs_own_stays, COMPONENTS),
        stack_test!(a_jobs_update_reaches_the_wec, COMPONENTS),
        stack_test!(a_new_port_replaces_the_one_created_create_only, COMPONENTS),
        stack_test!(a_create_only_policy_beside_leaves_removal_as_it_was, COMPONENTS),
    ]
}

/// A namespace of wds1 labelled to go to cluster1 with the policy it names; its selector.
async fn sent_namespace(ctx: &Ctx) -> anyhow::Result<(String, Value)> {
    let (ns, selector) = ctx.selected_namespace("wds1").await?;
    send(ctx, &ns, &selector, false).await?;
    Ok((ns, selector))
}

/// Applies the policy `name` sending what `selector` selects to cluster1.
async fn send(ctx: &Ctx, name: &str, selector: &Value, create_only: bool) -> anyhow::Result<()> {
    apply(
        &Api::<BindingPolicy>::all(ctx.client("wds1").await?),
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
               "metadata": {"name": name},
               "spec": {"clusterSelectors": [{"matchLabels": {"name": "cluster1"}}],
                        "downsync": [{"objectSelectors": [{"matchLabels": selector}],
                                      "createOnly": create_only}]}}),
    )
    .await?;
    Ok(())
}

async fn withdraw(wds: &Client, ns: &str) -> anyhow::Result<()> {
    Api::<BindingPolicy>::all(wds.clone())
        .delete(ns, &DeleteParams::default())
        .await?;
    Ok(())
}

fn merged(a: &Value, b: Value) -> Value {
    let mut out = a.clone();
    if let (Some(out), Value::Object(b)) = (out.as_object_mut(), b) {
        out.extend(b);
    }
    out
}

fn has(map: Option<&BTreeMap<String, String>>, key: &str) -> bool {
    map.is_some_and(|m| m.contains_key(key))
}

async fn removed_metadata_goes_and_the_wecs_own_stays(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let (ns, selector) = sent_namespace(&ctx).await?;
    let config_map = |labels: Value, annotations: Value, data: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "labels": merged(&selector, labels), "annotations": annotations},
               "data": data})
    };
    let in_wds: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    apply(
        &in_wds,
        config_map(
            json!({"keep": "k", "drop": "d"}),
            json!({"note-keep": "1", "note-drop": "2"}),
            json!({"k": "v", "gone": "g"}),
        ),
    )
    .await?;
    let on_wec: Api<ConfigMap> = Api::namespaced(ctx.client("cluster1").await?, &ns);
    let labelled = |c: Option<&ConfigMap>| c.is_some_and(|c| has(c.meta().labels.as_ref(), "drop"));
    wait_until(on_wec.clone(), "cm", "delivered", DEADLINE, labelled).await?;
    // Someone on the WEC adds their own label and annotation.
    let theirs = json!({"metadata": {"labels": {"wec-own": "w"}, "annotations": {"wec-note": "n"}}});
    on_wec
        .patch("cm", &PatchParams::default(), &Patch::Merge(&theirs))
        .await?;

    apply(
        &in_wds,
        config_map(json!({"keep": "k"}), json!({"note-keep": "1"}), json!({"k": "v"})),
    )
    .await?;
    let removed = |c: Option<&ConfigMap>| {
        c.is_some_and(|c| {
            !has(c.meta().labels.as_ref(), "drop")
                && !has(c.meta().annotations.as_ref(), "note-drop")
                && !has(c.data.as_ref(), "gone")
        })
    };
    let copy = wait_until(on_wec, "cm", "without what the WDS removed", DEADLINE, removed)
        .await?
        .ok_or_else(|| anyhow::anyhow!("cm is gone from cluster1"))?;
    let (labels, annotations) = (copy.meta().labels.as_ref(), copy.meta().annotations.as_ref());
    for (map, key) in [
        (labels, "keep"),
        (labels, "wec-own"),
        (annotations, "note-keep"),
        (annotations, "wec-note"),
    ] {
        anyhow::ensure!(
            has(map, key),
            "{key} went from cluster1's copy: {labels:?} {annotations:?}"
        );
    }
    withdraw(&wds, &ns).await
}

async fn a_jobs_update_reaches_the_wec(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let (ns, selector) = sent_namespace(&ctx).await?;
    let job = |parallelism: i32, version: &str| {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "job", "labels": merged(&selector, json!({"version": version}))},
               "spec": {"suspend": true, "parallelism": parallelism,
                        "template": {"spec": {"restartPolicy": "Never",
                                              "containers": [{"name": "c", "image": "busybox"}]}}}})
    };
    let in_wds: Api<Job> = Api::namespaced(wds.clone(), &ns);
    apply(&in_wds, job(1, "1")).await?;
    let on_wec: Api<Job> = Api::namespaced(ctx.client("cluster1").await?, &ns);
    let at = |parallelism: i32, version: &'static str| {
        move |j: Option<&Job>| {
            j.is_some_and(|j| {
                j.spec.as_ref().and_then(|s| s.parallelism) == Some(parallelism)
                    && j.meta()
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("version"))
                        .map(String::as_str)
                        == Some(version)
            })
        }
    };
    wait_until(on_wec.clone(), "job", "delivered", DEADLINE, at(1, "1")).await?;
    apply(&in_wds, job(2, "2")).await?;
    wait_until(on_wec, "job", "updated", DEADLINE, at(2, "2")).await?;
    withdraw(&wds, &ns).await
}

/// A Service created on cluster1 for a createOnly policy; the policy then sends updates, and the
/// Service's port changes: cluster1's copy must have the new port alone (a server-side apply
/// over that create kept the old port beside it, or was refused for two unnamed ports).
async fn a_new_port_replaces_the_one_created_create_only(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let (ns, selector) = ctx.selected_namespace("wds1").await?;
    send(&ctx, &ns, &selector, true).await?;
    let service = |port: i32, name: &str| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "svc", "labels": selector},
               "spec": {"selector": {"app": "web"}, "ports": [{"name": name, "port": port}]}})
    };
    let in_wds: Api<Service> = Api::namespaced(wds.clone(), &ns);
    apply(&in_wds, service(80, "http")).await?;
    let on_wec: Api<Service> = Api::namespaced(ctx.client("cluster1").await?, &ns);
    let ports = |s: &Service| -> Vec<(i32, Option<String>)> {
        let ports = s.spec.as_ref().and_then(|s| s.ports.as_ref());
        ports.into_iter().flatten().map(|p| (p.port, p.name.clone())).collect()
    };
    wait_until(on_wec.clone(), "svc", "delivered", DEADLINE, |s: Option<&Service>| {
        s.is_some()
    })
    .await?;
    send(&ctx, &ns, &selector, false).await?;
    apply(&in_wds, service(8080, "web")).await?;
    let changed = |s: Option<&Service>| s.is_some_and(|s| ports(s).iter().any(|(port, _)| *port == 8080));
    let copy = wait_until(on_wec, "svc", "with the new port", DEADLINE, changed)
        .await?
        .ok_or_else(|| anyhow::anyhow!("svc is gone from cluster1"))?;
    anyhow::ensure!(
        ports(&copy) == [(8080, Some("web".to_string()))],
        "cluster1's copy has the ports {:?}",
        ports(&copy)
    );
    withdraw(&wds, &ns).await
}

/// A ConfigMap applied server-side on cluster1 for one policy; a second policy sends it
/// createOnly too (it creates nothing: the copy is there). A label the WDS then removes must go
/// from the copy: the copy was created server-side, so it stays applied so (taking the second
/// policy's createOnly option for a create in place wrote it in place from then on, and kept
/// the label; found by the generated test, seed 1947195147).
async fn a_create_only_policy_beside_leaves_removal_as_it_was(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let (ns, selector) = sent_namespace(&ctx).await?;
    let config_map = |labels: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "labels": merged(&selector, labels)}, "data": {"k": "v"}})
    };
    let in_wds: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    apply(&in_wds, config_map(json!({"drop": "d"}))).await?;
    let on_wec: Api<ConfigMap> = Api::namespaced(ctx.client("cluster1").await?, &ns);
    let labelled = |c: Option<&ConfigMap>| c.is_some_and(|c| has(c.meta().labels.as_ref(), "drop"));
    wait_until(on_wec.clone(), "cm", "delivered", DEADLINE, labelled).await?;
    let beside = ctx.unique_name("beside");
    send(&ctx, &beside, &selector, true).await?;
    let works: Api<ManifestWork> = Api::namespaced(ctx.client("its1").await?, "cluster1");
    let holding = |w: Option<&ManifestWork>| w.is_some();
    wait_until(works, &format!("{beside}.wds1.0"), "written", DEADLINE, holding).await?;

    apply(&in_wds, config_map(json!({}))).await?;
    let removed = |c: Option<&ConfigMap>| c.is_some_and(|c| !has(c.meta().labels.as_ref(), "drop"));
    wait_until(on_wec, "cm", "without the label the WDS removed", DEADLINE, removed).await?;
    Api::<BindingPolicy>::all(wds.clone())
        .delete(&beside, &DeleteParams::default())
        .await?;
    withdraw(&wds, &ns).await
}
