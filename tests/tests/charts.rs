//! The Helm charts in charts/ against the stack's real apiservers: `helm lint`; every rendered
//! object (and every object inside a KubeFlex PostCreateHook, rendered as KubeFlex would)
//! accepted by a server-side dry run; the hub chart installed into the `kubeflex` context
//! creating its ControlPlanes and PostCreateHooks; the status add-on chart installed into `its1`
//! creating the controller's objects and the ClusterManagementAddOn, from which OCM's
//! addon-manager enables the add-on on every WEC; upgrades that change what they should, and
//! uninstalls that leave nothing behind.
//!
//! Isolation from the stack and from other runs: releases go into namespaces of their own, and
//! cluster-scoped names start with this run's id (the release name, the hub chart's
//! `hookNamePrefix`, the add-on's name). The add-on chart is installed under another add-on name
//! than `addon-status`, which the stack's ks-addon owns. No ks-addon runs from the chart here:
//! the stack's stand-in kubelet runs our images on WECs only. OCM's placement controller, which
//! decides the chart's Placement, runs on its1 as part of the stack.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use ks_shared::names::{KUBEFLEX_CP_TYPE_LABEL, STATUS_ADDON_NAME};
use ks_shared::ocm::ManagedClusterAddOn;
use ks_tests::harness::{Ctx, apply, repo_root, run, wait_until};
use ks_tests::stack::kubeflex::{OPERATOR_PROCESS, system_namespace};
use ks_tests::stack::{SPARE_WDS, kubelet, wait_for};
use ks_tests::stack_test;
use ks_tests::tools::{Release, Tools, app_yaml, chart_path, policy_yaml, singleton_policy_yaml};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::runtime::wait::conditions;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const HUB_CHART: &str = "charts/kubestellar-rs";
const ADDON_CHART: &str = "charts/ks-status-addon";
const WORKSTATUS_CRD: &str = "control.kubestellar.io_workstatuses.yaml";
const ADDON_MANAGER: &str = "ocm-addon-manager-its1";
/// Prefix of this test's cluster-scoped names; a run adds its process id.
const RUN_PREFIX: &str = "ks-charts-";
/// The apiserver's own work (e.g. deleting an object without finalizers).
const PROMPTLY: Duration = Duration::from_secs(30);
/// A placement decision, then the addon-manager's reaction.
const OCM: Duration = Duration::from_secs(90);

ks_tests::stack_main!(
    run,
    vec![
        stack_test!(charts_pass_helm_lint_and_check_their_values, &[]),
        stack_test!(status_addon_crd_is_the_generated_one, &[]),
        stack_test!(charts_default_to_our_images, &[]),
        stack_test!(hub_chart_renders_its_monitoring, &[]),
        stack_test!(
            rendered_charts_pass_a_server_side_dry_run,
            &["apiserver-kubeflex", "apiserver-its1"]
        ),
        stack_test!(hub_chart_installs_upgrades_and_uninstalls, &["apiserver-kubeflex"]),
        stack_test!(hub_through_kubeflex_delivers, &[OPERATOR_PROCESS, "apiserver-wds2"]),
        stack_test!(
            status_addon_chart_installs_upgrades_and_uninstalls,
            &["apiserver-its1", ADDON_MANAGER, "ocm-placement-its1"]
        ),
    ]
);

// ---------------------------------------------------------------------------------------------
// Values

/// KubeFlex-mode values for the hub chart, with an ITS of each type.
fn kubeflex_values(prefix: &str, wdses: &[&str]) -> Value {
    json!({
        "hookNamePrefix": prefix,
        "ITSes": [
            {"name": format!("{prefix}-its")},
            {"name": format!("{prefix}-host"), "type": "host", "install_clusteradm": false},
            {"name": format!("{prefix}-ext"), "type": "external"},
        ],
        "WDSes": wdses.iter().map(|w| json!({
            "name": format!("{prefix}-{w}"), "ITSName": format!("{prefix}-its"), "APIGroups": ",apps",
        })).collect::<Vec<_>>(),
    })
}

fn direct_values() -> Value {
    json!({
        "mode": "direct",
        "ITSes": [{"name": "its1", "kubeconfigSecret": {"name": "its1-kubeconfig"}}],
        "WDSes": [{"name": "wds1", "kubeconfigSecret": {"name": "wds1-kubeconfig", "key": "config"}}],
        "hub": {"otlpEndpoint": "http://jaeger:4317", "logFormat": "json"},
    })
}

