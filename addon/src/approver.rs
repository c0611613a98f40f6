//! Approves the agents' certificate requests (see [`crate::registration::decide`]) and nothing
//! else: only CSRs labelled for this add-on are even watched.

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use ks_shared::names::{OCM_ADDON_NAME_LABEL, STATUS_ADDON_CSR_APPROVAL_REASON, STATUS_ADDON_NAME, field_manager};
use ks_shared::ocm::{ManagedCluster, ManagedClusterAddOn};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::registration::{self, ClusterState, Verdict};

/// Watches this add-on's CSRs until `shutdown`, approving those [`registration::decide`] allows.
pub async fn run(client: Client, metrics: Metrics, shutdown: CancellationToken) {
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let ours = watcher::Config::default().labels(&format!("{OCM_ADDON_NAME_LABEL}={STATUS_ADDON_NAME}"));
    let requests = watcher(csrs.clone(), ours)
        .backoff(ks_shared::runtime::WatchBackoff::default())
        .applied_objects();
    tokio::pin!(requests);
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = requests.next() => next,
        };
        match next {
            None => return,
            Some(Err(err)) => tracing::warn!(error = %err, "watching CSRs"),
            Some(Ok(csr)) => {
                if let Err(err) = consider(&client, &csrs, &metrics, csr).await {
                    tracing::warn!(error = %err, "approving a CSR");
                }
            }
        }
    }
}

async fn consider(
    client: &Client,
    csrs: &Api<CertificateSigningRequest>,
    metrics: &Metrics,
    csr: CertificateSigningRequest,
) -> Result<(), kube::Error> {
    let Some(cluster) = registration::claimed_cluster(&csr) else {
        return Ok(());
    };
    if registration::is_decided(&csr) {
        return Ok(());
    }
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(client.clone(), cluster);
    let state = ClusterState {
        cluster_exists: clusters.get_opt(cluster).await?.is_some(),
        addon_enabled: addons
            .get_opt(STATUS_ADDON_NAME)
            .await?
            .is_some_and(|a| a.metadata.deletion_timestamp.is_none()),
    };
    let name = csr.name_any();
    match registration::decide(&csr, state) {
        Verdict::Skip(why) => tracing::info!(csr = %name, cluster, why, "CSR not approved"),
        Verdict::Approve { cluster } => {
            // The resourceVersion makes this fail, rather than overwrite, if someone else
            // decided the CSR since we read it.
            let approval = json!({
                "metadata": {"resourceVersion": csr.resource_version()},
                "status": {"conditions": [{
                    "type": "Approved",
                    "status": "True",
                    "reason": STATUS_ADDON_CSR_APPROVAL_REASON,
                    "message": format!("ks-addon approved the {STATUS_ADDON_NAME} agent certificate for cluster {cluster}"),
                }]},
            });
            let params = PatchParams {
                field_manager: Some(field_manager::ADDON.into()),
                ..Default::default()
            };
            csrs.patch_approval(&name, &params, &Patch::Merge(&approval)).await?;
            metrics.csrs_approved.inc();
            tracing::info!(csr = %name, cluster, "agent CSR approved");
        }
    }
    Ok(())
}
