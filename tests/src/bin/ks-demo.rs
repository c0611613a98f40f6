//! ks-demo: the quickstart's main job (`make demo`), on a running stack. It installs the hub as a
//! user does: `helm install` of the hub chart into the KubeFlex hosting cluster, for the WDS
//! `wds2` (adopted by KubeFlex as an `external` ControlPlane) and the ITS KubeFlex already has;
//! KubeFlex runs the chart's hook, which deploys ks-hub. Then it applies a Namespace and a
//! Deployment whose environment is a per-WEC template, a BindingPolicy sending them to every WEC
//! labelled `location-group=edge` with multi-WEC status return, and a StatusCollector; and shows
//! what arrived on each WEC, the status returned to the WDS, the CombinedStatus table, and what
//! the kubectl plugin says of it: `why`, `status`, and the rollout's trace from Jaeger.

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use ks_shared::api::{BindingPolicy, CombinedStatus, StatusCollector};
use ks_shared::names::EXPAND_TEMPLATES_ANNOTATION;
use ks_tests::harness::{apply, repo_root, wait_until};
use ks_tests::stack::kubeflex::{control_planes, system_namespace};
use ks_tests::stack::{JAEGER_OTLP_GRPC, JAEGER_QUERY, SPARE_WDS, Stack, node, registry};
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};

/// The hub chart's release, in this namespace of the hosting cluster.
const RELEASE: &str = "kubestellar";
const NAMESPACE: &str = "demo";
const APP: &str = "hello";
const POLICY: &str = "demo";
const COLLECTOR: &str = "demo-replicas";
const WECS: [&str; 2] = ["cluster1", "cluster2"];
/// Delivery and status return go through OCM and kwok; generous for a cold machine.
const DEADLINE: Duration = Duration::from_secs(180);

#[derive(Parser)]
#[command(
    version,
    about = "Run the quickstart workload on the local stack and show what happened"
)]
struct Args {
    /// Repository root (its `.stack` must be up: `make up`).
    #[arg(long, default_value = ".")]
    repo: std::path::PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let exe = std::env::current_exe()?;
    let stack = Stack::new(
        &args.repo.canonicalize().unwrap_or_else(|_| repo_root()),
        WECS.len(),
        exe.parent().context("bin dir")?,
    )?;
    anyhow::ensure!(stack.is_running(), "the stack is not running: run `make up` first");

    println!("1. The hub, installed with Helm into KubeFlex (context kubeflex), for the WDS {SPARE_WDS}:");
    println!("   kubectl -n {RELEASE} create secret generic {SPARE_WDS}-bootstrap \\");
    println!("     --from-file=kubeconfig-incluster=.stack/kubeconfigs/{SPARE_WDS}.kubeconfig  # KubeFlex adopts it");
    println!("   helm upgrade --install {RELEASE} charts/kubestellar-rs -n {RELEASE} \\");
    println!("     --set-json='WDSes=[{{\"name\":\"{SPARE_WDS}\",\"type\":\"external\",\"ITSName\":\"its1\"}}]' \\");
    println!(
        "     --set hub.otlpEndpoint=http://{}:{JAEGER_OTLP_GRPC}",
        stack.api_host()
    );
    if stack.has_real_node("kubeflex") {
        println!("   (the hosting cluster's real node pulls ks-hub from the stack's registry, its ghcr.io mirror)");
        stack.push_image("ks-hub")?;
    }
    let installing = std::time::Instant::now();
    install_hub(&stack).await?;
    let hub_namespace = system_namespace(SPARE_WDS);
    let hubs: Api<Deployment> = Api::namespaced(stack.client("kubeflex").await?, &hub_namespace);
    let ready = |d: Option<&Deployment>| d.and_then(|d| d.status.as_ref()).and_then(|s| s.ready_replicas) == Some(1);
    wait_until(hubs, "ks-hub", "deployed by KubeFlex and ready", DEADLINE, ready).await?;
    println!(
        "   KubeFlex adopted {SPARE_WDS} and ran the chart's hook: ks-hub is ready in {hub_namespace} ({:.1}s after the install).",
        installing.elapsed().as_secs_f64()
    );
    let wds = stack.client(SPARE_WDS).await?;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(wds.clone());
    // Served, not only created: a CRD the apiserver has not established yet answers 404.
    for crd in ["bindingpolicies", "statuscollectors", "combinedstatuses"] {
        let name = format!("{crd}.control.kubestellar.io");
        let established = kube::runtime::wait::conditions::is_crd_established();
        wait_until(crds.clone(), &name, "established by the hub", DEADLINE, established).await?;
    }