/// `its` values of the hub chart: both ITS hook Jobs placed on tainted nodes, the status add-on
/// chart pulled over plain HTTP.
fn its_hook_values() -> Value {
    json!({
        "hookPods": {
            "nodeSelector": {"example.com/pool": "infra"},
            "tolerations": [{"key": "example.com/infra", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "statusAddon": {"plainHTTP": true},
    })
}

fn image(binary: &str) -> String {
    format!("ghcr.io/kubestellar-rs/{binary}:{VERSION}")
}

// ---------------------------------------------------------------------------------------------
// Tests

async fn charts_pass_helm_lint_and_check_their_values(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "lint")?;
    let manual = json!({"addon": {"installStrategy": "Manual"}, "controller": {"installAll": true}});
    let mut its_hooks = kubeflex_values("lint", &["wds"]);
    its_hooks["its"] = its_hook_values();
    let good = [
        (HUB_CHART, json!({})),
        (HUB_CHART, kubeflex_values("lint", &["wds"])),
        (HUB_CHART, its_hooks),
        (HUB_CHART, direct_values()),
        (ADDON_CHART, json!({})),
        (ADDON_CHART, manual),
    ];
    for (chart, values) in &good {
        let file = tools.values_file(values)?;
        tools
            .helm(&["lint", "--strict", &chart_path(chart), "--values", &file])
            .with_context(|| format!("helm lint {chart} with {values}"))?;
    }

    // A WDS may leave out ITSName when the release has one ITS; ks-hub always gets a name.
    let one_its = json!({"ITSes": [{"name": "i"}], "WDSes": [{"name": "w"}]});
    let rendered = tools.render(HUB_CHART, "ns", &one_its)?;
    let wds = find(&rendered, "ControlPlane", "w")?;
    ensure!(wds["spec"]["globalVars"]["ITSName"] == "i", "{wds}");

    // Values that cannot work fail the install, naming the problem.
    let direct_without_its_secret = json!({"mode": "direct", "ITSes": [{"name": "i"}], "WDSes": [{"name": "w", "kubeconfigSecret": {"name": "s"}}]});
    let bad = [
        (
            HUB_CHART,
            json!({"mode": "kubeflex-ish"}),
            "mode must be kubeflex or direct",
        ),
        (HUB_CHART, json!({"WDSes": [{"name": "w"}]}), "WDSes w: set ITSName"),
        (
            HUB_CHART,
            json!({"ITSes": [{"name": "i", "type": "k3s"}]}),
            "ITSes i: type must be",
        ),
        (
            HUB_CHART,
            direct_without_its_secret,
            "needs an ITSes entry with kubeconfigSecret.name",
        ),
        (
            ADDON_CHART,
            json!({"addon": {"installStrategy": "All"}}),
            "installStrategy must be",
        ),
        // values.schema.json: a misspelt key or a wrong type is refused, not ignored.
        (
            HUB_CHART,
            json!({"hubb": {}}),
            "additional properties 'hubb' not allowed",
        ),
        (HUB_CHART, json!({"hub": {"port": "8080"}}), "got string, want integer"),
        (
            HUB_CHART,
            json!({"monitoring": {"serviceMonitor": {"intervall": "1m"}}}),
            "additional properties 'intervall' not allowed",
        ),
        (
            HUB_CHART,
            json!({"its": {"hookPods": {"nodeSelectors": {}}}}),
            "additional properties 'nodeSelectors' not allowed",
        ),
        (
            ADDON_CHART,
            json!({"agent": {"imag": {}}}),
            "additional properties 'imag' not allowed",
        ),
        // Upstream's values are named, with what to set instead.
        (HUB_CHART, json!({"InstallPCHs": false}), "set installPostCreateHooks"),
        (HUB_CHART, json!({"verbosity": {"default": 2}}), "set hub.logLevel"),
        (
            ADDON_CHART,
            json!({"controller": {"verbosity": 2}}),
            "set controller.logLevel",
        ),
        (
            ADDON_CHART,
            json!({"agent": {"v": 4}}),
            "set per WEC with an AddOnDeploymentConfig",
        ),
    ];
    for (chart, values, message) in &bad {
        match tools.render(chart, "ns", values) {
            Ok(_) => bail!("{chart} rendered with {values}"),
            Err(err) => ensure!(format!("{err:#}").contains(message), "{chart} with {values}: {err:#}"),
        }
    }
    // The pod settings clusters ask for reach the Deployments and ServiceAccounts of both charts.
    let pod = json!({
        "podLabels": {"team": "a"}, "priorityClassName": "high",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}],
        "extraEnv": [{"name": "OTEL_EXPORTER_OTLP_TIMEOUT", "value": "5000"}],
        "serviceAccount": {"annotations": {"example.com/role": "r"}},
    });
    let mut direct = direct_values();
    for (key, value) in pod.as_object().into_iter().flatten() {
        direct["hub"][key] = value.clone();
    }
    for (chart, values, deployment, account) in [
        (HUB_CHART, direct, "ks-hub-wds1", "t-ks-hub"),
        (
            ADDON_CHART,
            json!({"controller": pod}),
            "t-ks-status-addon",
            "t-ks-status-addon",
        ),
    ] {
        let rendered = tools.render(chart, "ns", &values)?;
        let spec = &find(&rendered, "Deployment", deployment)?["spec"]["template"];
        ensure!(spec["metadata"]["labels"]["team"] == "a", "{chart}: {spec}");
        ensure!(spec["spec"]["priorityClassName"] == "high", "{chart}: {spec}");
        ensure!(
            spec["spec"]["topologySpreadConstraints"][0]["maxSkew"] == 1,
            "{chart}: {spec}"
        );
        let env = &spec["spec"]["containers"][0]["env"];
        ensure!(
            env.as_array()
                .into_iter()
                .flatten()
                .any(|e| e["name"] == "OTEL_EXPORTER_OTLP_TIMEOUT"),
            "{chart}: {env}"
        );
        let account = find(&rendered, "ServiceAccount", account)?;
        ensure!(
            account["metadata"]["annotations"]["example.com/role"] == "r",
            "{chart}: {account}"
        );
    }
    // Both ITS hook Jobs, as KubeFlex creates them, run where `its.hookPods` says (nowhere in
    // particular when it is empty), and helm pulls the add-on chart with --plain-http only when
    // `its.statusAddon.plainHTTP` is set.
    for set in [false, true] {
        let mut values = kubeflex_values("pods", &["wds"]);
        if set {
            values["its"] = its_hook_values();
        }
        let rendered = tools.render(HUB_CHART, "ns", &values)?;
        let jobs = its_hook_jobs(&rendered, "pods")?;
        for job in &jobs {
            let pod = &job["spec"]["template"]["spec"];
            for field in ["nodeSelector", "tolerations"] {
                let want = if set {
                    its_hook_values()["hookPods"][field].clone()
                } else {
                    Value::Null
                };
                ensure!(pod[field] == want, "its {values}: {field} of {job}");
            }
        }
        let helm = container(&jobs[1])?;
        ensure!(args(helm).contains(&"--plain-http") == set, "its {values}: {helm}");
    }

    // `helm lint --strict` says so too (it only logs what a template fails).
    for (chart, values, message) in [
        (
            HUB_CHART,
            json!({"hubb": {}}),
            "additional properties 'hubb' not allowed",
        ),
        (HUB_CHART, json!({"InstallPCHs": false}), "set installPostCreateHooks"),
    ] {
        let file = tools.values_file(&values)?;
        match tools.helm(&["lint", "--strict", &chart_path(chart), "--values", &file]) {
            Ok(out) => bail!("helm lint {chart} passed with {values}: {out}"),
            Err(err) => ensure!(
                format!("{err:#}").contains(message),
                "helm lint {chart} with {values}: {err:#}"
            ),
        }
    }
    Ok(())
}

