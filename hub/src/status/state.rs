//! What the status controller knows between events: which Bindings list which workload objects
//! (with what modulation, for which WECs), which WorkStatuses and CombinedStatuses are about which
//! object, and the evaluation errors of each StatusCollector. Pure bookkeeping: callers feed
//! changes in and learn which objects, Bindings and collectors to look at again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError, RwLock};

use itertools::{EitherOrBoth, Itertools};
use ks_shared::api::{Binding, BindingPolicy, Destination, DownsyncModulation};
use kube::{Resource, ResourceExt};

pub use ks_shared::workload::WorkloadRef;

/// One object as a Binding lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub resource_version: String,
    pub modulation: DownsyncModulation,
}

/// What the status controller needs from a Binding.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BindingView {
    /// The BindingPolicy's UID, from the Binding's controller reference (CombinedStatus names
    /// carry it); `None` for a Binding without one.
    pub policy_uid: Option<String>,
    pub destinations: Vec<Destination>,
    pub entries: BTreeMap<WorkloadRef, Entry>,
}

impl BindingView {
    pub fn of(binding: &Binding) -> BindingView {
        let policy_uid = binding
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == BindingPolicy::kind(&()))
            .map(|o| o.uid.clone());
        let workload = &binding.spec.workload;
        let cluster_scoped = workload.cluster_scope.iter().map(|c| {
            let o = &c.object;
            (
                WorkloadRef::new(&o.group, &o.resource, "", &o.name),
                &o.resource_version,
                &c.modulation,
            )
        });
        let namespaced = workload.namespace_scope.iter().map(|n| {
            let o = &n.object;
            let key = WorkloadRef::new(&o.group, &o.resource, &o.namespace, &o.name);
            (key, &o.resource_version, &n.modulation)
        });
        let entries = cluster_scoped
            .chain(namespaced)
            .map(|(key, resource_version, modulation)| {
                let entry = Entry {
                    resource_version: resource_version.clone(),
                    modulation: modulation.clone(),
                };
                (key, entry)
            })
            .collect();
        BindingView {
            policy_uid,
            destinations: binding.spec.destinations.clone(),
            entries,
        }
    }

    /// The StatusCollector names its entries use.
    pub fn collectors(&self) -> BTreeSet<&str> {
        self.entries
            .values()
            .flat_map(|e| e.modulation.status_collectors.iter().map(String::as_str))
            .collect()
    }
}

#[cfg(test)]
impl BindingView {
    /// A view of a policy's Binding sending `entries` to `wecs`.
    pub fn sending(wecs: &[&str], entries: BTreeMap<WorkloadRef, Entry>) -> BindingView {
        let destinations = wecs.iter().map(|w| Destination {
            cluster_id: w.to_string(),
        });
        BindingView {
            policy_uid: Some("bp-uid".into()),
            destinations: destinations.collect(),
            entries,
        }
    }
}

/// The WECs each object is sent to, kept from [`Bindings`] by the controller and read by the
/// WorkStatus cache as reports come: only a report from a WEC its object is sent to is kept
/// whole. Clones share it.
#[derive(Clone, Debug, Default)]
pub struct Delivered(Arc<RwLock<BTreeMap<WorkloadRef, BTreeSet<String>>>>);

impl Delivered {
    /// Whether the object is sent to the WEC whose mailbox is `mailbox`.
    pub fn to(&self, mailbox: &str, key: &WorkloadRef) -> bool {
        let wecs = self.0.read().unwrap_or_else(PoisonError::into_inner);
        wecs.get(key).is_some_and(|w| w.contains(mailbox))
    }

    /// Takes from `bindings` where the objects `keys` are sent now.
    pub fn update<'k>(&self, bindings: &Bindings, keys: impl IntoIterator<Item = &'k WorkloadRef>) {
        let mut wecs = self.0.write().unwrap_or_else(PoisonError::into_inner);
        for key in keys {
            let now = bindings.wecs_of(key);
            if now.is_empty() {
                wecs.remove(key);
            } else {
                wecs.insert(key.clone(), now);
            }
        }
    }
}

