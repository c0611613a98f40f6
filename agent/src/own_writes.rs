//! Read-your-writes for the WorkStatus cache. The cache learns of our own write only when its
//! watch event arrives; a reconcile in between would compare with the older object, see a
//! difference that is no longer there and write again (with a fresh `lastCurrencyUpdateTime`
//! and trace context: a real, useless write). So each write's result is kept until the cache
//! has caught up with it, and reconciles compare with whichever is newer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use ks_shared::api::WorkStatus;
use kube::ResourceExt;

use crate::existing::Existing;

/// The objects our writes returned, by WorkStatus name, until the cache shows them.
#[derive(Default)]
pub struct OwnWrites {
    written: Mutex<HashMap<String, Arc<Existing>>>,
}

impl OwnWrites {
    /// Remembers what a write returned, as much of it as the cache keeps.
    pub fn record(&self, written: WorkStatus) {
        let name = written.name_any();
        self.lock().insert(name, Arc::new(Existing::from(written)));
    }

    /// Forgets `name` (deleted).
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Forgets everything (the cache has just listed afresh).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The newer of the cached object and our last write of `name`; forgets the write once the
    /// cache has caught up with it.
    pub fn latest(&self, name: &str, cached: Option<Arc<Existing>>) -> Option<Arc<Existing>> {
        let mut written = self.lock();
        let Some(ours) = written.get(name) else {
            return cached;
        };
        if cached.as_ref().is_some_and(|c| !is_older(c, ours)) {
            written.remove(name);
            return cached;
        }
        Some(ours.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Existing>>> {
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// True when `cached` predates `ours`. resourceVersions are opaque to clients in principle, but
/// every apiserver backed by etcd hands out increasing integers, which is what lets us tell;
/// anything else is taken as not older (the cache wins, as it would without this module).
fn is_older(cached: &Existing, ours: &Existing) -> bool {
    let version = |ws: &Existing| ws.resource_version().and_then(|v| v.parse::<u64>().ok());
    matches!((version(cached), version(ours)), (Some(c), Some(o)) if c < o)
}

#[cfg(test)]
mod tests {
    use ks_shared::api::WorkStatusFields;

    use super::*;

    fn at(version: &str) -> WorkStatus {
        let mut ws = WorkStatus::new("ws", WorkStatusFields::default());
        ws.metadata.resource_version = Some(version.into());
        ws
    }

    #[test]
    fn our_write_wins_until_the_cache_catches_up() {
        let own = OwnWrites::default();
        assert!(own.latest("ws", None).is_none());
        own.record(at("10"));
        let got = own.latest("ws", Some(Arc::new(at("9").into()))).unwrap();
        assert_eq!(got.resource_version().as_deref(), Some("10"));
        assert_eq!(
            own.latest("ws", None).unwrap().resource_version().as_deref(),
            Some("10")
        );
        let got = own.latest("ws", Some(Arc::new(at("10").into()))).unwrap();
        assert_eq!(got.resource_version().as_deref(), Some("10"));
        assert_eq!(own.len(), 0, "forgotten once the cache has it");
        own.record(at("11"));
        own.forget("ws");
        assert_eq!(own.len(), 0);
    }
}
