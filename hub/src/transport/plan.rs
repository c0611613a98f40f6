//! The transport's decisions for one Binding, as a plain function of what the caches hold: the
//! wrapped objects (ManifestWorks) it calls for in each WEC's mailbox, and the errors (for its
//! status) of the objects that cannot be delivered as they are. Each object goes through the
//! built-in transforms, the CustomTransforms' removals and, per WEC, template expansion; it keeps
//! the trace annotations and the shard the existing wrapped objects show. An object in error
//! (unreadable, too deep, too large, or its templates failing on a WEC) keeps its last good
//! content where a WEC has it, and everything else goes on: one object never holds back the
//! others, nor one WEC the others. The controller gathers the inputs and writes the differences.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ks_shared::api::{Binding, BindingPolicy, CustomTransform, CustomTransformStatus, Propagation};
use ks_shared::names::{
    EXPAND_TEMPLATES_ANNOTATION, WDS_CONTENT_ANNOTATION, WDS_GENERATION_ANNOTATION, WDS_UID_ANNOTATION,
};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::moves::WorkKey;
use super::sharding::{self, Limits};
use super::transforms::prepare_for_wec;
use super::wrap::{self, Delivery, Origin};
use super::{Error, Plugin, jsonpath, propagation, template, trace};
use crate::informers::{CachedObject, FirstSeen, GroupResource, Served, WorkloadRef};

/// An object a Binding lists.
pub(super) struct Entry {
    pub object: WorkloadRef,
    pub create_only: bool,
}

