//! Lease-based leader election (`coordination.k8s.io/v1`), with client-go's timing: a standby
//! takes a Lease over only after seeing it unchanged for the lease's duration (by its own clock);
//! the leader renews it every retry period and stops leading when no renewal has succeeded
//! within the renewal deadline, which is shorter than the duration, so the two never overlap.
//! The Lease is renewed on a client of its own (not rate limited, so a busy leader's renewal
//! never queues behind its own writes), and a [`Fence`] closes every write of the work's clients
//! at the renewal deadline, whether or not the work has stopped yet.

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::fence::Fence;

/// `leader_election_master_status{name}` (client-go's name): 1 while this process leads under the
/// Lease `name`, 0 while it waits for it. Absent without leader election.
fn leading() -> &'static Family<Vec<(&'static str, String)>, Gauge> {
    static LEADING: OnceLock<Family<Vec<(&'static str, String)>, Gauge>> = OnceLock::new();
    LEADING.get_or_init(Family::default)
}

/// Adds the leader gauge to a registry.
pub fn register(registry: &mut Registry) {
    registry.register(
        "leader_election_master_status",
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease",
        leading().clone(),
    );
}

/// Which Lease to hold, and as whom.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    /// Seconds a lease is valid without renewal; another replica takes over after it.
    pub duration_seconds: u64,
}

impl LeaseConfig {
    fn duration(&self) -> Duration {
        Duration::from_secs(self.duration_seconds.max(1))
    }

    /// The leader stops leading when it has not renewed for this long: two thirds of the
    /// duration (client-go's 10 s of 15), leaving the rest for the work to stop.
    fn renew_deadline(&self) -> Duration {
        self.duration() * 2 / 3
    }

    /// How often the leader renews and a standby looks (client-go's 2 s of 15).
    fn retry_period(&self) -> Duration {
        self.duration() * 2 / 15
    }
}

/// Why leader election ended the work.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lost the leader Lease {namespace}/{name}")]
    Lost { namespace: String, name: String },
}

/// A default identity: the pod name when running in a pod, else host name and process id.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()))
        .unwrap_or_else(|_| "unknown-host".into());
    format!("{host}_{}", std::process::id())
}

/// What a contender last saw of the Lease, and when (by its own clock).
struct Observed {
    spec: LeaseSpec,
    at: Instant,
}

/// One contender for one Lease.
struct Elector {
    leases: Api<Lease>,
    config: LeaseConfig,
    observed: Option<Observed>,
}

impl Elector {
    /// One attempt to take or renew the Lease: `Ok(true)` when this contender holds it now.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let Some(current) = self.leases.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec_for(None, now)),
            };
            return acquired(self.leases.create(&PostParams::default(), &lease).await);
        };
        let spec = current.spec.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|seen| seen.spec != spec) {
            self.observed = Some(Observed {
                spec: spec.clone(),
                at: Instant::now(),
            });
        }
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        if !holder.is_empty() && holder != self.config.identity && !self.expired(&spec) {
            return Ok(false);
        }
        let lease = Lease {
            metadata: current.metadata.clone(),
            spec: Some(self.spec_for(Some(&spec), now)),
        };
        // The resourceVersion in the metadata makes this a compare-and-swap.
        acquired(
            self.leases
                .replace(&self.config.name, &PostParams::default(), &lease)
                .await,
        )
    }

    /// Whether the holder has let the Lease lapse: unchanged for its duration, by our clock.
    fn expired(&self, spec: &LeaseSpec) -> bool {
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.config.duration(), Duration::from_secs);
        self.observed.as_ref().is_none_or(|seen| seen.at.elapsed() > duration)
    }

    /// The Lease held by us from `now`, after `previous`.
    fn spec_for(&self, previous: Option<&LeaseSpec>, now: MicroTime) -> LeaseSpec {
        let ours = previous.is_some_and(|p| p.holder_identity.as_deref() == Some(&self.config.identity));
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.config.duration_seconds).unwrap_or(i32::MAX)),
            acquire_time: if ours {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if ours || previous.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..Default::default()
        }
    }

    /// Gives the Lease up (when we hold it) so a standby takes over at once.
    async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut current) = self.leases.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let spec = current.spec.get_or_insert_default();
        if spec.holder_identity.as_deref() != Some(&self.config.identity) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        spec.lease_duration_seconds = Some(1);
        self.leases
            .replace(&self.config.name, &PostParams::default(), &current)
            .await
            .map(drop)
    }

    /// Renews every retry period and opens `fence` until each successful renewal's deadline;
    /// returns when leadership is lost: `deadline` passed without a renewal, or another
    /// contender holds the Lease.
    async fn keep_leading(&mut self, fence: &Fence, mut deadline: Instant) {
        loop {
            tokio::time::sleep(self.config.retry_period()).await;
            let started = Instant::now();
            let left = deadline.saturating_duration_since(started);
            if left.is_zero() {
                return;
            }
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {
                    deadline = started + self.config.renew_deadline();
                    fence.open_until(deadline);
                }
                Ok(Ok(false)) => return,
                Ok(Err(err)) => tracing::warn!(lease = %self.config.name, error = %err, "renewing the leader Lease"),
                Err(_) => {
                    tracing::warn!(lease = %self.config.name, "renewing the leader Lease: no answer before the renewal deadline")
                }
            }
        }
    }
}

