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

pub use policy::{CompiledClause, CompiledPolicy, PolicyError};
pub use resolution::{binding_spec_differs, desired_binding_spec, keep_unknown};
pub use selection::{
    SYSTEM_NAMESPACES, clause_matches, clause_misses, fold_modulations, made_by_the_wds, matching_clauses,
    policy_matches, wec_selected,
};
pub use singleton::singleton_error;
pub use workload::{Labels, ListedObject, ObjectIdentity, Wec, WorkloadObject};

/// The binding controller's metrics: `kubestellar_binding_*`.
pub type Metrics = ks_shared::runtime::ControllerMetrics;

/// What they count.
pub const METRICS: ks_shared::runtime::Help = ks_shared::runtime::Help {
    controller: "binding",
    reconciles: "Binding and status checks done for a policy",
    errors: "Failed writes of Bindings, policy status or finalizers",
    writes: "Binding writes (made only when the content changed)",
    queue_depth: "Policies waiting for their Binding check",
};
