//! One trace per rollout: the stages a KubeStellar user recognises, as OpenTelemetry spans with
//! explicit start and end times (delivery through OCM is reconstructed from timestamps, since
//! OCM does not trace), handed from hop to hop in annotations ([`crate::telemetry::inject_context`]).
//! When the rollout started and when the context was last sent ride in its tracestate
//! (`kubestellar=<start unix ms>.<sent unix ms>`), so the next hop can show the gap before it as
//! a span of its own and measure end-to-end latencies. Each stage is also observed in the
//! upstream-compatible latency histograms ([`register`]).
//!
//! Without an installed tracer provider (no `OTEL_EXPORTER_OTLP_ENDPOINT`) nothing is recorded,
//! and a context from the user's object is passed on unchanged.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::global;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceState, Tracer};
/// Re-exported so that callers need no OpenTelemetry dependency of their own.
pub use opentelemetry::{Context, KeyValue};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The stages, as span names.
pub mod stage {
    /// Hub: a new generation of a selected object, until its ManifestWorks are written.
    pub const PACKAGING: &str = "packaging";
    /// ManifestWork written → object on the WEC (OCM's work agent).
    pub const DELIVERY: &str = "delivery";
    /// Object on the WEC → its status first reported for this generation.
    pub const ACTIVATION: &str = "activation";
    /// The agent writes the object's WorkStatus.
    pub const STATUS_REPORT: &str = "status report";
    /// The status controller writes the status into the WDS.
    pub const STATUS_PROPAGATION: &str = "status propagation";
    /// The WEC's status report → the hub judges the object healthy on that WEC.
    pub const HEALTHY: &str = "healthy";
}

/// Span attribute keys.
pub mod attribute {
    pub const GROUP: &str = "k8s.object.group";
    pub const RESOURCE: &str = "k8s.object.resource";
    pub const NAMESPACE: &str = "k8s.object.namespace";
    pub const NAME: &str = "k8s.object.name";
    pub const GENERATION: &str = "k8s.object.generation";
    pub const BINDING_POLICY: &str = "kubestellar.binding_policy";
    pub const WEC: &str = "kubestellar.wec";
}

/// The tracestate key carrying when the rollout started and when the context was sent.
const STAMP_KEY: &str = "kubestellar";

/// Which rollout a latency is of, as far as a bounded label can say: the WEC (`cluster`) for the
/// stages of one WEC, the BindingPolicy (`policy`) for packaging, which writes for all of a
/// policy's WECs at once; empty where the stage does not know it.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Labels {
    pub cluster: String,
    pub policy: String,
}

impl Labels {
    /// Latencies on the WEC `cluster`.
    pub fn on(cluster: &str) -> Labels {
        Labels {
            cluster: cluster.to_string(),
            policy: String::new(),
        }
    }

    /// Latencies of the BindingPolicy `policy`.
    pub fn of_policy(policy: &str) -> Labels {
        Labels {
            cluster: String::new(),
            policy: policy.to_string(),
        }
    }
}