/// An attempt's answer: a conflict means another contender got there first.
fn acquired(result: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(err) => Err(err),
    }
}

/// Waits for the lease, then runs `work` with a token that is cancelled on shutdown or when the
/// lease is lost. `fence` (closed until then) is opened while leading; give it to the clients the
/// work writes with. `client` should not be rate limited. Returns `Ok` after shutdown,
/// `Err(Lost)` when leadership was lost (the caller should exit so a fresh process competes
/// again).
pub async fn run_as_leader<F, Fut>(
    client: Client,
    lease: &LeaseConfig,
    fence: &Fence,
    shutdown: CancellationToken,
    work: F,
) -> Result<(), LeaderError>
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut elector = Elector {
        leases: Api::namespaced(client, &lease.namespace),
        config: lease.clone(),
        observed: None,
    };
    let leader = leading().get_or_create(&vec![("name", lease.name.clone())]).clone();
    leader.set(0);
    tracing::info!(lease = %lease.name, identity = %lease.identity, "waiting for the leader lease");
    let deadline = loop {
        let started = Instant::now();
        match elector.try_acquire_or_renew().await {
            Ok(true) => {
                let deadline = started + lease.renew_deadline();
                fence.open_until(deadline);
                break deadline;
            }
            Ok(false) => {}
            Err(err) => tracing::warn!(lease = %lease.name, error = %err, "taking the leader Lease"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(lease.retry_period()) => {}
        }
    };

    tracing::info!(lease = %lease.name, "became leader");
    leader.set(1);
    let work_token = shutdown.child_token();
    let work = work(work_token.clone());
    tokio::pin!(work);
    let mut outcome = Ok(());
    tokio::select! {
        _ = &mut work => {}
        _ = elector.keep_leading(fence, deadline) => {
            fence.close();
            tracing::warn!(lease = %lease.name, "lost the leader Lease; stopping");
            work_token.cancel();
            work.await;
            outcome = Err(LeaderError::Lost { namespace: lease.namespace.clone(), name: lease.name.clone() });
        }
    }
    fence.close();
    leader.set(0);
    match tokio::time::timeout(lease.renew_deadline(), elector.release()).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::warn!(error = %err, "releasing the leader lease"),
        Err(_) => tracing::warn!("releasing the leader lease: no answer"),
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_go_timing() {
        let lease = LeaseConfig {
            name: "x".into(),
            namespace: "y".into(),
            identity: "z".into(),
            duration_seconds: 15,
        };
        assert_eq!(lease.renew_deadline(), Duration::from_secs(10));
        assert_eq!(lease.retry_period(), Duration::from_secs(2));
    }
}
