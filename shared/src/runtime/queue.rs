//! A keyed work queue that coalesces: a key already waiting is not added twice, a key being
//! worked on is handed out again (once) after its worker finishes, and never to two workers at
//! once. Workers read the latest state from caches, so a burst of events for one object becomes
//! one reconcile of its latest state. Failed keys come back after a capped exponential back-off
//! ([`super::backoff::pause`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::backoff::pause;
use super::metrics::QueueMetrics;

/// The queue; clones share it.
pub struct WorkQueue<K> {
    state: Arc<Mutex<State<K>>>,
    ready: Arc<Notify>,
    /// A failed key's first pause, doubling with each further failure up to `max`.
    min: Duration,
    max: Duration,
    /// Set to the number of waiting keys whenever it changes, under the queue's lock: set by
    /// callers after the fact, two threads could leave it at a stale count.
    depth: Gauge,
    /// Adds, retries, and how long keys wait and are worked on.
    times: QueueMetrics,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            state: self.state.clone(),
            ready: self.ready.clone(),
            min: self.min,
            max: self.max,
            depth: self.depth.clone(),
            times: self.times.clone(),
        }
    }
}

struct State<K> {
    order: VecDeque<K>,
    /// Since when each waiting key waits.
    waiting: HashMap<K, Instant>,
    /// Since when each key is worked on.
    working: HashMap<K, Instant>,
    /// Added while being worked on: queue again when the worker is done.
    again: HashSet<K>,
    failures: HashMap<K, u32>,
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// A queue whose failed keys wait `min`, doubling up to `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        WorkQueue {
            state: Arc::new(Mutex::new(State {
                order: VecDeque::new(),
                waiting: HashMap::new(),
                working: HashMap::new(),
                again: HashSet::new(),
                failures: HashMap::new(),
            })),
            ready: Arc::new(Notify::new()),
            min,
            max,
            depth: Gauge::default(),
            times: QueueMetrics::default(),
        }
    }

    /// The same queue, keeping `depth` at its number of waiting keys and measuring into `times`.
    pub fn measured_by(self, depth: Gauge, times: QueueMetrics) -> Self {
        depth.set(self.lock().order.len() as i64);
        WorkQueue { depth, times, ..self }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        // The state stays consistent under a panic elsewhere: every update is one step.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `key` unless it is already waiting.
    pub fn add(&self, key: K) {
        let mut state = self.lock();
        if state.working.contains_key(&key) {
            state.again.insert(key);
            return;
        }
        if !state.waiting.contains_key(&key) {
            state.waiting.insert(key.clone(), Instant::now());
            self.times.added();
            state.order.push_back(key);
            self.depth.set(state.order.len() as i64);
            drop(state);
            self.ready.notify_one();
        }
    }

    /// The next key to work on, waiting for one; `None` once `shutdown` is cancelled.
    pub async fn next(&self, shutdown: &CancellationToken) -> Option<K> {
        loop {
            if let Some((key, more)) = self.pop() {
                if more {
                    // Wake another worker: one notification may stand for several keys.
                    self.ready.notify_one();
                }
                return Some(key);
            }
            tokio::select! {
                _ = self.ready.notified() => {}
                _ = shutdown.cancelled() => return None,
            }
        }
    }

    fn pop(&self) -> Option<(K, bool)> {
        let mut state = self.lock();
        let key = state.order.pop_front()?;
        self.depth.set(state.order.len() as i64);
        let now = Instant::now();
        if let Some(since) = state.waiting.remove(&key) {
            self.times.started(now - since);
        }
        state.working.insert(key.clone(), now);
        Some((key, !state.order.is_empty()))
    }

    /// Marks `key` done. After a failure it is queued again after a backoff; after a success
    /// its failure count is forgotten. Either way, if it was added meanwhile it is queued now.
    pub fn done(&self, key: K, succeeded: bool) {
        let (again, retry_in) = {
            let mut state = self.lock();
            if let Some(since) = state.working.remove(&key) {
                self.times.finished(since.elapsed(), succeeded);
            }
            let again = state.again.remove(&key);
            let retry_in = if succeeded {
                state.failures.remove(&key);
                None
            } else {
                let failures = state.failures.entry(key.clone()).or_default();
                *failures += 1;
                Some(pause(self.min, self.max, *failures))
            };
            (again, retry_in)
        };
        if again {
            self.add(key.clone());
        }
        if let Some(delay) = retry_in {
            self.times.retried();
            let queue = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                queue.add(key);
            });
        }
    }

    /// Keys waiting to be worked on.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// True when nothing is waiting or being worked on (failed keys may come back later).
    pub fn is_empty(&self) -> bool {
        let state = self.lock();
        state.order.is_empty() && state.working.is_empty()
    }

    /// True when nothing is waiting, being worked on or remembered as failing.
    #[cfg(test)]
    pub fn is_idle(&self) -> bool {
        let state = self.lock();
        state.order.is_empty() && state.working.is_empty() && state.again.is_empty() && state.failures.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_millis(10);

    #[tokio::test]
    async fn coalesces_waiting_keys() {
        let queue = WorkQueue::new(MIN, 60 * MIN);
        let stop = CancellationToken::new();
        for _ in 0..5 {
            queue.add("a");
        }
        queue.add("b");
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.next(&stop).await, Some("a"));
        assert_eq!(queue.next(&stop).await, Some("b"));
        assert_eq!(queue.len(), 0);
    }

    #[tokio::test]
    async fn a_key_added_while_worked_on_comes_back_once_after() {
        let queue = WorkQueue::new(MIN, 60 * MIN);
        let stop = CancellationToken::new();
        queue.add("a");
        let key = queue.next(&stop).await.unwrap();
        queue.add("a");
        queue.add("a");
        assert_eq!(queue.len(), 0, "not handed to a second worker while worked on");
        queue.done(key, true);
        assert_eq!(queue.len(), 1);
        let key = queue.next(&stop).await.unwrap();
        queue.done(key, true);
        assert!(queue.is_idle());
    }

    #[tokio::test(start_paused = true)]
    async fn its_gauge_counts_every_waiting_key() {
        let depth = Gauge::default();
        let times = QueueMetrics::default();
        let queue = WorkQueue::new(MIN, 60 * MIN).measured_by(depth.clone(), times.clone());
        let stop = CancellationToken::new();
        queue.add("a");
        queue.add("b");
        assert_eq!(depth.get(), 2);
        let a = queue.next(&stop).await.unwrap();
        assert_eq!(depth.get(), 1);
        queue.add("a");
        assert_eq!(depth.get(), 1, "a key being worked on is not waiting");
        queue.done(a, true);
        assert_eq!(depth.get(), 2, "added while worked on: waiting again");
        let b = queue.next(&stop).await.unwrap();
        queue.done(b, false);
        let a = queue.next(&stop).await.unwrap();
        queue.done(a, true);
        assert_eq!(depth.get(), 0, "a failed key waits for its retry uncounted");
        tokio::time::sleep(2 * MIN).await;
        assert_eq!(depth.get(), 1, "and counts again once it is retried");
        assert_eq!(
            (times.adds(), times.retries(), times.reconciles()),
            (4, 1, (2, 1)),
            "a, b, a again, b retried; 2 succeeded and 1 failed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_retried_with_growing_backoff() {
        let queue = WorkQueue::new(MIN, 60 * MIN);
        let stop = CancellationToken::new();
        queue.add("a");
        let key = queue.next(&stop).await.unwrap();
        queue.done(key, false);
        assert_eq!(queue.len(), 0, "not at once");
        let key = queue.next(&stop).await.unwrap();
        assert_eq!(key, "a");
        queue.done(key, true);
        assert!(queue.is_idle(), "success forgets the failures");
        assert_eq!(pause(MIN, 60 * MIN, 1), MIN);
        assert_eq!(pause(MIN, 60 * MIN, 3), MIN * 4);
        assert_eq!(pause(MIN, 60 * MIN, 1000), 60 * MIN);
    }

    #[tokio::test]
    async fn next_ends_on_shutdown() {
        let queue: WorkQueue<&str> = WorkQueue::new(MIN, 60 * MIN);
        let stop = CancellationToken::new();
        stop.cancel();
        assert_eq!(queue.next(&stop).await, None);
    }
}
