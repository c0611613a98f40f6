//! What a Binding's plan reads ([`Inputs`]: the objects it lists, what the caches hold of each,
//! the CustomTransforms' removals) and what it gives ([`Desired`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ks_shared::api::{Binding, BindingPolicy, CustomTransform, CustomTransformStatus};
use kube::ResourceExt;
use serde_json::Value;

use super::jsonpath;
use super::sharding::Limits;
use super::trace;
use crate::informers::{CachedObject, FirstSeen, GroupResource, Served, WorkloadRef};
use crate::transport::plugin::Plugin;
use crate::transport::types::{Identity, WorkKey};

/// An object a Binding lists.
pub(crate) struct Entry {
    pub object: WorkloadRef,
    pub create_only: bool,
}

/// The objects a Binding lists, cluster-scoped ones first.
pub(crate) fn entries(binding: &Binding) -> impl Iterator<Item = Entry> {
    let w = &binding.spec.workload;
    let cluster_scoped = w.cluster_scope.iter().map(|c| {
        let o = &c.object;
        Entry {
            object: WorkloadRef::new(&o.group, &o.resource, "", &o.name),
            create_only: c.modulation.create_only,
        }
    });
    let namespaced = w.namespace_scope.iter().map(|n| {
        let o = &n.object;
        Entry {
            object: WorkloadRef::new(&o.group, &o.resource, &o.namespace, &o.name),
            create_only: n.modulation.create_only,
        }
    });
    cluster_scoped.chain(namespaced)
}

/// Whether the BindingPolicy that owns `binding` (`policy`, the one of its name in the cache) is
/// being deleted or gone. The Binding then goes too, through the ownerReference, and its wrapped
/// objects with it; until then they are left as they are, not written again without the objects
/// deleted meanwhile (a policy deleted together with its namespace). A Binding no policy owns is
/// never leaving.
pub(crate) fn policy_leaving(binding: &Binding, policy: Option<&BindingPolicy>) -> bool {
    let Some(owner) = binding
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "BindingPolicy")
    else {
        return false;
    };
    match policy {
        Some(policy) if policy.uid().as_deref() == Some(owner.uid.as_str()) => {
            policy.metadata.deletion_timestamp.is_some()
        }
        // Gone, or replaced by a new policy of the same name: until garbage collection deletes
        // the Binding, or the binding controller makes the new policy its owner.
        _ => true,
    }
}

/// What the WDS caches hold of a listed object.
pub(crate) enum Cached {
    /// The object, and how its cache serves it (version, kind, where its status is).
    Found(Arc<CachedObject>, Served),
    /// Not in its filled cache: deleted from the WDS, so the Binding's WECs lose it too.
    Gone,
    /// Its cache is not filled: not known, not gone.
    Unfilled,
}

/// The CustomTransforms' removals (compiled JSONPaths), by the group and resource they apply to.
pub(crate) type Removals = BTreeMap<GroupResource, Vec<Vec<String>>>;

/// Every CustomTransform's removals that compile (the others are reported in its status); those
/// of several CustomTransforms naming the same group and resource all apply.
pub(crate) fn removals(transforms: &[Arc<CustomTransform>]) -> Removals {
    let mut removals = Removals::new();
    for transform in transforms {
        let (paths, _) = jsonpath::compile(&transform.spec.remove);
        let gr = GroupResource {
            group: transform.spec.api_group.clone(),
            resource: transform.spec.resource.clone(),
        };
        removals.entry(gr).or_default().extend(paths);
    }
    removals
}

/// What a CustomTransform's status should say: path errors, and a warning when several
/// CustomTransforms name the same group and resource (their removals are all applied).
pub(crate) fn transform_status(transform: &CustomTransform, all: &[Arc<CustomTransform>]) -> CustomTransformStatus {
    let (_, errors) = jsonpath::compile(&transform.spec.remove);
    let same: BTreeSet<String> = all
        .iter()
        .filter(|t| t.spec.api_group == transform.spec.api_group && t.spec.resource == transform.spec.resource)
        .map(|t| t.name_any())
        .collect();
    let warnings = if same.len() > 1 {
        let names: Vec<&str> = same.iter().map(String::as_str).collect();
        vec![format!(
            "multiple CustomTransform objects specify the same GroupResource; their names are {}",
            names.join(", ")
        )]
    } else {
        Vec::new()
    };
    CustomTransformStatus {
        observed_generation: transform.metadata.generation.unwrap_or_default(),
        errors,
        warnings,
    }
}

/// The manifests the Binding's wrapped objects hold, by mailbox and object identity: read from
/// the ITS, for those that hold an object in error (the cache keeps no manifests), whose last
/// good content they are.
pub(crate) type LastGood = BTreeMap<(String, Identity), Arc<Value>>;

/// Everything a Binding's wrapped objects depend on.
pub(crate) struct Inputs<'a, P: Plugin> {
    pub plugin: &'a P,
    pub binding: &'a Binding,
    /// Each object the Binding lists, with what the caches hold of it.
    pub objects: Vec<(Entry, Cached)>,
    pub removals: &'a Removals,
    /// A WEC's template properties; asked only when an object has templates to expand.
    pub properties: &'a dyn Fn(&str) -> BTreeMap<String, String>,
    /// The Binding's wrapped objects now, in every mailbox: their shards and trace annotations
    /// are kept, and the objects in error that they hold.
    pub current: &'a [Arc<P::Cached>],
    /// What some of `current` hold, read for the objects in error (see [`Desired::unread`]).
    pub last_good: &'a LastGood,
    /// By mailbox, the objects whose copies there the destination is to go on writing in place
    /// ([`super::in_place::in_place`]).
    pub in_place: &'a BTreeMap<String, BTreeSet<Identity>>,
    /// Goes into the wrapped objects' names and labels.
    pub wds_name: &'a str,
    pub limits: Limits,
    pub packaging: &'a trace::Packaging,
    pub first_seen: &'a FirstSeen,
}

/// The wrapped objects a Binding calls for, by (mailbox, name), and the errors (for its status)
/// of the objects that keep their last good content, or stay off the WECs that never had them.
pub(crate) struct Desired<W> {
    pub works: BTreeMap<WorkKey, W>,
    pub errors: Vec<String>,
    /// Some objects are expanded with their WECs' properties.
    pub templated: bool,
    /// Mailboxes whose wrapped objects are to stay as they are, neither written nor deleted: one
    /// holds an object in error whose last good content is not in [`Inputs::last_good`], or
    /// that content no longer fits in a wrapped object (the limits shrank).
    pub frozen: BTreeSet<String>,
    /// The wrapped objects to read for that content (then to plan again).
    pub unread: BTreeSet<WorkKey>,
}
