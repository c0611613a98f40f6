//! Real nodes: Debian's containerd (with its CRI plugin and overlayfs) and runc run the
//! Pods that a kubelet, built from the pinned Kubernetes release, is given by its space's scheduler.
//! [`REAL_NODE_SPACES`] get one each: a WEC, where workloads and the status agent run, and the
//! KubeFlex hosting cluster, where the hub chart's hooks and ks-hub run.
//! Pods get addresses on a bridge of the node's own (Debian's CNI plugins), which the kubelet's
//! probes reach from the host. It pulls images from the stack's registry ([`super::registry`]),
//! where the stack pushes its test workload image `ks-pod` (`images/build.sh ks-pod`), which is
//! also every Pod's pause container. It is tainted [`REAL_NODE_TAINT`], so that only Pods that ask
//! for it (tolerate the taint and select [`REAL_NODE_LABEL`]) run there, and every other Pod stays
//! on the WEC's kwok node. The other nodes are their space's only node: untainted, every Pod runs
//! there, and their containerd takes ghcr.io's images (where the charts' defaults are) from the
//! stack's registry, as a mirror.
//!
//! Its Pods reach the stack's apiservers as Pods reach a cluster's: `kubernetes.default`
//! (10.96.0.1) through a kube-proxy of the node's own (built from the pinned release, iptables
//! mode), whose endpoint is its space's apiserver at [`STACK_ADDRESS`], an address of the host's
//! loopback link that every apiserver (and the registry) listens on once the stack has real nodes;
//! the OCM agents join the ITS at that address too, so the credentials they hand on to add-on
//! agents work from Pods.
//!
//! The first node shares the host's network namespace. Each other one has a namespace of its own,
//! joined to the host by a veth pair, because two kube-proxies in one namespace would rewrite each
//! other's chains (both own `KUBE-SERVICES`, and both clusters' `kubernetes.default` is 10.96.0.1):
//! its containerd, kubelet and kube-proxy run in it (`nsenter --net`), its Pods' bridge is there,
//! and the host routes its Pod subnet through the pair, so the apiservers reach its Pods (webhooks,
//! the service proxy) as the Pods reach them.
//!
//! It runs only where containerd, runc, the CNI plugins, iptables and iproute2 are installed
//! (`apt-get install containerd runc containernetworking-plugins iptables iproute2`, which CI
//! does) and the stack runs as root (it adds an address, links and firewall rules); elsewhere the
//! stack says so and goes on without it ([`cannot_run`]), and the tests that need it fail saying
//! why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::pki::ClientIdentity;
use super::registry::REGISTRY;
use super::{FIELD_MANAGER, Stack, wait_for};

/// The spaces that get a real node, in the order of their index (Pod subnet `10.89.<index>.0/24`);
/// the first in the host's network namespace.
pub const REAL_NODE_SPACES: [&str; 2] = ["cluster1", "kubeflex"];
/// The label every real node carries (value `true`).
pub const REAL_NODE_LABEL: &str = "kubestellar.io/real-node";
/// The taint (effect `NoSchedule`) that keeps Pods off a real node unless they tolerate it.
pub const REAL_NODE_TAINT: &str = "kubestellar.io/real-node";
/// What the node's containerd runs: the test workload, also its pause image.
pub const POD_IMAGE: &str = "ks-pod";

/// The host address Pods reach the stack's apiservers at: added to the host's loopback link when
/// the stack has real nodes. Every apiserver's serving certificate names it.
pub const STACK_ADDRESS: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 88, 0, 1);
/// The first address of the spaces' Service range, `kubernetes.default`'s: every serving
/// certificate names it, as Pods' in-cluster clients ask for it.
pub const KUBERNETES_SERVICE_ADDRESS: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 96, 0, 1);

/// Where the host's container tools are (Debian's packages).
const CONTAINERD: &str = "/usr/bin/containerd";
const CTR: &str = "/usr/bin/ctr";
const CNI_PLUGINS: &str = "/usr/lib/cni";
const IPTABLES: &str = "/usr/sbin/iptables";
const IP: &str = "/usr/sbin/ip";
const NSENTER: &str = "/usr/bin/nsenter";
/// containerd looks for runc and its shim on `PATH`.
const TOOLS_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Whether `space`'s real node is its only node (untainted, in a network namespace of its own):
/// every space's but the first's.
pub fn is_only_node(space: &str) -> bool {
    REAL_NODE_SPACES.iter().position(|s| *s == space).is_some_and(|i| i > 0)
}

