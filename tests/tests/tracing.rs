//! One trace per rollout, end to end on the stack: every process of the stack exports to its
//! Jaeger, and the test reads the traces back through Jaeger's HTTP API (`/api/traces`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use ks_shared::api::{BindingPolicy, CustomTransform, WorkStatus};
use ks_shared::names::{self, TRACEPARENT_ANNOTATION};
use ks_shared::ocm::ManifestWork;
use ks_tests::harness::{Ctx, apply, run, wait_until};
use ks_tests::stack::{JAEGER_QUERY, Stack};
use ks_tests::stack_test;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(90);
const PATH: &[&str] = &[
    "hub-wds1",
    "jaeger",
    "pod-cluster1-open-cluster-management-agent-addon-status-agent",
    "pod-cluster2-open-cluster-management-agent-addon-status-agent",
];

ks_tests::stack_main!(
    run,
    vec![
        stack_test!(rollout_is_one_trace_across_hub_and_wecs, PATH),
        stack_test!(user_traceparent_is_joined, PATH),
        stack_test!(dashboard_queries_served_metrics, PATH),
        stack_test!(otlp_over_tls_reaches_a_collector, &[]),
    ]
);

/// A span as Jaeger returns it, reduced to what the test checks.
#[derive(Debug)]
struct Span {
    service: String,
    /// The process's `k8s.cluster.name`: the WDS of a hub, the WEC of an agent.
    cluster: String,
    operation: String,
    id: String,
    parent: Option<String>,
    tags: BTreeMap<String, Value>,
}

/// The spans of every trace holding a span tagged with the object's name.
fn traces_of(name: &str) -> anyhow::Result<BTreeMap<String, Vec<Span>>> {
    let tags = json!({"k8s.object.name": name}).to_string();
    let path = format!(
        "/api/traces?service=ks-hub&limit=20&lookback=1h&tags={}",
        tags.replace('"', "%22")
            .replace('{', "%7B")
            .replace('}', "%7D")
            .replace(':', "%3A")
    );
    let (code, body) = ks_tests::process::http_get(([127, 0, 0, 1], JAEGER_QUERY).into(), &path);
    ensure!(code == 200, "Jaeger answered {code}: {body}");
    let answer: Value = serde_json::from_str(&body)?;
    let mut traces = BTreeMap::new();
    for trace in answer["data"].as_array().into_iter().flatten() {
        let service = |process: &Value| {
            trace["processes"][process.as_str().unwrap_or_default()]["serviceName"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        let cluster = |process: &Value| {
            trace["processes"][process.as_str().unwrap_or_default()]["tags"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["key"] == "k8s.cluster.name")
                .and_then(|t| t["value"].as_str())
                .unwrap_or_default()
                .to_string()
        };
        let spans = trace["spans"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| Span {
                service: service(&s["processID"]),
                cluster: cluster(&s["processID"]),
                operation: s["operationName"].as_str().unwrap_or_default().to_string(),
                id: s["spanID"].as_str().unwrap_or_default().to_string(),
                parent: s["references"][0]["spanID"].as_str().map(str::to_string),
                tags: s["tags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| (t["key"].as_str().unwrap_or_default().to_string(), t["value"].clone()))
                    .collect(),
            })
            .collect();
        traces.insert(trace["traceID"].as_str().unwrap_or_default().to_string(), spans);
    }
    Ok(traces)
}

/// Whether `spans` hold the whole rollout to both WECs: packaging on the hub, then for each WEC
/// a delivery under it, a status report under that, and the hub's status propagation under the
/// report.
fn complete(spans: &[Span]) -> bool {
    let by = |service: &str, operation: &str, parent: Option<&str>, wec: Option<&str>| {
        spans.iter().find(|s| {
            s.service == service
                && s.operation == operation
                && (parent.is_none() || s.parent.as_deref() == parent)
                && wec.is_none_or(|w| s.tags.get("kubestellar.wec") == Some(&json!(w)))
        })
    };
    let Some(packaging) = by("ks-hub", "packaging", None, None) else {
        return false;
    };
    ["cluster1", "cluster2"].iter().all(|wec| {
        let Some(delivery) = by("ks-agent", "delivery", Some(&packaging.id), Some(wec)) else {
            return false;
        };
        // Any of the WEC's reports may be the one whose status the hub wrote back.
        spans
            .iter()
            .filter(|s| s.operation == "status report" && s.parent.as_deref() == Some(&delivery.id))
            .any(|report| by("ks-hub", "status propagation", Some(&report.id), Some(wec)).is_some())
    })
}

async fn rollout(ctx: &Ctx, annotations: Value) -> anyhow::Result<(String, String, String)> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": ns});
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(wds.clone());
    apply(
        &namespaces,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": selector}}),
    )
    .await?;
    let name = format!("{ns}-web");
    apply(
        &Api::<Deployment>::namespaced(wds.clone(), &ns),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "labels": selector, "annotations": annotations},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}),
    )
    .await?;
    let policy = format!("{ns}-edge");
    apply(
        &Api::<BindingPolicy>::all(wds.clone()),
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": policy},
               "spec": {"clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
                        "downsync": [{"objectSelectors": [{"matchLabels": selector}],
                                      "wantMultiWECReportedState": true}]}}),
    )
    .await?;
    Ok((ns, name, policy))
}

