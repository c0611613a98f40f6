//! The OCM transport's wrapped object: a ManifestWork in the WEC's mailbox namespace holding a
//! shard of a Binding's objects, named and labelled as upstream does so that upstream's status
//! add-on recognises it (docs/upstream-behaviour.md#manifestworks).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ks_shared::names::{
    API_GROUPS_ANNOTATION, CONTENT_DIGEST_ANNOTATION, OBJECT_COUNT_ANNOTATION, ORIGIN_BINDING_GENERATION_ANNOTATION,
    ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL,
};
use ks_shared::ocm::{
    ManifestConfigOption, ManifestWork, ManifestWorkSpec, ManifestsTemplate, ResourceIdentifier, ServerSideApplyConfig,
    UPDATE_STRATEGY_CREATE_ONLY, UPDATE_STRATEGY_SERVER_SIDE_APPLY, UPDATE_STRATEGY_UPDATE, UpdateStrategy,
    manifest_group,
};
use kube::api::ObjectMeta;
use serde_json::Value;

use crate::transport::types::{Delivery, Identity, Origin, SHARED_WITH_LABEL, Written, digest_text, identity};

/// The labels that find a Binding's ManifestWorks in every mailbox namespace.
pub fn origin_labels(origin: &Origin<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ORIGIN_BINDING_LABEL.to_string(), origin.binding.to_string()),
        (ORIGIN_WDS_LABEL.to_string(), origin.wds.to_string()),
    ])
}

/// Our origin labels among `labels`.
pub(super) fn origin_labels_of(labels: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    labels_of(labels, &[ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL])
}

/// The labels named `keys` among `labels`.
pub(super) fn labels_of(labels: Option<&BTreeMap<String, String>>, keys: &[&str]) -> BTreeMap<String, String> {
    let mut labels = labels.cloned().unwrap_or_default();
    labels.retain(|k, _| keys.contains(&k.as_str()));
    labels
}

/// Wraps deliveries, in order, into the ManifestWork `name` in `mailbox`; `in_place` are the
/// objects whose copies there OCM is to go on writing in place (see `plan::in_place`).
pub fn wrap(
    origin: &Origin<'_>,
    mailbox: &str,
    name: &str,
    deliveries: &[&Delivery],
    in_place: &BTreeSet<Identity>,
) -> ManifestWork {
    let stays_written_in_place = |d: &Delivery| {
        !in_place.is_empty() && {
            let identity = identity(&d.manifest);
            in_place.contains(&identity) && stays_in_place(&identity)
        }
    };
    let named = deliveries.iter().filter_map(|d| {
        let strategy = if d.create_only {
            UPDATE_STRATEGY_CREATE_ONLY
        } else if stays_written_in_place(d) {
            UPDATE_STRATEGY_UPDATE
        } else {
            return None;
        };
        let meta = &d.manifest["metadata"];
        let identifier = ResourceIdentifier {
            group: manifest_group(&d.manifest).to_string(),
            resource: d.resource.clone(),
            name: meta["name"].as_str().unwrap_or_default().to_string(),
            namespace: meta["namespace"].as_str().unwrap_or_default().to_string(),
        };
        Some(option(identifier, strategy))
    });
    let mut manifest_configs: Vec<ManifestConfigOption> = named.collect();
    let resources = deliveries
        .iter()
        .map(|d| (manifest_group(&d.manifest).to_string(), d.resource.clone()))
        .filter(|(group, _)| BUILT_IN_GROUPS.contains(&group.as_str()));
    manifest_configs.extend(server_side_applied(resources.collect()));
    let labels = origin_labels(origin);
    let texts: Vec<&str> = deliveries.iter().map(|d| &*d.digest_text).collect();
    let digest = content_digest(&labels, &texts, &manifest_configs);
    let manifests: Vec<Arc<Value>> = deliveries.iter().map(|d| d.manifest.clone()).collect();
    // Sharing nothing until the controller finds otherwise (see `sharers`); not in the digest.
    let mut labels = labels;
    labels.insert(SHARED_WITH_LABEL.to_string(), String::new());
    ManifestWork {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(mailbox.to_string()),
            annotations: Some(BTreeMap::from([
                (
                    ORIGIN_BINDING_GENERATION_ANNOTATION.to_string(),
                    origin.binding_generation.to_string(),
                ),
                (CONTENT_DIGEST_ANNOTATION.to_string(), digest),
                (API_GROUPS_ANNOTATION.to_string(), api_groups(&manifests)),
                (OBJECT_COUNT_ANNOTATION.to_string(), manifests.len().to_string()),
            ])),
            labels: Some(labels),
            ..Default::default()
        },
        spec: ManifestWorkSpec {
            workload: ManifestsTemplate { manifests },
            delete_option: None,
            manifest_configs,
        },
        status: None,
    }
}

fn option(resource_identifier: ResourceIdentifier, strategy: &str) -> ManifestConfigOption {
    ManifestConfigOption {
        resource_identifier,
        update_strategy: Some(UpdateStrategy {
            type_: strategy.into(),
            server_side_apply: (strategy == UPDATE_STRATEGY_SERVER_SIDE_APPLY)
                .then_some(ServerSideApplyConfig { force: true }),
        }),
        feedback_rules: Vec::new(),
    }
}

