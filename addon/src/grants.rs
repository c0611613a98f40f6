//! What KubeStellar delivers to each WEC, from the ManifestWorks in its mailbox that carry a
//! KubeStellar label (the ones the agent reports on): which API groups its agent may read (our
//! transport's API groups annotation) and how many objects there are, for which its agent keeps
//! WorkStatuses (the object count annotation). On a ManifestWork without them (written by
//! upstream's transport, or by hand as ocm-status-addon's tests do) both are read from its
//! manifests, once per generation. Only the ManifestWorks' metadata is watched.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use ks_shared::names::{API_GROUPS_ANNOTATION, OBJECT_COUNT_ANNOTATION, is_kubestellar_label};
use ks_shared::ocm::{ManifestWork, manifest_group};
use ks_shared::runtime::watch_health::{self, WatchRole};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

/// The delivered API groups and object counts per mailbox, kept from a metadata watch of the
/// ManifestWorks.
#[derive(Clone)]
pub struct Grants {
    works: Store<PartialObjectMeta<ManifestWork>>,
    /// What was read of the ManifestWorks without the annotations, by (namespace, name), with the
    /// generation they were read at.
    read: Arc<Mutex<Read>>,
    /// Whether the ManifestWorks have been listed once.
    listed: Arc<AtomicBool>,
}

/// What was read of ManifestWorks: by (namespace, name), with the generation read.
type Read = BTreeMap<(String, String), (i64, Delivered)>;

/// What one ManifestWork, or all of a mailbox's, deliver.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Delivered {
    /// API groups (never the core group).
    pub groups: BTreeSet<String>,
    /// Objects.
    pub objects: usize,
}

