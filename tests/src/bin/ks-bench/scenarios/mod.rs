//! The scenarios that measure one part of ours, one subcommand each (`compare` has its own).

pub mod agent;
pub mod binding;
pub mod delivery;
pub mod status;
pub mod tracing_overhead;
pub mod write_cost;
