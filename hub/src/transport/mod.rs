//! The transport: what every delivered object goes through before it is wrapped for a WEC
//! (docs/upstream-behaviour.md#transforms, docs/upstream-behaviour.md#templates), how objects are
//! sharded, and the controller that turns Bindings into wrapped objects in the WECs' mailboxes
//! through a [`plugin::Plugin`] (OCM's is [`ocm::Ocm`]: ManifestWorks).
//!
//! Three parts over a base. The [`controller`] (its loop, watches, writes and reports) uses the
//! [`plan`] (the pure decisions: what a Binding's wrapped objects hold, and how objects move and
//! are shared between them) and [`ocm`] (what is particular to ManifestWorks: wrapping them, and
//! what the cache keeps of them). Both stand on the base: the [`plugin::Plugin`] a transport
//! provides and the [`types`] every part uses. Nothing below imports what stands above it.

pub mod controller;
pub mod ocm;
pub mod plan;
pub mod plugin;
pub mod types;
