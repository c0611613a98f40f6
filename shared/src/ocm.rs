//! The Open Cluster Management types we use, as typed subsets of upstream's.
//!
//! Reading through these drops fields we do not know, so objects we do not own are never
//! written back from them with a full update: writes use server-side apply or patches with a
//! named field manager, which touch only the fields we set.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// A WEC in the inventory of an ITS.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1",
    kind = "ManagedCluster",
    schema = "disabled",
    status = "ManagedClusterStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSpec {
    /// The hub's half of the double opt-in.
    #[serde(default)]
    pub hub_accepts_client: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ManagedClusterStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// ManagedCluster condition types.
pub mod managed_cluster_condition {
    pub const JOINED: &str = "ManagedClusterJoined";
    pub const AVAILABLE: &str = "ManagedClusterConditionAvailable";
    pub const HUB_ACCEPTED: &str = "HubAcceptedManagedCluster";
}

/// Objects to apply on one WEC, placed in that WEC's mailbox namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "ManifestWork",
    namespaced,
    schema = "disabled",
    status = "ManifestWorkStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkSpec {
    #[serde(default)]
    pub workload: ManifestsTemplate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<serde_json::Value>,
    /// Sent even when empty: a field left out of a server-side apply stays while another manager
    /// (the creation's, or an earlier field manager's) owns it too, so a createOnly option
    /// dropped from a ManifestWork would stay in it for good.
    #[serde(default)]
    pub manifest_configs: Vec<ManifestConfigOption>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ManifestsTemplate {
    /// Whole Kubernetes objects, each with apiVersion and kind. Shared: the transport puts one
    /// object into every WEC's ManifestWork without a copy per WEC.
    #[serde(default)]
    pub manifests: Vec<std::sync::Arc<serde_json::Value>>,
}

/// Per-object options: update strategy and status feedback.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManifestConfigOption {
    pub resource_identifier: ResourceIdentifier,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feedback_rules: Vec<FeedbackRule>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceIdentifier {
    #[serde(default)]
    pub group: String,
    pub resource: String,
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

/// `Update` (default), `CreateOnly`, `ServerSideApply` or `ReadOnly`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_side_apply: Option<ServerSideApplyConfig>,
}

/// How the work agent server-side applies (field manager `work-agent` unless named).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ServerSideApplyConfig {
    #[serde(default)]
    pub force: bool,
}

/// The `Update` update strategy, OCM's default: a replace (PUT) merging in the WEC copy's
/// labels and annotations.
pub const UPDATE_STRATEGY_UPDATE: &str = "Update";
/// The `CreateOnly` update strategy.
pub const UPDATE_STRATEGY_CREATE_ONLY: &str = "CreateOnly";
/// The `ServerSideApply` update strategy.
pub const UPDATE_STRATEGY_SERVER_SIDE_APPLY: &str = "ServerSideApply";

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackRule {
    /// `WellKnownStatus` or `JSONPaths`.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_paths: Vec<JsonPath>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct JsonPath {
    pub name: String,
    pub path: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub resource_status: ManifestResourceStatus,
}

impl ManifestWorkStatus {
    /// Whether OCM's work agent reports the ManifestWork's `generation` applied.
    pub fn applied(&self, generation: Option<i64>) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == "Applied" && c.status == "True" && c.observed_generation == generation)
    }

    /// Whether OCM's work agent has reported on the ManifestWork's `generation` (applied or not):
    /// it has written the status, and then records what it applied.
    pub fn reported(&self, generation: Option<i64>) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == "Applied" && c.observed_generation == generation)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ManifestResourceStatus {
    #[serde(default)]
    pub manifests: Vec<ManifestCondition>,
}

/// What the work agent reports for one manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManifestCondition {
    pub resource_meta: ManifestResourceMeta,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub status_feedback: StatusFeedback,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ManifestResourceMeta {
    #[serde(default)]
    pub ordinal: i32,
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct StatusFeedback {
    #[serde(default)]
    pub values: Vec<FeedbackValue>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackValue {
    pub name: String,
    pub field_value: FieldValue,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FieldValue {
    /// `Integer`, `String`, `Boolean` or `JsonRaw`.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integer: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boolean: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_raw: Option<String>,
}

/// On a WEC: what the work agent applied for one ManifestWork.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "AppliedManifestWork",
    schema = "disabled",
    status = "AppliedManifestWorkStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct AppliedManifestWorkSpec {
    #[serde(default)]
    pub hub_hash: String,
    #[serde(default, rename = "agentID")]
    pub agent_id: String,
    #[serde(default)]
    pub manifest_work_name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppliedManifestWorkStatus {
    #[serde(default)]
    pub applied_resources: Vec<AppliedManifestResourceMeta>,
}

/// One object a work agent applied on the WEC.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AppliedManifestResourceMeta {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
}

/// Registers an add-on with the hub and says how it is installed on clusters.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ClusterManagementAddOn",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterManagementAddOnSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_on_meta: Option<AddOnMeta>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supported_configs: Vec<ConfigMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_strategy: Option<serde_json::Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AddOnMeta {
    #[serde(default)]
    pub display_name: String,
    #[serde(default)]
    pub description: String,
}

/// A kind of configuration an add-on accepts, with an optional default object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMeta {
    #[serde(default)]
    pub group: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_config: Option<ConfigReferent>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigReferent {
    #[serde(default)]
    pub namespace: String,
    pub name: String,
}

/// An add-on enabled on one cluster, in that cluster's namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ManagedClusterAddOn",
    namespaced,
    schema = "disabled",
    status = "ManagedClusterAddOnStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterAddOnSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs: Vec<AddOnConfig>,
}

/// A reference from a ManagedClusterAddOn to a configuration object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct AddOnConfig {
    #[serde(default)]
    pub group: String,
    pub resource: String,
    #[serde(default)]
    pub namespace: String,
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterAddOnStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub registrations: Vec<RegistrationConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A hub credential the add-on agent needs, requested by the WEC's registration agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RegistrationConfig {
    // Read leniently: an ITS without OCM's conversion webhook stores what a v1beta1 client
    // writes here as `{}`, and one such add-on must not stop the list of all of them. Nothing is
    // written from it: ks-addon compares it with the registration it wants and, as they differ,
    // applies its own again (the status field it owns).
    #[serde(default)]
    pub signer_name: String,
    #[serde(default)]
    pub subject: Subject,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub organization_unit: Vec<String>,
}

/// Per-cluster settings for an add-on agent (image, placement, install namespace, variables).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "AddOnDeploymentConfig",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct AddOnDeploymentConfigSpec {
    #[serde(default)]
    pub customized_variables: Vec<CustomizedVariable>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_placement: Option<NodePlacement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_install_namespace: Option<String>,
    #[serde(default)]
    pub registries: Vec<ImageMirror>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct CustomizedVariable {
    pub name: String,
    #[serde(default)]
    pub value: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodePlacement {
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageMirror {
    pub mirror: String,
    pub source: String,
}

/// The API group of a manifest (`apps` for `apps/v1`), `""` for the core group.
pub fn manifest_group(manifest: &serde_json::Value) -> &str {
    manifest["apiVersion"].as_str().map_or("", api_version_group)
}

/// The group of an `apiVersion` (`""` for the core group's `v1`).
pub fn api_version_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}
