//! The KubeStellar hub's logic, kept apart from the `ks-hub` binary so it can be tested without a
//! cluster: the binding controller's selection of workload objects and WECs, as plain functions
//! over plain data.

pub mod binding;
pub mod controller;
pub mod finalizer;
pub mod informers;
pub mod kubeflex;
pub mod status;
pub mod transport;
