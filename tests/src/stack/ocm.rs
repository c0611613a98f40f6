//! OCM on the stack: its hub processes on the ITS and an agent per WEC, what the hub and each
//! WEC need before those start, the hub's half of the double opt-in (approve the agent's CSR,
//! accept the cluster), and taking a WEC out again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use ks_shared::names;
use ks_shared::ocm::{ManagedCluster, ManifestWork, managed_cluster_condition};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::procs::Procs;
use super::{FIELD_MANAGER, Stack, kubelet, wait_for};

/// Namespace of the klusterlet agent on each WEC.
pub const AGENT_NAMESPACE: &str = "open-cluster-management-agent";
/// Where the OCM agent keeps its hub credential on the WEC (its default).
pub const HUB_CREDENTIAL_SECRET: &str = "hub-kubeconfig-secret";
/// Annotation that tells kwok to manage a Node.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// The one kwok-managed Node of each WEC.
pub const KWOK_NODE_NAME: &str = "kwok-node-0";
/// The OCM agents' rate limit towards their WEC (OCM's default is 50), burst twice that.
const WORK_AGENT_QPS: u32 = 200;
/// How often the registration agent checks its WEC's apiserver (OCM's default is a minute).
const CLUSTER_HEALTHCHECK: Duration = Duration::from_secs(10);
/// The label the registration agent puts on its CSRs.
const CSR_CLUSTER_LABEL: &str = "open-cluster-management.io/cluster-name";
const BOOTSTRAP_ROLE: &str = "open-cluster-management:bootstrap";

async fn apply<K>(client: &Client, object: &K) -> anyhow::Result<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let name = object.meta().name.clone().context("object without a name")?;
    Api::<K>::all(client.clone())
        .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(object))
        .await?;
    Ok(())
}

fn namespace(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The hub's namespaces and the permissions of the bootstrap identity agents register with
/// (the same grants `clusteradm init` makes: create CSRs and ManagedClusters, join cluster sets).
pub async fn prepare_hub(client: &Client) -> anyhow::Result<()> {
    for ns in ["open-cluster-management", "open-cluster-management-hub"] {
        apply(client, &namespace(ns)).await?;
    }
    let rule = |group: &str, resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    };
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(BOOTSTRAP_ROLE.into()),
            ..Default::default()
        },
        rules: Some(vec![
            rule("", &["configmaps"], &["get"]),
            rule(
                "certificates.k8s.io",
                &["certificatesigningrequests"],
                &["create", "get", "list", "watch"],
            ),
            rule(
                "cluster.open-cluster-management.io",
                &["managedclusters"],
                &["get", "create", "list", "watch"],
            ),
            rule(
                "cluster.open-cluster-management.io",
                &["managedclustersets/join"],
                &["create"],
            ),
        ]),
        ..Default::default()
    };
    apply(client, &role).await?;
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(format!("{BOOTSTRAP_ROLE}:managedcluster")),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: BOOTSTRAP_ROLE.into(),
        },
        subjects: Some(vec![Subject {
            kind: "Group".into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            name: super::BOOTSTRAP.groups[0].into(),
            ..Default::default()
        }]),
    };
    apply(client, &binding).await
}

/// The klusterlet's namespace and one kwok-managed Node, so Pods get scheduled and run.
pub async fn prepare_wec(client: &Client) -> anyhow::Result<()> {
    apply(client, &namespace(AGENT_NAMESPACE)).await?;
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": KWOK_NODE_NAME,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": KWOK_NODE_NAME, "kubernetes.io/os": "linux"}
        },
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "1000"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "1000"}
        }
    }))?;
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.get_opt(KWOK_NODE_NAME).await? {
        None => {
            nodes.create(&PostParams::default(), &node).await?;
        }
        // A node made before the admission plugin was disabled may carry the not-ready taint.
        Some(existing) if existing.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some() => {
            let untaint = json!({"spec": {"taints": null}});
            nodes
                .patch(KWOK_NODE_NAME, &PatchParams::default(), &Patch::Merge(&untaint))
                .await?;
        }
        Some(_) => {}
    }
    Ok(())
}

