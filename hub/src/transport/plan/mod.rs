//! The transport's decisions for one Binding, as a plain function of what the caches hold: the
//! wrapped objects (ManifestWorks) it calls for in each WEC's mailbox, and the errors (for its
//! status) of the objects that cannot be delivered as they are. Each object goes through the
//! built-in transforms, the CustomTransforms' removals and, per WEC, template expansion; it keeps
//! the trace annotations and the shard the existing wrapped objects show. An object in error
//! (unreadable, too deep, too large, or its templates failing on a WEC) keeps its last good
//! content where a WEC has it, and everything else goes on: one object never holds back the
//! others, nor one WEC the others. The controller gathers the inputs and writes the differences.

pub(crate) mod binding;
pub mod depth;
pub mod in_place;
pub(crate) mod items;
pub mod jsonpath;
pub mod moves;
pub mod names;
pub mod propagation;
pub(crate) mod revisions;
pub mod sharding;
pub mod sharers;
pub mod template;
pub mod trace;
pub mod transforms;
pub(crate) mod works;

#[cfg(test)]
mod tests;
