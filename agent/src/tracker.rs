//! Which delivered objects the agent follows, from the AppliedManifestWorks on the WEC, which
//! one of the AppliedManifestWorks listing an object reports it, and how many followed objects
//! each resource (GVR) has: the reference counts that start an informer for a GVR when its first
//! object is followed and stop it after the last one goes.
//!
//! One WorkStatus per object on the WEC: two BindingPolicies sending one object to one WEC make
//! two ManifestWorks, so two AppliedManifestWorks list it, but the hub reads a WEC's status of an
//! object only from its one WorkStatus. So one delivery reports (names and owns the WorkStatus):
//! the first one seen, kept while it lists the object, so another delivery coming or going never
//! rewrites the WorkStatus; when it stops listing the object, the delivery with the smallest
//! ManifestWork name left takes over. After a restart, when every AppliedManifestWork has been
//! read back, [`Tracker::adopt`] takes back the choice the hub's WorkStatuses show.
//!
//! Pure bookkeeping: the caller resolves kinds through discovery, feeds each AppliedManifestWork
//! in, and acts on the [`Changes`] it gets back (start and stop informers, queue reports).
//! Nothing is kept for an AppliedManifestWork or object once it is gone.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::naming;
use crate::objects::{AppliedObject, Gvr, ObjectId, ObjectKey};

/// What changed when an AppliedManifestWork was recorded or forgotten.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Keys that now report (a newly followed object, or another delivery taking over): their
    /// WorkStatus must be written.
    pub added: Vec<ObjectKey>,
    /// Keys that no longer report (the object is no longer followed, or another delivery took
    /// over): their WorkStatus must go.
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

/// One AppliedManifestWork as a delivery of objects. Ordered by ManifestWork name first: the
/// smallest one left takes over reporting an object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Delivery {
    manifest_work: String,
    amw: String,
    uid: String,
}

impl Delivery {
    /// The key of `id` (of `kind`) reported by this delivery; its WorkStatus name comes later.
    fn key(&self, id: &ObjectId, kind: &str) -> ObjectKey {
        ObjectKey {
            amw_uid: self.uid.clone(),
            manifest_work: self.manifest_work.clone(),
            gvr: id.gvr.clone(),
            kind: kind.to_string(),
            namespace: id.namespace.clone(),
            name: id.name.clone(),
            work_status: String::new(),
        }
    }
}

/// What one AppliedManifestWork delivered.
#[derive(Debug)]
struct Work {
    delivery: Delivery,
    objects: BTreeSet<ObjectId>,
}

/// A followed object: every delivery listing it, and the one reporting it.
#[derive(Debug)]
struct Followed {
    kind: String,
    deliveries: BTreeSet<Delivery>,
    reporting: Delivery,
    key: ObjectKey,
}

/// The followed objects and the indexes the controllers look them up by.
#[derive(Debug, Default)]
pub struct Tracker {
    /// By AppliedManifestWork name.
    works: HashMap<String, Work>,
    by_object: HashMap<ObjectId, Followed>,
    /// ManifestWork name → AppliedManifestWork names (normally one).
    by_manifest_work: HashMap<String, BTreeSet<String>>,
    /// Reporting keys by WorkStatus name.
    by_work_status: HashMap<String, ObjectKey>,
    /// Followed objects per GVR.
    gvr_refs: BTreeMap<Gvr, usize>,
}

