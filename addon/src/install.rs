//! Registering the add-on with the hub, and (with `--install-all`) enabling it on every cluster.

use std::collections::HashSet;

use futures::StreamExt;
use ks_shared::names::{STATUS_ADDON_NAME, field_manager};
use ks_shared::ocm::{ClusterManagementAddOn, ManagedCluster, ManagedClusterAddOn};
use ks_shared::runtime::watch_health::{self, WatchRole};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, Object};
use crate::settings::{CONFIG_GROUP, CONFIG_RESOURCE};

/// The ClusterManagementAddOn registering `addon-status`, accepting AddOnDeploymentConfigs.
pub fn cluster_management_addon() -> Value {
    json!({
        "apiVersion": ClusterManagementAddOn::api_version(&()),
        "kind": ClusterManagementAddOn::kind(&()),
        "metadata": {"name": STATUS_ADDON_NAME},
        "spec": {
            "addOnMeta": {
                "displayName": "KubeStellar status add-on",
                "description": "Reports the status of objects KubeStellar delivers to a WEC back to the ITS as WorkStatus objects",
            },
            "supportedConfigs": [{"group": CONFIG_GROUP, "resource": CONFIG_RESOURCE}],
        },
    })
}

/// A ManagedClusterAddOn enabling `addon-status` on `cluster`, with nothing set in its spec.
pub fn managed_cluster_addon(cluster: &str) -> Value {
    json!({
        "apiVersion": ManagedClusterAddOn::api_version(&()),
        "kind": ManagedClusterAddOn::kind(&()),
        "metadata": {"name": STATUS_ADDON_NAME, "namespace": cluster},
        "spec": {},
    })
}

/// Creates or updates the ClusterManagementAddOn (server-side apply: an unchanged apply is no write).
pub async fn register_addon(client: &Client, metrics: &Metrics) -> Result<(), kube::Error> {
    let api: Api<ClusterManagementAddOn> = Api::all(client.clone());
    api.patch(
        STATUS_ADDON_NAME,
        &PatchParams::apply(field_manager::ADDON).force(),
        &Patch::Apply(cluster_management_addon()),
    )
    .await?;
    metrics.wrote(Object::ClusterManagementAddOn);
    Ok(())
}

/// Enables the add-on on every ManagedCluster, as it appears, until `shutdown`. Each cluster is
/// enabled once per process: an add-on an administrator deletes later stays deleted until restart.
pub async fn install_on_every_cluster(client: Client, metrics: Metrics, shutdown: CancellationToken) {
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    let watched = watcher(clusters, watcher::Config::default()).backoff(ks_shared::runtime::WatchBackoff::default());
    let events = watch_health::observe("ManagedCluster", WatchRole::Essential, watched).applied_objects();
    tokio::pin!(events);
    let mut enabled: HashSet<String> = HashSet::new();
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = events.next() => next,
        };
        let cluster = match next {
            None => return,
            Some(Err(err)) => {
                tracing::warn!(error = %err, "watching ManagedClusters");
                continue;
            }
            Some(Ok(cluster)) => cluster,
        };
        let name = cluster.name_any();
        if cluster.metadata.deletion_timestamp.is_some() {
            enabled.remove(&name);
            continue;
        }
        if enabled.contains(&name) {
            continue;
        }
        // Retried on the cluster's next change (its status is renewed regularly) if it fails,
        // e.g. while its namespace does not exist yet.
        match enable(&client, &name).await {
            Ok(created) => {
                if created {
                    metrics.wrote(Object::ManagedClusterAddOn);
                    tracing::info!(cluster = %name, "add-on enabled");
                }
                enabled.insert(name);
            }
            Err(err) => tracing::warn!(cluster = %name, error = %err, "enabling the add-on"),
        }
    }
}

/// Creates the cluster's ManagedClusterAddOn if absent; true when it did.
async fn enable(client: &Client, cluster: &str) -> Result<bool, kube::Error> {
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(client.clone(), cluster);
    if addons.get_opt(STATUS_ADDON_NAME).await?.is_some() {
        return Ok(false);
    }
    addons
        .patch(
            STATUS_ADDON_NAME,
            &PatchParams::apply(field_manager::ADDON),
            &Patch::Apply(managed_cluster_addon(cluster)),
        )
        .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_objects_name_the_addon() {
        let cma = cluster_management_addon();
        assert_eq!(cma["metadata"]["name"], STATUS_ADDON_NAME);
        assert_eq!(cma["kind"], "ClusterManagementAddOn");
        assert_eq!(cma["spec"]["supportedConfigs"][0]["resource"], CONFIG_RESOURCE);
        let mca = managed_cluster_addon("cluster1");
        assert_eq!(mca["metadata"]["namespace"], "cluster1");
        assert_eq!(mca["apiVersion"], "addon.open-cluster-management.io/v1alpha1");
    }
}