/// With monitoring on, the ServiceMonitor selects the Service each ks-hub has (in kubeflex mode
/// through the hook, in its WDS's namespace; in direct mode beside the Deployment), the
/// PrometheusRule names every alert, and the dashboard ConfigMap holds the dashboard as shipped.
/// Off by default: nothing of it is rendered.
async fn hub_chart_renders_its_monitoring(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "monitoring")?;
    let on = json!({
        "serviceMonitor": {"enabled": true, "labels": {"release": "prom"}},
        "prometheusRule": {"enabled": true, "rolloutLatencyObjectiveSeconds": 12},
        "dashboard": {"enabled": true},
    });
    let monitoring_kinds = ["ServiceMonitor", "PrometheusRule", "ConfigMap"];
    let off = tools.render(HUB_CHART, "ns", &direct_values())?;
    let stray: Vec<&Value> = off
        .iter()
        .filter(|o| monitoring_kinds.contains(&o["kind"].as_str().unwrap_or_default()))
        .collect();
    ensure!(stray.is_empty(), "monitoring rendered while off: {stray:?}");

    let mut kubeflex = kubeflex_values("mon", &["wds"]);
    kubeflex["monitoring"] = on.clone();
    let rendered = tools.render(HUB_CHART, "ns", &kubeflex)?;
    let monitor = find(&rendered, "ServiceMonitor", "t-ks-hub")?;
    ensure!(monitor["metadata"]["labels"]["release"] == "prom", "{monitor}");
    ensure!(
        monitor["spec"]["namespaceSelector"]["matchNames"] == json!(["mon-wds-system"]),
        "{monitor}"
    );
    ensure!(monitor["spec"]["endpoints"][0]["port"] == "http", "{monitor}");
    let hook = find(&rendered, "PostCreateHook", "mon-hub")?;
    let templates = hook_templates(hook);
    let service = templates
        .iter()
        .find(|t| t["kind"] == "Service")
        .context("no Service in the hub's hook")?;
    let deployment = templates
        .iter()
        .find(|t| t["kind"] == "Deployment")
        .context("no Deployment in the hub's hook")?;
    selects(monitor, service)?;
    ensure!(
        matches(
            &service["spec"]["selector"],
            &deployment["spec"]["template"]["metadata"]["labels"]
        ),
        "the Service selects no ks-hub pod: {service}"
    );
    let rule = find(&rendered, "PrometheusRule", "t-kubestellar")?;
    let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["alert"].as_str())
        .collect();
    for alert in [
        "KubeStellarHubDown",
        "KubeStellarHubAbsent",
        "KubeStellarWatchStuck",
        "KubeStellarReconcileErrors",
        "KubeStellarQueueGrowing",
        "KubeStellarNoLeader",
        "KubeStellarAgentUnavailable",
        "KubeStellarRolloutsSlow",
    ] {
        ensure!(alerts.contains(&alert), "no {alert} in {alerts:?}");
    }
    ensure!(
        rule.to_string().contains("> 12"),
        "the latency objective is not in the rule: {rule}"
    );
    let dashboard = find(&rendered, "ConfigMap", "t-kubestellar-dashboard")?;
    ensure!(
        dashboard["metadata"]["labels"]["grafana_dashboard"] == "1",
        "{dashboard}"
    );
    let shipped: Value = serde_json::from_slice(&std::fs::read(
        repo_root().join(HUB_CHART).join("dashboards/kubestellar-rs.json"),
    )?)?;
    let served: Value = serde_json::from_str(dashboard["data"]["kubestellar-rs.json"].as_str().unwrap_or_default())?;
    ensure!(
        served == shipped,
        "the ConfigMap's dashboard differs from dashboards/kubestellar-rs.json"
    );

    let mut direct = direct_values();
    direct["monitoring"] = on;
    let rendered = tools.render(HUB_CHART, "ns", &direct)?;
    let service = find(&rendered, "Service", "ks-hub-wds1")?;
    let monitor = find(&rendered, "ServiceMonitor", "t-ks-hub")?;
    selects(monitor, service)?;
    ensure!(
        monitor["spec"]["namespaceSelector"]["matchNames"] == json!(["ns"]),
        "{monitor}"
    );
    ensure!(
        service["spec"]["selector"]["app.kubernetes.io/instance"] == "wds1",
        "{service}"
    );
    Ok(())
}

/// `objects` but `helm test`'s Pods: each names a ServiceAccount that a dry run does not store
/// (they run for real in tests/tests/containers.rs).
fn without_test_pods(objects: Vec<Value>) -> Vec<Value> {
    objects
        .into_iter()
        .filter(|o| !(o["kind"] == "Pod" && o["metadata"]["annotations"]["helm.sh/hook"] == "test"))
        .collect()
}

/// Fails unless the ServiceMonitor `monitor` selects the Service `service`.
fn selects(monitor: &Value, service: &Value) -> anyhow::Result<()> {
    ensure!(
        matches(
            &monitor["spec"]["selector"]["matchLabels"],
            &service["metadata"]["labels"]
        ),
        "the ServiceMonitor misses {service}"
    );
    Ok(())
}

/// Whether `labels` has every label of `selector` (a matchLabels map).
fn matches(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| s.iter().all(|(k, v)| labels[k] == *v))
}

async fn status_addon_crd_is_the_generated_one(_ctx: Ctx) -> anyhow::Result<()> {
    let generated = std::fs::read(repo_root().join("config/crds").join(WORKSTATUS_CRD))?;
    let crds = repo_root().join(ADDON_CHART).join("crds");
    ensure!(
        std::fs::read(crds.join(WORKSTATUS_CRD))? == generated,
        "{ADDON_CHART}/crds/{WORKSTATUS_CRD} differs from config/crds/{WORKSTATUS_CRD}: copy it over after `make crds`"
    );
    let files = std::fs::read_dir(&crds)?.count();
    ensure!(files == 1, "{ADDON_CHART}/crds holds more than the WorkStatus CRD");
    Ok(())
}

