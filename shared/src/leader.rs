//! Lease-based leader election (`coordination.k8s.io/v1`): work runs only while this process
//! holds the lease, and stops when leadership is lost.

use std::future::Future;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio_util::sync::CancellationToken;

/// Which Lease to hold, and as whom.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    /// Seconds a lease is valid without renewal; another replica takes over after it.
    pub duration_seconds: u64,
}

/// Why leader election ended the work.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("leader election on Lease {namespace}/{name}: {source}")]
    Lease {
        namespace: String,
        name: String,
        source: LeaseManagerError,
    },
    #[error("lost the leader Lease {namespace}/{name}")]
    Lost { namespace: String, name: String },
    #[error("the leader Lease {namespace}/{name} was deleted while waiting for it")]
    Deleted { namespace: String, name: String },
}

/// A default identity: the pod name when running in a pod, else host name and process id.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()))
        .unwrap_or_else(|_| "unknown-host".into());
    format!("{host}_{}", std::process::id())
}

/// Waits for the lease, then runs `work` with a token that is cancelled on shutdown or when the
/// lease is lost. Returns `Ok` after shutdown, `Err(Lost)` when leadership was lost (the caller
/// should exit so a fresh process competes again).
pub async fn run_as_leader<F, Fut>(
    client: Client,
    lease: &LeaseConfig,
    shutdown: CancellationToken,
    work: F,
) -> Result<(), LeaderError>
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: Future<Output = ()>,
{
    let lease_error = |source| LeaderError::Lease {
        namespace: lease.namespace.clone(),
        name: lease.name.clone(),
        source,
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &lease.namespace);
    let manager = LeaseManagerBuilder::new(client, &lease.name)
        .with_namespace(&lease.namespace)
        .with_identity(&lease.identity)
        .with_duration(lease.duration_seconds)
        .with_grace(lease.duration_seconds.div_ceil(3).max(1))
        .build()
        .await
        .map_err(lease_error)?;
    let (mut is_leader, task) = manager.watch().await;

    tracing::info!(lease = %lease.name, identity = %lease.identity, "waiting for the leader lease");
    // The lease manager never recreates a Lease deleted under it: a standby would wait forever,
    // so it gives up (the caller exits, and a fresh start creates the Lease again).
    let deleted = async {
        let mut check = tokio::time::interval(std::time::Duration::from_secs(lease.duration_seconds.max(1)));
        loop {
            check.tick().await;
            if let Ok(None) = leases.get_opt(&lease.name).await {
                break;
            }
        }
    };
    let mut outcome = Ok(());
    let acquired = tokio::select! {
        changed = is_leader.wait_for(|leader| *leader) => changed.is_ok(),
        _ = shutdown.cancelled() => false,
        _ = deleted => {
            outcome = Err(LeaderError::Deleted { namespace: lease.namespace.clone(), name: lease.name.clone() });
            false
        }
    };
    if acquired {
        tracing::info!(lease = %lease.name, "became leader");
        let work_token = shutdown.child_token();
        let lost = async {
            let _ = is_leader.wait_for(|leader| !*leader).await;
        };
        tokio::pin!(lost);
        let work = work(work_token.clone());
        tokio::pin!(work);
        tokio::select! {
            _ = &mut work => {}
            _ = &mut lost => {
                work_token.cancel();
                work.await;
                outcome = Err(LeaderError::Lost { namespace: lease.namespace.clone(), name: lease.name.clone() });
            }
        }
    }
    // Closing the channel makes the manager release the lease so a standby takes over at once.
    drop(is_leader);
    match task.await {
        Ok(Ok(_)) | Err(_) => {}
        Ok(Err(err)) => tracing::warn!(error = %err, "releasing the leader lease"),
    }
    outcome
}
