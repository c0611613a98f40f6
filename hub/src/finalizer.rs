//! Adding and removing one of our finalizers on an object we do not own.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

/// Adds (`present`) or removes `finalizer` on `object`, keeping the others; the resourceVersion
/// guards against racing writers, and an object already gone needs nothing.
pub async fn set<K>(api: &Api<K>, object: &K, finalizer: &str, present: bool) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut finalizers: Vec<String> = object
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    if present {
        finalizers.push(finalizer.into());
    }
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": object.resource_version()}});
    match api
        .patch(&object.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        result => result.map(|_| ()),
    }
}