/// Approves each WEC's registration CSR, accepts and labels its ManagedCluster, and waits
/// until every WEC is joined and available.
pub async fn join(
    hub: &Client,
    wecs: &[String],
    region: fn(&str) -> Option<&'static str>,
    procs: &Procs,
) -> anyhow::Result<()> {
    let csrs: Api<CertificateSigningRequest> = Api::all(hub.clone());
    let clusters: Api<ManagedCluster> = Api::all(hub.clone());
    wait_for("every WEC to join the ITS", Duration::from_secs(240), || async {
        for wec in wecs {
            procs.check_alive(&Stack::klusterlet_process(wec))?;
        }
        for csr in csrs.list(&ListParams::default().labels(CSR_CLUSTER_LABEL)).await? {
            let wec = csr.labels().get(CSR_CLUSTER_LABEL).cloned().unwrap_or_default();
            let decided = csr
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| !c.is_empty());
            // Add-on agents' CSRs are for their add-on controllers to decide, not the join.
            let for_addon = csr.labels().contains_key(names::OCM_ADDON_NAME_LABEL);
            if wecs.contains(&wec) && !decided && !for_addon {
                approve(&csrs, csr).await?;
            }
        }
        let mut available = 0;
        for wec in wecs {
            let Some(cluster) = clusters.get_opt(wec).await? else {
                continue;
            };
            let mut labels = BTreeMap::from([("location-group", "edge"), ("name", wec.as_str())]);
            if let Some(region) = region(wec) {
                labels.insert("region", region);
            }
            let patch = json!({"metadata": {"labels": labels}, "spec": {"hubAcceptsClient": true}});
            clusters
                .patch(wec, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            let is_available = cluster
                .status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .any(|c| c.type_ == managed_cluster_condition::AVAILABLE && c.status == "True");
            available += usize::from(is_available);
        }
        Ok(available == wecs.len())
    })
    .await
}