/// Every Binding's view, and which Bindings list each object.
#[derive(Default)]
pub struct Bindings {
    views: BTreeMap<String, BindingView>,
    by_object: BTreeMap<WorkloadRef, BTreeSet<String>>,
}

impl Bindings {
    /// Records a Binding's current view (`None`: gone) and returns the objects whose outcome may
    /// have changed: all of them when the WECs or the policy changed, else those added, removed
    /// or listed differently (a new resourceVersion means the object changed). The two views are
    /// walked side by side and only what joined or left is indexed again: a Binding of thousands
    /// is written again and again while it grows.
    pub fn set(&mut self, name: &str, view: Option<BindingView>) -> BTreeSet<WorkloadRef> {
        let old = match view {
            Some(view) => self.views.insert(name.to_string(), view),
            None => self.views.remove(name),
        }
        .unwrap_or_default();
        let empty = BindingView::default();
        let new = self.views.get(name).unwrap_or(&empty);
        let everything = old.destinations != new.destinations || old.policy_uid != new.policy_uid;
        let mut changed = BTreeSet::new();
        for entry in old
            .entries
            .iter()
            .merge_join_by(&new.entries, |(a, _), (b, _)| a.cmp(b))
        {
            match entry {
                EitherOrBoth::Left((key, _)) => {
                    if let Some(names) = self.by_object.get_mut(key) {
                        names.remove(name);
                        if names.is_empty() {
                            self.by_object.remove(key);
                        }
                    }
                    changed.insert(key.clone());
                }
                EitherOrBoth::Right((key, _)) => {
                    self.by_object.entry(key.clone()).or_default().insert(name.to_string());
                    changed.insert(key.clone());
                }
                EitherOrBoth::Both((key, was), (_, is)) => {
                    if everything || was != is {
                        changed.insert(key.clone());
                    }
                }
            }
        }
        changed
    }

    pub fn get(&self, name: &str) -> Option<&BindingView> {
        self.views.get(name)
    }

    pub fn names(&self) -> Vec<String> {
        self.views.keys().cloned().collect()
    }

    /// The WECs some Binding sends the object to.
    pub fn wecs_of(&self, key: &WorkloadRef) -> BTreeSet<String> {
        let names = self.by_object.get(key).into_iter().flatten();
        let views = names.filter_map(|name| self.views.get(name));
        views
            .flat_map(|view| view.destinations.iter().map(|d| d.cluster_id.clone()))
            .collect()
    }

    /// The Bindings listing the object, each with its entry for it.
    pub fn selecting(&self, key: &WorkloadRef) -> Vec<(&str, &BindingView, &Entry)> {
        self.by_object
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|name| {
                let view = self.views.get(name)?;
                Some((name.as_str(), view, view.entries.get(key)?))
            })
            .collect()
    }

    /// The Bindings using a StatusCollector, and the objects they apply it to.
    pub fn using_collector(&self, collector: &str) -> (BTreeSet<String>, BTreeSet<WorkloadRef>) {
        let mut bindings = BTreeSet::new();
        let mut objects = BTreeSet::new();
        for (name, view) in &self.views {
            for (key, entry) in &view.entries {
                if entry.modulation.status_collectors.iter().any(|c| c == collector) {
                    bindings.insert(name.clone());
                    objects.insert(key.clone());
                }
            }
        }
        (bindings, objects)
    }
}

/// A namespaced object of a cache, by namespace and name.
pub type CachedName = (String, String);

/// What the objects of a cache are about: WorkStatuses by the workload object they report on,
/// CombinedStatuses by the UID of the object they summarise. A subject's cached objects are
/// few (one per WEC), so a sorted list: a B-tree set took a node of 11 names for each.
pub struct Index<About> {
    about: BTreeMap<CachedName, About>,
    by_subject: BTreeMap<About, Vec<CachedName>>,
}

impl<About> Default for Index<About> {
    fn default() -> Self {
        Index {
            about: BTreeMap::new(),
            by_subject: BTreeMap::new(),
        }
    }
}

