//! Drives a reflector's watch stream: keeps its cache, notes when it has listed, and tells the
//! caller what changed, until stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

/// What a watch saw.
pub enum Seen<'a, K> {
    /// An object was added or changed.
    Changed(&'a K),
    /// An object was deleted.
    Deleted(&'a K),
    /// The cache holds a complete list (after the first list and after every re-list).
    Listed,
}

/// Consumes `stream` (already feeding a reflector) until `stop`; `listed` turns true at the
/// first complete list.
pub async fn drive<K, S>(
    what: String,
    stream: S,
    listed: Arc<AtomicBool>,
    stop: CancellationToken,
    mut on: impl FnMut(Seen<'_, K>),
) where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    futures::pin_mut!(stream);
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            event = stream.next() => event,
        };
        match event {
            None => return,
            Some(Ok(watcher::Event::Apply(object))) => on(Seen::Changed(&object)),
            Some(Ok(watcher::Event::Delete(object))) => on(Seen::Deleted(&object)),
            Some(Ok(watcher::Event::InitDone)) => {
                listed.store(true, Ordering::Release);
                on(Seen::Listed);
            }
            Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => {}
            // The stream backs off and retries by itself; say why it is behind.
            Some(Err(err)) => tracing::warn!(watch = %what, error = %err, "watch failed, retrying"),
        }
    }
}
