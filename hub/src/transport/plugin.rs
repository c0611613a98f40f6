//! What a transport provides to the transport controller ([`Plugin`]), and why the controller
//! fails a Binding ([`Error`]).

use std::collections::{BTreeMap, BTreeSet};

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::types::{Delivery, Held, Identity, Landed, Origin, Unapplied, Written};

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
    /// [`Plugin::settled`]): written once it has, or after the controller's `SETTLE_WAIT`; its
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
    /// destination is to go on writing `in_place` (see `plan::in_place`).
    fn wrap(
        &self,
        origin: &Origin<'_>,
        mailbox: &str,
        name: &str,
        deliveries: &[&Delivery],
        in_place: &BTreeSet<Identity>,
    ) -> Self::Wrapped;
    /// What a wrapped object holds: each object's identity (group, kind, namespace, name).
    fn gloss(&self, wrapped: &Self::Wrapped) -> Vec<Identity>;
    /// The objects a wrapped object read from the ITS delivers, as the transport wrote them:
    /// the last good content of those in error.
    fn delivered(&self, wrapped: &Self::Wrapped) -> Vec<std::sync::Arc<serde_json::Value>>;
    /// What a cached wrapped object holds, object by object.
    fn held<'a>(&self, cached: &'a Self::Cached) -> &'a [std::sync::Arc<Held>];
    /// `work` also holding `objects` as the first of `sources` that holds each holds it (with its
    /// options): what it is written as while objects it loses to those have not landed there.
    fn keeping(&self, work: &Self::Wrapped, sources: &[&Self::Wrapped], objects: &BTreeSet<Identity>) -> Self::Wrapped;
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
    fn applied_objects<'a>(&self, cached: &'a Self::Cached) -> &'a [Identity];
    /// The objects of a wrapped object the destination reports it could not apply, and why.
    fn unapplied<'a>(&self, cached: &'a Self::Cached) -> &'a [Unapplied];
    /// How the destination writes each object a wrapped object holds (in the order of
    /// [`Plugin::held`]).
    fn written<'a>(&self, cached: &'a Self::Cached) -> &'a [Written];
    /// How many of a wrapped object's objects it holds, and the destination reports applied and
    /// available.
    fn landed(&self, cached: &Self::Cached) -> Landed;
    /// Whether the inventory object's destination is accepted, so that its mailbox exists or
    /// will soon again (OCM makes an accepted ManagedCluster's namespace again when it is deleted).
    fn accepted(inventory: &Self::Inventory) -> bool;
    /// The labels and annotations of an inventory object.
    fn properties_of(inventory: &Self::Inventory) -> (&BTreeMap<String, String>, &BTreeMap<String, String>) {
        use kube::ResourceExt;
        (inventory.labels(), inventory.annotations())
    }
}
