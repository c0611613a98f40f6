//! Which delivered objects the agent follows, from the AppliedManifestWorks on the WEC, which
//! one of the AppliedManifestWorks listing an object reports it (see [`crate::reporters`]), and
//! how many followed objects each resource (GVR) has: the reference counts that start an
//! informer for a GVR when its first object is followed and stop it after the last one goes.
//!
//! Pure bookkeeping: the caller resolves kinds through discovery, feeds each AppliedManifestWork
//! in, and acts on the [`Changes`] it gets back (start and stop informers, queue reports).
//! Nothing is kept for an AppliedManifestWork or object once it is gone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::changes::Changes;
use crate::objects::{AppliedObject, Gvr, ObjectId, ObjectKey};
use crate::reporters::{Applied, Delivery, Reporters};

/// What one AppliedManifestWork delivered.
#[derive(Debug)]
struct Work {
    delivery: Delivery,
    objects: BTreeSet<ObjectId>,
}

/// The followed objects and the indexes the controllers look them up by.
#[derive(Debug, Default)]
pub struct Tracker {
    /// By AppliedManifestWork name.
    works: HashMap<String, Work>,
    /// Which delivery reports each followed object.
    reporters: Reporters,
    /// ManifestWork name → AppliedManifestWork names (normally one).
    by_manifest_work: HashMap<String, BTreeSet<String>>,
    /// Followed objects per GVR.
    gvr_refs: BTreeMap<Gvr, usize>,
}

impl Tracker {
    /// Records what the AppliedManifestWork `amw` (with `uid`, for ManifestWork `manifest_work`)
    /// delivered now. A new UID under the same name is a new delivery: everything of the old
    /// one is released.
    pub fn set_work(&mut self, amw: &str, uid: &str, manifest_work: &str, objects: &[AppliedObject]) -> Changes {
        let mut changes = Changes::default();
        let delivery = Arc::new(Applied {
            manifest_work: manifest_work.to_string(),
            amw: amw.to_string(),
            uid: uid.to_string(),
        });
        let wanted: BTreeMap<ObjectId, &str> = objects.iter().map(|o| (o.id(), o.kind.as_str())).collect();
        if let Some(old) = self.works.remove(amw) {
            self.unindex_work(&old.delivery);
            let same = old.delivery == delivery;
            for id in old.objects.iter().filter(|id| !same || !wanted.contains_key(id)) {
                self.withdraw(id, &old.delivery, &mut changes);
            }
        }
        for (id, kind) in &wanted {
            self.deliver(id, kind, &delivery, &mut changes);
        }
        self.by_manifest_work
            .entry(manifest_work.to_string())
            .or_default()
            .insert(amw.to_string());
        self.works.insert(
            amw.to_string(),
            Work {
                delivery,
                objects: wanted.into_keys().collect(),
            },
        );
        changes.net();
        changes
    }

    /// Forgets the AppliedManifestWork `amw` (it was deleted).
    pub fn remove_work(&mut self, amw: &str) -> Changes {
        let mut changes = Changes::default();
        if let Some(work) = self.works.remove(amw) {
            self.unindex_work(&work.delivery);
            for id in &work.objects {
                self.withdraw(id, &work.delivery, &mut changes);
            }
        }
        changes
    }

    /// After a restart, once every AppliedManifestWork has been recorded (in whatever order):
    /// takes back which delivery reports each object from the hub's WorkStatuses (`on_hub` says
    /// which names exist); see [`Reporters::adopt`].
    pub fn adopt(&mut self, on_hub: impl Fn(&str) -> bool) -> Changes {
        self.reporters.adopt(on_hub)
    }

    fn unindex_work(&mut self, delivery: &Delivery) {
        if let Some(amws) = self.by_manifest_work.get_mut(&delivery.manifest_work) {
            amws.remove(&delivery.amw);
            if amws.is_empty() {
                self.by_manifest_work.remove(&delivery.manifest_work);
            }
        }
    }

