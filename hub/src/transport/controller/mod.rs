//! The transport controller: each Binding becomes ManifestWorks in the mailbox namespaces of its
//! WECs, holding its objects (read from the binding controller's caches, never fetched) after
//! the built-in transforms and CustomTransforms, sharded stably, written only when they change,
//! and removed from every mailbox (found by label) when no longer wanted.

mod desired;
mod expectations;
mod metrics;
mod report;
mod schedule;
mod send;
mod state;
mod watches;
mod writes;

pub use self::metrics::Metrics;
pub use self::state::Settings;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use ks_shared::api::{Binding, BindingPolicy, CustomTransform};
use ks_shared::names::{CUSTOMIZATION_PROPERTIES_NAMESPACE, ORIGIN_WDS_LABEL, TRANSPORT_FINALIZER};
use ks_shared::runtime::{
    Backoff, Pacing, watch_into_inputs, watch_seen_into_inputs, watch_trimmed_into_inputs, without_managed_fields,
};
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::expectations::Expectations;
use self::report::apply_status;
use self::schedule::{Pass, Schedule};
use self::state::{Transport, WRITE_CONCURRENCY, holds};
use self::watches::{Input, holdings_changed, newly_unapplied, seen_policy, seen_work};
use crate::informers::WorkloadInformers;
use crate::transport::plan::binding::Desired;
use crate::transport::plan::revisions::Revisions;
use crate::transport::plan::{binding, sharers, trace};
use crate::transport::plugin::{Error, Plugin};

/// How many Bindings are reconciled at once. One: at 10,000 objects to 12 WECs on 2 cores, 4 at
/// once saturated the ITS apiserver (504s) and the mailboxes were not full after 25 min, while one
/// at a time filled them. (An earlier run with 4 lost objects: a ManifestWork that lost some was
/// held back whole, gains included; now only what it loses waits.) Plans rely on it too: with
/// more, one could read another Binding's ManifestWorks while its writes are in flight, which
/// `expectations` does not lay over the cache.
const BINDING_CONCURRENCY: usize = 1;
/// A Binding whose ManifestWork writes took `d` rests `PACE × d` before its next (doubling while
/// its changes keep coming, up to `LONGEST_REST`; over once it has not changed for half of it;
/// a change after `d` without one is not held):
/// while kubectl creates a policy's objects one by one, its ever larger ManifestWorks are
/// rewritten a few times, not after every Binding write, and the ITS keeps most of its time for
/// everything else.
const PACE: u32 = 3;
const LONGEST_REST: Duration = Duration::from_secs(30);

