//! A keyed work queue that coalesces: a key already waiting is not added twice, a key being
//! worked on is handed out again (once) after its worker finishes, and never to two workers at
//! once. Workers read the latest state from caches, so a burst of events for one object becomes
//! one reconcile of its latest state. Failed keys come back after an exponential backoff.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The first retry delay; it doubles with each consecutive failure of a key.
const BASE_DELAY: Duration = Duration::from_millis(10);
/// Retries never wait longer than this.
const MAX_DELAY: Duration = Duration::from_secs(60);

/// The queue; clones share it.
pub struct WorkQueue<K> {
    state: Arc<Mutex<State<K>>>,
    ready: Arc<Notify>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            state: self.state.clone(),
            ready: self.ready.clone(),
        }
    }
}

struct State<K> {
    order: VecDeque<K>,
    waiting: HashSet<K>,
    working: HashSet<K>,
    /// Added while being worked on: queue again when the worker is done.
    again: HashSet<K>,
    failures: HashMap<K, u32>,
}

impl<K> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            state: Arc::new(Mutex::new(State {
                order: VecDeque::new(),
                waiting: HashSet::new(),
                working: HashSet::new(),
                again: HashSet::new(),
                failures: HashMap::new(),
            })),
            ready: Arc::new(Notify::new()),
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        // The state stays consistent under a panic elsewhere: every update is one step.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `key` unless it is already waiting.
    pub fn add(&self, key: K) {
        let mut state = self.lock();
        if state.working.contains(&key) {
            state.again.insert(key);
            return;
        }
        if state.waiting.insert(key.clone()) {
            state.order.push_back(key);
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
        state.waiting.remove(&key);
        state.working.insert(key.clone());
        Some((key, !state.order.is_empty()))
    }

    /// Marks `key` done. After a failure it is queued again after a backoff; after a success
    /// its failure count is forgotten. Either way, if it was added meanwhile it is queued now.
    pub fn done(&self, key: K, succeeded: bool) {
        let (again, retry_in) = {
            let mut state = self.lock();
            state.working.remove(&key);
            let again = state.again.remove(&key);
            let retry_in = if succeeded {
                state.failures.remove(&key);
                None
            } else {
                let failures = state.failures.entry(key.clone()).or_default();
                *failures += 1;
                Some(backoff(*failures))
            };
            (again, retry_in)
        };
        if again {
            self.add(key.clone());
        }
        if let Some(delay) = retry_in {
            let queue = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                queue.add(key);
            });
        }
    }

    /// Keys waiting to be worked on.
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

/// The delay before retry number `failures` (1, 2, ...).
fn backoff(failures: u32) -> Duration {
    BASE_DELAY
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(20)))
        .min(MAX_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn coalesces_waiting_keys() {
        let queue = WorkQueue::default();
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
        let queue = WorkQueue::default();
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
    async fn failures_are_retried_with_growing_backoff() {
        let queue = WorkQueue::default();
        let stop = CancellationToken::new();
        queue.add("a");
        let key = queue.next(&stop).await.unwrap();
        queue.done(key, false);
        assert_eq!(queue.len(), 0, "not at once");
        let key = queue.next(&stop).await.unwrap();
        assert_eq!(key, "a");
        queue.done(key, true);
        assert!(queue.is_idle(), "success forgets the failures");
        assert_eq!(backoff(1), BASE_DELAY);
        assert_eq!(backoff(3), BASE_DELAY * 4);
        assert_eq!(backoff(1000), MAX_DELAY);
    }

    #[tokio::test]
    async fn next_ends_on_shutdown() {
        let queue: WorkQueue<&str> = WorkQueue::default();
        let stop = CancellationToken::new();
        stop.cancel();
        assert_eq!(queue.next(&stop).await, None);
    }
}
