//! One dynamic informer per delivered GVR on the WEC, started and stopped as the tracker's
//! reference counts say. Each keeps a cache (of metadata and status only, all that is read)
//! and reports which objects changed, and when it has listed everything. One that cannot list
//! (forbidden while the agent's ClusterRole lacks the group) says why and tries again after a
//! growing pause.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt};
use ks_shared::runtime::watch_health::{self, WatchRole};
use ks_shared::runtime::{Seen, WatchBackoff, drive};
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
        let watched = watcher(api, watcher::Config::default()).backoff(WatchBackoff::default());
        let stream = watch_health::observe(format!("workload:{gvr}"), WatchRole::OneOfMany, watched)
            .modify(keep_what_is_reported)
            .reflect(writer);
        let stream = explain_failures(gvr.clone(), stream);
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

/// Logs why the watch of `gvr` failed, saying what a forbidden one means for the user, and
/// takes the failures out of `stream` (it retries by itself).
fn explain_failures<S, K>(gvr: Gvr, stream: S) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    stream.filter(move |event| {
        if let Err(err) = event {
            if is_forbidden(err) {
                tracing::warn!(gvr = %gvr, error = %err,
                    "the agent may not read {gvr} on this WEC: its ClusterRole lacks the group \"{}\" (the status \
                     add-on grants the groups of the KubeStellar ManifestWorks in this WEC's mailbox); no WorkStatus \
                     for these objects until it may; trying again after a growing pause", gvr.group);
            } else {
                tracing::warn!(gvr = %gvr, error = %err, "watching {gvr} failed; trying again after a growing pause");
            }
        }
        std::future::ready(event.is_ok())
    })
}

/// Whether a watch failed because the agent may not list or watch the resource.
fn is_forbidden(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.is_forbidden(),
        watcher::Error::WatchError(status) => status.is_forbidden(),
        _ => false,
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
    fn forbidden_is_told_apart() {
        let status = |code: u16| {
            kube::core::Status::failure("no", if code == 403 { "Forbidden" } else { "NotFound" }).with_code(code)
        };
        let api = |code| kube::Error::Api(Box::new(status(code)));
        assert!(is_forbidden(&watcher::Error::InitialListFailed(api(403))));
        assert!(is_forbidden(&watcher::Error::WatchError(Box::new(status(403)))));
        assert!(!is_forbidden(&watcher::Error::InitialListFailed(api(404))));
        assert!(!is_forbidden(&watcher::Error::NoResourceVersion));
    }

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