/// Runs the transport through `plugin` until `shutdown`. `informers` are the hub's, already
/// filled.
pub async fn run<P: Plugin>(
    plugin: P,
    wds: Client,
    its: Client,
    informers: WorkloadInformers,
    settings: Settings,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let plugin = Arc::new(plugin);
    let (inputs, mut received) = mpsc::unbounded_channel();
    // Every (re-)list is `Input::All`: deletions missed while a watch was down show only as
    // absences.
    let bindings = watch_trimmed_into_inputs(
        Api::<Binding>::all(wds.clone()),
        watcher::Config::default(),
        without_managed_fields,
        &shutdown,
        &inputs,
        |b| Some(Input::Binding(b.name_any())),
        || Input::All,
    );
    let ours = format!("{ORIGIN_WDS_LABEL}={}", settings.wds_name);
    let lag = settings.metrics.lag.clone();
    let expectations = Arc::new(std::sync::Mutex::new(Expectations::new(lag)));
    let seeing = expectations.clone();
    let mut revisions = Revisions::default();
    let mut policy_revisions = Revisions::default();
    // Listed 50 at a time: a page holds whole ManifestWorks (up to 512 kB each of JSON text) until
    // each is read into what the cache keeps.
    let mut fingerprints = HashMap::new();
    let mut told = HashMap::new();
    let holder = plugin.clone();
    let works = watch_seen_into_inputs(
        Api::<P::Cached>::all(its.clone()),
        watcher::Config::default().labels(&ours).page_size(50),
        |_| {},
        &shutdown,
        &inputs,
        move |seen| {
            let fingerprint = |w: &P::Cached| sharers::fingerprint(holds(&*holder, w));
            let holdings = holdings_changed(&mut fingerprints, &seen, fingerprint);
            let unapplied = newly_unapplied(&mut told, &seen, |w| holder.unapplied(w));
            seen_work(&seeing, &mut revisions, seen)
                .into_iter()
                .chain(holdings)
                .chain(unapplied)
        },
    );
    let policies = watch_seen_into_inputs(
        Api::<BindingPolicy>::all(wds.clone()),
        watcher::Config::default(),
        |_| {},
        &shutdown,
        &inputs,
        move |seen| seen_policy(&mut policy_revisions, seen),
    );
    let transforms = watch_into_inputs(
        Api::<CustomTransform>::all(wds.clone()),
        watcher::Config::default(),
        &shutdown,
        &inputs,
        |_| Some(Input::All),
        || Input::All,
    );
    let clusters = watch_into_inputs(
        Api::<P::Inventory>::all(its.clone()),
        watcher::Config::default(),
        &shutdown,
        &inputs,
        |c| Some(Input::Cluster(c.name_any())),
        || Input::All,
    );
    let customizations = watch_into_inputs(
        Api::<ConfigMap>::namespaced(its.clone(), CUSTOMIZATION_PROPERTIES_NAMESPACE),
        watcher::Config::default(),
        &shutdown,
        &inputs,
        |c| Some(Input::Cluster(c.name_any())),
        || Input::All,
    );
    tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        _ = async {
            let _ = futures::join!(
                bindings.wait_until_ready(),
                policies.wait_until_ready(),
                works.wait_until_ready(),
                transforms.wait_until_ready(),
                clusters.wait_until_ready(),
                customizations.wait_until_ready(),
            );
        } => {}
    }
    let events = crate::events::Paced::start(
        wds.clone(),
        "kubestellar.io/transport-controller",
        settings.metrics.events_dropped.clone(),
        &shutdown,
    );
    let transport = Transport {
        plugin,
        packaging: trace::Packaging::default(),
        wds,
        its,
        informers,
        settings,
        bindings,
        policies,
        works,
        transforms,
        clusters,
        customizations,
        holding: Default::default(),
        reading_wecs: Default::default(),
        expectations,
        writes: tokio::sync::Semaphore::new(WRITE_CONCURRENCY),
        unsettled: Default::default(),
        events,
    };
    let mut schedule = Schedule::new(
        BINDING_CONCURRENCY,
        Pacing::new(PACE, LONGEST_REST),
        // A failed Binding is tried again as every controller retries a key.
        Backoff::for_writes(),
    )
    .measured_by(transport.settings.metrics.common.queue.clone());
    let transport = &transport;
    let mut running: FuturesUnordered<BoxFuture<'_, Reconciled>> = FuturesUnordered::new();
    let metrics = &transport.settings.metrics;
    let mut first = Some(Input::All);
    loop {
        // Take the next input or finished reconcile (the first pass covers everything), then
        // whatever else arrived, so a burst becomes one pass.
        let wake = schedule.wake();
        let next = match first.take() {
            Some(input) => Some(input),
            None => tokio::select! {
                _ = shutdown.cancelled() => break,
                input = received.recv() => match input {
                    None => break,
                    input => input,
                },
                Some((name, generation, pass, result)) = running.next() => {
                    let outcome = result.map_err(|err| match err {
                        Error::Settling => tracing::debug!(binding = %name, "a ManifestWork waits for its WEC"),
                        err => {
                            metrics.common.errors.inc();
                            tracing::warn!(binding = %name, error = chain(&err), "transport failed; retrying with back-off");
                        }
                    });
                    schedule.finished(name, generation, pass, outcome, Instant::now());
                    None
                }
                _ = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => None,
            },
        };
        let mut transforms_changed = false;
        let mut holdings_changed = BTreeSet::new();
        for input in next.into_iter().chain(std::iter::from_fn(|| received.try_recv().ok())) {
            match input {
                Input::Binding(name) => {
                    schedule.changed(name);
                    transport.holding_changed(&mut schedule);
                }
                Input::Reported(name) => {
                    schedule.reported(name);
                    transport.holding_changed(&mut schedule);
                }
                Input::All => transforms_changed = true,
                Input::Cluster(cluster) => transport
                    .depending_on(&cluster)
                    .into_iter()
                    .for_each(|b| schedule.changed(b)),
                Input::Holdings(mailbox) => {
                    holdings_changed.insert(mailbox);
                }
                Input::Unapplied(mailbox, objects) => transport.tell_unapplied(&mailbox, &objects),
            }
        }
        let sharing = transport.sharing(&holdings_changed);
        if !sharing.is_empty() {
            tracing::debug!(mailboxes = ?holdings_changed, bindings = ?sharing, "what ManifestWorks share may have changed");
        }
        sharing.into_iter().for_each(|b| schedule.changed(b));
        if transforms_changed {
            transport.report_transforms().await;
            transport
                .bindings
                .state()
                .iter()
                .for_each(|b| schedule.changed(b.name_any()));
        }
        // A new generation is a change of what to write; the status of the ManifestWorks, the
        // policy's, is not.
        let generation = |name: &str| {
            transport
                .bindings
                .get(&ObjectRef::new(name))
                .and_then(|b| b.metadata.generation)
        };
        for (name, generation, pass) in schedule.start(Instant::now(), generation) {
            match pass {
                Pass::Full => metrics.common.reconciles.inc(),
                Pass::Report => metrics.reports.inc(),
            };
            running.push(
                async move {
                    let result = match pass {
                        Pass::Full => transport.reconcile(&name).await,
                        Pass::Report => transport.report(&name).await.map(|()| Duration::ZERO),
                    };
                    (name, generation, pass, result)
                }
                .boxed(),
            );
        }
        metrics.common.queue_depth.set(schedule.waiting() as i64);
    }
    // Writes under way finish rather than land half done (or late, after the next leader's).
    while running.next().await.is_some() {}
    Ok(())
}

