//! Support for the end-to-end tests: comparing our CRDs with upstream's, and driving the
//! project's binaries.

pub mod binaries;
pub mod convergence;
pub mod crd_fields;
pub mod faults;
pub mod gauge;
pub mod harness;
pub mod invariants;
pub mod measure;
pub mod metrics;
pub mod mock;
pub mod process;
pub mod stack;
pub mod tools;
pub mod upstream;