/// The name of the real node of `space`.
pub fn node_name(space: &str) -> String {
    format!("{space}-real")
}

/// The network namespace of the real node with `index`, and its addresses, unless it shares the
/// host's (index 0).
struct OwnNetwork {
    /// `ks-node-<index>`, at `/run/netns/<name>`.
    name: String,
    /// The veth pair's ends: on the host, in the namespace.
    host_link: String,
    node_link: String,
    /// `10.87.<index>.1` on the host's end, `.2` on the node's (its InternalIP).
    host_address: std::net::Ipv4Addr,
    node_address: std::net::Ipv4Addr,
    /// The node's Pod subnet, routed through the pair.
    pods: String,
}

impl OwnNetwork {
    fn of(index: u8) -> Option<OwnNetwork> {
        (index > 0).then(|| OwnNetwork {
            name: format!("ks-node-{index}"),
            host_link: format!("ks-node-{index}h"),
            node_link: format!("ks-node-{index}n"),
            host_address: std::net::Ipv4Addr::new(10, 87, index, 1),
            node_address: std::net::Ipv4Addr::new(10, 87, index, 2),
            pods: pod_subnet(index),
        })
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Makes the namespace, the pair, the addresses and routes, unless they are there.
    fn ensure(&self) -> anyhow::Result<()> {
        let there = Path::new(&self.path()).exists()
            && Command::new(IP)
                .args(["link", "show", &self.host_link])
                .output()
                .is_ok_and(|o| o.status.success());
        if there {
            return Ok(());
        }
        self.remove();
        let n = self.name.as_str();
        let host = format!("{}/24", self.host_address);
        let node = format!("{}/24", self.node_address);
        let gateway = self.host_address.to_string();
        let steps: [&[&str]; 10] = [
            &["netns", "add", n],
            &[
                "link",
                "add",
                &self.host_link,
                "type",
                "veth",
                "peer",
                "name",
                &self.node_link,
                "netns",
                n,
            ],
            &["address", "add", &host, "dev", &self.host_link],
            &["link", "set", &self.host_link, "up"],
            &["-n", n, "link", "set", "lo", "up"],
            &["-n", n, "address", "add", &node, "dev", &self.node_link],
            &["-n", n, "link", "set", &self.node_link, "up"],
            &["-n", n, "route", "add", "default", "via", &gateway],
            &["route", "replace", &self.pods, "via", &self.node_address.to_string()],
            // Forwards between the veth and the Pods' bridge (a new namespace does not).
            &["netns", "exec", n, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
        ];
        for step in steps {
            let output = Command::new(IP).args(step).output()?;
            anyhow::ensure!(
                output.status.success(),
                "ip {}: {}",
                step.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }

    /// Removes the namespace (with its end of the pair, the rules its kube-proxy made and the
    /// Pods' bridge) and the host's end, with its route. Both names are the stack's own
    /// (`ks-node-<index>`); either may be absent (never made, or removed already), which is why
    /// a failure is not an error.
    fn remove(&self) {
        let _ = Command::new(IP).args(["netns", "delete", &self.name]).output();
        let _ = Command::new(IP).args(["link", "delete", &self.host_link]).output();
    }

    /// `binary args…` run in the namespace: through `nsenter`, which enters it and executes
    /// `binary` in its place (same PID).
    fn command(&self, binary: &Path, args: &[String]) -> (PathBuf, Vec<String>) {
        let mut all = vec![format!("--net={}", self.path()), binary.display().to_string()];
        all.extend_from_slice(args);
        (PathBuf::from(NSENTER), all)
    }
}

/// The Pod subnet of the real node with `index`.
fn pod_subnet(index: u8) -> String {
    format!("10.89.{index}.0/24")
}

/// Why this host cannot run real nodes, if it cannot: a tool missing, or not root (a real node
/// adds an address, links and firewall rules).
pub fn cannot_run() -> Option<String> {
    let needed = [
        CONTAINERD,
        CTR,
        "/usr/sbin/runc",
        "/usr/bin/containerd-shim-runc-v2",
        "/usr/lib/cni/bridge",
        "/usr/lib/cni/host-local",
        "/usr/lib/cni/loopback",
        IPTABLES,
        "/usr/sbin/iptables-restore",
        IP,
        NSENTER,
    ];
    let missing: Vec<&str> = needed.into_iter().filter(|p| !Path::new(p).exists()).collect();
    if !missing.is_empty() {
        return Some(format!(
            "missing {}: install Debian's containerd, runc, containernetworking-plugins, iptables and iproute2",
            missing.join(", ")
        ));
    }
    // Unreadable counts as not root: the stack then goes on without real nodes, saying why.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (effective_uid(&status) != Some(0))
        .then(|| "not root: a real node adds an address, links and firewall rules".into())
}

/// The effective user ID in a `/proc/<pid>/status` text (`Uid: real effective saved fs`).
fn effective_uid(status: &str) -> Option<u32> {
    let uids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    uids.split_whitespace().nth(1)?.parse().ok()
}

/// A real node's files, under `.stack/nodes/<space>`.
struct NodeFiles {
    dir: PathBuf,
}

impl NodeFiles {
    fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }
    fn containerd_config(&self) -> PathBuf {
        self.dir.join("containerd.toml")
    }
    fn kubelet_config(&self) -> PathBuf {
        self.dir.join("kubelet.yaml")
    }
    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubelet.kubeconfig")
    }
    fn cni(&self) -> PathBuf {
        self.dir.join("cni")
    }
    fn kube_proxy_config(&self) -> PathBuf {
        self.dir.join("kube-proxy.yaml")
    }
}

impl Stack {
    fn node_files(&self, space: &str) -> NodeFiles {
        NodeFiles {
            dir: self.state.join("nodes").join(space),
        }
    }

    /// Process names of a space's real node.
    fn node_processes(space: &str) -> [String; 3] {
        [
            format!("node-{space}-containerd"),
            format!("node-{space}-kubelet"),
            format!("node-{space}-kube-proxy"),
        ]
    }

    /// Starts `binary` as process `name`, in the node's network namespace if it has its own.
    fn start_node_process(
        &self,
        name: &str,
        network: Option<&OwnNetwork>,
        binary: &Path,
        args: &[String],
    ) -> anyhow::Result<()> {
        let env = [("PATH", TOOLS_PATH)];
        match network {
            None => self.procs.ensure(name, binary, args, &env)?,
            Some(network) => {
                let (nsenter, args) = network.command(binary, args);
                self.procs.ensure(name, &nsenter, &args, &env)?
            }
        };
        Ok(())
    }

    /// Makes [`STACK_ADDRESS`] an address of the host (on the loopback link, which every host
    /// has, unlike a dummy one), unless it is.
    pub(super) fn ensure_stack_address() -> anyhow::Result<()> {
        let address = format!("{STACK_ADDRESS}/32");
        let shown = Command::new(IP)
            .args(["-brief", "address", "show", "dev", "lo"])
            .output()?;
        if String::from_utf8_lossy(&shown.stdout).contains(&address) {
            return Ok(());
        }
        let output = Command::new(IP)
            .args(["address", "add", &address, "dev", "lo"])
            .output()?;
        anyhow::ensure!(
            output.status.success(),
            "ip address add {address} dev lo: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(())
    }

    /// Starts the real node of `space` (containerd, the kubelet, then kube-proxy), unless it runs;
    /// waits until its Node is Ready and kube-proxy has made its rules.
    pub(super) async fn start_real_node(&self, space: &str, index: u8) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        let files = self.node_files(space);
        let network = OwnNetwork::of(index);
        if let Some(network) = &network {
            network.ensure()?;
        }
        let [containerd, kubelet, proxy] = Self::node_processes(space);
        std::fs::create_dir_all(files.cni())?;
        // Pulled from the stack's registry, as every image the node runs.
        let pause = self.push_image(POD_IMAGE)?;
        self.write_containerd_config(space, index, &files, &pause)?;
        self.start_node_process(
            &containerd,
            network.as_ref(),
            Path::new(CONTAINERD),
            &["--config".into(), files.containerd_config().display().to_string()],
        )?;
        wait_for("containerd's socket", Duration::from_secs(30), || async {
            self.procs.check_alive(&containerd)?;
            Ok(files.socket().exists())
        })
        .await
        .with_context(|| self.procs.tail(&containerd, 20))?;
        self.write_kubelet_files(space, network.is_some(), &files).await?;
        let mut args = vec![
            format!("--config={}", files.kubelet_config().display()),
            format!("--kubeconfig={}", files.kubeconfig().display()),
            format!("--hostname-override={}", node_name(space)),
            format!("--root-dir={}", files.dir.join("kubelet").display()),
            format!("--cert-dir={}", files.dir.join("kubelet-pki").display()),
            format!("--node-labels={REAL_NODE_LABEL}=true"),
        ];
        if let Some(network) = &network {
            args.push(format!("--node-ip={}", network.node_address));
        }
        self.start_node_process(&kubelet, network.as_ref(), &self.bin("kubelet"), &args)?;
        let nodes: Api<Node> = Api::all(self.client(space).await?);
        let name = node_name(space);
        wait_for(&format!("Node {name} Ready"), Duration::from_secs(60), || async {
            self.procs.check_alive(&kubelet)?;
            let node = nodes.get_opt(&name).await.unwrap_or(None);
            Ok(node.is_some_and(|n| is_ready(&n)))
        })
        .await
        .with_context(|| self.procs.tail(&kubelet, 30))?;
        self.write_kube_proxy_files(space, index, network.is_some(), &files)?;
        let args = [format!("--config={}", files.kube_proxy_config().display())];
        self.start_node_process(&proxy, network.as_ref(), &self.bin("kube-proxy"), &args)?;
        // Synced once the node's rules lead `kubernetes.default` to its space's apiserver.
        let list_rules = ["-t", "nat", "-S", "KUBE-SERVICES"];
        wait_for(
            "kube-proxy's rules for kubernetes.default",
            Duration::from_secs(60),
            || async {
                self.procs.check_alive(&proxy)?;
                let rules = match &network {
                    None => Command::new(IPTABLES).args(list_rules).output()?,
                    Some(network) => {
                        let (nsenter, args) = network.command(Path::new(IPTABLES), &list_rules.map(String::from));
                        Command::new(nsenter).args(args).output()?
                    }
                };
                Ok(String::from_utf8_lossy(&rules.stdout).contains("default/kubernetes:https"))
            },
        )
        .await
        .with_context(|| self.procs.tail(&proxy, 30))?;
        println!("real node {name} Ready in {:.1}s", started.elapsed().as_secs_f64());
        Ok(())
    }

    /// kube-proxy's configuration and credential (`system:kube-proxy`, which Kubernetes binds
    /// to `system:node-proxier`). It leaves the host's conntrack settings as they are.
    fn write_kube_proxy_files(
        &self,
        space: &str,
        index: u8,
        own_network: bool,
        files: &NodeFiles,
    ) -> anyhow::Result<()> {
        let pki = self.pki();
        let who = ClientIdentity {
            file: "kube-proxy",
            user: "system:kube-proxy",
            groups: &[],
        };
        pki.ensure_client(&who)?;
        let kubeconfig = files.dir.join("kube-proxy.kubeconfig");
        write_if_changed(&kubeconfig, &self.node_kubeconfig(space, own_network, &who)?)?;
        let config = json!({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": kubeconfig.display().to_string()},
            "hostnameOverride": node_name(space),
            "mode": "iptables",
            "clusterCIDR": pod_subnet(index),
            "healthzBindAddress": format!("127.0.0.1:{}", self.side_port("kube-proxy", space)),
            "metricsBindAddress": format!("127.0.0.1:{}", self.side_port("kube-proxy-metrics", space)),
            "nodePortAddresses": ["127.0.0.1/32"],
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        });
        write_if_changed(&files.kube_proxy_config(), &serde_saphyr::to_string(&config)?)?;
        Ok(())
    }

    /// Removes what the real nodes' kube-proxies made once they are stopped: the host's firewall
    /// rules (the first node's), and the other nodes' network namespaces with theirs.
    pub(super) fn remove_real_node_networks(&self) {
        if self.node_files(REAL_NODE_SPACES[0]).kube_proxy_config().exists() {
            let _ = Command::new(self.bin("kube-proxy"))
                .args(["--cleanup"])
                .env("PATH", TOOLS_PATH)
                .output();
        }
        for network in (1..REAL_NODE_SPACES.len() as u8).filter_map(OwnNetwork::of) {
            network.remove();
        }
    }

    /// A kubeconfig as `who` for `space`'s apiserver, at the address the node reaches it by.
    fn node_kubeconfig(&self, space: &str, own_network: bool, who: &ClientIdentity) -> anyhow::Result<String> {
        // In a namespace of its own the host's loopback is out of reach.
        let host = if own_network {
            self.api_host()
        } else {
            std::net::Ipv4Addr::LOCALHOST
        };
        super::kubeconfig::render_at(&self.pki(), who, &[(space.to_string(), self.space(space)?.port)], host)
    }

    /// The host PID of the container `id` (a Pod status's `containerID` without its
    /// `containerd://`) on `space`'s real node.
    pub fn container_pid(&self, space: &str, id: &str) -> anyhow::Result<u32> {
        let id = id.strip_prefix("containerd://").unwrap_or(id);
        let listed = Command::new(CTR)
            .arg("--address")
            .arg(self.node_files(space).socket())
            .args(["--namespace", "k8s.io", "tasks", "list"])
            .output()?;
        anyhow::ensure!(
            listed.status.success(),
            "ctr tasks list: {}",
            String::from_utf8_lossy(&listed.stderr).trim()
        );
        // TASK PID STATUS
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .find_map(|line| {
                let mut fields = line.split_whitespace();
                (fields.next() == Some(id)).then(|| fields.next()?.parse().ok())?
            })
            .with_context(|| format!("no running task {id} on {space}'s real node"))
    }

    /// Stops every Pod container of the real nodes (containerd's shims outlive containerd), so
    /// that stopping the processes leaves nothing running.
    pub(super) fn stop_real_node_pods(&self) {
        for space in REAL_NODE_SPACES {
            let [containerd, ..] = Self::node_processes(space);
            if self.procs.running(&containerd).is_none() {
                continue;
            }
            let socket = self.node_files(space).socket();
            let ctr = |args: &[&str]| {
                Command::new(CTR)
                    .arg("--address")
                    .arg(&socket)
                    .args(["--namespace", "k8s.io"])
                    .args(args)
                    .output()
            };
            let Ok(listed) = ctr(&["tasks", "list", "--quiet"]) else {
                continue;
            };
            for task in String::from_utf8_lossy(&listed.stdout).lines() {
                let _ = ctr(&["tasks", "kill", "--signal", "SIGKILL", task]);
                let _ = ctr(&["tasks", "delete", "--force", task]);
            }
        }
    }

    /// Unmounts what the real nodes left mounted once they are stopped (the kubelet's root
    /// directory, which it mounts onto itself, and the volumes of Pods it did not get to tear
    /// down), deepest first, so that `.stack` can be removed.
    pub(super) fn release_real_node_mounts(&self) {
        let nodes = self.state.join("nodes");
        let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        // The mount point is the fifth field, with spaces and the like octal-escaped.
        let mut points: Vec<&str> = mounts
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|point| Path::new(point).starts_with(&nodes))
            .collect();
        points.sort_by_key(|point| std::cmp::Reverse(point.len()));
        for point in points {
            let _ = Command::new("umount").arg("--lazy").arg(point).status();
        }
    }

    fn write_containerd_config(&self, space: &str, index: u8, files: &NodeFiles, pause: &str) -> anyhow::Result<()> {
        let p = |path: PathBuf| path.display().to_string();
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{image}"
  # Pause containers ask for an OOM score of -998, which this host refuses to set (a score may
  # only be lowered with CAP_SYS_RESOURCE, which the stack's sandbox lacks): no score below
  # containerd's own.
  restrict_oom_score_adj = true
  # Pods' network namespaces are mounted under the state directory (in `.stack`), not in the
  # host's /run/netns, so that those of Pods not torn down before `make down` go with the rest.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{REGISTRY}"]
    endpoint = ["http://{REGISTRY}"]
{ghcr}  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_PLUGINS}"
    conf_dir = "{cni}"
"#,
            root = p(files.dir.join("containerd")),
            state = p(files.dir.join("containerd-state")),
            socket = p(files.socket()),
            image = pause,
            cni = p(files.cni()),
            ghcr = if index > 0 {
                format!(
                    "  [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"ghcr.io\"]\n    endpoint = [\"http://{REGISTRY}\"]\n"
                )
            } else {
                String::new()
            },
        );
        std::fs::write(files.containerd_config(), config)?;
        // One bridge and subnet per node; the bridge's address is the Pods' gateway (their
        // default route), and is how the kubelet's probes reach them.
        let network = json!({
            "cniVersion": "1.0.0",
            "name": format!("ks-{space}"),
            "plugins": [
                {"type": "bridge", "bridge": bridge_name(space), "isGateway": true, "ipMasq": false,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_subnet(index)}]],
                          // Through the bridge to the host: Services, and the stack's apiservers.
                          "routes": [{"dst": "0.0.0.0/0"}],
                          "dataDir": p(files.dir.join("ipam"))}},
                {"type": "loopback"},
            ],
        });
        std::fs::write(
            files.cni().join("10-ks.conflist"),
            serde_json::to_string_pretty(&network)?,
        )?;
        Ok(())
    }

    /// The kubelet's configuration, and its credential: a client certificate as
    /// `system:node:<name>` (group `system:nodes`), bound to the `system:node` ClusterRole (the
    /// stack's apiservers authorise by RBAC alone, without the Node authorizer).
    async fn write_kubelet_files(&self, space: &str, own_network: bool, files: &NodeFiles) -> anyhow::Result<()> {
        let name = node_name(space);
        let user = format!("system:node:{name}");
        let file = format!("node-{space}");
        let who = ClientIdentity {
            file: &file,
            user: &user,
            groups: &["system:nodes"],
        };
        let pki = self.pki();
        pki.ensure_client(&who)?;
        std::fs::write(files.kubeconfig(), self.node_kubeconfig(space, own_network, &who)?)?;
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("ks-stack:{name}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))?;
        Api::<ClusterRoleBinding>::all(self.client(space).await?)
            .patch(
                &binding.metadata.name.clone().unwrap_or_default(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&binding),
            )
            .await?;
        let config = json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "containerRuntimeEndpoint": format!("unix://{}", files.socket().display()),
            "cgroupDriver": "cgroupfs",
            // Pods' cgroups are containerd's, per container: two nodes on one host would share
            // the kubelet's QoS hierarchy.
            "cgroupsPerQOS": false,
            "enforceNodeAllocatable": [],
            "failSwapOn": false,
            "failCgroupV1": false,
            "address": "127.0.0.1",
            "port": self.side_port("kubelet", space),
            "readOnlyPort": 0,
            "healthzPort": 0,
            "authentication": {"anonymous": {"enabled": false}, "webhook": {"enabled": false},
                               "x509": {"clientCAFile": pki.ca_cert().display().to_string()}},
            "authorization": {"mode": "AlwaysAllow"},
            // Beside the WEC's kwok node, only Pods that ask; the others are their space's only node.
            "registerWithTaints": if own_network { json!([]) } else {
                json!([{"key": REAL_NODE_TAINT, "value": "true", "effect": "NoSchedule"}])
            },
            // Nothing can be pulled again: never collect images. The host's disk is shared with
            // everything else, so pressure is only what would stop the node working.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "localStorageCapacityIsolation": false,
            "resolvConf": "",
        });
        std::fs::write(files.kubelet_config(), serde_saphyr::to_string(&config)?)?;
        Ok(())
    }
}

