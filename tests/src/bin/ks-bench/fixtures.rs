//! What every scenario sets up the same way: its objects' field manager, names no other run
//! uses, and a labelled namespace with a BindingPolicy sending what it holds.

use k8s_openapi::api::core::v1::Namespace;
use ks_shared::api::BindingPolicy;
use ks_shared::ocm::ManifestWork;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// The field manager of everything the bench writes.
pub const MANAGER: &str = "ks-bench";

/// A scenario's namespace, labelled `label`, and a BindingPolicy named `policy` that sends
/// what carries that label to the WECs `clusters` select; `clause` adds to its downsync clause.
pub async fn scenario(
    wds: &kube::Client,
    ns: &str,
    policy: &str,
    label: &serde_json::Value,
    clusters: serde_json::Value,
    clause: serde_json::Value,
) -> anyhow::Result<(Api<Namespace>, Api<BindingPolicy>)> {
    let apply = PatchParams::apply(MANAGER).force();
    let namespaces = apply_namespace(wds, ns, label).await?;
    let mut downsync = json!({"objectSelectors": [{"matchLabels": label}]});
    if let (Some(to), Some(extra)) = (downsync.as_object_mut(), clause.as_object()) {
        to.extend(extra.clone());
    }
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let body = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": policy},
        "spec": {"clusterSelectors": clusters, "downsync": [downsync]}});
    policies.patch(policy, &apply, &Patch::Apply(body)).await?;
    Ok((namespaces, policies))
}

/// Applies a Namespace with `labels` (`{}` for none); returns the Namespace API of that space.
pub async fn apply_namespace(
    client: &kube::Client,
    ns: &str,
    labels: &serde_json::Value,
) -> anyhow::Result<Api<Namespace>> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}});
    namespaces
        .patch(ns, &PatchParams::apply(MANAGER).force(), &Patch::Apply(namespace))
        .await?;
    Ok(namespaces)
}

/// Delivers `count` objects straight into a WEC's mailbox (`works`), past the hub: in
/// ManifestWorks `<prefix>-<batch>` of 100 objects each, labelled `labels`, where `object(batch, i)`
/// is the `i`th object of a batch. Returns the ManifestWorks' names, for deleting them.
pub async fn deliver_in_batches(
    works: &Api<ManifestWork>,
    prefix: &str,
    labels: &serde_json::Value,
    count: usize,
    object: impl Fn(usize, usize) -> serde_json::Value,
) -> anyhow::Result<Vec<String>> {
    let apply = PatchParams::apply(MANAGER).force();
    let mut names = Vec::new();
    for batch in 0..count.div_ceil(100) {
        let manifests: Vec<_> = (0..100.min(count - batch * 100)).map(|i| object(batch, i)).collect();
        let name = format!("{prefix}-{batch}");
        let work = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": name, "labels": labels}, "spec": {"workload": {"manifests": manifests}}});
        works.patch(&name, &apply, &Patch::Apply(work)).await?;
        names.push(name);
    }
    Ok(names)
}

/// A name no other run or scenario of this process uses.
pub fn unique(prefix: &str) -> String {
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}