    println!("\n2. In the WDS (context {SPARE_WDS}): Namespace {NAMESPACE}, Deployment {APP} with a per-WEC template,");
    println!("   BindingPolicy {POLICY} (location-group=edge, multi-WEC status) and StatusCollector {COLLECTOR}.");
    let container = workload_container(&stack);
    if stack.has_real_node(WECS[0]) {
        println!(
            "   Its container, {} ({}), runs for real on {}'s real node, which it prefers and tolerates.",
            container["image"], container["args"][0], WECS[0]
        );
    }
    apply_workload(&wds, container).await?;

    println!("\n3. What arrived on each WEC (the template expanded with that WEC's properties):");
    for wec in WECS {
        let deployments: Api<Deployment> = Api::namespaced(stack.client(wec).await?, NAMESPACE);
        let arrived = wait_until(
            deployments,
            APP,
            &format!("on {wec}"),
            DEADLINE,
            |d: Option<&Deployment>| d.is_some(),
        )
        .await?
        .context("arrived")?;
        let env = serde_json::to_value(&arrived.spec)?["template"]["spec"]["containers"][0]["env"][0]["value"].clone();
        println!("   {wec}: GREETING = {env}");
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(stack.client(wec).await?, NAMESPACE);
        let app_pods = kube::api::ListParams::default().labels(&format!("app={APP}"));
        ks_tests::stack::wait_for(&format!("{APP}'s Pod on {wec} to be placed"), DEADLINE, || async {
            let listed = pods.list(&app_pods).await?;
            Ok(listed
                .items
                .iter()
                .any(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some())))
        })
        .await?;
        for pod in pods.list(&app_pods).await?.items {
            let node = pod.spec.and_then(|s| s.node_name).unwrap_or_default();
            println!("   {wec}: Pod {} on node {node}", pod.metadata.name.unwrap_or_default());
        }
    }

    println!("\n4. Status returned to the WDS (the sum over both WECs):");
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), NAMESPACE);
    let aggregated = |d: Option<&Deployment>| {
        d.and_then(|d| d.status.as_ref())
            .and_then(|s| s.available_replicas)
            .is_some_and(|n| n >= WECS.len() as i32)
    };
    let returned = wait_until(deployments, APP, "with returned status", DEADLINE, aggregated)
        .await?
        .context("returned")?;
    let status = returned.status.unwrap_or_default();
    let count = |n: Option<i32>| n.unwrap_or(0);
    println!(
        "   replicas {}, readyReplicas {}, availableReplicas {}",
        count(status.replicas),
        count(status.ready_replicas),
        count(status.available_replicas)
    );

    println!("\n5. CombinedStatus (StatusCollector {COLLECTOR}, one row per WEC):");
    let combined: Api<CombinedStatus> = Api::namespaced(wds.clone(), NAMESPACE);
    let name = format!(
        "{}.{}",
        returned.metadata.uid.unwrap_or_default(),
        Api::<BindingPolicy>::all(wds.clone())
            .get(POLICY)
            .await?
            .uid()
            .unwrap_or_default()
    );
    let full = |c: Option<&CombinedStatus>| {
        c.and_then(|c| serde_json::to_value(c).ok()).is_some_and(|v| {
            v["results"][0]["rows"]
                .as_array()
                .is_some_and(|r| r.len() == WECS.len())
        })
    };
    let table = wait_until(combined, &name, "with a row per WEC", DEADLINE, full)
        .await?
        .context("combined")?;
    print_table(&serde_json::to_value(&table)?["results"][0]);

    println!("\n6. Did it reach every WEC, and if not, why (the kubectl plugin, on PATH after `source .stack/env`):");
    let run_plugin = |args: &[&str]| {
        let mut all = vec!["--wds", SPARE_WDS];
        all.extend(args);
        stack.tool(&stack.our_binaries.join("kubectl-kubestellar"), &all)
    };
    let plugin = |args: &[&str]| -> anyhow::Result<()> {
        println!("   $ kubectl kubestellar --wds {SPARE_WDS} {}", args.join(" "));
        for line in run_plugin(args)?.lines() {
            println!("   {line}");
        }
        Ok(())
    };
    // Real readiness comes a moment after the WDS's sum (and on a second run, the policy's last
    // verdict is the previous rollout's until the new one's): `why` says when every link holds.
    let why = ["why", &format!("deployment/{APP}"), "-n", NAMESPACE];
    let settled = ks_tests::stack::wait_for("every link to hold", DEADLINE, || {
        std::future::ready(Ok(run_plugin(&why).is_ok()))
    });
    settled.await?;
    let healthy = |p: Option<&BindingPolicy>| {
        p.and_then(|p| serde_json::to_value(p).ok()).is_some_and(|p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Healthy" && c["status"] == "True"))
        })
    };
    let policies = Api::<BindingPolicy>::all(wds.clone());
    wait_until(policies, POLICY, "healthy on every WEC", DEADLINE, healthy).await?;
    plugin(&why)?;
    plugin(&["status", POLICY])?;

    println!("\n7. The rollout's trace (packaging on the hub, delivery and status reports per WEC):");
    // The stack's Jaeger is built without its UI's assets: the trace is drawn here, and its JSON
    // is at the query API (a Jaeger with its UI shows it at /trace/<id>). The agents' spans reach
    // Jaeger a few seconds after the hub's: wait until the trace holds them.
    let trace = ["trace", &format!("deployment/{APP}"), "-n", NAMESPACE];
    let whole = ks_tests::stack::wait_for("the whole trace in Jaeger", Duration::from_secs(30), || {
        let json: Vec<&str> = trace.iter().copied().chain(["-o", "json"]).collect();
        let found = run_plugin(&json)
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(&text).ok());
        std::future::ready(Ok(found.is_some_and(|trace| complete(&trace))))
    });
    if whole.await.is_ok() {
        plugin(&trace)?;
    } else {
        println!("   not in Jaeger yet: http://127.0.0.1:{JAEGER_QUERY}/api/traces?service=ks-hub");
    }

    println!("\nExplore: source .stack/env; kubectl --context {SPARE_WDS} -n {NAMESPACE} get deploy {APP} -o yaml");
    println!("         kubectl --context kubeflex get controlplanes; helm --kube-context kubeflex -n {RELEASE} list");
    println!("         kubectl --context its1 get workstatuses -A; kubectl --context cluster1 -n {NAMESPACE} get pods");
    println!("Stop:    make down");
    Ok(())
}