impl Tracker {
    /// Records what the AppliedManifestWork `amw` (with `uid`, for ManifestWork `manifest_work`)
    /// delivered now. A new UID under the same name is a new delivery: everything of the old
    /// one is released.
    pub fn set_work(&mut self, amw: &str, uid: &str, manifest_work: &str, objects: &[AppliedObject]) -> Changes {
        let mut changes = Changes::default();
        let delivery = Delivery {
            manifest_work: manifest_work.to_string(),
            amw: amw.to_string(),
            uid: uid.to_string(),
        };
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
    /// an object whose reporting delivery has no WorkStatus on the hub (`on_hub` says which
    /// names exist) while another delivery of it has one is reported by that one again, so a
    /// restart rewrites nothing.
    pub fn adopt(&mut self, on_hub: impl Fn(&str) -> bool) -> Changes {
        let mut changes = Changes::default();
        let unreported: Vec<ObjectId> = self
            .by_object
            .iter()
            .filter(|(_, f)| f.deliveries.len() > 1 && !on_hub(&f.key.work_status))
            .map(|(id, _)| id.clone())
            .collect();
        for id in unreported {
            let Some(mut followed) = self.by_object.remove(&id) else {
                continue;
            };
            let found = followed
                .deliveries
                .iter()
                .filter(|d| **d != followed.reporting)
                .find_map(|d| {
                    let key = d.key(&id, &followed.kind);
                    let parts = key.name_parts();
                    // Either form of the name (see `naming`), unless another key has it.
                    [naming::work_status_name(parts), naming::shortened_name(parts)]
                        .into_iter()
                        .find(|n| on_hub(n) && !self.by_work_status.contains_key(n))
                        .map(|work_status| (d.clone(), ObjectKey { work_status, ..key }))
                });
            if let Some((delivery, key)) = found {
                self.unname(&followed.key);
                self.by_work_status.insert(key.work_status.clone(), key.clone());
                changes.removed.push(std::mem::replace(&mut followed.key, key.clone()));
                changes.added.push(key);
                followed.reporting = delivery;
            }
            self.by_object.insert(id, followed);
        }
        changes
    }

    fn unindex_work(&mut self, delivery: &Delivery) {
        if let Some(amws) = self.by_manifest_work.get_mut(&delivery.manifest_work) {
            amws.remove(&delivery.amw);
            if amws.is_empty() {
                self.by_manifest_work.remove(&delivery.manifest_work);
            }
        }
    }

    /// Notes that `delivery` lists `id`; the first delivery of an object reports it.
    fn deliver(&mut self, id: &ObjectId, kind: &str, delivery: &Delivery, changes: &mut Changes) {
        if let Some(followed) = self.by_object.get_mut(id) {
            // The reporting delivery stays: another one never renames the WorkStatus.
            followed.deliveries.insert(delivery.clone());
            return;
        }
        let refs = self.gvr_refs.entry(id.gvr.clone()).or_default();
        *refs += 1;
        if *refs == 1 {
            changes.start.push(id.gvr.clone());
        }
        let key = self.name(delivery.key(id, kind));
        changes.added.push(key.clone());
        let followed = Followed {
            kind: kind.to_string(),
            deliveries: BTreeSet::from([delivery.clone()]),
            reporting: delivery.clone(),
            key,
        };
        self.by_object.insert(id.clone(), followed);
    }

    /// Notes that `delivery` no longer lists `id`. If it reported it, the delivery with the
    /// smallest ManifestWork name left takes over.
    fn withdraw(&mut self, id: &ObjectId, delivery: &Delivery, changes: &mut Changes) {
        let Some(mut followed) = self.by_object.remove(id) else {
            return;
        };
        followed.deliveries.remove(delivery);
        if followed.reporting == *delivery {
            self.unname(&followed.key);
            changes.removed.push(followed.key.clone());
            let Some(next) = followed.deliveries.first().cloned() else {
                self.release(&id.gvr, changes);
                return;
            };
            followed.key = self.name(next.key(id, &followed.kind));
            followed.reporting = next;
            changes.added.push(followed.key.clone());
        }
        self.by_object.insert(id.clone(), followed);
    }

    /// Gives `key` its WorkStatus name and indexes it by that.
    fn name(&mut self, mut key: ObjectKey) -> ObjectKey {
        // Upstream's format can give two objects one name (see `naming`); the later one then
        // takes the shortened form.
        let verbatim = naming::work_status_name(key.name_parts());
        key.work_status = if self.by_work_status.contains_key(&verbatim) {
            naming::shortened_name(key.name_parts())
        } else {
            verbatim
        };
        self.by_work_status.insert(key.work_status.clone(), key.clone());
        key
    }

    fn unname(&mut self, key: &ObjectKey) {
        if self.by_work_status.get(&key.work_status) == Some(key) {
            self.by_work_status.remove(&key.work_status);
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
        self.by_work_status.get(&key.work_status) == Some(key)
    }

    /// The reporting key that owns a WorkStatus name.
    pub fn by_work_status(&self, name: &str) -> Option<&ObjectKey> {
        self.by_work_status.get(name)
    }

    /// True for a WorkStatus (by name) of a ManifestWork whose delivery is followed but that no
    /// reporting key owns: left over from an object removed while the agent was not running,
    /// or from a delivery that no longer reports.
    pub fn is_stale_work_status(&self, name: &str, manifest_work: &str) -> bool {
        !self.by_work_status.contains_key(name) && self.by_manifest_work.contains_key(manifest_work)
    }

    /// The reporting key of an object on the WEC.
    pub fn key_of_object(&self, id: &ObjectId) -> Option<ObjectKey> {
        self.by_object.get(id).map(|f| f.key.clone())
    }

    /// The reporting keys of a GVR's objects (e.g. when its informer has listed).
    pub fn keys_of_gvr(&self, gvr: &Gvr) -> Vec<ObjectKey> {
        self.by_object
            .iter()
            .filter(|(id, _)| &id.gvr == gvr)
            .map(|(_, f)| f.key.clone())
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
                    .filter_map(|id| self.by_object.get(id))
                    .filter(|f| f.reporting == w.delivery)
                    .map(|f| f.key.clone())
            })
            .collect()
    }

