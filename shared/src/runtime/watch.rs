//! Caches fed by watches: a reflector's stream is driven until stopped, and the controller is
//! told what changed. Every (re-)list is reported too, since deletions missed while a watch was
//! down show only as absences in the new list.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
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

/// The pauses between a failing watch's attempts: 0.8 s doubling up to 8 s, back to the
/// shortest 2 minutes after the last failure, and not started over by the watch's events. kube's
/// own back-off starts over at every event, and its watch yields one (`Init`) at the start of
/// each attempt to list, so a LIST that keeps failing (forbidden, say) was tried again every
/// 0.8 s for ever. Use with `WatchStreamExt::backoff` in place of `default_backoff`.
#[derive(Default)]
pub struct WatchBackoff {
    /// The last pause, and when it was asked for.
    last: Option<(Duration, Instant)>,
}

impl WatchBackoff {
    const FIRST: Duration = Duration::from_millis(800);
    const LONGEST: Duration = Duration::from_secs(8);
    const FORGOTTEN_AFTER: Duration = Duration::from_secs(120);

    /// The pause after a failure at `now`.
    fn pause_at(&mut self, now: Instant) -> Duration {
        let pause = match self.last {
            Some((last, at)) if now.duration_since(at) < Self::FORGOTTEN_AFTER => (last * 2).min(Self::LONGEST),
            _ => Self::FIRST,
        };
        self.last = Some((pause, now));
        pause
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.pause_at(Instant::now()))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    /// Only time starts it over (see above).
    fn reset(&mut self) {}
}

/// Consumes `stream` (already feeding a reflector) until `stop`, telling `on` what it saw.
pub async fn drive<K, S>(what: String, stream: S, stop: CancellationToken, mut on: impl FnMut(Seen<'_, K>))
where
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
            Some(Ok(watcher::Event::InitDone)) => on(Seen::Listed),
            Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => {}
            // The stream backs off and retries by itself; say why it is behind.
            Some(Err(err)) => tracing::warn!(watch = %what, error = %err, "watch failed, retrying"),
        }
    }
}

/// A cache of `api` (filtered by `config`), kept until `stop`, telling `on` what changed.
pub fn watch_into_store<K>(
    api: Api<K>,
    config: watcher::Config,
    stop: CancellationToken,
    on: impl FnMut(Seen<'_, K>) + Send + 'static,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    trimmed_store(api, config, |_| {}, stop, on)
}

/// [`watch_into_store`], caching only what `trim` leaves of each object.
fn trimmed_store<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: impl FnMut(&mut K) + Send + 'static,
    stop: CancellationToken,
    on: impl FnMut(Seen<'_, K>) + Send + 'static,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let kind = K::kind(&()).into_owned();
    let watched = watcher(api, config).backoff(WatchBackoff::default());
    let stream = super::watch_health::observe(kind.clone(), super::watch_health::WatchRole::Essential, watched)
        .modify(trim)
        .reflect(writer);
    tokio::spawn(drive(kind, stream, stop, on));
    store
}

/// A cache of `api` (filtered by `config`) whose changes become a controller's inputs: `changed`
/// for an object (`None` for one it ignores), `listed` for each (re-)list. Kept until `stop`, or
/// until the controller drops its receiver.
pub fn watch_into_inputs<K, I>(
    api: Api<K>,
    config: watcher::Config,
    stop: &CancellationToken,
    inputs: &UnboundedSender<I>,
    changed: fn(&K) -> Option<I>,
    listed: fn() -> I,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    I: Send + 'static,
{
    watch_trimmed_into_inputs(api, config, |_| {}, stop, inputs, changed, listed)
}

/// A trim for objects whose `managedFields` nobody reads: they are most of a large object's
/// metadata (a Binding's list every entry of its spec).
pub fn without_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// [`watch_into_inputs`], caching only what `trim` leaves of each object: for objects whose
/// large parts the controller never reads again, or whose parts it keeps only while it needs
/// them (`trim` may consult the controller's state).
pub fn watch_trimmed_into_inputs<K, I>(
    api: Api<K>,
    config: watcher::Config,
    trim: impl FnMut(&mut K) + Send + 'static,
    stop: &CancellationToken,
    inputs: &UnboundedSender<I>,
    changed: fn(&K) -> Option<I>,
    listed: fn() -> I,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    I: Send + 'static,
{
    watch_seen_into_inputs(api, config, trim, stop, inputs, move |seen| match seen {
        Seen::Changed(object) | Seen::Deleted(object) => changed(object),
        Seen::Listed => Some(listed()),
    })
}

/// [`watch_trimmed_into_inputs`] for a controller that tells changes from deletions and lists,
/// or keeps its own account of what the watch showed: `on` makes the inputs of each (the cache
/// already shows what they are about).
pub fn watch_seen_into_inputs<K, I, R>(
    api: Api<K>,
    config: watcher::Config,
    trim: impl FnMut(&mut K) + Send + 'static,
    stop: &CancellationToken,
    inputs: &UnboundedSender<I>,
    mut on: impl FnMut(Seen<'_, K>) -> R + Send + 'static,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    I: Send + 'static,
    R: IntoIterator<Item = I>,
{
    let (stop, inputs) = (stop.child_token(), inputs.clone());
    trimmed_store(api, config, trim, stop.clone(), move |seen| {
        for input in on(seen) {
            if inputs.send(input).is_err() {
                stop.cancel();
                return;
            }
        }
    })
}

/// Makes `$cached`, a cache's own form of the kind `$kind` (a struct with its `metadata` and only
/// what a controller reads of the rest), a [`Resource`] served as `$kind`: watched, listed and
/// looked up in the cache as that kind.
#[macro_export]
macro_rules! watched_as {
    ($cached:ty, $kind:ty) => {
        impl ::kube::Resource for $cached {
            type DynamicType = ();
            type Scope = <$kind as ::kube::Resource>::Scope;

            fn kind(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::kind(dt)
            }

            fn group(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::group(dt)
            }

            fn version(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::version(dt)
            }

            fn plural(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::plural(dt)
            }

            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

#[cfg(test)]
mod backoff_tests {
    use kube::runtime::utils::Backoff;

    use super::*;

    #[test]
    fn a_watch_that_keeps_failing_waits_longer_each_time_and_forgets_after_a_while() {
        let mut backoff = WatchBackoff::default();
        let start = Instant::now();
        let mut pauses = Vec::new();
        for i in 0..6 {
            pauses.push(backoff.pause_at(start + Duration::from_secs(i)));
            // What kube's stream does after each event, an attempt's `Init` included.
            backoff.reset();
        }
        let secs: Vec<f64> = pauses.iter().map(Duration::as_secs_f64).collect();
        assert_eq!(secs, [0.8, 1.6, 3.2, 6.4, 8.0, 8.0]);
        assert_eq!(backoff.pause_at(start + Duration::from_secs(200)), WatchBackoff::FIRST);
    }
}