/// Installs (or upgrades) the hub chart into the hosting cluster for the spare WDS. KubeFlex adopts
/// the WDS from a bootstrap Secret, which it deletes once adopted: written only before that.
async fn install_hub(stack: &Stack) -> anyhow::Result<()> {
    let hosting = stack.client("kubeflex").await?;
    apply(
        &Api::<Namespace>::all(hosting.clone()),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE}}),
    )
    .await?;
    let adopted = Api::<kube::api::DynamicObject>::all_with(hosting.clone(), &control_planes())
        .get_opt(SPARE_WDS)
        .await?
        .is_some();
    if !adopted {
        // A hub uninstalled just before leaves its namespace terminating for a while.
        let namespaces = Api::<Namespace>::all(hosting.clone());
        let not_terminating = |n: Option<&Namespace>| n.is_none_or(|n| n.metadata.deletion_timestamp.is_none());
        let namespace = system_namespace(SPARE_WDS);
        wait_until(namespaces, &namespace, "gone or active", DEADLINE, not_terminating).await?;
        let bootstrap = format!("{SPARE_WDS}-bootstrap");
        apply(
            &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(hosting, RELEASE),
            stack.bootstrap_secret(SPARE_WDS, RELEASE, &bootstrap)?,
        )
        .await?;
    }
    let wdses = json!([{"name": SPARE_WDS, "type": "external", "ITSName": "its1"}]).to_string();
    let otlp = format!("hub.otlpEndpoint=http://{}:{JAEGER_OTLP_GRPC}", stack.api_host());
    let chart = repo_root().join("charts/kubestellar-rs");
    let chart = chart.display().to_string();
    stack.helm(&[
        "--kube-context",
        "kubeflex",
        "upgrade",
        "--install",
        RELEASE,
        &chart,
        "-n",
        RELEASE,
        "--set-json",
        &format!("WDSes={wdses}"),
        "--set",
        &otlp,
    ])?;
    Ok(())
}

