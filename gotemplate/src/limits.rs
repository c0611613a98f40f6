//! The bounds that keep a template from taking its process down.

/// How deep `if`/`with` blocks and parentheses may nest (Go allows 10000 parentheses); it keeps
/// the recursive parser and evaluator well inside a thread's stack.
pub(crate) const MAX_DEPTH: usize = 100;
/// The widest printf field allowed, so that a template cannot ask for a huge allocation.
pub(crate) const MAX_WIDTH: usize = 10_000;
/// The longest string a template may make or print (1 MiB): an etcd object holds at most
/// 1.5 MiB, so nothing longer could be delivered, and a template that doubles a string 30 times
/// would otherwise make 10 GB and take the process down.
pub const MAX_TEXT: usize = 1 << 20;
/// The bytes of strings one template may make or copy in all (64 MiB). Templates have no loops,
/// but a large one can repeat costly steps; this bounds the time an expansion takes.
pub(crate) const MAX_WORK: usize = 64 << 20;
