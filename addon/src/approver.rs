//! Approves the agents' certificate requests (see [`crate::registration::decide`]) and nothing
//! else: only CSRs labelled for this add-on are even watched.

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use ks_shared::names::{OCM_ADDON_NAME_LABEL, STATUS_ADDON_CSR_APPROVAL_REASON, STATUS_ADDON_NAME, field_manager};
use ks_shared::ocm::{ManagedCluster, ManagedClusterAddOn};
use ks_shared::runtime::watch_health::{self, WatchRole};
use ks_shared::runtime::{Backoff, Failure, failure};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::registration::{self, ClusterState, Verdict};

/// Watches this add-on's CSRs until `shutdown`, approving those [`registration::decide`] allows.
/// One whose approval fails is tried again after a back-off (the watch shows it again only if
/// it changes).
pub async fn run(client: Client, metrics: Metrics, shutdown: CancellationToken) {
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let ours = watcher::Config::default().labels(&format!("{OCM_ADDON_NAME_LABEL}={STATUS_ADDON_NAME}"));
    let watched = watcher(csrs.clone(), ours).backoff(ks_shared::runtime::WatchBackoff::default());
    let requests = watch_health::observe("CertificateSigningRequest", WatchRole::Essential, watched).applied_objects();
    tokio::pin!(requests);
    let mut approver = Approver::new(client, metrics);
    loop {
        let due = approver.retries.next_due();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            next = requests.next() => match next {
                None => return,
                Some(Err(err)) => tracing::warn!(error = %err, "watching CSRs"),
                Some(Ok(csr)) => approver.attempt(csr, Instant::now()).await,
            },
            _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                approver.retry_due(Instant::now()).await;
            }
        }
    }
}

/// Approves CSRs, and keeps those whose approval failed for another try.
struct Approver {
    client: Client,
    csrs: Api<CertificateSigningRequest>,
    metrics: Metrics,
    /// CSRs whose approval failed, by name.
    retries: Backoff<String>,
}

impl Approver {
    fn new(client: Client, metrics: Metrics) -> Approver {
        Approver {
            csrs: Api::all(client.clone()),
            client,
            metrics,
            retries: Backoff::for_writes(),
        }
    }

    /// Considers `csr` at `now`; a failure that may pass is tried again after a back-off.
    async fn attempt(&mut self, csr: CertificateSigningRequest, now: Instant) {
        let name = csr.name_any();
        match consider(&self.client, &self.csrs, &self.metrics, csr).await {
            Ok(()) => self.retries.succeeded(&name),
            Err(err) if failure(&err) == Failure::Moot => self.retries.succeeded(&name),
            Err(err) => {
                let pause = self.retries.failed(name.clone(), now);
                tracing::warn!(csr = %name, error = %err, ?pause, "approving a CSR failed; trying again");
            }
        }
    }

    /// Reads again and considers each CSR whose retry is due at `now`.
    async fn retry_due(&mut self, now: Instant) {
        for name in self.retries.take_due(now) {
            match self.csrs.get_opt(&name).await {
                Ok(Some(csr)) => self.attempt(csr, now).await,
                Ok(None) => self.retries.succeeded(&name),
                Err(err) => {
                    let pause = self.retries.failed(name.clone(), now);
                    tracing::warn!(csr = %name, error = %err, ?pause, "reading a CSR to approve failed; trying again");
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

#[cfg(test)]
mod tests {
    use ks_shared::runtime::RETRY_MAX;
    use ks_tests::mock;
    use serde_json::json;

    use super::*;
    use crate::registration::tests::good;

    /// Answers the reads of cluster1 and its add-on that precede an approval, then the approval
    /// with `code`.
    async fn answer_approval(server: &mut mock::ApiServer, code: u16) -> mock::Asked {
        let cluster = json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                             "metadata": {"name": "cluster1"}, "spec": {}});
        let addon = json!({"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
                           "metadata": {"name": STATUS_ADDON_NAME, "namespace": "cluster1"}, "spec": {}});
        server.answer(200, cluster).await;
        server.answer(200, addon).await;
        let answer = if code < 300 {
            serde_json::to_value(good()).unwrap()
        } else {
            mock::failure(code)
        };
        server.answer(code, answer).await
    }

    #[tokio::test]
    async fn an_approval_that_fails_is_tried_again() {
        let (client, mut server) = mock::client();
        let metrics = Metrics::default();
        let mut approver = Approver::new(client, metrics.clone());
        let now = Instant::now();
        let ((), failed) = tokio::join!(approver.attempt(good(), now), answer_approval(&mut server, 500));
        assert!(failed.uri.contains("/approval"), "{}", failed.uri);
        assert_eq!(approver.retries.waiting(), 1, "kept for another try");

        let ((), approved) = tokio::join!(approver.retry_due(now + RETRY_MAX), async {
            let read = server.answer(200, serde_json::to_value(good()).unwrap()).await;
            assert_eq!(read.method, "GET");
            answer_approval(&mut server, 200).await
        });
        assert_eq!(approved.method, "PATCH");
        assert_eq!(approved.body["status"]["conditions"][0]["type"], "Approved");
        assert_eq!(approver.retries.waiting(), 0);
        assert_eq!(metrics.csrs_approved.get(), 1);
    }
}
