//! A real KubeStellar environment from upstream components, as local processes on loopback:
//! one etcd; kube-apiservers for the KubeFlex hosting cluster, the WDS, the ITS, each WEC and a
//! spare WDS; kube-controller-managers; the KubeFlex operator on the hosting cluster, which adopts
//! the ITS; kube-scheduler and kwok on each WEC; the OCM hub on the ITS and an OCM klusterlet
//! agent per WEC, joined by OCM's double opt-in; Jaeger; and our own processes: the hub process
//! for wds1, a stand-in kubelet on the hosting cluster, the ITS and each WEC that runs our
//! images, and the status add-on chart installed by helm on its1 (its ks-addon installs the
//! status agent on every WEC through OCM).
//!
//! State lives in `.stack/` at the repository root: `kubeconfig` (a context per space), `env`
//! (to source), `logs/`, `pids/`, `pki/`. `up` is idempotent; `down` stops what `up` started.

mod kubeconfig;
pub mod kubeflex;
pub mod kubelet;
mod ocm;
mod pki;
mod procs;
pub mod status_addon;
mod upstream_hub;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use ks_shared::ocm::ManagedCluster;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};

pub use pki::{ADMIN, BOOTSTRAP, Pki};
pub use procs::Procs;
pub use status_addon::ADDON_PROCESS;

/// The field manager of everything the stack writes.
pub const FIELD_MANAGER: &str = "ks-stack";
/// The stack's hub puts at most this many objects in one ManifestWork.
pub const HUB_MAX_NUM_WRAPPED: usize = 20;
const ETCD_PORT: u16 = 22379;
const ETCD_PEER_PORT: u16 = 22380;
/// The WDS for which no hub runs until one is installed (by the hub chart, through KubeFlex).
pub const SPARE_WDS: &str = "wds2";
/// Apiserver ports: kubeflex, wds1, its1, then one per WEC; the spare WDS's is the one below.
const APISERVER_BASE_PORT: u16 = 22443;
/// Serving ports of OCM processes and kwok, one per process.
const SIDE_BASE_PORT: u16 = 22543;
/// Jaeger's standard ports, as users and tools expect them.
pub const JAEGER_OTLP_GRPC: u16 = 4317;
pub const JAEGER_OTLP_HTTP: u16 = 4318;
pub const JAEGER_QUERY: u16 = 16686;

/// Whether a process of ours exports traces to the stack's Jaeger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracing {
    On,
    Off,
}

/// The add-on's `--max-work-statuses` in the stack: a quota in every mailbox, as a careful
/// operator would set.
pub const MAX_WORK_STATUSES: u32 = 100_000;

/// How the stack runs our hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HubOptions {
    pub tracing: Tracing,
    /// `--max-num-wrapped`; `None` is the shipped default. The stack's is
    /// [`HUB_MAX_NUM_WRAPPED`], so tests see sharding by count.
    pub max_num_wrapped: Option<usize>,
}

impl HubOptions {
    /// As `make up` runs it.
    pub const STACK: HubOptions = HubOptions {
        tracing: Tracing::On,
        max_num_wrapped: Some(HUB_MAX_NUM_WRAPPED),
    };
}

/// What a space is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Hosting,
    Wds,
    Its,
    Wec,
}

/// One kube-apiserver of the stack.
#[derive(Clone, Debug)]
pub struct Space {
    pub name: String,
    pub port: u16,
    pub role: Role,
}

/// The stack for a repository checkout.
#[derive(Clone)]
pub struct Stack {
    pub state: PathBuf,
    pub wecs: usize,
    pub cache: PathBuf,
    pub procs: Procs,
    /// Where our own binaries are (`ks-stack`, `ks-agent`, ...): the cargo target directory.
    pub our_binaries: PathBuf,
}

/// `region` labels of the getting-started WECs.
fn region(wec: &str) -> Option<&'static str> {
    match wec {
        "cluster1" => Some("east"),
        "cluster2" => Some("west"),
        _ => None,
    }
}

