//! The stack plays kubelet for our own images, for speed, where no real node ([`super::node`])
//! runs them (or where the host cannot run real nodes): when a Deployment whose container runs
//! one of our images (`ks-agent`, `ks-addon`, `ks-hub`) appears in a space (a WEC, the ITS, or
//! the KubeFlex hosting cluster) and the Secrets it mounts exist, the stack runs that binary as a
//! local process with the Deployment's arguments, the Secrets' files and the space as its
//! in-cluster API, acting as the Pod's ServiceAccount; it stops the process when the Deployment
//! goes away or is scaled to zero, and restarts it when its arguments change or when it exits.
//! Like a kubelet, it updates a changed Secret's files in place without restarting anything (a
//! process that must see new credentials watches its files, as the agent does), and keeps a
//! running process's files when its Secret goes away. A Deployment that places its Pods on a real
//! node is left to that node's kubelet, and its process stopped. One such kubelet runs per WEC,
//! one on the ITS, and one on the hosting cluster where it has no real node (whose kubelet then
//! runs everything there).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Secret};
use ks_shared::runtime::watch_into_inputs;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Stack;

/// Process names of local Pods start with this.
pub const POD_PREFIX: &str = "pod-";

/// The process name standing in for the Pod of a Deployment on a WEC.
pub fn pod_process(space: &str, namespace: &str, deployment: &str) -> String {
    format!("{POD_PREFIX}{space}-{namespace}-{deployment}")
}

/// Our binaries that the stack may run for a Deployment.
const OUR_IMAGES: [&str; 3] = ["ks-agent", "ks-addon", "ks-hub"];

/// How often exited pods are looked for.
const RESTART_CHECK: Duration = Duration::from_secs(1);

/// A local process standing in for one Deployment's Pod.
#[derive(Debug, PartialEq)]
struct LocalPod {
    /// Process name in `.stack/pids`: `pod-<space>-<namespace>-<deployment>`.
    name: String,
    binary: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Its namespace and ServiceAccount: whom it acts as towards the space's API.
    namespace: String,
    service_account: String,
    /// Secret files to write: path → content.
    files: BTreeMap<PathBuf, Vec<u8>>,
}

impl LocalPod {
    /// Whether `other` is the same container: a kubelet restarts it for a changed spec, not for
    /// a changed Secret.
    fn same_container(&self, other: &LocalPod) -> bool {
        (&self.binary, &self.args, &self.env, &self.service_account)
            == (&other.binary, &other.args, &other.env, &other.service_account)
    }

    /// The space's admin kubeconfig at `admin`, acting as the pod's ServiceAccount (kubeconfig's
    /// `as`), so that the pod has exactly the rights RBAC gives its ServiceAccount, as with the
    /// token a kubelet mounts.
    fn in_cluster_kubeconfig(&self, admin: &Path) -> anyhow::Result<String> {
        let mut kubeconfig = kube::config::Kubeconfig::read_from(admin)?;
        let groups = [
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{}", self.namespace),
            "system:authenticated",
        ];
        for named in &mut kubeconfig.auth_infos {
            if let Some(auth) = &mut named.auth_info {
                auth.impersonate = Some(format!(
                    "system:serviceaccount:{}:{}",
                    self.namespace, self.service_account
                ));
                auth.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
            }
        }
        Ok(serde_json::to_string(&kubeconfig)?)
    }

    /// Writes the Secret files, each replaced at once (a kubelet swaps a symlink), and removes
    /// those of `before` that are gone.
    fn write_files(&self, before: Option<&LocalPod>) -> anyhow::Result<()> {
        for (path, content) in &self.files {
            let dir = path.parent().context("file path")?;
            std::fs::create_dir_all(dir)?;
            let partial = dir.join(".writing");
            std::fs::write(&partial, content)?;
            std::fs::rename(&partial, path)?;
        }
        for gone in before
            .iter()
            .flat_map(|b| b.files.keys())
            .filter(|p| !self.files.contains_key(*p))
        {
            let _ = std::fs::remove_file(gone);
        }
        Ok(())
    }
}

/// The image's binary name, if it is one of ours: `registry/ks-agent:tag` → `ks-agent`.
fn our_binary(image: &str) -> Option<&'static str> {
    let last = image.rsplit('/').next()?;
    let name = last.split([':', '@']).next()?;
    OUR_IMAGES.into_iter().find(|ours| *ours == name)
}

/// What to run for a Deployment, or `None` when it should not run (not ours, scaled to zero,
/// or a mounted Secret is missing). `pod_dir` is where its files go.
/// Whether the Deployment places its Pods on a real node, whose kubelet runs them.
fn on_real_node(deployment: &Deployment) -> bool {
    let pod = deployment.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    pod.and_then(|p| p.node_selector.as_ref())
        .is_some_and(|s| s.contains_key(super::node::REAL_NODE_LABEL))
}

