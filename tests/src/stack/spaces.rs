//! Each space's upstream Kubernetes: one etcd for all, a kube-apiserver per space, its
//! kube-controller-manager (with the controllers the space's role needs), kube-scheduler and kwok
//! on each WEC, and the CRDs every space starts with.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};

use super::{ADMIN, ETCD_PEER_PORT, ETCD_PORT, FIELD_MANAGER, Pki, Role, Space, Stack, ocm, wait_for};

impl Stack {
    pub(super) fn start_etcd(&self, pki: &Pki) -> anyhow::Result<()> {
        let client_url = format!("https://127.0.0.1:{ETCD_PORT}");
        let peer_url = format!("http://127.0.0.1:{ETCD_PEER_PORT}");
        let args = [
            format!("--data-dir={}", self.state.join("etcd").display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            format!("--cert-file={}", pki.serving_cert().display()),
            format!("--key-file={}", pki.serving_key().display()),
            format!("--trusted-ca-file={}", pki.ca_cert().display()),
            "--client-cert-auth=true".into(),
            // A throwaway store: durability is not worth the fsync cost here.
            "--unsafe-no-fsync=true".into(),
            "--quota-backend-bytes=8589934592".into(),
            "--log-level=warn".into(),
        ];
        self.procs.ensure("etcd", &self.bin("etcd"), &args, &[])?;
        Ok(())
    }

    pub(super) fn start_apiserver(&self, pki: &Pki, space: &Space) -> anyhow::Result<()> {
        let p = |path: PathBuf| path.display().to_string();
        // `kubernetes.default`'s endpoint: the apiserver at the stack address where a real node's
        // Pods ask for it; none elsewhere.
        let (advertise, reconciler) = if self.has_real_node(&space.name) {
            (self.api_host().to_string(), "lease")
        } else {
            ("127.0.0.1".to_string(), "none")
        };
        let args = [
            format!("--advertise-address={advertise}"),
            format!("--endpoint-reconciler-type={reconciler}"),
            format!("--etcd-servers=https://127.0.0.1:{ETCD_PORT}"),
            format!("--etcd-prefix=/registry-{}", space.name),
            format!("--etcd-cafile={}", p(pki.ca_cert())),
            format!("--etcd-certfile={}", p(pki.client_cert(&ADMIN))),
            format!("--etcd-keyfile={}", p(pki.client_key(&ADMIN))),
            format!("--secure-port={}", space.port),
            // With real nodes, their Pods reach every apiserver at the stack address.
            format!(
                "--bind-address={}",
                if self.has_real_nodes() { "0.0.0.0" } else { "127.0.0.1" }
            ),
            format!("--tls-cert-file={}", p(pki.serving_cert())),
            format!("--tls-private-key-file={}", p(pki.serving_key())),
            format!("--client-ca-file={}", p(pki.ca_cert())),
            format!("--service-account-issuer=https://127.0.0.1:{}", space.port),
            format!("--service-account-key-file={}", p(pki.service_account_public_key())),
            format!("--service-account-signing-key-file={}", p(pki.service_account_key())),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            "--authorization-mode=RBAC".into(),
            "--allow-privileged=true".into(),
            // One apiserver per space on one machine: no need for fairness queues or endpoints.
            "--enable-priority-and-fairness=false".into(),
            // No node lifecycle controller runs to lift the not-ready taint from kwok's Nodes.
            "--disable-admission-plugins=TaintNodesByCondition".into(),
            // `kubectl get --raw /debug/pprof/profile` (admins only) shows where its CPU goes.
            "--profiling=true".into(),
            format!(
                "--cert-dir={}",
                self.state.join("apiserver").join(&space.name).display()
            ),
        ];
        self.procs.ensure(
            &format!("apiserver-{}", space.name),
            &self.bin("kube-apiserver"),
            &args,
            &[],
        )?;
        Ok(())
    }

    pub(super) async fn wait_apiserver(&self, space: &Space) -> anyhow::Result<()> {
        let name = format!("apiserver-{}", space.name);
        let client = self.client(&space.name).await?;
        wait_for(&format!("{name} to be ready"), Duration::from_secs(180), || async {
            self.procs.check_alive(&name)?;
            Ok(client.apiserver_version().await.is_ok())
        })
        .await
    }

    pub(super) fn start_controllers(&self, pki: &Pki, space: &Space) -> anyhow::Result<()> {
        let p = |path: PathBuf| path.display().to_string();
        let kubeconfig = p(self.space_kubeconfig(&space.name));
        let mut controllers = vec![
            "namespace",
            "garbagecollector",
            "serviceaccount",
            "serviceaccount-token",
        ];
        if space.role == Role::Its {
            // resourcequota: counts the WorkStatuses under the add-on's quota in each mailbox.
            controllers.extend(["csrsigning", "csrcleaner", "clusterrole-aggregation", "resourcequota"]);
        }
        // What Pods need, where they run: every WEC (a kwok node, and maybe a real one) and the
        // hosting cluster with a real node (the hub chart's hooks and ks-hub).
        // root-ca-cert-publisher: the `kube-root-ca.crt` ConfigMap every Pod on a real node
        // mounts with its ServiceAccount token. endpoint, endpointslice: a Service's Endpoints
        // (the apiserver's service proxy reads them) and EndpointSlices (kube-proxy routes by
        // them), for the Pods of a real node.
        let runs_pods = space.role == Role::Wec || self.has_real_node(&space.name);
        if runs_pods {
            controllers.extend([
                "deployment",
                "replicaset",
                "daemonset",
                "statefulset",
                "job",
                "root-ca-cert-publisher",
                "endpoint",
                "endpointslice",
            ]);
        }
        let args = [
            format!("--kubeconfig={kubeconfig}"),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--use-service-account-credentials=false".into(),
            // Recounts quotas often: a new quota counts WorkStatuses within seconds.
            "--resource-quota-sync-period=10s".into(),
            format!("--controllers={}", controllers.join(",")),
            format!("--cluster-signing-cert-file={}", p(pki.ca_cert())),
            format!("--cluster-signing-key-file={}", p(pki.ca_key())),
            format!("--service-account-private-key-file={}", p(pki.service_account_key())),
            format!("--root-ca-file={}", p(pki.ca_cert())),
        ];
        self.procs.ensure(
            &format!("controller-manager-{}", space.name),
            &self.bin("kube-controller-manager"),
            &args,
            &[],
        )?;
        if runs_pods {
            let args = [
                format!("--kubeconfig={kubeconfig}"),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
            ];
            self.procs.ensure(
                &format!("scheduler-{}", space.name),
                &self.bin("kube-scheduler"),
                &args,
                &[],
            )?;
        }
        if space.role == Role::Wec {
            let stages = self.crds("kwok-stages");
            let mut args = vec![
                format!("--kubeconfig={kubeconfig}"),
                "--manage-all-nodes=false".into(),
                format!(
                    "--manage-nodes-with-annotation-selector={}=fake",
                    ocm::KWOK_NODE_ANNOTATION
                ),
                format!("--server-address=127.0.0.1:{}", self.side_port("kwok", &space.name)),
            ];
            for stage in ["node-initialize", "pod-ready", "pod-complete", "pod-delete"] {
                args.push(format!("--config={}", stages.join(format!("{stage}.yaml")).display()));
            }
            self.procs
                .ensure(&format!("kwok-{}", space.name), &self.bin("kwok"), &args, &[])?;
        }
        Ok(())
    }

    pub(super) async fn install_crds(&self) -> anyhow::Result<()> {
        let sets: Vec<(String, &str)> = std::iter::once(("kubeflex".to_string(), "kubeflex"))
            .chain(std::iter::once(("its1".to_string(), "ocm-hub")))
            .chain(self.wec_names().into_iter().map(|w| (w, "ocm-spoke")))
            .collect();
        for (space, set) in sets {
            self.install_crd_set(&space, set).await?;
        }
        Ok(())
    }

    /// Applies the CRDs of `set` (`kubeflex`, `ocm-hub`, `ocm-spoke`: what `make deps` put in
    /// the cache) to `space`, each waited on until Established. The ones it created, for
    /// [`Stack::remove_crds`]: the others were there before, someone else's.
    pub async fn install_crd_set(&self, space: &str, set: &str) -> anyhow::Result<Vec<CreatedCrd>> {
        let dir = self.crds(set);
        let client = self.client(space).await?;
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .with_context(|| format!("{} is missing: run `make deps`", dir.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        files.sort();
        let mut created = Vec::new();
        for file in files {
            let crd: CustomResourceDefinition = serde_saphyr::from_str(&std::fs::read_to_string(&file)?)?;
            let name = crd.metadata.name.clone().context("CRD without a name")?;
            let there = api.get_opt(&name).await?.is_some();
            let uid = apply_crd(&api, &crd)
                .await
                .with_context(|| format!("applying {} to {space}", file.display()))?;
            if !there {
                created.push(CreatedCrd { name, uid });
            }
        }
        Ok(created)
    }

    /// Deletes the CRDs `created` by [`Stack::install_crd_set`] from `space` (and with them their
    /// objects), each only if it is still the one created (its UID a precondition: one deleted
    /// and made again by someone else meanwhile stays, said); waits until they are gone.
    pub async fn remove_crds(&self, space: &str, created: &[CreatedCrd]) -> anyhow::Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client(space).await?);
        for crd in created {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(crd.uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&crd.name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => continue,
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    println!("CRD {} on {space} is another one now: left as it is", crd.name);
                    continue;
                }
                Err(err) => return Err(err.into()),
            }
            wait_for(&format!("CRD {} to go", crd.name), Duration::from_secs(60), || async {
                Ok(api.get_opt(&crd.name).await?.is_none())
            })
            .await?;
        }
        Ok(())
    }
}

/// A CRD that [`Stack::install_crd_set`] created: its name and UID.
#[derive(Debug, Clone)]
pub struct CreatedCrd {
    pub name: String,
    pub uid: String,
}

/// Server-side applies one CRD and waits until it is Established; its UID.
async fn apply_crd(api: &Api<CustomResourceDefinition>, crd: &CustomResourceDefinition) -> anyhow::Result<String> {
    let name = crd.metadata.name.clone().context("CRD without a name")?;
    let applied = api
        .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(crd))
        .await?;
    let uid = applied.metadata.uid.context("a CRD without a UID")?;
    wait_for(
        &format!("CRD {name} to be established"),
        Duration::from_secs(30),
        || async {
            let Ok(crd) = api.get(&name).await else {
                return Ok(false);
            };
            Ok(crd
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|c| c.type_ == "Established" && c.status == "True"))
        },
    )
    .await?;
    Ok(uid)
}
