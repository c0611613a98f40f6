//! Shared by every KubeStellar process: the `control.kubestellar.io` API types and their CRDs,
//! the Open Cluster Management types we use, well-known names, label-selector matching,
//! telemetry and Kubernetes plumbing.

#[cfg(feature = "allocator-metrics")]
pub mod allocator;
pub mod api;
pub mod apilatency;
pub mod cli;
pub mod client;
pub mod crash;
pub mod crds;
pub mod credentials;
pub mod fence;
pub mod health;
pub mod leader;
pub mod names;
pub mod ocm;
pub mod otlp;
pub mod process_metrics;
pub mod ratelimit;
pub mod rollout;
pub mod runtime;
pub mod selector;
pub mod serve;
pub mod shutdown;
pub mod telemetry;
pub mod workload;
