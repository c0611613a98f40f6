//! The agent's manifests for one WEC and the ManifestWork that delivers them.
//!
//! The agent gets only what it needs on the WEC: read-only access (get, list, watch) to what
//! KubeStellar delivers there (the core group but Secrets, common built-in groups, and every
//! group the WEC's ManifestWorks hold), and Leases in its own namespace for leader election. It
//! never writes workloads (upstream binds cluster-admin, docs/upstream-behaviour.md#status-add-on)
//! and never reads a Secret: it reports on delivered Secrets from what was delivered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use ks_shared::names::{
    AGENT_LEASE, OCM_ADDON_NAME_LABEL, STATUS_ADDON_HUB_SECRET, STATUS_ADDON_MANIFESTWORK, STATUS_ADDON_NAME,
    STATUS_AGENT_DEPLOYMENT, STATUS_AGENT_SERVICE_ACCOUNT,
};
use ks_shared::ocm::{
    FeedbackRule, ManifestConfigOption, ManifestWork, ManifestWorkSpec, ManifestsTemplate, ResourceIdentifier,
};
use kube::api::ObjectMeta;
use serde_json::{Value, json};

use crate::digest::{CONTENT_DIGEST_ANNOTATION, digest};
use crate::settings::AgentSettings;

/// Where the hub kubeconfig Secret is mounted in the agent's Pod.
pub const HUB_MOUNT_PATH: &str = "/var/run/hub";
/// The WEC ClusterRole and ClusterRoleBinding giving the agent read-only access.
pub const AGENT_CLUSTER_ROLE: &str = "open-cluster-management:addon-status:agent";
/// The WEC Role and RoleBinding for the agent's leader-election Lease.
pub const AGENT_LEASE_ROLE: &str = "open-cluster-management:addon-status:agent-lease";
/// The work agent's well-known status feedback (ReadyReplicas, Replicas, AvailableReplicas).
pub const WELL_KNOWN_STATUS: &str = "WellKnownStatus";

/// The read-only verbs: the only ones the agent gets on workloads.
const READ_ONLY: [&str; 3] = ["get", "list", "watch"];
/// The core group's resources the agent may read: all but `secrets`.
const CORE_READABLE: [&str; 14] = [
    "configmaps",
    "endpoints",
    "events",
    "limitranges",
    "namespaces",
    "nodes",
    "persistentvolumeclaims",
    "persistentvolumes",
    "pods",
    "podtemplates",
    "replicationcontrollers",
    "resourcequotas",
    "serviceaccounts",
    "services",
];
/// Built-in groups readable from the start, so the status of common workloads never waits for
/// its group's grant to reach the WEC.
const BUILT_IN_GROUPS: [&str; 10] = [
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apps",
    "autoscaling",
    "batch",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
];

/// The port the agent serves `/metrics`, `/healthz` and `/readyz` on where the kubelet can ask
/// (the Pod's address): 8080, the agent's default, unless its `httpAddress` says another; none
/// for a loopback address or port 0 (a free port, unknown beforehand).
fn probed_port(settings: &AgentSettings) -> Option<u16> {
    let Some(address) = &settings.http_address else {
        return Some(AGENT_HTTP_PORT);
    };
    let address: std::net::SocketAddr = address.parse().ok()?;
    (!address.ip().is_loopback() && address.port() != 0).then_some(address.port())
}

/// The agent's default HTTP port (`ks-agent --http-address`).
const AGENT_HTTP_PORT: u16 = 8080;

