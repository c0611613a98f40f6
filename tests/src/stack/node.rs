//! A real node in a WEC: Debian's containerd (with its CRI plugin and overlayfs) and runc run the
//! Pods that a kubelet, built from the pinned Kubernetes release, is given by the WEC's scheduler.
//! Pods get addresses on a bridge of the node's own (Debian's CNI plugins), which the kubelet's
//! probes reach from the host. It pulls images from the stack's registry ([`super::registry`]),
//! where the stack pushes its test workload image `ks-pod` (`images/build.sh ks-pod`), which is
//! also every Pod's pause container. It is tainted [`REAL_NODE_TAINT`], so that only Pods that ask
//! for it (tolerate the taint and select [`REAL_NODE_LABEL`]) run there, and every other Pod stays
//! on the WEC's kwok node.
//!
//! Its Pods reach the stack's apiservers as Pods reach a cluster's: `kubernetes.default`
//! (10.96.0.1) through a kube-proxy of the node's own (built from the pinned release, iptables
//! mode), whose endpoint is the WEC's apiserver at [`STACK_ADDRESS`], an address of the host's
//! loopback link that every apiserver listens on once the stack has real nodes; the OCM agents join
//! the ITS at that address too, so the credentials they hand on to add-on agents work from Pods.
//!
//! It runs only where containerd, runc, the CNI plugins, iptables and iproute2 are installed
//! (`apt-get install containerd runc containernetworking-plugins iptables iproute2`, which CI
//! does) and the stack may add a link and firewall rules (root); elsewhere the stack says so and
//! goes on without it, and the tests that need it fail saying why.

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

/// The WECs that get a real node.
pub const REAL_NODE_WECS: [&str; 1] = ["cluster1"];
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
/// containerd looks for runc and its shim on `PATH`.
const TOOLS_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The name of the real node of `wec`.
pub fn node_name(wec: &str) -> String {
    format!("{wec}-real")
}

/// What the host lacks to run a real node, if anything.
pub fn missing_tools() -> Option<String> {
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
    ];
    let missing: Vec<&str> = needed.into_iter().filter(|p| !Path::new(p).exists()).collect();
    (!missing.is_empty()).then(|| {
        format!(
            "missing {}: install Debian's containerd, runc, containernetworking-plugins, iptables and iproute2",
            missing.join(", ")
        )
    })
}