    /// Notes that `delivery` lists `id`, counting the object for its GVR if it is newly followed.
    fn deliver(&mut self, id: &ObjectId, kind: &str, delivery: &Delivery, changes: &mut Changes) {
        if self.reporters.deliver(id, kind, delivery, changes) {
            let refs = self.gvr_refs.entry(id.gvr.clone()).or_default();
            *refs += 1;
            if *refs == 1 {
                changes.start.push(id.gvr.clone());
            }
        }
    }

    /// Notes that `delivery` no longer lists `id`, releasing the object if nothing lists it.
    fn withdraw(&mut self, id: &ObjectId, delivery: &Delivery, changes: &mut Changes) {
        if self.reporters.withdraw(id, delivery, changes) {
            self.release(&id.gvr, changes);
        }
    }

    /// One followed object of `gvr` fewer.
    fn release(&mut self, gvr: &Gvr, changes: &mut Changes) {
        if let Some(refs) = self.gvr_refs.get_mut(gvr) {
            *refs -= 1;
            if *refs == 0 {
                self.gvr_refs.remove(gvr);
                changes.stop.push(gvr.clone());
            }
        }
    }

    /// True while `key` reports its object.
    pub fn contains(&self, key: &ObjectKey) -> bool {
        self.reporters.contains(key)
    }

    /// The reporting key that owns a WorkStatus name.
    pub fn by_work_status(&self, name: &str) -> Option<&ObjectKey> {
        self.reporters.by_work_status(name)
    }

    /// True for a WorkStatus (by name) of a ManifestWork whose delivery is followed but that no
    /// reporting key owns: left over from an object removed while the agent was not running,
    /// or from a delivery that no longer reports.
    pub fn is_stale_work_status(&self, name: &str, manifest_work: &str) -> bool {
        !self.reporters.is_owned(name) && self.by_manifest_work.contains_key(manifest_work)
    }

    /// The reporting key of an object on the WEC.
    pub fn key_of_object(&self, id: &ObjectId) -> Option<ObjectKey> {
        self.reporters.key_of_object(id)
    }

    /// The reporting keys of a GVR's objects (e.g. when its informer has listed).
    pub fn keys_of_gvr(&self, gvr: &Gvr) -> Vec<ObjectKey> {
        self.reporters
            .keys()
            .filter(|(id, _)| &id.gvr == gvr)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// The keys a ManifestWork's deliveries report (e.g. when its labels changed).
    pub fn keys_of_manifest_work(&self, manifest_work: &str) -> Vec<ObjectKey> {
        self.by_manifest_work
            .get(manifest_work)
            .into_iter()
            .flatten()
            .filter_map(|amw| self.works.get(amw))
            .flat_map(|w| {
                w.objects
                    .iter()
                    .filter_map(|id| self.reporters.key_reported_by(id, &w.delivery))
            })
            .collect()
    }

    /// The AppliedManifestWorks recorded for a ManifestWork (normally one).
    pub fn works_of_manifest_work(&self, manifest_work: &str) -> impl Iterator<Item = String> + '_ {
        self.by_manifest_work.get(manifest_work).into_iter().flatten().cloned()
    }

    /// The AppliedManifestWorks recorded.
    pub fn work_names(&self) -> Vec<String> {
        self.works.keys().cloned().collect()
    }

