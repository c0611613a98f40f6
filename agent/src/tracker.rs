//! Which delivered objects the agent follows, from the AppliedManifestWorks on the WEC, and how
//! many of them each resource (GVR) has: the reference counts that start an informer for a GVR
//! when its first object is followed and stop it after the last one goes.
//!
//! Pure bookkeeping: the caller resolves kinds through discovery, feeds each AppliedManifestWork
//! in, and acts on the [`Changes`] it gets back (start and stop informers, queue reports).
//! Nothing is kept for an AppliedManifestWork or object once it is gone.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::naming::{self, NameParts};

/// A resource type on the WEC: API group (`""` for core), version and plural resource name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl Gvr {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl std::fmt::Display for Gvr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.resource)
    }
}

/// One object as one AppliedManifestWork delivered it: the agent keeps one WorkStatus for each.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub amw_uid: String,
    /// The ManifestWork on the hub (in the mailbox namespace) that delivered it.
    pub manifest_work: String,
    pub gvr: Gvr,
    pub kind: String,
    /// `""` for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
    /// The WorkStatus's name, fixed when the object starts being followed.
    pub work_status: String,
}

impl ObjectKey {
    fn name_parts(&self) -> NameParts<'_> {
        NameParts {
            amw_uid: &self.amw_uid,
            group: &self.gvr.group,
            version: &self.gvr.version,
            kind: &self.kind,
            namespace: &self.namespace,
            name: &self.name,
        }
    }

    /// The object on the WEC, whichever AppliedManifestWork delivered it.
    pub fn object(&self) -> ObjectId {
        ObjectId {
            gvr: self.gvr.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// An object on the WEC.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId {
    pub gvr: Gvr,
    pub namespace: String,
    pub name: String,
}

/// An object an AppliedManifestWork lists, with its kind resolved.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AppliedObject {
    pub gvr: Gvr,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// What changed when an AppliedManifestWork was recorded or forgotten.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Newly followed objects: their WorkStatus must be written.
    pub added: Vec<ObjectKey>,
    /// Objects no longer followed: their WorkStatus must go.
    pub removed: Vec<ObjectKey>,
    /// GVRs whose first object is now followed: start an informer.
    pub start: Vec<Gvr>,
    /// GVRs with no followed object left: stop the informer.
    pub stop: Vec<Gvr>,
}

impl Changes {
    /// A GVR released and followed again in one step keeps its informer running.
    fn net(&mut self) {
        let both: BTreeSet<Gvr> = self.start.iter().filter(|g| self.stop.contains(g)).cloned().collect();
        self.start.retain(|g| !both.contains(g));
        self.stop.retain(|g| !both.contains(g));
    }
}

/// What one AppliedManifestWork delivered.
#[derive(Debug)]
struct Work {
    uid: String,
    manifest_work: String,
    keys: BTreeSet<ObjectKey>,
}

/// The followed objects and the indexes the controllers look them up by.
#[derive(Debug, Default)]
pub struct Tracker {
    /// By AppliedManifestWork name.
    works: HashMap<String, Work>,
    by_object: HashMap<ObjectId, BTreeSet<ObjectKey>>,
    /// ManifestWork name → AppliedManifestWork names (normally one).
    by_manifest_work: HashMap<String, BTreeSet<String>>,
    by_work_status: HashMap<String, ObjectKey>,
    gvr_refs: BTreeMap<Gvr, usize>,
}

