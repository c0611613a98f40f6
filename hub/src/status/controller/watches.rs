//! Our own watches: a cache of each kind the controller reads besides the workload objects, every
//! change and re-list reported as an [`Input`], so the controller reconciles from caches and
//! fetches only a report it withheld before its object was sent to its WEC.

use ks_shared::api::{Binding, BindingPolicy, CombinedStatus, HealthRule, StatusCollector};
use ks_shared::names::ORIGIN_WDS_LABEL;
use ks_shared::runtime::{watch_into_inputs, watch_trimmed_into_inputs, without_managed_fields};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::status::report::CachedWorkStatus;
use crate::status::state::{CachedName, Delivered};

/// A change seen by one of our watches.
pub(super) enum Input {
    WorkStatus(CachedName),
    WorkStatusesListed,
    Binding(String),
    BindingsListed,
    Policy(String),
    PoliciesListed,
    Collector(String),
    CollectorsListed,
    HealthRule(String),
    HealthRulesListed,
    CombinedStatus(CachedName),
    CombinedStatusesListed,
}

/// An object's key in our caches and indexes.
pub(super) fn cached_name<K: ResourceExt>(object: &K) -> CachedName {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// The caches of our own watches in the WDS.
pub(super) struct Stores {
    pub(super) bindings: Store<Binding>,
    /// For their health's part of their status.
    pub(super) policies: Store<BindingPolicy>,
    pub(super) collectors: Store<StatusCollector>,
    pub(super) rules: Store<HealthRule>,
    pub(super) combined: Store<CombinedStatus>,
}

impl Stores {
    pub(super) fn start(wds: &Client, inputs: &UnboundedSender<Input>, stop: &CancellationToken) -> Stores {
        let all = watcher::Config::default;
        Stores {
            bindings: watch_trimmed_into_inputs(
                Api::all(wds.clone()),
                all(),
                without_managed_fields,
                stop,
                inputs,
                |b| Some(Input::Binding(b.name_any())),
                || Input::BindingsListed,
            ),
            policies: watch_trimmed_into_inputs(
                Api::all(wds.clone()),
                all(),
                without_managed_fields,
                stop,
                inputs,
                |p| Some(Input::Policy(p.name_any())),
                || Input::PoliciesListed,
            ),
            collectors: watch_into_inputs(
                Api::all(wds.clone()),
                all(),
                stop,
                inputs,
                |c| Some(Input::Collector(c.name_any())),
                || Input::CollectorsListed,
            ),
            rules: watch_into_inputs(
                Api::all(wds.clone()),
                all(),
                stop,
                inputs,
                |r| Some(Input::HealthRule(r.name_any())),
                || Input::HealthRulesListed,
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
            self.bindings.wait_until_ready(),
            self.policies.wait_until_ready(),
            self.collectors.wait_until_ready(),
            self.rules.wait_until_ready(),
            self.combined.wait_until_ready(),
        );
    }
}

/// The cache of this WDS's WorkStatuses in the ITS. A report on an object that no Binding (as
/// `delivered` says when it comes) sends to its WEC is kept without what it reports
/// ([`CachedWorkStatus::withhold`]): a WEC's agent credential may write any WorkStatus in its
/// mailbox, and only reports the hub asked for cost it their status. Started once `delivered`
/// holds every Binding, so that the first list keeps whole what is delivered.
pub(super) fn reports(
    its: &Client,
    wds_name: &str,
    delivered: Delivered,
    withheld: Counter,
    inputs: &UnboundedSender<Input>,
    stop: &CancellationToken,
) -> Store<CachedWorkStatus> {
    let ours = watcher::Config::default().labels(&format!("{ORIGIN_WDS_LABEL}={wds_name}"));
    let withhold_undelivered = move |report: &mut CachedWorkStatus| {
        let mailbox = report.namespace().unwrap_or_default();
        if !report.reported.as_ref().is_some_and(|r| delivered.to(&mailbox, r)) {
            report.withhold();
            withheld.inc();
        }
    };
    watch_trimmed_into_inputs(
        Api::all(its.clone()),
        ours,
        withhold_undelivered,
        stop,
        inputs,
        |w| Some(Input::WorkStatus(cached_name(w))),
        || Input::WorkStatusesListed,
    )
}
