//! The digest of what the controller renders, recorded on what it writes so that unchanged
//! content is never rewritten.

use kube::api::ObjectMeta;

/// Annotation holding a digest of what we rendered, so unchanged content is never rewritten.
pub const CONTENT_DIGEST_ANNOTATION: &str = "addon.kubestellar.io/content-digest";

/// A short hex SHA-256 of a value's JSON form (serde_json keeps map keys sorted).
pub fn digest(value: &impl serde::Serialize) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let hash = ring::digest::digest(&ring::digest::SHA256, &bytes);
    hash.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest recorded on an object we wrote, if any.
pub fn recorded_digest(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(CONTENT_DIGEST_ANNOTATION)
        .map(String::as_str)
}