impl Grants {
    /// Starts watching until `shutdown`; sends on `changed` the mailbox whose groups, or whose
    /// object count as `step` rounds it, changed, or `None` when a (re-)list changed some (after
    /// the first complete list, every mailbox counts as changed).
    pub fn start(
        client: Client,
        changed: UnboundedSender<Option<String>>,
        step: fn(usize) -> u64,
        shutdown: CancellationToken,
    ) -> Grants {
        // Metadata-only requests: the manifests are not read (but see `read_unannotated`). Of
        // every ManifestWork: no label selector says "any KubeStellar label".
        let api: Api<PartialObjectMeta<ManifestWork>> = Api::all(client.clone());
        let (works, writer) = reflector::store();
        let watched = watcher(api, watcher::Config::default()).backoff(ks_shared::runtime::WatchBackoff::default());
        let events = watch_health::observe("ManifestWork", WatchRole::Essential, watched)
            .modify(keep_what_grants)
            .reflect(writer);
        let grants = Grants {
            works,
            read: Arc::default(),
            listed: Arc::default(),
        };
        let store = grants.clone();
        tokio::spawn(async move {
            let mut known: BTreeMap<String, (BTreeSet<String>, u64)> = BTreeMap::new();
            let events = events.take_until(shutdown.cancelled_owned());
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                let namespace = match event {
                    Ok(watcher::Event::Apply(work) | watcher::Event::Delete(work)) => work.namespace(),
                    Ok(watcher::Event::InitDone) => None,
                    Ok(_) => continue,
                    Err(err) => {
                        tracing::warn!(error = %err, "watching ManifestWorks failed; retrying");
                        continue;
                    }
                };
                store.read_unannotated(&client, namespace.as_deref()).await;
                if namespace.is_none() {
                    store.listed.store(true, Ordering::Release);
                }
                let mailboxes = match &namespace {
                    Some(namespace) => vec![namespace.clone()],
                    // A (re-)list: any mailbox may have changed unseen.
                    None => store.mailboxes(),
                };
                let mut any = false;
                for mailbox in mailboxes {
                    let Delivered { groups, objects } = store.delivered(&mailbox);
                    let now = (groups, step(objects));
                    if known.get(&mailbox) != Some(&now) {
                        known.insert(mailbox, now);
                        any = true;
                    }
                }
                if any && changed.send(namespace).is_err() {
                    break;
                }
            }
        });
        grants
    }

    /// Whether the ManifestWorks have been listed once (and their groups read): before, what
    /// the groups are is not known.
    pub fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// What is delivered to `mailbox`.
    pub fn delivered(&self, mailbox: &str) -> Delivered {
        let read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        let mut delivered = Delivered::default();
        let works = self.works.state();
        for work in works
            .iter()
            .filter(|w| w.namespace().as_deref() == Some(mailbox) && is_kubestellar(w))
        {
            let one = annotated(work).or_else(|| {
                let (_, read) = read.get(&(mailbox.to_string(), work.name_any()))?;
                Some(read.clone())
            });
            let Delivered { groups, objects } = one.unwrap_or_default();
            delivered.groups.extend(groups);
            delivered.objects += objects;
        }
        delivered
    }

    /// Reads the groups of the ManifestWorks in `namespace` (all when `None`) that lack the
    /// annotation and were not read at their generation; forgets those gone.
    async fn read_unannotated(&self, client: &Client, namespace: Option<&str>) {
        let works = self.works.state();
        let unread: Vec<(String, String, i64)> = {
            let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
            read.retain(|(ns, name), _| {
                works
                    .iter()
                    .any(|w| w.namespace().as_ref() == Some(ns) && w.name_any() == *name)
            });
            works
                .iter()
                .filter(|w| namespace.is_none() || w.namespace().as_deref() == namespace)
                .filter(|w| is_kubestellar(w) && annotated(w).is_none())
                .map(|w| {
                    (
                        w.namespace().unwrap_or_default(),
                        w.name_any(),
                        w.metadata.generation.unwrap_or_default(),
                    )
                })
                .filter(|(ns, name, generation)| {
                    read.get(&(ns.clone(), name.clone())).map(|(g, _)| g) != Some(generation)
                })
                .collect()
        };
        for (ns, name, generation) in unread {
            match Api::<ManifestWork>::namespaced(client.clone(), &ns)
                .get_opt(&name)
                .await
            {
                Ok(Some(work)) => {
                    let manifests = &work.spec.workload.manifests;
                    let groups = manifests
                        .iter()
                        .map(|m| manifest_group(m))
                        .filter(|g| is_group_name(g))
                        .map(str::to_string)
                        .collect();
                    let objects = manifests.len();
                    let read = (generation, Delivered { groups, objects });
                    self.read
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert((ns, name), read);
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(namespace = %ns, name = %name, error = %err, "reading what a ManifestWork delivers failed")
                }
            }
        }
    }

    fn mailboxes(&self) -> Vec<String> {
        let all: BTreeSet<String> = self.works.state().iter().filter_map(|w| w.namespace()).collect();
        all.into_iter().collect()
    }
}

/// Whether a ManifestWork is KubeStellar's: one the agent reports on, whose objects it reads.
fn is_kubestellar(work: &PartialObjectMeta<ManifestWork>) -> bool {
    work.labels().keys().any(|k| is_kubestellar_label(k))
}

/// What a ManifestWork's annotations say it delivers: both are needed, or its manifests are read.
/// A count that does not parse is no count (its manifests are read), never zero, which would
/// shrink the WEC's quota below what is delivered.
fn annotated(work: &PartialObjectMeta<ManifestWork>) -> Option<Delivered> {
    let annotations = work.annotations();
    let groups = groups_of(Some(annotations.get(API_GROUPS_ANNOTATION)?));
    let objects = annotations.get(OBJECT_COUNT_ANNOTATION)?.parse().ok()?;
    Some(Delivered { groups, objects })
}

/// Keeps of a ManifestWork's metadata what the grants read: identity, generation, KubeStellar
/// labels and the API groups and object count annotations (most ManifestWorks on an ITS are not
/// KubeStellar's).
fn keep_what_grants(work: &mut PartialObjectMeta<ManifestWork>) {
    let meta = &mut work.metadata;
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.finalizers = None;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|k, _| is_kubestellar_label(k));
    }
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k == API_GROUPS_ANNOTATION || k == OBJECT_COUNT_ANNOTATION);
    }
}

