//! Our images as containers under a real kubelet (issue "Real nodes"). Elsewhere the stack plays
//! kubelet for our binaries (`ks_tests::stack::kubelet`); here cluster1's status agent is moved
//! onto cluster1's real node the way a user places it, with an AddOnDeploymentConfig (node
//! placement, and a registry mirror: the stack's registry stands in for ghcr.io), and runs from
//! the `ks-agent` image as any Pod: pulled by containerd, as the image's user 65532 with a
//! read-only root, its probes gating readiness, in-cluster config through kube-proxy to
//! cluster1's apiserver, the hub credential OCM's agent handed on for the ITS. Status still comes
//! back through it, and after its container is killed the kubelet starts it again and status comes
//! back again. At the end the agent goes back to the stand-in.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use ks_shared::api::BindingPolicy;
use ks_shared::names::{AGENT_INSTALL_NAMESPACE, STATUS_ADDON_NAME};
use ks_shared::ocm::{AddOnDeploymentConfig, ManagedClusterAddOn};
use ks_tests::harness::{Ctx, apply, run, wait_until};
use ks_tests::stack::{Stack, node, registry, wait_for};
use ks_tests::stack_test;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const WEC: &str = "cluster1";
/// The AddOnDeploymentConfig that places cluster1's agent on its real node.
const CONFIG: &str = "ks-real-node";
/// Pulling, starting, a leader lease left by the one before (15 s) and caches filling.
const DEADLINE: Duration = Duration::from_secs(120);
const MANAGER: &str = "ks-tests";

ks_tests::stack_main!(
    run,
    vec![stack_test!(
        the_agent_runs_as_a_container_on_a_real_node,
        &[
            "hub-wds1",
            "apiserver-cluster1",
            "node-cluster1-kubelet",
            "node-cluster1-kube-proxy"
        ],
        alone
    )]
);

async fn the_agent_runs_as_a_container_on_a_real_node(ctx: Ctx) -> anyhow::Result<()> {
    let hub = ctx.client("its1").await?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(ctx.client(WEC).await?);
    anyhow::ensure!(
        nodes.get_opt(&node::node_name(WEC)).await?.is_some(),
        "the stack has no real node on {WEC}: {}",
        node::missing_tools().unwrap_or_else(|| "see `make up`'s output".into())
    );
    let image = ctx.stack.push_image("ks-agent")?;
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(hub.clone(), WEC);
    let configs_before = addons.get(STATUS_ADDON_NAME).await?.spec.configs;
    place_on_the_real_node(&hub).await?;
    let outcome = runs_as_a_container(&ctx, &image).await;
    // Back to the stand-in, whatever happened.
    let patch = json!({"spec": {"configs": configs_before}});
    addons
        .patch(STATUS_ADDON_NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Api::<AddOnDeploymentConfig>::namespaced(hub, WEC)
        .delete(CONFIG, &DeleteParams::default())
        .await?;
    let stand_in = Stack::agent_process(WEC);
    wait_for("the stand-in agent to run again", DEADLINE, || async {
        Ok(ctx.stack.procs.check_alive(&stand_in).is_ok())
    })
    .await?;
    outcome
}

/// An AddOnDeploymentConfig for cluster1's add-on: on the real node, the image from the stack's
/// registry, no traces (the stack's Jaeger listens on the host's loopback alone).
async fn place_on_the_real_node(hub: &kube::Client) -> anyhow::Result<()> {
    let config = json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "AddOnDeploymentConfig",
        "metadata": {"name": CONFIG, "namespace": WEC},
        "spec": {
            "nodePlacement": {
                "nodeSelector": {node::REAL_NODE_LABEL: "true"},
                "tolerations": [{"key": node::REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            },
            "registries": [{"source": "ghcr.io", "mirror": registry::REGISTRY}],
            "customizedVariables": [{"name": "OTLP_ENDPOINT", "value": ""}],
        },
    });
    Api::<AddOnDeploymentConfig>::namespaced(hub.clone(), WEC)
        .patch(CONFIG, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&config))
        .await?;
    let patch = json!({"spec": {"configs": [{"group": "addon.open-cluster-management.io",
        "resource": "addondeploymentconfigs", "namespace": WEC, "name": CONFIG}]}});
    Api::<ManagedClusterAddOn>::namespaced(hub.clone(), WEC)
        .patch(STATUS_ADDON_NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

async fn runs_as_a_container(ctx: &Ctx, image: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    let pods: Api<Pod> = Api::namespaced(ctx.client(WEC).await?, AGENT_INSTALL_NAMESPACE);
    let pod = ready_agent_pod(&pods, 0).await?;
    println!(
        "the agent's container ready on {} {:.1} s after its placement",
        node::node_name(WEC),
        started.elapsed().as_secs_f64()
    );
    let spec = pod.spec.as_ref().context("pod spec")?;
    anyhow::ensure!(
        spec.containers[0].image.as_deref() == Some(image),
        "image {:?}",
        spec.containers[0].image
    );
    anyhow::ensure!(
        spec.containers[0].readiness_probe.is_some() && spec.containers[0].liveness_probe.is_some(),
        "the agent's container has no probes"
    );
    let stand_in = Stack::agent_process(WEC);
    anyhow::ensure!(
        ctx.stack.procs.check_alive(&stand_in).is_err(),
        "the stand-in agent still runs beside the container"
    );
    let pid = container_pid(ctx, &pod)?;
    confined(pid)?;

    // Status comes back through it: a Deployment's, from cluster1's kwok node.
    let wds = ctx.client("wds1").await?;
    let (ns, selector) = ctx.selected_namespace("wds1").await?;
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    let policy = ctx.unique_name("container");
    apply(&deployments, deployment(&selector, 1)).await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    apply(
        &policies,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
               "metadata": {"name": policy},
               "spec": {"clusterSelectors": [{"matchLabels": {"name": WEC}}],
                        "downsync": [{"objectSelectors": [{"matchLabels": selector}],
                                      "wantSingletonReportedState": true}]}}),
    )
    .await?;
    returned(&deployments, 1).await?;

    // Killed: the kubelet starts it again, and status comes back again.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    anyhow::ensure!(killed.success(), "kill {pid}");
    let pod = ready_agent_pod(&pods, 1).await?;
    let restarted = container_pid(ctx, &pod)?;
    anyhow::ensure!(restarted != pid, "the same process {pid} after the kill");
    apply(&deployments, deployment(&selector, 2)).await?;
    returned(&deployments, 2).await?;
    policies.delete(&policy, &DeleteParams::default()).await?;
    ctx.delete_namespace("wds1", &ns).await
}

