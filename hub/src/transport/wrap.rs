//! The OCM transport's wrapped object: a ManifestWork in the WEC's mailbox namespace holding a
//! shard of a Binding's objects, named and labelled as upstream does so that upstream's status
//! add-on recognises it (docs/upstream-behaviour.md#manifestworks).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ks_shared::names::{
    API_GROUPS_ANNOTATION, CONTENT_DIGEST_ANNOTATION, OBJECT_COUNT_ANNOTATION, ORIGIN_BINDING_GENERATION_ANNOTATION,
    ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL, is_trace_annotation,
};
use ks_shared::ocm::{
    ManagedCluster, ManifestConfigOption, ManifestWork, ManifestWorkSpec, ManifestsTemplate, ResourceIdentifier,
    ServerSideApplyConfig, UPDATE_STRATEGY_CREATE_ONLY, UPDATE_STRATEGY_SERVER_SIDE_APPLY, UPDATE_STRATEGY_UPDATE,
    UpdateStrategy, managed_cluster_condition, manifest_group,
};
use kube::api::ObjectMeta;
use serde_json::Value;

use super::cached::{CachedWork, Held};

/// One object to deliver: the transformed manifest, its resource name, and whether it is
/// create-only. Cloned cheaply: every WEC's ManifestWork shares the manifest, unless its
/// templates are expanded for that WEC.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    manifest: Arc<Value>,
    pub resource: String,
    pub create_only: bool,
    /// What the content digest reads of the manifest, serialised once however many WECs get it.
    digest_text: Arc<str>,
}

impl Delivery {
    pub fn new(manifest: Value, resource: impl Into<String>, create_only: bool) -> Delivery {
        Delivery {
            digest_text: digest_text(&manifest).into(),
            manifest: Arc::new(manifest),
            resource: resource.into(),
            create_only,
        }
    }

    pub fn manifest(&self) -> &Value {
        &self.manifest
    }

    /// Changes the manifest (e.g. expands its templates; a copy if it is shared), keeping what is
    /// read of it current.
    pub fn update<T>(&mut self, change: impl FnOnce(&mut Value) -> T) -> T {
        let result = change(Arc::make_mut(&mut self.manifest));
        self.digest_text = digest_text(&self.manifest).into();
        result
    }
}

/// Which Binding a ManifestWork comes from.
#[derive(Clone, Debug)]
pub struct Origin<'a> {
    pub binding: &'a str,
    pub binding_uid: &'a str,
    pub binding_generation: i64,
    pub wds: &'a str,
}

/// The longest ManifestWork name: OCM's work agent names the AppliedManifestWork on the WEC
/// `<hub hash>-<name>` (64 hex digits and a dash), a DNS subdomain of at most 253 characters.
pub const MAX_WORK_NAME: usize = 253 - 65;

/// How many hex digits of a hash end a binding name cut to fit [`MAX_WORK_NAME`].
const NAME_HASH_DIGITS: usize = 10;

/// The name of a new ManifestWork. One object per work: `<bindingUID>-<wds>-<objectUID>`, as
/// upstream with `--max-num-wrapped=1` (UIDs have one length, so no two origins share a name).
/// Otherwise `<binding>.<wds>.<shard>`: a WDS name is a DNS label, without dots, so the last two
/// dots tell binding, WDS and shard apart, where upstream's `<binding>-<wds>-<shard>` gave policy
/// `x-a` of WDS `b` and policy `x` of WDS `a-b` the same name; and as no name of upstream's form
/// ends in `.<shard>`, neither meets one of those. A binding name too long for
/// [`MAX_WORK_NAME`] is cut, and ends in a hash of the whole.
pub fn work_name(origin: &Origin<'_>, shard: usize, only_object_uid: Option<&str>) -> String {
    if let Some(uid) = only_object_uid {
        return format!("{}-{}-{uid}", origin.binding_uid, origin.wds);
    }
    let suffix = format!(".{}.{shard}", origin.wds);
    if origin.binding.len() + suffix.len() <= MAX_WORK_NAME {
        return format!("{}{suffix}", origin.binding);
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, origin.binding.as_bytes());
    let hash: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let kept = MAX_WORK_NAME.saturating_sub(suffix.len() + 1 + NAME_HASH_DIGITS);
    // A DNS subdomain's labels end in a letter or digit; a binding name is ASCII.
    let cut = origin.binding[..kept].trim_end_matches(['.', '-']);
    format!("{cut}-{}{suffix}", &hash[..NAME_HASH_DIGITS])
}

