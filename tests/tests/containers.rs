//! Our images as containers under a real kubelet (issue "Real nodes"). Elsewhere the stack plays
//! kubelet for our binaries (`ks_tests::stack::kubelet`); here cluster1's status agent is moved
//! onto cluster1's real node the way a user places it, with an AddOnDeploymentConfig (node
//! placement, and a registry mirror: the stack's registry stands in for ghcr.io), and runs from
//! the `ks-agent` image as any Pod: pulled by containerd, as the image's user 65532 with a
//! read-only root, its probes gating readiness, in-cluster config through kube-proxy to
//! cluster1's apiserver, the hub credential OCM's agent handed on for the ITS. Status still comes
//! back through it, and after its container is killed the kubelet starts it again and status comes
//! back again. At the end the agent goes back to the stand-in.
//!
//! The hub likewise: the hub chart (direct mode) installed with `helm install --wait` on cluster1,
//! its ks-hub placed on the real node, in place of the stack's hub for wds1 while the test runs,
//! and `helm test` passing against it.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use ks_shared::api::BindingPolicy;
use ks_shared::names::{AGENT_INSTALL_NAMESPACE, STATUS_ADDON_NAME};
use ks_shared::ocm::{AddOnDeploymentConfig, ManagedClusterAddOn};
use ks_tests::harness::{Ctx, apply, run, wait_until};
use ks_tests::stack::{HubOptions, Stack, node, registry, wait_for};
use ks_tests::stack_test;
use ks_tests::tools::{Release, Tools, chart_path};
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
    vec![
        stack_test!(
            the_agent_runs_as_a_container_on_a_real_node,
            &[
                "hub-wds1",
                "apiserver-cluster1",
                "node-cluster1-kubelet",
                "node-cluster1-kube-proxy"
            ],
            alone
        ),
        stack_test!(
            the_hub_runs_as_a_container_through_helm,
            &[
                "hub-wds1",
                "apiserver-cluster1",
                "node-cluster1-kubelet",
                "node-cluster1-kube-proxy"
            ],
            alone
        ),
    ]
);

/// Fails, saying why, unless the stack has a real node on cluster1.
async fn real_node(ctx: &Ctx) -> anyhow::Result<()> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(ctx.client(WEC).await?);
    anyhow::ensure!(
        nodes.get_opt(&node::node_name(WEC)).await?.is_some(),
        "the stack has no real node on {WEC}: {}",
        node::missing_tools().unwrap_or_else(|| "see `make up`'s output".into())
    );
    Ok(())
}

async fn the_agent_runs_as_a_container_on_a_real_node(ctx: Ctx) -> anyhow::Result<()> {
    let hub = ctx.client("its1").await?;
    real_node(&ctx).await?;
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
    let pod = ready_pod(&pods, AGENT_PODS, 0).await?;
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
    let pod = ready_pod(&pods, AGENT_PODS, 1).await?;
    let restarted = container_pid(ctx, &pod)?;
    anyhow::ensure!(restarted != pid, "the same process {pid} after the kill");
    apply(&deployments, deployment(&selector, 2)).await?;
    returned(&deployments, 2).await?;
    policies.delete(&policy, &DeleteParams::default()).await?;
    ctx.delete_namespace("wds1", &ns).await
}

