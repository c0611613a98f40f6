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
//!
//! And the way users install it with KubeFlex: the hub chart into the hosting cluster, whose real
//! node runs what KubeFlex's hooks deploy there: ks-hub for a WDS, and an ITS's hook Jobs, which
//! install the status add-on chart from the stack's registry (as OCI), whose ks-addon runs there
//! too.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use ks_shared::api::BindingPolicy;
use ks_shared::names::{AGENT_INSTALL_NAMESPACE, STATUS_ADDON_NAME};
use ks_shared::ocm::{AddOnDeploymentConfig, ManagedClusterAddOn};
use ks_tests::harness::{Ctx, apply, repo_root, run, wait_until};
use ks_tests::stack::kubeflex::{OPERATOR_PROCESS, control_planes, system_namespace};
use ks_tests::stack::{CreatedCrd, HubOptions, SPARE_WDS, Stack, node, registry, wait_for};
use ks_tests::stack_test;
use ks_tests::tools::{Release, Tools, chart_path};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const WEC: &str = "cluster1";
/// The KubeFlex hosting cluster.
const HOSTING: &str = "kubeflex";
/// The AddOnDeploymentConfig that places cluster1's agent on its real node.
const CONFIG: &str = "ks-real-node";
/// Pulling, starting, a leader lease left by the one before (15 s) and caches filling.
const DEADLINE: Duration = Duration::from_secs(120);
const MANAGER: &str = "ks-tests";

/// What the tests on cluster1's real node need running.
const ON_CLUSTER1_NODE: &[&str] = &[
    "hub-wds1",
    "apiserver-cluster1",
    "node-cluster1-kubelet",
    "node-cluster1-kube-proxy",
];

ks_tests::stack_main!(
    run,
    vec![
        stack_test!(the_agent_runs_as_a_container_on_a_real_node, ON_CLUSTER1_NODE, alone),
        stack_test!(the_hub_runs_as_a_container_through_helm, ON_CLUSTER1_NODE, alone),
        stack_test!(
            the_kubeflex_path_runs_as_containers,
            &[
                OPERATOR_PROCESS,
                "apiserver-kubeflex",
                "apiserver-wds2",
                "node-kubeflex-kubelet",
                "node-kubeflex-kube-proxy"
            ],
            alone
        ),
    ]
);

/// Fails, saying why, unless the stack has a real node on `space`.
async fn real_node(ctx: &Ctx, space: &str) -> anyhow::Result<()> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(ctx.client(space).await?);
    anyhow::ensure!(
        nodes.get_opt(&node::node_name(space)).await?.is_some(),
        "the stack has no real node on {space}: {}",
        node::cannot_run().unwrap_or_else(|| "see `make up`'s output".into())
    );
    Ok(())
}