async fn finish(ctx: &Ctx, ns: &str, policy: &str) -> anyhow::Result<()> {
    Api::<BindingPolicy>::all(ctx.client("wds1").await?)
        .delete(policy, &DeleteParams::default())
        .await?;
    ctx.delete_namespace("wds1", ns).await
}

/// Waits until Jaeger holds a complete trace of the object's rollout; returns its trace id.
async fn complete_trace(name: &str) -> anyhow::Result<(String, Vec<Span>)> {
    let mut found = None;
    ks_tests::stack::wait_for(&format!("a complete trace of {name} in Jaeger"), DEADLINE, || {
        found = traces_of(name)
            .ok()
            .and_then(|traces| traces.into_iter().find(|(_, spans)| complete(spans)));
        std::future::ready(Ok(found.is_some()))
    })
    .await?;
    found.context("found")
}

/// A Deployment sent to both WECs is one trace: packaging on the hub, delivery and status
/// reports from the agent on each WEC, status propagation back on the hub and the moment the
/// hub judged it healthy on each WEC, parent-linked in
/// causal order and tagged with the object, its generation, the BindingPolicy and the WEC; the
/// latency histograms have samples; and neither a re-render of the Binding nor a restart of an
/// agent writes anything because of tracing.
async fn rollout_is_one_trace_across_hub_and_wecs(ctx: Ctx) -> anyhow::Result<()> {
    let (ns, name, policy) = rollout(&ctx, json!({})).await?;
    let (trace, spans) = complete_trace(&name).await?;
    // The moment the hub judged it healthy on each WEC, under one of that WEC's status reports.
    let healthy_everywhere = |spans: &[Span]| {
        ["cluster1", "cluster2"].iter().all(|wec| {
            spans.iter().any(|s| {
                s.service == "ks-hub"
                    && s.operation == "healthy"
                    && s.tags.get("kubestellar.wec") == Some(&json!(wec))
                    && spans.iter().any(|r| {
                        r.operation == "status report"
                            && Some(&r.id) == s.parent.as_ref()
                            && r.tags.get("kubestellar.wec") == Some(&json!(wec))
                    })
            })
        })
    };
    ks_tests::stack::wait_for("a healthy span per WEC in the rollout's trace", DEADLINE, || {
        let found = traces_of(&name).map(|traces| traces.get(&trace).is_some_and(|t| healthy_everywhere(t)));
        std::future::ready(Ok(found.unwrap_or(false)))
    })
    .await?;
    let packaging = spans.iter().find(|s| s.operation == "packaging").context("packaging")?;
    for (key, value) in [
        ("k8s.object.group", json!("apps")),
        ("k8s.object.resource", json!("deployments")),
        ("k8s.object.namespace", json!(ns)),
        ("k8s.object.generation", json!(1)),
        ("kubestellar.binding_policy", json!(policy)),
        ("kubestellar.wec", json!("cluster1,cluster2")),
    ] {
        ensure!(
            packaging.tags.get(key) == Some(&value),
            "packaging {key}: {:?}",
            packaging.tags
        );
    }

    // Each process names the cluster it serves: the hub its WDS, each agent its WEC.
    ensure!(packaging.cluster == "wds1", "packaging from {:?}", packaging.cluster);
    for delivery in spans.iter().filter(|s| s.operation == "delivery") {
        let wec = delivery
            .tags
            .get("kubestellar.wec")
            .and_then(Value::as_str)
            .unwrap_or_default();
        ensure!(delivery.cluster == wec, "{wec}'s delivery from {:?}", delivery.cluster);
    }

    let hub = ("127.0.0.1", ctx.stack.hub_port("wds1"));
    let (code, metrics) = ks_tests::process::http_get(format!("{}:{}", hub.0, hub.1).parse()?, "/metrics");
    ensure!(code == 200, "hub /metrics answered {code}");
    for histogram in [
        "kubestellar_downsync_packaging_duration_seconds",
        "kubestellar_statusPropagation_finalization_duration_seconds",
        "kubestellar_statusPropagation_duration_seconds",
        "kubestellar_e2e_latency_duration_seconds",
    ] {
        // Summed over its labels (the WEC, the policy).
        let count = ks_tests::metrics::sum(&metrics, &format!("{histogram}_count"));
        ensure!(count > 0.0, "no {histogram} samples on the hub's /metrics");
    }

    // A CustomTransform change re-renders every Binding: the trace context of the delivered
    // generation is reused, so no ManifestWork is written.
    let works: Api<ManifestWork> = Api::namespaced(ctx.client("its1").await?, "cluster1");
    let ours = ListParams::default().labels(&format!("{}={policy}", names::ORIGIN_BINDING_LABEL));
    let generations =
        |list: Vec<ManifestWork>| -> Vec<i64> { list.iter().map(|w| w.metadata.generation.unwrap_or(0)).collect() };
    let before = generations(works.list(&ours).await?.items);
    let transforms: Api<CustomTransform> = Api::all(ctx.client("wds1").await?);
    let transform = format!("{ns}-noop");
    apply(
        &transforms,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "CustomTransform",
               "metadata": {"name": transform},
               "spec": {"apiGroup": "example.com", "resource": "nothings", "remove": ["$.spec.x"]}}),
    )
    .await?;
    // The transform's status is written in the same pass as the re-render.
    wait_until(
        transforms.clone(),
        &transform,
        "reported",
        DEADLINE,
        |t: Option<&CustomTransform>| t.is_some_and(|t| t.status.is_some()),
    )
    .await?;
    let after = generations(works.list(&ours).await?.items);
    ensure!(
        before == after,
        "ManifestWorks rewritten by a re-render: {before:?} → {after:?}"
    );
    transforms.delete(&transform, &DeleteParams::default()).await?;
    agent_restart_writes_nothing(&ctx, &policy).await?;
    finish(&ctx, &ns, &policy).await
}

