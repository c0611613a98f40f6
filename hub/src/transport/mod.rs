//! The transport: what every delivered object goes through before it is wrapped for a WEC
//! (docs/upstream-behaviour.md#transforms, docs/upstream-behaviour.md#templates), how objects are
//! sharded, and the controller that turns Bindings into wrapped objects in the WECs' mailboxes
//! through a [`Plugin`] (OCM's is [`wrap::Ocm`]: ManifestWorks).

use std::collections::BTreeMap;

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

#[cfg(all(test, feature = "jemalloc"))]
mod bench_cache;
pub mod cached;
pub mod controller;
mod expectations;
pub mod jsonpath;
pub mod moves;
mod plan;
pub mod propagation;
mod revisions;
mod schedule;
pub mod sharding;
pub mod sharers;
pub mod template;
pub mod trace;
pub mod transforms;
pub mod wrap;

/// The transport controller's metrics: `kubestellar_transport_*`. Clones share the values.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub common: ks_shared::runtime::ControllerMetrics,
    /// Bytes of the ManifestWorks written: with the final content's size, what rewriting
    /// growing ManifestWorks costs the ITS.
    pub written_bytes: prometheus_client::metrics::counter::Counter,
    /// Passes that only reported a Binding's propagation (the status of its ManifestWorks or
    /// its policy changed), not counted as reconciles.
    pub reports: prometheus_client::metrics::counter::Counter,
    pub lag: expectations::Lag,
    /// Events (on policies and delivered objects) that did not fit their queue.
    pub events_dropped: prometheus_client::metrics::counter::Counter,
}

impl Metrics {
    /// Registers them as `kubestellar_transport_*`.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let help = ks_shared::runtime::Help {
            controller: "transport",
            reconciles: "Bindings whose ManifestWorks were checked",
            errors: "Failed reconciles (each retried with back-off)",
            writes: "ManifestWork writes and deletions (made only when content changed)",
            queue_depth: "Bindings waiting to be checked, now or after a failure",
        };
        let sub = self.common.register(registry, &help);
        sub.register(
            "written_bytes",
            "Bytes of the ManifestWorks written (request bodies)",
            self.written_bytes.clone(),
        );
        sub.register(
            "reports",
            "Bindings whose propagation alone was brought in line, as only the status of their ManifestWorks or policy changed (not counted in reconciles)",
            self.reports.clone(),
        );
        sub.register(
            "write_seen_seconds",
            "Seconds from a ManifestWork write's reply to the watch showing it, 0 when it showed first (its Binding is planned from what it wrote meanwhile)",
            self.lag.seen.clone(),
        );
        sub.register(
            "events_dropped",
            "Events on policies and delivered objects dropped as their queue was full",
            self.events_dropped.clone(),
        );
        sub.register(
            "write_unseen",
            "ManifestWork writes given up on unseen: the watch had shown nothing at all for 5 minutes since their reply (from then on their Binding is planned from the cache alone)",
            self.lag.given_up.clone(),
        );
    }
}

/// Why the transport controller failed a Binding; it is tried again with back-off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Binding lists objects of a resource whose cache is not filled: they are not known,
    /// not gone, so nothing is written that would take them from the WECs.
    #[error(
        "the WDS cache of {}/{} is not filled; its ManifestWorks stay as they are",
        .0.group,
        .0.resource
    )]
    Unfilled(crate::informers::GroupResource),
    /// A write to the ITS or the WDS failed (one the ITS refuses is reported in the Binding's
    /// status instead).
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// A mailbox namespace is missing or being deleted (reported on the Binding): tried again
    /// after a back-off, since it being made (again) changes nothing the transport watches.
    #[error("a mailbox namespace is missing or being deleted; trying again after a back-off")]
    MailboxMissing,
    /// A ManifestWork to write over has a version its WEC has not reported on yet (see
    /// [`Plugin::settled`]): written once it has, or after [`controller::SETTLE_WAIT`]; its
    /// status change brings the Binding back, and a back-off does if none comes.
    #[error("a ManifestWork waits for its WEC to report on the version before; trying again")]
    Settling,
    /// A wrapped object did not serialise.
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
}

