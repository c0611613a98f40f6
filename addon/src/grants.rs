//! Which API groups each WEC's agent may read: those of the objects KubeStellar delivers there,
//! from the transport's API groups annotation on the ManifestWorks in the WEC's mailbox. Only
//! the ManifestWorks' metadata is watched; a ManifestWork without the annotation (written by
//! upstream's transport) is read once per generation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use ks_shared::names::{API_GROUPS_ANNOTATION, ORIGIN_WDS_LABEL};
use ks_shared::ocm::{ManifestWork, manifest_group};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

/// The delivered API groups per mailbox, kept from a metadata watch of KubeStellar's
/// ManifestWorks.
#[derive(Clone)]
pub struct Grants {
    works: Store<PartialObjectMeta<ManifestWork>>,
    /// The groups of ManifestWorks without the annotation, by (namespace, name), with the
    /// generation they were read at.
    read: Arc<Mutex<Read>>,
    /// Whether the ManifestWorks have been listed once.
    listed: Arc<AtomicBool>,
}

/// Groups read from ManifestWorks: by (namespace, name), with the generation read.
type Read = BTreeMap<(String, String), (i64, BTreeSet<String>)>;

impl Grants {
    /// Starts watching until `shutdown`; sends on `changed` the mailbox whose groups changed, or
    /// `None` when a (re-)list changed some (after the first complete list, every mailbox counts
    /// as changed).
    pub fn start(client: Client, changed: UnboundedSender<Option<String>>, shutdown: CancellationToken) -> Grants {
        // Metadata-only requests: the manifests are not read (but see `read_unannotated`).
        let api: Api<PartialObjectMeta<ManifestWork>> = Api::all(client.clone());
        let kubestellar = watcher::Config::default().labels(ORIGIN_WDS_LABEL);
        let (works, writer) = reflector::store();
        let events = watcher(api, kubestellar).default_backoff().reflect(writer);
        let grants = Grants {
            works,
            read: Arc::default(),
            listed: Arc::default(),
        };
        let store = grants.clone();
        tokio::spawn(async move {
            let mut known: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
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
                    let groups = store.groups(&mailbox);
                    if known.get(&mailbox) != Some(&groups) {
                        known.insert(mailbox, groups);
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

    /// The API groups delivered to `mailbox` (never the core group).
    pub fn groups(&self, mailbox: &str) -> BTreeSet<String> {
        let read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        self.works
            .state()
            .iter()
            .filter(|w| w.namespace().as_deref() == Some(mailbox))
            .flat_map(|w| match w.annotations().get(API_GROUPS_ANNOTATION) {
                Some(annotation) => groups_of(Some(annotation)),
                None => read
                    .get(&(mailbox.to_string(), w.name_any()))
                    .map(|(_, groups)| groups.clone())
                    .unwrap_or_default(),
            })
            .collect()
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
                .filter(|w| !w.annotations().contains_key(API_GROUPS_ANNOTATION))
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
                    let groups = work
                        .spec
                        .workload
                        .manifests
                        .iter()
                        .map(|m| manifest_group(m))
                        .filter(|g| is_group_name(g))
                        .map(str::to_string)
                        .collect();
                    let read = (generation, groups);
                    self.read
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert((ns, name), read);
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(namespace = %ns, name = %name, error = %err, "reading a ManifestWork's API groups failed")
                }
            }
        }
    }

    fn mailboxes(&self) -> Vec<String> {
        let all: BTreeSet<String> = self.works.state().iter().filter_map(|w| w.namespace()).collect();
        all.into_iter().collect()
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
    use super::*;

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
