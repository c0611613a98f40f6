//! The add-on controller's Prometheus metrics, served on /metrics: `kubestellar_addon_*`.

use ks_shared::runtime::{ControllerMetrics, Help};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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
    /// Per WEC, 1 while its ManagedClusterAddOn says the agent is available (OCM's lease check),
    /// else 0; gone with the add-on.
    pub agent_available: Family<ClusterLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    pub cluster: String,
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
        let ours = metrics.common.register(registry, &help);
        ours.register(
            "csrs_approved",
            "Agent certificate requests approved",
            metrics.csrs_approved.clone(),
        );
        ours.register(
            "agent_available",
            "1 while a WEC's ManagedClusterAddOn says its status agent is available, else 0",
            metrics.agent_available.clone(),
        );
        metrics
    }

    /// Notes what `cluster`'s ManagedClusterAddOn says of its agent; `None` when it is gone.
    pub fn agent(&self, cluster: &str, available: Option<bool>) {
        let labels = ClusterLabels {
            cluster: cluster.to_string(),
        };
        match available {
            Some(available) => {
                self.agent_available.get_or_create(&labels).set(i64::from(available));
            }
            None => {
                self.agent_available.remove(&labels);
            }
        }
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
        metrics.agent("cluster1", Some(true));
        metrics.agent("cluster2", Some(false));
        metrics.agent("cluster3", Some(true));
        metrics.agent("cluster3", None);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("cluster3"), "a gone add-on is forgotten: {text}");
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
                "kubestellar_addon_agent_available{cluster=\"cluster1\"} 1",
                "kubestellar_addon_agent_available{cluster=\"cluster2\"} 0",
            ],
        );
    }
}
