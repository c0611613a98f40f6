//! The agent's Prometheus metrics, served on /metrics.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The kind of write made to a WorkStatus on the hub.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Verb {
    /// Server-side apply of metadata, spec and statusDetails (creates the object when absent).
    Apply,
    /// Server-side apply of the status subresource.
    ApplyStatus,
    Delete,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: Verb,
}

/// Counters and gauges the controllers update; clones share them.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub writes: Family<VerbLabels, Counter>,
    pub reconciles: Counter,
    pub errors: Counter,
    pub queue_depth: Gauge,
    pub informers: Gauge,
}

impl Metrics {
    /// Registers the metrics under the `ks_agent_` prefix.
    pub fn register(registry: &mut Registry) -> Metrics {
        let metrics = Metrics::default();
        // Every verb from the start at 0, so that rates are defined before the first write.
        for verb in [Verb::Apply, Verb::ApplyStatus, Verb::Delete] {
            metrics.writes.get_or_create(&VerbLabels { verb }).inc_by(0);
        }
        let registry = registry.sub_registry_with_prefix("ks_agent");
        registry.register(
            "work_status_writes",
            "WorkStatus writes to the hub, by verb",
            metrics.writes.clone(),
        );
        registry.register(
            "reconciles",
            "Reconciles of one delivered object's WorkStatus",
            metrics.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles (of AppliedManifestWorks or objects) that failed and will be retried",
            metrics.errors.clone(),
        );
        registry.register(
            "queue_depth",
            "Delivered objects waiting to be reconciled",
            metrics.queue_depth.clone(),
        );
        registry.register(
            "informers",
            "Informers running on the WEC for delivered resources (one per GVR)",
            metrics.informers.clone(),
        );
        metrics
    }

    pub fn wrote(&self, verb: Verb) {
        self.writes.get_or_create(&VerbLabels { verb }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_exported_with_their_names() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.wrote(Verb::ApplyStatus);
        metrics.informers.set(2);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("ks_agent_work_status_writes_total{verb=\"ApplyStatus\"} 1"),
            "{text}"
        );
        assert!(text.contains("ks_agent_informers 2"), "{text}");
        assert!(
            text.contains("ks_agent_work_status_writes_total{verb=\"Delete\"} 0"),
            "{text}"
        );
        assert!(text.contains("ks_agent_reconciles_total 0"), "{text}");
    }
}