impl Tracker {
    /// Records what the AppliedManifestWork `amw` (with `uid`, for ManifestWork `manifest_work`)
    /// delivered now. A new UID under the same name is a new delivery: everything of the old
    /// one is released.
    pub fn set_work(&mut self, amw: &str, uid: &str, manifest_work: &str, objects: &[AppliedObject]) -> Changes {
        let mut changes = Changes::default();
        let old = match self.works.remove(amw) {
            Some(work) if work.uid == uid && work.manifest_work == manifest_work => work.keys,
            Some(work) => {
                self.unindex_work(amw, &work.manifest_work);
                for key in work.keys {
                    self.release(key, &mut changes);
                }
                BTreeSet::new()
            }
            None => BTreeSet::new(),
        };
        let wanted: BTreeSet<AppliedObject> = objects.iter().cloned().collect();
        let mut keys = BTreeSet::new();
        for key in old {
            let still = AppliedObject {
                gvr: key.gvr.clone(),
                kind: key.kind.clone(),
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            };
            if wanted.contains(&still) {
                keys.insert(key);
            } else {
                self.release(key, &mut changes);
            }
        }
        let kept: BTreeSet<ObjectId> = keys.iter().map(ObjectKey::object).collect();
        for object in wanted {
            let id = ObjectId {
                gvr: object.gvr.clone(),
                namespace: object.namespace.clone(),
                name: object.name.clone(),
            };
            if kept.contains(&id) {
                continue;
            }
            let key = self.follow(uid, manifest_work, object, &mut changes);
            keys.insert(key);
        }
        self.by_manifest_work
            .entry(manifest_work.to_string())
            .or_default()
            .insert(amw.to_string());
        self.works.insert(
            amw.to_string(),
            Work {
                uid: uid.to_string(),
                manifest_work: manifest_work.to_string(),
                keys,
            },
        );
        changes.net();
        changes
    }

    /// Forgets the AppliedManifestWork `amw` (it was deleted).
    pub fn remove_work(&mut self, amw: &str) -> Changes {
        let mut changes = Changes::default();
        if let Some(work) = self.works.remove(amw) {
            self.unindex_work(amw, &work.manifest_work);
            for key in work.keys {
                self.release(key, &mut changes);
            }
        }
        changes
    }

    fn unindex_work(&mut self, amw: &str, manifest_work: &str) {
        if let Some(amws) = self.by_manifest_work.get_mut(manifest_work) {
            amws.remove(amw);
            if amws.is_empty() {
                self.by_manifest_work.remove(manifest_work);
            }
        }
    }

    fn follow(&mut self, uid: &str, manifest_work: &str, object: AppliedObject, changes: &mut Changes) -> ObjectKey {
        let mut key = ObjectKey {
            amw_uid: uid.to_string(),
            manifest_work: manifest_work.to_string(),
            gvr: object.gvr,
            kind: object.kind,
            namespace: object.namespace,
            name: object.name,
            work_status: String::new(),
        };
        // Upstream's format can give two objects one name (see `naming`); the later one then
        // takes the shortened form.
        let verbatim = naming::work_status_name(key.name_parts());
        key.work_status = if self.by_work_status.contains_key(&verbatim) {
            naming::shortened_name(key.name_parts())
        } else {
            verbatim
        };
        self.by_work_status.insert(key.work_status.clone(), key.clone());
        self.by_object.entry(key.object()).or_default().insert(key.clone());
        let refs = self.gvr_refs.entry(key.gvr.clone()).or_default();
        *refs += 1;
        if *refs == 1 {
            changes.start.push(key.gvr.clone());
        }
        changes.added.push(key.clone());
        key
    }

    fn release(&mut self, key: ObjectKey, changes: &mut Changes) {
        if self.by_work_status.get(&key.work_status) == Some(&key) {
            self.by_work_status.remove(&key.work_status);
        }
        let id = key.object();
        if let Some(keys) = self.by_object.get_mut(&id) {
            keys.remove(&key);
            if keys.is_empty() {
                self.by_object.remove(&id);
            }
        }
        if let Some(refs) = self.gvr_refs.get_mut(&key.gvr) {
            *refs -= 1;
            if *refs == 0 {
                self.gvr_refs.remove(&key.gvr);
                changes.stop.push(key.gvr.clone());
            }
        }
        changes.removed.push(key);
    }

    /// True while `key` is followed.
    pub fn contains(&self, key: &ObjectKey) -> bool {
        self.by_work_status.get(&key.work_status) == Some(key)
    }

    /// The followed key that owns a WorkStatus name.
    pub fn by_work_status(&self, name: &str) -> Option<&ObjectKey> {
        self.by_work_status.get(name)
    }

