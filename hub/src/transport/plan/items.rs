//! The objects of a Binding as its wrapped objects hold them: each found in the caches goes
//! through the built-in transforms, the CustomTransforms' removals and, per WEC, template
//! expansion; and the objects that cannot be delivered as they are, with the errors that say why.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ks_shared::names::{
    EXPAND_TEMPLATES_ANNOTATION, WDS_CONTENT_ANNOTATION, WDS_GENERATION_ANNOTATION, WDS_UID_ANNOTATION,
};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::binding::{Cached, Entry, Inputs};
use super::depth::too_deep;
use super::sharding::{self, Limits};
use super::transforms::prepare_for_wec;
use super::{jsonpath, template, trace};
use crate::informers::WorkloadRef;
use crate::transport::plugin::Plugin;
use crate::transport::types::{Delivery, Identity, identity};

/// One object to deliver, with its WDS UID (which names its wrapped object when there is one
/// object per wrapped object).
#[derive(Clone)]
pub(super) struct Item {
    pub(super) delivery: Delivery,
    pub(super) uid: String,
    /// Expanded per WEC (docs/upstream-behaviour.md#templates): it asks for it and has a template
    /// somewhere.
    pub(super) templated: bool,
    /// How template errors name it: `Kind.group(namespace/name)`, as upstream.
    pub(super) label: String,
    /// The bytes its manifest takes in a wrapped object, and its identity there: worked out once,
    /// not for every WEC.
    pub(super) size: usize,
    pub(super) identity: Identity,
    /// Its place in its wrapped object ([`Place`]): read once, not at every comparison of a sort
    /// (4 % of the hub's CPU at 10,000 objects × 12 WECs).
    pub(super) place: Place,
}

impl Item {
    pub(super) fn new(delivery: Delivery, uid: String, templated: bool, label: String, created: Option<&Time>) -> Item {
        Item {
            size: delivery.manifest().to_string().len(),
            identity: identity(delivery.manifest()),
            place: Place::of(&delivery, created),
            delivery,
            uid,
            templated,
            label,
        }
    }

    pub(super) fn failed(&self) -> Failed {
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
pub(super) struct Failed {
    pub(super) identity: Identity,
    pub(super) resource: String,
    pub(super) create_only: bool,
    pub(super) uid: String,
    pub(super) label: String,
    pub(super) created: Option<Time>,
}

impl Failed {
    /// The object as a wrapped object holds it: `manifest`.
    pub(super) fn kept(&self, manifest: &Value) -> Item {
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
pub(super) struct Place {
    pub(super) container: u8,
    pub(super) newest_first: Reverse<Option<Time>>,
}

impl Place {
    pub(super) fn of(delivery: &Delivery, created: Option<&Time>) -> Place {
        Place {
            container: apply_order(delivery),
            newest_first: Reverse(created.cloned()),
        }
    }
}

/// The objects of a Binding found in the caches, by a key that orders them for sharding.
pub(super) type Items = BTreeMap<WorkloadRef, Item>;

/// Objects in error, by the same key.
pub(super) type Failing = Vec<(WorkloadRef, Failed)>;

/// The objects found in the caches as every WEC gets them before templates are expanded, by a
/// key that orders them for sharding; those that cannot be delivered to any WEC as they are
/// now; and the errors that say why.
pub(super) fn items<P: Plugin>(inputs: &Inputs<'_, P>, binding: &str) -> (Items, Failing, Vec<String>) {
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
                .get(&identity(&manifest))
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
        if let Some(error) = too_deep(&label, &manifest) {
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
pub(super) fn customized<'a>(
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
                item.identity = identity(item.delivery.manifest());
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
pub(super) fn oversized(items: &Items, limits: Limits, errors: &mut Vec<String>) -> Failing {
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

/// Which objects OCM's work agent applies first: what others live in or are made of
/// (CustomResourceDefinitions, then Namespaces, then other cluster-scoped objects), so nothing
/// waits for a retry because its container is missing.
pub(super) fn apply_order(delivery: &Delivery) -> u8 {
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
