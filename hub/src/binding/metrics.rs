//! The binding controller's metrics: `kubestellar_binding_*`.

use ks_shared::runtime::{ControllerMetrics, Help};
use prometheus_client::registry::Registry;

pub type Metrics = ControllerMetrics;

/// Registers the binding controller's `metrics`.
pub fn register(metrics: &Metrics, registry: &mut Registry) {
    let help = Help {
        reconciles: "Binding and status checks done for a policy",
        errors: "Failed writes of Bindings, policy status or finalizers",
        writes: "Binding writes (made only when the content changed)",
        queue_depth: "Policies waiting for their Binding check",
    };
    metrics.register(registry, "binding", help);
}
