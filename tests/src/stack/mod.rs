//! A real KubeStellar environment from upstream components, as local processes on loopback:
//! one etcd; kube-apiservers for the KubeFlex hosting cluster, the WDS, the ITS, each WEC and a
//! spare WDS; kube-controller-managers; the KubeFlex operator on the hosting cluster, which adopts
//! the ITS; kube-scheduler and kwok on each WEC; the OCM hub on the ITS and an OCM klusterlet
//! agent per WEC, joined by OCM's double opt-in; Jaeger; and our own processes: the hub process
//! for wds1, a stand-in kubelet on the hosting cluster, the ITS and each WEC that runs our
//! images, and the status add-on chart installed by helm on its1 (its ks-addon installs the
//! status agent on every WEC through OCM). Where the host has containerd, cluster1 also gets a
//! real node that runs the test workload's containers ([`node`]), pulled from the stack's OCI
//! registry ([`registry`]).
//!
//! State lives in `.stack/` at the repository root: `kubeconfig` (a context per space), `env`
//! (to source), `logs/`, `pids/`, `pki/`. `up` is idempotent; `down` stops what `up` started.

mod hub;
mod jaeger;
mod kubeconfig;
pub mod kubeflex;
pub mod kubelet;
pub mod node;
pub mod ocm;
mod pki;
mod procs;
pub mod registry;
mod spaces;
pub mod status_addon;
mod tools;
mod upstream_hub;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

pub use hub::{HUB_MAX_NUM_WRAPPED, HubOptions};
pub use jaeger::{JAEGER_OTLP_GRPC, JAEGER_OTLP_HTTP, JAEGER_QUERY};
pub use pki::{ADMIN, BOOTSTRAP, Pki};
pub use procs::Procs;
pub use spaces::CreatedCrd;
pub use status_addon::ADDON_PROCESS;

/// The field manager of everything the stack writes.
pub const FIELD_MANAGER: &str = "ks-stack";
const ETCD_PORT: u16 = 22379;
const ETCD_PEER_PORT: u16 = 22380;
/// The WDS for which no hub runs until one is installed (by the hub chart, through KubeFlex).
pub const SPARE_WDS: &str = "wds2";
/// Apiserver ports: kubeflex, wds1, its1, then one per WEC; the spare WDS's is the one below.
const APISERVER_BASE_PORT: u16 = 22443;
/// Serving ports of OCM processes and kwok, one per process.
const SIDE_BASE_PORT: u16 = 22543;