/// Upstream's name of a shard's ManifestWork, `<binding>-<wds>-<shard>`, which earlier versions
/// gave theirs.
fn upstream_work_name(origin: &Origin<'_>, shard: usize) -> String {
    format!("{}-{}-{shard}", origin.binding, origin.wds)
}

/// The name of `origin`'s ManifestWork of `shard` in a mailbox where its ManifestWorks are named
/// `existing`: upstream's name if one is (written so by an earlier version: an upgrade renames
/// nothing), else [`work_name`].
pub fn shard_work_name(
    origin: &Origin<'_>,
    shard: usize,
    only_object_uid: Option<&str>,
    existing: &BTreeSet<String>,
) -> String {
    let upstream = upstream_work_name(origin, shard);
    if only_object_uid.is_none() && existing.contains(&upstream) {
        return upstream;
    }
    work_name(origin, shard, only_object_uid)
}

/// The shard a ManifestWork of `origin` holds, by its name ([`work_name`]'s or upstream's);
/// `None` for one named after its object's UID (whose last segment may be all digits, and is no
/// shard).
pub fn shard_of(origin: &Origin<'_>, name: &str) -> Option<usize> {
    let shard = name.rsplit(['.', '-']).next()?.parse().ok()?;
    (work_name(origin, shard, None) == name || upstream_work_name(origin, shard) == name).then_some(shard)
}

/// The labels that find a Binding's ManifestWorks in every mailbox namespace.
pub fn origin_labels(origin: &Origin<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ORIGIN_BINDING_LABEL.to_string(), origin.binding.to_string()),
        (ORIGIN_WDS_LABEL.to_string(), origin.wds.to_string()),
    ])
}

/// Our origin labels among `labels`.
fn origin_labels_of(labels: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    labels_of(labels, &[ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL])
}

/// The labels named `keys` among `labels`.
fn labels_of(labels: Option<&BTreeMap<String, String>>, keys: &[&str]) -> BTreeMap<String, String> {
    let mut labels = labels.cloned().unwrap_or_default();
    labels.retain(|k, _| keys.contains(&k.as_str()));
    labels
}

/// Wraps deliveries, in order, into the ManifestWork `name` in `mailbox`; `in_place` are the
/// objects whose copies there OCM is to go on writing in place (see [`in_place`]).
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
    labels.insert(super::sharers::LABEL.to_string(), String::new());
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