/// A Binding reconciled: its name, the generation it was at, the pass, and what its writes took.
type Reconciled = (String, Option<i64>, Pass, Result<Duration, Error>);

impl<P: Plugin> Transport<P> {
    /// Brings the Binding's ManifestWorks and statuses in line; how long the ManifestWork writes
    /// took.
    async fn reconcile(&self, name: &str) -> Result<Duration, Error> {
        let api: Api<Binding> = Api::all(self.wds.clone());
        let Some(binding) = self.bindings.get(&ObjectRef::new(name)) else {
            // Gone: the finalizer made us clean up while it was being deleted.
            self.holding.set(name, false);
            self.reading_wecs.set(name, false);
            return Ok(Duration::ZERO);
        };
        let has_finalizer = binding.finalizers().iter().any(|f| f == TRANSPORT_FINALIZER);
        if binding.metadata.deletion_timestamp.is_some() {
            self.reading_wecs.set(name, false);
            // Its ManifestWorks must all be gone before the Binding may go.
            let applied = self.apply_works(name, BTreeMap::new()).await?;
            if has_finalizer && !applied.holding {
                crate::finalizer::set(&api, &*binding, TRANSPORT_FINALIZER, false).await?;
            }
            if applied.settling {
                return Err(Error::Settling);
            }
            return Ok(applied.writing);
        }
        let policy = self.policies.get(&ObjectRef::new(name));
        if binding::policy_leaving(&binding, policy.as_deref()) {
            // Withdrawn when the Binding goes: only then have the Bindings taking its objects
            // over been written (the same watch shows them first).
            return Ok(Duration::ZERO);
        }
        if !has_finalizer {
            crate::finalizer::set(&api, &*binding, TRANSPORT_FINALIZER, true).await?;
        }
        let desired = match self.desired_keeping_last_good(&binding).await {
            Err(Error::Unfilled(gr)) => {
                self.report_stuck_cache(&api, &binding, &gr).await?;
                return Err(Error::Unfilled(gr));
            }
            desired => desired?,
        };
        let Desired {
            works,
            mut errors,
            templated,
            frozen,
            ..
        } = desired;
        // An object in error keeps its last good content on the WECs (see `plan::plan`); it
        // holds back nothing else.
        let applied = self.apply_works_leaving(name, works, &frozen).await?;
        let passing = applied.passing;
        errors.extend(applied.rejections);
        errors.sort();
        self.reading_wecs.set(name, templated || !errors.is_empty());
        let status = binding.status.clone().unwrap_or_default();
        let generation = binding.metadata.generation.unwrap_or_default();
        if status.errors != errors || status.observed_generation != generation {
            let patch = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "Binding",
                               "status": {"observedGeneration": generation, "errors": errors}});
            apply_status(&api, name, &patch).await?;
        }
        self.report_propagation(&binding).await?;
        if passing {
            return Err(Error::MailboxMissing);
        }
        if applied.settling {
            return Err(Error::Settling);
        }
        Ok(applied.writing)
    }

    /// A pass for what its WECs reported: the propagation status, as the full pass leaves it.
    async fn report(&self, name: &str) -> Result<(), Error> {
        let Some(binding) = self.bindings.get(&ObjectRef::new(name)) else {
            return Ok(());
        };
        let policy = self.policies.get(&ObjectRef::new(name));
        if binding.metadata.deletion_timestamp.is_some() || binding::policy_leaving(&binding, policy.as_deref()) {
            return Ok(());
        }
        self.report_propagation(&binding).await
    }
}

/// `err` and its sources, `: `-separated, for the logs.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests;