/// The agent's objects on the WEC, in apply order (namespace and identity before the Pod);
/// `delivered` are the API groups of what KubeStellar delivers there.
pub fn agent_manifests(cluster: &str, settings: &AgentSettings, delivered: &BTreeSet<String>) -> Vec<Value> {
    let groups: BTreeSet<&str> = BUILT_IN_GROUPS
        .into_iter()
        .chain(delivered.iter().map(String::as_str))
        .chain(["work.open-cluster-management.io"])
        .filter(|g| !g.is_empty())
        .collect();
    let namespace = settings.install_namespace.as_str();
    let labels = json!({"app": STATUS_AGENT_DEPLOYMENT});
    let service_account =
        json!({"kind": "ServiceAccount", "name": STATUS_AGENT_SERVICE_ACCOUNT, "namespace": namespace});
    let mut args = vec![
        format!("--hub-kubeconfig={HUB_MOUNT_PATH}/kubeconfig"),
        format!("--cluster-name={cluster}"),
        "--leader-elect".to_string(),
        format!("--leader-elect-namespace={namespace}"),
    ];
    if let Some(address) = &settings.http_address {
        args.push(format!("--http-address={address}"));
    }
    args.extend(settings.flags.iter().cloned());
    // As the charts' pods: the image's non-root user, the runtime's seccomp profile, no
    // capabilities, a read-only root, and bounded resources.
    let mut pod_spec = json!({
        "serviceAccountName": STATUS_AGENT_SERVICE_ACCOUNT,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{
            "name": STATUS_AGENT_DEPLOYMENT,
            "image": settings.image,
            "imagePullPolicy": "IfNotPresent",
            "args": args,
            "volumeMounts": [{"name": "hub-config", "mountPath": HUB_MOUNT_PATH, "readOnly": true}],
            "resources": {
                "requests": {"cpu": "10m", "memory": "32Mi"},
                "limits": {"cpu": "500m", "memory": "256Mi"},
            },
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"]},
            },
        }],
        "volumes": [{"name": "hub-config", "secret": {"secretName": STATUS_ADDON_HUB_SECRET}}],
    });
    if let Some(port) = probed_port(settings) {
        let container = &mut pod_spec["containers"][0];
        container["ports"] = json!([{"name": "http", "containerPort": port}]);
        // Ready once its caches are synced and no watch is stuck; restarted if it stops answering.
        container["readinessProbe"] = json!({"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 5});
        container["livenessProbe"] = json!({"httpGet": {"path": "/healthz", "port": "http"},
                                            "periodSeconds": 10, "failureThreshold": 6});
    }
    if !settings.node_selector.is_empty() {
        pod_spec["nodeSelector"] = json!(settings.node_selector);
    }
    if !settings.tolerations.is_empty() {
        pod_spec["tolerations"] = json!(settings.tolerations);
    }
    let env: Vec<_> = settings
        .otlp_endpoint
        .iter()
        .map(|endpoint| json!({"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": endpoint}))
        .chain(
            settings
                .env
                .iter()
                .map(|(name, value)| json!({"name": name, "value": value})),
        )
        .collect();
    if !env.is_empty() {
        pod_spec["containers"][0]["env"] = json!(env);
    }
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": STATUS_AGENT_SERVICE_ACCOUNT, "namespace": namespace}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": AGENT_CLUSTER_ROLE},
        "rules": [
            {"apiGroups": [""], "resources": CORE_READABLE, "verbs": READ_ONLY},
            {"apiGroups": groups, "resources": ["*"], "verbs": READ_ONLY},
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": AGENT_CLUSTER_ROLE},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT_CLUSTER_ROLE},
               "subjects": [service_account]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": AGENT_LEASE_ROLE, "namespace": namespace},
               // A Lease is created without a name to check against, then only this one is read and renewed.
               "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                         {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                          "resourceNames": [AGENT_LEASE], "verbs": ["get", "update"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": AGENT_LEASE_ROLE, "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AGENT_LEASE_ROLE},
               "subjects": [service_account]}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": STATUS_AGENT_DEPLOYMENT, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        }}),
    ]
}

