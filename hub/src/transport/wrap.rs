//! The OCM transport's wrapped object: a ManifestWork in the WEC's mailbox namespace holding a
//! shard of a Binding's objects, named and labelled as upstream does so that upstream's status
//! add-on recognises it (reference §4.1, §4.4).

use std::collections::BTreeMap;

use ks_shared::names::{ORIGIN_BINDING_GENERATION_ANNOTATION, ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL};
use ks_shared::ocm::{
    ManifestConfigOption, ManifestWork, ManifestWorkSpec, ManifestsTemplate, ResourceIdentifier,
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

/// What a ManifestWork holds: `(apiVersion's group, kind, namespace, name)` of each manifest.
pub fn gloss(work: &ManifestWork) -> Vec<(String, String, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    work.spec
        .workload
        .manifests
        .iter()
        .map(|m| {
            let group = m["apiVersion"]
                .as_str()
                .and_then(|a| a.rsplit_once('/'))
                .map(|(g, _)| g.to_string())
                .unwrap_or_default();
            (
                group,
                text(&m["kind"]),
                text(&m["metadata"]["namespace"]),
                text(&m["metadata"]["name"]),
            )
        })
        .collect()
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
