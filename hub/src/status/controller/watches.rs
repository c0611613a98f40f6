//! Our own watches: a cache of each kind the controller reads besides the workload objects, every
//! change and re-list reported as an [`Input`], so the controller reconciles from caches and
//! never fetches.

use ks_shared::api::{Binding, CombinedStatus, StatusCollector};
use ks_shared::names::ORIGIN_WDS_LABEL;
use ks_shared::runtime::{watch_into_inputs, watch_trimmed_into_inputs, without_managed_fields};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::status::report::CachedWorkStatus;
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

/// The caches of our own watches.
pub(super) struct Stores {
    pub(super) work_statuses: Store<CachedWorkStatus>,
    pub(super) bindings: Store<Binding>,
    pub(super) collectors: Store<StatusCollector>,
    pub(super) combined: Store<CombinedStatus>,
}

impl Stores {
    pub(super) fn start(
        wds: &Client,
        its: &Client,
        wds_name: &str,
        inputs: &UnboundedSender<Input>,
        stop: &CancellationToken,
    ) -> Stores {
        let ours = watcher::Config::default().labels(&format!("{ORIGIN_WDS_LABEL}={wds_name}"));
        let all = watcher::Config::default;
        Stores {
            work_statuses: watch_into_inputs(
                Api::all(its.clone()),
                ours,
                stop,
                inputs,
                |w| Some(Input::WorkStatus(cached_name(w))),
                || Input::WorkStatusesListed,
            ),
            bindings: watch_trimmed_into_inputs(
                Api::all(wds.clone()),
                all(),
                without_managed_fields,
                stop,
                inputs,
                |b| Some(Input::Binding(b.name_any())),
                || Input::BindingsListed,
            ),
            collectors: watch_into_inputs(
                Api::all(wds.clone()),
                all(),
                stop,
                inputs,
                |c| Some(Input::Collector(c.name_any())),
                || Input::CollectorsListed,
            ),
            combined: watch_into_inputs(
                Api::all(wds.clone()),
                all(),
                stop,
                inputs,
                |c| Some(Input::CombinedStatus(cached_name(c))),
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
