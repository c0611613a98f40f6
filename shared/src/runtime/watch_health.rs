//! How each watch of the process is doing. `kubestellar_watch_errors_total{watch}` counts its
//! failed attempts (a LIST or WATCH refused, a response that does not decode), and
//! `kubestellar_watch_stuck{watch}` is 1 while it has failed [`STUCK_AFTER`] times in a row with
//! no list finished and no event between. `/readyz` names the stuck ones with their last error;
//! one the process cannot work without ([`WatchRole::Essential`]) makes it not ready.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::sync::{Mutex, OnceLock, PoisonError};

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Failures in a row, with nothing getting through between, after which a watch is stuck: with
/// [`super::WatchBackoff`] about 6 s of failing (0.8 + 1.6 + 3.2 s pauses), past a blip.
pub const STUCK_AFTER: u32 = 3;

/// What a watch is to its process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchRole {
    /// Its controllers cannot work without it: stuck, the process is not ready.
    Essential,
    /// One resource among many (a workload informer): stuck, the rest works on, and it is said
    /// where users look (the Binding) rather than by readiness.
    OneOfMany,
}

/// A watch that has failed [`STUCK_AFTER`] times in a row or more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stuck {
    pub watch: String,
    pub role: WatchRole,
    pub failures: u32,
    pub last_error: String,
}

impl Display for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "watch {} stuck: {} failures in a row, the last: {}",
            self.watch, self.failures, self.last_error
        )
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabel {
    watch: String,
}

#[derive(Debug)]
struct State {
    watch: String,
    role: WatchRole,
    failures: u32,
    last_error: String,
}

/// The watches followed now, by the number each was given when it started: one name may stand
/// for several (each controller of the hub watches Bindings).
#[derive(Default)]
struct Watches {
    errors: Family<WatchLabel, Counter>,
    stuck: Family<WatchLabel, Gauge>,
    states: Mutex<(u64, BTreeMap<u64, State>)>,
}

fn watches() -> &'static Watches {
    static WATCHES: OnceLock<Watches> = OnceLock::new();
    WATCHES.get_or_init(Watches::default)
}

type States = (u64, BTreeMap<u64, State>);

impl Watches {
    fn lock(&self) -> std::sync::MutexGuard<'_, States> {
        self.states.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn start(&self, watch: &str, role: WatchRole) -> u64 {
        let mut states = self.lock();
        states.0 += 1;
        let instance = states.0;
        let state = State {
            watch: watch.to_string(),
            role,
            failures: 0,
            last_error: String::new(),
        };
        states.1.insert(instance, state);
        self.show(&states, watch);
        instance
    }

    fn failed(&self, instance: u64, error: String) {
        let mut states = self.lock();
        let Some(state) = states.1.get_mut(&instance) else {
            return;
        };
        self.errors.get_or_create(&label(&state.watch)).inc();
        state.failures += 1;
        state.last_error = error;
        let watch = state.watch.clone();
        self.show(&states, &watch);
    }

    fn got_through(&self, instance: u64) {
        let mut states = self.lock();
        let Some(state) = states.1.get_mut(&instance).filter(|s| s.failures > 0) else {
            return;
        };
        state.failures = 0;
        let watch = state.watch.clone();
        self.show(&states, &watch);
    }

    fn stopped(&self, instance: u64) {
        let mut states = self.lock();
        if let Some(state) = states.1.remove(&instance) {
            if states.1.values().any(|s| s.watch == state.watch) {
                self.show(&states, &state.watch);
            } else {
                self.stuck.remove(&label(&state.watch));
            }
        }
    }

    /// Sets the gauge of the watches named `watch`: 1 if any of them is stuck.
    fn show(&self, states: &States, watch: &str) {
        let stuck = states.1.values().any(|s| s.watch == watch && s.failures >= STUCK_AFTER);
        self.stuck.get_or_create(&label(watch)).set(i64::from(stuck));
    }
}

fn label(watch: &str) -> WatchLabel {
    WatchLabel {
        watch: watch.to_string(),
    }
}

/// Adds the two families to a registry.
pub fn register(registry: &mut Registry) {
    let watches = watches();
    registry.register(
        "kubestellar_watch_errors",
        "Failed attempts of each watch (a LIST or WATCH refused, or a response that does not decode)",
        watches.errors.clone(),
    );
    registry.register(
        "kubestellar_watch_stuck",
        "1 while a watch has failed 3 times in a row with nothing getting through",
        watches.stuck.clone(),
    );
}

/// The watches stuck now, by name.
pub fn stuck() -> Vec<Stuck> {
    watches()
        .lock()
        .1
        .values()
        .filter(|s| s.failures >= STUCK_AFTER)
        .map(|s| Stuck {
            watch: s.watch.clone(),
            role: s.role,
            failures: s.failures,
            last_error: s.last_error.clone(),
        })
        .collect()
}

/// The watch `watch` if it is stuck now.
pub fn stuck_watch(watch: &str) -> Option<Stuck> {
    stuck().into_iter().find(|s| s.watch == watch)
}

/// A watch followed, from its start until it is dropped (then forgotten).
pub struct Followed(u64);

impl Followed {
    pub fn start(watch: impl Into<String>, role: WatchRole) -> Followed {
        Followed(watches().start(&watch.into(), role))
    }

    /// An attempt failed (to list, to watch, or to decode what came).
    pub fn failed(&self, error: &impl Display) {
        watches().failed(self.0, error.to_string());
    }

    /// A list finished or an event came.
    pub fn got_through(&self) {
        watches().got_through(self.0);
    }
}

impl Drop for Followed {
    fn drop(&mut self) {
        watches().stopped(self.0);
    }
}

/// `stream` (a watcher's), followed as `watch` until it is dropped: each error counted, and the
/// watch stuck while errors come [`STUCK_AFTER`] times in a row with no finished list and no
/// event between (the event opening each attempt to list does not count: one comes before
/// every attempt).
pub fn observe<K, E, S>(
    watch: impl Into<String>,
    role: WatchRole,
    stream: S,
) -> impl Stream<Item = Result<watcher::Event<K>, E>>
where
    E: Display,
    S: Stream<Item = Result<watcher::Event<K>, E>>,
{
    let followed = Followed::start(watch, role);
    stream.inspect(move |event| match event {
        Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
        Ok(_) => followed.got_through(),
        Err(err) => followed.failed(err),
    })
}