/// What a transport provides to the transport controller
/// (docs/upstream-behaviour.md#manifestworks): an inventory of destinations, a mailbox per
/// destination, and a wrapped object that carries objects there.
pub trait Plugin: Send + Sync + 'static {
    /// The object written into a mailbox (OCM: ManifestWork); it serializes with its
    /// `apiVersion` and `kind`, as kube's `CustomResource` derive makes it.
    type Wrapped: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static;
    /// What the transport's cache keeps of a wrapped object, read from the watch as that kind:
    /// no more than [`Plugin::held`], [`Plugin::same_content`], [`Plugin::applied`],
    /// [`Plugin::landed`] and the trace bookkeeping read. At 10,000 objects to 50 WECs the whole
    /// objects would take gigabytes.
    type Cached: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static;
    /// The inventory object of a destination, whose labels and annotations are template
    /// properties (OCM: ManagedCluster).
    type Inventory: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static;

    /// The mailbox namespace of a destination.
    fn mailbox(&self, destination: &str) -> String;
    /// Wraps `deliveries`, in order, into the wrapped object `name` in `mailbox`, where the
    /// destination is to go on writing `in_place` ([`wrap::in_place`]).
    fn wrap(
        &self,
        origin: &wrap::Origin<'_>,
        mailbox: &str,
        name: &str,
        deliveries: &[&wrap::Delivery],
        in_place: &std::collections::BTreeSet<wrap::Identity>,
    ) -> Self::Wrapped;
    /// What a wrapped object holds: each object's identity (group, kind, namespace, name).
    fn gloss(&self, wrapped: &Self::Wrapped) -> Vec<wrap::Identity>;
    /// The objects a wrapped object read from the ITS delivers, as the transport wrote them:
    /// the last good content of those in error.
    fn delivered(&self, wrapped: &Self::Wrapped) -> Vec<std::sync::Arc<serde_json::Value>>;
    /// What a cached wrapped object holds, object by object.
    fn held<'a>(&self, cached: &'a Self::Cached) -> &'a [std::sync::Arc<cached::Held>];
    /// `work` also holding `objects` as the first of `sources` that holds each holds it (with its
    /// options): what it is written as while objects it loses to those have not landed there.
    fn keeping(
        &self,
        work: &Self::Wrapped,
        sources: &[&Self::Wrapped],
        objects: &std::collections::BTreeSet<wrap::Identity>,
    ) -> Self::Wrapped;
    /// A wrapped object with the name, namespace and origin of a cached one, holding nothing.
    fn emptied(&self, cached: &Self::Cached) -> Self::Wrapped;
    /// What the cache keeps of a wrapped object the transport wrote, until the watch shows it.
    fn cached(wrapped: &Self::Wrapped) -> Self::Cached;
    /// Whether an existing wrapped object already says what a desired one says (bookkeeping
    /// such as generations and tracing annotations is no reason to write).
    fn same_content(&self, existing: &Self::Cached, desired: &Self::Wrapped) -> bool;
    /// Whether the destination has applied this version of a wrapped object.
    fn applied(&self, cached: &Self::Cached) -> bool;
    /// Whether the destination has reported on this version of a wrapped object (applied or
    /// not). OCM's work agent records what it applied only after it has written the
    /// ManifestWork's status: a version written over before that may leave on the WEC what it
    /// created there, recorded nowhere (OCM v1.2).
    fn settled(&self, cached: &Self::Cached) -> bool;
    /// Whether the destination is there to apply what it is sent (OCM: the ManagedCluster is
    /// available); one that is not cannot be applying a version meanwhile.
    fn available(inventory: &Self::Inventory) -> bool;
    /// The objects of a wrapped object the destination reports applied, while the whole is not.
    fn applied_objects<'a>(&self, cached: &'a Self::Cached) -> &'a [wrap::Identity];
    /// The objects of a wrapped object the destination reports it could not apply, and why.
    fn unapplied<'a>(&self, cached: &'a Self::Cached) -> &'a [cached::Unapplied];
    /// How the destination writes each object a wrapped object holds (in the order of
    /// [`Plugin::held`]).
    fn written<'a>(&self, cached: &'a Self::Cached) -> &'a [wrap::Written];
    /// How many of a wrapped object's objects it holds, and the destination reports applied and
    /// available.
    fn landed(&self, cached: &Self::Cached) -> propagation::Landed;
    /// Whether the inventory object's destination is accepted, so that its mailbox exists or
    /// will soon again (OCM makes an accepted ManagedCluster's namespace again when it is deleted).
    fn accepted(inventory: &Self::Inventory) -> bool;
    /// The labels and annotations of an inventory object.
    fn properties_of(inventory: &Self::Inventory) -> (&BTreeMap<String, String>, &BTreeMap<String, String>) {
        use kube::ResourceExt;
        (inventory.labels(), inventory.annotations())
    }
}
