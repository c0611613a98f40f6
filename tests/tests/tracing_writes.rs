//! Tracing adds no writes: the same rollout with the hub's tracing off and then on causes the
//! same number of ManifestWork and WorkStatus writes, as counted by the ITS apiserver itself.
//! The rollout is a Namespace and a Gauge (a custom resource: it has a generation, so it is
//! traced; nothing changes its status, so the count of writes does not depend on timing).
//! It restarts the hub, so it is a test binary of its own (cargo runs binaries one at a time).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::Namespace;
use ks_shared::api::{BindingPolicy, WorkStatus};
use ks_shared::names::{self, TRACEPARENT_ANNOTATION};
use ks_shared::ocm::ManifestWork;
use ks_tests::harness::{Ctx, apply, run, wait_until};
use ks_tests::metrics::{apiserver_writes, difference, sample, total};
use ks_tests::stack::{HubOptions, Tracing};
use ks_tests::stack_test;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(90);
const WECS: [&str; 2] = ["cluster1", "cluster2"];
const PATH: &[&str] = &[
    "hub-wds1",
    "pod-cluster1-open-cluster-management-agent-addon-status-agent",
    "pod-cluster2-open-cluster-management-agent-addon-status-agent",
];

fn main() -> std::process::ExitCode {
    let ks_stack = std::path::Path::new(env!("CARGO_BIN_EXE_ks-stack"));
    run(
        ks_stack.parent().expect("binaries live in a directory"),
        vec![stack_test!(tracing_adds_no_writes, PATH)],
    )
}

/// Writes of one rollout: (ManifestWorks, WorkStatuses).
type Writes = (u64, u64);

async fn tracing_adds_no_writes(ctx: Ctx) -> anyhow::Result<()> {
    let off = rollout(&ctx, Tracing::Off).await;
    // Whatever happened, the stack's hub traces again afterwards.
    let on = match off {
        Ok(_) => rollout(&ctx, Tracing::On).await,
        Err(_) => ctx.stack.restart_hub("wds1", HubOptions::STACK).await.map(|()| (0, 0)),
    };
    let (off, on) = (off?, on?);
    eprintln!("writes (ManifestWorks, WorkStatuses): tracing off {off:?}, on {on:?}");
    ensure!(off == on, "tracing off wrote {off:?}, tracing on {on:?}");
    // Each WEC gets one ManifestWork (written by the hub, then given its finalizer by OCM) and
    // one WorkStatus per object (the Namespace and the Gauge).
    ensure!(off.1 >= 4, "too few WorkStatus writes counted: {off:?}");
    Ok(())
}