/// The charts' default images are the ones `make images` builds (named in its index.json as
/// ghcr.io/kubestellar-rs/<binary>:<crate version>), and the charts carry the crate version, in
/// their versions and in the images they list for Artifact Hub.
async fn charts_default_to_our_images(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "images")?;
    for (chart, binaries) in [
        (HUB_CHART, &["ks-hub"][..]),
        (ADDON_CHART, &["ks-addon", "ks-agent"][..]),
    ] {
        let meta: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(repo_root().join(chart).join("Chart.yaml"))?)?;
        ensure!(
            meta["appVersion"] == VERSION && meta["version"] == VERSION,
            "{chart}/Chart.yaml: {meta}"
        );
        let listed: Value = serde_saphyr::from_str(
            meta["annotations"]["artifacthub.io/images"]
                .as_str()
                .unwrap_or_default(),
        )?;
        let images: Vec<&str> = listed
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["image"].as_str())
            .collect();
        let ours: Vec<String> = binaries.iter().map(|b| image(b)).collect();
        ensure!(
            images == ours,
            "{chart}/Chart.yaml lists the images {images:?}, not {ours:?}"
        );
        ensure!(
            meta["annotations"]["artifacthub.io/license"] == "Apache-2.0",
            "{chart}/Chart.yaml: {meta}"
        );
    }
    ensure!(
        std::fs::read_to_string(repo_root().join("LICENSE"))?.contains("Apache License"),
        "the charts say Apache-2.0; LICENSE should hold it"
    );
    let hub = tools.render(HUB_CHART, "ns", &kubeflex_values("img", &["wds"]))?;
    let in_hook = hook_deployment(find(&hub, "PostCreateHook", "img-hub")?)?;
    ensure!(container(&in_hook)?["image"] == image("ks-hub").as_str(), "{in_hook}");
    let direct = tools.render(HUB_CHART, "ns", &direct_values())?;
    let direct = container(find(&direct, "Deployment", "ks-hub-wds1")?)?;
    ensure!(direct["image"] == image("ks-hub").as_str(), "{direct}");

    let addon = tools.render(ADDON_CHART, "ns", &json!({}))?;
    let controller = container(find(&addon, "Deployment", "t-ks-status-addon")?)?;
    ensure!(controller["image"] == image("ks-addon").as_str(), "{controller}");
    let agent_image = format!("--agent-image={}", image("ks-agent"));
    ensure!(args(controller).contains(&agent_image.as_str()), "{controller}");
    Ok(())
}

async fn rendered_charts_pass_a_server_side_dry_run(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "dry-run")?;
    for context in ["kubeflex", "its1"] {
        remove_leftovers(&ctx, context, "rendered_charts_pass_a_server_side_dry_run", &[]).await?;
    }
    let namespace = ctx.namespace("kubeflex").await?;
    // With the ITS hooks' settings, so that the apiserver checks what they add to the Jobs.
    let mut values = kubeflex_values(&format!("{}-dry", run_id()), &["wds"]);
    values["its"] = its_hook_values();
    let hub = without_test_pods(tools.render(HUB_CHART, &namespace, &values)?);
    // What goes into a namespace the chart (or KubeFlex: a WDS's `<wds>-system`, where `helm
    // test` grants its Pod) creates can be tried only once that namespace exists.
    let mut created: Vec<&str> = hub
        .iter()
        .filter(|o| o["kind"] == "Namespace")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .chain(hub.iter().filter_map(|o| o["metadata"]["namespace"].as_str()))
        .filter(|n| *n != namespace)
        .collect();
    created.sort_unstable();
    created.dedup();
    let namespaces = Api::<Namespace>::all(ctx.client("kubeflex").await?);
    for name in &created {
        apply(
            &namespaces,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )
        .await?;
    }
    // kubectl takes one namespace per apply: the objects of each namespace apart.
    let mut by_namespace: std::collections::BTreeMap<&str, Vec<Value>> = Default::default();
    for object in &hub {
        let theirs = object["metadata"]["namespace"].as_str().unwrap_or(&namespace);
        by_namespace.entry(theirs).or_default().push(object.clone());
    }
    for (theirs, objects) in by_namespace {
        tools
            .dry_run("kubeflex", theirs, &objects)
            .with_context(|| format!("hub chart, kubeflex mode, namespace {theirs}"))?;
    }
    for name in created {
        ctx.delete_namespace("kubeflex", name).await?;
    }
    // What KubeFlex creates from each hook, with a WDS's or an ITS's variables.
    for hook in hub.iter().filter(|o| o["kind"] == "PostCreateHook") {
        let name = hook["metadata"]["name"].as_str().unwrap_or_default();
        let vars = [
            ("Namespace", namespace.as_str()),
            ("ControlPlaneName", "cp1"),
            ("HookName", name),
            ("APIGroups", ",apps"),
            ("ITSName", "its1"),
            ("ITSSecretName", "vc-vcluster"),
            ("ITSSecretKey", "config-incluster"),
        ];
        let objects = hook_templates(hook)
            .iter()
            .map(|t| kubeflex_render(t, &vars))
            .collect::<anyhow::Result<Vec<_>>>()?;
        tools
            .dry_run("kubeflex", &namespace, &objects)
            .with_context(|| format!("objects of PostCreateHook {name}"))?;
    }
    let direct = without_test_pods(tools.render(HUB_CHART, &namespace, &direct_values())?);
    tools
        .dry_run("kubeflex", &namespace, &direct)
        .context("hub chart, direct mode")?;
    ctx.delete_namespace("kubeflex", &namespace).await?;

    // The status add-on as users install it: the ClusterManagementAddOn is `addon-status`.
    let namespace = ctx.namespace("its1").await?;
    let addon = tools.render(ADDON_CHART, &namespace, &json!({}))?;
    find(&addon, "ClusterManagementAddOn", STATUS_ADDON_NAME)?;
    find(
        &addon,
        "CustomResourceDefinition",
        "workstatuses.control.kubestellar.io",
    )?;
    tools
        .dry_run("its1", &namespace, &addon)
        .context("status add-on chart")?;
    ctx.delete_namespace("its1", &namespace).await
}