/// ks-hub as users without KubeFlex install it: the hub chart in direct mode, `helm install
/// --wait`, its kubeconfigs for wds1 and its1 in Secrets at the address Pods reach the stack's
/// apiservers by, placed on cluster1's real node, the image pulled from the stack's registry. It
/// takes over wds1 from the stack's hub (stopped meanwhile): a policy's objects reach a WEC
/// through it, as 65532 on a read-only root; killed, the kubelet starts it again and the next
/// change is delivered; under a memory limit below its need the Pod says OOMKilled; `helm
/// uninstall` leaves no object and no Pod. Then the stack's hub is back.
async fn the_hub_runs_as_a_container_through_helm(ctx: Ctx) -> anyhow::Result<()> {
    real_node(&ctx).await?;
    let image = ctx.stack.push_image("ks-hub")?;
    let (repository, tag) = image.rsplit_once(':').context("the image's tag")?;
    let kubectl = ctx.stack.push_kubectl_image()?;
    let tools = Tools::new(&ctx, "hub-container")?;
    let namespace = ctx.namespace(WEC).await?;
    let secrets: Api<Secret> = Api::namespaced(ctx.client(WEC).await?, &namespace);
    let pods_reach = format!("https://{}:", ctx.stack.api_host());
    for space in ["wds1", "its1"] {
        let kubeconfig =
            std::fs::read_to_string(ctx.stack.space_kubeconfig(space))?.replace("https://127.0.0.1:", &pods_reach);
        apply(
            &secrets,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("{space}-kubeconfig")},
                   "stringData": {"kubeconfig": kubeconfig}}),
        )
        .await?;
    }
    let release = Release {
        context: WEC,
        namespace: namespace.clone(),
        name: "hub".into(),
        chart: "charts/kubestellar-rs",
    };
    let values = json!({
        "mode": "direct",
        "ITSes": [{"name": "its1", "kubeconfigSecret": {"name": "its1-kubeconfig"}}],
        "WDSes": [{"name": "wds1", "kubeconfigSecret": {"name": "wds1-kubeconfig"}}],
        "hub": {
            "image": {"repository": repository, "tag": tag},
            "nodeSelector": {node::REAL_NODE_LABEL: "true"},
            "tolerations": [{"key": node::REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        },
        "tests": {"kubectlImage": kubectl},
    });
    ctx.stack
        .procs
        .stop(&Stack::hub_process("wds1"), Duration::from_secs(10))?;
    let outcome = hub_in_a_container(&ctx, &tools, &release, &values, &image).await;
    // Uninstalled, and the stack's hub back, whatever happened.
    let uninstalled = uninstall_leaves_no_pod(&ctx, &tools, &release).await;
    ctx.stack.restart_hub("wds1", HubOptions::STACK).await?;
    outcome?;
    uninstalled?;
    ctx.delete_namespace(WEC, &namespace).await
}

async fn hub_in_a_container(
    ctx: &Ctx,
    tools: &Tools,
    release: &Release,
    values: &Value,
    image: &str,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let file = tools.values_file(values)?;
    let chart = chart_path(release.chart);
    tools.helm(&release.args(&[
        "install",
        &release.name,
        &chart,
        "--values",
        &file,
        "--wait",
        "--timeout",
        "180s",
    ]))?;
    println!(
        "helm install --wait of the hub chart took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let pods: Api<Pod> = Api::namespaced(ctx.client(WEC).await?, &release.namespace);
    let pod = ready_pod(&pods, HUB_PODS, 0).await?;
    let container = &pod.spec.as_ref().context("pod spec")?.containers[0];
    anyhow::ensure!(container.image.as_deref() == Some(image), "image {:?}", container.image);
    let pid = container_pid(ctx, &pod)?;
    confined(pid)?;

    // A policy's ConfigMap reaches cluster2 through it.
    let wds = ctx.client("wds1").await?;
    let (ns, selector) = ctx.selected_namespace("wds1").await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    let policies: Api<BindingPolicy> = Api::all(wds);
    let policy = ctx.unique_name("hub-container");
    let settings = |n: u32| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "settings", "labels": selector},
                                   "data": {"n": n.to_string()}})
    };
    apply(&configmaps, settings(1)).await?;
    apply(
        &policies,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
               "metadata": {"name": policy},
               "spec": {"clusterSelectors": [{"matchLabels": {"name": "cluster2"}}],
                        "downsync": [{"objectSelectors": [{"matchLabels": selector}]}]}}),
    )
    .await?;
    let delivered: Api<ConfigMap> = Api::namespaced(ctx.client("cluster2").await?, &ns);
    let holds = |n: u32| {
        move |c: Option<&ConfigMap>| c.and_then(|c| c.data.as_ref()).and_then(|d| d.get("n")) == Some(&n.to_string())
    };
    wait_until(
        delivered.clone(),
        "settings",
        "delivered by the hub's container",
        DEADLINE,
        holds(1),
    )
    .await?;

    // `helm test`: its Pod asks the hub's /readyz through the apiserver's service proxy.
    let tested = Instant::now();
    tools.helm(&release.args(&["test", &release.name, "--timeout", "120s"]))?;
    println!("helm test passed in {:.1} s", tested.elapsed().as_secs_f64());

    // Killed: the kubelet starts it again, and the next change is delivered.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    anyhow::ensure!(killed.success(), "kill {pid}");
    let pod = ready_pod(&pods, HUB_PODS, 1).await?;
    anyhow::ensure!(
        container_pid(ctx, &pod)? != pid,
        "the same process {pid} after the kill"
    );
    apply(&configmaps, settings(2)).await?;
    wait_until(
        delivered,
        "settings",
        "delivered by the restarted container",
        DEADLINE,
        holds(2),
    )
    .await?;
    policies.delete(&policy, &DeleteParams::default()).await?;
    ctx.delete_namespace("wds1", &ns).await?;

    // A memory limit below its need: the Pod says so.
    let mut starved = values.clone();
    starved["hub"]["resources"] = json!({"requests": {"memory": "4Mi"}, "limits": {"memory": "4Mi"}});
    let file = tools.values_file(&starved)?;
    tools.helm(&release.args(&["upgrade", &release.name, &chart, "--values", &file]))?;
    wait_for("the starved hub's Pod to say OOMKilled", DEADLINE, || async {
        let listed = pods.list(&ListParams::default().labels(HUB_PODS)).await?;
        let oom = listed
            .items
            .iter()
            .flat_map(|p| p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()))
            .any(|c| {
                let terminated = [c.state.as_ref(), c.last_state.as_ref()]
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.terminated.as_ref());
                terminated.into_iter().any(|t| t.reason.as_deref() == Some("OOMKilled"))
            });
        Ok(oom)
    })
    .await
}

