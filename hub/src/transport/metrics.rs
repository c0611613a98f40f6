//! The transport controller's metrics, named like the binding and status controllers' ones.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Bindings whose ManifestWorks were checked.
    pub reconciles: Counter,
    /// Failed reconciles (each retried with back-off).
    pub errors: Counter,
    /// ManifestWork writes and deletions (made only when content changed).
    pub writes: Counter,
    /// Bindings waiting to be checked, now or after a failure.
    pub queue_depth: Gauge,
}

impl Metrics {
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("kubestellar_transport");
        let counters = [
            (
                "reconciles",
                "Bindings whose ManifestWorks were checked",
                &self.reconciles,
            ),
            ("errors", "Failed reconciles (each retried with back-off)", &self.errors),
            (
                "writes",
                "ManifestWork writes and deletions (made only when content changed)",
                &self.writes,
            ),
        ];
        for (name, help, counter) in counters {
            sub.register(name, help, counter.clone());
        }
        sub.register(
            "queue_depth",
            "Bindings waiting to be checked, now or after a failure",
            self.queue_depth.clone(),
        );
    }
}