/// A restarted agent re-evaluates every object and starts new delivery spans for them: the
/// WorkStatuses stay as they are (their content did not change, only the trace context).
async fn agent_restart_writes_nothing(ctx: &Ctx, policy: &str) -> anyhow::Result<()> {
    let statuses: Api<WorkStatus> = Api::namespaced(ctx.client("its1").await?, "cluster1");
    let ours = ListParams::default().labels(&format!("{}={policy}", names::ORIGIN_BINDING_LABEL));
    let versions = |list: Vec<WorkStatus>| -> Vec<(String, String)> {
        list.iter()
            .map(|w| (w.name_any(), w.resource_version().unwrap_or_default()))
            .collect()
    };
    let before = versions(statuses.list(&ours).await?.items);
    ensure!(!before.is_empty(), "no WorkStatus for the rollout on cluster1");
    let agent = Stack::agent_process("cluster1");
    let old = ctx.stack.procs.running(&agent);
    ctx.stack.procs.stop(&agent, Duration::from_secs(10))?;
    let new = ctx.stack.wait_agent_ready("cluster1", DEADLINE).await?;
    ensure!(Some(new) != old, "the agent was restarted");
    // Ready means listed and queued; done when it has reconciled and nothing waits.
    let address = ctx.stack.agent_address("cluster1").context("the agent's address")?;
    ks_tests::stack::wait_for("the restarted agent to go through its objects", DEADLINE, || {
        let (_, metrics) = ks_tests::process::http_get(address, "/metrics");
        let value = |name: &str| {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        let done = value("kubestellar_agent_reconciles_total").is_some_and(|n| n >= before.len() as f64)
            && value("kubestellar_agent_queue_depth") == Some(0.0);
        std::future::ready(Ok(done))
    })
    .await?;
    let after = versions(statuses.list(&ours).await?.items);
    ensure!(
        before == after,
        "WorkStatuses rewritten by a restarted agent: {before:?} → {after:?}"
    );
    Ok(())
}

/// A traceparent on the user's WDS object makes our spans part of that trace, under its span;
/// the user's object itself is never given one.
async fn user_traceparent_is_joined(ctx: Ctx) -> anyhow::Result<()> {
    let trace_id = format!("{:032x}", u128::from(std::process::id()) << 64 | 0x5eed);
    let parent_id = "00f067aa0ba902b7";
    let traceparent = format!("00-{trace_id}-{parent_id}-01");
    let (ns, name, policy) = rollout(&ctx, json!({TRACEPARENT_ANNOTATION: traceparent})).await?;
    let (found, spans) = complete_trace(&name).await?;
    ensure!(
        found == trace_id,
        "our spans are in trace {found}, not the user's {trace_id}"
    );
    let packaging = spans.iter().find(|s| s.operation == "packaging").context("packaging")?;
    ensure!(
        packaging.parent.as_deref() == Some(parent_id),
        "packaging's parent: {:?}",
        packaging.parent
    );
    let wds = Api::<Deployment>::namespaced(ctx.client("wds1").await?, &ns)
        .get(&name)
        .await?;
    ensure!(
        wds.metadata.annotations.unwrap_or_default().get(TRACEPARENT_ANNOTATION) == Some(&traceparent),
        "the user's object keeps its own traceparent"
    );
    finish(&ctx, &ns, &policy).await
}

/// The metric names upstream KubeStellar's controller dashboard
/// (`monitoring/grafana/KubeStellarControllersMonitoring.json`) queries on each of its controllers
/// (the hub's, the status add-on's and the agents'), with the labels it groups and filters by.
const UPSTREAM_DASHBOARD: [(&str, &[&str]); 6] = [
    ("workqueue_queue_duration_seconds", &["name"]),
    ("workqueue_depth", &["name"]),
    ("rest_client_request_duration_seconds", &["host"]),
    ("rest_client_requests_total", &["code"]),
    ("process_cpu_seconds_total", &[]),
    ("process_resident_memory_bytes", &[]),
];

/// Every metric our Grafana dashboard queries is one the hub, the add-on controller or an agent
/// serves; so is every metric upstream's controller dashboard queries, on each of them, with its
/// labels, and the hub's queues have measured how long keys wait.
async fn dashboard_queries_served_metrics(ctx: Ctx) -> anyhow::Result<()> {
    // A rollout of its own goes through the hub's queues and an agent's.
    let (ns, name, policy) = rollout(&ctx, json!({})).await?;
    complete_trace(&name).await?;
    let dashboard = std::fs::read_to_string(
        ks_tests::harness::repo_root().join("charts/kubestellar-rs/dashboards/kubestellar-rs.json"),
    )?;
    let hub = std::net::SocketAddr::from(([127, 0, 0, 1], ctx.stack.hub_port("wds1")));
    let addon = std::net::SocketAddr::from(([127, 0, 0, 1], ctx.stack.addon_port()));
    // cluster2's: the rollout test, running meanwhile, restarts cluster1's agent.
    ctx.stack.wait_agent_ready("cluster2", DEADLINE).await?;
    let agent = ctx.stack.agent_address("cluster2").context("the agent's address")?;
    let each: Vec<(&str, String)> = [("hub", hub), ("add-on controller", addon), ("agent", agent)]
        .into_iter()
        .map(|(who, address)| (who, ks_tests::process::http_get(address, "/metrics").1))
        .collect();
    let served: String = each.iter().map(|(_, text)| text.as_str()).collect();
    let prefixes = [
        "kubestellar_",
        "workqueue_",
        "controller_runtime_",
        "rest_client_",
        "process_",
        "leader_election_",
    ];
    let mut queried: Vec<String> = dashboard
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| prefixes.iter().any(|p| w.starts_with(p)))
        .map(|w| {
            let base = ["_bucket", "_count", "_sum", "_total"]
                .iter()
                .find_map(|suffix| w.strip_suffix(suffix))
                .unwrap_or(w);
            base.to_string()
        })
        .collect();
    queried.sort();
    queried.dedup();
    ensure!(queried.len() >= 20, "the dashboard queries only {queried:?}");
    let missing: Vec<&String> = queried
        .iter()
        .filter(|m| !served.contains(&format!("# TYPE {m} ")))
        .collect();
    ensure!(
        missing.is_empty(),
        "the dashboard queries metrics nobody serves: {missing:?}"
    );
    for (who, text) in &each {
        for (name, labels) in UPSTREAM_DASHBOARD {
            // A sample of it (a histogram's by its count) with each label the dashboard reads.
            let series = [format!("{name} "), format!("{name}{{"), format!("{name}_count")];
            let found = text.lines().any(|line| {
                series.iter().any(|s| line.starts_with(s.as_str()))
                    && labels.iter().all(|label| line.contains(&format!("{label}=\"")))
            });
            ensure!(found, "the {who} serves no {name} with the labels {labels:?}");
        }
    }
    let (_, hub_text) = &each[0];
    for queue in ["binding", "transport"] {
        let waited = ks_tests::metrics::sample(
            hub_text,
            &format!("workqueue_queue_duration_seconds_count{{name=\"{queue}\"}}"),
        );
        ensure!(
            waited.is_some_and(|n| n > 0.0),
            "the hub's {queue} queue measured no wait: {waited:?}"
        );
    }
    finish(&ctx, &ns, &policy).await
}