async fn hub_chart_installs_upgrades_and_uninstalls(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "hub")?;
    let hosting = ctx.client("kubeflex").await?;
    let control_planes = Api::<DynamicObject>::all_with(hosting.clone(), &kubeflex("ControlPlane", "controlplanes"));
    let hooks = Api::<DynamicObject>::all_with(hosting.clone(), &kubeflex("PostCreateHook", "postcreatehooks"));
    let test = "hub_chart_installs_upgrades_and_uninstalls";
    remove_leftovers(&ctx, "kubeflex", test, &[&control_planes, &hooks]).await?;
    let prefix = run_id();
    let release = Release {
        context: "kubeflex",
        namespace: ctx.namespace("kubeflex").await?,
        name: prefix.clone(),
        chart: HUB_CHART,
    };
    let named = |suffix: &str| format!("{prefix}-{suffix}");

    tools.deploy("install", &release, &kubeflex_values(&prefix, &["wds"]))?;
    let its = control_planes.get(&named("its")).await?;
    expect_control_plane(
        &its,
        "its",
        "vcluster",
        &[&named("its-hub-init"), &named("status-addon")],
    )?;
    let secret = json!({"ITSSecretName": "vc-vcluster", "ITSSecretKey": "config-incluster"});
    ensure!(its.data["spec"]["globalVars"] == secret, "{}", its.data["spec"]);
    let host = control_planes.get(&named("host")).await?;
    expect_control_plane(&host, "its", "host", &[&named("status-addon")])?;
    let external = control_planes.get(&named("ext")).await?;
    let bootstrap =
        json!({"name": named("ext-bootstrap"), "namespace": release.namespace, "inClusterKey": "kubeconfig-incluster"});
    ensure!(
        external.data["spec"]["bootstrapSecretRef"] == bootstrap,
        "{}",
        external.data["spec"]
    );
    let wds = control_planes.get(&named("wds")).await?;
    expect_control_plane(&wds, "wds", "k8s", &[&named("hub")])?;
    ensure!(wds.data["spec"]["postCreateHooks"][0]["vars"] == json!({"APIGroups": ",apps"}));
    ensure!(wds.data["spec"]["globalVars"] == json!({"ITSName": named("its")}));
    for (hook, cp_type) in [("hub", "wds"), ("its-hub-init", "its"), ("status-addon", "its")] {
        let hook = hooks.get(&named(hook)).await?;
        ensure!(
            hook.labels().get(KUBEFLEX_CP_TYPE_LABEL).map(String::as_str) == Some(cp_type),
            "{hook:?}"
        );
        ensure!(!hook_templates(&serde_json::to_value(&hook)?).is_empty(), "{hook:?}");
    }

    // An upgrade adds a WDS and reaches into the hooks' objects.
    let mut upgraded = kubeflex_values(&prefix, &["wds", "wds2"]);
    upgraded["hub"] = json!({"logFormat": "json"});
    tools.deploy("upgrade", &release, &upgraded)?;
    control_planes.get(&named("wds2")).await?;
    let in_hook = hook_deployment(&serde_json::to_value(hooks.get(&named("hub")).await?)?)?;
    ensure!(args(container(&in_hook)?).contains(&"--log-format=json"), "{in_hook}");

    // An upgrade that drops the WDS deletes its ControlPlane.
    let wds2 = control_planes.get(&named("wds2")).await?;
    tools.deploy("upgrade", &release, &kubeflex_values(&prefix, &["wds"]))?;
    let uid = wds2.uid().unwrap_or_default();
    wait_until(
        control_planes.clone(),
        &wds2.name_any(),
        "deleted",
        PROMPTLY,
        conditions::is_deleted(&uid),
    )
    .await?;

    tools.uninstall(&release)?;
    ctx.delete_namespace(release.context, &release.namespace).await
}

