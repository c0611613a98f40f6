//! The transport controller's metrics.

use super::expectations;

/// The transport controller's metrics: `kubestellar_transport_*`. Clones share the values.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub common: ks_shared::runtime::ControllerMetrics,
    /// Bytes of the ManifestWorks written: with the final content's size, what rewriting
    /// growing ManifestWorks costs the ITS.
    pub written_bytes: prometheus_client::metrics::counter::Counter,
    /// Passes that only reported a Binding's propagation (the status of its ManifestWorks or
    /// its policy changed), not counted as reconciles.
    pub reports: prometheus_client::metrics::counter::Counter,
    pub lag: expectations::Lag,
    /// Events (on policies and delivered objects) that did not fit their queue.
    pub events_dropped: prometheus_client::metrics::counter::Counter,
}

impl Metrics {
    /// Registers them as `kubestellar_transport_*`.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let help = ks_shared::runtime::Help {
            controller: "transport",
            reconciles: "Bindings whose ManifestWorks were checked",
            errors: "Failed reconciles (each retried with back-off)",
            writes: "ManifestWork writes and deletions (made only when content changed)",
            queue_depth: "Bindings waiting to be checked, now or after a failure",
        };
        let sub = self.common.register(registry, &help);
        sub.register(
            "written_bytes",
            "Bytes of the ManifestWorks written (request bodies)",
            self.written_bytes.clone(),
        );
        sub.register(
            "reports",
            "Bindings whose propagation alone was brought in line, as only the status of their ManifestWorks or policy changed (not counted in reconciles)",
            self.reports.clone(),
        );
        sub.register(
            "write_seen_seconds",
            "Seconds from a ManifestWork write's reply to the watch showing it, 0 when it showed first (its Binding is planned from what it wrote meanwhile)",
            self.lag.seen.clone(),
        );
        sub.register(
            "events_dropped",
            "Events on policies and delivered objects dropped as their queue was full",
            self.events_dropped.clone(),
        );
        sub.register(
            "write_unseen",
            "ManifestWork writes given up on unseen: the watch had shown nothing at all for 5 minutes since their reply (from then on their Binding is planned from the cache alone)",
            self.lag.given_up.clone(),
        );
    }
}