/// Writes `content` to `path` unless it holds that already: kube-proxy watches its files and exits
/// when one is written, which every `up` would otherwise do.
fn write_if_changed(path: &Path, content: &str) -> anyhow::Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == content) {
        return Ok(());
    }
    Ok(std::fs::write(path, content)?)
}

/// The node's bridge: at most 15 characters, as Linux allows.
fn bridge_name(space: &str) -> String {
    let mut name = format!("ks-{space}");
    name.truncate(15);
    name
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_effective_uid_is_the_second_of_the_status_line() {
        let status = "Name:\tks-stack\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n";
        assert_eq!(super::effective_uid(status), Some(0));
        assert_eq!(super::effective_uid("Uid:\t1000\t1000\t1000\t1000\n"), Some(1000));
        assert_eq!(super::effective_uid("Name:\tx\n"), None);
    }

    #[test]
    fn only_the_first_real_node_shares_the_hosts_network() {
        assert!(!super::is_only_node(super::REAL_NODE_SPACES[0]));
        assert!(super::is_only_node("kubeflex"));
        assert!(super::OwnNetwork::of(0).is_none());
        let own = super::OwnNetwork::of(1).expect("a namespace of its own");
        assert_eq!((own.name.as_str(), own.pods.as_str()), ("ks-node-1", "10.89.1.0/24"));
    }
}