/// The install a user does: the hub chart into the KubeFlex hosting cluster, with a WDS KubeFlex
/// adopts (`external`, the stack's spare WDS) and the ITS KubeFlex already has. KubeFlex runs the
/// chart's hook, the hosting cluster's kubelet runs the ks-hub it deploys, and a workload applied
/// with kubectl reaches both WECs with its status returned. Uninstalling leaves nothing behind.
async fn hub_through_kubeflex_delivers(ctx: Ctx) -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    const DEADLINE: Duration = Duration::from_secs(120);
    let tools = Tools::new(&ctx, "kubeflex-install")?;
    let hosting = ctx.client("kubeflex").await?;
    ctx.stack.free_spare_wds().await?;
    // With a real node the hosting cluster runs the hub's image, from the stack's registry.
    if ctx.stack.has_real_node("kubeflex") {
        ctx.stack.push_image("ks-hub")?;
    }
    let release = Release {
        context: "kubeflex",
        namespace: ctx.namespace("kubeflex").await?,
        name: format!("{}-kf", run_id()),
        chart: HUB_CHART,
    };
    let bootstrap = format!("{SPARE_WDS}-bootstrap");
    let secret = ctx.stack.bootstrap_secret(SPARE_WDS, &release.namespace, &bootstrap)?;
    apply(
        &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(hosting.clone(), &release.namespace),
        secret,
    )
    .await?;
    let values = json!({
        "hookNamePrefix": release.name,
        "WDSes": [{"name": SPARE_WDS, "type": "external", "ITSName": "its1"}],
        "hub": {"image": {"tag": VERSION}},
    });
    let installed = std::time::Instant::now();
    tools.deploy("install", &release, &values)?;

    let id = ctx.unique_name("kf");
    let workload = app_yaml(&id, "web", &format!("app.kubernetes.io/name: {id}"))
        + &policy_yaml(&id, "location-group: edge", &format!("app.kubernetes.io/name: {id}"))
        + &singleton_policy_yaml(&id, "cluster1", &format!("app.kubernetes.io/name: {id}"));
    // The CRDs come with the hub, which KubeFlex starts: the policies apply once it has.
    wait_for(
        "the hub to install the BindingPolicy CRD into the WDS",
        DEADLINE,
        || async {
            Ok(tools
                .kubectl(
                    SPARE_WDS,
                    &[
                        "get",
                        "crd",
                        "bindingpolicies.control.kubestellar.io",
                        "--ignore-not-found",
                        "-o",
                        "name",
                    ],
                )?
                .contains("bindingpolicies"))
        },
    )
    .await?;
    tools.kubectl_input(SPARE_WDS, &["apply", "-f", "-"], &workload)?;
    let available =
        |d: Option<&Deployment>| d.and_then(|d| d.status.as_ref()).and_then(|s| s.available_replicas) == Some(1);
    for wec in ["cluster1", "cluster2"] {
        let on_wec = Api::<Deployment>::namespaced(ctx.client(wec).await?, &id);
        wait_until(on_wec, "web", &format!("available on {wec}"), DEADLINE, available).await?;
    }
    eprintln!(
        "from helm install to the workload available on both WECs: {:.1}s",
        installed.elapsed().as_secs_f64()
    );
    let in_wds = Api::<Deployment>::namespaced(ctx.client(SPARE_WDS).await?, &id);
    wait_until(in_wds, "web", "given cluster1's status", DEADLINE, available).await?;
    // The hub ran as its ServiceAccount: it may read its WDS's and its ITS's kubeconfig and no
    // other Secret, and nothing of the hosting cluster but the ControlPlanes.
    let hub_namespace = system_namespace(SPARE_WDS);
    let requests = [
        (true, "get", "", "secrets", hub_namespace.as_str(), "admin-kubeconfig"),
        (true, "get", "", "secrets", "its1-system", "admin-kubeconfig"),
        (false, "get", "", "secrets", "its1-system", "other"),
        (false, "get", "", "secrets", "kube-system", "admin-kubeconfig"),
        (false, "list", "", "secrets", "", ""),
        (true, "list", "tenancy.kflex.kubestellar.org", "controlplanes", "", ""),
        (
            false,
            "update",
            "tenancy.kflex.kubestellar.org",
            "controlplanes",
            "",
            SPARE_WDS,
        ),
    ];
    expect_access(&hosting, &hub_namespace, "ks-hub", &requests, "the hub's").await?;

    // The workload leaves the WECs with its policies, then the release goes.
    tools.kubectl(SPARE_WDS, &["delete", "bindingpolicy", &id, &format!("{id}-singleton")])?;
    for wec in ["cluster1", "cluster2"] {
        let on_wec = Api::<Deployment>::namespaced(ctx.client(wec).await?, &id);
        wait_until(
            on_wec,
            "web",
            &format!("gone from {wec}"),
            DEADLINE,
            |d: Option<&Deployment>| d.is_none(),
        )
        .await?;
    }
    tools.kubectl(SPARE_WDS, &["delete", "namespace", &id, "--wait=false"])?;
    tools.uninstall(&release)?;
    let hub = kubelet::pod_process("kubeflex", &system_namespace(SPARE_WDS), "ks-hub");
    wait_for("the hub to stop", DEADLINE, || async {
        Ok(ctx.stack.procs.running(&hub).is_none())
    })
    .await?;
    ctx.stack.spare_wds_objects_gone().await?;
    ctx.delete_namespace(release.context, &release.namespace).await
}

