//! Logging and tracing for every process: `tracing` output as text or JSON, an optional OTLP
//! trace exporter configured by the standard `OTEL_*` variables, and trace context carried in
//! an object's annotations (`tracing.k8s.io/traceparent`, `tracing.k8s.io/tracestate`).

use std::collections::BTreeMap;
use std::io::IsTerminal;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::names::{TRACE_ANNOTATION_PREFIX, TRACEPARENT_ANNOTATION, TRACESTATE_ANNOTATION};

/// How log lines are written to standard error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot build the OTLP trace exporter: {0}")]
    Exporter(#[from] crate::otlp::OtlpError),
    #[error("cannot install the tracing subscriber: {0}")]
    Subscriber(#[from] tracing_subscriber::util::TryInitError),
}

/// Keeps the trace pipeline alive; dropping it flushes and stops the exporter.
#[must_use = "dropping the guard stops trace export"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are being exported over OTLP.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(err) = provider.shutdown()
        {
            eprintln!("trace exporter shutdown: {err}");
        }
    }
}

/// True when the standard variables ask for OTLP trace export.
pub fn otlp_requested(env: impl Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The log levels unless `RUST_LOG` says otherwise: `info`, but only errors from kube's client,
/// which logs at `warn` the whole body of an answer it cannot decode (a LIST of Secrets, say).
/// The caller reports the failure itself.
pub const DEFAULT_LOG_FILTER: &str = "info,kube_client::client=error";

/// Installs the global subscriber for `service`, serving `cluster` (the WDS of a hub, the WEC
/// of an agent). Log levels come from `RUST_LOG` (default [`DEFAULT_LOG_FILTER`]). Spans go to OTLP only when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces-specific variable) is set; `OTEL_SERVICE_NAME`
/// overrides `service`.
pub fn init(service: &'static str, cluster: Option<&str>, format: LogFormat) -> Result<Telemetry, TelemetryError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    let output: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let provider = if otlp_requested(|name| std::env::var(name).ok()) {
        let exporter = crate::otlp::exporter(&crate::otlp::settings(|name| std::env::var(name).ok())?)?;
        Some(tracer_provider(service, cluster, |b| b.with_batch_exporter(exporter)))
    } else {
        None
    };
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer(service)));
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    // Rollout stages are recorded through the global tracer (crate::rollout).
    if let Some(provider) = &provider {
        opentelemetry::global::set_tracer_provider(provider.clone());
    }
    Registry::default().with(output).with(otel).with(filter).try_init()?;
    Ok(Telemetry { provider })
}

/// A tracer provider naming `service` (unless `OTEL_SERVICE_NAME` says otherwise) and this
/// process (see [`process_attributes`]), with the exporter that `configure` adds.
pub fn tracer_provider(
    service: &'static str,
    cluster: Option<&str>,
    configure: impl FnOnce(
        opentelemetry_sdk::trace::TracerProviderBuilder,
    ) -> opentelemetry_sdk::trace::TracerProviderBuilder,
) -> SdkTracerProvider {
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service);
    }
    let host = std::env::var("HOSTNAME").unwrap_or_default();
    let resource = resource.with_attributes(process_attributes(&host, std::process::id(), cluster));
    configure(SdkTracerProvider::builder().with_resource(resource.build())).build()
}

/// What tells one process's spans from another's: its version, an instance id (the host, a
/// Pod's name in Kubernetes, and the process id) and the cluster it serves, so that two agents'
/// spans come from two processes, each naming its WEC.
pub fn process_attributes(host: &str, pid: u32, cluster: Option<&str>) -> Vec<opentelemetry::KeyValue> {
    use opentelemetry::KeyValue;
    let instance = if host.is_empty() {
        pid.to_string()
    } else {
        format!("{host}/{pid}")
    };
    let mut attributes = vec![
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("service.instance.id", instance),
    ];
    if let Some(cluster) = cluster {
        attributes.push(KeyValue::new("k8s.cluster.name", cluster.to_string()));
    }
    attributes
}

/// Writes `cx`'s trace context into the annotations, replacing any earlier one.
pub fn inject_context(cx: &opentelemetry::Context, annotations: &mut BTreeMap<String, String>) {
    annotations.retain(|k, _| !k.starts_with(TRACE_ANNOTATION_PREFIX));
    TraceContextPropagator::new().inject_context(cx, &mut AnnotationCarrier(annotations));
}

/// The trace context carried by the annotations; an empty context when there is none (never the
/// caller's current span: an object without a trace must not join whatever trace is active).
pub fn extract_context(annotations: &BTreeMap<String, String>) -> opentelemetry::Context {
    TraceContextPropagator::new().extract_with_context(&opentelemetry::Context::new(), &AnnotationReader(annotations))
}

/// Maps W3C header names to annotation keys: `traceparent` → `tracing.k8s.io/traceparent`.
fn annotation_key(header: &str) -> Option<&'static str> {
    match header {
        "traceparent" => Some(TRACEPARENT_ANNOTATION),
        "tracestate" => Some(TRACESTATE_ANNOTATION),
        _ => None,
    }
}

struct AnnotationCarrier<'a>(&'a mut BTreeMap<String, String>);

impl Injector for AnnotationCarrier<'_> {
    fn set(&mut self, key: &str, value: String) {
        // An empty tracestate carries nothing; leaving it out keeps the object tidy.
        if value.is_empty() {
            return;
        }
        if let Some(key) = annotation_key(&key.to_ascii_lowercase()) {
            self.0.insert(key.to_string(), value);
        }
    }
}

struct AnnotationReader<'a>(&'a BTreeMap<String, String>);