/// Whether a process of ours exports traces to the stack's Jaeger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracing {
    On,
    Off,
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

    /// The space `name`.
    pub fn space(&self, name: &str) -> anyhow::Result<Space> {
        self.spaces()
            .into_iter()
            .find(|s| s.name == name)
            .with_context(|| format!("no space {name}"))
    }

    /// Whether the stack runs real nodes: the host has what they need.
    pub fn has_real_nodes(&self) -> bool {
        node::cannot_run().is_none()
    }

    /// Whether `space` has a real node.
    pub fn has_real_node(&self, space: &str) -> bool {
        self.has_real_nodes() && node::REAL_NODE_SPACES.contains(&space)
    }

    /// The host address the stack's apiservers are reached at from Pods as from the host:
    /// [`node::STACK_ADDRESS`] with real nodes, else loopback.
    pub fn api_host(&self) -> std::net::Ipv4Addr {
        if self.has_real_nodes() {
            node::STACK_ADDRESS
        } else {
            std::net::Ipv4Addr::LOCALHOST
        }
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

    fn crds(&self, set: &str) -> PathBuf {
        self.cache.join("crds").join(set)
    }

    pub fn pki(&self) -> Pki {
        Pki {
            dir: self.state.join("pki"),
        }
    }

    /// Brings every component up, or the ones not yet running.
    pub async fn up(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        self.check_binaries()?;
        self.check_ports()?;
        let pki = Pki::ensure(&self.state.join("pki"))?;
        if self.has_real_nodes() {
            Self::ensure_stack_address()?;
        }
        self.write_kubeconfigs(&pki)?;
        self.start_etcd(&pki)?;
        wait_tcp(ETCD_PORT, Duration::from_secs(30)).with_context(|| self.procs.tail("etcd", 20))?;
        for space in self.spaces() {
            self.start_apiserver(&pki, &space)?;
        }
        for space in self.spaces() {
            self.wait_apiserver(&space).await?;
        }
        self.install_crds().await?;
        self.start_kubeflex_operator()?;
        self.adopt("its1", "its").await?;
        // The WorkStatus CRD on the ITS, as the status add-on chart installs it.
        ks_shared::crds::install(&self.client("its1").await?, ks_shared::crds::Space::Its, FIELD_MANAGER).await?;
        // After the CRDs: the ITS's resourcequota controller learns of new resources only every
        // 30 s, and until it counts WorkStatuses the stack waits (`wait_mailbox_quotas`).
        for space in self.spaces() {
            self.start_controllers(&pki, &space)?;
        }
        ocm::prepare_hub(&self.client("its1").await?).await?;
        self.start_ocm_hub()?;
        for wec in self.wec_names() {
            ocm::prepare_wec(&self.client(&wec).await?).await?;
            self.forget_stale_hub_credential(&wec).await?;
            self.start_klusterlet(&wec, None)?;
        }
        ocm::join(&self.client("its1").await?, &self.wec_names(), region, &self.procs).await?;
        ocm::wait_work_agents(&self.client("its1").await?, &self.wec_names()).await?;
        self.start_jaeger()?;
        // The hosting cluster's kubelet runs what KubeFlex's hooks deploy there (ks-hub), unless
        // a real node does; the ITS's the status add-on controller, each WEC's its status agent.
        for space in ["kubeflex", "its1"]
            .map(String::from)
            .into_iter()
            .chain(self.wec_names())
            .filter(|space| !(self.has_real_node(space) && node::is_only_node(space)))
        {
            self.start_kubelet(&space)?;
        }
        // A real node where containers run, on the spaces that get one, if the host can.
        match node::cannot_run() {
            None => {
                self.start_registry()?;
                let spaces = self.spaces();
                for (index, space) in node::REAL_NODE_SPACES.iter().enumerate() {
                    if spaces.iter().any(|s| s.name == *space) {
                        self.start_real_node(space, index as u8).await?;
                    }
                }
            }
            Some(missing) => println!("no real node: {missing}"),
        }
        self.start_hub("wds1", HubOptions::STACK)?;
        self.install_status_addon().await?;
        self.wait_mailbox_quotas().await?;
        self.write_env()?;
        println!("stack up in {:.1}s", started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Stops every process `up` started: everything else first, etcd last.
    pub fn down(&self) -> anyhow::Result<()> {
        self.stop_real_node_pods();
        let (etcd, others): (Vec<String>, Vec<String>) = self.procs.started().into_iter().partition(|n| n == "etcd");
        self.procs.stop_all(&others, Duration::from_secs(10))?;
        self.release_real_node_mounts();
        self.remove_real_node_networks();
        self.procs.stop_all(&etcd, Duration::from_secs(10))
    }

    /// Stops every process and starts the stack again from nothing (a new etcd, new
    /// certificates), keeping the logs: `make down`, `rm -rf .stack` and `make up` in one. For a
    /// benchmark run that must not inherit the previous run's backlog in the apiservers.
    pub async fn start_afresh(&self) -> anyhow::Result<()> {
        self.down()?;
        for entry in std::fs::read_dir(&self.state)? {
            let path = entry?.path();
            if path == self.procs.logs {
                continue;
            }
            if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            }
            .with_context(|| format!("removing {}", path.display()))?;
        }
        std::fs::create_dir_all(&self.procs.pids)?;
        self.up().await
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
            "kubelet" => 900,
            "kube-proxy" => 950,
            "kube-proxy-metrics" => 1000,
            _ => 200,
        };
        SIDE_BASE_PORT + offset + index
    }
}

/// Waits until a TCP port accepts connections.
fn wait_tcp(port: u16, deadline: Duration) -> anyhow::Result<()> {
    wait_tcp_at(std::net::Ipv4Addr::LOCALHOST, port, deadline)
}

fn wait_tcp_at(host: std::net::Ipv4Addr, port: u16, deadline: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + deadline;
    loop {
        if std::net::TcpStream::connect((host, port)).is_ok() {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("nothing listens on {host}:{port} after {deadline:?}");
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
