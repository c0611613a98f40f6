//! The binding controller's metrics.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Binding and status checks done for a policy.
    pub reconciles: Counter,
    /// Failed writes.
    pub errors: Counter,
    /// Binding writes (only when content changed).
    pub binding_writes: Counter,
    /// Policies waiting for their Binding check.
    pub queue_depth: Gauge,
}

impl Metrics {
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("kubestellar_binding");
        sub.register(
            "reconciles",
            "Binding and status checks done for a policy",
            self.reconciles.clone(),
        );
        sub.register(
            "errors",
            "Failed writes of Bindings, policy status or finalizers",
            self.errors.clone(),
        );
        sub.register(
            "writes",
            "Binding writes (made only when the content changed)",
            self.binding_writes.clone(),
        );
        sub.register(
            "queue_depth",
            "Policies waiting for their Binding check",
            self.queue_depth.clone(),
        );
    }
}
