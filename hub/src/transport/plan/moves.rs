//! Objects moving between the wrapped objects of one destination (their shards changed, or the
//! limits did, or another Binding takes them over) are added where they go before they are
//! removed where they were. A destination
//! deletes an object that leaves a wrapped object unless another wrapped object it has applied
//! holds it too (OCM's work agent then only drops the old owner), so the removal waits for that.
//! Only the removal: the wrapped object is written with everything else it is to hold (a
//! destination whose agent is down would otherwise never get what it gains).

use std::collections::{BTreeMap, BTreeSet};

use crate::transport::types::{Identity, WorkKey};

/// A wrapped object as it is: the objects it holds, and those of them its destination has
/// applied (all once it has applied this version; one it cannot apply holds back no other).
#[derive(Clone, Debug, Default)]
pub struct Current {
    pub objects: BTreeSet<Identity>,
    pub landed: BTreeSet<Identity>,
}

/// The objects each current wrapped object must keep for now, by wrapped object: `desired` takes
/// them out of it, and another wrapped object of the same mailbox is to hold them but does not
/// hold them, applied, yet.
pub fn kept(
    current: &BTreeMap<WorkKey, Current>,
    desired: &BTreeMap<WorkKey, BTreeSet<Identity>>,
) -> BTreeMap<WorkKey, BTreeSet<Identity>> {
    let elsewhere = |key: &WorkKey, other: &WorkKey| other != key && other.0 == key.0;
    current
        .iter()
        .filter_map(|(key, now)| {
            let kept: BTreeSet<Identity> = drops(key, now, desired)
                .filter(|object| {
                    let arriving = desired
                        .iter()
                        .any(|(other, holds)| elsewhere(key, other) && holds.contains(*object));
                    let landed = current
                        .iter()
                        .any(|(other, c)| elsewhere(key, other) && c.landed.contains(*object));
                    arriving && !landed
                })
                .cloned()
                .collect();
            (!kept.is_empty()).then(|| (key.clone(), kept))
        })
        .collect()
}

/// The objects the wrapped object `key` holds `now` that `desired` no longer puts in it.
fn drops<'a>(
    key: &WorkKey,
    now: &'a Current,
    desired: &'a BTreeMap<WorkKey, BTreeSet<Identity>>,
) -> impl Iterator<Item = &'a Identity> {
    let kept = desired.get(key);
    now.objects
        .iter()
        .filter(move |object| kept.is_none_or(|kept| !kept.contains(*object)))
}

