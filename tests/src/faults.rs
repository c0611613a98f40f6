//! What the fault suite looks for on the WECs: a user's object deleted or recreated. Every WEC
//! is watched from before the fault; a `DELETED` event, or an object seen again with another
//! UID (a delete and create missed while a watch was down), is a loss.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;

use crate::stack::Stack;

#[derive(Default)]
struct Seen {
    /// (WEC, namespace/name) → the UID first seen.
    uids: BTreeMap<(String, String), String>,
    losses: Vec<String>,
}

/// Watches objects of one resource on WECs and records every one deleted or recreated.
pub struct WecLosses {
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<JoinHandle<()>>,
}

impl WecLosses {
    /// Starts watching the objects of `resource` in `namespace` with labels `selector` on each
    /// of `wecs`; returns once every watch has listed what is there.
    pub async fn watch(
        stack: &Stack,
        wecs: &[&str],
        resource: &ApiResource,
        namespace: &str,
        selector: &str,
    ) -> anyhow::Result<WecLosses> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut tasks = Vec::new();
        for wec in wecs {
            let client: Client = stack.client(wec).await?;
            let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, resource);
            let config = watcher::Config::default().labels(selector);
            let (listed, mut first_list) = tokio::sync::oneshot::channel::<()>();
            let (seen, wec) = (seen.clone(), wec.to_string());
            let mut listed = Some(listed);
            tasks.push(tokio::spawn(async move {
                let stream = watcher(api, config).default_backoff();
                tokio::pin!(stream);
                while let Some(event) = stream.next().await {
                    let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                    match event {
                        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => seen.note(&wec, &o),
                        Ok(watcher::Event::Delete(o)) => {
                            let key = key(&o);
                            seen.losses.push(format!("{wec}: {key} deleted"));
                            seen.uids.remove(&(wec.clone(), key));
                        }
                        Ok(watcher::Event::InitDone) => {
                            if let Some(listed) = listed.take() {
                                let _ = listed.send(());
                            }
                        }
                        // A watch down (an apiserver restarted) is part of a fault; UIDs tell
                        // what was lost meanwhile.
                        Ok(watcher::Event::Init) | Err(_) => {}
                    }
                }
            }));
            tokio::time::timeout(Duration::from_secs(30), &mut first_list)
                .await
                .with_context(|| format!("listing {} on {}", resource.plural, wecs.join(",")))??;
        }
        Ok(WecLosses { seen, tasks })
    }

    /// The objects deleted or recreated so far, e.g. `cluster1: ns/cm-3 deleted`.
    pub fn losses(&self) -> Vec<String> {
        let mut losses = self.seen.lock().unwrap_or_else(PoisonError::into_inner).losses.clone();
        losses.sort();
        losses.dedup();
        losses
    }

    /// How many objects each WEC has now, as watched.
    pub fn count(&self, wec: &str) -> usize {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.uids.keys().filter(|(w, _)| w == wec).count()
    }
}

impl Seen {
    fn note(&mut self, wec: &str, object: &DynamicObject) {
        let key = key(object);
        let uid = object.uid().unwrap_or_default();
        match self.uids.insert((wec.to_string(), key.clone()), uid.clone()) {
            Some(before) if before != uid => self.losses.push(format!("{wec}: {key} recreated")),
            _ => {}
        }
        if object.metadata.deletion_timestamp.is_some() {
            self.losses.push(format!("{wec}: {key} being deleted"));
        }
    }
}

fn key(object: &DynamicObject) -> String {
    format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any())
}

impl Drop for WecLosses {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
