//! Packing a Binding's objects into wrapped objects (ManifestWorks) of bounded size and count,
//! with stable assignment: an object stays in the shard it was in as long as that shard can hold
//! it, so adding or removing one object never moves the others (upstream packs by position,
//! which moves them and makes WECs delete and re-create objects).

use std::collections::BTreeMap;

/// Limits of one wrapped object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes: the sum of the objects' JSON lengths must stay below this.
    pub max_size: usize,
    /// Objects per wrapped object.
    pub max_count: usize,
}

/// Upstream's defaults (`--max-size-wrapped`, `--max-num-wrapped`).
pub const DEFAULT_LIMITS: Limits = Limits {
    max_size: 512_000,
    max_count: 512_000,
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("failed to wrap object that is larger than max size: {key} is {size} bytes, the limit is {max_size}")]
    TooLarge { key: String, size: usize, max_size: usize },
}

#[derive(Default, Clone, Copy)]
struct Fill {
    bytes: usize,
    count: usize,
}

impl Fill {
    fn takes(&self, size: usize, limits: Limits) -> bool {
        self.bytes + size < limits.max_size && self.count < limits.max_count
    }

    fn add(&mut self, size: usize) {
        self.bytes += size;
        self.count += 1;
    }
}

/// Assigns each object a shard index: `objects` are `(key, size)` in key order, `previous[i]`
/// the shard object `i` is in now (as the current wrapped objects show). Objects keep their
/// shard while it has room (in key order), the rest go to the lowest shard with room, opening
/// new ones as needed. Returns each object's shard, by position: the transport plans thousands
/// of objects for each WEC, and maps keyed by object were most of its time.
pub fn assign<K: std::fmt::Display>(
    objects: &[(K, usize)],
    previous: &[Option<usize>],
    limits: Limits,
) -> Result<Vec<usize>, ShardError> {
    if let Some((key, size)) = objects.iter().find(|(_, size)| *size >= limits.max_size) {
        return Err(ShardError::TooLarge {
            key: key.to_string(),
            size: *size,
            max_size: limits.max_size,
        });
    }
    let mut fills: BTreeMap<usize, Fill> = BTreeMap::new();
    let mut assigned = vec![None; objects.len()];
    for (i, (_, size)) in objects.iter().enumerate() {
        if let Some(shard) = previous.get(i).copied().flatten()
            && fills.get(&shard).copied().unwrap_or_default().takes(*size, limits)
        {
            fills.entry(shard).or_default().add(*size);
            assigned[i] = Some(shard);
        }
    }
    Ok(objects
        .iter()
        .zip(assigned)
        .map(|((_, size), kept)| {
            kept.unwrap_or_else(|| {
                let shard = (0..)
                    .find(|s| fills.get(s).copied().unwrap_or_default().takes(*size, limits))
                    .unwrap_or(0);
                fills.entry(shard).or_default().add(*size);
                shard
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const SMALL: Limits = Limits {
        max_size: 100,
        max_count: 3,
    };

    /// `(key, size)`s in key order, as the transport lists them.
    fn objects(entries: &[(&str, usize)]) -> Vec<(String, usize)> {
        let sorted: BTreeMap<String, usize> = entries.iter().map(|(k, s)| (k.to_string(), *s)).collect();
        sorted.into_iter().collect()
    }

    /// Each object's shard, by key.
    fn by_key(objects: &[(String, usize)], assigned: &[usize]) -> BTreeMap<String, usize> {
        objects
            .iter()
            .map(|(k, _)| k.clone())
            .zip(assigned.iter().copied())
            .collect()
    }

    /// What the shards of `before` say of each of `objects`: the `previous` of a later plan.
    fn carried(before: &BTreeMap<String, usize>, objects: &[(String, usize)]) -> Vec<Option<usize>> {
        objects.iter().map(|(k, _)| before.get(k).copied()).collect()
    }

    #[test]
    fn packs_by_count_and_size() {
        let four = objects(&[("a", 1), ("b", 1), ("c", 1), ("d", 1)]);
        let by_count = by_key(&four, &assign(&four, &[], SMALL).unwrap());
        assert_eq!(by_count.values().filter(|s| **s == 0).count(), 3);
        assert_eq!(by_count["d"], 1);
        let two = objects(&[("a", 60), ("b", 60)]);
        let by_size = assign(&two, &[], SMALL).unwrap();
        assert_ne!(by_size[0], by_size[1], "60 + 60 does not fit under 100");
    }

    #[test]
    fn an_object_alone_over_the_limit_is_an_error() {
        let err = assign(&objects(&[("big", 100)]), &[], SMALL).unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed to wrap object that is larger than max size: big is 100 bytes, the limit is 100"
        );
    }

    #[test]
    fn adding_an_object_moves_no_other() {
        let first = objects(&[("b", 1), ("c", 1), ("d", 1), ("e", 1)]);
        let before = by_key(&first, &assign(&first, &[], SMALL).unwrap());
        // "a" sorts first: positional packing would shift everything after it.
        let next = objects(&[("a", 1), ("b", 1), ("c", 1), ("d", 1), ("e", 1)]);
        let after = by_key(&next, &assign(&next, &carried(&before, &next), SMALL).unwrap());
        for (key, shard) in &before {
            assert_eq!(after[key], *shard, "{key} stayed");
        }
    }

    fn sizes() -> impl Strategy<Value = BTreeMap<String, usize>> {
        prop::collection::btree_map("[a-h]{1,2}", 1usize..60, 0..20)
    }

    proptest! {
        #[test]
        fn every_shard_is_within_limits(objects in sizes(), max_count in 1usize..5) {
            let limits = Limits { max_size: 100, max_count };
            let objects: Vec<(String, usize)> = objects.into_iter().collect();
            let assigned = assign(&objects, &[], limits).unwrap();
            prop_assert_eq!(assigned.len(), objects.len());
            let mut fills: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
            for ((_, size), shard) in objects.iter().zip(&assigned) {
                let fill = fills.entry(*shard).or_default();
                fill.0 += size;
                fill.1 += 1;
            }
            for (bytes, count) in fills.values() {
                prop_assert!(*bytes < limits.max_size && *count <= limits.max_count);
            }
        }

        #[test]
        fn unchanged_objects_keep_their_shard(objects in sizes(), change in sizes(), max_count in 1usize..5) {
            let limits = Limits { max_size: 100, max_count };
            let first: Vec<(String, usize)> = objects.clone().into_iter().collect();
            let before = by_key(&first, &assign(&first, &[], limits).unwrap());
            // Add and remove some objects; the ones present in both keep their shard.
            let mut next: BTreeMap<String, usize> = objects.iter().filter(|(k, _)| !change.contains_key(*k)).map(|(k, s)| (k.clone(), *s)).collect();
            next.extend(change.iter().filter(|(k, _)| !objects.contains_key(*k)).map(|(k, s)| (k.clone(), *s)));
            let next: Vec<(String, usize)> = next.into_iter().collect();
            let after = by_key(&next, &assign(&next, &carried(&before, &next), limits).unwrap());
            for (key, _) in next.iter().filter(|(k, _)| objects.contains_key(k)) {
                prop_assert_eq!(after[key], before[key]);
            }
        }
    }
}