/// The ManifestWork delivering the agent to `cluster`, owned by its ManagedClusterAddOn so that
/// the garbage collector removes it with the add-on. It carries no KubeStellar label, so the
/// agent never reports on itself, and asks the work agent for the Deployment's status. The
/// install Namespace is created if missing but never deleted (see [`orphan_namespace`]).
pub fn manifest_work(
    cluster: &str,
    settings: &AgentSettings,
    delivered: &BTreeSet<String>,
    owner: OwnerReference,
) -> ManifestWork {
    let spec = ManifestWorkSpec {
        workload: ManifestsTemplate {
            manifests: agent_manifests(cluster, settings, delivered)
                .into_iter()
                .map(Arc::new)
                .collect(),
        },
        delete_option: Some(orphan_namespace(&settings.install_namespace)),
        manifest_configs: vec![ManifestConfigOption {
            resource_identifier: ResourceIdentifier {
                group: "apps".into(),
                resource: "deployments".into(),
                name: STATUS_AGENT_DEPLOYMENT.into(),
                namespace: settings.install_namespace.clone(),
            },
            update_strategy: None,
            feedback_rules: vec![FeedbackRule {
                type_: WELL_KNOWN_STATUS.into(),
                json_paths: Vec::new(),
            }],
        }],
    };
    let digest = digest(&spec);
    ManifestWork {
        metadata: ObjectMeta {
            name: Some(STATUS_ADDON_MANIFESTWORK.into()),
            namespace: Some(cluster.into()),
            labels: Some(BTreeMap::from([(
                OCM_ADDON_NAME_LABEL.into(),
                STATUS_ADDON_NAME.into(),
            )])),
            annotations: Some(BTreeMap::from([(CONTENT_DIGEST_ANNOTATION.into(), digest)])),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

/// The ManifestWork's delete option leaving the install Namespace on the WEC when the add-on is
/// disabled or moves to another namespace: it is shared (by default OCM's
/// `open-cluster-management-agent-addon`, where every add-on's agent runs), and the work agent
/// deletes what a ManifestWork owns, the Namespace with everything in it.
fn orphan_namespace(namespace: &str) -> Value {
    json!({"propagationPolicy": "SelectivelyOrphan",
           "selectivelyOrphans": {"orphaningRules": [{"group": "", "resource": "namespaces", "name": namespace}]}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::recorded_digest;
    use ks_shared::names::is_kubestellar_label;

    fn settings() -> AgentSettings {
        AgentSettings {
            image: "example.io/ks-agent:dev".into(),
            install_namespace: "open-cluster-management-agent-addon".into(),
            ..Default::default()
        }
    }

    fn by_kind<'a>(manifests: &'a [Value], kind: &str) -> Vec<&'a Value> {
        manifests.iter().filter(|m| m["kind"] == kind).collect()
    }

    #[test]
    fn deployment_runs_the_agent_for_the_cluster_with_the_hub_secret() {
        let manifests = agent_manifests("cluster1", &settings(), &BTreeSet::new());
        let deployment = by_kind(&manifests, "Deployment")[0];
        assert_eq!(deployment["metadata"]["name"], STATUS_AGENT_DEPLOYMENT);
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        assert_eq!(container["image"], "example.io/ks-agent:dev");
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(args.contains(&"--hub-kubeconfig=/var/run/hub/kubeconfig"));
        assert!(args.contains(&"--cluster-name=cluster1"));
        assert_eq!(container["volumeMounts"][0]["mountPath"], HUB_MOUNT_PATH);
        assert_eq!(pod["volumes"][0]["secret"]["secretName"], STATUS_ADDON_HUB_SECRET);
        assert_eq!(pod["serviceAccountName"], STATUS_AGENT_SERVICE_ACCOUNT);
        assert!(pod.get("nodeSelector").is_none());
        assert!(!args.iter().any(|a| a.starts_with("--http-address")));
        assert!(container.get("env").is_none(), "no tracing unless asked for");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
        assert_eq!(container["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(container["resources"]["limits"]["memory"], "256Mi");
        assert_eq!(container["ports"], json!([{"name": "http", "containerPort": 8080}]));
        assert_eq!(
            container["readinessProbe"]["httpGet"],
            json!({"path": "/readyz", "port": "http"})
        );
        assert_eq!(
            container["livenessProbe"]["httpGet"],
            json!({"path": "/healthz", "port": "http"})
        );
    }

    #[test]
    fn probes_ask_the_port_the_agent_serves_on_where_the_kubelet_can_reach_it() {
        let probed = |address: Option<&str>| {
            let mut settings = settings();
            settings.http_address = address.map(str::to_string);
            let manifests = agent_manifests("cluster1", &settings, &BTreeSet::new());
            let container = by_kind(&manifests, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0].clone();
            assert_eq!(
                container.get("readinessProbe").is_some(),
                container.get("livenessProbe").is_some()
            );
            container
                .get("readinessProbe")
                .map(|_| container["ports"][0]["containerPort"].clone())
        };
        assert_eq!(probed(None), Some(json!(8080)));
        assert_eq!(probed(Some("0.0.0.0:9100")), Some(json!(9100)));
        assert_eq!(probed(Some("[::]:9100")), Some(json!(9100)));
        // The pod's loopback, or a port unknown beforehand: nothing a kubelet can ask.
        assert_eq!(probed(Some("127.0.0.1:9100")), None);
        assert_eq!(probed(Some("0.0.0.0:0")), None);
    }

    #[test]
    fn agent_rbac_on_the_wec_is_read_only_except_its_lease() {
        let manifests = agent_manifests("cluster1", &settings(), &BTreeSet::new());
        let cluster_role = by_kind(&manifests, "ClusterRole")[0];
        for rule in cluster_role["rules"].as_array().unwrap() {
            let verbs: Vec<&str> = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            assert_eq!(verbs, READ_ONLY, "{rule}");
        }
        let role = by_kind(&manifests, "Role")[0];
        assert_eq!(role["metadata"]["namespace"], settings().install_namespace);
        assert_eq!(role["rules"].as_array().unwrap().len(), 2);
        assert_eq!(role["rules"][0]["resources"], json!(["leases"]));
        assert_eq!(role["rules"][1]["resourceNames"], json!([AGENT_LEASE]));
        for binding in by_kind(&manifests, "ClusterRoleBinding")
            .into_iter()
            .chain(by_kind(&manifests, "RoleBinding"))
        {
            assert_eq!(binding["subjects"][0]["name"], STATUS_AGENT_SERVICE_ACCOUNT);
        }
    }

    /// Whether some rule of the ClusterRole lets the agent read `resource` of `group`.
    fn readable(cluster_role: &Value, group: &str, resource: &str) -> bool {
        let has = |list: &Value, item: &str| list.as_array().unwrap().iter().any(|v| v == item || v == "*");
        cluster_role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|rule| has(&rule["apiGroups"], group) && has(&rule["resources"], resource))
    }

    #[test]
    fn the_agent_reads_what_is_delivered_and_never_secrets() {
        let delivered = BTreeSet::from(["example.com".to_string()]);
        let manifests = agent_manifests("cluster1", &settings(), &delivered);
        let cluster_role = by_kind(&manifests, "ClusterRole")[0];
        assert!(!readable(cluster_role, "", "secrets"));
        assert!(readable(cluster_role, "", "configmaps"));
        assert!(readable(cluster_role, "apps", "deployments"));
        assert!(readable(cluster_role, "example.com", "widgets"));
        assert!(readable(
            cluster_role,
            "work.open-cluster-management.io",
            "appliedmanifestworks"
        ));
        assert!(!readable(cluster_role, "other.example.com", "gadgets"));
        // The grant follows what is delivered, so its change reaches the WEC.
        let none = manifest_work("cluster1", &settings(), &BTreeSet::new(), Default::default());
        let some = manifest_work("cluster1", &settings(), &delivered, Default::default());
        assert_ne!(recorded_digest(&none.metadata), recorded_digest(&some.metadata));
    }

    #[test]
    fn the_install_namespace_outlives_the_addon() {
        let work = manifest_work("cluster1", &settings(), &BTreeSet::new(), Default::default());
        let namespace = settings().install_namespace;
        assert!(
            work.spec.workload.manifests.iter().any(|m| m["kind"] == "Namespace"),
            "created if missing"
        );
        let option = work.spec.delete_option.unwrap();
        assert_eq!(option["propagationPolicy"], "SelectivelyOrphan");
        assert_eq!(
            option["selectivelyOrphans"]["orphaningRules"],
            json!([{"group": "", "resource": "namespaces", "name": namespace}]),
            "only the Namespace: the agent's own objects go with the add-on"
        );
    }

    #[test]
    fn per_cluster_settings_reach_the_pod() {
        let mut settings = settings();
        settings.node_selector.insert("role".into(), "infra".into());
        settings.tolerations.push(Default::default());
        settings.http_address = Some("127.0.0.1:0".into());
        settings.otlp_endpoint = Some("http://jaeger:4317".into());
        settings.flags.push("--log-format=json".into());
        settings.env.insert("RUST_LOG".into(), "debug".into());
        let manifests = agent_manifests("c", &settings, &BTreeSet::new());
        let pod = &by_kind(&manifests, "Deployment")[0]["spec"]["template"]["spec"];
        assert!(
            pod["containers"][0]["args"]
                .as_array()
                .unwrap()
                .contains(&json!("--http-address=127.0.0.1:0"))
        );
        assert!(
            pod["containers"][0]["args"]
                .as_array()
                .unwrap()
                .contains(&json!("--log-format=json"))
        );
        assert_eq!(pod["nodeSelector"]["role"], "infra");
        assert_eq!(pod["tolerations"].as_array().unwrap().len(), 1);
        assert_eq!(
            pod["containers"][0]["env"],
            json!([{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://jaeger:4317"},
                   {"name": "RUST_LOG", "value": "debug"}])
        );
    }

    #[test]
    fn manifest_work_is_owned_unlabelled_by_kubestellar_and_asks_for_feedback() {
        let owner = OwnerReference {
            api_version: "addon.open-cluster-management.io/v1alpha1".into(),
            kind: "ManagedClusterAddOn".into(),
            name: STATUS_ADDON_NAME.into(),
            uid: "u1".into(),
            ..Default::default()
        };
        let work = manifest_work("cluster2", &settings(), &BTreeSet::new(), owner.clone());
        assert_eq!(work.metadata.name.as_deref(), Some(STATUS_ADDON_MANIFESTWORK));
        assert_eq!(work.metadata.namespace.as_deref(), Some("cluster2"));
        assert_eq!(work.metadata.owner_references, Some(vec![owner.clone()]));
        assert!(
            !work
                .metadata
                .labels
                .iter()
                .flatten()
                .any(|(k, _)| is_kubestellar_label(k))
        );
        let config = &work.spec.manifest_configs[0];
        assert_eq!(config.resource_identifier.name, STATUS_AGENT_DEPLOYMENT);
        assert_eq!(config.feedback_rules[0].type_, WELL_KNOWN_STATUS);
        // The digest follows the content and nothing else.
        let again = manifest_work("cluster2", &settings(), &BTreeSet::new(), owner.clone());
        assert_eq!(recorded_digest(&work.metadata), recorded_digest(&again.metadata));
        let mut other = settings();
        other.image = "example.io/ks-agent:v2".into();
        let changed = manifest_work("cluster2", &other, &BTreeSet::new(), owner);
        assert_ne!(recorded_digest(&work.metadata), recorded_digest(&changed.metadata));
    }
}
