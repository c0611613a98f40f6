//! The status controller's pure logic: which `.status` a WDS object gets back from its WECs
//! ([`singleton`]), how several WECs' statuses combine into one ([`aggregate`]), and the
//! CombinedStatus that StatusCollectors compute with CEL ([`collector`]). No cluster, no client:
//! the controller feeds these functions from its caches and writes what they return.

pub mod aggregate;
pub mod collector;
pub mod singleton;
