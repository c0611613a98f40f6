//! How every controller of ours runs: caches fed by watches ([`watch_into_inputs`],
//! [`watch_into_store`], [`drive`]),
//! a keyed queue that coalesces ([`WorkQueue`]), bursts of changes gathered into one write
//! ([`Debounce`]), costly writes paced by what they cost ([`Pacing`]), retries with capped exponential back-off
//! ([`Backoff`], and [`failure`] for whether a failed write is worth one), and the same metrics
//! under one naming scheme ([`ControllerMetrics`]), and each watch's failures and whether it is
//! stuck ([`watch_health`]).

mod backoff;
mod debounce;
mod metrics;
mod pacing;
mod queue;
mod watch;
pub mod watch_health;

pub use backoff::{Backoff, Failure, RETRY_MAX, RETRY_MIN, failure};
pub use debounce::Debounce;
pub use metrics::{ControllerMetrics, Help, QueueMetrics, assert_exports, register_conventional};
pub use pacing::Pacing;
pub use queue::WorkQueue;
pub use watch::{
    Seen, WatchBackoff, drive, watch_into_inputs, watch_into_store, watch_seen_into_inputs, watch_trimmed_into_inputs,
    without_managed_fields,
};
