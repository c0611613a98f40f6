//! The Gauge: a namespaced custom resource with any fields and a status subresource, and no
//! controller. A test or benchmark that writes its `.status` makes "a status change" with
//! nothing else in the way, and as a custom resource it has a `metadata.generation` (so its
//! rollouts are traced, unlike ConfigMaps').

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::harness::wait_until;

pub const CRD: &str = "gauges.bench.kubestellar.io";

/// Installs the Gauge CRD in a space and waits until it is established.
pub async fn install(client: &kube::Client, manager: &str) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {"group": "bench.kubestellar.io", "scope": "Namespaced",
                 "names": {"plural": "gauges", "singular": "gauge", "kind": "Gauge"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    crds.patch(CRD, &PatchParams::apply(manager).force(), &Patch::Apply(crd))
        .await?;
    let established = kube::runtime::wait::conditions::is_crd_established();
    wait_until(crds, CRD, "established", Duration::from_secs(120), established).await?;
    Ok(())
}

/// The Gauge resource, for dynamic clients.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("bench.kubestellar.io", "v1", "Gauge"))
}