impl<About: Ord + Clone> Index<About> {
    /// Records what a cached object is about (`None`: it is gone, or about nothing we know)
    /// and returns the subjects whose set of cached objects changed.
    pub fn set(&mut self, cached: CachedName, subject: Option<About>) -> Vec<About> {
        let old = self.about.remove(&cached);
        if let Some(old) = &old
            && let Some(names) = self.by_subject.get_mut(old)
        {
            names.retain(|name| *name != cached);
            if names.is_empty() {
                self.by_subject.remove(old);
            }
        }
        if let Some(subject) = &subject {
            let names = self.by_subject.entry(subject.clone()).or_default();
            if let Err(at) = names.binary_search(&cached) {
                names.insert(at, cached.clone());
            }
            self.about.insert(cached, subject.clone());
        }
        match (old, subject) {
            (Some(old), Some(new)) if old == new => Vec::new(),
            (old, new) => old.into_iter().chain(new).collect(),
        }
    }

    /// Replaces everything, after a re-list; returns the subjects whose set changed.
    pub fn replace(&mut self, entries: impl IntoIterator<Item = (CachedName, About)>) -> BTreeSet<About> {
        let before = std::mem::take(&mut self.by_subject);
        self.about.clear();
        for (cached, subject) in entries {
            self.set(cached, Some(subject));
        }
        let subjects: BTreeSet<&About> = before.keys().chain(self.by_subject.keys()).collect();
        subjects
            .into_iter()
            .filter(|subject| before.get(*subject) != self.by_subject.get(*subject))
            .cloned()
            .collect()
    }

    /// The cached objects about a subject.
    pub fn of<Subject: Ord + ?Sized>(&self, subject: &Subject) -> impl Iterator<Item = &CachedName>
    where
        About: std::borrow::Borrow<Subject>,
    {
        self.by_subject.get(subject).into_iter().flatten()
    }
}

/// Most evaluation errors listed in a StatusCollector's status; the rest are counted.
const MAX_ERROR_LINES: usize = 20;

/// A (Binding, StatusCollector) pair.
pub type BindingCollector = (String, String);

/// The evaluation errors of each StatusCollector, by the (object, Binding) pair they came from.
#[derive(Default)]
pub struct EvaluationErrors {
    by_collector: BTreeMap<String, BTreeMap<(WorkloadRef, String), Vec<String>>>,
}

impl EvaluationErrors {
    /// Sets the errors that evaluating collectors for one object found, per (Binding, collector)
    /// pair (pairs without errors may be left out); returns the collectors whose errors changed.
    pub fn set(&mut self, key: &WorkloadRef, found: BTreeMap<BindingCollector, Vec<String>>) -> BTreeSet<String> {
        let mut changed = BTreeSet::new();
        for (collector, errors) in &mut self.by_collector {
            let before = errors.len();
            errors.retain(|(object, binding), lines| {
                object != key || found.get(&(binding.clone(), collector.clone())) == Some(lines)
            });
            if errors.len() != before {
                changed.insert(collector.clone());
            }
        }
        for ((binding, collector), lines) in found.into_iter().filter(|(_, lines)| !lines.is_empty()) {
            let errors = self.by_collector.entry(collector.clone()).or_default();
            let slot = (key.clone(), binding);
            if errors.get(&slot) != Some(&lines) {
                errors.insert(slot, lines);
                changed.insert(collector);
            }
        }
        self.by_collector.retain(|_, errors| !errors.is_empty());
        changed
    }

