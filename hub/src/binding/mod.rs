//! The binding controller ([`controller`]) and its pure logic: which workload objects and which
//! WECs a BindingPolicy selects, with what modulation, and the Binding spec that records the
//! answer.
//!
//! The controller compiles a policy once per change ([`CompiledPolicy`]), evaluates it against
//! cached objects, namespaces and WECs ([`policy_matches`], [`wec_selected`]), builds the desired
//! spec ([`desired_binding_spec`]) and writes it only when [`binding_spec_differs`]. Semantics
//! follow upstream KubeStellar (docs/upstream-behaviour.md#selecting-objects to
//! docs/upstream-behaviour.md#bindingpolicy-status), except that invalid selectors are reported as
//! [`PolicyError`]s instead of being skipped silently.

pub mod controller;
mod metrics;
mod policy;
mod resolution;
mod selection;
mod singleton;
mod state;
mod workload;
mod writes;

#[cfg(test)]
mod properties;
#[cfg(test)]
mod testing;

pub use metrics::{Metrics, register as register_metrics};
pub use policy::{CompiledClause, CompiledPolicy, PolicyError};
pub use resolution::{binding_spec_differs, desired_binding_spec, keep_unknown};
pub use selection::{clause_matches, clause_misses, fold_modulations, matching_clauses, policy_matches, wec_selected};
pub use singleton::singleton_error;
pub use workload::{Labels, ObjectIdentity, Wec, WorkloadObject};