/// Whether an object OCM wrote in place on its WEC stays written so (see [`in_place`]).
fn stays_in_place((group, kind, ..): &Identity) -> bool {
    BUILT_IN_GROUPS.contains(&group.as_str()) && !COMPLETED_BY_THE_WEC.contains(&(group.as_str(), kind.as_str()))
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

/// How a ManifestWork has OCM write one of its objects on the WEC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Server-side applied.
    ServerSide,
    /// Created only, if missing (and then by a plain create).
    CreateOnly,
    /// Replaced (OCM's `Update`, a PUT), or created so if missing.
    InPlace,
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

/// Of the objects in one mailbox, those whose copies a Binding is to have OCM go on writing in
/// place, from how its own ManifestWorks there write each (`own`) and how the others' do
/// (`others`). A copy OCM created in place (for a createOnly policy, or by an earlier hub that
/// used `Update`) has its fields owned by that create, and a server-side apply cannot take them:
/// field ownership is by manager and operation, and OCM's apply and its create are two. What the
/// WDS then removed stayed, and a port or container renamed was merged beside the old one. So:
/// - what the Binding already has written server-side, or in place, stays so;
/// - otherwise (new to it, or createOnly there until now) in place if nobody applies it
///   server-side and someone created it in place: a createOnly option of its own or another's,
///   or another's in-place write. A copy some ManifestWork applies server-side was created so
///   (one that came later finds it there and creates nothing).
pub fn in_place<'a>(
    own: impl Iterator<Item = (&'a Identity, Written)>,
    others: impl Iterator<Item = (&'a Identity, Written)>,
) -> BTreeSet<Identity> {
    let mut own_written: BTreeMap<&Identity, Written> = BTreeMap::new();
    for (identity, written) in own {
        // Held twice (moving between shards): the same object, so the same copy.
        own_written.entry(identity).or_insert(written);
    }
    let (mut server_side, mut created_in_place) = (BTreeSet::new(), BTreeSet::new());
    for (identity, written) in others {
        match written {
            Written::ServerSide => server_side.insert(identity),
            Written::CreateOnly | Written::InPlace => created_in_place.insert(identity),
        };
    }
    let mut in_place: BTreeSet<Identity> = BTreeSet::new();
    for (identity, written) in &own_written {
        let stays = match written {
            Written::ServerSide => false,
            Written::InPlace => true,
            Written::CreateOnly => !server_side.contains(identity),
        };
        if stays {
            in_place.insert((*identity).clone());
        }
    }
    let new_here = created_in_place
        .into_iter()
        .filter(|i| !own_written.contains_key(i) && !server_side.contains(i));
    in_place.extend(new_here.cloned());
    in_place
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

/// An object's identity in a wrapped object: `(apiVersion's group, kind, namespace, name)`.
pub type Identity = (String, String, String, String);

/// The OCM transport: ManifestWorks in the namespace named after the ManagedCluster.
pub struct Ocm;

impl super::Plugin for Ocm {
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

    fn unapplied<'a>(&self, work: &'a CachedWork) -> &'a [super::cached::Unapplied] {
        &work.unapplied
    }

    fn landed(&self, work: &CachedWork) -> super::propagation::Landed {
        work.landed
    }
}

/// Whether an existing ManifestWork already says what `desired` says. The stored manifests are
/// what the apiserver made of ours, so they are compared through the digest of what we sent, plus
/// what others could change without touching it: our labels (origin, and the
/// [`super::sharers`] label) and which objects it holds. The
/// Binding generation annotation alone is no reason to write; a missing API groups or object
/// count annotation (a ManifestWork written before there was one) is.
pub fn same_content(existing: &CachedWork, desired: &ManifestWork) -> bool {
    let ours = |metadata: &ObjectMeta, held: Vec<Identity>| {
        let mut labels = labels_of(
            metadata.labels.as_ref(),
            &[ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL, super::sharers::LABEL],
        );
        // Empty is none, as on a ManifestWork written before there was one.
        labels.retain(|k, v| k != super::sharers::LABEL || !v.is_empty());
        let annotation = |name: &str| metadata.annotations.as_ref().and_then(|a| a.get(name).cloned());
        (
            labels,
            annotation(CONTENT_DIGEST_ANNOTATION),
            annotation(API_GROUPS_ANNOTATION),
            annotation(OBJECT_COUNT_ANNOTATION),
            held,
        )
    };
    let desired = ours(&desired.metadata, gloss(desired));
    let held = existing.held.iter().map(|h| h.identity.clone()).collect();
    desired.1.is_some() && ours(&existing.metadata, held) == desired
}

/// What the content digest reads of a manifest: its JSON without trace annotations.
fn digest_text(manifest: &Value) -> String {
    without_trace_annotations(manifest).to_string()
}

fn without_trace_annotations(manifest: &Value) -> Value {
    let mut manifest = manifest.clone();
    if let Some(annotations) = manifest["metadata"]["annotations"].as_object_mut() {
        annotations.retain(|key, _| !is_trace_annotation(key));
    }
    manifest
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

/// A manifest's identity.
pub fn identity(manifest: &Value) -> Identity {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        manifest_group(manifest).to_string(),
        text(&manifest["kind"]),
        text(&manifest["metadata"]["namespace"]),
        text(&manifest["metadata"]["name"]),
    )
}

/// The deepest object that is delivered. A ManifestWork holds it 4 levels down (the work, `spec`,
/// `workload`, `manifests`), and the transport's and every agent's watchers decode at most 128
/// levels (serde_json's limit): one ManifestWork deeper than that would break their watches of
/// every ManifestWork. The rest is margin.
pub const MAX_DELIVERED_DEPTH: usize = 120;

/// How many levels of objects and arrays `value` nests: a scalar is 0, `{}` and `[1]` are 1.
pub fn nesting_depth(value: &Value) -> usize {
    match value {
        Value::Object(fields) => 1 + fields.values().map(nesting_depth).max().unwrap_or(0),
        Value::Array(items) => 1 + items.iter().map(nesting_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// An error, for the Binding's status, when the object `label` is too deeply nested to deliver.
pub fn too_deep(label: &str, manifest: &Value) -> Option<String> {
    let depth = nesting_depth(manifest);
    (depth > MAX_DELIVERED_DEPTH).then(|| {
        format!(
            "{label}: nested {depth} levels deep; at most {MAX_DELIVERED_DEPTH} can be delivered (a ManifestWork \
             wraps it 4 levels deeper, and its watchers decode at most 128)"
        )
    })
}

#[cfg(test)]
mod tests {
    use ks_shared::names::WDS_GENERATION_ANNOTATION;
    use serde_json::json;

    use super::*;

    fn origin() -> Origin<'static> {
        Origin {
            binding: "nginx",
            binding_uid: "b-uid",
            binding_generation: 7,
            wds: "wds1",
        }
    }

    fn of<'a>(binding: &'a str, wds: &'a str) -> Origin<'a> {
        Origin {
            binding,
            wds,
            ..origin()
        }
    }

    #[test]
    fn names_tell_binding_wds_and_shard_apart() {
        assert_eq!(work_name(&origin(), 2, None), "nginx.wds1.2");
        assert_eq!(work_name(&origin(), 0, Some("o-uid")), "b-uid-wds1-o-uid");
        // Upstream named both `x-a-b-0`.
        assert_eq!(work_name(&of("x-a", "b"), 0, None), "x-a.b.0");
        assert_eq!(work_name(&of("x", "a-b"), 0, None), "x.a-b.0");
        // A policy name may hold dots and dashes, a WDS name dashes only: no two pairs meet.
        let pairs = [
            ("x.a", "b"),
            ("x", "a-b"),
            ("x-a", "b"),
            ("x.a-b", "c"),
            ("x", "a-b-c"),
            ("x.a", "b-c"),
        ];
        let names: BTreeSet<String> = pairs.iter().map(|(b, w)| work_name(&of(b, w), 0, None)).collect();
        assert_eq!(names.len(), pairs.len(), "{names:?}");
    }

    #[test]
    fn a_long_binding_name_is_cut_to_a_name_the_wec_can_hold() {
        let long = "p".repeat(MAX_WORK_NAME);
        // Cut right after its dot, which is dropped: `a.-` is no DNS name.
        let dotted = format!("{}.{}", "a".repeat(168), "b".repeat(60));
        for binding in [long.as_str(), dotted.as_str()] {
            let name = work_name(&of(binding, "wds1"), 12, None);
            assert!(name.len() <= MAX_WORK_NAME, "{name}");
            assert!(name.ends_with(".wds1.12"), "{name}");
            assert!(!name.contains("-.") && !name.contains(".-"), "{name}");
            assert_eq!(shard_of(&of(binding, "wds1"), &name), Some(12));
        }
        let other = format!("{long}q");
        assert_ne!(
            work_name(&of(&long, "wds1"), 0, None),
            work_name(&of(&other, "wds1"), 0, None),
            "the hash of the whole tells them apart"
        );
    }

    #[test]
    fn shards_are_read_from_both_names_and_uid_names_have_none() {
        assert_eq!(shard_of(&origin(), &work_name(&origin(), 2, None)), Some(2));
        assert_eq!(shard_of(&origin(), "nginx-wds1-3"), Some(3), "an earlier version's");
        assert_eq!(shard_of(&origin(), "nginx.wds2.3"), None, "another WDS's");
        assert_eq!(shard_of(&of("x", "a-b"), "x-a.b.0"), None);
        let by_uid = work_name(&origin(), 0, Some("0c5e3b1a-4d2f-4e6a-9b7c-123456789012"));
        assert_eq!(shard_of(&origin(), &by_uid), None);
    }

    #[test]
    fn a_shard_keeps_the_name_an_earlier_version_gave_it() {
        let existing = BTreeSet::from(["nginx-wds1-0".to_string(), "nginx.wds1.1".to_string()]);
        let name = |shard| shard_work_name(&origin(), shard, None, &existing);
        assert_eq!(
            [name(0), name(1), name(2)],
            ["nginx-wds1-0", "nginx.wds1.1", "nginx.wds1.2"]
        );
        assert_eq!(
            shard_work_name(&origin(), 0, Some("o-uid"), &existing),
            "b-uid-wds1-o-uid"
        );
    }

    #[test]
    fn wraps_with_labels_generation_and_update_strategies() {
        let deployment = Delivery::new(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "n"}}),
            "deployments",
            true,
        );
        let namespace = namespace_delivery();
        let work = wrapped(&origin(), "cluster1", "nginx.wds1.0", &[&namespace, &deployment]);
        let as_json = serde_json::to_value(&work).unwrap();
        assert_eq!(
            as_json["metadata"]["labels"],
            json!({
                "transport.kubestellar.io/originOwnerReferenceBindingKey": "nginx",
                "transport.kubestellar.io/originWdsName": "wds1",
                "transport.kubestellar.io/sharedWith": ""
            })
        );
        assert_eq!(
            as_json["metadata"]["annotations"]["transport.kubestellar.io/originOwnerReferenceBindingGeneration"],
            "7"
        );
        // What the WEC's status agent is granted to read: not the core group, which it always may.
        assert_eq!(as_json["metadata"]["annotations"][API_GROUPS_ANNOTATION], "apps");
        assert_eq!(
            as_json["spec"]["manifestConfigs"],
            json!([{
                "resourceIdentifier": {"group": "apps", "resource": "deployments", "name": "web", "namespace": "n"},
                "updateStrategy": {"type": "CreateOnly"}
            }, {
                "resourceIdentifier": {"group": "", "resource": "namespaces", "name": "*", "namespace": "*"},
                "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {"force": true}}
            }, {
                "resourceIdentifier": {"group": "apps", "resource": "deployments", "name": "*", "namespace": "*"},
                "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {"force": true}}
            }])
        );
        assert_eq!(
            as_json["spec"]["workload"]["manifests"][0]["kind"], "Namespace",
            "Binding order is kept"
        );
        assert!(as_json["spec"].get("deleteOption").is_none());
        assert_eq!(
            gloss(&work),
            [
                ("".into(), "Namespace".into(), "".into(), "n".into()),
                ("apps".into(), "Deployment".into(), "n".into(), "web".into()),
            ]
        );
    }

    /// The update strategy type of each of `work`'s options, by object name (`*`: by resource).
    fn strategies(work: &ManifestWork) -> Vec<(String, String)> {
        let options = work.spec.manifest_configs.iter();
        options
            .map(|c| {
                let r = &c.resource_identifier;
                let name = if r.name == WILDCARD {
                    format!("*{}", r.resource)
                } else {
                    r.name.clone()
                };
                (
                    name,
                    c.update_strategy.as_ref().map(|s| s.type_.clone()).unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn copies_written_in_place_stay_so_except_jobs() {
        let object = |api_version: &str, kind: &str, name: &str| json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "n"}});
        let deliveries = [
            Delivery::new(object("v1", "ConfigMap", "cm"), "configmaps", false),
            Delivery::new(object("batch/v1", "Job", "job"), "jobs", false),
            Delivery::new(object("example.com/v1", "Widget", "w"), "widgets", false),
            Delivery::new(object("v1", "Secret", "new"), "secrets", false),
        ];
        let all: Vec<&Delivery> = deliveries.iter().collect();
        // As an earlier hub wrote it: no options, so OCM's `Update` for all.
        let mut earlier = wrapped(&origin(), "c", "w", &all[..3]);
        earlier.spec.manifest_configs.clear();
        let held = |work: &ManifestWork| -> Vec<(Identity, Written)> {
            let cached = watched(work);
            assert_eq!(
                CachedWork::of(work).written,
                cached.written,
                "read alike from the watch"
            );
            let identities = cached.held.iter().map(|h| h.identity.clone());
            identities.zip(cached.written.iter().copied()).collect()
        };
        let earlier_held = held(&earlier);
        let own = earlier_held.iter().map(|(i, w)| (i, *w));
        let in_place = super::in_place(own, std::iter::empty());
        let names: Vec<&str> = in_place.iter().map(|(.., name)| name.as_str()).collect();
        assert_eq!(names, ["cm", "job", "w"]);

        let now = wrap(&origin(), "c", "w", &all, &in_place);
        let expected = [
            ("cm", "Update"),
            ("*configmaps", "ServerSideApply"),
            ("*secrets", "ServerSideApply"),
            ("*jobs", "ServerSideApply"),
        ];
        let expected: Vec<(String, String)> = expected.iter().map(|(n, s)| (n.to_string(), s.to_string())).collect();
        assert_eq!(
            strategies(&now),
            expected,
            "Jobs are applied server-side; custom resources never"
        );
        // An option the watch cannot read (no strategy, a number for a name) names nothing or
        // means OCM's default: the object reads as written in place, never dropped.
        let mut odd = serde_json::to_value(&now).unwrap();
        odd["spec"]["manifestConfigs"] = json!([{"resourceIdentifier": {"group": "", "resource": "configmaps", "name": 7}},
                                               {"resourceIdentifier": {"group": "", "resource": "configmaps", "name": "cm", "namespace": "n"}}]);
        let odd: CachedWork = serde_json::from_value(odd).unwrap();
        assert_eq!(odd.written[0], Written::InPlace);
        assert_eq!(odd.held.len(), 4);
        // Read back, the ConfigMap stays written in place.
        let now_held = held(&now);
        let again = super::in_place(now_held.iter().map(|(i, w)| (i, *w)), std::iter::empty());
        let names: Vec<&str> = again.iter().map(|(.., name)| name.as_str()).collect();
        assert_eq!(names, ["cm", "w"]);
    }

    #[test]
    fn an_option_naming_a_secret_is_not_taken_for_a_configmap_of_its_name() {
        let object = |kind: &str, name: &str| json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "n"}});
        let secret = Delivery::new(object("Secret", "o1"), "secrets", false);
        let config_map = Delivery::new(object("ConfigMap", "o1"), "configmaps", false);
        let endpoints = Delivery::new(object("Endpoints", "o1"), "endpoints", false);
        let secret_identity = identity(secret.manifest());
        let endpoints_identity = identity(endpoints.manifest());
        let in_place = BTreeSet::from([secret_identity, endpoints_identity]);
        let work = wrap(&origin(), "c", "w", &[&secret, &config_map, &endpoints], &in_place);
        let cached = watched(&work);
        let kinds: Vec<(&str, Written)> = cached
            .held
            .iter()
            .map(|h| h.identity.1.as_str())
            .zip(cached.written.iter().copied())
            .collect();
        assert_eq!(
            kinds,
            [
                ("Secret", Written::InPlace),
                ("ConfigMap", Written::ServerSide),
                ("Endpoints", Written::InPlace)
            ]
        );
    }

    #[test]
    fn a_copy_is_written_in_place_when_it_was_created_so() {
        let id = |name: &str| {
            (
                "".to_string(),
                "ConfigMap".to_string(),
                "n".to_string(),
                name.to_string(),
            )
        };
        let (a, b, c, d) = (id("a"), id("b"), id("c"), id("d"));
        use Written::*;
        // Another policy created `a` createOnly, and writes `b` in place; `c` is applied
        // server-side elsewhere, though another holds it createOnly too.
        let others = [(&a, CreateOnly), (&b, InPlace), (&c, ServerSide), (&c, CreateOnly)];
        let in_place = super::in_place(std::iter::empty(), others.into_iter());
        assert_eq!(in_place, BTreeSet::from([a.clone(), b.clone()]));
        // What this Binding already writes stays as it is, whatever others do...
        let own = [(&a, ServerSide), (&b, InPlace), (&d, ServerSide)];
        let in_place = super::in_place(own.into_iter(), others.into_iter());
        assert_eq!(in_place, BTreeSet::from([b.clone()]));
        // ...and what it held createOnly itself is written in place, unless someone applies it
        // server-side (then it was created so).
        let own = [(&a, CreateOnly), (&c, CreateOnly), (&d, CreateOnly)];
        let in_place = super::in_place(own.into_iter(), others.into_iter());
        assert_eq!(in_place, BTreeSet::from([a, b, d]));
    }

    #[test]
    fn custom_resources_keep_ocms_update() {
        let widget = Delivery::new(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "n"}}),
            "widgets",
            false,
        );
        let work = wrapped(&origin(), "c", "w", &[&widget, &namespace_delivery()]);
        let resources: Vec<&str> = work
            .spec
            .manifest_configs
            .iter()
            .map(|c| c.resource_identifier.resource.as_str())
            .collect();
        assert_eq!(resources, ["namespaces"]);
    }

    /// `deliveries` wrapped where OCM wrote nothing in place.
    fn wrapped(origin: &Origin<'_>, mailbox: &str, name: &str, deliveries: &[&Delivery]) -> ManifestWork {
        wrap(origin, mailbox, name, deliveries, &BTreeSet::new())
    }

    fn configmap(annotations: Value) -> Delivery {
        Delivery::new(
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cm1", "namespace": "n", "annotations": annotations},
                   "data": {"a": "b"}}),
            "configmaps",
            false,
        )
    }

    /// What the transport's cache keeps of `work`, read from the watch.
    fn watched(work: &ManifestWork) -> CachedWork {
        serde_json::from_value(serde_json::to_value(work).unwrap()).unwrap()
    }

    /// What the apiserver stores of a ManifestWork we wrote: embedded objects' metadata is
    /// decoded and encoded again, which drops empty maps and adds `creationTimestamp: null`.
    fn as_stored(work: &ManifestWork) -> ManifestWork {
        let mut stored = work.clone();
        for manifest in &mut stored.spec.workload.manifests {
            let metadata = Arc::make_mut(manifest)["metadata"].as_object_mut().unwrap();
            metadata.retain(|_, v| v.as_object().is_none_or(|m| !m.is_empty()));
            metadata.insert("creationTimestamp".into(), Value::Null);
        }
        stored
    }

    #[test]
    fn what_the_apiserver_stores_of_a_work_is_the_same_content() {
        // A kubectl-applied object loses its last-applied annotation, leaving `annotations: {}`.
        let desired = wrapped(&origin(), "cluster1", "nginx.wds1.0", &[&configmap(json!({}))]);
        let stored = as_stored(&desired);
        assert_ne!(stored.spec, desired.spec, "the apiserver changed it");
        assert!(same_content(&watched(&stored), &desired));
    }

    /// The last good content of an object in error is read back from its ManifestWork: wrapped
    /// again, it is the same content, so nothing is written for it.
    #[test]
    fn a_work_read_back_delivers_what_was_written() {
        let written = [configmap(json!({"a": "1"})), namespace_delivery()];
        let desired = wrapped(&origin(), "c", "w", &written.iter().collect::<Vec<_>>());
        let read: Vec<Delivery> = delivered(&as_stored(&desired))
            .iter()
            .zip(&written)
            .map(|(manifest, d)| Delivery::new((**manifest).clone(), d.resource.clone(), d.create_only))
            .collect();
        assert_eq!(read, written);
        let again = wrapped(&origin(), "c", "w", &read.iter().collect::<Vec<_>>());
        assert!(same_content(&watched(&desired), &again));
    }

    #[test]
    fn a_cached_work_still_says_what_it_holds_and_what_was_delivered() {
        let traced = json!({WDS_GENERATION_ANNOTATION: "3", "tracing.k8s.io/traceparent": "00-a-b-01", "team": "x"});
        let namespace = namespace_delivery();
        let desired = wrapped(&origin(), "cluster1", "w", &[&namespace, &configmap(traced)]);
        let cached = watched(&as_stored(&desired));
        assert!(same_content(&cached, &desired));
        let held: Vec<Identity> = cached.held.iter().map(|h| h.identity.clone()).collect();
        assert_eq!(held, gloss(&desired));
        let desired_held: Vec<Held> = desired.spec.workload.manifests.iter().map(|m| Held::of(m)).collect();
        let delivered = |held: Vec<&Held>| super::super::trace::delivered(held.into_iter());
        let desired_delivered = delivered(desired_held.iter().collect());
        assert_eq!(delivered(cached.held.iter().map(|h| &**h).collect()), desired_delivered);
        assert_eq!(desired_delivered.len(), 1, "the Namespace carries no generation");
        // A changed manifest is still new content to the cached work.
        let changed = wrapped(
            &origin(),
            "cluster1",
            "w",
            &[&namespace, &configmap(json!({"team": "y"}))],
        );
        assert!(!same_content(&cached, &changed));
    }

    #[test]
    fn a_changed_manifest_or_config_is_new_content() {
        let desired = wrapped(&origin(), "cluster1", "w", &[&configmap(json!({"a": "1"}))]);
        let other = wrapped(&origin(), "cluster1", "w", &[&configmap(json!({"a": "2"}))]);
        assert!(!same_content(&watched(&as_stored(&other)), &desired));
        let mut create_only = configmap(json!({"a": "1"}));
        create_only.create_only = true;
        let other = wrapped(&origin(), "cluster1", "w", &[&create_only]);
        assert!(!same_content(&watched(&as_stored(&other)), &desired));
    }

    #[test]
    fn traces_and_binding_generations_alone_are_no_new_content() {
        let desired = wrapped(
            &origin(),
            "c",
            "w",
            &[&configmap(json!({"tracing.k8s.io/traceparent": "00-a-b-01"}))],
        );
        let later = Origin {
            binding_generation: 8,
            ..origin()
        };
        let existing = wrapped(
            &later,
            "c",
            "w",
            &[&configmap(json!({"tracing.k8s.io/traceparent": "00-c-d-01"}))],
        );
        assert!(same_content(&watched(&existing), &desired));
    }

    #[test]
    fn works_written_by_others_or_changed_by_others_are_rewritten() {
        let desired = wrapped(&origin(), "c", "w", &[&configmap(json!({})), &namespace_delivery()]);
        let mut without_digest = desired.clone();
        without_digest.metadata.annotations = None;
        assert!(!same_content(&watched(&without_digest), &desired));
        let mut without_groups = desired.clone();
        without_groups
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(API_GROUPS_ANNOTATION);
        assert!(
            !same_content(&watched(&without_groups), &desired),
            "written before the groups were"
        );
        let mut emptied = desired.clone();
        emptied.spec.workload.manifests.pop();
        assert!(
            !same_content(&watched(&emptied), &desired),
            "an object taken out by someone else"
        );
        let mut relabelled = desired.clone();
        relabelled.metadata.labels.as_mut().unwrap().remove(ORIGIN_WDS_LABEL);
        assert!(!same_content(&watched(&relabelled), &desired));
        let mut labelled = desired.clone();
        labelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("theirs".into(), "x".into());
        assert!(same_content(&watched(&labelled), &desired), "others' labels are theirs");
    }

    #[test]
    fn the_digest_does_not_depend_on_key_order() {
        let a: Value =
            serde_json::from_str(r#"{"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x"}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"apiVersion": "v1", "metadata": {"name": "x"}, "kind": "ConfigMap"}"#).unwrap();
        let labels = origin_labels(&origin());
        let (a, b) = (
            Delivery::new(a, "configmaps", false),
            Delivery::new(b, "configmaps", false),
        );
        assert_eq!(
            content_digest(&labels, &[&a.digest_text], &[]),
            content_digest(&labels, &[&b.digest_text], &[])
        );
    }

    /// The digest as it was first written, serialised whole: ManifestWorks written then must keep
    /// their digest, or an upgrade would rewrite every one of them.
    #[test]
    fn the_digest_is_the_one_existing_works_carry() {
        let mut create_only = configmap(json!({"tracing.k8s.io/traceparent": "00-a-b-01", "x": "y"}));
        create_only.create_only = true;
        let deliveries = [&create_only, &namespace_delivery()];
        let work = wrapped(&origin(), "c", "w", &deliveries);
        let stripped: Vec<Value> = deliveries
            .iter()
            .map(|d| without_trace_annotations(&d.manifest))
            .collect();
        let whole = json!({"labels": origin_labels(&origin()), "manifests": stripped,
                           "manifestConfigs": work.spec.manifest_configs});
        let digest = ring::digest::digest(&ring::digest::SHA256, whole.to_string().as_bytes());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert!(!work.spec.manifest_configs.is_empty());
        assert_eq!(work.metadata.annotations.unwrap()[CONTENT_DIGEST_ANNOTATION], hex);
    }

    #[test]
    fn a_work_keeping_objects_says_what_wrapping_them_there_says() {
        let mut moving = configmap(json!({"x": "y"}));
        moving.create_only = true;
        let staying = namespace_delivery();
        let other = Delivery::new(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n"}}),
            "deployments",
            false,
        );
        let sources = [
            &wrapped(&origin(), "c", "w-1", &[&moving]),
            &wrapped(&origin(), "c", "w-2", &[&other, &moving]),
        ];
        let objects = BTreeSet::from([identity(&moving.manifest), identity(&other.manifest)]);
        let kept = keeping(&wrapped(&origin(), "c", "w-0", &[&staying]), &sources, &objects);
        let wrapped = wrapped(&origin(), "c", "w-0", &[&staying, &moving, &other]);
        assert!(same_content(&watched(&kept), &wrapped));
        assert_eq!(kept.spec.manifest_configs, wrapped.spec.manifest_configs);
        assert_eq!(kept.metadata.annotations, wrapped.metadata.annotations);
        // Kept once, however often it is asked.
        assert!(same_content(&watched(&keeping(&kept, &sources, &objects)), &wrapped));
    }

    fn namespace_delivery() -> Delivery {
        Delivery::new(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}),
            "namespaces",
            false,
        )
    }

    #[test]
    fn deeply_nested_objects_are_refused() {
        assert_eq!(nesting_depth(&json!("leaf")), 0);
        assert_eq!(nesting_depth(&json!({})), 1);
        assert_eq!(nesting_depth(&json!({"a": [1, {"b": 2}]})), 3);
        let nested = |levels: usize| (0..levels).fold(json!("leaf"), |inner, _| json!({"a": inner}));
        assert_eq!(too_deep("Widget.example.com(ns/w)", &nested(MAX_DELIVERED_DEPTH)), None);
        let error = too_deep("Widget.example.com(ns/w)", &nested(MAX_DELIVERED_DEPTH + 1)).unwrap();
        assert!(
            error.starts_with("Widget.example.com(ns/w): nested 121 levels deep"),
            "{error}"
        );
    }
}