    /// A collector's evaluation errors for its status: the first lines, then how many more.
    pub fn lines(&self, collector: &str) -> Vec<String> {
        let all: Vec<&String> = self
            .by_collector
            .get(collector)
            .into_iter()
            .flat_map(|errors| errors.values().flatten())
            .collect();
        let mut lines: Vec<String> = all.iter().take(MAX_ERROR_LINES).map(|l| l.to_string()).collect();
        if all.len() > MAX_ERROR_LINES {
            lines.push(format!("and {} more evaluation errors", all.len() - MAX_ERROR_LINES));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use ks_shared::api::{
        BindingSpec, DownsyncObjectClauses, NamespaceScopeDownsyncClause, NamespaceScopeDownsyncObject,
    };

    use super::*;

    fn key(name: &str) -> WorkloadRef {
        WorkloadRef::new("apps", "deployments", "ns", name)
    }

    fn view(wecs: &[&str], objects: &[(&str, &str)]) -> BindingView {
        let entries = objects
            .iter()
            .map(|(name, rv)| {
                let entry = Entry {
                    resource_version: rv.to_string(),
                    modulation: DownsyncModulation::default(),
                };
                (key(name), entry)
            })
            .collect();
        BindingView::sending(wecs, entries)
    }

    fn keys(names: &[&str]) -> BTreeSet<WorkloadRef> {
        names.iter().map(|n| key(n)).collect()
    }

    #[test]
    fn an_object_is_delivered_to_the_wecs_of_the_bindings_sending_it() {
        let mut bindings = Bindings::default();
        let delivered = Delivered::default();
        let mut change = |name: &str, view: Option<BindingView>| {
            let changed = bindings.set(name, view);
            delivered.update(&bindings, &changed);
        };
        change("one", Some(view(&["c1"], &[("a", "1")])));
        change("two", Some(view(&["c2"], &[("a", "1"), ("b", "1")])));
        let sent = |wec: &str, name: &str| delivered.to(wec, &key(name));
        let now = [sent("c1", "a"), sent("c2", "a"), sent("c1", "b"), sent("c2", "b")];
        assert_eq!(now, [true, true, false, true]);
        // A Binding's WECs changing moves all its objects; one going takes its objects away.
        change("two", Some(view(&["c3"], &[("a", "1"), ("b", "1")])));
        assert_eq!([sent("c2", "b"), sent("c3", "b"), sent("c1", "a")], [false, true, true]);
        change("one", None);
        assert_eq!([sent("c1", "a"), sent("c3", "a")], [false, true]);
        change("two", None);
        assert!(!sent("c3", "a") && !sent("c3", "b"));
    }

    #[test]
    fn binding_changes_name_only_the_objects_affected() {
        let mut bindings = Bindings::default();
        assert_eq!(
            bindings.set("b", Some(view(&["c1"], &[("a", "1"), ("b", "1")]))),
            keys(&["a", "b"])
        );
        assert_eq!(
            bindings.set("b", Some(view(&["c1"], &[("a", "1"), ("b", "1")]))),
            keys(&[])
        );
        assert_eq!(
            bindings.set("b", Some(view(&["c1"], &[("a", "2"), ("c", "1")]))),
            keys(&["a", "b", "c"])
        );
        assert_eq!(
            bindings.set("b", Some(view(&["c2"], &[("a", "2"), ("c", "1")]))),
            keys(&["a", "c"])
        );
        assert_eq!(bindings.selecting(&key("a")).len(), 1);
        assert!(bindings.selecting(&key("b")).is_empty());
        assert_eq!(bindings.set("b", None), keys(&["a", "c"]));
        assert!(bindings.selecting(&key("a")).is_empty());
    }

    proptest::proptest! {
        /// Whatever the order of Bindings' views, the index of which Bindings list an object is
        /// the one read from the views themselves.
        #[test]
        fn the_index_follows_every_view(
            sets in proptest::collection::vec(("[ab]", proptest::option::of(proptest::collection::btree_set("[a-f]", 0..5))), 0..12)
        ) {
            let mut bindings = Bindings::default();
            // `None`: the Binding is gone.
            for (binding, objects) in &sets {
                let listed = objects.as_ref().map(|objects| {
                    let entries: Vec<(&str, &str)> = objects.iter().map(|o| (o.as_str(), "1")).collect();
                    view(&["c1"], &entries)
                });
                bindings.set(binding, listed);
            }
            let mut expected: BTreeMap<WorkloadRef, BTreeSet<String>> = BTreeMap::new();
            for (name, view) in &bindings.views {
                for key in view.entries.keys() {
                    expected.entry(key.clone()).or_default().insert(name.clone());
                }
            }
            proptest::prop_assert_eq!(&bindings.by_object, &expected);
        }
    }

    #[test]
    fn binding_view_reads_entries_destinations_and_policy() {
        let mut binding = Binding::new(
            "p",
            BindingSpec {
                workload: DownsyncObjectClauses {
                    namespace_scope: vec![NamespaceScopeDownsyncClause {
                        object: NamespaceScopeDownsyncObject {
                            group: "apps".into(),
                            version: "v1".into(),
                            resource: "deployments".into(),
                            namespace: "ns".into(),
                            name: "web".into(),
                            resource_version: "7".into(),
                        },
                        modulation: DownsyncModulation {
                            status_collectors: vec!["sum".into()],
                            ..Default::default()
                        },
                    }],
                    ..Default::default()
                },
                destinations: vec![Destination {
                    cluster_id: "c1".into(),
                }],
            },
        );
        binding.metadata.owner_references =
            Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "control.kubestellar.io/v1alpha1".into(),
                kind: "BindingPolicy".into(),
                name: "p".into(),
                uid: "policy-uid".into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]);
        let view = BindingView::of(&binding);
        assert_eq!(view.policy_uid.as_deref(), Some("policy-uid"));
        assert_eq!(view.entries[&key("web")].resource_version, "7");
        assert_eq!(view.collectors(), BTreeSet::from(["sum"]));
        let mut bindings = Bindings::default();
        bindings.set("p", Some(view));
        let (using, objects) = bindings.using_collector("sum");
        assert_eq!((using.len(), objects), (1, keys(&["web"])));
        assert!(bindings.using_collector("other").0.is_empty());
    }

