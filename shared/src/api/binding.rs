//! Binding: the binding controller's resolved answer for one BindingPolicy (same name), the
//! contract between the binding and transport controllers.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bindingpolicy::DownsyncModulation;
use super::common::PolicyStatus;

/// The exact objects and WECs a BindingPolicy currently selects.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "control.kubestellar.io",
    version = "v1alpha1",
    kind = "Binding",
    doc = "Binding lists the exact workload objects and WECs that the BindingPolicy of the same name selects.",
    plural = "bindings",
    shortname = "bdg",
    status = "BindingStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct BindingSpec {
    #[serde(default, skip_serializing_if = "DownsyncObjectClauses::is_empty")]
    pub workload: DownsyncObjectClauses,
    /// Always written, even empty, so that a Binding selecting nothing still has an object as
    /// its spec (the API server reads an empty `spec: {}` in an apply as null).
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["clusterId"]))]
    pub destinations: Vec<Destination>,
}

/// The status of a Binding.
pub type BindingStatus = PolicyStatus;

/// The selected workload objects, cluster-scoped and namespaced.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DownsyncObjectClauses {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["group", "resource", "name"]))]
    pub cluster_scope: Vec<ClusterScopeDownsyncClause>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["group", "resource", "namespace", "name"]))]
    pub namespace_scope: Vec<NamespaceScopeDownsyncClause>,
}

impl DownsyncObjectClauses {
    pub fn is_empty(&self) -> bool {
        self.cluster_scope.is_empty() && self.namespace_scope.is_empty()
    }
}

/// One cluster-scoped object and how to downsync it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterScopeDownsyncClause {
    #[serde(flatten)]
    pub object: ClusterScopeDownsyncObject,
    #[serde(flatten)]
    pub modulation: DownsyncModulation,
}

/// Identifies a cluster-scoped object at a resourceVersion.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterScopeDownsyncObject {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub name: String,
    pub resource_version: String,
}

/// One namespaced object and how to downsync it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceScopeDownsyncClause {
    #[serde(flatten)]
    pub object: NamespaceScopeDownsyncObject,
    #[serde(flatten)]
    pub modulation: DownsyncModulation,
}

/// Identifies a namespaced object at a resourceVersion.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceScopeDownsyncObject {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub resource_version: String,
}

/// A WEC, by its ManagedCluster name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    pub cluster_id: String,
}
