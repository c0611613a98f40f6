//! How deep an object may nest and still be delivered.

use serde_json::Value;

/// The deepest object that is delivered. A ManifestWork holds it 4 levels down (the work, `spec`,
/// `workload`, `manifests`), and the transport's and every agent's watchers decode at most 128
/// levels (serde_json's limit): one ManifestWork deeper than that would break their watches of
/// every ManifestWork. The rest is margin.
pub const MAX_DELIVERED_DEPTH: usize = 120;

/// How many levels of objects and arrays `value` nests: a scalar is 0, `{}` and `[1]` are 1.
pub fn nesting_depth(value: &Value) -> usize {
    match value {
        Value::Object(fields) => 1 + fields.values().map(nesting_depth).max().unwrap_or(0),
        Value::Array(items) => 1 + items.iter().map(nesting_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// An error, for the Binding's status, when the object `label` is too deeply nested to deliver.
pub fn too_deep(label: &str, manifest: &Value) -> Option<String> {
    let depth = nesting_depth(manifest);
    (depth > MAX_DELIVERED_DEPTH).then(|| {
        format!(
            "{label}: nested {depth} levels deep; at most {MAX_DELIVERED_DEPTH} can be delivered (a ManifestWork \
             wraps it 4 levels deeper, and its watchers decode at most 128)"
        )
    })
}