/// The objects `current` holds that `desired` no longer puts in the same wrapped object.
pub fn dropped(
    current: &BTreeMap<WorkKey, Current>,
    desired: &BTreeMap<WorkKey, BTreeSet<Identity>>,
) -> BTreeSet<Identity> {
    current
        .iter()
        .flat_map(|(key, now)| drops(key, now, desired))
        .cloned()
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::transport) fn object(name: &str) -> Identity {
        (String::new(), "ConfigMap".into(), "ns".into(), name.into())
    }

    pub(in crate::transport) fn key(mailbox: &str, name: &str) -> WorkKey {
        (mailbox.into(), name.into())
    }

    pub(in crate::transport) fn holding(names: &[&str]) -> BTreeSet<Identity> {
        names.iter().map(|n| object(n)).collect()
    }

    fn current(names: &[&str], applied: bool) -> Current {
        Current {
            objects: holding(names),
            landed: if applied { holding(names) } else { BTreeSet::new() },
        }
    }

    fn keeps(entries: &[(&str, &[&str])]) -> BTreeMap<WorkKey, BTreeSet<Identity>> {
        entries
            .iter()
            .map(|(name, names)| (key("c1", name), holding(names)))
            .collect()
    }

    #[test]
    fn a_work_losing_an_object_to_another_keeps_it_until_that_one_has_applied_it() {
        let desired = BTreeMap::from([(key("c1", "w-0"), holding(&["a"])), (key("c1", "w-1"), holding(&["b"]))]);
        // w-1 is new: w-0 keeps b until w-1 exists and is applied.
        let before = BTreeMap::from([(key("c1", "w-0"), current(&["a", "b"], true))]);
        assert_eq!(kept(&before, &desired), keeps(&[("w-0", &["b"])]));
        let written = BTreeMap::from([
            (key("c1", "w-0"), current(&["a", "b"], true)),
            (key("c1", "w-1"), current(&["b"], false)),
        ]);
        assert_eq!(kept(&written, &desired), keeps(&[("w-0", &["b"])]));
        let applied = BTreeMap::from([
            (key("c1", "w-0"), current(&["a", "b"], true)),
            (key("c1", "w-1"), current(&["b"], true)),
        ]);
        assert!(kept(&applied, &desired).is_empty());
    }

    #[test]
    fn only_the_objects_that_have_not_landed_elsewhere_are_kept() {
        // b moves to w-1 (applied), c to w-2 (not yet), e is deselected.
        let desired = BTreeMap::from([
            (key("c1", "w-0"), holding(&["a", "d"])),
            (key("c1", "w-1"), holding(&["b"])),
            (key("c1", "w-2"), holding(&["c"])),
        ]);
        let now = BTreeMap::from([
            (key("c1", "w-0"), current(&["a", "b", "c", "e"], true)),
            (key("c1", "w-1"), current(&["b"], true)),
        ]);
        assert_eq!(kept(&now, &desired), keeps(&[("w-0", &["c"])]));
    }

    #[test]
    fn a_work_deleted_while_its_objects_move_waits_too() {
        let desired = BTreeMap::from([
            (key("c1", "uid-a"), holding(&["a"])),
            (key("c1", "uid-b"), holding(&["b"])),
        ]);
        let before = BTreeMap::from([
            (key("c1", "w-0"), current(&["a", "b"], true)),
            (key("c1", "uid-a"), current(&["a"], true)),
        ]);
        assert_eq!(kept(&before, &desired), keeps(&[("w-0", &["b"])]));
    }

    #[test]
    fn a_binding_deleted_while_another_takes_its_objects_over_waits_for_it() {
        // Binding one's work is deleted; binding two's is to hold a in the same mailbox.
        let ours = BTreeMap::from([(key("c1", "one-w"), current(&["a", "b"], true))]);
        assert_eq!(dropped(&ours, &BTreeMap::new()), holding(&["a", "b"]));
        let desired = BTreeMap::from([(key("c1", "two-w"), holding(&["a"]))]);
        assert_eq!(kept(&ours, &desired), keeps(&[("one-w", &["a"])]));
        let mut landed = ours.clone();
        landed.insert(key("c1", "two-w"), current(&["a"], true));
        assert!(kept(&landed, &desired).is_empty());
    }

    #[test]
    fn an_object_landed_where_it_goes_is_not_kept_though_a_neighbour_there_failed() {
        let ours = BTreeMap::from([(key("c1", "one-w"), current(&["a", "b"], true))]);
        let desired = BTreeMap::from([(key("c1", "two-w"), holding(&["a", "b"]))]);
        let mut partly = ours.clone();
        let two = Current {
            objects: holding(&["a", "b"]),
            landed: holding(&["a"]),
        };
        partly.insert(key("c1", "two-w"), two);
        assert_eq!(kept(&partly, &desired), keeps(&[("one-w", &["b"])]));
    }

    #[test]
    fn objects_removed_or_moving_to_another_mailbox_do_not_wait() {
        // b is deselected; c goes to another WEC (a different destination): both just leave.
        let desired = BTreeMap::from([(key("c1", "w-0"), holding(&["a"])), (key("c2", "w-0"), holding(&["c"]))]);
        let before = BTreeMap::from([(key("c1", "w-0"), current(&["a", "b", "c"], true))]);
        assert!(kept(&before, &desired).is_empty());
        assert!(kept(&before, &BTreeMap::new()).is_empty());
    }
}