/// Waits until every WEC's work agent applies a ManifestWork written now: a ManagedCluster stays
/// Available (its lease not yet expired) while the agent restarts, and work delivered while the
/// agent is still starting can be left unreported. The canary is a ConfigMap in `default`, not
/// KubeStellar's (no status agent reports on it); each wait changes its data, so its new
/// generation shows the agent at work.
pub async fn wait_work_agents(hub: &Client, wecs: &[String]) -> anyhow::Result<()> {
    const CANARY: &str = "ks-stack-canary";
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
        .to_string();
    for wec in wecs {
        let works: Api<ManifestWork> = Api::namespaced(hub.clone(), wec);
        let canary = json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": CANARY, "namespace": wec},
            "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": CANARY, "namespace": "default"}, "data": {"written": stamp}}]}},
        });
        works
            .patch(
                CANARY,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&canary),
            )
            .await?;
    }
    wait_for(
        "every WEC's work agent to apply a new ManifestWork",
        Duration::from_secs(120),
        || async {
            for wec in wecs {
                let works: Api<ManifestWork> = Api::namespaced(hub.clone(), wec);
                let Some(work) = works.get_opt(CANARY).await? else {
                    return Ok(false);
                };
                if !work.status.is_some_and(|s| s.applied(work.metadata.generation)) {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await
}

async fn approve(csrs: &Api<CertificateSigningRequest>, mut csr: CertificateSigningRequest) -> anyhow::Result<()> {
    let name = csr.metadata.name.clone().context("CSR without a name")?;
    let status = csr.status.get_or_insert_with(Default::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some("KubeStellarStack".into()),
            message: Some("approved by the local stack, as `clusteradm accept` would".into()),
            ..Default::default()
        });
    csrs.patch_approval(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": csr.status})),
    )
    .await?;
    Ok(())
}

impl Stack {
    /// Takes a WEC out of the stack: its ManagedCluster is deleted while its OCM agent still
    /// runs (so OCM can clean up what it delivered), then its processes stop. Its data stays in
    /// etcd; bringing it up again joins it anew.
    pub async fn remove_wec(&self, wec: &str) -> anyhow::Result<()> {
        let clusters: Api<ManagedCluster> = Api::all(self.client("its1").await?);
        if let Some(cluster) = clusters.get_opt(wec).await? {
            clusters.delete(wec, &DeleteParams::default()).await?;
            let uid = cluster.uid().unwrap_or_default();
            wait_for(
                &format!("ManagedCluster {wec} to be deleted"),
                Duration::from_secs(120),
                || async {
                    Ok(clusters
                        .get_opt(wec)
                        .await?
                        .is_none_or(|c| c.uid() != Some(uid.clone())))
                },
            )
            .await?;
        }
        let pods = kubelet::pod_process(wec, "", "");
        let suffix = format!("-{wec}");
        let processes: Vec<String> = self
            .procs
            .started()
            .into_iter()
            .filter(|n| n.ends_with(&suffix) || n.starts_with(&pods))
            .collect();
        self.procs.stop_all(&processes, Duration::from_secs(10))
    }

    /// A WEC's hub credential for a ManagedCluster that is gone (the WEC was removed) would
    /// keep its OCM agent from joining again: before the agent starts, it is forgotten.
    pub(super) async fn forget_stale_hub_credential(&self, wec: &str) -> anyhow::Result<()> {
        let clusters: Api<ManagedCluster> = Api::all(self.client("its1").await?);
        if self.procs.running(&Self::klusterlet_process(wec)).is_some() || clusters.get_opt(wec).await?.is_some() {
            return Ok(());
        }
        let secrets: Api<Secret> = Api::namespaced(self.client(wec).await?, AGENT_NAMESPACE);
        if secrets.get_opt(HUB_CREDENTIAL_SECRET).await?.is_some() {
            secrets.delete(HUB_CREDENTIAL_SECRET, &DeleteParams::default()).await?;
        }
        let files = self.klusterlet_hub_dir(wec);
        if files.exists() {
            std::fs::remove_dir_all(&files)?;
        }
        Ok(())
    }

    /// Where a WEC's OCM agent keeps its hub credential.
    fn klusterlet_hub_dir(&self, wec: &str) -> PathBuf {
        self.state.join("ocm").join(wec).join("hub-kubeconfig")
    }

    pub(super) fn start_ocm_hub(&self) -> anyhow::Result<()> {
        let kubeconfig = self.space_kubeconfig("its1").display().to_string();
        let common = |port: u16| {
            vec![
                format!("--kubeconfig={kubeconfig}"),
                format!("--listen=127.0.0.1:{port}"),
                "--disable-leader-election".to_string(),
                "--namespace=open-cluster-management-hub".to_string(),
            ]
        };
        let mut args = vec!["controller".to_string()];
        args.extend(common(self.side_port("ocm", "its1")));
        self.procs
            .ensure("ocm-registration-its1", &self.bin("registration"), &args, &[])?;
        let mut args = vec!["manager".to_string()];
        args.extend(common(self.side_port("addon", "its1")));
        self.procs
            .ensure("ocm-addon-manager-its1", &self.bin("addon"), &args, &[])?;
        // Decides Placements, e.g. those of add-on install strategies (the status add-on chart's).
        let mut args = vec!["controller".to_string()];
        args.extend(common(self.side_port("placement", "its1")));
        self.procs
            .ensure("ocm-placement-its1", &self.bin("placement"), &args, &[])?;
        Ok(())
    }

    /// The process name of `wec`'s OCM agents (registration and work).
    fn klusterlet_process(wec: &str) -> String {
        format!("ocm-agent-{wec}")
    }

    /// Restarts `wec`'s OCM agents with the work agent re-reading what it applied every
    /// `status_sync` (OCM's default, 10 s, with `None`), and waits until they apply work again.
    /// The agent part lengthens it: at 10,000 objects on one WEC that re-reading wants 1,000
    /// GETs a second and applying starves behind it. The bulk part can, to measure that share
    /// (`--ocm-status-sync-seconds`). Elsewhere the default stays, as the hub's propagation
    /// counts come from the status it syncs.
    pub async fn restart_klusterlet(&self, wec: &str, status_sync: Option<Duration>) -> anyhow::Result<()> {
        self.procs
            .stop(&Self::klusterlet_process(wec), Duration::from_secs(10))?;
        self.start_klusterlet(wec, status_sync)?;
        wait_work_agents(&self.client("its1").await?, &[wec.to_string()]).await
    }

    pub(super) fn start_klusterlet(&self, wec: &str, status_sync: Option<Duration>) -> anyhow::Result<()> {
        let hub_dir = self.klusterlet_hub_dir(wec);
        std::fs::create_dir_all(&hub_dir)?;
        let mut args = vec![
            "agent".to_string(),
            format!("--spoke-cluster-name={wec}"),
            format!("--kubeconfig={}", self.space_kubeconfig(wec).display()),
            format!("--bootstrap-kubeconfig={}", self.bootstrap_kubeconfig().display()),
            format!("--hub-kubeconfig-dir={}", hub_dir.display()),
            // The work agent reads the hub credential the registration agent writes here.
            format!("--workload-source-config={}", hub_dir.join("kubeconfig").display()),
            format!("--listen=127.0.0.1:{}", self.side_port("ocm", wec)),
            format!("--namespace={}", AGENT_NAMESPACE),
            format!("--agent-id={wec}-stack"),
            "--disable-leader-election".to_string(),
            // The work agent re-reads every object it applied every status-sync interval
            // (10 s), against its WEC client's rate limit (default 50 QPS): from 500 objects on
            // one WEC that alone takes the whole budget and applying slows to a crawl. Users at
            // this scale raise it through the Klusterlet's workConfiguration.kubeAPIQPS.
            format!("--kube-api-qps={WORK_AGENT_QPS}"),
            format!("--kube-api-burst={}", 2 * WORK_AGENT_QPS),
            // A WEC's apiserver restarted just as the agent checked it leaves its ManagedCluster
            // unavailable until the next check (default every minute), and `up` waits for every
            // one to be Available: the fault suite's restart of a WEC's apiserver took 10 to 68 s.
            format!("--cluster-healthcheck-period={}s", CLUSTER_HEALTHCHECK.as_secs()),
        ];
        args.extend(status_sync.map(|every| format!("--status-sync-interval={}s", every.as_secs())));
        self.procs.ensure(
            &Self::klusterlet_process(wec),
            &self.bin("registration-operator"),
            &args,
            &[],
        )?;
        Ok(())
    }
}