impl Extractor for AnnotationReader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        annotation_key(&key.to_ascii_lowercase())
            .and_then(|k| self.0.get(k))
            .map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| k.strip_prefix(TRACE_ANNOTATION_PREFIX))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer};
    use opentelemetry_sdk::trace::InMemorySpanExporter;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::*;

    fn in_memory() -> (SdkTracerProvider, InMemorySpanExporter) {
        let exporter = InMemorySpanExporter::default();
        let provider = tracer_provider("test", None, |b| b.with_simple_exporter(exporter.clone()));
        (provider, exporter)
    }

    #[test]
    fn each_process_names_its_version_instance_and_cluster() {
        let attributes = |host, cluster| {
            process_attributes(host, 42, cluster)
                .into_iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect::<Vec<_>>()
        };
        let version = ("service.version".to_string(), env!("CARGO_PKG_VERSION").to_string());
        assert_eq!(
            attributes("ks-agent-5d9f", Some("cluster1")),
            [
                version.clone(),
                ("service.instance.id".into(), "ks-agent-5d9f/42".into()),
                ("k8s.cluster.name".into(), "cluster1".into()),
            ]
        );
        assert_eq!(
            attributes("", None),
            [version, ("service.instance.id".into(), "42".into())]
        );
    }

    #[test]
    fn context_travels_through_annotations() {
        let (provider, exporter) = in_memory();
        let tracer = provider.tracer("test");
        let parent = tracer.start("packaging");
        let parent_cx = opentelemetry::Context::current_with_span(parent);

        let mut annotations = BTreeMap::from([("app".to_string(), "x".to_string())]);
        inject_context(&parent_cx, &mut annotations);
        let traceparent = &annotations[TRACEPARENT_ANNOTATION];
        let parent_sc = parent_cx.span().span_context().clone();
        assert_eq!(
            traceparent,
            &format!("00-{}-{}-01", parent_sc.trace_id(), parent_sc.span_id()),
            "W3C traceparent"
        );
        assert_eq!(annotations["app"], "x", "other annotations are kept");

        let extracted = extract_context(&annotations);
        let child = tracer
            .span_builder("status report")
            .with_kind(SpanKind::Internal)
            .start_with_context(&tracer, &extracted);
        drop(child);
        parent_cx.span().end();

        let spans = exporter.get_finished_spans().unwrap();
        let child = spans.iter().find(|s| s.name == "status report").unwrap();
        assert_eq!(child.span_context.trace_id(), parent_sc.trace_id());
        assert_eq!(child.parent_span_id, parent_sc.span_id());
    }

    #[test]
    fn tracestate_round_trips_and_stale_context_is_replaced() {
        let mut annotations = BTreeMap::from([
            (
                TRACEPARENT_ANNOTATION.to_string(),
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string(),
            ),
            (TRACESTATE_ANNOTATION.to_string(), "vendor=abc".to_string()),
        ]);
        let cx = extract_context(&annotations);
        let sc = cx.span().span_context().clone();
        assert!(sc.is_remote() && sc.is_valid());
        assert_eq!(sc.trace_state().get("vendor"), Some("abc"));

        let (provider, _) = in_memory();
        let fresh = opentelemetry::Context::current_with_span(provider.tracer("test").start("new"));
        inject_context(&fresh, &mut annotations);
        assert!(
            !annotations.contains_key(TRACESTATE_ANNOTATION),
            "old tracestate must not survive"
        );
        assert!(annotations[TRACEPARENT_ANNOTATION].contains(&fresh.span().span_context().trace_id().to_string()));
    }

    #[test]
    fn no_annotations_means_no_parent() {
        let cx = extract_context(&BTreeMap::new());
        assert!(!cx.span().span_context().is_valid());
        let garbage = BTreeMap::from([(TRACEPARENT_ANNOTATION.to_string(), "not-a-traceparent".to_string())]);
        assert!(!extract_context(&garbage).span().span_context().is_valid());
    }

    #[test]
    fn an_active_span_is_not_a_parent() {
        let (provider, _) = in_memory();
        let active = opentelemetry::Context::current_with_span(provider.tracer("test").start("reconcile"));
        let _guard = active.attach();
        assert!(!extract_context(&BTreeMap::new()).span().span_context().is_valid());
    }

    #[test]
    fn tracing_spans_join_the_annotated_trace() {
        let (provider, exporter) = in_memory();
        let subscriber = Registry::default().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let upstream = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let annotations = BTreeMap::from([(TRACEPARENT_ANNOTATION.to_string(), upstream.to_string())]);

        let mut reinjected = BTreeMap::new();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("delivery");
            span.set_parent(extract_context(&annotations)).unwrap();
            let _entered = span.enter();
            inject_context(&tracing::Span::current().context(), &mut reinjected);
        });

        let spans = exporter.get_finished_spans().unwrap();
        assert_eq!(spans.len(), 1);
        assert_eq!(
            spans[0].span_context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(spans[0].parent_span_id.to_string(), "00f067aa0ba902b7");
        let expected = format!(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01",
            spans[0].span_context.span_id()
        );
        assert_eq!(
            reinjected[TRACEPARENT_ANNOTATION], expected,
            "our span becomes the parent downstream"
        );
    }

    #[test]
    fn otlp_only_when_an_endpoint_is_set() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        assert!(!otlp_requested(env(&[])));
        assert!(!otlp_requested(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(otlp_requested(env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:4317"
        )])));
        assert!(otlp_requested(env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:4317"
        )])));
        assert!(!otlp_requested(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_SDK_DISABLED", "true")
        ])));
    }
}