fn local_pod(
    space: &str,
    deployment: &Deployment,
    secrets: &BTreeMap<String, Secret>,
    pod_dir: &Path,
) -> Option<LocalPod> {
    let spec = deployment.spec.as_ref()?;
    if spec.replicas == Some(0) {
        return None;
    }
    let pod = spec.template.spec.as_ref()?;
    let container: &Container = pod.containers.first()?;
    let binary = our_binary(container.image.as_deref()?)?;
    let volumes = pod.volumes.iter().flatten();
    let secret_of = |volume: &str| {
        volumes
            .clone()
            .find(|v| v.name == volume)
            .and_then(|v| v.secret.as_ref())
            .and_then(|s| s.secret_name.clone())
    };
    let mut files = BTreeMap::new();
    let mut mounts = Vec::new();
    for mount in container.volume_mounts.iter().flatten() {
        let Some(secret_name) = secret_of(&mount.name) else {
            continue;
        };
        let secret = secrets.get(&secret_name)?;
        let local = pod_dir.join(mount.mount_path.trim_start_matches('/'));
        for (key, value) in secret.data.iter().flatten() {
            files.insert(local.join(key), value.0.clone());
        }
        mounts.push((mount.mount_path.clone(), local.display().to_string()));
    }
    // Paths inside the Pod become paths under the pod directory; and the Pod's own network,
    // where it listens on every address, is loopback here (all local pods share one host).
    let localise = |arg: &str| {
        mounts
            .iter()
            .fold(arg.to_string(), |arg, (inside, outside)| {
                arg.replace(inside.as_str(), outside)
            })
            .replace("=0.0.0.0:", "=127.0.0.1:")
    };
    let args = container
        .command
        .iter()
        .flatten()
        .skip(1)
        .chain(container.args.iter().flatten())
        .map(|a| localise(a))
        .collect();
    let env = container
        .env
        .iter()
        .flatten()
        .filter_map(|e| Some((e.name.clone(), localise(e.value.as_deref()?))))
        .collect();
    Some(LocalPod {
        name: pod_process(
            space,
            &deployment.namespace().unwrap_or_default(),
            &deployment.name_any(),
        ),
        binary: binary.to_string(),
        args,
        env,
        namespace: deployment.namespace().unwrap_or_default(),
        service_account: pod
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".to_string()),
        files,
    })
}

/// A pod this kubelet started, and when it may be restarted if it exits.
struct Started {
    pod: LocalPod,
    restarts: u32,
    at: Instant,
    next_restart: Instant,
}

/// A pod that ran this long before it exited starts its backoff afresh, as with a kubelet.
const BACKOFF_RESET: Duration = Duration::from_secs(600);

/// How long to wait before restarting a pod that exited `restarts` times, doubling up to a
/// minute, as a kubelet's CrashLoopBackOff does (a pod that cannot start does not spin).
fn crash_loop_backoff(restarts: u32) -> Duration {
    Duration::from_secs(1u64 << restarts.min(6)).min(Duration::from_secs(60))
}

/// Runs the kubelet loop for one space until the process is stopped.
pub async fn run(stack: &Stack, space: &str, binaries: &Path) -> anyhow::Result<()> {
    let client = stack.client(space).await?;
    let deployments: Api<Deployment> = Api::all(client.clone());
    // Cached, never listed per change: a WEC receiving thousands of Deployments (the bulk bench)
    // would be listed whole on each of their events, costing its apiserver the square of them.
    let (inputs, mut changed) = mpsc::unbounded_channel();
    let never = CancellationToken::new();
    let config = watcher::Config::default();
    let cached = Caches {
        deployments: watch_into_inputs(
            deployments.clone(),
            config.clone(),
            &never,
            &inputs,
            |_| Some(()),
            || (),
        ),
        secrets: watch_into_inputs(Api::all(client), config, &never, &inputs, |_| Some(()), || ()),
    };
    cached.deployments.wait_until_ready().await?;
    cached.secrets.wait_until_ready().await?;
    let mut running: BTreeMap<String, Started> = BTreeMap::new();
    // Like a kubelet with restartPolicy Always, restart pods that exited (e.g. an agent that
    // lost its leader Lease); their processes are not our children, so only a look tells.
    let mut restarts = tokio::time::interval(RESTART_CHECK);
    loop {
        tokio::select! {
            change = changed.recv() => if change.is_none() {
                return Ok(());
            },
            _ = restarts.tick() => {
                if running.keys().all(|name| stack.procs.running(name).is_some()) {
                    continue;
                }
            }
        }
        // The changes so far are one sync.
        while changed.try_recv().is_ok() {}
        if let Err(err) = sync(stack, space, &deployments, &cached, binaries, &mut running).await {
            eprintln!("{space}: {err:#}");
        }
    }
}