/// One latency histogram per [`Labels`].
pub type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// The latency histograms, by upstream's names; every process serves all of them (the stages
/// it does not see stay empty).
pub struct Latencies {
    stages: [(&'static str, Histograms); 5],
    pub downsync: Histograms,
    pub status_propagation: Histograms,
    pub end_to_end: Histograms,
}

fn histogram() -> Histogram {
    // 1 ms to ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// A family served from the start: an empty one would not be served at all until its first
/// observation, and dashboards and alerts could not tell a name we serve from a typo.
fn histograms() -> Histograms {
    let family: Histograms = Family::new_with_constructor(histogram);
    drop(family.get_or_create(&Labels::default()));
    family
}

/// The process's latency histograms.
pub fn latencies() -> &'static Latencies {
    static LATENCIES: OnceLock<Latencies> = OnceLock::new();
    LATENCIES.get_or_init(|| Latencies {
        stages: [
            stage::PACKAGING,
            stage::DELIVERY,
            stage::ACTIVATION,
            stage::STATUS_REPORT,
            stage::STATUS_PROPAGATION,
        ]
        .map(|stage| (stage, histograms())),
        downsync: histograms(),
        status_propagation: histograms(),
        end_to_end: histograms(),
    })
}

impl Latencies {
    fn stage(&self, stage: &str) -> Option<&Histograms> {
        self.stages.iter().find(|(s, _)| *s == stage).map(|(_, h)| h)
    }
}

/// Seconds from `start` to `end` (0 when the clock went backwards).
pub fn seconds(start: SystemTime, end: SystemTime) -> f64 {
    end.duration_since(start).unwrap_or_default().as_secs_f64()
}

/// Registers the latency histograms under upstream KubeStellar's metric names.
pub fn register(registry: &mut Registry) {
    let l = latencies();
    let named = [
        (
            "kubestellar_downsync_packaging_duration_seconds",
            "WDS object change until its ManifestWorks are written",
            stage::PACKAGING,
        ),
        (
            "kubestellar_downsync_delivery_duration_seconds",
            "ManifestWork written until the object is on the WEC",
            stage::DELIVERY,
        ),
        (
            "kubestellar_downsync_activation_duration_seconds",
            "Object on the WEC until its status shows the generation applied",
            stage::ACTIVATION,
        ),
        (
            "kubestellar_statusPropagation_report_duration_seconds",
            "WEC status change seen until its WorkStatus is written",
            stage::STATUS_REPORT,
        ),
        (
            "kubestellar_statusPropagation_finalization_duration_seconds",
            "WorkStatus change seen until the WDS status is written",
            stage::STATUS_PROPAGATION,
        ),
    ];
    for (name, help, stage) in named {
        if let Some(histogram) = l.stage(stage) {
            registry.register(name, help, histogram.clone());
        }
    }
    registry.register(
        "kubestellar_downsync_duration_seconds",
        "WDS object change until the object is on the WEC",
        l.downsync.clone(),
    );
    registry.register(
        "kubestellar_statusPropagation_duration_seconds",
        "WEC status change seen until the WDS status is written",
        l.status_propagation.clone(),
    );
    registry.register(
        "kubestellar_e2e_latency_duration_seconds",
        "WDS object change until its status is written back into the WDS",
        l.end_to_end.clone(),
    );
}

/// Records a finished `stage` span, a child of `parent` (a trace root when `parent` holds no
/// span), observed in its histogram under `labels`, and returns a context holding it, to pass on.
pub fn record(
    stage: &'static str,
    parent: &Context,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
    labels: &Labels,
) -> Context {
    use opentelemetry::trace::Span;
    let tracer = global::tracer("kubestellar");
    let mut span = tracer
        .span_builder(stage)
        .with_start_time(start)
        .with_attributes(attributes)
        .start_with_context(&tracer, parent);
    let context = span.span_context().clone();
    span.end_with_timestamp(end.max(start));
    if let Some(histograms) = latencies().stage(stage) {
        histograms.get_or_create(labels).observe(seconds(start, end));
    }
    if context.is_valid() {
        tracing::debug!(
            stage,
            trace_id = %context.trace_id(),
            cluster = %labels.cluster,
            policy = %labels.policy,
            seconds = seconds(start, end),
            "rollout stage recorded"
        );
        parent.with_remote_span_context(context)
    } else {
        parent.clone()
    }
}

/// `cx` stamped as sent now, at `sent`; when its rollout started is kept from an earlier stamp
/// (else it is `sent`).
pub fn stamp_sent(cx: &Context, sent: SystemTime) -> Context {
    stamp(cx, started_at(cx).unwrap_or(sent), sent)
}

/// `cx` as the start of a rollout at `started`, not yet sent.
pub fn stamp_started(cx: &Context, started: SystemTime) -> Context {
    stamp(cx, started, started)
}

/// `cx` with both times in its tracestate (unchanged when it holds no span or the tracestate
/// cannot take them).
fn stamp(cx: &Context, started: SystemTime, sent: SystemTime) -> Context {
    let span = cx.span();
    let sc = span.span_context();
    let millis = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    match sc
        .trace_state()
        .insert(STAMP_KEY, format!("{}.{}", millis(started), millis(sent)))
    {
        Ok(state) if sc.is_valid() => cx.with_remote_span_context(SpanContext::new(
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags(),
            sc.is_remote(),
            state,
        )),
        _ => cx.clone(),
    }
}

/// When `cx` was sent, if it says.
pub fn sent_at(cx: &Context) -> Option<SystemTime> {
    stamps(cx.span().span_context().trace_state()).map(|(_, sent)| sent)
}

/// When the rollout of `cx` started, if it says.
pub fn started_at(cx: &Context) -> Option<SystemTime> {
    stamps(cx.span().span_context().trace_state()).map(|(started, _)| started)
}

fn stamps(state: &TraceState) -> Option<(SystemTime, SystemTime)> {
    let (started, sent) = state.get(STAMP_KEY)?.split_once('.')?;
    let at = |millis: &str| Some(UNIX_EPOCH + Duration::from_millis(millis.parse().ok()?));
    Some((at(started)?, at(sent)?))
}

/// The trace id of `cx`'s span, as Jaeger and log lines show it (32 hex digits).
pub fn trace_id(cx: &Context) -> String {
    cx.span().span_context().trace_id().to_string()
}

/// Whether `cx` carries a valid span to continue.
pub fn is_traced(cx: &Context) -> bool {
    cx.span().span_context().is_valid()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use opentelemetry_sdk::trace::InMemorySpanExporter;

    use super::*;
    use crate::telemetry::{extract_context, inject_context, tracer_provider};

    #[test]
    fn stages_chain_through_annotations_with_their_times() {
        let exporter = InMemorySpanExporter::default();
        let provider = tracer_provider("test", None, |b| b.with_simple_exporter(exporter.clone()));
        global::set_tracer_provider(provider.clone());
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let t1 = t0 + Duration::from_millis(40);
        let t2 = t1 + Duration::from_millis(300);

        let packaging = record(
            stage::PACKAGING,
            &Context::new(),
            t0,
            t1,
            vec![KeyValue::new(attribute::NAME, "web")],
            &Labels::of_policy("web-policy"),
        );
        let mut annotations = BTreeMap::new();
        inject_context(&stamp_sent(&stamp_started(&packaging, t0), t1), &mut annotations);
        let received = extract_context(&annotations);
        assert_eq!((started_at(&received), sent_at(&received)), (Some(t0), Some(t1)));
        let resent = stamp_sent(&received, t2);
        assert_eq!(
            (started_at(&resent), sent_at(&resent)),
            (Some(t0), Some(t2)),
            "the start is kept"
        );
        record(
            stage::DELIVERY,
            &received,
            sent_at(&received).unwrap(),
            t2,
            vec![],
            &Labels::on("cluster1"),
        );
        let packaged = latencies().stage(stage::PACKAGING).unwrap();
        assert!(
            packaged.get(&Labels::of_policy("web-policy")).is_some(),
            "observed under its policy"
        );

        let spans = exporter.get_finished_spans().unwrap();
        let (root, delivery) = (&spans[0], &spans[1]);
        assert_eq!((root.name.as_ref(), delivery.name.as_ref()), ("packaging", "delivery"));
        assert_eq!(delivery.parent_span_id, root.span_context.span_id());
        assert_eq!(delivery.span_context.trace_id(), root.span_context.trace_id());
        assert_eq!((root.start_time, root.end_time), (t0, t1));
        assert_eq!((delivery.start_time, delivery.end_time), (t1, t2));
        assert!(root.attributes.contains(&KeyValue::new(attribute::NAME, "web")));
    }

    #[test]
    fn a_recorded_stage_is_logged_with_its_trace_id() {
        use std::io::Write;
        use std::sync::{Arc, Mutex};

        #[derive(Clone, Default)]
        struct Capture(Arc<Mutex<Vec<u8>>>);
        impl Write for Capture {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let provider = tracer_provider("test", None, |b| {
            b.with_simple_exporter(InMemorySpanExporter::default())
        });
        global::set_tracer_provider(provider);
        let captured = Capture::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let delivered = tracing::subscriber::with_default(subscriber, || {
            record(
                stage::DELIVERY,
                &Context::new(),
                t0,
                t0 + Duration::from_millis(5),
                vec![],
                &Labels::on("cluster1"),
            )
        });
        let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(is_traced(&delivered));
        assert!(
            logged.contains(&format!("trace_id={}", trace_id(&delivered))),
            "{logged}"
        );
        assert!(
            logged.contains("stage=\"delivery\"") && logged.contains("cluster=cluster1"),
            "{logged}"
        );
    }

    #[test]
    fn histograms_carry_upstream_names() {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for name in [
            "kubestellar_downsync_packaging_duration_seconds",
            "kubestellar_downsync_delivery_duration_seconds",
            "kubestellar_downsync_activation_duration_seconds",
            "kubestellar_downsync_duration_seconds",
            "kubestellar_statusPropagation_report_duration_seconds",
            "kubestellar_statusPropagation_finalization_duration_seconds",
            "kubestellar_statusPropagation_duration_seconds",
            "kubestellar_e2e_latency_duration_seconds",
        ] {
            assert!(text.contains(&format!("# TYPE {name} histogram")), "{name} in:\n{text}");
        }
    }

    #[test]
    fn nothing_to_stamp_or_read_without_a_span() {
        let cx = stamp_sent(&Context::new(), SystemTime::now());
        assert!(!is_traced(&cx));
        assert_eq!(sent_at(&cx), None);
    }
}
