//! The status controller's metrics.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Workload objects whose returned status and CombinedStatuses were checked.
    pub reconciles: Counter,
    /// Failed reconciles and writes.
    pub errors: Counter,
    /// Writes of a workload object's `.status` (returning or clearing it).
    pub status_writes: Counter,
    /// CombinedStatus writes and deletions.
    pub combined_status_writes: Counter,
    /// Workload objects, Bindings and StatusCollectors waiting to be checked.
    pub queue_depth: Gauge,
}

impl Metrics {
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("kubestellar_status");
        let counters = [
            (
                "reconciles",
                "Workload objects whose returned status and CombinedStatuses were checked",
                &self.reconciles,
            ),
            ("errors", "Failed reconciles and writes", &self.errors),
            (
                "writes",
                "Writes of a workload object's .status (returning or clearing it)",
                &self.status_writes,
            ),
            (
                "combined_status_writes",
                "CombinedStatus writes and deletions",
                &self.combined_status_writes,
            ),
        ];
        for (name, help, counter) in counters {
            sub.register(name, help, counter.clone());
        }
        sub.register(
            "queue_depth",
            "Workload objects, Bindings and StatusCollectors waiting to be checked",
            self.queue_depth.clone(),
        );
    }
}