/// Restarts the hub with `tracing`, delivers a Namespace and a Gauge to both WECs, and
/// counts the ManifestWork and WorkStatus writes the ITS apiserver served meanwhile.
async fn rollout(ctx: &Ctx, tracing: Tracing) -> anyhow::Result<Writes> {
    let options = HubOptions {
        tracing,
        ..HubOptions::STACK
    };
    ctx.stack.restart_hub("wds1", options).await?;
    let wds = ctx.client("wds1").await?;
    let its = ctx.client("its1").await?;
    for space in ["wds1", "cluster1", "cluster2"] {
        ks_tests::gauge::install(&ctx.client(space).await?, "ks-tests").await?;
    }
    // Count from a quiet start: nothing the restart (or an agent's restart) caused.
    settled(ctx).await?;
    let before = apiserver_writes(&its).await?;

    let ns = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": ns});
    apply(
        &Api::<Namespace>::all(wds.clone()),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": selector}}),
    )
    .await?;
    apply(
        &Api::<DynamicObject>::namespaced_with(wds.clone(), &ns, &ks_tests::gauge::resource()),
        json!({"apiVersion": "bench.kubestellar.io/v1", "kind": "Gauge",
               "metadata": {"name": "settings", "labels": selector}, "spec": {"k": "v"}}),
    )
    .await?;
    let policy = format!("{ns}-edge");
    let policies = Api::<BindingPolicy>::all(wds.clone());
    apply(
        &policies,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": policy},
               "spec": {"clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
                        "downsync": [{"objectSelectors": [{"matchLabels": selector}]}]}}),
    )
    .await?;

    let ours = ListParams::default().labels(&format!("{}={policy}", names::ORIGIN_BINDING_LABEL));
    for wec in WECS {
        let on_wec = Api::<DynamicObject>::namespaced_with(ctx.client(wec).await?, &ns, &ks_tests::gauge::resource());
        let delivered = wait_until(
            on_wec,
            "settings",
            "delivered",
            DEADLINE,
            |g: Option<&DynamicObject>| g.is_some(),
        )
        .await?;
        let traced = delivered
            .and_then(|g| g.metadata.annotations)
            .is_some_and(|a| a.contains_key(TRACEPARENT_ANNOTATION));
        ensure!(
            traced == (tracing == Tracing::On),
            "with tracing {tracing:?}, the Gauge on {wec} has a traceparent: {traced}"
        );
        // The Namespace's WorkStatus shows its phase: both objects have been reported.
        let statuses = Api::<WorkStatus>::namespaced(its.clone(), wec);
        ks_tests::stack::wait_for(&format!("both objects reported from {wec}"), DEADLINE, || async {
            let list = statuses.list(&ours).await?.items;
            let namespace_reported = list.iter().any(|w| {
                w.spec.spec.source_ref.kind == "Namespace"
                    && w.status.as_ref().is_some_and(|s| s.0.get("phase").is_some())
            });
            Ok(list.len() == 2 && namespace_reported)
        })
        .await?;
    }
    settled(ctx).await?;
    let writes = difference(&before, &apiserver_writes(&its).await?);
    let counted = (
        total(&writes, "manifestworks", Some("")),
        total(&writes, "workstatuses", None),
    );
    eprintln!("tracing {tracing:?}: writes on the ITS {:?}", by_request(&writes));

    policies.delete(&policy, &DeleteParams::default()).await?;
    for wec in WECS {
        let works = Api::<ManifestWork>::namespaced(its.clone(), wec);
        ks_tests::stack::wait_for(
            &format!("the rollout's ManifestWork on {wec} gone"),
            DEADLINE,
            || async { Ok(works.list(&ours).await?.items.is_empty()) },
        )
        .await?;
    }
    ctx.delete_namespace("wds1", &ns).await?;
    Ok(counted)
}

/// Waits until the hub's queues and both agents' queues are empty.
async fn settled(ctx: &Ctx) -> anyhow::Result<()> {
    let hub = std::net::SocketAddr::from(([127, 0, 0, 1], ctx.stack.hub_port("wds1")));
    let mut agents = Vec::new();
    for wec in WECS {
        ctx.stack.wait_agent_ready(wec, DEADLINE).await?;
        agents.push(
            ctx.stack
                .agent_address(wec)
                .ok_or_else(|| anyhow::anyhow!("{wec}'s agent address"))?,
        );
    }
    ks_tests::stack::wait_for("the hub and the agents to have nothing queued", DEADLINE, || {
        let idle = |address, gauges: &[&str]| {
            let (_, text) = ks_tests::process::http_get(address, "/metrics");
            gauges.iter().all(|g| sample(&text, g) == Some(0.0))
        };
        let done = idle(
            hub,
            &["kubestellar_binding_queue_depth", "kubestellar_status_queue_depth"],
        ) && agents.iter().all(|a| idle(*a, &["ks_agent_queue_depth"]));
        std::future::ready(Ok(done))
    })
    .await
}

fn by_request(writes: &BTreeMap<ks_tests::metrics::Request, u64>) -> Vec<String> {
    writes
        .iter()
        .filter(|(k, _)| ["manifestworks", "workstatuses"].contains(&k.resource.as_str()))
        .map(|(k, v)| {
            format!(
                "{} {}{} {v}",
                k.verb,
                k.resource,
                if k.subresource.is_empty() {
                    String::new()
                } else {
                    format!("/{}", k.subresource)
                }
            )
        })
        .collect()
}
