//! The KubeStellar hub's logic, kept apart from the `ks-hub` binary so it can be tested without a
//! cluster: the binding, transport and status controllers, with their decisions (selection of
//! workload objects and WECs, transforms, status return, aggregation, StatusCollectors) as plain
//! functions over plain data. [`run()`] composes them; hub/README.md draws the whole.

pub mod binding;
mod discovery;
pub mod events;
pub mod finalizer;
pub mod informers;
pub mod kubeflex;
mod run;
pub mod status;
pub mod transport;

pub use run::{Settings, run};

/// The tests allocate as the binary does, so that benchmarks can read jemalloc's counts.
#[cfg(all(test, feature = "jemalloc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
