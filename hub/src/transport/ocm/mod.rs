//! The OCM transport: ManifestWorks in the namespace named after each ManagedCluster
//! ([`Ocm`]): how a shard of a Binding's objects is wrapped into one ([`wrap`]), and what the
//! transport's cache keeps of each ([`cached`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use ks_shared::names::ORIGIN_BINDING_GENERATION_ANNOTATION;
use ks_shared::ocm::{ManagedCluster, ManifestWork, ManifestWorkSpec, managed_cluster_condition};
use kube::api::ObjectMeta;
use serde_json::Value;

use self::cached::CachedWork;
use self::cached::same_content;
use self::wrap::{delivered, gloss, keeping, origin_labels_of, wrap};
use super::plugin::Plugin;
use super::types::{Delivery, Held, Identity, Landed, Origin, Unapplied, Written};

#[cfg(all(test, feature = "jemalloc"))]
mod bench_cache;
pub mod cached;
pub mod wrap;

/// The OCM transport: ManifestWorks in the namespace named after the ManagedCluster.
pub struct Ocm;

impl Plugin for Ocm {
    type Wrapped = ManifestWork;
    type Cached = CachedWork;
    type Inventory = ManagedCluster;

    fn mailbox(&self, destination: &str) -> String {
        destination.to_string()
    }

    fn accepted(cluster: &ManagedCluster) -> bool {
        cluster.spec.hub_accepts_client
    }

    fn available(cluster: &ManagedCluster) -> bool {
        cluster.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == managed_cluster_condition::AVAILABLE && c.status == "True")
        })
    }

    fn settled(&self, work: &CachedWork) -> bool {
        work.settled
    }

    fn wrap(
        &self,
        origin: &Origin<'_>,
        mailbox: &str,
        name: &str,
        deliveries: &[&Delivery],
        in_place: &BTreeSet<Identity>,
    ) -> ManifestWork {
        wrap(origin, mailbox, name, deliveries, in_place)
    }

    fn gloss(&self, wrapped: &ManifestWork) -> Vec<Identity> {
        gloss(wrapped)
    }

    fn delivered(&self, work: &ManifestWork) -> Vec<Arc<Value>> {
        delivered(work)
    }

    fn held<'a>(&self, cached: &'a CachedWork) -> &'a [Arc<Held>] {
        &cached.held
    }

    fn keeping(&self, work: &ManifestWork, sources: &[&ManifestWork], objects: &BTreeSet<Identity>) -> ManifestWork {
        keeping(work, sources, objects)
    }

    fn emptied(&self, cached: &CachedWork) -> ManifestWork {
        let metadata = &cached.metadata;
        let mut annotations = metadata.annotations.clone().unwrap_or_default();
        annotations.retain(|k, _| k == ORIGIN_BINDING_GENERATION_ANNOTATION);
        ManifestWork {
            metadata: ObjectMeta {
                name: metadata.name.clone(),
                namespace: metadata.namespace.clone(),
                labels: Some(origin_labels_of(metadata.labels.as_ref())),
                annotations: Some(annotations),
                ..Default::default()
            },
            spec: ManifestWorkSpec::default(),
            status: None,
        }
    }

    fn cached(work: &ManifestWork) -> CachedWork {
        CachedWork::of(work)
    }

    fn same_content(&self, existing: &CachedWork, desired: &ManifestWork) -> bool {
        same_content(existing, desired)
    }

    fn applied(&self, work: &CachedWork) -> bool {
        work.applied
    }

    fn applied_objects<'a>(&self, work: &'a CachedWork) -> &'a [Identity] {
        &work.applied_objects
    }

    fn written<'a>(&self, work: &'a CachedWork) -> &'a [Written] {
        &work.written
    }

    fn unapplied<'a>(&self, work: &'a CachedWork) -> &'a [Unapplied] {
        &work.unapplied
    }

    fn landed(&self, work: &CachedWork) -> Landed {
        work.landed
    }
}
