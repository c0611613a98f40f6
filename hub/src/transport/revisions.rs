//! Which ManifestWork changes are only their status. OCM's work agents rewrite a ManifestWork's
//! status as they apply it and every few seconds after; the Binding's plan reads none of it (only
//! which objects have landed, and that only while objects move: see `moves`), yet each brought a
//! plan of the Binding over all its objects and WECs, the most of the hub's CPU at 10,000 objects.
//! Such a change only brings the policy's propagation status in line.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use kube::api::ObjectMeta;

use super::moves::WorkKey;

/// What the last change the watch showed of each ManifestWork said apart from its status.
#[derive(Debug, Default)]
pub struct Revisions {
    seen: HashMap<WorkKey, u64>,
}

impl Revisions {
    /// The watch shows `work` with `metadata`: whether anything but its status may differ from
    /// the last time. Without a generation (which the apiserver raises with every change of the
    /// spec) nothing can be told apart, and it counts as changed.
    pub fn changed(&mut self, work: &WorkKey, metadata: &ObjectMeta) -> bool {
        let Some(revision) = revision(metadata) else {
            self.seen.remove(work);
            return true;
        };
        self.seen.insert(work.clone(), revision) != Some(revision)
    }

    /// `work` was deleted.
    pub fn forget(&mut self, work: &WorkKey) {
        self.seen.remove(work);
    }

    /// The watch re-listed: what was missed meanwhile shows only there.
    pub fn clear(&mut self) {
        self.seen.clear();
    }
}

/// What a status write leaves as it was: the generation, and the labels and annotations the plan
/// compares (another writer may change those without raising the generation).
fn revision(metadata: &ObjectMeta) -> Option<u64> {
    let generation = metadata.generation?;
    let mut hasher = DefaultHasher::new();
    (
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
