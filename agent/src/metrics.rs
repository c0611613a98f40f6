//! The agent's Prometheus metrics, served on /metrics: `kubestellar_agent_*`.

use ks_shared::runtime::{ControllerMetrics, Help};
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
    /// Its `writes` are WorkStatus writes to the hub, by verb.
    pub common: ControllerMetrics<Family<VerbLabels, Counter>>,
    pub informers: Gauge,
}

impl Metrics {
    /// Registers the metrics under the `kubestellar_agent_` prefix.
    pub fn register(registry: &mut Registry) -> Metrics {
        let metrics = Metrics::default();
        // Every verb from the start at 0, so that rates are defined before the first write.
        for verb in [Verb::Apply, Verb::ApplyStatus, Verb::Delete] {
            metrics.common.writes.get_or_create(&VerbLabels { verb }).inc_by(0);
        }
        let help = Help {
            controller: "agent",
            reconciles: "Reconciles of one delivered object's WorkStatus",
            errors: "Reconciles (of AppliedManifestWorks or objects) that failed and will be retried",
            writes: "WorkStatus writes to the hub, by verb",
            queue_depth: "Delivered objects waiting to be reconciled",
        };
        metrics.common.register(registry, &help).register(
            "informers",
            "Informers running on the WEC for delivered resources (one per GVR)",
            metrics.informers.clone(),
        );
        metrics
    }

    pub fn wrote(&self, verb: Verb) {
        self.common.writes.get_or_create(&VerbLabels { verb }).inc();
    }
}

#[cfg(test)]
mod tests {
    use ks_shared::runtime::assert_exports;

    use super::*;

    #[test]
    fn metrics_are_exported_with_their_names() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.wrote(Verb::ApplyStatus);
        metrics.informers.set(2);
        assert_exports(
            &registry,
            &[
                "kubestellar_agent_writes_total{verb=\"ApplyStatus\"} 1",
                "kubestellar_agent_writes_total{verb=\"Apply\"} 0",
                "kubestellar_agent_writes_total{verb=\"Delete\"} 0",
                "kubestellar_agent_reconciles_total 0",
                "kubestellar_agent_errors_total 0",
                "kubestellar_agent_queue_depth 0",
                "kubestellar_agent_informers 2",
            ],
        );
    }
}