    #[test]
    fn index_follows_moves_and_relists() {
        let mut index: Index<WorkloadRef> = Index::default();
        let ws = |n: &str| ("cluster1".to_string(), n.to_string());
        assert_eq!(index.set(ws("w1"), Some(key("a"))), [key("a")]);
        assert!(index.set(ws("w1"), Some(key("a"))).is_empty());
        assert_eq!(index.set(ws("w1"), Some(key("b"))), [key("a"), key("b")]);
        assert_eq!(index.set(ws("w2"), Some(key("b"))), [key("b")]);
        assert_eq!(index.of(&key("b")).count(), 2);
        assert_eq!(index.set(ws("w1"), None), [key("b")]);
        let changed = index.replace([(ws("w2"), key("b")), (ws("w3"), key("c"))]);
        assert_eq!(changed, keys(&["c"]));
        assert_eq!(index.of(&key("b")).collect::<Vec<_>>(), [&ws("w2")]);
        assert_eq!(index.of(&key("c")).count(), 1);
        // The same reports listed again, in another order: nothing changed.
        index.set(ws("w4"), Some(key("b")));
        let changed = index.replace([(ws("w3"), key("c")), (ws("w4"), key("b")), (ws("w2"), key("b"))]);
        assert!(changed.is_empty(), "{changed:?}");
        assert_eq!(index.of(&key("b")).collect::<Vec<_>>(), [&ws("w2"), &ws("w4")]);
    }

    #[test]
    fn evaluation_errors_are_replaced_per_object_and_capped() {
        let mut errors = EvaluationErrors::default();
        let pair = |b: &str, c: &str| (b.to_string(), c.to_string());
        let found = BTreeMap::from([(pair("p", "sum"), vec!["bad".to_string()])]);
        assert_eq!(
            errors.set(&key("a"), found.clone()),
            BTreeSet::from(["sum".to_string()])
        );
        assert!(errors.set(&key("a"), found).is_empty(), "no change");
        let many: Vec<String> = (0..30).map(|i| format!("e{i}")).collect();
        errors.set(&key("b"), BTreeMap::from([(pair("p", "sum"), many)]));
        let lines = errors.lines("sum");
        assert_eq!(lines.len(), MAX_ERROR_LINES + 1);
        assert_eq!(lines[0], "bad");
        assert_eq!(lines[MAX_ERROR_LINES], "and 11 more evaluation errors");
        assert_eq!(
            errors.set(&key("a"), BTreeMap::new()),
            BTreeSet::from(["sum".to_string()])
        );
        errors.set(&key("b"), BTreeMap::from([(pair("p", "sum"), vec![])]));
        assert!(errors.lines("sum").is_empty());
    }

    #[test]
    fn keys_read_as_the_object() {
        assert_eq!(key("web").to_string(), "apps/deployments ns/web");
        assert_eq!(
            WorkloadRef::new("", "namespaces", "", "ns").to_string(),
            "/namespaces ns"
        );
    }
}
