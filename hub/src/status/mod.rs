//! The status controller ([`controller`]) and its pure logic: which `.status` a WDS object gets
//! back from its WECs ([`singleton`]), how several WECs' statuses combine into one
//! ([`aggregate`]), the CombinedStatus that StatusCollectors compute with CEL ([`collector`]),
//! what the controller remembers between events ([`state`]) and what it decides for one object
//! ([`plan`]), from the WorkStatuses it caches ([`report`]); a policy's health from the verdicts
//! on its objects ([`health`]) and the HealthRules that judge a kind in CEL ([`rules`]). Only
//! [`controller`], [`writes`], [`events`] and [`metrics`] touch a cluster.

pub mod aggregate;
pub mod collector;
pub mod controller;
mod events;
pub mod health;
mod metrics;
pub mod plan;
pub mod report;
pub mod rules;
pub mod sandbox;
pub mod singleton;
pub mod state;
mod writes;

pub use metrics::Metrics;