/// A real node's files, under `.stack/nodes/<wec>`.
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
    fn node_files(&self, wec: &str) -> NodeFiles {
        NodeFiles {
            dir: self.state.join("nodes").join(wec),
        }
    }

    /// Process names of a WEC's real node.
    fn node_processes(wec: &str) -> [String; 3] {
        [
            format!("node-{wec}-containerd"),
            format!("node-{wec}-kubelet"),
            format!("node-{wec}-kube-proxy"),
        ]
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

    /// Starts the real node of `wec` (containerd, then the kubelet), unless it runs; waits until
    /// its Node is Ready.
    pub(super) async fn start_real_node(&self, wec: &str, index: u8) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        let files = self.node_files(wec);
        let [containerd, kubelet, proxy] = Self::node_processes(wec);
        std::fs::create_dir_all(files.cni())?;
        // Pulled from the stack's registry, as every image the node runs.
        let pause = self.push_image(POD_IMAGE)?;
        self.write_containerd_config(wec, index, &files, &pause)?;
        self.procs.ensure(
            &containerd,
            Path::new(CONTAINERD),
            &["--config".into(), files.containerd_config().display().to_string()],
            &[("PATH", TOOLS_PATH)],
        )?;
        wait_for("containerd's socket", Duration::from_secs(30), || async {
            self.procs.check_alive(&containerd)?;
            Ok(files.socket().exists())
        })
        .await
        .with_context(|| self.procs.tail(&containerd, 20))?;
        self.write_kubelet_files(wec, &files).await?;
        let args = [
            format!("--config={}", files.kubelet_config().display()),
            format!("--kubeconfig={}", files.kubeconfig().display()),
            format!("--hostname-override={}", node_name(wec)),
            format!("--root-dir={}", files.dir.join("kubelet").display()),
            format!("--cert-dir={}", files.dir.join("kubelet-pki").display()),
            format!("--node-labels={REAL_NODE_LABEL}=true"),
        ];
        self.procs
            .ensure(&kubelet, &self.bin("kubelet"), &args, &[("PATH", TOOLS_PATH)])?;
        let nodes: Api<Node> = Api::all(self.client(wec).await?);
        let name = node_name(wec);
        wait_for(&format!("Node {name} Ready"), Duration::from_secs(60), || async {
            self.procs.check_alive(&kubelet)?;
            let node = nodes.get_opt(&name).await.unwrap_or(None);
            Ok(node.is_some_and(|n| is_ready(&n)))
        })
        .await
        .with_context(|| self.procs.tail(&kubelet, 30))?;
        self.write_kube_proxy_files(wec, index, &files)?;
        let args = [format!("--config={}", files.kube_proxy_config().display())];
        self.procs
            .ensure(&proxy, &self.bin("kube-proxy"), &args, &[("PATH", TOOLS_PATH)])?;
        // Synced once the host's rules lead `kubernetes.default` to the WEC's apiserver.
        wait_for(
            "kube-proxy's rules for kubernetes.default",
            Duration::from_secs(60),
            || async {
                self.procs.check_alive(&proxy)?;
                let rules = Command::new(IPTABLES)
                    .args(["-t", "nat", "-S", "KUBE-SERVICES"])
                    .output()?;
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
    fn write_kube_proxy_files(&self, wec: &str, index: u8, files: &NodeFiles) -> anyhow::Result<()> {
        let pki = self.pki();
        let who = ClientIdentity {
            file: "kube-proxy",
            user: "system:kube-proxy",
            groups: &[],
        };
        pki.ensure_client(&who)?;
        let kubeconfig = files.dir.join("kube-proxy.kubeconfig");
        write_if_changed(
            &kubeconfig,
            &super::kubeconfig::render(&pki, &who, &[(wec.to_string(), self.space(wec)?.port)])?,
        )?;
        let config = json!({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": kubeconfig.display().to_string()},
            "hostnameOverride": node_name(wec),
            "mode": "iptables",
            "clusterCIDR": format!("10.89.{index}.0/24"),
            "healthzBindAddress": format!("127.0.0.1:{}", self.side_port("kube-proxy", wec)),
            "metricsBindAddress": format!("127.0.0.1:{}", self.side_port("kube-proxy-metrics", wec)),
            "nodePortAddresses": ["127.0.0.1/32"],
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        });
        write_if_changed(&files.kube_proxy_config(), &serde_saphyr::to_string(&config)?)?;
        Ok(())
    }

    /// Removes the firewall rules the real nodes' kube-proxies made, once they are stopped.
    pub(super) fn remove_real_node_rules(&self) {
        if REAL_NODE_WECS
            .iter()
            .any(|wec| self.node_files(wec).kube_proxy_config().exists())
        {
            let _ = Command::new(self.bin("kube-proxy"))
                .args(["--cleanup"])
                .env("PATH", TOOLS_PATH)
                .output();
        }
    }

    /// The host PID of the container `id` (a Pod status's `containerID` without its
    /// `containerd://`) on `wec`'s real node.
    pub fn container_pid(&self, wec: &str, id: &str) -> anyhow::Result<u32> {
        let id = id.strip_prefix("containerd://").unwrap_or(id);
        let listed = Command::new(CTR)
            .arg("--address")
            .arg(self.node_files(wec).socket())
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
            .with_context(|| format!("no running task {id} on {wec}'s real node"))
    }

    /// Stops every Pod container of the real nodes (containerd's shims outlive containerd), so
    /// that stopping the processes leaves nothing running.
    pub(super) fn stop_real_node_pods(&self) {
        for wec in REAL_NODE_WECS {
            let [containerd, ..] = Self::node_processes(wec);
            if self.procs.running(&containerd).is_none() {
                continue;
            }
            let socket = self.node_files(wec).socket();
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

    fn write_containerd_config(&self, wec: &str, index: u8, files: &NodeFiles, pause: &str) -> anyhow::Result<()> {
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
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{REGISTRY}"]
    endpoint = ["http://{REGISTRY}"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
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
        );
        std::fs::write(files.containerd_config(), config)?;
        // One bridge and subnet per node; the bridge's address is the Pods' gateway (their
        // default route), and is how the kubelet's probes reach them.
        let network = json!({
            "cniVersion": "1.0.0",
            "name": format!("ks-{wec}"),
            "plugins": [
                {"type": "bridge", "bridge": bridge_name(wec), "isGateway": true, "ipMasq": false,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": format!("10.89.{index}.0/24")}]],
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
    async fn write_kubelet_files(&self, wec: &str, files: &NodeFiles) -> anyhow::Result<()> {
        let name = node_name(wec);
        let user = format!("system:node:{name}");
        let file = format!("node-{wec}");
        let who = ClientIdentity {
            file: &file,
            user: &user,
            groups: &["system:nodes"],
        };
        let pki = self.pki();
        pki.ensure_client(&who)?;
        std::fs::write(
            files.kubeconfig(),
            super::kubeconfig::render(&pki, &who, &[(wec.to_string(), self.space(wec)?.port)])?,
        )?;
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("ks-stack:{name}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))?;
        Api::<ClusterRoleBinding>::all(self.client(wec).await?)
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
            "port": self.side_port("kubelet", wec),
            "readOnlyPort": 0,
            "healthzPort": 0,
            "authentication": {"anonymous": {"enabled": false}, "webhook": {"enabled": false},
                               "x509": {"clientCAFile": pki.ca_cert().display().to_string()}},
            "authorization": {"mode": "AlwaysAllow"},
            "registerWithTaints": [{"key": REAL_NODE_TAINT, "value": "true", "effect": "NoSchedule"}],
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
fn bridge_name(wec: &str) -> String {
    let mut name = format!("ks-{wec}");
    name.truncate(15);
    name
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