/// The API groups an annotation value lists. Anything that is not an API group name (a DNS
/// subdomain) is dropped: a `*` would grant every group, Secrets included.
pub fn groups_of(annotation: Option<&str>) -> BTreeSet<String> {
    annotation
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|g| is_group_name(g))
        .map(str::to_string)
        .collect()
}

/// Whether `group` is an API group name (a DNS subdomain; not the core group's `""`).
fn is_group_name(group: &str) -> bool {
    !group.is_empty()
        && group.len() <= 253
        && group.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ks_shared::names::{OCM_ADDON_NAME_LABEL, ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL};
    use kube::api::ObjectMeta;
    use kube::core::PartialObjectMetaExt;

    use super::*;

    fn work(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> PartialObjectMeta<ManifestWork> {
        let map = |pairs: &[(&str, &str)]| Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        ObjectMeta {
            name: Some("w".into()),
            namespace: Some("cluster1".into()),
            labels: map(labels),
            annotations: map(annotations),
            ..Default::default()
        }
        .into_response_partial()
    }

    #[test]
    fn every_kubestellar_label_makes_a_manifest_work_kubestellars() {
        // As our transport and upstream's write them, and as ocm-status-addon's e2e test does.
        assert!(is_kubestellar(&work(
            &[(ORIGIN_WDS_LABEL, "wds1"), (ORIGIN_BINDING_LABEL, "b")],
            &[]
        )));
        assert!(is_kubestellar(&work(&[(ORIGIN_BINDING_LABEL, "b")], &[])));
        assert!(is_kubestellar(&work(
            &[("managed-by.kubestellar.io/something", "true")],
            &[]
        )));
        // The add-on's own, and anyone else's.
        assert!(!is_kubestellar(&work(&[(OCM_ADDON_NAME_LABEL, "addon-status")], &[])));
        assert!(!is_kubestellar(&work(&[], &[])));
    }

    #[test]
    fn the_cache_keeps_kubestellar_labels_and_the_api_groups_and_object_count_annotations() {
        let mut kept = work(
            &[("managed-by.kubestellar.io/something", "true"), ("app", "web")],
            &[
                (API_GROUPS_ANNOTATION, "example.io"),
                (OBJECT_COUNT_ANNOTATION, "3"),
                ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
            ],
        );
        kept.metadata.generation = Some(3);
        keep_what_grants(&mut kept);
        assert_eq!(
            kept.metadata.labels,
            Some(BTreeMap::from([(
                "managed-by.kubestellar.io/something".to_string(),
                "true".to_string()
            )]))
        );
        assert_eq!(
            kept.metadata.annotations,
            Some(BTreeMap::from([
                (API_GROUPS_ANNOTATION.to_string(), "example.io".to_string()),
                (OBJECT_COUNT_ANNOTATION.to_string(), "3".to_string())
            ]))
        );
        assert_eq!((kept.metadata.generation, kept.name_any()), (Some(3), "w".to_string()));
        assert!(is_kubestellar(&kept));
        let delivered = Delivered {
            groups: BTreeSet::from(["example.io".to_string()]),
            objects: 3,
        };
        assert_eq!(annotated(&kept), Some(delivered));
    }

    #[test]
    fn a_manifest_work_without_both_annotations_or_with_a_bad_count_is_read() {
        let only_groups = work(&[], &[(API_GROUPS_ANNOTATION, "example.io")]);
        let bad_count = work(&[], &[(API_GROUPS_ANNOTATION, ""), (OBJECT_COUNT_ANNOTATION, "-1")]);
        assert_eq!((annotated(&only_groups), annotated(&bad_count)), (None, None));
    }

    #[test]
    fn only_group_names_are_granted() {
        assert_eq!(
            groups_of(Some("apps,example.com, batch")),
            BTreeSet::from(["apps".into(), "batch".into(), "example.com".into()])
        );
        assert!(groups_of(None).is_empty());
        assert!(groups_of(Some("")).is_empty());
        for hostile in ["*", "apps/*", "Apps", "-a.b", "a..b", "a b", "*.example.com"] {
            assert!(groups_of(Some(hostile)).is_empty(), "{hostile}");
        }
    }
}
