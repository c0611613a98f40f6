//! One object in two wrapped objects of a mailbox (two Bindings send it to one WEC, or it moves
//! between shards). OCM's agent applies both as one field manager, so the WEC copy is what it
//! applied last; and one that goes, or drops the object, may have been applied last with content
//! the WDS has changed since (nothing rewrites a wrapped object on its way out). So each wrapped
//! object carries a label naming, by digest, the others of its mailbox that hold an object it
//! holds. When one of those is gone, or its destination has let the object go, the label of each
//! that stays changes, and OCM's agent applies it again: it does on a label change, as on a spec
//! change, and otherwise only every 4 to 6 minutes.

use std::collections::{BTreeSet, HashMap};

use crate::transport::types::{Identity, WorkKey};

/// Which wrapped objects of each mailbox hold each object, or have their destination hold it.
pub struct Holders<'a>(HashMap<(&'a str, &'a Identity), BTreeSet<&'a str>>);

impl<'a> Holders<'a> {
    /// From each wrapped object's (mailbox, name) and what it holds or has held.
    pub fn new<H>(works: impl IntoIterator<Item = (&'a str, &'a str, H)>) -> Holders<'a>
    where
        H: IntoIterator<Item = &'a Identity>,
    {
        let mut by_object: HashMap<(&'a str, &'a Identity), BTreeSet<&'a str>> = HashMap::new();
        for (mailbox, name, holds) in works {
            for object in holds {
                by_object.entry((mailbox, object)).or_default().insert(name);
            }
        }
        Holders(by_object)
    }

    /// The names of the other wrapped objects of `key`'s mailbox that hold any of `objects`.
    pub fn sharers<'o>(&self, key: &WorkKey, objects: impl IntoIterator<Item = &'o Identity>) -> BTreeSet<&'a str> {
        let mut names = BTreeSet::new();
        for object in objects {
            if let Some(holders) = self.0.get(&(key.0.as_str(), object)) {
                names.extend(holders.iter().filter(|name| **name != key.1));
            }
        }
        names
    }
}

/// The label's value for `sharers`: a digest of their names (a label value is at most 63
/// characters), empty for none.
pub fn label(sharers: &BTreeSet<&str>) -> String {
    if sharers.is_empty() {
        return String::new();
    }
    let names: Vec<&str> = sharers.iter().copied().collect();
    let digest = ring::digest::digest(&ring::digest::SHA256, names.join("\n").as_bytes());
    digest.as_ref()[..10].iter().map(|b| format!("{b:02x}")).collect()
}

/// A fingerprint of what a wrapped object holds, or has its destination hold for it: when it
/// changes (or the wrapped object goes), the label of the others that share may.
pub fn fingerprint<'a>(holds: impl IntoIterator<Item = &'a Identity>) -> u64 {
    use std::hash::{Hash, Hasher};
    let holds: BTreeSet<&Identity> = holds.into_iter().collect();
    let mut hasher = std::hash::DefaultHasher::new();
    holds.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::transport::plan::moves::tests::{holding, key, object};

    #[test]
    fn the_others_of_the_mailbox_holding_one_of_its_objects_share() {
        let works = BTreeMap::from([
            (key("c1", "one"), holding(&["a", "b"])),
            (key("c1", "two"), holding(&["b"])),
            (key("c1", "three"), holding(&["c"])),
            (key("c2", "four"), holding(&["a"])),
        ]);
        let holders = Holders::new(works.iter().map(|((m, n), h)| (m.as_str(), n.as_str(), h)));
        let of = |name: &str| {
            let k = key("c1", name);
            holders.sharers(&k, &works[&k]).into_iter().collect::<Vec<_>>()
        };
        assert_eq!(of("one"), ["two"]);
        assert_eq!(of("two"), ["one"]);
        assert!(of("three").is_empty());
        // Objects it does not hold yet, as it is to be written.
        assert_eq!(
            holders.sharers(&key("c1", "three"), &holding(&["a"])),
            BTreeSet::from(["one"])
        );
    }

    #[test]
    fn the_label_changes_when_a_sharer_goes_and_is_empty_without_one() {
        let both = label(&BTreeSet::from(["one", "two"]));
        let one = label(&BTreeSet::from(["one"]));
        assert_ne!(both, one);
        assert_eq!(one, label(&BTreeSet::from(["one"])));
        assert!(!one.is_empty() && one.len() <= 63 && one.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_eq!(label(&BTreeSet::new()), "");
    }

    #[test]
    fn the_fingerprint_reads_the_set_not_its_order() {
        let (a, b) = (object("a"), object("b"));
        assert_eq!(fingerprint([&a, &b]), fingerprint([&b, &a, &b]));
        assert_ne!(fingerprint([&a, &b]), fingerprint([&a]));
    }
}
