//! Keeps the workload informers in line with what the WDS serves: started and filled once at
//! start-up, then re-synced whenever a CRD changes, and every half second while discovery lags
//! behind the established CRDs (an apiserver just restarted).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use ks_shared::cli::retry_until_done;
use ks_shared::runtime::watch_health::{self, WatchRole};
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::informers::WorkloadInformers;

/// How soon discovery is asked again when it lags behind the established CRDs.
const LAGGING: Duration = Duration::from_millis(500);
/// CRD events come in bursts (created, then established): look once they settle.
const SETTLE: Duration = Duration::from_millis(100);

/// Starts `informers` for every resource the WDS serves and waits until their caches are filled,
/// at most `sync_timeout`; a resource whose LIST keeps failing does not hold the others back
/// (its objects stay as the Bindings list them until its cache fills). Keeps the set current
/// until `shutdown`. False on shutdown.
pub async fn start(
    wds: Client,
    informers: WorkloadInformers,
    sync_timeout: Duration,
    shutdown: CancellationToken,
) -> bool {
    let (crds, mut changed) = watch_crds(wds, shutdown.clone());
    let first = async {
        crds.wait_until_ready().await.ok()?;
        let sync = || {
            let (informers, crds) = (informers.clone(), crds.state());
            async move { informers.sync_with_discovery(&crds).await }
        };
        let complete = retry_until_done("discovering WDS resources", &shutdown, sync).await?;
        let unsynced = informers.wait_synced(sync_timeout).await;
        if !unsynced.is_empty() {
            let names: Vec<String> = unsynced
                .iter()
                .map(|gr| format!("{}/{}", gr.group, gr.resource))
                .collect();
            tracing::warn!(resources = %names.join(","), "starting before these caches are filled; their objects are kept as the Bindings list them");
        }
        Some(complete)
    };
    let complete = tokio::select! {
        _ = shutdown.cancelled() => None,
        complete = first => complete,
    };
    let Some(complete) = complete else {
        return false;
    };
    tracing::info!(informers = informers.count(), "workload caches filled");
    tokio::spawn(async move {
        let mut due = (!complete).then(|| Instant::now() + LAGGING);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                Some(()) = changed.recv() => due = due.or(Some(Instant::now() + SETTLE)),
                _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    due = resync(&informers, &crds).await.then(|| Instant::now() + LAGGING);
                }
            }
        }
    });
    true
}

/// The CRDs of the WDS, with a message on every change.
fn watch_crds(
    wds: Client,
    shutdown: CancellationToken,
) -> (Store<CustomResourceDefinition>, mpsc::UnboundedReceiver<()>) {
    let (store, writer) = reflector::store();
    let (changes, changed) = mpsc::unbounded_channel();
    let api: Api<CustomResourceDefinition> = Api::all(wds);
    let watched = watcher(api, watcher::Config::default()).backoff(ks_shared::runtime::WatchBackoff::default());
    let events = watch_health::observe("CustomResourceDefinition", WatchRole::Essential, watched)
        .reflect(writer)
        .take_until(shutdown.cancelled_owned());
    tokio::spawn(async move {
        futures::pin_mut!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                    let _ = changes.send(());
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "watching CRDs failed; retrying"),
            }
        }
    });
    (store, changed)
}

/// Re-syncs the informer set; true when it must be done again: discovery failed, or an
/// established CRD is not listed yet (discovery lags).
async fn resync(informers: &WorkloadInformers, crds: &Store<CustomResourceDefinition>) -> bool {
    match informers.sync_with_discovery(&crds.state()).await {
        Ok(complete) => !complete,
        Err(err) => {
            tracing::warn!(error = %err, "discovery failed; retrying");
            true
        }
    }
}