/// The objects a Binding lists, cluster-scoped ones first.
pub(super) fn entries(binding: &Binding) -> impl Iterator<Item = Entry> {
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
pub(super) fn policy_leaving(binding: &Binding, policy: Option<&BindingPolicy>) -> bool {
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
pub(super) enum Cached {
    /// The object, and how its cache serves it (version, kind, where its status is).
    Found(Arc<CachedObject>, Served),
    /// Not in its filled cache: deleted from the WDS, so the Binding's WECs lose it too.
    Gone,
    /// Its cache is not filled: not known, not gone.
    Unfilled,
}

/// The CustomTransforms' removals (compiled JSONPaths), by the group and resource they apply to.
pub(super) type Removals = BTreeMap<GroupResource, Vec<Vec<String>>>;

/// Every CustomTransform's removals that compile (the others are reported in its status); those
/// of several CustomTransforms naming the same group and resource all apply.
pub(super) fn removals(transforms: &[Arc<CustomTransform>]) -> Removals {
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
pub(super) fn transform_status(transform: &CustomTransform, all: &[Arc<CustomTransform>]) -> CustomTransformStatus {
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
pub(super) type LastGood = BTreeMap<(String, wrap::Identity), Arc<Value>>;

/// Everything a Binding's wrapped objects depend on.
pub(super) struct Inputs<'a, P: Plugin> {
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
    /// ([`wrap::in_place`]).
    pub in_place: &'a BTreeMap<String, BTreeSet<wrap::Identity>>,
    /// Goes into the wrapped objects' names and labels.
    pub wds_name: &'a str,
    pub limits: Limits,
    pub packaging: &'a trace::Packaging,
    pub first_seen: &'a FirstSeen,
}

/// The wrapped objects a Binding calls for, by (mailbox, name), and the errors (for its status)
/// of the objects that keep their last good content, or stay off the WECs that never had them.
pub(super) struct Desired<W> {
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

/// How far the Binding's objects got on each of its WECs: delivered by what its wrapped objects
/// hold as plans read them (`planned`: its own writes count from their replies), applied and
/// available by what the WECs reported in the `reported` ones' status (the cache's).
pub(super) fn propagation<P: Plugin>(
    plugin: &P,
    binding: &Binding,
    planned: &[Arc<P::Cached>],
    reported: &[Arc<P::Cached>],
) -> Propagation {
    let wecs = binding.spec.destinations.iter().map(|destination| {
        let mailbox = plugin.mailbox(&destination.cluster_id);
        let landed = |works: &[Arc<P::Cached>]| -> propagation::Landed {
            works
                .iter()
                .filter(|w| w.namespace().as_deref() == Some(mailbox.as_str()))
                .map(|w| plugin.landed(w))
                .sum()
        };
        let landed = propagation::Landed {
            delivered: landed(planned).delivered,
            ..landed(reported)
        };
        (destination.cluster_id.clone(), landed)
    });
    propagation::summarize(entries(binding).count(), wecs)
}

/// One object to deliver, with its WDS UID (which names its wrapped object when there is one
/// object per wrapped object).
#[derive(Clone)]
struct Item {
    delivery: Delivery,
    uid: String,
    /// Expanded per WEC (docs/upstream-behaviour.md#templates): it asks for it and has a template
    /// somewhere.
    templated: bool,
    /// How template errors name it: `Kind.group(namespace/name)`, as upstream.
    label: String,
    /// The bytes its manifest takes in a wrapped object, and its identity there: worked out once,
    /// not for every WEC.
    size: usize,
    identity: wrap::Identity,
    /// Its place in its wrapped object ([`Place`]): read once, not at every comparison of a sort
    /// (4 % of the hub's CPU at 10,000 objects × 12 WECs).
    place: Place,
}

impl Item {
    fn new(delivery: Delivery, uid: String, templated: bool, label: String, created: Option<&Time>) -> Item {
        Item {
            size: delivery.manifest().to_string().len(),
            identity: wrap::identity(delivery.manifest()),
            place: Place::of(&delivery, created),
            delivery,
            uid,
            templated,
            label,
        }
    }

    fn failed(&self) -> Failed {
        Failed {
            identity: self.identity.clone(),
            resource: self.delivery.resource.clone(),
            create_only: self.delivery.create_only,
            uid: self.uid.clone(),
            label: self.label.clone(),
            created: self.place.newest_first.0.clone(),
        }
    }
}

/// An object that cannot be delivered as it is now (to any WEC, or to one): what it is, to
/// deliver its last good content instead where a WEC has it.
#[derive(Clone)]
struct Failed {
    identity: wrap::Identity,
    resource: String,
    create_only: bool,
    uid: String,
    label: String,
    created: Option<Time>,
}

impl Failed {
    /// The object as a wrapped object holds it: `manifest`.
    fn kept(&self, manifest: &Value) -> Item {
        let delivery = Delivery::new(manifest.clone(), &self.resource, self.create_only);
        Item::new(
            delivery,
            self.uid.clone(),
            false,
            self.label.clone(),
            self.created.as_ref(),
        )
    }
}

/// Where an object goes in its wrapped object, which OCM's work agent applies one after another
/// (a read of each object on the WEC, and a write where it differs): containers first
/// ([`apply_order`]), then the newest object first, so that a new object among many already
/// applied is applied at once, not after a read of every other. Ties keep key order. Made of
/// the objects alone, so an unchanged Binding plans the same order and writes nothing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    container: u8,
    newest_first: Reverse<Option<Time>>,
}

impl Place {
    fn of(delivery: &Delivery, created: Option<&Time>) -> Place {
        Place {
            container: apply_order(delivery),
            newest_first: Reverse(created.cloned()),
        }
    }
}

/// The wrapped objects `inputs.binding` calls for in each of its WECs' mailboxes. An object
/// whose cache is not filled is not known: the error says so, and the WECs keep what they have.
/// An object in error is reported, and keeps on each WEC what the WEC's wrapped objects hold of
/// it (nothing, if they hold nothing of it); the other objects are planned as ever.
pub(super) fn plan<P: Plugin>(inputs: &Inputs<'_, P>) -> Result<Desired<P::Wrapped>, Error> {
    if let Some((entry, _)) = inputs.objects.iter().find(|(_, c)| matches!(c, Cached::Unfilled)) {
        return Err(Error::Unfilled(entry.object.resource.clone()));
    }
    let binding = inputs.binding;
    let binding_name = binding.name_any();
    let (items, failed, mut errors) = items(inputs, &binding_name);
    let (mut frozen, mut unread) = (BTreeSet::new(), BTreeSet::new());
    let origin = Origin {
        binding: &binding_name,
        binding_uid: &binding.uid().unwrap_or_default(),
        binding_generation: binding.metadata.generation.unwrap_or_default(),
        wds: inputs.wds_name,
    };
    let mut works = BTreeMap::new();
    let mut growth = template::Growth::default();
    for destination in &binding.spec.destinations {
        let mailbox = &inputs.plugin.mailbox(&destination.cluster_id);
        growth.next_wec();
        let (mut items, mut failing) = customized(
            &items,
            &destination.cluster_id,
            inputs.properties,
            &mut growth,
            &mut errors,
        );
        failing.extend(oversized(&items, inputs.limits, &mut errors));
        failing.extend(failed.iter().map(|(key, failed)| (key.clone(), failed.clone())));
        if !failing.is_empty() {
            let to_read = keep_last_good(inputs, mailbox, &failing, items.to_mut());
            if !to_read.is_empty() {
                frozen.insert(mailbox.clone());
                unread.extend(to_read);
                continue;
            }
        }
        // By position in key order from here (see `sharding::assign`).
        let listed: Vec<(&WorkloadRef, &Item)> = items.iter().collect();
        let sizes: Vec<(&WorkloadRef, usize)> = listed.iter().map(|(k, item)| (*k, item.size)).collect();
        let previous = previous_shards(inputs.plugin, inputs.current, &origin, mailbox, &listed);
        let assigned = match sharding::assign(&sizes, &previous, inputs.limits) {
            Ok(assigned) => assigned,
            // Only last good content can be too large now: the limits shrank below it.
            Err(err) => {
                errors.push(format!("{mailbox}: {err}; its wrapped objects stay as they are"));
                frozen.insert(mailbox.clone());
                continue;
            }
        };
        let mut shards: BTreeMap<usize, Vec<&Item>> = BTreeMap::new();
        for ((_, item), shard) in listed.iter().zip(assigned) {
            shards.entry(shard).or_default().push(item);
        }
        let existing = names_in(inputs.current, mailbox);
        let none = BTreeSet::new();
        let in_place = inputs.in_place.get(mailbox).unwrap_or(&none);
        for (shard, mut members) in shards {
            members.sort_by(|a, b| a.place.cmp(&b.place));
            let only_uid = (inputs.limits.max_count == 1).then(|| members[0].uid.as_str());
            let name = wrap::shard_work_name(&origin, shard, only_uid, &existing);
            let deliveries: Vec<&Delivery> = members.iter().map(|item| &item.delivery).collect();
            works.insert(
                (mailbox.clone(), name.clone()),
                inputs.plugin.wrap(&origin, mailbox, &name, &deliveries, in_place),
            );
        }
    }
    errors.sort();
    errors.dedup();
    Ok(Desired {
        works,
        errors,
        templated: items.values().any(|item| item.templated),
        frozen,
        unread,
    })
}

/// The objects of a Binding found in the caches, by a key that orders them for sharding.
type Items = BTreeMap<WorkloadRef, Item>;
/// Objects in error, by the same key.
type Failing = Vec<(WorkloadRef, Failed)>;

/// The objects found in the caches as every WEC gets them before templates are expanded, by a
/// key that orders them for sharding; those that cannot be delivered to any WEC as they are
/// now; and the errors that say why.
fn items<P: Plugin>(inputs: &Inputs<'_, P>, binding: &str) -> (Items, Failing, Vec<String>) {
    let mut errors = Vec::new();
    let mut items = BTreeMap::new();
    let mut failing = Vec::new();
    let delivered = trace::delivered(inputs.current.iter().flat_map(|w| inputs.plugin.held(w)).map(|h| &**h));
    let wecs: Vec<&str> = inputs
        .binding
        .spec
        .destinations
        .iter()
        .map(|d| d.cluster_id.as_str())
        .collect();
    let wecs = wecs.join(",");
    for (entry, cached) in &inputs.objects {
        // Deleted from the WDS (every cache it could be in is filled): the Binding follows.
        let Cached::Found(object, served) = cached else {
            continue;
        };
        let served_as = &served.resource;
        let Entry {
            object: key,
            create_only,
        } = entry;
        let gr = &key.resource;
        let kind = match gr.group.as_str() {
            "" => served_as.kind.clone(),
            group => format!("{}.{group}", served_as.kind),
        };
        let name = &key.name;
        let label = match key.namespace() {
            Some(namespace) => format!("{kind}({namespace}/{name})"),
            None => format!("{kind}({name})"),
        };
        let failed = || Failed {
            identity: (
                served_as.group.clone(),
                served_as.kind.clone(),
                key.namespace_or_empty().to_string(),
                name.clone(),
            ),
            resource: gr.resource.clone(),
            create_only: *create_only,
            uid: object.uid().unwrap_or_default(),
            label: label.clone(),
            created: object.metadata.creation_timestamp.clone(),
        };
        // Where a write of its status raises its generation (no status subresource), its
        // versions are told apart by content instead (objects without a generation, such as
        // ConfigMaps, have no versions to tell apart).
        let by_content = !served.status_subresource && object.metadata.generation.is_some();
        let delivered_as = object.as_delivered(served_as).and_then(|manifest| {
            let content = by_content.then(|| object.content_digest()).transpose()?;
            Ok((manifest, content))
        });
        let (mut manifest, content) = match delivered_as {
            Ok(delivered_as) => delivered_as,
            Err(err) => {
                errors.push(format!("{label}: {err}"));
                failing.push((key.clone(), failed()));
                continue;
            }
        };
        prepare_for_wec(&mut manifest);
        // Tells the status agent which incarnation of the WDS object the WEC object is.
        if let Some(uid) = object.uid() {
            manifest["metadata"]["annotations"][WDS_UID_ANNOTATION] = json!(uid);
        }
        // Tells the status agent which version of the WDS object the WEC object is: its
        // generation (statusDetails), or its content digest where a status write raises the
        // generation (which would otherwise deliver the object again on every status returned);
        // and carries the rollout's trace.
        if let Some(generation) = object.metadata.generation {
            let version = match content {
                Some(digest) => {
                    manifest["metadata"]["annotations"][WDS_CONTENT_ANNOTATION] = json!(digest);
                    digest
                }
                None => {
                    let generation = generation.to_string();
                    manifest["metadata"]["annotations"][WDS_GENERATION_ANNOTATION] = json!(generation);
                    generation
                }
            };
            let already = delivered
                .get(&wrap::identity(&manifest))
                .filter(|(at, _)| *at == version)
                .map(|(_, trace)| trace);
            let subject = trace::Subject {
                group: &gr.group,
                resource: &gr.resource,
                binding,
                wecs: &wecs,
            };
            let annotations = inputs
                .packaging
                .annotations(object, already, inputs.first_seen, &subject);
            trace::set(&mut manifest, &annotations);
        }
        for path in inputs.removals.get(gr).into_iter().flatten() {
            jsonpath::remove(&mut manifest, path);
        }
        let templated = object
            .annotations()
            .get(EXPAND_TEMPLATES_ANNOTATION)
            .map(String::as_str)
            == Some("true")
            && template::contains_template(&manifest);
        if let Some(error) = wrap::too_deep(&label, &manifest) {
            errors.push(error);
            failing.push((key.clone(), failed()));
            continue;
        }
        let delivery = Delivery::new(manifest, &gr.resource, *create_only);
        let created = object.metadata.creation_timestamp.as_ref();
        let item = Item::new(delivery, object.uid().unwrap_or_default(), templated, label, created);
        items.insert(key.clone(), item);
    }
    (items, failing, errors)
}

/// The objects as `wec` gets them: templates expanded with its properties; and those whose
/// expansion fails, left out, with `errors` naming the WEC, the object and the string's path.
fn customized<'a>(
    items: &'a Items,
    wec: &str,
    properties: &dyn Fn(&str) -> BTreeMap<String, String>,
    growth: &mut template::Growth,
    errors: &mut Vec<String>,
) -> (Cow<'a, Items>, Failing) {
    if !items.values().any(|item| item.templated) {
        return (Cow::Borrowed(items), Failing::new());
    }
    let properties = properties(wec);
    let mut failing = Failing::new();
    let mut customized = items.clone();
    customized.retain(|key, item| {
        if !item.templated {
            return true;
        }
        match item
            .delivery
            .update(|manifest| template::expand_object(manifest, &properties, growth))
        {
            Ok(()) => {
                item.size = item.delivery.manifest().to_string().len();
                item.identity = wrap::identity(item.delivery.manifest());
                item.place.container = apply_order(&item.delivery);
                true
            }
            Err(err) => {
                errors.push(format!("{wec}/{}.{err}", item.label));
                failing.push((key.clone(), item.failed()));
                false
            }
        }
    });
    (Cow::Owned(customized), failing)
}

/// The objects of `items` too large for any wrapped object, with `errors` saying so.
fn oversized(items: &Items, limits: Limits, errors: &mut Vec<String>) -> Failing {
    items
        .iter()
        .filter(|(_, item)| item.size >= limits.max_size)
        .map(|(key, item)| {
            let error = sharding::ShardError::TooLarge {
                key: key.to_string(),
                size: item.size,
                max_size: limits.max_size,
            };
            errors.push(error.to_string());
            (key.clone(), item.failed())
        })
        .collect()
}

/// `items` for `mailbox` with each of `failing` as the mailbox's wrapped objects hold it (its
/// last good content), or without it where they hold nothing of it (it never got there). The
/// wrapped objects that hold some of them when [`Inputs::last_good`] does not have their
/// content: to read before `items` can be delivered.
fn keep_last_good<P: Plugin>(
    inputs: &Inputs<'_, P>,
    mailbox: &str,
    failing: &Failing,
    items: &mut Items,
) -> BTreeSet<WorkKey> {
    let holders: HashMap<&wrap::Identity, WorkKey> = inputs
        .current
        .iter()
        .filter(|work| work.namespace().as_deref() == Some(mailbox))
        .flat_map(|work| {
            let key = (mailbox.to_string(), work.name_any());
            inputs.plugin.held(work).iter().map(move |h| (&h.identity, key.clone()))
        })
        .collect();
    let mut unread = BTreeSet::new();
    for (key, failed) in failing {
        items.remove(key);
        let Some(holder) = holders.get(&failed.identity) else {
            continue;
        };
        match inputs.last_good.get(&(mailbox.to_string(), failed.identity.clone())) {
            Some(manifest) => {
                items.insert(key.clone(), failed.kept(manifest));
            }
            None => {
                unread.insert(holder.clone());
            }
        }
    }
    unread
}

/// The names of the wrapped objects in `mailbox` among `current`: a shard keeps the name it has.
fn names_in<W: kube::Resource>(current: &[Arc<W>], mailbox: &str) -> BTreeSet<String> {
    current
        .iter()
        .filter(|w| w.namespace().as_deref() == Some(mailbox))
        .map(|w| w.name_any())
        .collect()
}

/// Where each of `listed` is now, by the existing wrapped objects' contents (one pass over
/// what they hold, however many objects and shards there are).
fn previous_shards<P: Plugin>(
    plugin: &P,
    current: &[Arc<P::Cached>],
    origin: &Origin<'_>,
    mailbox: &str,
    listed: &[(&WorkloadRef, &Item)],
) -> Vec<Option<usize>> {
    let mut held: HashMap<wrap::Identity, usize> = HashMap::new();
    for work in current.iter().filter(|w| w.namespace().as_deref() == Some(mailbox)) {
        if let Some(shard) = wrap::shard_of(origin, &work.name_any()) {
            // One held twice (kept where it was until it lands where it moves) counts as in the
            // lower shard, whatever order the cache lists them in: a plan that chose by that
            // order moved it back and forth.
            for identity in plugin.held(work).iter().map(|h| &h.identity) {
                held.entry(identity.clone())
                    .and_modify(|held| *held = (*held).min(shard))
                    .or_insert(shard);
            }
        }
    }
    listed
        .iter()
        .map(|(_, item)| held.get(&item.identity).copied())
        .collect()
}

/// Which objects OCM's work agent applies first: what others live in or are made of
/// (CustomResourceDefinitions, then Namespaces, then other cluster-scoped objects), so nothing
/// waits for a retry because its container is missing.
fn apply_order(delivery: &Delivery) -> u8 {
    let kind = delivery.manifest()["kind"].as_str().unwrap_or_default();
    let api_version = delivery.manifest()["apiVersion"].as_str().unwrap_or_default();
    let namespaced = delivery.manifest()["metadata"]["namespace"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    match (api_version, kind) {
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => 0,
        ("v1", "Namespace") => 1,
        _ if !namespaced => 2,
        _ => 3,
    }
}

#[cfg(test)]
mod tests;