async fn the_agent_runs_as_a_container_on_a_real_node(ctx: Ctx) -> anyhow::Result<()> {
    let hub = ctx.client("its1").await?;
    real_node(&ctx, WEC).await?;
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
    let pod = ready_pod(&pods, WEC, AGENT_PODS, 0).await?;
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
    let pid = container_pid(ctx, WEC, &pod)?;
    confined(pid)?;

    // Status comes back through it: a Deployment's, from cluster1's kwok node.
    let Counted {
        ns,
        selector,
        deployments,
        policies,
        policy,
    } = counted_on_cluster1(ctx, "wds1", "container").await?;

    // Killed: the kubelet starts it again, and status comes back again.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    anyhow::ensure!(killed.success(), "kill {pid}");
    let pod = ready_pod(&pods, WEC, AGENT_PODS, 1).await?;
    let restarted = container_pid(ctx, WEC, &pod)?;
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
    real_node(&ctx, WEC).await?;
    let image = ctx.stack.push_image("ks-hub")?;
    let (repository, tag) = image.rsplit_once(':').context("the image's tag")?;
    let kubectl = ctx.stack.push_tool_image("kubectl")?;
    let tools = Tools::new(&ctx, "hub-container")?;
    let namespace = ctx.namespace(WEC).await?;
    let secrets: Api<Secret> = Api::namespaced(ctx.client(WEC).await?, &namespace);
    for space in ["wds1", "its1"] {
        let kubeconfig = ctx.stack.space_kubeconfig_at(space, ctx.stack.api_host())?;
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
    let pod = ready_pod(&pods, WEC, HUB_PODS, 0).await?;
    let container = &pod.spec.as_ref().context("pod spec")?.containers[0];
    anyhow::ensure!(container.image.as_deref() == Some(image), "image {:?}", container.image);
    let pid = container_pid(ctx, WEC, &pod)?;
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
    let pod = ready_pod(&pods, WEC, HUB_PODS, 1).await?;
    anyhow::ensure!(
        container_pid(ctx, WEC, &pod)? != pid,
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

/// The hub chart installed into the KubeFlex hosting cluster as users do, with an ITS and a WDS
/// that KubeFlex adopts (`external`): the ITS is the hosting cluster itself, at the address its
/// Pods reach it by (what KubeFlex's `host` type gives, but for the name `kubernetes.default.svc`
/// in its kubeconfig, which needs a cluster DNS the stack has not), and the WDS the spare one,
/// given the stack's its1. The hosting cluster's real node runs, from the stack's registry: the
/// ITS's hook Jobs (`kubectl wait` for OCM's CRDs, then `helm upgrade --install` of the status
/// add-on chart, pulled as OCI), ks-addon from that chart, and ks-hub from the WDS's hook, as
/// 65532 on read-only roots, Ready by their probes; KubeFlex says both ControlPlanes' hooks
/// completed (a Job complete, ks-hub Ready); a workload applied to the WDS reaches cluster1
/// through that ks-hub, its status back. Uninstalling leaves no Pod of the release; the add-on
/// release the hook installed stays with the ITS, as upstream's does, and is uninstalled here
/// after.
///
/// The ITS's `clusteradm init` hook is left out (`install_clusteradm: false`): the Go module
/// proxy serves no version of clusteradm, so no image of it can be built here; OCM's hub CRDs,
/// which it would install first, are applied by the test.
async fn the_kubeflex_path_runs_as_containers(ctx: Ctx) -> anyhow::Result<()> {
    real_node(&ctx, HOSTING).await?;
    let started = Instant::now();
    let hub_image = ctx.stack.push_image("ks-hub")?;
    let addon_image = ctx.stack.push_image("ks-addon")?;
    let kubectl = ctx.stack.push_tool_image("kubectl")?;
    let helm = ctx.stack.push_tool_image("helm")?;
    let (addon_chart, addon_version) = ctx.stack.push_chart(&repo_root().join("charts/ks-status-addon"))?;
    println!(
        "images and the add-on chart pushed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    ctx.stack.free_spare_wds().await?;
    // Only those it creates are removed after: OCM's CRDs there before are someone else's.
    let ocm_crds = ctx.stack.install_crd_set(HOSTING, "ocm-hub").await?;
    let tools = Tools::new(&ctx, "kubeflex-containers")?;
    let hosting = ctx.client(HOSTING).await?;
    let release = Release {
        context: HOSTING,
        namespace: ctx.namespace(HOSTING).await?,
        name: format!("kfc{}", std::process::id()),
        chart: "charts/kubestellar-rs",
    };
    let its = format!("{}-its", release.name);
    let secrets: Api<Secret> = Api::namespaced(hosting.clone(), &release.namespace);
    for (space, adopted) in [(HOSTING, its.as_str()), (SPARE_WDS, SPARE_WDS)] {
        let name = format!("{adopted}-bootstrap");
        apply(&secrets, ctx.stack.bootstrap_secret(space, &release.namespace, &name)?).await?;
    }
    let on_the_node = json!({
        "nodeSelector": {node::REAL_NODE_LABEL: "true"},
        "tolerations": [{"key": node::REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    });
    let (hub_repository, hub_tag) = hub_image.rsplit_once(':').context("the hub image's tag")?;
    let (addon_repository, addon_tag) = addon_image.rsplit_once(':').context("the add-on image's tag")?;
    let mut hub = on_the_node.clone();
    hub["image"] = json!({"repository": hub_repository, "tag": hub_tag});
    let mut controller = on_the_node.clone();
    // The hosting cluster counts no quotas (no resourcequota controller), so none is set.
    controller["maxWorkStatuses"] = json!(0);
    let values = json!({
        "hookNamePrefix": release.name,
        "ITSes": [{"name": its, "type": "external", "install_clusteradm": false}],
        "WDSes": [{"name": SPARE_WDS, "type": "external", "ITSName": "its1"}],
        "hub": hub,
        "its": {
            "kubectlImage": kubectl,
            "helmImage": helm,
            "hookPods": on_the_node,
            "statusAddon": {
                "chart": addon_chart,
                "version": addon_version,
                "plainHTTP": true,
                "values": {"image": {"repository": addon_repository, "tag": addon_tag}, "controller": controller},
            },
        },
    });
    let installed = Instant::now();
    tools.deploy("install", &release, &values)?;
    let outcome = kubeflex_path(&ctx, &its, [&hub_image, &addon_image], installed).await;
    let uninstalled = kubeflex_path_uninstalled(&ctx, &tools, &release, &its, &ocm_crds).await;
    outcome?;
    uninstalled?;
    ctx.delete_namespace(HOSTING, &release.namespace).await
}

/// The add-on controller's Pods, in the ITS.
const ADDON_PODS: &str = "app.kubernetes.io/name=ks-addon";
/// Where the ITS's hook installs the status add-on chart (the chart's defaults).
const ADDON_RELEASE: (&str, &str) = ("ks-status-addon", "open-cluster-management");

async fn kubeflex_path(
    ctx: &Ctx,
    its: &str,
    [hub_image, addon_image]: [&str; 2],
    installed: Instant,
) -> anyhow::Result<()> {
    let hosting = ctx.client(HOSTING).await?;
    let planes = Api::<DynamicObject>::all_with(hosting.clone(), &control_planes());
    for plane in [its, SPARE_WDS] {
        wait_for(
            &format!("ControlPlane {plane}'s hooks to complete"),
            DEADLINE,
            || async {
                let got = planes.get_opt(plane).await?;
                Ok(got.is_some_and(|p| p.data["status"]["postCreateHookCompleted"] == true))
            },
        )
        .await?;
    }
    println!(
        "helm install to both ControlPlanes' hooks completed: {:.1} s",
        installed.elapsed().as_secs_f64()
    );
    // The hook's Job ran on the real node, from the stack's helm image.
    let jobs: Api<Pod> = Api::namespaced(hosting.clone(), &system_namespace(its));
    let job_pods = jobs.list(&ListParams::default().labels("job-name")).await?.items;
    let real = node::node_name(HOSTING);
    anyhow::ensure!(
        !job_pods.is_empty()
            && job_pods.iter().all(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(real.as_str())
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
            }),
        "the ITS's hook Pods: {:?}",
        job_pods
            .iter()
            .map(|p| (
                p.name_any(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                p.status.as_ref().and_then(|s| s.phase.clone())
            ))
            .collect::<Vec<_>>()
    );
    // ks-addon from the chart the hook pulled, and ks-hub from the WDS's hook, as containers.
    for (namespace, selector, image) in [
        (ADDON_RELEASE.1.to_string(), ADDON_PODS, addon_image),
        (system_namespace(SPARE_WDS), HUB_PODS, hub_image),
    ] {
        let pods: Api<Pod> = Api::namespaced(hosting.clone(), &namespace);
        let pod = ready_pod(&pods, HOSTING, selector, 0).await?;
        let container = &pod.spec.as_ref().context("pod spec")?.containers[0];
        anyhow::ensure!(container.image.as_deref() == Some(image), "image {:?}", container.image);
        anyhow::ensure!(
            container.readiness_probe.is_some() && container.liveness_probe.is_some(),
            "{selector}: its container has no probes"
        );
        confined(container_pid(ctx, HOSTING, &pod)?)?;
    }
    // A workload reaches cluster1 through that ks-hub, and its status comes back.
    let Counted {
        ns, policies, policy, ..
    } = counted_on_cluster1(ctx, SPARE_WDS, "kubeflex-path").await?;
    println!(
        "helm install to a workload's status back through the containers: {:.1} s",
        installed.elapsed().as_secs_f64()
    );
    policies.delete(&policy, &DeleteParams::default()).await?;
    let on_wec = Api::<Deployment>::namespaced(ctx.client(WEC).await?, &ns);
    wait_until(
        on_wec,
        "counted",
        "gone from cluster1",
        DEADLINE,
        |d: Option<&Deployment>| d.is_none(),
    )
    .await?;
    ctx.delete_namespace(SPARE_WDS, &ns).await
}

/// `helm uninstall` of the hub chart: KubeFlex removes what it made for both ControlPlanes, and no
/// Pod of theirs is left. Then the add-on release the ITS's hook installed, and the OCM CRDs the
/// test created.
async fn kubeflex_path_uninstalled(
    ctx: &Ctx,
    tools: &Tools,
    release: &Release,
    its: &str,
    ocm_crds: &[CreatedCrd],
) -> anyhow::Result<()> {
    tools.uninstall(release)?;
    let hosting = ctx.client(HOSTING).await?;
    ctx.stack.spare_wds_objects_gone().await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(hosting.clone());
    let its_namespace = system_namespace(its);
    wait_for("the ITS's namespace to go", DEADLINE, || async {
        Ok(namespaces.get_opt(&its_namespace).await?.is_none())
    })
    .await?;
    let addon = Release {
        context: HOSTING,
        namespace: ADDON_RELEASE.1.to_string(),
        name: ADDON_RELEASE.0.to_string(),
        chart: "charts/ks-status-addon",
    };
    tools.uninstall(&addon)?;
    let pods: Api<Pod> = Api::all(hosting);
    wait_for("no Pod left on the hosting cluster's real node", DEADLINE, || async {
        let real = node::node_name(HOSTING);
        Ok(!pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(real.as_str())))
    })
    .await?;
    ctx.stack.remove_crds(HOSTING, ocm_crds).await
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

/// A Deployment sent to cluster1 from a WDS, its status returned.
struct Counted {
    ns: String,
    selector: Value,
    deployments: Api<Deployment>,
    policies: Api<BindingPolicy>,
    policy: String,
}

/// In a new namespace of `wds`: a Deployment of one replica and a singleton-status policy sending
/// it to cluster1; waits until its status is returned.
async fn counted_on_cluster1(ctx: &Ctx, wds: &str, policy: &str) -> anyhow::Result<Counted> {
    let client = ctx.client(wds).await?;
    let (ns, selector) = ctx.selected_namespace(wds).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let policies: Api<BindingPolicy> = Api::all(client);
    let policy = ctx.unique_name(policy);
    apply(&deployments, deployment(&selector, 1)).await?;
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
    Ok(Counted {
        ns,
        selector,
        deployments,
        policies,
        policy,
    })
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

/// A Pod of `selector` on `space`'s real node, Ready, its container started `restarts` times
/// before.
async fn ready_pod(pods: &Api<Pod>, space: &str, selector: &str, restarts: i32) -> anyhow::Result<Pod> {
    let real = node::node_name(space);
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

/// The host PID of the Pod's (first) container on `space`'s real node.
fn container_pid(ctx: &Ctx, space: &str, pod: &Pod) -> anyhow::Result<u32> {
    let status = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    let id = status
        .and_then(|c| c.first())
        .and_then(|c| c.container_id.as_deref())
        .with_context(|| format!("{} has no container ID", pod.name_any()))?;
    ctx.stack.container_pid(space, id)
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