/// What the kubelet runs from: the space's Deployments and Secrets.
struct Caches {
    deployments: Store<Deployment>,
    secrets: Store<Secret>,
}

async fn sync(
    stack: &Stack,
    space: &str,
    deployments: &Api<Deployment>,
    cached: &Caches,
    binaries: &Path,
    running: &mut BTreeMap<String, Started>,
) -> anyhow::Result<()> {
    let mut by_namespace: BTreeMap<String, BTreeMap<String, Secret>> = BTreeMap::new();
    for secret in cached.secrets.state() {
        by_namespace
            .entry(secret.namespace().unwrap_or_default())
            .or_default()
            .insert(secret.name_any(), (*secret).clone());
    }
    let none = BTreeMap::new();
    let pods_dir = stack.state.join("pods");
    let mut wanted = BTreeSet::new();
    let listed = cached.deployments.state();
    for deployment in &listed {
        let namespace = deployment.namespace().unwrap_or_default();
        let dir = pods_dir.join(space).join(&namespace).join(deployment.name_any());
        let name = pod_process(space, &namespace, &deployment.name_any());
        if on_real_node(deployment) {
            continue;
        }
        let Some(pod) = local_pod(space, deployment, by_namespace.get(&namespace).unwrap_or(&none), &dir) else {
            // A running container keeps its files when a Secret it mounts goes away.
            let scaled_down = deployment.spec.as_ref().and_then(|s| s.replicas) == Some(0);
            if running.contains_key(&name) && !scaled_down {
                wanted.insert(name);
            }
            continue;
        };
        wanted.insert(pod.name.clone());
        let restarts = match running.get_mut(&pod.name) {
            Some(started) if started.pod.same_container(&pod) => {
                if started.pod.files != pod.files {
                    pod.write_files(Some(&started.pod))?;
                    eprintln!("{space}: updated the Secret files of {}", pod.name);
                    started.pod.files = pod.files.clone();
                }
                if stack.procs.running(&started.pod.name).is_some() || Instant::now() < started.next_restart {
                    continue;
                }
                if started.at.elapsed() > BACKOFF_RESET {
                    0
                } else {
                    started.restarts + 1
                }
            }
            _ => 0,
        };
        stack.procs.stop(&pod.name, Duration::from_secs(10))?;
        pod.write_files(running.get(&pod.name).map(|s| &s.pod))?;
        let kubeconfig = dir.join("in-cluster.kubeconfig");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(&kubeconfig, pod.in_cluster_kubeconfig(&stack.space_kubeconfig(space))?)?;
        let kubeconfig = kubeconfig.display().to_string();
        // All local pods share one host: a free port for their endpoint unless the pod says otherwise;
        // and, like every process of the stack, they export traces to the stack's Jaeger.
        let otlp = format!("http://127.0.0.1:{}", super::JAEGER_OTLP_GRPC);
        let mut env: Vec<(&str, &str)> = vec![
            ("KS_HTTP_ADDRESS", "127.0.0.1:0"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp),
        ];
        env.extend(pod.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        env.push(("KUBECONFIG", &kubeconfig));
        stack
            .procs
            .ensure(&pod.name, &binaries.join(&pod.binary), &pod.args, &env)?;
        eprintln!("{space}: started {} ({}), restart {restarts}", pod.name, pod.binary);
        let at = Instant::now();
        running.insert(
            pod.name.clone(),
            Started {
                pod,
                restarts,
                at,
                next_restart: at + crash_loop_backoff(restarts),
            },
        );
    }
    if reports_status(stack, space) {
        for deployment in &listed {
            let name = pod_process(
                space,
                &deployment.namespace().unwrap_or_default(),
                &deployment.name_any(),
            );
            report_ready(deployments, deployment, stack.procs.running(&name).is_some()).await?;
        }
    }
    let gone: Vec<String> = running.keys().filter(|n| !wanted.contains(*n)).cloned().collect();
    for name in gone {
        stack.procs.stop(&name, Duration::from_secs(10))?;
        running.remove(&name);
        eprintln!("{space}: stopped {name}");
    }
    Ok(())
}

/// Whether this kubelet reports its Deployments' status: where no deployment controller runs (the
/// hosting cluster), as a deployment controller would from the Pod's readiness. KubeFlex waits for
/// a hook's Deployment to be ready.
fn reports_status(stack: &Stack, space: &str) -> bool {
    stack
        .spaces()
        .iter()
        .any(|s| s.name == space && s.role == super::Role::Hosting)
}

/// Sets a Deployment's replica counts to one running pod, or none, if they say otherwise.
async fn report_ready(all: &Api<Deployment>, deployment: &Deployment, running: bool) -> anyhow::Result<()> {
    let ready = i32::from(running);
    let status = deployment.status.clone().unwrap_or_default();
    let observed = deployment.metadata.generation;
    if status.ready_replicas.unwrap_or(0) == ready && status.observed_generation == observed {
        return Ok(());
    }
    let api: Api<Deployment> = Api::namespaced(all.clone().into_client(), &deployment.namespace().unwrap_or_default());
    let patch = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "status": {
        "observedGeneration": observed, "replicas": ready, "updatedReplicas": ready,
        "readyReplicas": ready, "availableReplicas": ready}});
    api.patch_status(
        &deployment.name_any(),
        &kube::api::PatchParams::apply("ks-stack-kubelet").force(),
        &kube::api::Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

impl Stack {
    /// The stand-in kubelet that runs our images' Deployments on a WEC as local processes.
    pub(super) fn start_kubelet(&self, space: &str) -> anyhow::Result<()> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_loop_backoff_doubles_up_to_a_minute() {
        let waits: Vec<u64> = (0..9).map(|n| crash_loop_backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn recognises_our_images_only() {
        assert_eq!(our_binary("ghcr.io/example/ks-agent:0.1.0"), Some("ks-agent"));
        assert_eq!(our_binary("ks-agent"), Some("ks-agent"));
        assert_eq!(our_binary("registry:5000/ks-addon@sha256:abc"), Some("ks-addon"));
        assert_eq!(our_binary("nginx:1.27"), None);
        assert_eq!(our_binary("example/ks-agent-extra:1"), None);
    }

    fn deployment(replicas: i32) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "status-agent", "namespace": "addon-ns"},
            "spec": {
                "replicas": replicas,
                "selector": {},
                "template": {"spec": {
                    "containers": [{
                        "name": "agent", "image": "example/ks-agent:dev",
                        "args": ["--hub-kubeconfig=/managed/hub/kubeconfig", "--cluster-name=cluster1",
                                 "--http-address=0.0.0.0:9280"],
                        "env": [{"name": "CREDS", "value": "/managed/hub"}],
                        "volumeMounts": [{"name": "hub", "mountPath": "/managed/hub"}]
                    }],
                    "volumes": [{"name": "hub", "secret": {"secretName": "addon-status-hub-kubeconfig"}}]
                }}
            }
        }))
        .unwrap()
    }

    fn secrets() -> BTreeMap<String, Secret> {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "addon-status-hub-kubeconfig"},
            "data": {"kubeconfig": "a3ViZWNvbmZpZw=="}
        }))
        .unwrap();
        BTreeMap::from([("addon-status-hub-kubeconfig".to_string(), secret)])
    }

    #[test]
    fn runs_our_deployment_with_localised_mounts_and_network() {
        let pod = local_pod("cluster1", &deployment(1), &secrets(), Path::new("/tmp/pods/x")).unwrap();
        assert_eq!(pod.name, "pod-cluster1-addon-ns-status-agent");
        assert_eq!(pod.binary, "ks-agent");
        assert_eq!(
            pod.args,
            [
                "--hub-kubeconfig=/tmp/pods/x/managed/hub/kubeconfig",
                "--cluster-name=cluster1",
                "--http-address=127.0.0.1:9280"
            ]
        );
        assert_eq!(pod.env, [("CREDS".to_string(), "/tmp/pods/x/managed/hub".to_string())]);
        assert_eq!(
            pod.files[Path::new("/tmp/pods/x/managed/hub/kubeconfig")],
            b"kubeconfig"
        );
    }

    #[test]
    fn leaves_a_pod_placed_on_a_real_node_to_its_kubelet() {
        let mut placed = deployment(1);
        assert!(!on_real_node(&placed));
        let pod = placed.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        pod.node_selector = Some(BTreeMap::from([(
            super::super::node::REAL_NODE_LABEL.into(),
            "true".into(),
        )]));
        assert!(on_real_node(&placed));
    }

    #[test]
    fn waits_for_the_secret_and_stops_at_zero_replicas() {
        assert!(local_pod("cluster1", &deployment(1), &BTreeMap::new(), Path::new("/p")).is_none());
        assert!(local_pod("cluster1", &deployment(0), &secrets(), Path::new("/p")).is_none());
    }
}