/// A Deployment labelled `selector` (as its namespace is, so the policy sends both).
fn deployment(selector: &Value, replicas: i32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "counted", "labels": selector},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "counted"}},
                    "template": {"metadata": {"labels": {"app": "counted"}},
                                 "spec": {"containers": [{"name": "c", "image": "registry.example/c:1"}]}}}})
}

/// Waits until the WDS Deployment's returned status counts `replicas` ready.
async fn returned(deployments: &Api<Deployment>, replicas: i32) -> anyhow::Result<()> {
    let ready = move |d: Option<&Deployment>| {
        d.and_then(|d| d.status.as_ref()).and_then(|s| s.ready_replicas) == Some(replicas)
    };
    wait_until(
        deployments.clone(),
        "counted",
        &format!("{replicas} ready, returned through the agent's container"),
        DEADLINE,
        ready,
    )
    .await?;
    Ok(())
}

/// The agent's Pod on the real node, Ready, its container started `restarts` times before.
async fn ready_agent_pod(pods: &Api<Pod>, restarts: i32) -> anyhow::Result<Pod> {
    let real = node::node_name(WEC);
    let found = std::sync::Mutex::new(None);
    wait_for(
        &format!("the agent's Pod Ready on {real} after {restarts} restarts"),
        DEADLINE,
        || async {
            let listed = pods.list(&ListParams::default().labels("app=status-agent")).await?;
            let ready = listed.items.into_iter().find(|p| {
                let on_real = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(real.as_str());
                let status = p.status.as_ref();
                let is_ready = status
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                let restarted = status
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|c| c.first())
                    .is_some_and(|c| c.restart_count >= restarts);
                on_real && is_ready && restarted
            });
            let ready_now = ready.is_some();
            *found.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = ready;
            Ok(ready_now)
        },
    )
    .await?;
    let pod = found.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    pod.with_context(|| format!("no ready agent Pod {}", pods.resource_url()))
}

/// The host PID of the Pod's agent container.
fn container_pid(ctx: &Ctx, pod: &Pod) -> anyhow::Result<u32> {
    let status = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    let id = status
        .and_then(|c| c.first())
        .and_then(|c| c.container_id.as_deref())
        .with_context(|| format!("{} has no container ID", pod.name_any()))?;
    ctx.stack.container_pid(WEC, id)
}

/// The process runs as 65532 (the image's `nonroot`) on a read-only root.
fn confined(pid: u32) -> anyhow::Result<()> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let uids = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .context("no Uid line")?;
    anyhow::ensure!(
        uids.split_whitespace().all(|u| u == "65532"),
        "the agent runs as {uids}"
    );
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mounts"))?;
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("/"))
        .context("no root mount")?;
    let options = root.split_whitespace().nth(3).unwrap_or_default();
    anyhow::ensure!(
        options.split(',').any(|o| o == "ro"),
        "the agent's root is not read-only: {root}"
    );
    Ok(())
}