/// `helm uninstall` of the release leaves none of its objects and, once they are gone, no Pod.
async fn uninstall_leaves_no_pod(ctx: &Ctx, tools: &Tools, release: &Release) -> anyhow::Result<()> {
    tools.uninstall(release)?;
    let pods: Api<Pod> = Api::namespaced(ctx.client(WEC).await?, &release.namespace);
    wait_for("no hub Pod left after helm uninstall", DEADLINE, || async {
        Ok(pods
            .list(&ListParams::default().labels(HUB_PODS))
            .await?
            .items
            .is_empty())
    })
    .await
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

/// The agent's Pods.
const AGENT_PODS: &str = "app=status-agent";
/// The hub's Pods.
const HUB_PODS: &str = "app.kubernetes.io/name=ks-hub";

/// A Pod of `selector` on the real node, Ready, its container started `restarts` times before.
async fn ready_pod(pods: &Api<Pod>, selector: &str, restarts: i32) -> anyhow::Result<Pod> {
    let real = node::node_name(WEC);
    let found = std::sync::Mutex::new(None);
    wait_for(
        &format!("a Pod {selector} Ready on {real} after {restarts} restarts"),
        DEADLINE,
        || async {
            let listed = pods.list(&ListParams::default().labels(selector)).await?;
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
    pod.with_context(|| format!("no ready Pod {selector} {}", pods.resource_url()))
}

/// The host PID of the Pod's (first) container.
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
        "the container runs as {uids}"
    );
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mounts"))?;
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("/"))
        .context("no root mount")?;
    let options = root.split_whitespace().nth(3).unwrap_or_default();
    anyhow::ensure!(
        options.split(',').any(|o| o == "ro"),
        "the container's root is not read-only: {root}"
    );
    Ok(())
}
