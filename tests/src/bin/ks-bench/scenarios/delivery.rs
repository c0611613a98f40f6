//! `delivery-latency`: Deployments created in the WDS one after another, each timed until it is
//! on both WECs (and until the Binding lists it and cluster1's ManifestWork holds it), with the
//! ManifestWork writes they cost.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use ks_shared::api::Binding;
use ks_tests::harness::wait_until;
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::fixtures::{MANAGER, scenario, unique};
use ks_tests::measure::summary;

/// Per-object times of the delivery scenario.
pub struct Delivery {
    /// WDS create -> present on both WECs.
    pub total: Vec<Duration>,
    /// WDS create -> the Binding lists it.
    pub to_binding: Vec<Duration>,
    /// WDS create -> cluster1's ManifestWork holds it.
    pub to_work: Vec<Duration>,
    /// ManifestWork generations added.
    pub writes: i64,
}

/// Times `objects` deliveries; prints their percentiles, where the time went, and the writes.
pub async fn latency(stack: &Stack, objects: usize) -> anyhow::Result<()> {
    let d = delivery(stack, objects).await?;
    println!(
        "delivery: WDS create -> present on both WECs over {} Deployments: {}; ManifestWork generations added: {}",
        d.total.len(),
        summary(d.total),
        d.writes
    );
    println!("  of which WDS create -> Binding lists it: {}", summary(d.to_binding));
    println!(
        "  of which WDS create -> cluster1's ManifestWork holds it: {}",
        summary(d.to_work)
    );
    Ok(())
}

/// Creates `objects` Deployments one after another, each waited for on both WECs.
pub async fn delivery(stack: &Stack, objects: usize) -> anyhow::Result<Delivery> {
    let wds = stack.client("wds1").await?;
    let wecs = [stack.client("cluster1").await?, stack.client("cluster2").await?];
    let its = stack.client("its1").await?;
    let ns = unique("bench-delivery");
    let apply = PatchParams::apply(MANAGER).force();
    let label = json!({"bench.kubestellar.io/delivery": ns});
    let edge = json!([{"matchLabels": {"location-group": "edge"}}]);
    let (namespaces, policies) = scenario(&wds, &ns, &ns, &label, edge, json!({})).await?;
    let works: Api<ks_shared::ocm::ManifestWork> = Api::all(its);
    let generations = |list: Vec<ks_shared::ocm::ManifestWork>| -> i64 {
        list.iter()
            .filter(|w| w.metadata.name.as_deref().is_some_and(|n| n.starts_with(&ns)))
            .map(|w| w.metadata.generation.unwrap_or(0))
            .sum()
    };
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    let bindings: Api<Binding> = Api::all(wds.clone());
    let mailbox: Api<ks_shared::ocm::ManifestWork> = Api::namespaced(stack.client("its1").await?, "cluster1");
    let (mut latencies, mut to_binding, mut to_work) = (Vec::new(), Vec::new(), Vec::new());
    let writes_before = generations(works.list(&Default::default()).await?.items);
    for i in 0..objects {
        let name = format!("web-{i}");
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": label},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}});
        let started = Instant::now();
        deployments.patch(&name, &apply, &Patch::Apply(deployment)).await?;
        // Where the time goes: the Binding lists it, then a ManifestWork for cluster1 holds it.
        let listed = |b: Option<&Binding>| {
            b.is_some_and(|b| b.spec.workload.namespace_scope.iter().any(|o| o.object.name == name))
        };
        wait_until(
            bindings.clone(),
            &ns,
            "listing the object",
            Duration::from_secs(60),
            listed,
        )
        .await?;
        to_binding.push(started.elapsed());
        let holds = |w: &ks_shared::ocm::ManifestWork| {
            w.spec
                .workload
                .manifests
                .iter()
                .any(|m| m["metadata"]["name"] == json!(name))
        };
        let ours = watcher::Config::default().labels(&format!("{}={ns}", ks_shared::names::ORIGIN_BINDING_LABEL));
        // Watch errors (an expired resource version) are retried by the backoff and skipped.
        let held = watcher(mailbox.clone(), ours)
            .default_backoff()
            .applied_objects()
            .filter_map(|w| std::future::ready(w.ok().filter(|w| holds(w))));
        futures::pin_mut!(held);
        tokio::time::timeout(Duration::from_secs(60), held.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("the ManifestWork watch ended"))?;
        to_work.push(started.elapsed());
        for wec in &wecs {
            let on_wec: Api<Deployment> = Api::namespaced(wec.clone(), &ns);
            wait_until(
                on_wec,
                &name,
                "present on the WEC",
                Duration::from_secs(60),
                |d: Option<&Deployment>| d.is_some(),
            )
            .await?;
        }
        latencies.push(started.elapsed());
    }
    let writes = generations(works.list(&Default::default()).await?.items) - writes_before;
    policies.delete(&ns, &DeleteParams::default()).await?;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    Ok(Delivery {
        total: latencies,
        to_binding,
        to_work,
        writes,
    })
}
