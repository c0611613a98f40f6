//! The `control.kubestellar.io/v1alpha1` API, compatible with upstream KubeStellar.
//!
//! BindingPolicy, Binding, CustomTransform, StatusCollector, CombinedStatus and HealthRule live
//! in a WDS; WorkStatus lives in an ITS mailbox namespace.

mod binding;
mod bindingpolicy;
mod combinedstatus;
mod common;
mod customtransform;
mod health;
mod healthrule;
mod statuscollector;
mod workstatus;

pub use binding::*;
pub use bindingpolicy::*;
pub use combinedstatus::*;
pub use common::*;
pub use customtransform::*;
pub use health::*;
pub use healthrule::*;
pub use statuscollector::*;
pub use workstatus::*;

/// The API group of every KubeStellar kind.
pub const GROUP: &str = "control.kubestellar.io";
/// The one served and stored version.
pub const VERSION: &str = "v1alpha1";

#[cfg(test)]
mod tests {
    //! Objects written as a KubeStellar user or upstream component writes them survive a trip
    //! through our types with no field lost or renamed.

    use serde::Serialize;
    use serde::de::DeserializeOwned;

    use super::*;

    fn round_trip<T: DeserializeOwned + Serialize>(yaml: &str) {
        let original: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        let typed: T = serde_json::from_value(original.clone()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), original);
    }

    #[test]
    fn binding_policy() {
        round_trip::<BindingPolicy>(
            r#"
apiVersion: control.kubestellar.io/v1alpha1
kind: BindingPolicy
metadata: {name: nginx-bpolicy}
spec:
  clusterSelectors:
  - matchLabels: {location-group: edge}
  - matchExpressions: [{key: region, operator: In, values: [east, west]}]
  downsync:
  - apiGroup: ""
    resources: [namespaces]
    objectNames: [nginx]
  - objectSelectors: [{matchLabels: {app.kubernetes.io/name: nginx}}]
    namespaces: [nginx]
    namespaceSelectors: [{}]
    createOnly: true
    statusCollectors: [replicas]
    wantSingletonReportedState: true
    wantMultiWECReportedState: true
status:
  observedGeneration: 2
  errors: [bad selector]
  conditions:
  - {type: Ready, status: "True", reason: Available, message: ok, lastTransitionTime: "2026-01-02T03:04:05Z"}
"#,
        );
    }

    #[test]
    fn binding() {
        round_trip::<Binding>(
            r#"
apiVersion: control.kubestellar.io/v1alpha1
kind: Binding
metadata: {name: nginx-bpolicy}
spec:
  workload:
    clusterScope:
    - {group: "", version: v1, resource: namespaces, name: nginx, resourceVersion: "12", createOnly: true}
    namespaceScope:
    - {group: apps, version: v1, resource: deployments, namespace: nginx, name: web, resourceVersion: "13",
       statusCollectors: [replicas], wantMultiWECReportedState: true}
  destinations: [{clusterId: cluster1}, {clusterId: cluster2}]
"#,
        );
    }

    #[test]
    fn custom_transform_and_status_collector() {
        round_trip::<CustomTransform>(
            r#"
apiVersion: control.kubestellar.io/v1alpha1
kind: CustomTransform
metadata: {name: drop-owner}
spec: {apiGroup: apps, resource: deployments, remove: ['$.metadata.labels["owner"]', '$.spec.paused']}
status: {observedGeneration: 1, warnings: [w], errors: [e]}
"#,
        );
        round_trip::<StatusCollector>(
            r#"
apiVersion: control.kubestellar.io/v1alpha1
kind: StatusCollector
metadata: {name: replicas}
spec:
  filter: "obj.metadata.namespace == 'nginx'"
  groupBy: [{name: ready, def: "returned.status.readyReplicas"}]
  combinedFields: [{name: count, type: COUNT}, {name: sum, type: SUM, subject: "returned.status.availableReplicas"}]
  limit: 10
"#,
        );
    }

    #[test]
    fn combined_status_and_work_status() {
        round_trip::<CombinedStatus>(
            r#"
apiVersion: control.kubestellar.io/v1alpha1
kind: CombinedStatus
metadata: {name: 1b2c.3d4e, namespace: nginx, labels: {status.kubestellar.io/name: web}}
results:
- name: replicas
  columnNames: [wec, ready, extra]
  rows:
  - columns:
    - {type: String, string: cluster1}
    - {type: Number, float: "1"}
    - {type: Object, object: {a: [1, 2]}}
    - {type: Array, array: [x]}
    - {type: Bool, bool: true}
    - {type: "Null"}
  rowErrors: [{wec: {clusterId: cluster2}, columnName: "", error: "no such key"}]
  aggregationErrors: [{columnName: sum, error: overflow}]
"#,
        );
        round_trip::<WorkStatus>(
            r#"
apiVersion: control.kubestellar.io/v1alpha1
kind: WorkStatus
metadata: {name: x-apps-v1-deployment-nginx-web, namespace: cluster1}
spec:
  sourceRef: {group: apps, version: v1, resource: deployments, kind: Deployment, name: web, namespace: nginx}
status: {availableReplicas: 1, conditions: [{type: Available, status: "True"}]}
statusDetails: {lastGeneration: 3, lastGenerationIsApplied: true, lastCurrencyUpdateTime: "1970-01-01T00:00:00Z"}
"#,
        );
    }
}
