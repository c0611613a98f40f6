//! What the agent keeps of each of its WorkStatuses on the hub: what a reconcile compares with
//! (see `report::plan`) and what the controllers key on. The watch reads each WorkStatus whole
//! and keeps this much: whole, with its managedFields, a WorkStatus took about 4 KiB of the
//! agent's cache, the largest part of its memory per object.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use ks_shared::api::{Health, SourceRef, StatusDetails, WorkStatus};
use ks_shared::names::field_manager::AGENT as FIELD_MANAGER;
use ks_shared::names::{WDS_CONTENT_ANNOTATION, WDS_UID_ANNOTATION};
use serde::Deserialize;
use serde_json::{Map, Value};

/// One of our WorkStatuses as the hub has it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "WorkStatus")]
pub struct Existing {
    /// Name, namespace, UID, resourceVersion and ownerReferences; of the labels, only those our
    /// apply owns (exactly the set an apply of ours replaces: labels others added are theirs).
    pub metadata: ObjectMeta,
    pub source_ref: SourceRef,
    pub status_details: Option<StatusDetails>,
    pub health: Option<Health>,
    pub status: Option<Map<String, Value>>,
}

impl From<WorkStatus> for Existing {
    fn from(ws: WorkStatus) -> Existing {
        let labels = our_labels(&ws);
        // Of its annotations, only the incarnation and content it names are compared.
        let mut annotations = ws.metadata.annotations.unwrap_or_default();
        annotations.retain(|k, _| k == WDS_UID_ANNOTATION || k == WDS_CONTENT_ANNOTATION);
        let metadata = ObjectMeta {
            name: ws.metadata.name,
            namespace: ws.metadata.namespace,
            uid: ws.metadata.uid,
            resource_version: ws.metadata.resource_version,
            owner_references: ws.metadata.owner_references,
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        };
        Existing {
            metadata,
            source_ref: ws.spec.spec.source_ref,
            status_details: ws.spec.status_details,
            health: ws.spec.health,
            status: ws.status.map(|s| s.0),
        }
    }
}

/// The labels of `ws` that our field manager applied.
fn our_labels(ws: &WorkStatus) -> BTreeMap<String, String> {
    let owned: BTreeSet<&str> = ws
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| is_our_main_apply(m))
        .filter_map(|m| m.fields_v1.as_ref())
        .filter_map(|f| f.0.get("f:metadata")?.get("f:labels")?.as_object())
        .flat_map(|l| l.keys().filter_map(|k| k.strip_prefix("f:")))
        .collect();
    ws.metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| owned.contains(k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn is_our_main_apply(entry: &ManagedFieldsEntry) -> bool {
    entry.manager.as_deref() == Some(FIELD_MANAGER)
        && entry.operation.as_deref() == Some("Apply")
        && entry.subresource.as_deref().unwrap_or("").is_empty()
}

ks_shared::watched_as!(Existing, WorkStatus);

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use serde_json::json;

    use super::*;

    fn entry(manager: &str, subresource: Option<&str>, fields: Value) -> Value {
        let mut entry = json!({"manager": manager, "operation": "Apply", "apiVersion": "control.kubestellar.io/v1alpha1",
                               "fieldsType": "FieldsV1", "fieldsV1": fields});
        if let Some(subresource) = subresource {
            entry["subresource"] = json!(subresource);
        }
        entry
    }

    #[test]
    fn keeps_what_a_reconcile_reads_from_a_watched_work_status() {
        let owner = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                           "name": "mw", "uid": "mw-uid", "controller": true, "blockOwnerDeletion": true});
        let watched = json!({
            "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "WorkStatus",
            "metadata": {"name": "ws", "namespace": "cluster1", "uid": "u1", "resourceVersion": "42",
                         "labels": {"ours": "a", "team": "b"},
                         "annotations": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                         WDS_UID_ANNOTATION: "wds-uid"},
                         "ownerReferences": [owner],
                         "managedFields": [
                             entry(FIELD_MANAGER, None, json!({"f:metadata": {"f:labels": {"f:ours": {}}},
                                                               "f:spec": {"f:sourceRef": {"f:name": {}}}})),
                             entry(FIELD_MANAGER, Some("status"), json!({"f:status": {"f:replicas": {}}})),
                             entry("kubectl", None, json!({"f:metadata": {"f:labels": {"f:team": {}}}}))]},
            "spec": {"sourceRef": {"group": "apps", "version": "v1", "resource": "deployments",
                                   "kind": "Deployment", "name": "web", "namespace": "ns"}},
            "statusDetails": {"lastGeneration": 3, "lastGenerationIsApplied": true,
                              "lastCurrencyUpdateTime": "1970-01-01T00:00:05Z"},
            "status": {"replicas": 1}});
        // As the watch decodes it, and as a write's response converts.
        let existing: Existing = serde_json::from_value(watched.clone()).unwrap();
        assert_eq!(
            existing,
            Existing::from(serde_json::from_value::<WorkStatus>(watched).unwrap())
        );

        assert_eq!(existing.metadata.name.as_deref(), Some("ws"));
        assert_eq!(existing.metadata.namespace.as_deref(), Some("cluster1"));
        assert_eq!(existing.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(existing.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(existing.metadata.owner_references.as_ref().unwrap()[0].uid, "mw-uid");
        assert_eq!(
            existing.metadata.labels,
            Some(BTreeMap::from([("ours".to_string(), "a".to_string())])),
            "only the labels our apply owns"
        );
        assert_eq!(
            existing.metadata.annotations,
            Some(BTreeMap::from([(
                WDS_UID_ANNOTATION.to_string(),
                "wds-uid".to_string()
            )])),
            "only the incarnation it names"
        );
        assert_eq!(existing.metadata.managed_fields, None);
        assert_eq!(existing.source_ref.name, "web");
        assert_eq!(existing.status_details.as_ref().unwrap().last_generation, 3);
        assert_eq!(
            existing.status,
            Some(json!({"replicas": 1}).as_object().unwrap().clone())
        );
    }

    #[test]
    fn labels_are_ours_only_through_our_main_apply() {
        let mut ws = WorkStatus::new("ws", Default::default());
        ws.metadata.labels = Some(BTreeMap::from([("a".to_string(), "1".to_string())]));
        assert_eq!(
            Existing::from(ws.clone()).metadata.labels,
            Some(BTreeMap::new()),
            "no managedFields"
        );
        let fields = FieldsV1(json!({"f:metadata": {"f:labels": {"f:a": {}}}}));
        let mut status_apply = ManagedFieldsEntry {
            manager: Some(FIELD_MANAGER.into()),
            operation: Some("Apply".into()),
            subresource: Some("status".into()),
            fields_v1: Some(fields.clone()),
            ..Default::default()
        };
        ws.metadata.managed_fields = Some(vec![status_apply.clone()]);
        assert_eq!(
            Existing::from(ws.clone()).metadata.labels,
            Some(BTreeMap::new()),
            "a status apply"
        );
        status_apply.subresource = None;
        ws.metadata.managed_fields = Some(vec![status_apply]);
        assert_eq!(Existing::from(ws).metadata.labels.unwrap().len(), 1);
    }
}