async fn status_addon_chart_installs_upgrades_and_uninstalls(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "addon")?;
    let hub = ctx.client("its1").await?;
    let cmas = Api::<DynamicObject>::all_with(hub.clone(), &ocm("addon", "v1alpha1", "ClusterManagementAddOn"));
    let cluster_roles = Api::all_with(hub.clone(), &ApiResource::erase::<ClusterRole>(&()));
    let cluster_role_bindings = Api::all_with(hub.clone(), &ApiResource::erase::<ClusterRoleBinding>(&()));
    let test = "status_addon_chart_installs_upgrades_and_uninstalls";
    remove_leftovers(&ctx, "its1", test, &[&cmas, &cluster_roles, &cluster_role_bindings]).await?;
    let release = Release {
        context: "its1",
        namespace: ctx.namespace("its1").await?,
        name: run_id(),
        chart: ADDON_CHART,
    };
    let addon = format!("{}-addon", run_id());
    // A second add-on controller beside the stack's own (which serves addon-status through the
    // same chart): its Deployment is not run, or two controllers would manage every WEC's agent.
    let idle = json!({"replicas": 0});
    tools.deploy(
        "install",
        &release,
        &json!({"addon": {"name": addon}, "controller": idle}),
    )?;

    // The controller and its RBAC.
    let objects = tools.manifest(&release)?;
    let name = format!("{}-ks-status-addon", release.name);
    for kind in ["ServiceAccount", "Deployment", "ClusterRole", "ClusterRoleBinding"] {
        find(&objects, kind, &name)?;
    }
    for kind in ["Role", "RoleBinding"] {
        find(&objects, kind, &format!("{name}-leader-election"))?;
    }
    let controller_args = args(container(find(&objects, "Deployment", &name)?)?).join(" ");
    for expected in [
        format!("--agent-image={}", image("ks-agent")),
        format!("--leader-elect-namespace={}", release.namespace),
    ] {
        ensure!(controller_args.contains(&expected), "{controller_args}");
    }
    controller_may_do_exactly_its_job(&hub, &release.namespace, &name).await?;

    // The add-on, and OCM enabling it on every WEC through the Placement.
    let strategy = cmas.get(&addon).await?.data["spec"]["installStrategy"].clone();
    let placement = json!({"name": addon, "namespace": release.namespace});
    ensure!(
        strategy["type"] == "Placements"
            && strategy["placements"].as_array().map(Vec::len) == Some(1)
            && strategy["placements"][0]["name"] == placement["name"]
            && strategy["placements"][0]["namespace"] == placement["namespace"],
        "{strategy}"
    );
    find(&objects, "Placement", &addon)?;
    find(&objects, "ManagedClusterSetBinding", "global")?;
    let wecs = ctx.stack.wec_names();
    for wec in &wecs {
        let present = |a: Option<&ManagedClusterAddOn>| a.is_some();
        wait_until(addons(&hub, wec), &addon, "created by OCM", OCM, present)
            .await
            .with_context(|| format!("the add-on on {wec}"))?;
    }

    // An upgrade narrows the Placement to the first WEC and changes the agent image.
    let narrowed = json!({
        "addon": {"name": addon, "clusterSelector": {"matchLabels": {"name": wecs[0]}}},
        "agent": {"image": {"tag": "upgraded"}, "otlpEndpoint": "http://jaeger-collector.tracing:4317"},
        "controller": idle,
    });
    tools.deploy("upgrade", &release, &narrowed)?;
    let objects = tools.manifest(&release)?;
    let controller_args = args(container(find(&objects, "Deployment", &name)?)?).join(" ");
    for expected in [
        "--agent-image=ghcr.io/kubestellar-rs/ks-agent:upgraded",
        "--agent-otlp-endpoint=http://jaeger-collector.tracing:4317",
    ] {
        ensure!(controller_args.contains(expected), "{controller_args}");
    }
    for wec in &wecs[1..] {
        addon_is_gone(&hub, wec, &addon)
            .await
            .with_context(|| format!("{wec} left the Placement"))?;
    }
    addons(&hub, &wecs[0])
        .get(&addon)
        .await
        .context("the add-on left the WEC the Placement still selects")?;

    tools.uninstall(&release)?;
    for wec in &wecs {
        addon_is_gone(&hub, wec, &addon)
            .await
            .with_context(|| format!("{wec} after uninstall"))?;
    }
    ctx.delete_namespace(release.context, &release.namespace).await
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> anyhow::Result<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .with_context(|| format!("no {kind} {name} rendered"))
}

fn hook_templates(hook: &Value) -> Vec<Value> {
    hook["spec"]["templates"].as_array().cloned().unwrap_or_default()
}

fn hook_deployment(hook: &Value) -> anyhow::Result<Value> {
    hook_templates(hook)
        .into_iter()
        .find(|t| t["kind"] == "Deployment")
        .with_context(|| format!("no Deployment in the hook {}", hook["metadata"]["name"]))
}

/// The Jobs of the ITS hooks `<prefix>-its-hub-init` and `<prefix>-status-addon`, in that order,
/// as KubeFlex creates them for an ITS.
fn its_hook_jobs(rendered: &[Value], prefix: &str) -> anyhow::Result<Vec<Value>> {
    ["its-hub-init", "status-addon"]
        .iter()
        .map(|hook| {
            let name = format!("{prefix}-{hook}");
            let job = hook_templates(find(rendered, "PostCreateHook", &name)?)
                .into_iter()
                .find(|t| t["kind"] == "Job")
                .with_context(|| format!("no Job in the hook {name}"))?;
            let vars = [
                ("HookName", name.as_str()),
                ("ITSSecretName", "vc-vcluster"),
                ("ITSSecretKey", "config-incluster"),
            ];
            kubeflex_render(&job, &vars)
        })
        .collect()
}

/// A hook template as KubeFlex renders it (Go templates over the object's JSON text), for the
/// plain `{{.Name}}` references the charts use; anything else is left and reported.
fn kubeflex_render(template: &Value, vars: &[(&str, &str)]) -> anyhow::Result<Value> {
    let mut text = template.to_string();
    for (name, value) in vars {
        text = text.replace(&format!("{{{{.{name}}}}}"), value);
    }
    ensure!(
        !text.contains("{{"),
        "a template reference KubeFlex would have to resolve is left: {text}"
    );
    Ok(serde_json::from_str(&text)?)
}

fn container(deployment: &Value) -> anyhow::Result<&Value> {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    ensure!(container.is_object(), "no container in {deployment}");
    Ok(container)
}

