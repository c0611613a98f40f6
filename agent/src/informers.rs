//! One dynamic informer per delivered GVR on the WEC, started and stopped as the tracker's
//! reference counts say. Each keeps a cache (of metadata and status only, all that is read)
//! and reports which objects changed, and when it has listed everything.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ks_shared::runtime::{Seen, drive};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::kinds::Kind;
use crate::objects::{Gvr, ObjectId};

/// What an informer reports.
#[derive(Debug)]
pub enum InformerEvent {
    /// An object was added, changed or deleted.
    Changed(ObjectId),
    /// The informer has (re)listed its GVR: its cache is complete. Objects deleted while it was
    /// not watching show up only here.
    Listed(Gvr),
}

/// Called for every event; must not block.
pub type OnEvent = Arc<dyn Fn(InformerEvent) + Send + Sync>;

/// What a cache lookup found.
#[derive(Debug)]
pub enum Lookup {
    /// No informer runs for the GVR, or it has not listed yet.
    NotSynced,
    Missing,
    Found(Arc<DynamicObject>),
}

struct Informer {
    store: Store<DynamicObject>,
    resource: kube::discovery::ApiResource,
    listed: Arc<AtomicBool>,
    stop: CancellationToken,
}

/// The running informers, by GVR.
pub struct Informers {
    client: Client,
    running: HashMap<Gvr, Informer>,
}

impl Informers {
    pub fn new(client: Client) -> Informers {
        Informers {
            client,
            running: HashMap::new(),
        }
    }

    /// Starts the informer for `gvr` (no-op when it runs); it stops with `shutdown` at the latest.
    pub fn start(&mut self, gvr: &Gvr, kind: &Kind, on_event: OnEvent, shutdown: &CancellationToken) {
        if self.running.contains_key(gvr) {
            return;
        }
        let resource = kind.resource.clone();
        let writer = Writer::new(resource.clone());
        let store = writer.as_reader();
        let listed = Arc::new(AtomicBool::new(false));
        let stop = shutdown.child_token();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(keep_what_is_reported)
            .reflect(writer);
        let id = gvr.clone();
        let has_listed = listed.clone();
        tokio::spawn(drive(gvr.to_string(), stream, stop.clone(), move |seen| {
            on_event(match seen {
                Seen::Changed(object) | Seen::Deleted(object) => InformerEvent::Changed(ObjectId {
                    gvr: id.clone(),
                    namespace: object.metadata.namespace.clone().unwrap_or_default(),
                    name: object.metadata.name.clone().unwrap_or_default(),
                }),
                Seen::Listed => {
                    // Before the event, whose handler may look the cache up.
                    has_listed.store(true, Ordering::Release);
                    InformerEvent::Listed(id.clone())
                }
            })
        }));
        tracing::info!(gvr = %gvr, kind = %kind.resource.kind, "started informer");
        self.running.insert(
            gvr.clone(),
            Informer {
                store,
                resource,
                listed,
                stop,
            },
        );
    }

    /// Stops the informer for `gvr` and drops its cache.
    pub fn stop(&mut self, gvr: &Gvr) {
        if let Some(informer) = self.running.remove(gvr) {
            informer.stop.cancel();
            tracing::info!(gvr = %gvr, "stopped informer");
        }
    }

    /// The cached object `id`.
    pub fn get(&self, id: &ObjectId) -> Lookup {
        let Some(informer) = self.running.get(&id.gvr) else {
            return Lookup::NotSynced;
        };
        if !informer.listed.load(Ordering::Acquire) {
            return Lookup::NotSynced;
        }
        let mut reference = ObjectRef::new_with(&id.name, informer.resource.clone());
        if !id.namespace.is_empty() {
            reference = reference.within(&id.namespace);
        }
        match informer.store.get(&reference) {
            Some(object) => Lookup::Found(object),
            None => Lookup::Missing,
        }
    }

    /// How many informers run.
    pub fn len(&self) -> usize {
        self.running.len()
    }
}

/// Keeps of a WEC object what a WorkStatus reports (see `report::desired`): its metadata without
/// managedFields, and its `.status`. The rest, a Pod's or Deployment's spec above all, was most
/// of the cache.
fn keep_what_is_reported(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
    let status = object.data.get_mut("status").map(Value::take);
    object.data = Value::Object(status.map(|s| ("status".to_string(), s)).into_iter().collect());
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_cache_keeps_metadata_and_status() {
        let object = |spec: Value, status: Option<Value>| {
            let mut whole = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "ns", "generation": 3,
                             "labels": {"app": "web"}, "annotations": {"a": "b"},
                             "managedFields": [{"manager": "work-agent", "operation": "Apply"}]},
                "spec": spec});
            if let Some(status) = status {
                whole["status"] = status;
            }
            serde_json::from_value::<DynamicObject>(whole).unwrap()
        };
        let mut deployment = object(json!({"replicas": 2}), Some(json!({"observedGeneration": 3})));
        let metadata = deployment.metadata.clone();
        keep_what_is_reported(&mut deployment);
        assert_eq!(deployment.data, json!({"status": {"observedGeneration": 3}}));
        assert_eq!(deployment.metadata.managed_fields, None);
        assert_eq!(deployment.metadata.labels, metadata.labels);
        assert_eq!(deployment.metadata.annotations, metadata.annotations);
        assert_eq!(deployment.metadata.generation, Some(3));

        let mut statusless = object(json!({"data": "x"}), None);
        keep_what_is_reported(&mut statusless);
        assert_eq!(statusless.data, json!({}));
    }
}
