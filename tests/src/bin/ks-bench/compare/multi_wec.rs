//! Multi-WEC status for the comparison: a Deployment on both WECs, scaled in the WDS, timed until
//! the WDS shows the ready replicas aggregated over both.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use ks_tests::stack::Stack;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::report::Implementation;
use super::{LATENCY_DEADLINE, WDS};
use crate::fixtures::{MANAGER, scenario, unique};

/// A Deployment sent to both WECs with multi-WEC status: each change scales it in the WDS and
/// times until the WDS status shows the new ready replicas, aggregated over both WECs as the
/// implementation does it (ours sums them; upstream v0.30.0 takes the minimum). Upstream
/// aggregates only apps kinds, so this uses a Deployment, whose status on the WECs is the
/// kube-controller-manager's: the figure includes delivery and the WECs' own work.
pub async fn multi_wec_scale(stack: &Stack, i: Implementation, changes: usize) -> anyhow::Result<Vec<Duration>> {
    let wds = stack.client(WDS).await?;
    let ns = unique("bench-multi");
    let apply = PatchParams::apply(MANAGER).force();
    let label = json!({"bench.kubestellar.io/multi": ns});
    let edge = json!([{"matchLabels": {"location-group": "edge"}}]);
    let multi = json!({"wantMultiWECReportedState": true});
    let (namespaces, policies) = scenario(&wds, &ns, &ns, &label, edge, multi).await?;
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    let scale = |replicas: usize| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": label},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}})
    };
    let aggregated = |replicas: usize| match i {
        Implementation::Ours => 2 * replicas,
        Implementation::Upstream => replicas,
    };
    let ready = |replicas: usize| {
        move |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref())
                .is_some_and(|s| s.ready_replicas.unwrap_or(0) as usize == aggregated(replicas))
        }
    };
    deployments.patch("web", &apply, &Patch::Apply(scale(1))).await?;
    ks_tests::harness::wait_until(
        deployments.clone(),
        "web",
        "1 ready replica per WEC",
        LATENCY_DEADLINE,
        ready(1),
    )
    .await?;
    let mut latencies = Vec::new();
    for change in 0..changes {
        let replicas = if change % 2 == 0 { 2 } else { 1 };
        let started = Instant::now();
        deployments.patch("web", &apply, &Patch::Apply(scale(replicas))).await?;
        ks_tests::harness::wait_until(
            deployments.clone(),
            "web",
            "the aggregated ready replicas",
            LATENCY_DEADLINE,
            ready(replicas),
        )
        .await?;
        latencies.push(started.elapsed());
    }
    policies.delete(&ns, &DeleteParams::default()).await?;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    Ok(latencies)
}