/// A collector of our own, Jaeger (the stack's build) with OTLP over TLS on other ports than the
/// stack's: its certificate from a CA of the test's, and it asks clients for a certificate of
/// that CA (mutual TLS).
const TLS_COLLECTOR: &str = r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces: {receivers: [otlp], processors: [], exporters: [jaeger_storage_exporter]}
  telemetry: {metrics: {level: none}}
extensions:
  jaeger_query:
    storage: {traces: memstore}
    http: {endpoint: "127.0.0.1:26686"}
    grpc: {endpoint: "127.0.0.1:26685"}
  jaeger_storage:
    backends: {memstore: {memory: {max_traces: 1000}}}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: "127.0.0.1:24317", tls: {cert_file: DIR/serving.crt, key_file: DIR/serving.key, client_ca_file: DIR/ca.crt}}
      http: {endpoint: "127.0.0.1:24318", tls: {cert_file: DIR/serving.crt, key_file: DIR/serving.key, client_ca_file: DIR/ca.crt}}
exporters:
  jaeger_storage_exporter: {trace_storage: memstore}
"#;

/// A span exported as our processes export (`ks_shared::otlp`) reaches a collector over TLS, by
/// OTLP/gRPC and by OTLP/HTTP-protobuf, the collector verified against the given CA and the
/// process presenting a client certificate; verified against the system's roots instead, the
/// export fails.
async fn otlp_over_tls_reaches_a_collector(ctx: Ctx) -> anyhow::Result<()> {
    use ks_shared::otlp::{Protocol, Settings};

    let dir = ctx.stack.state.join(ctx.unique_name("otlp-tls"));
    let pki = ks_tests::stack::Pki::ensure(&dir)?;
    let config = dir.join("collector.yaml");
    std::fs::write(&config, TLS_COLLECTOR.replace("DIR", &dir.display().to_string()))?;
    let jaeger = ctx.stack.cache.join("bin/jaeger");
    let collector = ks_tests::process::Running::start(
        &jaeger.display().to_string(),
        &[&format!("--config={}", config.display())],
    );
    let query = std::net::SocketAddr::from(([127, 0, 0, 1], 26686));
    ks_tests::stack::wait_for("the TLS collector to listen", DEADLINE, || {
        let up = [24317, 24318, 26686]
            .iter()
            .all(|port| std::net::TcpStream::connect(("127.0.0.1", *port)).is_ok());
        std::future::ready(Ok(up))
    })
    .await?;
    let client = Some((
        pki.client_cert(&ks_tests::stack::ADMIN),
        pki.client_key(&ks_tests::stack::ADMIN),
    ));
    for (protocol, service, endpoint) in [
        (Protocol::Grpc, "otlp-tls-grpc", "https://127.0.0.1:24317"),
        (
            Protocol::HttpProtobuf,
            "otlp-tls-http",
            "https://127.0.0.1:24318/v1/traces",
        ),
    ] {
        let settings = |certificate| Settings {
            protocol,
            endpoint: Some(endpoint.to_string()),
            certificate,
            client: client.clone(),
        };
        let untrusted = settings(None);
        let refused = tokio::task::spawn_blocking(move || export_one_span(&untrusted, service)).await??;
        ensure!(
            refused.is_err(),
            "{service}: exported to a collector the system's roots do not vouch for"
        );
        let trusted = settings(Some(pki.ca_cert()));
        let exported = tokio::task::spawn_blocking(move || export_one_span(&trusted, service)).await??;
        ensure!(exported.is_ok(), "{service}: export failed: {exported:?}");
        ks_tests::stack::wait_for(&format!("{service}'s span in the collector"), DEADLINE, || {
            let (code, body) = ks_tests::process::http_get(query, &format!("/api/traces?service={service}"));
            std::future::ready(Ok(code == 200 && body.contains("tls-check")))
        })
        .await?;
    }
    collector.terminate(Duration::from_secs(10));
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Exports one span named `tls-check` as `service` with `settings`; what flushing it said.
fn export_one_span(
    settings: &ks_shared::otlp::Settings,
    service: &'static str,
) -> anyhow::Result<opentelemetry_sdk::error::OTelSdkResult> {
    use opentelemetry::trace::{Tracer, TracerProvider};
    let exporter = ks_shared::otlp::exporter(settings)?;
    let provider = ks_shared::telemetry::tracer_provider(service, None, |b| b.with_batch_exporter(exporter));
    provider.tracer("tls-check").in_span("tls-check", |_| {});
    let flushed = provider.force_flush();
    // Already flushed: what shutting down says adds nothing.
    let _ = provider.shutdown();
    Ok(flushed)
}
