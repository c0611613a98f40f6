//! Our own watches: a cache of each kind the controller reads besides the workload objects, every
//! change and re-list reported as an [`Input`], so the controller reconciles from caches and
//! never fetches.

use futures::StreamExt;
use ks_shared::api::{Binding, CombinedStatus, StatusCollector, WorkStatus};
use ks_shared::names::ORIGIN_WDS_LABEL;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;

use crate::status::state::CachedName;

/// A change seen by one of our watches.
pub(super) enum Input {
    WorkStatus(CachedName),
    WorkStatusesListed,
    Binding(String),
    BindingsListed,
    Collector(String),
    CollectorsListed,
    CombinedStatus(CachedName),
    CombinedStatusesListed,
}

/// An object's key in our caches and indexes.
pub(super) fn cached_name<K: ResourceExt>(object: &K) -> CachedName {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// A cache of `api`, reporting each change and each completed (re-)list as an input. A re-list
/// is reported because deletions missed while the watch was down show only as absences.
fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    inputs: UnboundedSender<Input>,
    changed: fn(&K) -> Input,
    listed: fn() -> Input,
) -> Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, config).default_backoff().reflect(writer);
    tokio::spawn(async move {
        tokio::pin!(events);
        while let Some(event) = events.next().await {
            let input = match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => changed(&object),
                Ok(watcher::Event::InitDone) => listed(),
                _ => continue,
            };
            // The controller has stopped.
            if inputs.send(input).is_err() {
                break;
            }
        }
    });
    store
}

/// The caches of our own watches.
pub(super) struct Stores {
    pub(super) work_statuses: Store<WorkStatus>,
    pub(super) bindings: Store<Binding>,
    pub(super) collectors: Store<StatusCollector>,
    pub(super) combined: Store<CombinedStatus>,
}

impl Stores {
    pub(super) fn start(wds: &Client, its: &Client, wds_name: &str, inputs: &UnboundedSender<Input>) -> Stores {
        let ours = watcher::Config::default().labels(&format!("{ORIGIN_WDS_LABEL}={wds_name}"));
        let all = watcher::Config::default;
        Stores {
            work_statuses: watch(
                Api::all(its.clone()),
                ours,
                inputs.clone(),
                |w| Input::WorkStatus(cached_name(w)),
                || Input::WorkStatusesListed,
            ),
            bindings: watch(
                Api::all(wds.clone()),
                all(),
                inputs.clone(),
                |b| Input::Binding(b.name_any()),
                || Input::BindingsListed,
            ),
            collectors: watch(
                Api::all(wds.clone()),
                all(),
                inputs.clone(),
                |c| Input::Collector(c.name_any()),
                || Input::CollectorsListed,
            ),
            combined: watch(
                Api::all(wds.clone()),
                all(),
                inputs.clone(),
                |c| Input::CombinedStatus(cached_name(c)),
                || Input::CombinedStatusesListed,
            ),
        }
    }

    pub(super) async fn filled(&self) {
        let _ = futures::join!(
            self.work_statuses.wait_until_ready(),
            self.bindings.wait_until_ready(),
            self.collectors.wait_until_ready(),
            self.combined.wait_until_ready(),
        );
    }
}