    /// True for a WorkStatus (by name) of a ManifestWork whose delivery is followed but that no
    /// followed object owns: left over from an object removed while the agent was not running.
    pub fn is_stale_work_status(&self, name: &str, manifest_work: &str) -> bool {
        !self.by_work_status.contains_key(name) && self.by_manifest_work.contains_key(manifest_work)
    }

    /// The keys of an object on the WEC (one per AppliedManifestWork that delivered it).
    pub fn keys_of_object(&self, id: &ObjectId) -> Vec<ObjectKey> {
        self.by_object.get(id).into_iter().flatten().cloned().collect()
    }

    /// Every followed key of a GVR (e.g. when its informer has listed).
    pub fn keys_of_gvr(&self, gvr: &Gvr) -> Vec<ObjectKey> {
        self.works
            .values()
            .flat_map(|w| w.keys.iter())
            .filter(|k| &k.gvr == gvr)
            .cloned()
            .collect()
    }

    /// Every followed key delivered by a ManifestWork (e.g. when its labels changed).
    pub fn keys_of_manifest_work(&self, manifest_work: &str) -> Vec<ObjectKey> {
        self.by_manifest_work
            .get(manifest_work)
            .into_iter()
            .flatten()
            .filter_map(|amw| self.works.get(amw))
            .flat_map(|w| w.keys.iter().cloned())
            .collect()
    }

    /// The AppliedManifestWorks recorded.
    pub fn work_names(&self) -> Vec<String> {
        self.works.keys().cloned().collect()
    }

    /// Every followed key.
    pub fn all_keys(&self) -> Vec<ObjectKey> {
        self.works.values().flat_map(|w| w.keys.iter().cloned()).collect()
    }

    /// How many GVRs have followed objects (= informers that should run).
    #[cfg(test)]
    pub fn gvr_count(&self) -> usize {
        self.gvr_refs.len()
    }

    /// True when nothing is kept: no work, object, name or reference count.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.works.is_empty()
            && self.by_object.is_empty()
            && self.by_manifest_work.is_empty()
            && self.by_work_status.is_empty()
            && self.gvr_refs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn gvr(group: &str, resource: &str) -> Gvr {
        Gvr {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
        }
    }

