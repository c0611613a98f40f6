//! The KubeStellar hub's logic, kept apart from the `ks-hub` binary so it can be tested without a
//! cluster: the binding, transport and status controllers, with their decisions (selection of
//! workload objects and WECs, transforms, status return, aggregation, StatusCollectors) as plain
//! functions over plain data.

pub mod binding;
pub mod controller;
pub mod finalizer;
pub mod informers;
pub mod kubeflex;
pub mod status;
pub mod transport;
