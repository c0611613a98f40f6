//! The hub's composition root: the shared workload informers, and the binding, transport and
//! status controllers started on them as peers. Any one of them runs alone: each keeps its own
//! watches, and the informers are the only thing they share.

use std::time::Duration;

use ks_shared::serve::ReadyGate;
use kube::Client;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::informers::{InformerMetrics, ResourceFilter, WorkloadInformers};
use crate::{binding, discovery, status, transport};

/// What the hub runs, and how.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Which workload resources are watched.
    pub filter: ResourceFilter,
    /// How long start-up waits for the workload caches to fill; those still empty then keep
    /// their objects as the Bindings list them.
    pub cache_sync_timeout: Duration,
    pub binding: Option<binding::controller::Settings>,
    pub transport: Option<transport::controller::Settings>,
    pub status: Option<status::controller::Settings>,
    pub informer_metrics: InformerMetrics,
}

/// Runs the chosen controllers until `shutdown`. `ready` opens once the workload caches are
/// filled and the binding controller (when it runs) has written its first pass.
pub async fn run(wds: Client, its: Client, settings: Settings, ready: ReadyGate, shutdown: CancellationToken) {
    let (events, received) = mpsc::unbounded_channel();
    let informers = WorkloadInformers::new(
        wds.clone(),
        settings.filter,
        events,
        settings.informer_metrics,
        shutdown.clone(),
    );
    if !discovery::start(
        wds.clone(),
        informers.clone(),
        settings.cache_sync_timeout,
        shutdown.clone(),
    )
    .await
    {
        return;
    }
    if let Some(transport) = settings.transport {
        let (wds, its, informers, shutdown) = (wds.clone(), its.clone(), informers.clone(), shutdown.clone());
        tokio::spawn(async move {
            if let Err(err) =
                transport::controller::run(transport::ocm::Ocm, wds, its, informers, transport, shutdown).await
            {
                ks_shared::crash::exit_on_error("the transport controller", &format!("{err:#}"));
            }
        });
    }
    if let Some(status) = settings.status {
        let (wds, its, informers) = (wds.clone(), its.clone(), informers.clone());
        tokio::spawn(status::controller::run(wds, its, informers, status, shutdown.clone()));
    }
    match settings.binding {
        Some(binding) => binding::controller::run(wds, its, informers, received, binding, ready, shutdown).await,
        None => {
            // Only the binding controller follows single objects: the events go unread.
            drop(received);
            ready.open();
            shutdown.cancelled().await;
        }
    }
}
