//! Which changes of ManifestWorks and BindingPolicies are only their status. OCM's work agents
//! rewrite a ManifestWork's status as they apply it and every few seconds after, and the hub
//! writes each policy's status; a Binding's plan reads none of it (only which objects have
//! landed, and that only while objects move: see `moves`), yet each brought a plan of the Binding
//! over all its objects and WECs, the most of the hub's CPU at 10,000 objects. Such a change only
//! brings the policy's propagation status in line.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use kube::api::ObjectMeta;

/// What the last change the watch showed of each object said apart from its status.
#[derive(Debug)]
pub struct Revisions<K> {
    seen: HashMap<K, u64>,
}

impl<K> Default for Revisions<K> {
    fn default() -> Self {
        Revisions { seen: HashMap::new() }
    }
}

impl<K: Hash + Eq + Clone> Revisions<K> {
    /// The watch shows the object `key` with `metadata`: whether anything but its status may
    /// differ from the last time (or it is new). Without a generation (which the apiserver raises
    /// with every change of the spec) nothing can be told apart, and it counts as changed.
    pub fn changed(&mut self, key: &K, metadata: &ObjectMeta) -> bool {
        let Some(revision) = revision(metadata) else {
            self.seen.remove(key);
            return true;
        };
        self.seen.insert(key.clone(), revision) != Some(revision)
    }

    /// `key` was deleted.
    pub fn forget(&mut self, key: &K) {
        self.seen.remove(key);
    }

    /// The watch re-listed: what was missed meanwhile shows only there.
    pub fn clear(&mut self) {
        self.seen.clear();
    }
}

/// What a status write leaves as it was: the object (its UID: one deleted and created again
/// starts at generation 1 again), the generation, and the labels and annotations (another writer
/// may change those without raising the generation).
fn revision(metadata: &ObjectMeta) -> Option<u64> {
    let generation = metadata.generation?;
    let mut hasher = DefaultHasher::new();
    (
        &metadata.uid,
        generation,
        &metadata.labels,
        &metadata.annotations,
        metadata.deletion_timestamp.is_some(),
    )
        .hash(&mut hasher);
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn meta(generation: Option<i64>, label: &str) -> ObjectMeta {
        ObjectMeta {
            generation,
            labels: Some(BTreeMap::from([("l".to_string(), label.to_string())])),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_a_change_of_generation_labels_or_annotations_counts() {
        let mut revisions = Revisions::default();
        let key = ("c1".to_string(), "w".to_string());
        assert!(revisions.changed(&key, &meta(Some(1), "a")), "first seen");
        assert!(!revisions.changed(&key, &meta(Some(1), "a")), "its status changed");
        let mut replaced = meta(Some(1), "a");
        replaced.uid = Some("another".into());
        assert!(
            revisions.changed(&key, &replaced),
            "deleted and created again, the deletion unseen"
        );
        assert!(revisions.changed(&key, &meta(Some(1), "a")));
        assert!(!revisions.changed(&key, &meta(Some(1), "a")), "its status changed");
        assert!(revisions.changed(&key, &meta(Some(2), "a")), "a new spec");
        assert!(revisions.changed(&key, &meta(Some(2), "b")), "a label edited by hand");
        let mut deleting = meta(Some(2), "b");
        deleting.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(revisions.changed(&key, &deleting), "being deleted");
        revisions.forget(&key);
        assert!(revisions.changed(&key, &deleting), "deleted and seen again");
        revisions.clear();
        assert!(revisions.changed(&key, &deleting), "re-listed");
    }

    #[test]
    fn without_a_generation_every_change_counts() {
        let mut revisions = Revisions::default();
        let key = ("c1".to_string(), "w".to_string());
        assert!(revisions.changed(&key, &meta(None, "a")));
        assert!(revisions.changed(&key, &meta(None, "a")));
    }
}
