//! What every object goes through before delivery, whatever the WEC
//! (docs/upstream-behaviour.md#transforms): server-set metadata and status are dropped, and Services
//! and Jobs lose the fields their cluster assigns.

use serde_json::{Map, Value};

use ks_shared::names::{LAST_APPLIED_ANNOTATION as LAST_APPLIED, PRESERVE_ANNOTATION, PRESERVE_NODEPORT};

fn object_at<'a>(value: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
    path.iter().try_fold(value, |at, key| at.get_mut(*key))?.as_object_mut()
}

fn remove_all(map: Option<&mut Map<String, Value>>, keys: &[&str]) {
    if let Some(map) = map {
        for key in keys {
            map.remove(*key);
        }
    }
}

/// Applies the built-in transforms to a copy of a WDS object (with apiVersion and kind).
pub fn prepare_for_wec(object: &mut Value) {
    let api_version = object["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    let metadata_fields = [
        "managedFields",
        "finalizers",
        "generation",
        "ownerReferences",
        "selfLink",
        "resourceVersion",
        "uid",
        "generateName",
        // The WDS's creation time means nothing on a WEC, whose apiserver sets its own.
        "creationTimestamp",
    ];
    remove_all(object_at(object, &["metadata"]), &metadata_fields);
    remove_all(object_at(object, &["metadata", "annotations"]), &[LAST_APPLIED]);
    remove_all(object.as_object_mut(), &["status"]);
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Service") => prepare_service(object),
        ("batch/v1", "Job") => prepare_job(object),
        _ => {}
    }
}

fn prepare_service(service: &mut Value) {
    let keep_node_ports = service["metadata"]["annotations"][PRESERVE_ANNOTATION].as_str() == Some(PRESERVE_NODEPORT);
    let Some(spec) = object_at(service, &["spec"]) else {
        return;
    };
    for key in [
        "ipFamilies",
        "externalTrafficPolicy",
        "internalTrafficPolicy",
        "ipFamilyPolicy",
        "sessionAffinity",
    ] {
        spec.remove(key);
    }
    if spec.get("clusterIP").and_then(Value::as_str) != Some("None") {
        spec.remove("clusterIP");
    }
    // Only headless ("None") entries mean something in another cluster.
    if let Some(Value::Array(ips)) = spec.get_mut("clusterIPs") {
        ips.retain(|ip| ip.as_str() == Some("None"));
        if ips.is_empty() {
            spec.remove("clusterIPs");
        }
    }
    if !keep_node_ports && let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.insert("nodePort".into(), Value::Null);
        }
    }
}

fn prepare_job(job: &mut Value) {
    let controller_labels = ["controller-uid", "batch.kubernetes.io/controller-uid"];
    remove_all(
        object_at(job, &["metadata", "annotations"]),
        &["batch.kubernetes.io/job-tracking"],
    );
    remove_all(object_at(job, &["metadata", "labels"]), &controller_labels);
    remove_all(
        object_at(job, &["spec", "template", "metadata", "labels"]),
        &controller_labels,
    );
    remove_all(object_at(job, &["spec"]), &["selector", "suspend"]);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn server_set_metadata_and_status_go() {
        let mut object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "n", "uid": "u", "resourceVersion": "5", "generation": 2,
                         "managedFields": [], "finalizers": ["f"], "ownerReferences": [], "selfLink": "/x", "generateName": "w-",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"app": "web"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "me"}},
            "spec": {"replicas": 1},
            "status": {"readyReplicas": 1}
        });
        prepare_for_wec(&mut object);
        assert_eq!(
            object,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "n", "labels": {"app": "web"}, "annotations": {"keep": "me"}},
                "spec": {"replicas": 1}
            })
        );
    }

    #[test]
    fn services_lose_cluster_assigned_fields() {
        let service = |annotations: Value, cluster_ip: &str| {
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "s", "annotations": annotations},
                "spec": {"type": "NodePort", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip, "None"],
                         "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
                         "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster",
                         "ports": [{"port": 80, "nodePort": 30080}]}
            })
        };
        let mut plain = service(json!({}), "10.96.0.7");
        prepare_for_wec(&mut plain);
        assert_eq!(
            plain["spec"],
            json!({"type": "NodePort", "clusterIPs": ["None"], "ports": [{"port": 80, "nodePort": null}]})
        );

        let mut headless = service(json!({"control.kubestellar.io/preserve": "nodeport"}), "None");
        prepare_for_wec(&mut headless);
        assert_eq!(headless["spec"]["clusterIP"], "None");
        assert_eq!(headless["spec"]["ports"][0]["nodePort"], 30080);
    }

    #[test]
    fn jobs_lose_controller_identity() {
        let mut job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "labels": {"controller-uid": "1", "batch.kubernetes.io/controller-uid": "1", "app": "j"},
                         "annotations": {"batch.kubernetes.io/job-tracking": ""}},
            "spec": {"selector": {}, "suspend": false, "template": {"metadata": {"labels": {"controller-uid": "1", "app": "j"}}}}
        });
        prepare_for_wec(&mut job);
        assert_eq!(
            job,
            json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "j", "labels": {"app": "j"}, "annotations": {}},
                "spec": {"template": {"metadata": {"labels": {"app": "j"}}}}
            })
        );
    }

    #[test]
    fn other_kinds_with_the_same_names_are_untouched() {
        let mut not_core = json!({"apiVersion": "example.com/v1", "kind": "Service", "spec": {"clusterIP": "1.2.3.4"}});
        prepare_for_wec(&mut not_core);
        assert_eq!(not_core["spec"]["clusterIP"], "1.2.3.4");
    }
}
