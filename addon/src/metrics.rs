//! The add-on controller's Prometheus metrics, served on /metrics.

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

/// Counters the controllers update; clones share them.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub writes: Family<ObjectLabels, Counter>,
    pub reconciles: Counter,
    pub errors: Counter,
    pub csrs_approved: Counter,
}

impl Metrics {
    /// Registers the metrics under the `ks_addon_` prefix.
    pub fn register(registry: &mut Registry) -> Metrics {
        let metrics = Metrics::default();
        for object in [
            Object::ManifestWork,
            Object::HubRole,
            Object::HubRoleBinding,
            Object::AddOnStatus,
            Object::ManagedClusterAddOn,
            Object::ClusterManagementAddOn,
        ] {
            metrics.writes.get_or_create(&ObjectLabels { object }).inc_by(0);
        }
        let registry = registry.sub_registry_with_prefix("ks_addon");
        registry.register("writes", "Writes to the hub, by object", metrics.writes.clone());
        registry.register(
            "reconciles",
            "Reconciles of a ManagedClusterAddOn",
            metrics.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed and will be retried",
            metrics.errors.clone(),
        );
        registry.register(
            "csrs_approved",
            "Agent certificate requests approved",
            metrics.csrs_approved.clone(),
        );
        metrics
    }

    pub fn wrote(&self, object: Object) {
        self.writes.get_or_create(&ObjectLabels { object }).inc();
    }
}
