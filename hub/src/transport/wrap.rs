//! The OCM transport's wrapped object: a ManifestWork in the WEC's mailbox namespace holding a
//! shard of a Binding's objects, named and labelled as upstream does so that upstream's status
//! add-on recognises it (reference §4.1, §4.4).

use std::collections::BTreeMap;

use ks_shared::names::{
    ORIGIN_BINDING_GENERATION_ANNOTATION, ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL, is_trace_annotation,
};
use ks_shared::ocm::{
    ManagedCluster, ManifestConfigOption, ManifestWork, ManifestWorkSpec, ManifestsTemplate, ResourceIdentifier,
    UPDATE_STRATEGY_CREATE_ONLY, UpdateStrategy,
};
use kube::api::ObjectMeta;
use serde_json::Value;

/// One object to deliver: the transformed manifest, its resource name, and whether it is
/// create-only.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub manifest: Value,
    pub resource: String,
    pub create_only: bool,
}

/// Which Binding a ManifestWork comes from.
#[derive(Clone, Debug)]
pub struct Origin<'a> {
    pub binding: &'a str,
    pub binding_uid: &'a str,
    pub binding_generation: i64,
    pub wds: &'a str,
}

/// The ManifestWork name: one object per work is named after the object's UID (as upstream with
/// `--max-num-wrapped=1`), otherwise after the shard index.
pub fn work_name(origin: &Origin<'_>, shard: usize, only_object_uid: Option<&str>) -> String {
    match only_object_uid {
        Some(uid) => format!("{}-{}-{uid}", origin.binding_uid, origin.wds),
        None => format!("{}-{}-{shard}", origin.binding, origin.wds),
    }
}

/// The labels that find a Binding's ManifestWorks in every mailbox namespace.
pub fn origin_labels(origin: &Origin<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ORIGIN_BINDING_LABEL.to_string(), origin.binding.to_string()),
        (ORIGIN_WDS_LABEL.to_string(), origin.wds.to_string()),
    ])
}

/// Wraps deliveries, in order, into the ManifestWork `name` in `mailbox`.
pub fn wrap(origin: &Origin<'_>, mailbox: &str, name: &str, deliveries: &[Delivery]) -> ManifestWork {
    let create_only = deliveries.iter().filter(|d| d.create_only).map(|d| {
        let meta = &d.manifest["metadata"];
        let api_version = d.manifest["apiVersion"].as_str().unwrap_or_default();
        ManifestConfigOption {
            resource_identifier: ResourceIdentifier {
                group: api_version
                    .rsplit_once('/')
                    .map(|(g, _)| g.to_string())
                    .unwrap_or_default(),
                resource: d.resource.clone(),
                name: meta["name"].as_str().unwrap_or_default().to_string(),
                namespace: meta["namespace"].as_str().unwrap_or_default().to_string(),
            },
            update_strategy: Some(UpdateStrategy {
                type_: UPDATE_STRATEGY_CREATE_ONLY.into(),
            }),
            feedback_rules: Vec::new(),
        }
    });
    ManifestWork {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(mailbox.to_string()),
            labels: Some(origin_labels(origin)),
            annotations: Some(BTreeMap::from([(
                ORIGIN_BINDING_GENERATION_ANNOTATION.to_string(),
                origin.binding_generation.to_string(),
            )])),
            ..Default::default()
        },
        spec: ManifestWorkSpec {
            workload: ManifestsTemplate {
                manifests: deliveries.iter().map(|d| d.manifest.clone()).collect(),
            },
            delete_option: None,
            manifest_configs: create_only.collect(),
        },
        status: None,
    }
}

/// An object's identity in a wrapped object: `(apiVersion's group, kind, namespace, name)`.
pub type Identity = (String, String, String, String);

/// The OCM transport: ManifestWorks in the namespace named after the ManagedCluster.
pub struct Ocm;

impl super::Plugin for Ocm {
    type Wrapped = ManifestWork;
    type Inventory = ManagedCluster;

    fn mailbox(&self, destination: &str) -> String {
        destination.to_string()
    }