impl Stack {
    /// The stack whose state is in `<repo>/.stack`, with `wecs` WECs, running our binaries from
    /// `our_binaries`.
    pub fn new(repo: &Path, wecs: usize, our_binaries: &Path) -> anyhow::Result<Stack> {
        let repo = repo
            .canonicalize()
            .with_context(|| format!("repository {}", repo.display()))?;
        let state = repo.join(".stack");
        let cache = std::env::var_os("KS_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kubestellar-rs")))
            .context("neither KS_CACHE nor HOME is set")?;
        Ok(Stack {
            procs: Procs::new(&state)?,
            state,
            wecs,
            cache,
            our_binaries: our_binaries.to_path_buf(),
        })
    }

    pub fn spaces(&self) -> Vec<Space> {
        let fixed = [("kubeflex", Role::Hosting), ("wds1", Role::Wds), ("its1", Role::Its)];
        let wecs = (1..=self.wecs).map(|i| (format!("cluster{i}"), Role::Wec));
        // A WDS without a hub of the stack's: for installing one as users do, through KubeFlex.
        // Below the others, so that its port stays when WECs are added.
        let spare = Space {
            name: SPARE_WDS.to_string(),
            port: APISERVER_BASE_PORT - 1,
            role: Role::Wds,
        };
        fixed
            .into_iter()
            .map(|(n, r)| (n.to_string(), r))
            .chain(wecs)
            .enumerate()
            .map(|(i, (name, role))| Space {
                name,
                port: APISERVER_BASE_PORT + i as u16,
                role,
            })
            .chain(std::iter::once(spare))
            .collect()
    }

    pub fn wec_names(&self) -> Vec<String> {
        self.spaces()
            .into_iter()
            .filter(|s| s.role == Role::Wec)
            .map(|s| s.name)
            .collect()
    }

    fn bin(&self, name: &str) -> PathBuf {
        self.cache.join("bin").join(name)
    }

    /// Runs `program` (kubectl, helm, a kubectl plugin) against the stack's kubeconfig; what it
    /// printed, or an error with its standard error.
    pub fn tool(&self, program: &Path, args: &[&str]) -> anyhow::Result<String> {
        let output = std::process::Command::new(program)
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .output()
            .with_context(|| format!("running {}", program.display()))?;
        anyhow::ensure!(
            output.status.success(),
            "{} {} failed: {}",
            program.file_name().unwrap_or_default().to_string_lossy(),
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn crds(&self, set: &str) -> PathBuf {
        self.cache.join("crds").join(set)
    }

    pub fn pki(&self) -> Pki {
        Pki {
            dir: self.state.join("pki"),
        }
    }

    /// The merged kubeconfig with a context per space.
    pub fn kubeconfig(&self) -> PathBuf {
        self.state.join("kubeconfig")
    }

    fn space_kubeconfig(&self, space: &str) -> PathBuf {
        self.state.join("kubeconfigs").join(format!("{space}.kubeconfig"))
    }

    fn bootstrap_kubeconfig(&self) -> PathBuf {
        self.state.join("kubeconfigs").join("its1-bootstrap.kubeconfig")
    }

    /// An admin client for a space's context.
    pub async fn client(&self, context: &str) -> anyhow::Result<Client> {
        Ok(ks_shared::client::client(Some(&self.kubeconfig()), Some(context)).await?)
    }

    /// Brings every component up, or the ones not yet running.
    pub async fn up(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        self.check_binaries()?;
        self.check_ports()?;
        let pki = Pki::ensure(&self.state.join("pki"))?;
        self.write_kubeconfigs(&pki)?;
        self.start_etcd(&pki)?;
        wait_tcp(ETCD_PORT, Duration::from_secs(30)).with_context(|| self.procs.tail("etcd", 20))?;
        for space in self.spaces() {
            self.start_apiserver(&pki, &space)?;
        }
        for space in self.spaces() {
            self.wait_apiserver(&space).await?;
        }
        for space in self.spaces() {
            self.start_controllers(&pki, &space)?;
        }
        self.install_crds().await?;
        self.start_kubeflex_operator()?;
        self.adopt("its1", "its").await?;
        // The WorkStatus CRD on the ITS, as the status add-on chart installs it.
        ks_shared::crds::install(&self.client("its1").await?, ks_shared::crds::Space::Its, FIELD_MANAGER).await?;
        ocm::prepare_hub(&self.client("its1").await?).await?;
        self.start_ocm_hub()?;
        for wec in self.wec_names() {
            ocm::prepare_wec(&self.client(&wec).await?).await?;
            self.forget_stale_hub_credential(&wec).await?;
            self.start_klusterlet(&wec)?;
        }
        ocm::join(&self.client("its1").await?, &self.wec_names(), region, &self.procs).await?;
        ocm::wait_work_agents(&self.client("its1").await?, &self.wec_names()).await?;
        self.start_jaeger()?;
        // The hosting cluster's kubelet runs what KubeFlex's hooks deploy there (ks-hub), the
        // ITS's the status add-on controller, each WEC's its status agent.
        for space in ["kubeflex", "its1"]
            .map(String::from)
            .into_iter()
            .chain(self.wec_names())
        {
            self.start_kubelet(&space)?;
        }
        self.start_hub("wds1", HubOptions::STACK)?;
        self.install_status_addon().await?;
        self.wait_mailbox_quotas().await?;
        self.write_env()?;
        println!("stack up in {:.1}s", started.elapsed().as_secs_f64());
        Ok(())
    }

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
    async fn forget_stale_hub_credential(&self, wec: &str) -> anyhow::Result<()> {
        let clusters: Api<ManagedCluster> = Api::all(self.client("its1").await?);
        if self.procs.running(&format!("ocm-agent-{wec}")).is_some() || clusters.get_opt(wec).await?.is_some() {
            return Ok(());
        }
        let secrets: Api<Secret> = Api::namespaced(self.client(wec).await?, ocm::AGENT_NAMESPACE);
        if secrets.get_opt(ocm::HUB_CREDENTIAL_SECRET).await?.is_some() {
            secrets
                .delete(ocm::HUB_CREDENTIAL_SECRET, &DeleteParams::default())
                .await?;
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

    /// Stops every process `up` started: everything else first, etcd last.
    pub fn down(&self) -> anyhow::Result<()> {
        let (etcd, others): (Vec<String>, Vec<String>) = self.procs.started().into_iter().partition(|n| n == "etcd");
        self.procs.stop_all(&others, Duration::from_secs(10))?;
        self.procs.stop_all(&etcd, Duration::from_secs(10))
    }

    /// True when every process of the stack itself was started and still runs (the local Pods
    /// the stand-in kubelet runs come and go with their Deployments and do not count).
    pub fn is_running(&self) -> bool {
        let started: Vec<String> = self
            .procs
            .started()
            .into_iter()
            .filter(|n| !n.starts_with(kubelet::POD_PREFIX))
            .collect();
        !started.is_empty() && started.iter().all(|n| self.procs.running(n).is_some())
    }

    /// One line per process: running or not.
    pub fn status(&self) -> Vec<String> {
        self.procs
            .started()
            .into_iter()
            .map(|n| match self.procs.running(&n) {
                Some(pid) => format!("{n}: running (pid {pid})"),
                None => format!("{n}: stopped"),
            })
            .collect()
    }

    /// A clear error, before anything starts, when a component has not been built.
    fn check_binaries(&self) -> anyhow::Result<()> {
        let upstream = [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
            "kubeflex-controller-manager",
        ];
        let ocm = ["registration", "addon", "placement", "registration-operator", "jaeger"];
        let missing: Vec<String> = upstream
            .iter()
            .chain(ocm.iter())
            .map(|b| self.bin(b))
            .chain(["ks-stack", "ks-hub", "ks-addon"].map(|b| self.our_binaries.join(b)))
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            bail!("missing {}: run `make deps` and `make build`", missing.join(", "));
        }
        Ok(())
    }

    /// A clear error when a port the stack needs is taken by something else.
    fn check_ports(&self) -> anyhow::Result<()> {
        let mut wanted = vec![
            ("etcd", ETCD_PORT),
            ("jaeger", JAEGER_OTLP_GRPC),
            ("jaeger", JAEGER_QUERY),
        ];
        let spaces = self.spaces();
        wanted.extend(spaces.iter().map(|s| ("apiserver", s.port)));
        for (owner, port) in wanted {
            let name = if owner == "apiserver" {
                let space = spaces
                    .iter()
                    .find(|s| s.port == port)
                    .map(|s| s.name.as_str())
                    .unwrap_or("?");
                format!("apiserver-{space}")
            } else {
                owner.to_string()
            };
            if self.procs.running(&name).is_none() && TcpListener::bind(("127.0.0.1", port)).is_err() {
                bail!("port {port} (for {name}) is taken by another process; free it or run `make down`");
            }
        }
        Ok(())
    }

    fn write_kubeconfigs(&self, pki: &Pki) -> anyhow::Result<()> {
        std::fs::create_dir_all(self.state.join("kubeconfigs"))?;
        let all: Vec<(String, u16)> = self.spaces().iter().map(|s| (s.name.clone(), s.port)).collect();
        std::fs::write(self.kubeconfig(), kubeconfig::render(pki, &ADMIN, &all)?)?;
        for space in &all {
            std::fs::write(
                self.space_kubeconfig(&space.0),
                kubeconfig::render(pki, &ADMIN, std::slice::from_ref(space))?,
            )?;
        }
        let its = all.iter().find(|s| s.0 == "its1").cloned().context("its1")?;
        std::fs::write(
            self.bootstrap_kubeconfig(),
            kubeconfig::render(pki, &BOOTSTRAP, &[its])?,
        )?;
        Ok(())
    }

    fn start_etcd(&self, pki: &Pki) -> anyhow::Result<()> {
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

    fn start_apiserver(&self, pki: &Pki, space: &Space) -> anyhow::Result<()> {
        let p = |path: PathBuf| path.display().to_string();
        let args = [
            format!("--etcd-servers=https://127.0.0.1:{ETCD_PORT}"),
            format!("--etcd-prefix=/registry-{}", space.name),
            format!("--etcd-cafile={}", p(pki.ca_cert())),
            format!("--etcd-certfile={}", p(pki.client_cert(&ADMIN))),
            format!("--etcd-keyfile={}", p(pki.client_key(&ADMIN))),
            format!("--secure-port={}", space.port),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
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
            "--endpoint-reconciler-type=none".into(),
            // No node lifecycle controller runs to lift the not-ready taint from kwok's Nodes.
            "--disable-admission-plugins=TaintNodesByCondition".into(),
            "--profiling=false".into(),
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

    async fn wait_apiserver(&self, space: &Space) -> anyhow::Result<()> {
        let name = format!("apiserver-{}", space.name);
        let client = self.client(&space.name).await?;
        wait_for(&format!("{name} to be ready"), Duration::from_secs(180), || async {
            self.procs.check_alive(&name)?;
            Ok(client.apiserver_version().await.is_ok())
        })
        .await
    }

    fn start_controllers(&self, pki: &Pki, space: &Space) -> anyhow::Result<()> {
        let p = |path: PathBuf| path.display().to_string();
        let kubeconfig = p(self.space_kubeconfig(&space.name));
        let mut controllers = vec![
            "namespace",
            "garbagecollector",
            "serviceaccount",
            "serviceaccount-token",
        ];
        match space.role {
            // resourcequota: counts the WorkStatuses under the add-on's quota in each mailbox.
            Role::Its => controllers.extend(["csrsigning", "csrcleaner", "clusterrole-aggregation", "resourcequota"]),
            Role::Wec => controllers.extend(["deployment", "replicaset", "daemonset", "statefulset", "job"]),
            Role::Hosting | Role::Wds => {}
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
        if space.role == Role::Wec {
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

    /// A distinct loopback port for a side process (OCM, kwok) of a space.
    fn side_port(&self, what: &str, space: &str) -> u16 {
        let index = self.spaces().iter().position(|s| s.name == space).unwrap_or(0) as u16;
        let offset = match what {
            "kwok" => 0,
            "ocm" => 100,
            "hub" => 300,
            "ks-addon" => 400,
            "placement" => 500,
            "upstream-metrics" => 600,
            "upstream-probes" => 650,
            "upstream-pprof" => 700,
            "upstream-transport-metrics" => 750,
            "upstream-transport-pprof" => 800,
            "kubeflex" => 850,
            _ => 200,
        };
        SIDE_BASE_PORT + offset + index
    }

    async fn install_crds(&self) -> anyhow::Result<()> {
        let sets: Vec<(String, PathBuf)> = std::iter::once(("kubeflex".to_string(), self.crds("kubeflex")))
            .chain(std::iter::once(("its1".to_string(), self.crds("ocm-hub"))))
            .chain(self.wec_names().into_iter().map(|w| (w, self.crds("ocm-spoke"))))
            .collect();
        for (space, dir) in sets {
            let client = self.client(&space).await?;
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .with_context(|| format!("{} is missing: run `make deps`", dir.display()))?
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<_, _>>()?;
            files.sort();
            for file in files {
                apply_crd(&client, &file)
                    .await
                    .with_context(|| format!("applying {} to {space}", file.display()))?;
            }
        }
        Ok(())
    }

    fn start_ocm_hub(&self) -> anyhow::Result<()> {
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

    fn start_klusterlet(&self, wec: &str) -> anyhow::Result<()> {
        let hub_dir = self.klusterlet_hub_dir(wec);
        std::fs::create_dir_all(&hub_dir)?;
        let args = [
            "agent".to_string(),
            format!("--spoke-cluster-name={wec}"),
            format!("--kubeconfig={}", self.space_kubeconfig(wec).display()),
            format!("--bootstrap-kubeconfig={}", self.bootstrap_kubeconfig().display()),
            format!("--hub-kubeconfig-dir={}", hub_dir.display()),
            // The work agent reads the hub credential the registration agent writes here.
            format!("--workload-source-config={}", hub_dir.join("kubeconfig").display()),
            format!("--listen=127.0.0.1:{}", self.side_port("ocm", wec)),
            format!("--namespace={}", ocm::AGENT_NAMESPACE),
            format!("--agent-id={wec}-stack"),
            "--disable-leader-election".to_string(),
        ];
        self.procs.ensure(
            &format!("ocm-agent-{wec}"),
            &self.bin("registration-operator"),
            &args,
            &[],
        )?;
        Ok(())
    }

    fn start_jaeger(&self) -> anyhow::Result<()> {
        let config = self.state.join("jaeger.yaml");
        std::fs::write(&config, JAEGER_CONFIG)?;
        self.procs.ensure(
            "jaeger",
            &self.bin("jaeger"),
            &[format!("--config={}", config.display())],
            &[],
        )?;
        // Processes export to it and tests query it as soon as `up` returns.
        for port in [JAEGER_OTLP_GRPC, JAEGER_QUERY] {
            wait_tcp(port, Duration::from_secs(30)).with_context(|| self.procs.tail("jaeger", 20))?;
        }
        Ok(())
    }

    /// Our hub process for a WDS, exporting traces to the stack's Jaeger when tracing is on.
    fn start_hub(&self, wds: &str, options: HubOptions) -> anyhow::Result<()> {
        self.spawn_hub(&Self::hub_process(wds), wds, self.hub_port(wds), options, &[])
    }

    /// A further hub for a WDS, the process `hub-<wds>-<replica>` serving /readyz on `port`, with
    /// `extra` flags (e.g. leader election); returns its process name. The test stops it.
    pub fn start_hub_replica(&self, wds: &str, replica: &str, port: u16, extra: &[String]) -> anyhow::Result<String> {
        let name = format!("{}-{replica}", Self::hub_process(wds));
        self.spawn_hub(&name, wds, port, HubOptions::STACK, extra)?;
        Ok(name)
    }

    fn spawn_hub(&self, name: &str, wds: &str, port: u16, options: HubOptions, extra: &[String]) -> anyhow::Result<()> {
        let mut args = vec![
            format!("--wds-kubeconfig={}", self.space_kubeconfig(wds).display()),
            format!("--its-kubeconfig={}", self.space_kubeconfig("its1").display()),
            format!("--wds-name={wds}"),
            format!("--http-address=127.0.0.1:{port}"),
        ];
        if let Some(n) = options.max_num_wrapped {
            args.push(format!("--max-num-wrapped={n}"));
        }
        args.extend_from_slice(extra);
        let otlp = format!("http://127.0.0.1:{JAEGER_OTLP_GRPC}");
        let mut env = vec![("OTEL_SERVICE_NAME", "ks-hub")];
        if options.tracing == Tracing::On {
            env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.as_str()));
        }
        self.procs
            .ensure(name, &self.our_binaries.join("ks-hub"), &args, &env)?;
        Ok(())
    }

    /// The process name of our hub for a WDS.
    pub fn hub_process(wds: &str) -> String {
        format!("hub-{wds}")
    }

    /// Restarts our hub for a WDS with other options, and waits until it is ready. A test or
    /// benchmark that changes them restores [`HubOptions::STACK`] when done.
    pub async fn restart_hub(&self, wds: &str, options: HubOptions) -> anyhow::Result<()> {
        self.procs.stop(&Self::hub_process(wds), Duration::from_secs(10))?;
        self.start_hub(wds, options)?;
        self.wait_hub_ready(wds, Duration::from_secs(60)).await
    }

    /// Waits until our hub for a WDS answers /readyz with 200.
    pub async fn wait_hub_ready(&self, wds: &str, deadline: Duration) -> anyhow::Result<()> {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.hub_port(wds)));
        let name = Self::hub_process(wds);
        wait_for(&format!("{name} to be ready"), deadline, || {
            let alive = self.procs.check_alive(&name);
            let ready =
                std::net::TcpStream::connect(address).is_ok() && crate::process::http_get(address, "/readyz").0 == 200;
            std::future::ready(alive.map(|()| ready))
        })
        .await
    }

    /// Where the hub of a WDS serves /metrics, /healthz and /readyz.
    pub fn hub_port(&self, wds: &str) -> u16 {
        self.side_port("hub", wds)
    }

    /// Waits until the add-on's quota in every WEC's mailbox counts WorkStatuses: until then the
    /// ITS refuses every WorkStatus there ("status unknown for quota"), which would hold status
    /// back for the first tests.
    async fn wait_mailbox_quotas(&self) -> anyhow::Result<()> {
        let its = self.client("its1").await?;
        for wec in self.wec_names() {
            let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> = Api::namespaced(its.clone(), &wec);
            wait_for(
                &format!("the WorkStatus quota in {wec}'s mailbox to count"),
                Duration::from_secs(180),
                || async {
                    self.procs.check_alive("kubelet-its1")?;
                    let quota = quotas.get_opt("addon-status-workstatuses").await?;
                    let used = quota.and_then(|q| q.status).and_then(|s| s.used).unwrap_or_default();
                    Ok(used.contains_key("count/workstatuses.control.kubestellar.io"))
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Where the status add-on controller serves /metrics, /healthz and /readyz.
    pub fn addon_port(&self) -> u16 {
        self.side_port("ks-addon", "its1")
    }

    /// Waits until the status agent the stack runs for `wec` answers /readyz (it leads and has
    /// listed the AppliedManifestWorks); returns its process id.
    pub async fn wait_agent_ready(&self, wec: &str, deadline: Duration) -> anyhow::Result<u32> {
        let name = Self::agent_process(wec);
        let mut ready = None;
        wait_for(&format!("the status agent on {wec} to be ready"), deadline, || {
            ready = self.procs.running(&name).filter(|_| {
                self.agent_address(wec).is_some_and(|address| {
                    std::net::TcpStream::connect(address).is_ok()
                        && crate::process::http_get(address, "/readyz").0 == 200
                })
            });
            std::future::ready(Ok(ready.is_some()))
        })
        .await?;
        ready.context("ready")
    }

    /// Where the status agent for `wec` serves /metrics, /healthz and /readyz, as it last said.
    pub fn agent_address(&self, wec: &str) -> Option<std::net::SocketAddr> {
        // The log keeps earlier runs: the last address announced is the current one.
        let text = std::fs::read_to_string(self.procs.log_file(&Self::agent_process(wec))).ok()?;
        let line = text.lines().rev().find(|l| l.contains("serving /metrics"))?;
        Some(crate::process::address_in(line))
    }

    /// The stand-in kubelet that runs our images' Deployments on a WEC as local processes.
    fn start_kubelet(&self, space: &str) -> anyhow::Result<()> {
        let repo = self.state.parent().context("state directory has a parent")?;
        let args = [
            "kubelet".to_string(),
            format!("--repo={}", repo.display()),
            format!("--space={space}"),
        ];
        self.procs.ensure(
            &format!("kubelet-{space}"),
            &self.our_binaries.join("ks-stack"),
            &args,
            &[],
        )?;
        Ok(())
    }

    /// The process name of the status agent the stack runs for `wec`.
    pub fn agent_process(wec: &str) -> String {
        kubelet::pod_process(
            wec,
            ks_shared::names::AGENT_INSTALL_NAMESPACE,
            ks_shared::names::STATUS_AGENT_DEPLOYMENT,
        )
    }

    fn write_env(&self) -> anyhow::Result<()> {
        let env = format!(
            "# Source this file to use the stack: `source .stack/env`.\nexport KUBECONFIG={}\nexport PATH={}:{}:$PATH\n",
            self.kubeconfig().display(),
            self.cache.join("bin").display(),
            // Our binaries, the kubectl plugin `kubectl-kubestellar` among them.
            self.our_binaries.display()
        );
        std::fs::write(self.state.join("env"), env)?;
        Ok(())
    }
}

/// Jaeger v2 with in-memory storage: OTLP in, query API and UI on 16686, on loopback only.
const JAEGER_CONFIG: &str = r#"service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:16686
    grpc:
      endpoint: 127.0.0.1:16685
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:13133
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:4317
      http:
        endpoint: 127.0.0.1:4318
processors:
  batch: {}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"#;

/// Server-side applies one CRD file and waits until the CRD is Established.
async fn apply_crd(client: &Client, file: &Path) -> anyhow::Result<()> {
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&std::fs::read_to_string(file)?)?;
    let name = crd.metadata.name.clone().context("CRD without a name")?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&crd))
        .await?;
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
    .await
}

/// Waits until a TCP port accepts connections.
fn wait_tcp(port: u16, deadline: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + deadline;
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("nothing listens on 127.0.0.1:{port} after {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls `check` until it returns true, failing after `deadline` with what was awaited. An error
/// from `check` is fatal (e.g. the awaited process died); transient failures should be `Ok(false)`.
pub async fn wait_for<F, Fut>(what: &str, deadline: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let until = Instant::now() + deadline;
    loop {
        if check().await.with_context(|| format!("waiting for {what}"))? {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("timed out after {deadline:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