    fn deployment(namespace: &str, name: &str) -> AppliedObject {
        AppliedObject {
            gvr: gvr("apps", "deployments"),
            kind: "Deployment".into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn namespace(name: &str) -> AppliedObject {
        AppliedObject {
            gvr: gvr("", "namespaces"),
            kind: "Namespace".into(),
            namespace: String::new(),
            name: name.into(),
        }
    }

    #[test]
    fn informers_start_with_the_first_object_and_stop_after_the_last() {
        let mut tracker = Tracker::default();
        let changes = tracker.set_work("h-mw1", "uid1", "mw1", &[deployment("ns", "a"), namespace("ns")]);
        assert_eq!(changes.added.len(), 2);
        assert_eq!(changes.start, vec![gvr("", "namespaces"), gvr("apps", "deployments")]);

        let changes = tracker.set_work("h-mw2", "uid2", "mw2", &[deployment("ns", "b")]);
        assert!(changes.start.is_empty(), "the deployments informer already runs");
        assert_eq!(tracker.gvr_count(), 2);

        let changes = tracker.set_work("h-mw1", "uid1", "mw1", &[namespace("ns")]);
        assert_eq!(changes.removed.len(), 1);
        assert!(changes.added.is_empty() && changes.stop.is_empty());

        let changes = tracker.remove_work("h-mw2");
        assert_eq!(changes.stop, vec![gvr("apps", "deployments")]);
        let changes = tracker.remove_work("h-mw1");
        assert_eq!(changes.stop, vec![gvr("", "namespaces")]);
        assert!(tracker.is_empty());
    }

    #[test]
    fn a_new_uid_is_a_new_delivery() {
        let mut tracker = Tracker::default();
        let first = tracker.set_work("h-mw", "uid1", "mw", &[deployment("ns", "a")]);
        let second = tracker.set_work("h-mw", "uid2", "mw", &[deployment("ns", "a")]);
        assert_eq!(second.removed, first.added);
        assert_eq!(second.added.len(), 1);
        assert_ne!(second.added[0].work_status, first.added[0].work_status);
        assert!(tracker.contains(&second.added[0]) && !tracker.contains(&first.added[0]));
        assert!(
            second.start.is_empty() && second.stop.is_empty(),
            "the informer keeps running"
        );
    }

    #[test]
    fn lookups_by_object_manifest_work_and_name() {
        let mut tracker = Tracker::default();
        let changes = tracker.set_work("h-mw", "uid", "mw", &[deployment("ns", "a"), namespace("ns")]);
        let key = changes.added.iter().find(|k| k.kind == "Deployment").unwrap();
        assert_eq!(tracker.keys_of_object(&key.object()), vec![key.clone()]);
        assert_eq!(tracker.keys_of_manifest_work("mw").len(), 2);
        assert_eq!(tracker.by_work_status(&key.work_status), Some(key));
        assert_eq!(tracker.keys_of_gvr(&gvr("", "namespaces")).len(), 1);
        assert_eq!(tracker.all_keys().len(), 2);
    }

    #[test]
    fn stale_work_statuses_are_those_of_followed_works_without_an_object() {
        let mut tracker = Tracker::default();
        let changes = tracker.set_work("h-mw", "uid", "mw", &[deployment("ns", "a")]);
        let name = &changes.added[0].work_status;
        assert!(!tracker.is_stale_work_status(name, "mw"));
        assert!(tracker.is_stale_work_status("uid-appsv1-deployment-ns-gone", "mw"));
        assert!(
            !tracker.is_stale_work_status("x", "other"),
            "another ManifestWork's are not ours to judge"
        );
    }

    #[test]
    fn ambiguous_upstream_names_are_told_apart() {
        let mut tracker = Tracker::default();
        let changes = tracker.set_work("h-mw", "uid", "mw", &[deployment("a-b", "c"), deployment("a", "b-c")]);
        assert_eq!(changes.added.len(), 2);
        assert_ne!(changes.added[0].work_status, changes.added[1].work_status);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Set(usize, Vec<(usize, usize)>),
        Remove(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3usize, proptest::collection::vec((0..3usize, 0..4usize), 0..5)).prop_map(|(w, o)| Op::Set(w, o)),
            (0..3usize).prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Whatever the sequence of AppliedManifestWork changes, the informers started minus
        /// those stopped are exactly the GVRs with followed objects, and removing everything
        /// leaves nothing behind.
        #[test]
        fn reference_counts_match_followed_objects(ops in proptest::collection::vec(op(), 0..30)) {
            let resources = [gvr("apps", "deployments"), gvr("", "pods"), gvr("example.io", "widgets")];
            let mut tracker = Tracker::default();
            let mut running = BTreeSet::new();
            let mut followed = BTreeSet::new();
            for op in ops {
                let changes = match op {
                    Op::Set(w, objects) => {
                        let objects: Vec<AppliedObject> = objects.iter().map(|&(r, n)| AppliedObject {
                            gvr: resources[r].clone(), kind: format!("K{r}"), namespace: "ns".into(), name: format!("o{n}"),
                        }).collect();
                        tracker.set_work(&format!("amw{w}"), &format!("uid{w}"), &format!("mw{w}"), &objects)
                    }
                    Op::Remove(w) => tracker.remove_work(&format!("amw{w}")),
                };
                for g in changes.start { prop_assert!(running.insert(g)); }
                for g in changes.stop { prop_assert!(running.remove(&g)); }
                for k in changes.removed { prop_assert!(followed.remove(&k)); }
                for k in changes.added { prop_assert!(followed.insert(k)); }
                let expected: BTreeSet<Gvr> = tracker.all_keys().into_iter().map(|k| k.gvr).collect();
                prop_assert_eq!(&running, &expected);
                prop_assert_eq!(&followed, &tracker.all_keys().into_iter().collect::<BTreeSet<_>>());
            }
            for w in 0..3 { tracker.remove_work(&format!("amw{w}")); }
            prop_assert!(tracker.is_empty());
        }
    }
}
