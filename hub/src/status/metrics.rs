//! The status controller's metrics: `kubestellar_status_*`.

use ks_shared::runtime::{ControllerMetrics, Help};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// Clones share the values.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Its `writes` are of a workload object's `.status` (returning or clearing it), a policy's
    /// health and a HealthRule's status.
    pub common: ControllerMetrics,
    /// CombinedStatus writes and deletions.
    pub combined_status_writes: Counter,
    /// WorkStatuses seen with a status too large to keep.
    pub refused_reports: Counter,
    /// WorkStatuses cached without what they report, their object not sent to their WEC.
    pub withheld_reports: Counter,
    /// Health change Events not published, their queue full.
    pub health_events_dropped: Counter,
}

impl Metrics {
    /// Registers them as `kubestellar_status_*`.
    pub fn register(&self, registry: &mut Registry) {
        let help = Help {
            controller: "status",
            reconciles: "Workload objects whose returned status and CombinedStatuses were checked",
            errors: "Failed reconciles and writes",
            writes: "Writes of a workload object's .status (returning or clearing it), a policy's health and a HealthRule's status",
            queue_depth: "Workload objects, Bindings and StatusCollectors waiting to be checked",
        };
        let ours = self.common.register(registry, &help);
        ours.register(
            "combined_status_writes",
            "CombinedStatus writes and deletions",
            self.combined_status_writes.clone(),
        );
        ours.register(
            "refused_reports",
            "WorkStatuses seen with a status larger than the hub keeps (256 KiB), kept as none",
            self.refused_reports.clone(),
        );
        ours.register(
            "withheld_reports",
            "WorkStatuses seen on an object not sent to their WEC, cached without what they report",
            self.withheld_reports.clone(),
        );
        ours.register(
            "health_events_dropped",
            "Events on health changes not published, more than 1024 waiting",
            self.health_events_dropped.clone(),
        );
    }
}