/// Kubernetes' own API groups. Objects of these are server-side applied on the WECs; custom
/// resources are not: their managedFields name the version each write used, and once a CRD
/// stops serving that version every server-side apply of them fails ("request to convert CR to
/// an invalid group/version"), where OCM's default `Update` goes on (a CRD version removed is an
/// ordinary upgrade; `a_crd_version_added_and_removed_keeps_the_wec_objects`).
const BUILT_IN_GROUPS: [&str; 21] = [
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// Kinds whose spec the WEC completes when it creates them and keeps after (a Job's selector, a
/// claim's volume): OCM's `Update` replaces the spec without what the WEC filled in, which the
/// WEC refuses, so they are server-side applied however their copy was first written (their
/// lists cannot change once created, so nothing an earlier write set merges with a new one).
const COMPLETED_BY_THE_WEC: [(&str, &str); 2] = [("batch", "Job"), ("", "PersistentVolumeClaim")];

/// Whether an object OCM wrote in place on its WEC stays written so (see `plan::in_place`).
fn stays_in_place((group, kind, ..): &Identity) -> bool {
    BUILT_IN_GROUPS.contains(&group.as_str()) && !COMPLETED_BY_THE_WEC.contains(&(group.as_str(), kind.as_str()))
}

/// Every object of `resources` (group, resource) not named before is server-side applied,
/// forced: what the WDS no longer has (a label, an annotation, a field) goes from the WEC copy,
/// and what others write there (status, their own fields) stays. OCM's default `Update` keeps
/// every label and annotation it once wrote, and replaces a Job's spec without the selector
/// its cluster assigned (a PUT the apiserver refuses). One option per resource, by wildcard,
/// after those naming objects: OCM takes the first that matches.
fn server_side_applied(resources: BTreeSet<(String, String)>) -> impl Iterator<Item = ManifestConfigOption> {
    resources.into_iter().map(|(group, resource)| {
        let every = ResourceIdentifier {
            group,
            resource,
            name: WILDCARD.into(),
            namespace: WILDCARD.into(),
        };
        option(every, UPDATE_STRATEGY_SERVER_SIDE_APPLY)
    })
}

/// OCM's wildcard in an option's name and namespace (a cluster-scoped object's empty namespace
/// matches it too).
const WILDCARD: &str = "*";

fn is_wildcard(option: &ManifestConfigOption) -> bool {
    option.resource_identifier.name == WILDCARD
}

/// The API groups of `manifests` (the core group left out), sorted and comma-separated.
fn api_groups(manifests: &[Arc<Value>]) -> String {
    let groups: BTreeSet<&str> = manifests
        .iter()
        .map(|m| manifest_group(m))
        .filter(|g| !g.is_empty())
        .collect();
    groups.into_iter().collect::<Vec<_>>().join(",")
}

/// `work` also holding `objects` as the first of `sources` that holds each holds it (manifest
/// and create-only option): what it is written as while objects it loses to those have not
/// landed there.
pub fn keeping(work: &ManifestWork, sources: &[&ManifestWork], objects: &BTreeSet<Identity>) -> ManifestWork {
    let mut kept = work.clone();
    let mut held: BTreeSet<Identity> = gloss(work).into_iter().collect();
    let mut wildcards: BTreeSet<(String, String)> = work
        .spec
        .manifest_configs
        .iter()
        .filter(|c| is_wildcard(c))
        .map(|c| {
            (
                c.resource_identifier.group.clone(),
                c.resource_identifier.resource.clone(),
            )
        })
        .collect();
    for source in sources {
        let mut taken = BTreeSet::new();
        for manifest in &source.spec.workload.manifests {
            let identity = identity(manifest);
            if objects.contains(&identity) && !held.contains(&identity) {
                kept.spec.workload.manifests.push(manifest.clone());
                held.insert(identity.clone());
                taken.insert(identity);
            }
        }
        // An option names the object by resource, not kind: matched by group, namespace and name.
        let named = |c: &ManifestConfigOption| {
            let r = &c.resource_identifier;
            taken
                .iter()
                .any(|(group, _, namespace, name)| (group, namespace, name) == (&r.group, &r.namespace, &r.name))
        };
        let named_here = source
            .spec
            .manifest_configs
            .iter()
            .filter(|c| !is_wildcard(c) && named(c));
        for option in named_here {
            if !kept.spec.manifest_configs.contains(option) {
                kept.spec.manifest_configs.push(option.clone());
            }
        }
        // A wildcard names the resource, which a manifest does not: those of the groups taken
        // (one more resource of that group is applied the same way, and holds nothing here).
        let groups: BTreeSet<&str> = taken.iter().map(|(group, ..)| group.as_str()).collect();
        wildcards.extend(
            source
                .spec
                .manifest_configs
                .iter()
                .filter(|c| is_wildcard(c) && groups.contains(c.resource_identifier.group.as_str()))
                .map(|c| {
                    (
                        c.resource_identifier.group.clone(),
                        c.resource_identifier.resource.clone(),
                    )
                }),
        );
    }
    // Named options first, as wrapping puts them.
    kept.spec.manifest_configs.retain(|c| !is_wildcard(c));
    kept.spec.manifest_configs.extend(server_side_applied(wildcards));
    if kept.spec.workload.manifests.len() == work.spec.workload.manifests.len() {
        return kept;
    }
    let texts: Vec<String> = kept.spec.workload.manifests.iter().map(|m| digest_text(m)).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let labels = origin_labels_of(kept.metadata.labels.as_ref());
    let digest = content_digest(&labels, &texts, &kept.spec.manifest_configs);
    let groups = api_groups(&kept.spec.workload.manifests);
    let annotations = kept.metadata.annotations.get_or_insert_default();
    annotations.insert(CONTENT_DIGEST_ANNOTATION.to_string(), digest);
    annotations.insert(API_GROUPS_ANNOTATION.to_string(), groups);
    annotations.insert(
        OBJECT_COUNT_ANNOTATION.to_string(),
        kept.spec.workload.manifests.len().to_string(),
    );
    kept
}

/// SHA-256 (hex) of what a ManifestWork asks for: our labels, the manifests without trace
/// annotations (a new trace alone is no reason to write) and the manifest configs, as the JSON
/// object `{"labels", "manifestConfigs", "manifests"}`. serde_json's maps are sorted by key, so
/// equal content always serialises, and digests, the same. Assembled from each delivery's text
/// rather than serialised whole: the same bytes, without serialising every object for every WEC.
fn content_digest(labels: &BTreeMap<String, String>, manifests: &[&str], configs: &[ManifestConfigOption]) -> String {
    let labels = serde_json::to_string(labels).unwrap_or_default();
    // Through a Value, whose maps sort the configs' fields as the whole object's did.
    let configs = serde_json::to_value(configs).unwrap_or_default().to_string();
    let content = format!(
        r#"{{"labels":{labels},"manifestConfigs":{configs},"manifests":[{}]}}"#,
        manifests.join(",")
    );
    let digest = ring::digest::digest(&ring::digest::SHA256, content.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The manifests of a ManifestWork read from the ITS, as they were written: the apiserver adds
/// `creationTimestamp: null` to each one's metadata, which would make the same content a change
/// (a new digest) to write.
pub fn delivered(work: &ManifestWork) -> Vec<Arc<Value>> {
    let mut manifests = work.spec.workload.manifests.clone();
    for manifest in &mut manifests {
        if manifest["metadata"].get("creationTimestamp") == Some(&Value::Null)
            && let Some(metadata) = Arc::make_mut(manifest)["metadata"].as_object_mut()
        {
            metadata.remove("creationTimestamp");
        }
    }
    manifests
}

/// What a ManifestWork holds: the identity of each manifest.
pub fn gloss(work: &ManifestWork) -> Vec<Identity> {
    work.spec.workload.manifests.iter().map(|m| identity(m)).collect()
}

/// A manifest config as far as [`written`] reads it.
pub struct Config<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The update strategy type (none: OCM's default, `Update`).
    pub strategy: Option<&'a str>,
}

impl Config<'_> {
    /// Whether OCM takes this option for `identity`'s object. An identity names a kind, an option
    /// a resource: a named option is taken for the kind whose plural it can be, as Kubernetes
    /// makes them (a ConfigMap and a Secret often share a name).
    fn names(&self, (group, kind, namespace, name): &Identity) -> bool {
        let resource_fits = || {
            let kind = kind.to_lowercase();
            let resource = self.resource;
            resource == kind
                || resource.strip_suffix('s').is_some_and(|r| r == kind)
                || resource.strip_suffix("es").is_some_and(|r| r == kind)
                || resource
                    .strip_suffix("ies")
                    .is_some_and(|r| kind.strip_suffix('y') == Some(r))
        };
        self.group == group
            && (self.namespace == WILDCARD || self.namespace == namespace)
            && (self.name == WILDCARD || (self.name == name && resource_fits()))
    }
}

/// How a ManifestWork with `configs` (in order) has each object it holds (`held`) written: by
/// the first option that names it, as OCM takes it, `InPlace` when none does.
pub fn written<'a>(held: impl Iterator<Item = &'a Identity>, configs: &[Config<'_>]) -> Box<[Written]> {
    let strategy = |identity: &Identity| {
        configs
            .iter()
            .find(|c| c.names(identity))
            .and_then(|c| c.strategy)
            // No option, or one without a strategy: OCM's own default.
            .unwrap_or(UPDATE_STRATEGY_UPDATE)
    };
    held.map(|identity| match strategy(identity) {
        UPDATE_STRATEGY_SERVER_SIDE_APPLY => Written::ServerSide,
        UPDATE_STRATEGY_CREATE_ONLY => Written::CreateOnly,
        _ => Written::InPlace,
    })
    .collect()
}

#[cfg(test)]
mod tests;