fn args(container: &Value) -> Vec<&str> {
    container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The stack

fn kubeflex(kind: &str, plural: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk("tenancy.kflex.kubestellar.org", "v1alpha1", kind);
    ApiResource::from_gvk_with_plural(&gvk, plural)
}

fn ocm(group: &str, version: &str, kind: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk(&format!("{group}.open-cluster-management.io"), version, kind);
    ApiResource::from_gvk(&gvk)
}

fn addons(hub: &Client, wec: &str) -> Api<ManagedClusterAddOn> {
    Api::namespaced(hub.clone(), wec)
}

async fn addon_is_gone(hub: &Client, wec: &str, name: &str) -> anyhow::Result<()> {
    let absent = |a: Option<&ManagedClusterAddOn>| a.is_none();
    wait_until(addons(hub, wec), name, "deleted", OCM, absent).await?;
    Ok(())
}

fn expect_control_plane(cp: &DynamicObject, cp_type: &str, space_type: &str, hooks: &[&str]) -> anyhow::Result<()> {
    let spec = &cp.data["spec"];
    let names: Vec<&str> = spec["postCreateHooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["hookName"].as_str())
        .collect();
    ensure!(
        cp.labels().get(KUBEFLEX_CP_TYPE_LABEL).map(String::as_str) == Some(cp_type)
            && spec["type"] == space_type
            && spec["backend"] == "shared"
            && spec["waitForPostCreateHooks"] == true
            && names == hooks,
        "ControlPlane {}: labels {:?}, spec {spec}",
        cp.name_any(),
        cp.labels()
    );
    Ok(())
}

/// The prefix of this run's cluster-scoped names.
fn run_id() -> String {
    format!("{RUN_PREFIX}{}", std::process::id())
}

/// Deletes what an interrupted run of `test` left in `context`: cluster-scoped objects (which
/// their release's namespace going does not take along) named with another run's id, and the
/// test's namespaces of other runs (`<test>-<pid>-<n>`, see `Ctx::namespace`).
async fn remove_leftovers(ctx: &Ctx, context: &str, test: &str, apis: &[&Api<DynamicObject>]) -> anyhow::Result<()> {
    let leftover = |name: &str, prefix: &str, ours: &str| name.starts_with(prefix) && !name.starts_with(ours);
    for api in apis {
        for object in api.list(&ListParams::default()).await? {
            if leftover(&object.name_any(), RUN_PREFIX, &run_id()) {
                api.delete(&object.name_any(), &DeleteParams::default()).await?;
            }
        }
    }
    let prefix = format!("{}-", test.replace('_', "-"));
    let ours = format!("{prefix}{}-", std::process::id());
    let namespaces = Api::<Namespace>::all(ctx.client(context).await?);
    for namespace in namespaces.list(&ListParams::default()).await? {
        if leftover(&namespace.name_any(), &prefix, &ours) && namespace.metadata.deletion_timestamp.is_none() {
            namespaces
                .delete(&namespace.name_any(), &DeleteParams::default())
                .await?;
        }
    }
    Ok(())
}

/// The chart's RBAC lets ks-addon make each request its code makes (addon/src), and no more
/// than needed: e.g. no Secrets, and the ClusterManagementAddOn of no other add-on.
async fn controller_may_do_exactly_its_job(hub: &Client, namespace: &str, account: &str) -> anyhow::Result<()> {
    const ADDON: &str = "addon.open-cluster-management.io";
    const CERTIFICATES: &str = "certificates.k8s.io";
    const WORK: &str = "work.open-cluster-management.io";
    const RBAC: &str = "rbac.authorization.k8s.io";
    let cluster = "cluster1";
    // (allowed, verb, group, resource/subresource, namespace, name)
    let requests = [
        (true, "patch", ADDON, "clustermanagementaddons", "", STATUS_ADDON_NAME),
        (true, "create", ADDON, "clustermanagementaddons", "", ""),
        (false, "patch", ADDON, "clustermanagementaddons", "", "another-addon"),
        (
            true,
            "patch",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "",
            "workstatuses.control.kubestellar.io",
        ),
        (
            false,
            "patch",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "",
            "manifestworks.work.open-cluster-management.io",
        ),
        (true, "watch", ADDON, "managedclusteraddons", "", ""),
        (
            true,
            "patch",
            ADDON,
            "managedclusteraddons/status",
            cluster,
            STATUS_ADDON_NAME,
        ),
        (
            true,
            "update",
            ADDON,
            "managedclusteraddons/finalizers",
            cluster,
            STATUS_ADDON_NAME,
        ),
        (true, "get", ADDON, "addondeploymentconfigs", cluster, "config"),
        (
            true,
            "watch",
            "cluster.open-cluster-management.io",
            "managedclusters",
            "",
            "",
        ),
        (true, "watch", WORK, "manifestworks", "", ""),
        (
            true,
            "patch",
            WORK,
            "manifestworks",
            cluster,
            "addon-addon-status-deploy-0",
        ),
        (
            false,
            "delete",
            WORK,
            "manifestworks",
            cluster,
            "addon-addon-status-deploy-0",
        ),
        (true, "patch", RBAC, "roles", cluster, "role"),
        (true, "patch", RBAC, "rolebindings", cluster, "binding"),
        (
            true,
            "patch",
            "",
            "resourcequotas",
            cluster,
            "addon-status-workstatuses",
        ),
        (true, "watch", CERTIFICATES, "certificatesigningrequests", "", ""),
        (
            true,
            "patch",
            CERTIFICATES,
            "certificatesigningrequests/approval",
            "",
            "csr",
        ),
        (
            true,
            "approve",
            CERTIFICATES,
            "signers",
            "",
            "kubernetes.io/kube-apiserver-client",
        ),
        (
            false,
            "approve",
            CERTIFICATES,
            "signers",
            "",
            "kubernetes.io/kubelet-serving",
        ),
        (true, "update", "coordination.k8s.io", "leases", namespace, "ks-addon"),
        (
            false,
            "update",
            "coordination.k8s.io",
            "leases",
            "kube-system",
            "ks-addon",
        ),
        (false, "get", "", "secrets", cluster, "secret"),
    ];
    expect_access(hub, namespace, account, &requests, "the controller's").await
}

/// What a ServiceAccount may do: `(allowed, verb, group, resource[/subresource], namespace,
/// name)` each, asked of the API server with SubjectAccessReviews; fails listing every wrong one.
async fn expect_access(
    client: &Client,
    namespace: &str,
    account: &str,
    requests: &[(bool, &str, &str, &str, &str, &str)],
    whose: &str,
) -> anyhow::Result<()> {
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let mut wrong = Vec::new();
    for &(allowed, verb, group, resource, in_namespace, name) in requests {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let attributes = ResourceAttributes {
            verb: Some(verb.into()),
            group: Some(group.into()),
            resource: Some(resource.into()),
            subresource: Some(subresource.into()),
            namespace: Some(in_namespace.into()),
            name: Some(name.into()),
            ..Default::default()
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(format!("system:serviceaccount:{namespace}:{account}")),
                groups: Some(vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{namespace}"),
                ]),
                resource_attributes: Some(attributes),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews.create(&PostParams::default(), &review).await?;
        if answer.status.is_none_or(|s| s.allowed != allowed) {
            wrong.push(format!(
                "{verb} {group} {resource}/{subresource} {in_namespace}/{name}: should be allowed={allowed}"
            ));
        }
    }
    ensure!(wrong.is_empty(), "{whose} RBAC is wrong:\n{}", wrong.join("\n"));
    Ok(())
}
