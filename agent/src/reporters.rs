//! Which delivery reports each followed object, and so names and owns its one WorkStatus.
//!
//! One WorkStatus per object on the WEC: two BindingPolicies sending one object to one WEC make
//! two ManifestWorks, so two AppliedManifestWorks list it, but the hub reads a WEC's status of an
//! object only from its one WorkStatus. So one delivery reports (names and owns the WorkStatus):
//! the first one seen, kept while it lists the object, so another delivery coming or going never
//! rewrites the WorkStatus; when it stops listing the object, the delivery with the smallest
//! ManifestWork name left takes over. After a restart, when every AppliedManifestWork has been
//! read back, [`Reporters::adopt`] takes back the choice the hub's WorkStatuses show.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::changes::Changes;
use crate::naming;
use crate::objects::{Key, ObjectId, ObjectKey};

/// One AppliedManifestWork as a delivery of objects, shared by every object it lists. Ordered by
/// ManifestWork name first: the smallest one left takes over reporting an object.
pub type Delivery = Arc<Applied>;

/// What a [`Delivery`] holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Applied {
    pub manifest_work: String,
    pub amw: String,
    pub uid: String,
}

impl Applied {
    /// The key of `id` (of `kind`) reported by this delivery; its WorkStatus name comes later.
    fn key(&self, id: &ObjectId, kind: &str) -> Key {
        Key {
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

/// A followed object: every delivery listing it, and the one reporting it (its key says the
/// object's kind).
#[derive(Debug)]
struct Followed {
    deliveries: BTreeSet<Delivery>,
    reporting: Delivery,
    key: ObjectKey,
}

/// The followed objects with the delivery reporting each, and the reporting keys by WorkStatus
/// name.
#[derive(Debug, Default)]
pub struct Reporters {
    by_object: HashMap<ObjectId, Followed>,
    /// Reporting keys by WorkStatus name.
    by_work_status: HashMap<String, ObjectKey>,
}

impl Reporters {
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
                    let key = d.key(&id, &followed.key.kind);
                    let parts = key.name_parts();
                    // Either form of the name (see `naming`), unless another key has it.
                    [naming::work_status_name(parts), naming::shortened_name(parts)]
                        .into_iter()
                        .find(|n| on_hub(n) && !self.by_work_status.contains_key(n))
                        .map(|work_status| (d.clone(), Arc::new(Key { work_status, ..key })))
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

    /// Notes that `delivery` lists `id`; the first delivery of an object reports it. True when
    /// the object was not followed before.
    pub fn deliver(&mut self, id: &ObjectId, kind: &str, delivery: &Delivery, changes: &mut Changes) -> bool {
        if let Some(followed) = self.by_object.get_mut(id) {
            // The reporting delivery stays: another one never renames the WorkStatus.
            followed.deliveries.insert(delivery.clone());
            return false;
        }
        let key = self.name(delivery.key(id, kind));
        changes.added.push(key.clone());
        let followed = Followed {
            deliveries: BTreeSet::from([delivery.clone()]),
            reporting: delivery.clone(),
            key,
        };
        self.by_object.insert(id.clone(), followed);
        true
    }

    /// Notes that `delivery` no longer lists `id`. If it reported it, the delivery with the
    /// smallest ManifestWork name left takes over. True when no delivery lists the object any
    /// more: it is no longer followed.
    pub fn withdraw(&mut self, id: &ObjectId, delivery: &Delivery, changes: &mut Changes) -> bool {
        let Some(mut followed) = self.by_object.remove(id) else {
            return false;
        };
        followed.deliveries.remove(delivery);
        if followed.reporting == *delivery {
            self.unname(&followed.key);
            changes.removed.push(followed.key.clone());
            let Some(next) = followed.deliveries.first().cloned() else {
                return true;
            };
            followed.key = self.name(next.key(id, &followed.key.kind));
            followed.reporting = next;
            changes.added.push(followed.key.clone());
        }
        self.by_object.insert(id.clone(), followed);
        false
    }

    /// Gives `key` its WorkStatus name and indexes it by that.
    fn name(&mut self, mut key: Key) -> ObjectKey {
        // Upstream's format can give two objects one name (see `naming`); the later one then
        // takes the shortened form.
        let verbatim = naming::work_status_name(key.name_parts());
        key.work_status = if self.by_work_status.contains_key(&verbatim) {
            naming::shortened_name(key.name_parts())
        } else {
            verbatim
        };
        let key = Arc::new(key);
        self.by_work_status.insert(key.work_status.clone(), key.clone());
        key
    }

    /// Drops `key`'s name, unless another key owns it by now.
    fn unname(&mut self, key: &ObjectKey) {
        if self.by_work_status.get(&key.work_status) == Some(key) {
            self.by_work_status.remove(&key.work_status);
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

    /// Whether a reporting key owns a WorkStatus name.
    pub fn is_owned(&self, name: &str) -> bool {
        self.by_work_status.contains_key(name)
    }

    /// The reporting key of an object on the WEC.
    pub fn key_of_object(&self, id: &ObjectId) -> Option<ObjectKey> {
        self.by_object.get(id).map(|f| f.key.clone())
    }

    /// The key of an object on the WEC if `delivery` reports it.
    pub fn key_reported_by(&self, id: &ObjectId, delivery: &Delivery) -> Option<ObjectKey> {
        self.by_object
            .get(id)
            .filter(|f| f.reporting == *delivery)
            .map(|f| f.key.clone())
    }

    /// Every followed object with its reporting key.
    pub fn keys(&self) -> impl Iterator<Item = (&ObjectId, &ObjectKey)> {
        self.by_object.iter().map(|(id, f)| (id, &f.key))
    }

    /// True when no object is followed and no name owned.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_object.is_empty() && self.by_work_status.is_empty()
    }
}

#[cfg(test)]
pub mod tests {
    use std::collections::BTreeMap;

    use crate::changes::Changes;
    use crate::objects::tests::deployment;
    use crate::tracker::Tracker;

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
    pub struct Hub {
        /// WorkStatus name → the ManifestWork controlling it.
        pub work_statuses: BTreeMap<String, String>,
        pub writes: usize,
    }

    impl Hub {
        pub fn reconcile(&mut self, tracker: &Tracker, changes: &Changes) -> usize {
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
        pub fn settle(&mut self, tracker: &mut Tracker) -> usize {
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
        let reporting = |t: &Tracker| {
            t.all_keys()
                .into_iter()
                .map(|k| k.manifest_work.clone())
                .collect::<Vec<_>>()
        };
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
}