    fn wrap(&self, origin: &Origin<'_>, mailbox: &str, name: &str, deliveries: &[Delivery]) -> ManifestWork {
        wrap(origin, mailbox, name, deliveries)
    }

    fn manifests<'a>(&self, wrapped: &'a ManifestWork) -> &'a [Value] {
        &wrapped.spec.workload.manifests
    }

    fn same_content(&self, existing: &ManifestWork, desired: &ManifestWork) -> bool {
        same_content(existing, desired)
    }
}

/// Whether an existing ManifestWork already says what `desired` says: the generation
/// annotation, labels of others and tracing annotations on the manifests are no reason to write.
pub fn same_content(existing: &ManifestWork, desired: &ManifestWork) -> bool {
    let strip = |w: &ManifestWork| {
        let mut labels = w.metadata.labels.clone().unwrap_or_default();
        labels.retain(|k, _| k == ORIGIN_BINDING_LABEL || k == ORIGIN_WDS_LABEL);
        let manifests: Vec<Value> = w
            .spec
            .workload
            .manifests
            .iter()
            .map(without_trace_annotations)
            .collect();
        (labels, manifests, serde_json::to_value(&w.spec.manifest_configs).ok())
    };
    strip(existing) == strip(desired)
}

fn without_trace_annotations(manifest: &Value) -> Value {
    let mut manifest = manifest.clone();
    if let Some(annotations) = manifest["metadata"]["annotations"].as_object_mut() {
        annotations.retain(|key, _| !is_trace_annotation(key));
    }
    manifest
}

/// What a ManifestWork holds: the identity of each manifest.
pub fn gloss(work: &ManifestWork) -> Vec<Identity> {
    work.spec.workload.manifests.iter().map(identity).collect()
}

/// A manifest's identity.
pub fn identity(manifest: &Value) -> Identity {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let group = manifest["apiVersion"]
        .as_str()
        .and_then(|a| a.rsplit_once('/'))
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    (
        group,
        text(&manifest["kind"]),
        text(&manifest["metadata"]["namespace"]),
        text(&manifest["metadata"]["name"]),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn origin() -> Origin<'static> {
        Origin {
            binding: "nginx",
            binding_uid: "b-uid",
            binding_generation: 7,
            wds: "wds1",
        }
    }

    #[test]
    fn names_as_upstream() {
        assert_eq!(work_name(&origin(), 2, None), "nginx-wds1-2");
        assert_eq!(work_name(&origin(), 0, Some("o-uid")), "b-uid-wds1-o-uid");
    }

    #[test]
    fn wraps_with_labels_generation_and_create_only_configs() {
        let deployment = Delivery {
            manifest: json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "n"}}),
            resource: "deployments".into(),
            create_only: true,
        };
        let namespace = Delivery {
            manifest: json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}),
            resource: "namespaces".into(),
            create_only: false,
        };
        let work = wrap(&origin(), "cluster1", "nginx-wds1-0", &[namespace, deployment]);
        let as_json = serde_json::to_value(&work).unwrap();
        assert_eq!(
            as_json["metadata"]["labels"],
            json!({
                "transport.kubestellar.io/originOwnerReferenceBindingKey": "nginx",
                "transport.kubestellar.io/originWdsName": "wds1"
            })
        );
        assert_eq!(
            as_json["metadata"]["annotations"]["transport.kubestellar.io/originOwnerReferenceBindingGeneration"],
            "7"
        );
        assert_eq!(
            as_json["spec"]["manifestConfigs"],
            json!([{
                "resourceIdentifier": {"group": "apps", "resource": "deployments", "name": "web", "namespace": "n"},
                "updateStrategy": {"type": "CreateOnly"}
            }])
        );
        assert_eq!(
            as_json["spec"]["workload"]["manifests"][0]["kind"], "Namespace",
            "Binding order is kept"
        );
        assert!(as_json["spec"].get("deleteOption").is_none());
        assert_eq!(
            gloss(&work),
            [
                ("".into(), "Namespace".into(), "".into(), "n".into()),
                ("apps".into(), "Deployment".into(), "n".into(), "web".into()),
            ]
        );
    }
}
