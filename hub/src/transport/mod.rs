//! The transport's pure parts: what every delivered object goes through before it is wrapped
//! for a WEC (reference §4.5) and the CustomTransform removals (§4.6).

pub mod controller;
pub mod jsonpath;
pub mod sharding;
pub mod template;
pub mod transforms;
pub mod wrap;
