//! The add-on controller's Prometheus metrics, served on /metrics: `kubestellar_addon_*`.

use ks_shared::runtime::{ControllerMetrics, Help};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// What the controller wrote to the hub.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Object {
    ManifestWork,
    HubRole,
    HubRoleBinding,
    MailboxQuota,
    AddOnStatus,
    ManagedClusterAddOn,
    ClusterManagementAddOn,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    pub object: Object,
}

/// Counters and gauges the controllers update; clones share them.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Its `writes` are writes to the hub, by object; its `queue_depth` the add-ons waiting for a
    /// retry after a failure (the rest of the queue is kube-runtime's, which does not say).
    pub common: ControllerMetrics<Family<ObjectLabels, Counter>>,
    pub csrs_approved: Counter,
}

impl Metrics {
    /// Registers the metrics under the `kubestellar_addon_` prefix.
    pub fn register(registry: &mut Registry) -> Metrics {
        let metrics = Metrics::default();
        // Every object from the start at 0, so that rates are defined before the first write.
        for object in [
            Object::ManifestWork,
            Object::HubRole,
            Object::HubRoleBinding,
            Object::MailboxQuota,
            Object::AddOnStatus,
            Object::ManagedClusterAddOn,
            Object::ClusterManagementAddOn,
        ] {
            metrics.common.writes.get_or_create(&ObjectLabels { object }).inc_by(0);
        }
        let help = Help {
            controller: "addon",
            reconciles: "Reconciles of a ManagedClusterAddOn",
            errors: "Reconciles that failed and will be retried",
            writes: "Writes to the hub, by object",
            queue_depth: "ManagedClusterAddOns waiting for a retry after a failed reconcile",
        };
        metrics.common.register(registry, &help).register(
            "csrs_approved",
            "Agent certificate requests approved",
            metrics.csrs_approved.clone(),
        );
        metrics
    }

    pub fn wrote(&self, object: Object) {
        self.common.writes.get_or_create(&ObjectLabels { object }).inc();
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
        metrics.wrote(Object::AddOnStatus);
        metrics.csrs_approved.inc();
        assert_exports(
            &registry,
            &[
                "kubestellar_addon_writes_total{object=\"AddOnStatus\"} 1",
                "kubestellar_addon_writes_total{object=\"ManifestWork\"} 0",
                "kubestellar_addon_writes_total{object=\"MailboxQuota\"} 0",
                "kubestellar_addon_reconciles_total 0",
                "kubestellar_addon_errors_total 0",
                "kubestellar_addon_queue_depth 0",
                "kubestellar_addon_csrs_approved_total 1",
            ],
        );
    }
}
