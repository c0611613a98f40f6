//! The transport controller's metrics: `kubestellar_transport_*`.

use ks_shared::runtime::{ControllerMetrics, Help};
use prometheus_client::registry::Registry;

pub type Metrics = ControllerMetrics;

/// Registers the transport controller's `metrics`.
pub fn register(metrics: &Metrics, registry: &mut Registry) {
    let help = Help {
        reconciles: "Bindings whose ManifestWorks were checked",
        errors: "Failed reconciles (each retried with back-off)",
        writes: "ManifestWork writes and deletions (made only when content changed)",
        queue_depth: "Bindings waiting to be checked, now or after a failure",
    };
    metrics.register(registry, "transport", help);
}