    /// Every reporting key (one per followed object).
    pub fn all_keys(&self) -> Vec<ObjectKey> {
        self.reporters.keys().map(|(_, key)| key.clone()).collect()
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
            && self.reporters.is_empty()
            && self.by_manifest_work.is_empty()
            && self.gvr_refs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::objects::tests::{deployment, gvr, namespace};
    use crate::reporters::tests::Hub;

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
        assert_eq!(tracker.key_of_object(&key.object()).as_ref(), Some(key));
        assert_eq!(tracker.keys_of_manifest_work("mw").len(), 2);
        assert_eq!(tracker.works_of_manifest_work("mw").collect::<Vec<_>>(), ["h-mw"]);
        assert_eq!(tracker.works_of_manifest_work("other").count(), 0);
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

    #[derive(Clone, Debug)]
    enum Op {
        /// AppliedManifestWork `amw{0}`, in generation `{1}` (a new UID), lists these objects.
        Set(usize, usize, Vec<(usize, usize)>),
        Remove(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                0..3usize,
                0..2usize,
                proptest::collection::vec((0..3usize, 0..4usize), 0..5)
            )
                .prop_map(|(w, g, o)| Op::Set(w, g, o)),
            (0..3usize).prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Whatever the sequence of AppliedManifestWork changes: the informers started minus
        /// those stopped are exactly the GVRs with followed objects; every listed object has
        /// exactly one reporting key, of a delivery listing it, unchanged while that delivery
        /// lists it; a restart reading the same AppliedManifestWorks back in another order
        /// writes nothing; and removing everything leaves nothing behind.
        #[test]
        fn one_sticky_reporter_per_object(ops in proptest::collection::vec(op(), 0..30)) {
            let resources = [gvr("apps", "deployments"), gvr("", "pods"), gvr("example.io", "widgets")];
            let mut tracker = Tracker::default();
            let mut hub = Hub::default();
            let mut running = BTreeSet::new();
            // AppliedManifestWork index → (UID, what it lists).
            let mut works: BTreeMap<usize, (String, Vec<AppliedObject>)> = BTreeMap::new();
            for op in ops {
                let before: BTreeMap<ObjectId, ObjectKey> =
                    tracker.all_keys().into_iter().map(|k| (k.object(), k)).collect();
                let changes = match op {
                    Op::Set(w, g, objects) => {
                        let objects: Vec<AppliedObject> = objects.iter().map(|&(r, n)| AppliedObject {
                            gvr: resources[r].clone(), kind: format!("K{r}"), namespace: "ns".into(), name: format!("o{n}"),
                        }).collect();
                        let uid = format!("uid{w}-{g}");
                        let changes = tracker.set_work(&format!("amw{w}"), &uid, &format!("mw{w}"), &objects);
                        works.insert(w, (uid, objects));
                        changes
                    }
                    Op::Remove(w) => {
                        works.remove(&w);
                        tracker.remove_work(&format!("amw{w}"))
                    }
                };
                for g in &changes.start { prop_assert!(running.insert(g.clone())); }
                for g in &changes.stop { prop_assert!(running.remove(g)); }
                hub.reconcile(&tracker, &changes);
                let keys = tracker.all_keys();
                let expected: BTreeSet<Gvr> = keys.iter().map(|k| k.gvr.clone()).collect();
                prop_assert_eq!(&running, &expected);
                let names: BTreeSet<String> = keys.iter().map(|k| k.work_status.clone()).collect();
                prop_assert_eq!(&names, &hub.work_statuses.keys().cloned().collect(), "one WorkStatus per object");

                let lists = |key: &ObjectKey| works.iter().any(|(w, (uid, objects))| {
                    *uid == key.amw_uid && key.manifest_work == format!("mw{w}")
                        && objects.iter().any(|o| o.id() == key.object())
                });
                let listed: BTreeSet<ObjectId> = works.values().flat_map(|(_, o)| o.iter().map(AppliedObject::id)).collect();
                let reported: BTreeMap<ObjectId, ObjectKey> = keys.iter().map(|k| (k.object(), k.clone())).collect();
                prop_assert_eq!(reported.len(), keys.len(), "one key per object");
                prop_assert_eq!(&reported.keys().cloned().collect::<BTreeSet<_>>(), &listed);
                for key in &keys { prop_assert!(lists(key)); }
                for (id, key) in &before {
                    if lists(key) { prop_assert_eq!(reported.get(id), Some(key), "sticky"); }
                }
            }

            let mut restarted = Tracker::default();
            for (w, (uid, objects)) in works.iter().rev() {
                restarted.set_work(&format!("amw{w}"), uid, &format!("mw{w}"), objects);
            }
            prop_assert_eq!(hub.settle(&mut restarted), 0, "a restart writes nothing");
            let sorted = |t: &Tracker| t.all_keys().into_iter().collect::<BTreeSet<_>>();
            prop_assert_eq!(sorted(&restarted), sorted(&tracker));

            for w in 0..3 { tracker.remove_work(&format!("amw{w}")); }
            prop_assert!(tracker.is_empty());
        }
    }
}