/// The workload's container: where the stack has a real node on a WEC, the stack's test workload
/// image serving HTTP behind a readiness probe (the real node runs it, and only ready replicas
/// count); else nginx, which kwok's Pods pretend to run.
fn workload_container(stack: &Stack) -> Value {
    let greeting = json!([{"name": "GREETING", "value": "hello from {{.clusterName}} in region {{.region}}"}]);
    if stack.has_real_node(WECS[0]) {
        json!({"name": APP, "image": registry::image_ref(node::POD_IMAGE), "args": ["serve"], "env": greeting,
               "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}})
    } else {
        json!({"name": APP, "image": "nginx:1.27", "env": greeting})
    }
}

async fn apply_workload(wds: &kube::Client, container: Value) -> anyhow::Result<()> {
    let labels = json!({"app.kubernetes.io/part-of": NAMESPACE});
    // Each run is a new rollout with a trace of its own: on a stack kept up, the previous run's
    // trace may have left Jaeger's memory.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs()
        .to_string();
    apply(
        &Api::<Namespace>::all(wds.clone()),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": labels}}),
    )
    .await?;
    apply(
        &Api::<Deployment>::namespaced(wds.clone(), NAMESPACE),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": APP, "labels": labels, "annotations": {EXPAND_TEMPLATES_ANNOTATION: "true"}},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": APP}},
                        "template": {"metadata": {"labels": {"app": APP}, "annotations": {"demo.kubestellar.io/run": run}},
                                     "spec": {"containers": [container],
                                              // A real node where the WEC has one; kwok's elsewhere.
                                              "tolerations": [{"key": node::REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                                              "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                                                  {"weight": 100, "preference": {"matchExpressions": [
                                                      {"key": node::REAL_NODE_LABEL, "operator": "Exists"}]}}]}}}}}}),
    )
    .await?;
    apply(
        &Api::<StatusCollector>::all(wds.clone()),
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "StatusCollector", "metadata": {"name": COLLECTOR},
               "spec": {"select": [{"name": "wec", "def": "inventory.name"},
                                   {"name": "available", "def": "returned.status.availableReplicas"}],
                        "limit": 10}}),
    )
    .await?;
    apply(
        &Api::<BindingPolicy>::all(wds.clone()),
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": POLICY},
               "spec": {"clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
                        "downsync": [{"objectSelectors": [{"matchLabels": labels}],
                                      "wantMultiWECReportedState": true, "statusCollectors": [COLLECTOR]}]}}),
    )
    .await?;
    Ok(())
}

/// Prints one StatusCollector's result as a table.
fn print_table(result: &Value) {
    let cell = |v: &Value| {
        ["string", "float", "bool", "object", "array"]
            .iter()
            .find_map(|k| v.get(*k).map(|x| x.to_string().trim_matches('"').to_string()))
            .unwrap_or_else(|| v["type"].as_str().unwrap_or_default().to_lowercase())
    };
    let columns: Vec<String> = result["columnNames"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c.as_str().unwrap_or_default().to_string())
        .collect();
    println!("   {}", columns.iter().map(|c| format!("{c:<12}")).collect::<String>());
    for row in result["rows"].as_array().into_iter().flatten() {
        let cells: String = row["columns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| format!("{:<12}", cell(c)))
            .collect();
        println!("   {cells}");
    }
}

/// Whether a trace holds every WEC's delivery and every span's parent (the agents' spans reach
/// Jaeger a few seconds after the hub's).
fn complete(trace: &Value) -> bool {
    let spans = trace["spans"].as_array().cloned().unwrap_or_default();
    let ids: Vec<&str> = spans.iter().filter_map(|s| s["spanID"].as_str()).collect();
    let delivered_to = |wec: &str| {
        spans.iter().any(|s| {
            s["operationName"] == "delivery"
                && s["tags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|t| t["key"] == "kubestellar.wec" && t["value"] == wec)
        })
    };
    let orphans = spans
        .iter()
        .filter(|s| s["references"][0]["spanID"].as_str().is_some_and(|p| !ids.contains(&p)))
        .count();
    WECS.iter().all(|w| delivered_to(w)) && orphans == 0
}
