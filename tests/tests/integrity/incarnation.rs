//! Status comes back only from the incarnation of an object the WDS holds now: one deleted and
//! made again under its name must not show its predecessor's status (G5). The WDS UID travels
//! with the object to the WEC, the agent names it on the WorkStatus, and the hub returns only a
//! report naming the object's own UID.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use ks_shared::api::{BindingPolicy, WorkStatus};
use ks_shared::names::WDS_UID_ANNOTATION;
use ks_tests::harness::{Ctx, StackTest, apply, wait_until};
use ks_tests::stack_test;
use kube::api::{Api, DeleteParams, WatchParams};
use kube::core::WatchEvent;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(60);
const COMPONENTS: &[&str] = &["hub-wds1", "apiserver-wds1", "ocm-agent-cluster1"];

pub fn tests() -> Vec<StackTest> {
    vec![stack_test!(a_remade_object_never_shows_its_old_status, COMPONENTS)]
}

fn deployment(selector: &serde_json::Value, replicas: i32) -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": selector},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

/// Waits until a WorkStatus in cluster1's mailbox reports on Deployment `ns/web` naming the WDS
/// UID `uid`.
async fn reported_on(its: &Client, ns: &str, uid: &str) -> anyhow::Result<()> {
    let statuses: Api<WorkStatus> = Api::namespaced(its.clone(), "cluster1");
    let names = |w: &WorkStatus| {
        let source = &w.spec.spec.source_ref;
        source.namespace == ns
            && source.name == "web"
            && w.annotations().get(WDS_UID_ANNOTATION).map(String::as_str) == Some(uid)
    };
    let mut reports = watcher(statuses, watcher::Config::default()).applied_objects().boxed();
    tokio::time::timeout(DEADLINE, async {
        while let Some(report) = reports.try_next().await? {
            if names(&report) {
                return Ok(());
            }
        }
        anyhow::bail!("the watch of WorkStatuses ended")
    })
    .await
    .map_err(|_| anyhow::anyhow!("no WorkStatus for {ns}/web names {uid} within {DEADLINE:?}"))?
}

async fn a_remade_object_never_shows_its_old_status(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let its = ctx.client("its1").await?;
    let (ns, selector) = ctx.selected_namespace("wds1").await?;
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let policy = ns.clone();
    apply(
        &policies,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
               "metadata": {"name": policy},
               "spec": {"clusterSelectors": [{"matchLabels": {"name": "cluster1"}}],
                        "downsync": [{"objectSelectors": [{"matchLabels": selector}],
                                      "wantSingletonReportedState": true}]}}),
    )
    .await?;
    let first = apply(&deployments, deployment(&selector, 2)).await?;
    let with_replicas =
        |n: i32| move |d: Option<&Deployment>| d.and_then(|d| d.status.as_ref()).and_then(|s| s.replicas) == Some(n);
    wait_until(
        deployments.clone(),
        "web",
        "2 replicas returned",
        DEADLINE,
        with_replicas(2),
    )
    .await?;
    reported_on(&its, &ns, &first.uid().unwrap_or_default()).await?;
    // The WEC copy's generation whose status the first web shows.
    let on_wec: Api<Deployment> = Api::namespaced(ctx.client("cluster1").await?, &ns);
    let first_on_wec = on_wec.get("web").await?.metadata.generation.unwrap_or_default();

    // Made again at once, with no replicas: the WEC copy is the same object, updated (a new
    // generation there). Whatever status the new web shows is of that generation or later.
    let mut seen = deployments
        .watch(&WatchParams::default().fields("metadata.name=web"), "0")
        .await?
        .boxed();
    deployments.delete("web", &DeleteParams::default()).await?;
    wait_until(
        deployments.clone(),
        "web",
        "deleted",
        DEADLINE,
        |d: Option<&Deployment>| d.is_none(),
    )
    .await?;
    let second = apply(&deployments, deployment(&selector, 0)).await?;
    let second_uid = second.uid().unwrap_or_default();
    tokio::time::timeout(DEADLINE, async {
        while let Some(event) = seen.try_next().await? {
            let (WatchEvent::Added(d) | WatchEvent::Modified(d)) = event else {
                continue;
            };
            if d.uid().as_deref() != Some(&second_uid) {
                continue;
            }
            let Some(observed) = d.status.as_ref().and_then(|s| s.observed_generation) else {
                continue;
            };
            anyhow::ensure!(
                observed > first_on_wec,
                "the new web shows its predecessor's status: {:?}",
                d.status
            );
            if d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0) == 0 {
                return Ok(d);
            }
        }
        anyhow::bail!("the watch of web ended")
    })
    .await
    .map_err(|_| anyhow::anyhow!("the new web's status did not come back within {DEADLINE:?}"))??;
    reported_on(&its, &ns, &second_uid).await?;
    policies.delete(&policy, &DeleteParams::default()).await?;
    Ok(())
}