    /// The AppliedManifestWorks recorded.
    pub fn work_names(&self) -> Vec<String> {
        self.works.keys().cloned().collect()
    }

    /// Every reporting key (one per followed object).
    pub fn all_keys(&self) -> Vec<ObjectKey> {
        self.by_object.values().map(|f| f.key.clone()).collect()
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
    use crate::objects::tests::gvr;

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
        assert_eq!(tracker.key_of_object(&key.object()).as_ref(), Some(key));
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

    /// The hub as the controller's reconciles leave it after the tracker's changes: a reporting
    /// key's WorkStatus is created, that of a key no longer reporting is deleted. Counts writes.
    #[derive(Default)]
    struct Hub {
        /// WorkStatus name → the ManifestWork controlling it.
        work_statuses: BTreeMap<String, String>,
        writes: usize,
    }

    impl Hub {
        fn reconcile(&mut self, tracker: &Tracker, changes: &Changes) -> usize {
            let before = self.writes;
            for key in &changes.removed {
                let owned = tracker.by_work_status(&key.work_status).is_some();
                if !owned && self.work_statuses.remove(&key.work_status).is_some() {
                    self.writes += 1;
                }
            }
            for key in &changes.added {
                let name = &key.work_status;
                if tracker.contains(key) && !self.work_statuses.contains_key(name) {
                    self.work_statuses.insert(name.clone(), key.manifest_work.clone());
                    self.writes += 1;
                }
            }
            self.writes - before
        }

        /// The writes of an agent that (re)starts with `tracker` fed every AppliedManifestWork:
        /// what it takes back from the hub, a reconcile of every key, and the leftover sweep.
        fn settle(&mut self, tracker: &mut Tracker) -> usize {
            let adopted = tracker.adopt(|name| self.work_statuses.contains_key(name));
            let every = Changes {
                added: tracker.all_keys(),
                removed: adopted.removed,
                ..Changes::default()
            };
            let mut writes = self.reconcile(tracker, &every);
            let before = self.work_statuses.len();
            self.work_statuses
                .retain(|name, work| !tracker.is_stale_work_status(name, work));
            writes += before - self.work_statuses.len();
            self.writes += before - self.work_statuses.len();
            writes
        }
    }

    #[test]
    fn one_work_status_per_object_however_many_works_list_it() {
        let mut tracker = Tracker::default();
        let mut hub = Hub::default();
        let first = tracker.set_work("h-nginx", "uid1", "nginx", &[deployment("nginx", "nginx")]);
        assert_eq!(hub.reconcile(&tracker, &first), 1);
        let second = tracker.set_work("h-single", "uid2", "nginx-singleton", &[deployment("nginx", "nginx")]);
        assert_eq!(second, Changes::default(), "a second delivery changes nothing");
        assert_eq!(hub.reconcile(&tracker, &second), 0);
        assert_eq!(tracker.all_keys(), first.added, "the first delivery keeps reporting");
        assert_eq!(hub.work_statuses.len(), 1);
    }

    #[test]
    fn removing_a_delivery_that_does_not_report_writes_nothing() {
        let mut tracker = Tracker::default();
        let mut hub = Hub::default();
        let first = tracker.set_work("h-nginx", "uid1", "nginx", &[deployment("nginx", "nginx")]);
        hub.reconcile(&tracker, &first);
        let second = tracker.set_work("h-single", "uid2", "nginx-singleton", &[deployment("nginx", "nginx")]);
        hub.reconcile(&tracker, &second);
        let writes = hub.writes;
        let gone = tracker.remove_work("h-single");
        assert_eq!(gone, Changes::default());
        assert_eq!(hub.reconcile(&tracker, &gone), 0);
        // Nor when the object is only dropped from the second ManifestWork.
        let second = tracker.set_work("h-single", "uid2", "nginx-singleton", &[deployment("nginx", "nginx")]);
        let dropped = tracker.set_work("h-single", "uid2", "nginx-singleton", &[]);
        assert_eq!(hub.reconcile(&tracker, &second) + hub.reconcile(&tracker, &dropped), 0);
        assert_eq!(hub.writes, writes);
        assert_eq!(tracker.all_keys(), first.added);
    }

    #[test]
    fn when_the_reporting_delivery_goes_the_smallest_manifest_work_left_takes_over_once() {
        let mut tracker = Tracker::default();
        let mut hub = Hub::default();
        let object = deployment("nginx", "nginx");
        for (amw, uid, work) in [
            ("h-z", "uid-z", "zeta"),
            ("h-b", "uid-b", "beta"),
            ("h-g", "uid-g", "gamma"),
        ] {
            let changes = tracker.set_work(amw, uid, work, std::slice::from_ref(&object));
            hub.reconcile(&tracker, &changes);
        }
        let reporting = |t: &Tracker| t.all_keys().into_iter().map(|k| k.manifest_work).collect::<Vec<_>>();
        assert_eq!(reporting(&tracker), ["zeta"], "the first delivery reports");

        // Its ManifestWork deleted: one delete and one create, to the smallest name left.
        let moved = tracker.remove_work("h-z");
        assert_eq!((moved.removed.len(), moved.added.len()), (1, 1));
        assert!(
            moved.start.is_empty() && moved.stop.is_empty(),
            "the informer keeps running"
        );
        assert_eq!(hub.reconcile(&tracker, &moved), 2);
        assert_eq!(reporting(&tracker), ["beta"]);
        assert_eq!(hub.work_statuses.values().collect::<Vec<_>>(), ["beta"]);

        // The object dropped from the reporting ManifestWork: the same, to the one left.
        let moved = tracker.set_work("h-b", "uid-b", "beta", &[]);
        assert_eq!(hub.reconcile(&tracker, &moved), 2);
        assert_eq!(reporting(&tracker), ["gamma"]);
        assert_eq!(tracker.key_of_object(&object.id()), moved.added.first().cloned());
        assert_eq!(hub.work_statuses.values().collect::<Vec<_>>(), ["gamma"]);
    }

    #[test]
    fn a_restart_takes_the_reporting_delivery_back_from_the_hub() {
        let object = deployment("nginx", "nginx");
        let mut before = Tracker::default();
        let mut hub = Hub::default();
        // "beta" reports: it came first, and stays when "alpha" comes.
        for (amw, uid, work) in [("h-b", "uid-b", "beta"), ("h-a", "uid-a", "alpha")] {
            let changes = before.set_work(amw, uid, work, std::slice::from_ref(&object));
            hub.reconcile(&before, &changes);
        }
        let reported = hub.work_statuses.clone();
        assert_eq!(reported.values().collect::<Vec<_>>(), ["beta"]);

        // After a restart the AppliedManifestWorks are read back in another order.
        let mut after = Tracker::default();
        for (amw, uid, work) in [("h-a", "uid-a", "alpha"), ("h-b", "uid-b", "beta")] {
            after.set_work(amw, uid, work, std::slice::from_ref(&object));
        }
        assert_eq!(hub.settle(&mut after), 0, "a restart writes nothing");
        assert_eq!(hub.work_statuses, reported);
        assert_eq!(after.all_keys(), before.all_keys());

        // Left by an agent that wrote one per delivery: the one of the delivery chosen stays.
        let mut old = Hub::default();
        for (amw, uid, work) in [("h-a", "uid-a", "alpha"), ("h-b", "uid-b", "beta")] {
            let changes = Tracker::default().set_work(amw, uid, work, std::slice::from_ref(&object));
            old.work_statuses.extend(
                changes
                    .added
                    .iter()
                    .map(|k| (k.work_status.clone(), k.manifest_work.clone())),
            );
        }
        let mut fresh = Tracker::default();
        fresh.set_work("h-b", "uid-b", "beta", std::slice::from_ref(&object));
        fresh.set_work("h-a", "uid-a", "alpha", std::slice::from_ref(&object));
        assert_eq!(old.settle(&mut fresh), 1, "one of the two is deleted");
        assert_eq!(old.work_statuses.len(), 1);
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
